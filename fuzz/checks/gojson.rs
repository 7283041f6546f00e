// The check of the `gojson` fuzz target, shared with tests/fuzz_corpus.rs (which runs it on the
// corpus in CI): included, not a module, so that both crates compile it as their own.

/// Any JSON value serde_json accepts (valid UTF-8, nesting within its limit of 128) Go's decoder
/// accepts too, so the reader must; reading a whole release never panics.
pub fn check(data: &[u8]) {
    use helm_guard::release::DecodeLimits;
    use helm_guard::release::decode::codec::{read_go_json, read_release_json};
    let limits = DecodeLimits { max_decoded_bytes: 1 << 20 };
    let _ = read_release_json(data, limits);
    let ours = read_go_json(data, 1 << 20);
    if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
        assert!(ours.is_ok(), "serde_json and Go accept it, the reader refused it: {ours:?}");
    }
}
