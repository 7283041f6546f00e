//! The guard's view of the cluster: the [`index::ReleaseIndex`] every verdict reads, and the
//! sources that fill it ([`snapshot`] from a dump file).

pub mod index;
pub mod snapshot;

pub use index::{IndexChange, NamespaceInfo, ReleaseIndex, SourceKind};
