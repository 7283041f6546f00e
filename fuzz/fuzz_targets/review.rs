//! An AdmissionReview body through the server's parse and the decision (checks/review.rs).
#![no_main]

include!("../checks/review.rs");

fn decided() -> &'static (helm_guard::admission::Admission, tokio::runtime::Runtime) {
    static DECIDER: std::sync::OnceLock<(helm_guard::admission::Admission, tokio::runtime::Runtime)> =
        std::sync::OnceLock::new();
    DECIDER.get_or_init(|| {
        decider(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/cluster-snapshot.json"
        )))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (admission, runtime) = decided();
    check(data, admission, runtime);
});
