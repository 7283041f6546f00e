//! Helm's storage format, read exactly as Helm reads it: the layers of a record's payload
//! ([`codec`]: the API's base64, Helm's base64, gzip), the JSON in it with Go's `encoding/json`
//! semantics ([`gojson`]), Go's base64 (`go_base64`), Helm's release type walked with that reader ([`helm_release`]), the
//! record fields of dumps and reviews (`fields`), and readings remembered by their bytes
//! ([`memo`]). Nothing here knows what a release's history means: that is [`super::history`].

pub mod codec;
pub(crate) mod fields;
/// A payload past this many bytes (base64, as a review or the API server carries it) is read on
/// the blocking pool, not on the runtime: reading one costs about 1 ms per 100 KiB, which would
/// hold up every other request that worker serves. Helm's records are mostly a few KiB to tens
/// of KiB.
pub(crate) const LARGE_PAYLOAD_BYTES: usize = 256 * 1024;

pub(crate) mod go_base64;
pub(crate) mod gojson;
pub(crate) use gojson::JsonError;
pub(crate) mod helm_release;
pub(crate) mod memo;

/// Where a payload was stored: a Secret's `data` wraps Helm's base64 in the API's base64 once
/// more; a ConfigMap's `data` holds Helm's text as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    /// `data.release` of a Secret.
    Secret,
    /// `data.release` of a ConfigMap.
    ConfigMap,
}

/// Whether a reading takes the content fingerprint (a SHA-256 over what Helm never changes in
/// an update, which only the UPDATE rules need), or skips it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fingerprinting {
    /// Take it.
    Take,
    /// Skip it (cheaper).
    Skip,
}

/// Real charts decode to several MiB (6.5 MB has been reported); 32 MiB leaves room.
pub(crate) const DEFAULT_MAX_DECODED_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Bounds on reading a payload: a gzip bomb stops at `max_decoded_bytes`.
pub struct DecodeLimits {
    /// Largest decompressed payload accepted, in bytes.
    pub max_decoded_bytes: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits { max_decoded_bytes: DEFAULT_MAX_DECODED_BYTES }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
/// Why a payload cannot be read as Helm reads it.
pub enum DecodeError {
    #[error("the record has no `data.release` payload")]
    /// The object has no `data.release`.
    MissingPayload,
    #[error("`data.release` is not valid base64 as the API server stores Secret data: {0}")]
    /// A Secret's `data.release` is not the API server's base64.
    ApiBase64(#[source] base64::DecodeError),
    #[error("the payload is not valid base64 as Helm reads it: {0}")]
    /// The payload is not the base64 Helm writes.
    HelmBase64(#[source] base64::DecodeError),
    #[error("the payload is not valid gzip: {0}")]
    /// The payload is not gzip (Helm gzips every payload it writes).
    Gzip(#[source] std::sync::Arc<std::io::Error>),
    #[error("the payload decodes to more than {limit} bytes (limit --max-decoded-bytes); refusing it")]
    /// The payload inflates past the limit: a gzip bomb, or a release larger than allowed.
    TooLarge {
        /// `--max-decoded-bytes`.
        limit: usize,
    },
    #[error("the payload is not a Helm release in JSON: {0}")]
    /// The decoded payload is not JSON Go would decode.
    Json(JsonError),
    #[error("Helm cannot read this release: {0}")]
    /// The JSON is not a release Helm can read (its own decoding would fail).
    Helm(String),
    #[error("Helm 3 and Helm 4 read this release differently, so helm-guard counts it as unreadable: {0}")]
    /// Helm 3 and Helm 4 would read the release differently.
    HelmDisagree(String),
}
