//! Reading an AdmissionReview and writing the answer.

use crate::object::ReviewObject;
use base64::Engine as _;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

const API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Debug, thiserror::Error)]
/// Why a body is not an AdmissionReview v1 request (the answer is a 400 that says so).
pub enum ReviewError {
    #[error("the body is not a JSON object: {0}")]
    /// Not JSON, or not an object.
    NotJson(serde_json::Error),
    #[error(
        "expected kind AdmissionReview, apiVersion {API_VERSION}; got kind {kind:?}, apiVersion {api_version:?}"
    )]
    /// Another kind or version.
    WrongType {
        /// The body's `kind`.
        kind: String,
        /// The body's `apiVersion`.
        api_version: String,
    },
    #[error("the AdmissionReview has no `request`")]
    /// No `request`.
    NoRequest,
    #[error("the AdmissionReview request is malformed: {0}")]
    /// A `request` that is not one.
    Malformed(serde_json::Error),
}

/// The envelope, read first so that a wrong kind or version gets its own answer; the request
/// itself is skipped here, not built as a tree.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    request: Option<serde::de::IgnoredAny>,
}

/// Parses an AdmissionReview v1 request: in one pass when it is one (the common case); a body
/// that is not gets a second look that says what is wrong with it.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<ReviewObject>, ReviewError> {
    let parsed = serde_json::from_slice::<AdmissionReview<ReviewObject>>(body);
    if let Ok(review) = &parsed
        && review.types.kind == "AdmissionReview"
        && review.types.api_version == API_VERSION
    {
        return parsed.map_err(ReviewError::Malformed)?.try_into().map_err(|_| ReviewError::NoRequest);
    }
    let envelope: Envelope = serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
    let kind = envelope.kind.unwrap_or_default();
    let api_version = envelope.api_version.unwrap_or_default();
    if kind != "AdmissionReview" || api_version != API_VERSION {
        return Err(ReviewError::WrongType { kind, api_version });
    }
    if envelope.request.is_none() {
        return Err(ReviewError::NoRequest);
    }
    match parsed {
        Ok(review) => review.try_into().map_err(|_| ReviewError::NoRequest),
        Err(error) => Err(ReviewError::Malformed(error)),
    }
}

/// [`parse`]s a request body so that the objects' payloads are slices of it, not copies: a
/// review then holds its payloads in its body's memory only (16 concurrent UPDATEs of records
/// near the 1 MiB Kubernetes allows peaked at 116 MiB with copies; BENCHMARKS.md).
pub fn parse_body(body: &bytes::Bytes) -> Result<AdmissionRequest<ReviewObject>, ReviewError> {
    crate::release::decode::fields::borrowing_from(body, || parse(body))
}

/// Serialises the answer as an AdmissionReview v1.
///
/// kube-core serialises `patch` (a `Vec<u8>`) as an array of numbers
/// (kube-rs/kube#1781); the API server wants a base64 string, as Go encodes `[]byte`.
pub fn encode(mut response: AdmissionResponse) -> Vec<u8> {
    let patch = response.patch.take();
    let mut bytes = match serde_json::to_vec(&response.into_review()) {
        Ok(bytes) => bytes,
        // Serialising plain strings, maps and numbers cannot fail; answer with an error if it did.
        Err(error) => return encode(AdmissionResponse::invalid(error)),
    };
    let Some(patch) = patch else { return bytes };
    // The patch goes in as the first field of `response` (field order means nothing in JSON),
    // spliced into the bytes rather than rebuilt through a value tree, which cost a pod review
    // a quarter of its time. `patchType` is already there.
    if !bytes.starts_with(OPENING) {
        return encode(AdmissionResponse::invalid("the AdmissionReview serialiser changed its output"));
    }
    let field = format!("\"patch\":\"{}\",", base64::engine::general_purpose::STANDARD.encode(patch));
    bytes.splice(OPENING.len()..OPENING.len(), field.into_bytes());
    bytes
}

/// How kube's serialisation of an answer opens, up to the inside of the response object.
const OPENING: &[u8] = b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"response\":{";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_goes_out_as_base64() {
        let request = parse(include_bytes!(
            "../../tests/fixtures/admission/17-helm-install-pod-create/001-mutate-create-pod-helm-install-web-.json"
        ))
        .unwrap();
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::json!([{"op": "add", "path": "/metadata/x", "value": 1}]))
                .unwrap();
        let response = AdmissionResponse::from(&request).with_patch(patch).unwrap();
        let out: serde_json::Value = serde_json::from_slice(&encode(response)).unwrap();
        assert_eq!(out["apiVersion"], API_VERSION);
        assert_eq!(out["kind"], "AdmissionReview");
        assert_eq!(out["response"]["uid"], "b855f6a6-76d1-49df-a766-8c751477c71d");
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(decoded, br#"[{"op":"add","path":"/metadata/x","value":1}]"#);
    }

    #[test]
    fn a_payload_read_from_the_body_is_a_slice_of_it_not_a_copy() {
        let body = bytes::Bytes::from_static(include_bytes!(
            "../../tests/fixtures/admission/01-helm4-install-upgrade/006-validate-update-secret-sh.helm.release.v1.web.v3.json"
        ));
        let within = |payload: &bytes::Bytes| {
            let (start, at) = (body.as_ptr() as usize, payload.as_ptr() as usize);
            at >= start && at + payload.len() <= start + body.len()
        };
        let request = parse_body(&body).unwrap();
        for object in [request.object.unwrap(), request.old_object.unwrap()] {
            let payload = object.release_data.unwrap();
            assert!(payload.len() > 1000 && within(&payload), "a slice of the body");
        }
        // Read from a plain slice it is a copy, of the same bytes.
        let copied = parse(&body).unwrap().object.unwrap().release_data.unwrap();
        assert!(!within(&copied));
        assert_eq!(copied, parse_body(&body).unwrap().object.unwrap().release_data.unwrap());
        // An escaped character cannot be a slice: the payload is the unescaped text.
        let escaped = bytes::Bytes::from(String::from_utf8(body.to_vec()).unwrap().replacen(
            "\"release\":\"",
            "\"release\":\"\\u0048",
            1,
        ));
        let request = parse_body(&escaped).unwrap();
        let sides = [request.object.unwrap(), request.old_object.unwrap()].map(|o| o.release_data.unwrap());
        assert!(sides.iter().any(|payload| payload.starts_with(b"HSDRz")), "the escape read as the letter");
    }

    #[test]
    fn bad_bodies_are_told_apart() {
        assert!(matches!(parse(b"nope"), Err(ReviewError::NotJson(_))));
        assert!(matches!(
            parse(br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{}}"#),
            Err(ReviewError::WrongType { .. })
        ));
        assert!(matches!(
            parse(br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#),
            Err(ReviewError::NoRequest)
        ));
        assert!(matches!(
            parse(br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":1}}"#),
            Err(ReviewError::Malformed(_))
        ));
    }
}
