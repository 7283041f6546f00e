//! A stored record payload through every layer, streamed against buffered (checks/payload.rs).
#![no_main]

include!("../checks/payload.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
