//! Random, truncated and mutated input never panics the codec, the record reader or the classifier.

use crate::common;

use helm_guard::release::DecodeLimits;
use helm_guard::release::decode::codec::read_release_json;
use helm_guard::release::decode::codec::{decode_helm_payload, decode_secret_payload};
use helm_guard::release::history::{PayloadStatus, RevisionFacts, classify};
use helm_guard::release::objects::parse_objects;
use helm_guard::release::scan::{collect_records, report};
use helm_guard::release::{Record, Status};
use proptest::prelude::*;

const SMALL: DecodeLimits = DecodeLimits { max_decoded_bytes: 1 << 20 };

fn real_payload() -> Vec<u8> {
    common::helm4_secret()["data"]["release"].as_str().unwrap().as_bytes().to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_any_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode_helm_payload(&bytes, SMALL);
        let _ = decode_secret_payload(&bytes, SMALL);
        let _ = parse_objects(&bytes);
    }

    #[test]
    fn truncated_real_payloads_fail_cleanly(cut in 0usize..16_000) {
        let payload = real_payload();
        let cut = cut.min(payload.len());
        // A cut may land on a base64 boundary and still decode as base64; it never decodes to a
        // release.
        let result = decode_secret_payload(&payload[..cut], SMALL).and_then(|json| read_release_json(&json, SMALL));
        if cut < payload.len() {
            prop_assert!(result.is_err());
        }
    }

    #[test]
    fn mutated_real_payloads_never_panic(index in 0usize..16_000, byte in any::<u8>()) {
        let mut payload = real_payload();
        let index = index % payload.len();
        payload[index] = byte;
        let mut record = common::helm4_secret();
        record["data"]["release"] = serde_json::Value::String(String::from_utf8_lossy(&payload).into_owned());
        let objects = vec![record];
        let (records, _) = collect_records(&objects, SMALL);
        let _ = report(&records, 0, 900);
    }

    #[test]
    fn mutated_objects_never_panic(path in 0usize..6, value in prop_oneof![
        Just(serde_json::Value::Null),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
    ]) {
        let mut object = common::helm4_secret();
        let pointer = ["/metadata", "/metadata/labels", "/metadata/name", "/data", "/data/release", "/type"][path];
        if let Some(slot) = object.pointer_mut(pointer) {
            *slot = value;
        }
        if let Ok(Some(record)) = Record::from_object(&object, None) {
            let _ = record.decode(SMALL);
        }
    }

    #[test]
    fn the_classifier_takes_any_history(revisions in proptest::collection::vec((any::<u32>(), 0usize..9, any::<bool>(), any::<Option<i64>>()), 0..40), now in any::<i64>()) {
        let facts: Vec<RevisionFacts> = revisions
            .into_iter()
            .map(|(revision, status, decodes, stored_at)| RevisionFacts {
                revision,
                payload: if decodes { PayloadStatus::Decoded(<Status as strum::VariantArray>::VARIANTS[status]) } else { PayloadStatus::Undecodable },
                label: Some(<Status as strum::VariantArray>::VARIANTS[status]),
                stored_at,
                field_conflict: decodes && revision % 2 == 0,
                namespace_apart: false,
            })
            .collect();
        let _ = classify(&facts, now, 900);
    }
}

/// Where one input stopped: the layer whose error it got, or read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    Base64,
    Gzip,
    JsonReader,
    Read,
}

fn reach(payload: &[u8]) -> Reach {
    use helm_guard::release::decode::DecodeError;
    let json = match decode_secret_payload(payload, SMALL) {
        Ok(json) => json,
        Err(DecodeError::ApiBase64(_) | DecodeError::HelmBase64(_)) => return Reach::Base64,
        Err(DecodeError::Gzip(_) | DecodeError::TooLarge { .. }) => return Reach::Gzip,
        Err(other) => panic!("the codec answered {other:?}"),
    };
    match read_release_json(&json, SMALL) {
        Ok(_) => Reach::Read,
        Err(_) => Reach::JsonReader,
    }
}

/// Random bytes rarely get past base64 (`random_bytes_never_panic_any_decoder`), so the layers
/// under it would go untested by them. Here the input is built as Helm and the API server build
/// it: the real release's JSON, mutated (bytes changed, cut, spliced with JSON's own tokens),
/// gzipped, base64 for Helm and base64 again for the Secret, sometimes with the gzip stream
/// itself damaged. Seeded and reproducible (`NO_PANIC_SEED`); it must reach every layer, most
/// inputs the Go JSON reader, and never panic on the way.
#[test]
fn inputs_built_as_helm_builds_them_reach_every_layer_and_never_panic() {
    use base64::Engine;
    use std::io::Write;
    let b64 = base64::engine::general_purpose::STANDARD;
    let seed = std::env::var("NO_PANIC_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261202);
    let mut rng = fastrand::Rng::with_seed(seed);
    let helm_layer = b64.decode(b64.decode(real_payload()).unwrap()).unwrap();
    let release_json = {
        let mut json = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&helm_layer[..]), &mut json).unwrap();
        json
    };
    const TOKENS: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"",
        b":",
        b",",
        b"null",
        b"1e999",
        b"-0",
        b"\\u00",
        b"\\ud800",
        b"\"info\":",
        b"\"status\":\"deployed\"",
        b"\"version\":",
    ];
    let mut reached = std::collections::BTreeMap::<Reach, usize>::new();
    let cases = 2_000;
    for _ in 0..cases {
        let mut json = release_json.clone();
        for _ in 0..rng.usize(0..4) {
            match rng.u8(0..4) {
                0 if !json.is_empty() => {
                    let at = rng.usize(0..json.len());
                    json[at] = rng.u8(..);
                }
                1 => json.truncate(rng.usize(0..=json.len())),
                _ => {
                    let at = rng.usize(0..=json.len());
                    let token = TOKENS[rng.usize(0..TOKENS.len())];
                    json.splice(at..at, token.iter().copied());
                }
            }
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(rng.u32(0..10)));
        gz.write_all(&json).unwrap();
        let mut gzipped = gz.finish().unwrap();
        if rng.u8(0..8) == 0 && !gzipped.is_empty() {
            // The gzip stream damaged: a flipped byte (header, data or CRC) or a cut.
            if rng.bool() {
                let at = rng.usize(0..gzipped.len());
                gzipped[at] ^= 1 << rng.u8(0..8);
            } else {
                gzipped.truncate(rng.usize(0..gzipped.len()));
            }
        }
        let secret_data = b64.encode(b64.encode(&gzipped));
        let got = std::panic::catch_unwind(|| reach(secret_data.as_bytes()))
            .unwrap_or_else(|_| panic!("a panic on seed {seed}"));
        *reached.entry(got).or_default() += 1;
    }
    eprintln!("seed {seed}: {cases} inputs stopped at {reached:?}");
    let share = |layer| reached.get(&layer).copied().unwrap_or(0) as f64 / cases as f64;
    assert_eq!(share(Reach::Base64), 0.0, "well-formed base64 passes both base64 layers: {reached:?}");
    assert!(share(Reach::Gzip) > 0.02, "damaged gzip streams are refused by the gzip layer: {reached:?}");
    assert!(
        share(Reach::JsonReader) > 0.3,
        "most mutated JSON reaches the Go JSON reader and is refused there: {reached:?}"
    );
    assert!(share(Reach::Read) > 0.05, "some mutations leave a release Helm reads: {reached:?}");
    assert!(share(Reach::JsonReader) + share(Reach::Read) > 0.8, "{reached:?}");
}
