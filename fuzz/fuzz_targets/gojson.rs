//! The Go-compatible JSON reader (`release/decode/gojson.rs`), differentially against serde_json
//! (checks/gojson.rs).
#![no_main]

include!("../checks/gojson.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
