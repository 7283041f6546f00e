// The check of the `klipper_tag` fuzz target, shared with tests/fuzz_corpus.rs.

/// Any image reference: never a panic, and always a script to act on.
pub fn check(data: &[u8]) {
    let Ok(image) = std::str::from_utf8(data) else { return };
    let script = helm_guard::policy::klipper::EntryScript::from_image(image);
    assert!(!script.describe().is_empty());
    let _ = script.assumed();
}
