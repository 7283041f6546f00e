// The check of the `review` fuzz target, shared with tests/fuzz_corpus.rs.

/// A decision context on the snapshot at `path` (examples/cluster-snapshot.json), with the
/// runtime its decisions run on.
pub fn decider(path: &std::path::Path) -> (helm_guard::admission::Admission, tokio::runtime::Runtime) {
    use std::sync::Arc;
    use helm_guard::cluster::{ReleaseIndex, SourceKind, snapshot};
    let index = Arc::new(ReleaseIndex::new(SourceKind::Snapshot));
    snapshot::load(&index, path, helm_guard::release::DecodeLimits::default()).expect("the shipped snapshot");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
    (helm_guard::admission::Admission::snapshot(index, helm_guard::policy::PolicyConfig::default()), runtime)
}

/// An AdmissionReview body through the server's parse and, when it parses, the whole decision
/// of both webhooks: never a panic, and each answer names the request it answers.
pub fn check(data: &[u8], admission: &helm_guard::admission::Admission, runtime: &tokio::runtime::Runtime) {
    use helm_guard::admission::Webhook;
    let body = bytes::Bytes::copy_from_slice(data);
    let Ok(request) = helm_guard::admission::review::parse_body(&body) else { return };
    let uid = request.uid.clone();
    for webhook in [Webhook::Validate, Webhook::Mutate] {
        let reviewed = runtime.block_on(admission.review(webhook, request.clone()));
        assert_eq!(reviewed.response.uid, uid);
    }
}
