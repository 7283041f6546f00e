//! Helm release records: recognising them, decoding their payloads, and classifying a release's
//! history. Pure: no I/O here.

pub mod codec;
pub(crate) mod fields;
pub mod gojson;
pub mod history;
pub mod memo;
pub mod objects;
pub mod payload;
pub mod record;
pub mod repair;
pub mod status;
pub mod summary;

pub use codec::{DecodeError, DecodeLimits, ReleasePayload};
pub use history::{Anomaly, Classification, History, PayloadStatus, ReleaseState, RevisionFacts, classify};
pub use record::{DecodedRecord, Driver, Record, RecordId, ReleaseKey};
pub use status::Status;
pub use summary::Summary;
pub mod scan;
