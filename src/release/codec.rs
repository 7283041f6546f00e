//! Helm's payload codec: base64, then gzip when the magic bytes are there, then JSON.
//!
//! Decompression is bounded by [`DecodeLimits::max_decoded_bytes`] so a gzip bomb costs at most
//! that much memory and ends in [`DecodeError::TooLarge`].

use std::io::Read;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::read::GzDecoder;
use serde::{Deserialize, Serialize};

use super::status::Status;

/// Real charts decode to several MiB (6.5 MB has been reported); 32 MiB leaves room.
pub const DEFAULT_MAX_DECODED_BYTES: usize = 32 * 1024 * 1024;

const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest decompressed payload accepted, in bytes.
    pub max_decoded_bytes: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits { max_decoded_bytes: DEFAULT_MAX_DECODED_BYTES }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("the record has no `data.release` payload")]
    MissingPayload,
    #[error("`data.release` is not valid base64 as the API server stores Secret data: {0}")]
    ApiBase64(base64::DecodeError),
    #[error("the payload is not valid base64 as Helm writes it: {0}")]
    HelmBase64(base64::DecodeError),
    #[error("the payload is not valid gzip: {0}")]
    Gzip(std::io::Error),
    #[error("the payload decodes to more than {limit} bytes (limit --max-decoded-bytes); refusing it")]
    TooLarge { limit: usize },
    #[error("the payload is not a Helm release in JSON: {0}")]
    Json(serde_json::Error),
}

/// Decodes Helm's base64 text (the ConfigMap value, or a Secret value after the API's own base64)
/// into the release JSON bytes.
pub fn decode_helm_payload(helm_base64: &[u8], limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    // base64 only shrinks its input; gzip is the one stage that can expand, so it gets the bound.
    let compressed = STANDARD.decode(helm_base64).map_err(DecodeError::HelmBase64)?;
    if !compressed.starts_with(&GZIP_MAGIC) {
        if compressed.len() > limits.max_decoded_bytes {
            return Err(DecodeError::TooLarge { limit: limits.max_decoded_bytes });
        }
        return Ok(compressed);
    }
    let cap = limits.max_decoded_bytes as u64;
    let mut decoded = Vec::with_capacity(compressed.len().saturating_mul(4).min(limits.max_decoded_bytes));
    GzDecoder::new(compressed.as_slice())
        .take(cap + 1)
        .read_to_end(&mut decoded)
        .map_err(DecodeError::Gzip)?;
    if decoded.len() as u64 > cap {
        return Err(DecodeError::TooLarge { limit: limits.max_decoded_bytes });
    }
    Ok(decoded)
}

/// Decodes a Secret's `data.release` as the API returns it (base64 of Helm's base64).
pub fn decode_secret_payload(api_base64: &[u8], limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    let helm_base64 = STANDARD.decode(api_base64).map_err(DecodeError::ApiBase64)?;
    decode_helm_payload(&helm_base64, limits)
}

/// Encodes release JSON the way Helm stores it in a ConfigMap (gzip, then base64). Secrets get one
/// more base64 from the API; [`encode_secret_payload`] adds it.
pub fn encode_helm_payload(release_json: &[u8]) -> Vec<u8> {
    use flate2::{Compression, write::GzEncoder};
    use std::io::Write;
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(release_json);
    let compressed = encoder.finish().unwrap_or_default();
    STANDARD.encode(compressed).into_bytes()
}

pub fn encode_secret_payload(release_json: &[u8]) -> Vec<u8> {
    STANDARD.encode(encode_helm_payload(release_json)).into_bytes()
}

/// The parts of Helm's release JSON that helm-guard reads. Chart templates and files are skipped
/// by serde rather than held in memory.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ReleasePayload {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    pub version: u32,
    pub info: ReleaseInfo,
    #[serde(default)]
    pub chart: Option<ChartInfo>,
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    #[serde(default)]
    pub manifest: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ReleaseInfo {
    pub status: Status,
    #[serde(default)]
    pub first_deployed: Option<String>,
    #[serde(default)]
    pub last_deployed: Option<String>,
    #[serde(default)]
    pub deleted: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ChartInfo {
    #[serde(default)]
    pub metadata: Option<ChartMetadata>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct ChartMetadata {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default, rename = "appVersion")]
    pub app_version: Option<String>,
}

