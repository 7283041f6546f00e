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
use base64::engine::general_purpose::{GeneralPurpose, STANDARD};
use flate2::read::MultiGzDecoder;

use super::go_base64::GO_STD;
use super::gojson::{JsonError, JsonReader, Source};
use super::helm_release::ReleasePayload;
use super::{DecodeError, DecodeLimits, Fingerprinting, Storage};

const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];

/// The API's base64 around a Secret's payload.
static API_BASE64: GeneralPurpose = STANDARD;
/// Helm's own base64 layer.
static HELM_BASE64: GeneralPurpose = GO_STD;

/// A base64 layer's error, carried through the reads above it to be named for its layer.
#[derive(Debug, thiserror::Error)]
enum LayerError {
    #[error("{0}")]
    Api(base64::DecodeError),
    #[error("{0}")]
    Helm(base64::DecodeError),
}

/// A base64 layer decoded as it is read, its errors tagged with the layer.
struct Base64Layer<R: Read> {
    decoder: base64::read::DecoderReader<'static, GeneralPurpose, R>,
    tag: fn(base64::DecodeError) -> LayerError,
}

impl<R: Read> Read for Base64Layer<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.decoder.read(buf).map_err(|error| {
            match error.get_ref().and_then(|inner| inner.downcast_ref::<base64::DecodeError>()) {
                Some(decode) => io::Error::other((self.tag)(decode.clone())),
                None => error,
            }
        })
    }
}

/// Go's base64 decoder skips `\r` and `\n` anywhere in its input.
struct SkipLineBreaks<R>(R);

