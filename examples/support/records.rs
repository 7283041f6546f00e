//! Release records for the measuring tools, re-encoded from a real Helm 4 record of
//! tests/fixtures: any release, revision and status, payload and labels alike.

use helm_guard::release::DecodeLimits;
use helm_guard::release::decode::codec::{decode_secret_payload, encode_secret_payload};
use serde_json::{Value, json};

/// An UPDATE review of a real Helm 4 upgrade: its object is the record the others are made from.
const RECORD: &str = "tests/fixtures/admission/01-helm4-install-upgrade/006-validate-update-secret-sh.helm.release.v1.web.v3.json";

/// The fixture's stored record and its decoded payload.
pub fn base() -> (Value, Value) {
    let review: Value = serde_json::from_slice(&std::fs::read(RECORD).unwrap()).unwrap();
    let base = review["request"]["object"].clone();
    let stored = base["data"]["release"].as_str().unwrap().as_bytes();
    let payload =
        serde_json::from_slice(&decode_secret_payload(stored, DecodeLimits::default()).unwrap()).unwrap();
    (base, payload)
}

/// The fixture's record as revision `revision` of `name` in `namespace`, payload and labels alike.
pub fn record(
    base: &Value,
    payload: &Value,
    namespace: &str,
    name: &str,
    revision: usize,
    status: &str,
) -> Value {
    let mut payload = payload.clone();
    payload["name"] = json!(name);
    payload["namespace"] = json!(namespace);
    payload["version"] = json!(revision);
    payload["info"]["status"] = json!(status);
    let encoded = encode_secret_payload(&serde_json::to_vec(&payload).unwrap());
    let mut record = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": base["type"],
        "metadata": {
            "name": format!("sh.helm.release.v1.{name}.v{revision}"),
            "namespace": namespace,
            "labels": base["metadata"]["labels"].clone(),
        },
        "data": {"release": String::from_utf8(encoded).unwrap()},
    });
    let labels = &mut record["metadata"]["labels"];
    labels["name"] = json!(name);
    labels["version"] = json!(revision.to_string());
    labels["status"] = json!(status);
    record
}
