//! The guard's view of the cluster: the [`index::ReleaseIndex`] every verdict reads, and the
//! sources that fill it: [`snapshot`] from a dump file, [`live`] from kube-rs watchers (through
//! [`feed`], which turns watcher events into index updates).

pub mod feed;
pub mod index;
pub mod live;
pub mod snapshot;

pub use index::{IndexChange, NamespaceInfo, ReleaseIndex, SourceKind};

use crate::release::RecordId;
use crate::release::history::RevisionFacts;

/// Fetches one record's payload when a verdict needs a status the index does not hold. Called
/// from a blocking thread.
pub trait PayloadFetcher: Send + Sync + std::fmt::Debug {
    fn fetch(&self, id: &RecordId) -> Option<RevisionFacts>;
}
