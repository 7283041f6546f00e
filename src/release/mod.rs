//! Helm release records: recognising them, decoding their payloads, and classifying a release's
//! history. Pure: no I/O here.

pub mod decode;
pub(crate) mod forget;
pub mod history;
pub mod objects;
pub mod prune;
pub mod record;
pub mod repair;
pub(crate) mod status;
pub(crate) mod summary;
pub mod writer;

pub(crate) use decode::helm_release::ReleasePayload;
pub use decode::{DecodeError, DecodeLimits};
pub use history::{Anomaly, Classification, History, PayloadStatus, ReleaseState, RevisionFacts, classify};
pub use record::{DecodedRecord, Driver, Record, RecordId, ReleaseKey};
pub use status::Status;
pub use summary::Summary;
pub mod scan;

/// What `helm install` answers over a release whose name is still in use (the K3s/RKE2 crash
/// loop of PROBLEM.md): Helm 3's words, then Helm 4's (`pkg/action/install.go`). Whatever quotes
/// or looks for the message knows both.
pub(crate) const NAME_IN_USE: [&str; 2] =
    ["cannot re-use a name that is still in use", "cannot reuse a name that is still in use"];
