//! An AdmissionReview body through the parse the server uses and, when it parses, the whole
//! decision against a snapshot of a real cluster (the shipped examples/cluster-snapshot.json),
//! for both webhooks: never a panic, and every answer names the request it answers.
#![no_main]

use std::sync::{Arc, OnceLock};

use helm_guard::admission::{Admission, Webhook};
use helm_guard::cluster::{ReleaseIndex, SourceKind, snapshot};
use helm_guard::policy::PolicyConfig;
use helm_guard::release::DecodeLimits;
use libfuzzer_sys::fuzz_target;

fn admission() -> &'static (Admission, tokio::runtime::Runtime) {
    static ADMISSION: OnceLock<(Admission, tokio::runtime::Runtime)> = OnceLock::new();
    ADMISSION.get_or_init(|| {
        let index = Arc::new(ReleaseIndex::new(SourceKind::Snapshot));
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/cluster-snapshot.json");
        snapshot::load(&index, std::path::Path::new(path), DecodeLimits::default()).expect("the shipped snapshot");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
        (Admission::snapshot(index, PolicyConfig::default()), runtime)
    })
}

fuzz_target!(|data: &[u8]| {
    let body = bytes::Bytes::copy_from_slice(data);
    let Ok(request) = helm_guard::admission::review::parse_body(&body) else { return };
    let uid = request.uid.clone();
    let (admission, runtime) = admission();
    for webhook in [Webhook::Validate, Webhook::Mutate] {
        let reviewed = runtime.block_on(admission.review(webhook, request.clone()));
        assert_eq!(reviewed.response.uid, uid);
    }
});
