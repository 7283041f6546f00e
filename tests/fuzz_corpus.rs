//! The fuzz targets' checks (fuzz/checks/) on their committed corpora (fuzz/corpus/): what
//! coverage-guided fuzzing found worth keeping, and every crash it found, stays passing in CI
//! without nightly or libFuzzer (fuzz/README.md runs the fuzzers themselves).

mod gojson {
    include!("../fuzz/checks/gojson.rs");
}
mod payload {
    include!("../fuzz/checks/payload.rs");
}
mod review {
    include!("../fuzz/checks/review.rs");
}
mod klipper_tag {
    include!("../fuzz/checks/klipper_tag.rs");
}

/// Every input of `target`'s corpus, at least one.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            (path.display().to_string(), std::fs::read(&path).unwrap())
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} is empty", dir.display());
    inputs
}

/// Runs `check` on each input, naming the one that fails.
fn each(target: &str, check: impl Fn(&[u8])) {
    for (name, input) in corpus(target) {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input)));
        assert!(outcome.is_ok(), "{name} fails the {target} check");
    }
}

#[test]
fn the_go_json_reader_accepts_what_go_does_on_its_corpus() {
    each("gojson", gojson::check);
}

#[test]
fn payloads_read_streamed_as_buffered_on_their_corpus() {
    each("payload", payload::check);
}

#[test]
fn reviews_are_decided_without_a_panic_on_their_corpus() {
    let snapshot = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cluster-snapshot.json");
    let (admission, runtime) = review::decider(std::path::Path::new(snapshot));
    each("review", |input| review::check(input, &admission, &runtime));
}

#[test]
fn klipper_tags_always_name_a_script_on_their_corpus() {
    each("klipper_tag", klipper_tag::check);
}
