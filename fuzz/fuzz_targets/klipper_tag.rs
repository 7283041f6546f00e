//! The klipper-helm image reference of a helm-install pod (registry, name, tag, digest): what
//! entry script it runs is read from the tag. Any text: never a panic, and always an answer
//! to act on (a script version, or the oldest assumed).
#![no_main]

use helm_guard::policy::klipper::EntryScript;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|image: &str| {
    let script = EntryScript::from_image(image);
    assert!(!script.describe().is_empty());
    let _ = script.assumed();
});
