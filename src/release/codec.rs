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
use base64::read::DecoderReader;
use flate2::read::MultiGzDecoder;

use super::gojson::{JsonError, JsonReader, Source};
pub use super::payload::{ChartMetadata, ReleaseInfo, ReleasePayload, parse_helm_time};

/// Real charts decode to several MiB (6.5 MB has been reported); 32 MiB leaves room.
pub const DEFAULT_MAX_DECODED_BYTES: usize = 32 * 1024 * 1024;

const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];

/// Go's `base64.StdEncoding`: padding required, non-zero trailing bits accepted.
const GO_STD: GeneralPurpose = Engine::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

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
    ApiBase64(String),
    #[error("the payload is not valid base64 as Helm reads it: {0}")]
    HelmBase64(String),
    #[error("the payload is not valid gzip: {0}")]
    Gzip(String),
    #[error("the payload decodes to more than {limit} bytes (limit --max-decoded-bytes); refusing it")]
    TooLarge { limit: usize },
    #[error("the payload is not a Helm release in JSON: {0}")]
    Json(JsonError),
    #[error("Helm cannot read this release: {0}")]
    Helm(String),
    #[error("Helm 3 and Helm 4 read this release differently, so helm-guard counts it as unreadable: {0}")]
    HelmDisagree(String),
}

/// Which layer of the payload an I/O error came from.
#[derive(Debug, Clone, Copy)]
enum Layer {
    ApiBase64,
    HelmBase64,
    Gzip,
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct LayerError {
    layer: Layer,
    message: String,
}

/// Tags a reader's errors with its layer, so the answer names the layer that failed.
struct Tagged<R> {
    inner: R,
    layer: Layer,
}

impl<R: Read> Read for Tagged<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|error| {
            if error.get_ref().is_some_and(|inner| inner.is::<LayerError>()) {
                return error;
            }
            io::Error::new(
                io::ErrorKind::InvalidData,
                LayerError { layer: self.layer, message: error.to_string() },
            )
        })
    }
}

/// Go's base64 decoder skips `\r` and `\n` anywhere in its input.
struct SkipLineBreaks<R>(R);

impl<R: Read> Read for SkipLineBreaks<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let read = self.0.read(buf)?;
            if read == 0 {
                return Ok(0);
            }
            let data = buf.get_mut(..read).unwrap_or_default();
            let mut kept = 0;
            for i in 0..data.len() {
                let byte = data.get(i).copied().unwrap_or_default();
                if byte != b'\r' && byte != b'\n' {
                    if let Some(slot) = data.get_mut(kept) {
                        *slot = byte;
                    }
                    kept += 1;
                }
            }
            if kept > 0 {
                return Ok(kept);
            }
        }
    }
}

/// The release JSON of a payload as a stream: Helm's base64 text, then gzip if the magic says so.
fn helm_layers<'a>(helm_base64: impl Read + 'a) -> io::Result<Box<dyn Read + 'a>> {
    let mut decoded =
        Tagged { inner: DecoderReader::new(SkipLineBreaks(helm_base64), &GO_STD), layer: Layer::HelmBase64 };
    // Helm: `len(b) > 3 && bytes.Equal(b[0:3], magicGzip)`.
    let mut head = Vec::with_capacity(4);
    (&mut decoded).take(4).read_to_end(&mut head)?;
    let gzip = head.len() > 3 && head.starts_with(&GZIP_MAGIC);
    let whole = io::Cursor::new(head).chain(decoded);
    Ok(if gzip {
        Box::new(Tagged { inner: MultiGzDecoder::new(whole), layer: Layer::Gzip })
    } else {
        Box::new(whole)
    })
}

/// A stored `data.release` as a stream of release JSON. `secret`: the text is the API's base64
/// of Helm's base64 (a Secret); else Helm's base64 itself (a ConfigMap).
fn json_stream<'a>(stored: &'a [u8], secret: bool) -> io::Result<Box<dyn Read + 'a>> {
    if secret {
        helm_layers(Tagged { inner: DecoderReader::new(stored, &STANDARD), layer: Layer::ApiBase64 })
    } else {
        helm_layers(stored)
    }
}

fn layer_error(error: &io::Error) -> DecodeError {
    match error.get_ref().and_then(|inner| inner.downcast_ref::<LayerError>()) {
        Some(LayerError { layer: Layer::ApiBase64, message }) => DecodeError::ApiBase64(message.clone()),
        Some(LayerError { layer: Layer::HelmBase64, message }) => DecodeError::HelmBase64(message.clone()),
        Some(LayerError { layer: Layer::Gzip, message }) => DecodeError::Gzip(message.clone()),
        None => DecodeError::Gzip(error.to_string()),
    }
}

/// Reads a stored payload as Helm does, keeping only what helm-guard needs.
pub fn read_payload(
    stored: &[u8],
    secret: bool,
    limits: DecodeLimits,
) -> Result<ReleasePayload, DecodeError> {
    let stream = json_stream(stored, secret).map_err(|e| layer_error(&e))?;
    let json = JsonReader::new(Source::new(stream, limits.max_decoded_bytes as u64));
    super::payload::read_release(json).map_err(|error| match error {
        DecodeError::Json(JsonError::Io(io)) => layer_error(&io),
        other => other,
    })
}

fn read_all(stored: &[u8], secret: bool, limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    let cap = limits.max_decoded_bytes as u64;
    let mut decoded = Vec::new();
    json_stream(stored, secret)
        .and_then(|stream| stream.take(cap + 1).read_to_end(&mut decoded))
        .map_err(|e| layer_error(&e))?;
    if decoded.len() as u64 > cap {
        return Err(DecodeError::TooLarge { limit: limits.max_decoded_bytes });
    }
    Ok(decoded)
}

/// Decodes Helm's base64 text (the ConfigMap value, or a Secret value after the API's own base64)
/// into the release JSON bytes (for `inspect`, which shows them; verdicts use [`read_payload`]).
pub fn decode_helm_payload(helm_base64: &[u8], limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    read_all(helm_base64, false, limits)
}

/// Decodes a Secret's `data.release` as the API returns it (base64 of Helm's base64).
pub fn decode_secret_payload(api_base64: &[u8], limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    read_all(api_base64, true, limits)
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

/// Reads release JSON text (already decoded) as Helm does.
pub fn read_release_json(json: &[u8], limits: DecodeLimits) -> Result<ReleasePayload, DecodeError> {
    super::payload::read_release(JsonReader::new(Source::new(json, limits.max_decoded_bytes as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::Status;

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
