//! The klipper-helm image reference of a helm-install pod (checks/klipper_tag.rs).
#![no_main]

include!("../checks/klipper_tag.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
