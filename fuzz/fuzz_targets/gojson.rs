//! The Go-compatible JSON reader (`release/decode/gojson.rs`), differentially: any JSON value
//! serde_json accepts (valid UTF-8, nesting within its limit of 128) Go's decoder accepts too, so
//! the reader must; and reading a whole release (`read_release_json`) never panics, whatever the
//! input.
#![no_main]

use helm_guard::release::DecodeLimits;
use helm_guard::release::decode::codec::read_release_json;
use helm_guard::release::decode::gojson::{JsonReader, Source};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = DecodeLimits { max_decoded_bytes: 1 << 20 };
    let _ = read_release_json(data, limits);
    let mut reader = JsonReader::new(Source::new(data, 1 << 20));
    let ours = reader.any(None, true).and_then(|()| reader.end());
    if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
        assert!(ours.is_ok(), "serde_json and Go accept it, the reader refused it: {ours:?}");
    }
});