impl ReleasePayload {
    pub fn from_json(json: &[u8]) -> Result<Self, DecodeError> {
        serde_json::from_slice(json).map_err(DecodeError::Json)
    }

    pub fn chart_metadata(&self) -> Option<&ChartMetadata> {
        self.chart.as_ref().and_then(|chart| chart.metadata.as_ref())
    }

    /// `last_deployed` as Unix seconds; Helm 4 omits zero times and Helm 3 writes year 1.
    pub fn last_deployed_unix(&self) -> Option<i64> {
        parse_helm_time(self.info.last_deployed.as_deref()?)
    }
}

/// Parses a Helm timestamp (RFC 3339); the zero time Helm 3 writes counts as absent.
pub fn parse_helm_time(text: &str) -> Option<i64> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    (ts.as_second() > 0).then_some(ts.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bomb(uncompressed: usize) -> Vec<u8> {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        let chunk = vec![b' '; 1024 * 1024];
        for _ in 0..uncompressed / chunk.len() {
            encoder.write_all(&chunk).unwrap();
        }
        STANDARD.encode(encoder.finish().unwrap()).into_bytes()
    }

    #[test]
    fn a_gzip_bomb_is_refused_at_the_limit() {
        let payload = bomb(64 * 1024 * 1024);
        assert!(payload.len() < 200 * 1024, "the bomb itself is small");
        let limits = DecodeLimits { max_decoded_bytes: 4 * 1024 * 1024 };
        let error = decode_helm_payload(&payload, limits).unwrap_err();
        assert!(matches!(error, DecodeError::TooLarge { limit } if limit == 4 * 1024 * 1024));
        assert!(error.to_string().contains("more than 4194304 bytes"));
    }

    #[test]
    fn the_default_limit_refuses_a_64_mib_bomb() {
        let error = decode_helm_payload(&bomb(64 * 1024 * 1024), DecodeLimits::default()).unwrap_err();
        assert!(matches!(error, DecodeError::TooLarge { .. }));
    }

    #[test]
    fn uncompressed_payloads_of_old_helm_versions_decode() {
        let json = br#"{"name":"old","version":1,"info":{"status":"deployed"}}"#;
        let helm_base64 = STANDARD.encode(json);
        let decoded = decode_helm_payload(helm_base64.as_bytes(), DecodeLimits::default()).unwrap();
        let release = ReleasePayload::from_json(&decoded).unwrap();
        assert_eq!((release.name.as_str(), release.version), ("old", 1));
        assert_eq!(release.info.status, Status::Deployed);
    }

    #[test]
    fn encode_then_decode_is_the_identity() {
        let json = br#"{"name":"x","version":7,"info":{"status":"failed"}}"#;
        let decoded = decode_secret_payload(&encode_secret_payload(json), DecodeLimits::default()).unwrap();
        assert_eq!(decoded, json);
    }

    #[test]
    fn each_layer_names_its_own_failure() {
        let limits = DecodeLimits::default();
        assert!(matches!(decode_secret_payload(b"%%%", limits), Err(DecodeError::ApiBase64(_))));
        assert!(matches!(decode_helm_payload(b"%%%", limits), Err(DecodeError::HelmBase64(_))));
        let truncated_gzip = STANDARD.encode([0x1f, 0x8b, 0x08, 0, 0]);
        assert!(matches!(decode_helm_payload(truncated_gzip.as_bytes(), limits), Err(DecodeError::Gzip(_))));
        assert!(matches!(ReleasePayload::from_json(b"{}"), Err(DecodeError::Json(_))));
    }

    #[test]
    fn helm_zero_time_counts_as_absent() {
        assert_eq!(parse_helm_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_helm_time("2026-11-29T16:04:02.491141154Z"), Some(1_795_968_242));
    }
}
