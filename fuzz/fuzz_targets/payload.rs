//! A stored record payload through every layer (the API's base64, Helm's base64, gzip, Go's JSON)
//! as a verdict reads it, streamed: never a panic, and the same answer as decoding the layers
//! whole first and reading the JSON after (the stream and the buffer must agree).
#![no_main]

use helm_guard::release::DecodeLimits;
use helm_guard::release::decode::codec::{decode_helm_payload, decode_secret_payload, read_payload, read_release_json};
use helm_guard::release::decode::{Fingerprinting, Storage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
});