impl<R: Read> Read for SkipLineBreaks<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.0.read(buf)?;
            if n == 0 {
                return Ok(0);
            }
            let mut kept = 0;
            for i in 0..n {
                let byte = buf.get(i).copied().unwrap_or_default();
                if !matches!(byte, b'\r' | b'\n') {
                    if let Some(slot) = buf.get_mut(kept) {
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

/// The release JSON as a stream, layer by layer as Helm undoes them: the API's base64 (a
/// Secret's), Helm's base64, then gzip when the result starts with its magic, as Helm decides
/// (`len(b) > 3 && bytes.Equal(b[0:3], magicGzip)`), else the bytes themselves. Streamed rather
/// than decoded whole: a payload near the 1 MiB Kubernetes allows took 1.7 MiB of buffers per
/// reading, 16 readings at once 27 MiB.
fn json_stream(stored: &[u8], storage: Storage) -> Result<Box<dyn Read + '_>, DecodeError> {
    let helm_text: Box<dyn Read> = match storage {
        Storage::Secret => Box::new(Base64Layer {
            decoder: base64::read::DecoderReader::new(stored, &API_BASE64),
            tag: LayerError::Api,
        }),
        Storage::ConfigMap => Box::new(stored),
    };
    let mut compressed = Base64Layer {
        decoder: base64::read::DecoderReader::new(SkipLineBreaks(helm_text), &HELM_BASE64),
        tag: LayerError::Helm,
    };
    let mut head = [0u8; 4];
    let mut seen = 0;
    while seen < head.len() {
        let rest = head.get_mut(seen..).unwrap_or_default();
        match compressed.read(rest) {
            Ok(0) => break,
            Ok(n) => seen += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(layer_error(error)),
        }
    }
    let head = head.get(..seen).unwrap_or_default().to_vec();
    let is_gzip = head.len() > 3 && head.starts_with(&GZIP_MAGIC);
    let stream = io::Cursor::new(head).chain(compressed);
    Ok(if is_gzip { Box::new(MultiGzDecoder::new(io::BufReader::new(stream))) } else { Box::new(stream) })
}

/// Names a read error for the layer it came from: a base64 layer's, else the gzip layer's (the
/// only other layer below the JSON reader).
fn layer_error(error: io::Error) -> DecodeError {
    match error.get_ref().and_then(|inner| inner.downcast_ref::<LayerError>()) {
        Some(LayerError::Api(decode)) => DecodeError::ApiBase64(decode.clone()),
        Some(LayerError::Helm(decode)) => DecodeError::HelmBase64(decode.clone()),
        None => DecodeError::Gzip(std::sync::Arc::new(error)),
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
    let json = JsonReader::new(Source::new(json_stream(stored, storage)?, limits.max_decoded_bytes as u64));
    super::helm_release::read_release(json, fingerprinting).map_err(|error| match error {
        DecodeError::Json(JsonError::Io(io)) => match std::sync::Arc::try_unwrap(io) {
            Ok(io) => layer_error(io),
            Err(shared) => DecodeError::Gzip(shared),
        },
        other => other,
    })
}

fn read_all(stored: &[u8], storage: Storage, limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
    let cap = limits.max_decoded_bytes as u64;
    let mut decoded = Vec::new();
    json_stream(stored, storage)?.take(cap + 1).read_to_end(&mut decoded).map_err(layer_error)?;
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

/// Reads `json` as one JSON value the way Go's `encoding/json` does (how Helm reads its payloads:
/// any UTF-8 text serde_json accepts, nesting to 10,000 levels), within `limit` bytes; why Go
/// would refuse it, if it would.
pub fn read_go_json(json: &[u8], limit: u64) -> Result<(), JsonError> {
    let mut reader = JsonReader::new(Source::new(json, limit));
    reader.any(None, true).and_then(|()| reader.end())
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

    /// Helm 4.2 on writes `info.rollback_revision` (an int) on a rollback's record: it counts
    /// against nothing. Of another type Helm 4.2 reads nothing of the record (4.1 ignored the
    /// key), so it is unreadable, the strict side.
    #[test]
    fn helm_4_2s_rollback_revision_decodes_and_of_another_type_is_unreadable() {
        let with = |value: &str| {
            format!(
                r#"{{"name":"web","version":3,"info":{{"status":"deployed","rollback_revision":{value},"description":"Rollback to 1"}}}}"#
            )
        };
        let release = read_release_json(with("1").as_bytes(), DecodeLimits::default()).unwrap();
        assert_eq!((release.version, release.info.status), (3, Status::Deployed));
        for wrong in ["\"1\"", "1.5", "{}"] {
            assert!(read_release_json(with(wrong).as_bytes(), DecodeLimits::default()).is_err(), "{wrong}");
        }
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

    /// The layers undone whole, as Helm does (`DecodeString`, then gzip's `ReadAll`): the oracle
    /// of the streamed reading.
    fn undone_whole(stored: &[u8], storage: Storage) -> Option<Vec<u8>> {
        let helm_text = match storage {
            Storage::Secret => STANDARD.decode(stored).ok()?,
            Storage::ConfigMap => stored.to_vec(),
        };
        let joined: Vec<u8> = helm_text.into_iter().filter(|b| !matches!(b, b'\r' | b'\n')).collect();
        let compressed = GO_STD.decode(joined).ok()?;
        if compressed.len() > 3 && compressed.starts_with(&GZIP_MAGIC) {
            let mut json = Vec::new();
            MultiGzDecoder::new(compressed.as_slice()).read_to_end(&mut json).ok()?;
            Some(json)
        } else {
            Some(compressed)
        }
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2_000, ..Default::default() })]

        /// Payloads as Helm and the API server write them, and damaged: line breaks, a byte
        /// changed to padding, a line break, a character no base64 has or any byte, cut short,
        /// gzip or not; each read streamed reads what undoing each layer whole reads, or fails
        /// as it does.
        #[test]
        fn streamed_layers_read_what_whole_ones_do(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            gzipped in proptest::prelude::any::<bool>(),
            secret in proptest::prelude::any::<bool>(),
            breaks in proptest::collection::vec(0usize..2000, 0..3),
            damage in proptest::option::of((0usize..2000, proptest::sample::select(vec![b'=', b'\n', b'\r', b'-', b'!', 0xff, b'A']))),
            cut in proptest::option::of(0usize..2000),
        ) {
            let compressed = if gzipped { gzip(&raw) } else { raw };
            let mut text = STANDARD.encode(compressed).into_bytes();
            for at in breaks {
                text.insert(at % (text.len() + 1), b'\n');
            }
            let (storage, mut stored) = if secret {
                (Storage::Secret, STANDARD.encode(&text).into_bytes())
            } else {
                (Storage::ConfigMap, text)
            };
            if let Some((at, byte)) = damage && !stored.is_empty() {
                let at = at % stored.len();
                stored[at] = byte;
            }
            if let Some(cut) = cut {
                stored.truncate(cut % (stored.len() + 1));
            }
            let streamed = read_all(&stored, storage, DecodeLimits::default()).ok();
            proptest::prop_assert_eq!(streamed, undone_whole(&stored, storage));
        }
    }

    #[test]
    fn helm_zero_time_counts_as_absent() {
        assert_eq!(parse_helm_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_helm_time("2026-11-29T16:04:02.491141154Z"), Some(1_795_968_242));
    }
}
