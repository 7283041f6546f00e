//! Helm release records: recognising them, decoding their payloads, and classifying a release's
//! history. Pure: no I/O here.

pub mod decode;
pub mod history;
pub mod objects;
pub mod record;
pub mod repair;
pub mod status;
pub mod summary;

pub use decode::helm_release::ReleasePayload;
pub use decode::{DecodeError, DecodeLimits};
pub use history::{Anomaly, Classification, History, PayloadStatus, ReleaseState, RevisionFacts, classify};
pub use record::{DecodedRecord, Driver, Record, RecordId, ReleaseKey};
pub use status::Status;
pub use summary::Summary;
pub mod scan;
