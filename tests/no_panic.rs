//! Random, truncated and mutated input never panics the codec, the record reader or the classifier.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

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
            })
            .collect();
        let _ = classify(&facts, now, 900);
    }
}
