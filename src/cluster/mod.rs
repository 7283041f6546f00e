//! The guard's view of the cluster: the [`index::ReleaseIndex`] every verdict reads, and the
//! sources that fill it: [`snapshot`] from a dump file, [`live`] from kube-rs watchers (through
//! [`feed`], which turns watcher events into index updates).

pub mod coordination;
pub mod events;
pub mod feed;
pub mod helmcharts;
pub mod index;
pub mod live;
pub mod snapshot;

pub use coordination::DeleteCoordinator;
pub use index::{IndexChange, IndexedRecord, NamespaceInfo, ReleaseIndex, SourceKind};

use std::time::Instant;

use crate::release::ReleaseKey;
use crate::release::history::RevisionFacts;

/// One record as a GET read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    /// The uid of the object read (a name can be reused by a new object).
    pub uid: Option<String>,
    /// The resourceVersion the record was read at.
    pub resource_version: Option<String>,
    /// What it says, as Helm reads it.
    pub facts: RevisionFacts,
}

/// What reading one record's payload found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The payload as Helm reads it.
    Read(ReadRecord),
    /// No record of the release has that name any more (its deletion not yet seen by the watch).
    Gone,
}

/// Reads the payloads of records the index knows only by their metadata, when a verdict needs
/// what Helm sees. Called from a blocking thread; every read shares one deadline. A record left
/// out of the answer could not be read in time.
pub trait PayloadFetcher: Send + Sync + std::fmt::Debug {
    /// Reads `objects` of the release `key`, giving up at `deadline`.
    fn fetch(&self, key: &ReleaseKey, objects: &[String], deadline: Instant) -> Vec<(String, Fetched)>;

    /// Lists the release's records as they are stored now (metadata only, a consistent read),
    /// for a verdict that must not rest on a watch that may lag; `None` when the API did not
    /// answer by `deadline`.
    fn list(&self, key: &ReleaseKey, deadline: Instant) -> Option<Vec<IndexedRecord>>;
}
