// The check of the `payload` fuzz target, shared with tests/fuzz_corpus.rs.

/// A stored `data.release` (either storage) read streamed, as a verdict reads it, and buffered
/// (the layers decoded whole, then the JSON): never a panic, and the same release or none.
pub fn check(data: &[u8]) {
    use helm_guard::release::DecodeLimits;
    use helm_guard::release::decode::codec::{decode_helm_payload, decode_secret_payload, read_payload, read_release_json};
    use helm_guard::release::decode::{Fingerprinting, Storage};
    let limits = DecodeLimits { max_decoded_bytes: 1 << 20 };
    for storage in [Storage::Secret, Storage::ConfigMap] {
        let streamed = read_payload(data, storage, limits, Fingerprinting::Take);
        let whole = match storage {
            Storage::Secret => decode_secret_payload(data, limits),
            Storage::ConfigMap => decode_helm_payload(data, limits),
        };
        if let Ok(json) = whole {
            let buffered = read_release_json(&json, limits);
            assert_eq!(
                streamed.as_ref().ok().map(|p| (&p.name, &p.namespace, p.version)),
                buffered.as_ref().ok().map(|p| (&p.name, &p.namespace, p.version)),
                "{storage:?}: streamed {streamed:?}, buffered {buffered:?}"
            );
        }
    }
}
