//! Helm's payload codec: base64, then gzip when the magic bytes are there, then JSON — read as a
//! stream, layer by layer, exactly as Helm's `decodeRelease` reads it (Go's `base64.StdEncoding`,
//! which skips line breaks; `gzip.NewReader`, which reads every concatenated member;
//! `encoding/json`, see [`super::gojson`]).
//!
//! Nothing is held whole: memory for one record is a few fixed buffers whatever the payload
//! holds. [`DecodeLimits::max_decoded_bytes`] bounds the JSON text read (CPU), so a gzip bomb
//! ends in [`DecodeError::TooLarge`].

use std::io::{self, Read};

use base64::Engine as _;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::{DecodePaddingMode, GeneralPurpose as Engine};
use flate2::read::MultiGzDecoder;

use super::gojson::{JsonError, JsonReader, Source};
use super::helm_release::ReleasePayload;
use super::{DecodeError, DecodeLimits, Fingerprinting, Storage};

const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];

/// Go's `base64.StdEncoding`: padding required, non-zero trailing bits accepted.
const GO_STD: GeneralPurpose = Engine::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Helm's gzip-compressed (or, from old Helm versions, plain) release JSON: the base64 layers
/// undone. They only shrink their input, so they are undone in one go; the gzip layer, the one
/// that can expand, is streamed.
fn compressed(stored: &[u8], storage: Storage) -> Result<Vec<u8>, DecodeError> {
    let api_decoded;
    let helm_text = if storage == Storage::Secret {
        api_decoded = STANDARD.decode(stored).map_err(DecodeError::ApiBase64)?;
        api_decoded.as_slice()
    } else {
        stored
    };
    // Go's base64 decoder skips `\r` and `\n` anywhere in its input.
    let helm_decode = |text: &[u8]| GO_STD.decode(text).map_err(DecodeError::HelmBase64);
    if helm_text.iter().any(|b| matches!(b, b'\r' | b'\n')) {
        let joined: Vec<u8> = helm_text.iter().copied().filter(|b| !matches!(b, b'\r' | b'\n')).collect();
        helm_decode(&joined)
    } else {
        helm_decode(helm_text)
    }
}

/// The release JSON as a stream: gzip when it starts with the magic, as Helm decides
/// (`len(b) > 3 && bytes.Equal(b[0:3], magicGzip)`), else the bytes themselves.
fn json_stream(compressed: &[u8]) -> Box<dyn Read + '_> {
    if compressed.len() > 3 && compressed.starts_with(&GZIP_MAGIC) {
        Box::new(MultiGzDecoder::new(io::BufReader::new(compressed)))
    } else {
        Box::new(compressed)
    }
}

/// Reads a stored payload as Helm does, keeping only what helm-guard needs; with
/// [`Fingerprinting::Take`],
/// also the fingerprint of the revision's content (for comparing the two sides of an UPDATE).
pub fn read_payload(
    stored: &[u8],
    storage: Storage,
    limits: DecodeLimits,
    fingerprinting: Fingerprinting,
) -> Result<ReleasePayload, DecodeError> {
    let compressed = compressed(stored, storage)?;
    let json = JsonReader::new(Source::new(json_stream(&compressed), limits.max_decoded_bytes as u64));
    super::helm_release::read_release(json, fingerprinting).map_err(|error| match error {
        // The stream below the JSON reader is the gzip layer (the base64 layers are undone
        // before): a read error there is the gzip layer's.
        DecodeError::Json(JsonError::Io(io)) => DecodeError::Gzip(io),
        other => other,
    })
}

fn read_all(stored: &[u8], storage: Storage, limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    let cap = limits.max_decoded_bytes as u64;
    let compressed = compressed(stored, storage)?;
    let mut decoded = Vec::new();
    json_stream(&compressed)
        .take(cap + 1)
        .read_to_end(&mut decoded)
        .map_err(|e| DecodeError::Gzip(std::sync::Arc::new(e)))?;
    if decoded.len() as u64 > cap {
        return Err(DecodeError::TooLarge { limit: limits.max_decoded_bytes });
    }
    Ok(decoded)
}

/// Decodes Helm's base64 text (the ConfigMap value, or a Secret value after the API's own base64)
/// into the release JSON bytes (for `inspect`, which shows them; verdicts use [`read_payload`]).
pub fn decode_helm_payload(helm_base64: &[u8], limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    read_all(helm_base64, Storage::ConfigMap, limits)
}

/// Decodes a Secret's `data.release` as the API returns it (base64 of Helm's base64).
pub fn decode_secret_payload(api_base64: &[u8], limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    read_all(api_base64, Storage::Secret, limits)
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

/// A release's JSON encoded as a Secret's `data.release` holds it: gzip, Helm's base64, then the
/// API's base64 (tests and repairs write records as Helm does).
pub fn encode_secret_payload(release_json: &[u8]) -> Vec<u8> {
    STANDARD.encode(encode_helm_payload(release_json)).into_bytes()
}

/// Reads release JSON text (already decoded) as Helm does.
pub fn read_release_json(json: &[u8], limits: DecodeLimits) -> Result<ReleasePayload, DecodeError> {
    super::helm_release::read_release(
        JsonReader::new(Source::new(json, limits.max_decoded_bytes as u64)),
        Fingerprinting::Skip,
    )
}

#[cfg(test)]
mod tests {
    use super::super::helm_release::parse_helm_time;
    use super::*;
    use crate::release::Status;

    #[test]
    fn a_release_that_is_no_object_is_named_for_what_it_is() {
        for (json, what) in [
            ("null", "null"),
            ("[1]", "an array"),
            ("\"x\"", "a string"),
            ("7", "a number"),
            ("true", "a boolean"),
        ] {
            let error = read_release_json(json.as_bytes(), DecodeLimits::default()).unwrap_err().to_string();
            assert!(error.contains(&format!("the release is {what}, not an object")), "{json}: {error}");
        }
    }

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
        let release = read_release_json(&decoded, DecodeLimits::default()).unwrap();
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
        assert!(matches!(read_release_json(b"{", DecodeLimits::default()), Err(DecodeError::Json(_))));
    }

    #[test]
    fn helm_zero_time_counts_as_absent() {
        assert_eq!(parse_helm_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_helm_time("2026-11-29T16:04:02.491141154Z"), Some(1_795_968_242));
    }
}
