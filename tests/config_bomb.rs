//! A config bomb (a payload that decompresses to tens of MiB of tiny JSON maps) is read in one
//! pass without being built: the process's peak heap while reading it stays far below what the
//! tree would take. Alone in its test binary, so that no other test's allocations count.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

use common::*;

#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

#[test]
fn a_config_bomb_is_read_without_being_built() {
    // ~30 MiB of tiny JSON maps once decompressed, under 300 KiB stored.
    let release = release_json(&helm4_secret());
    let inner = "{\"a\":{},\"b\":{}},".repeat(1_800_000);
    let text = serde_json::to_string(&release).unwrap();
    let at = text.find("\"config\":{").unwrap() + "\"config\":{".len();
    let bomb = format!("{}\"bomb\":[{}{{}}],{}", &text[..at], inner, &text[at..]);
    assert!(bomb.len() > 25 << 20);
    let stored = helm_guard::release::decode::codec::encode_secret_payload(bomb.as_bytes());
    assert!(stored.len() < 300 << 10, "{} bytes stored", stored.len());
    drop((inner, text, bomb));

    let before = HEAP.current_usage();
    HEAP.reset_peak_usage();
    let payload = helm_guard::release::decode::codec::read_payload(
        &stored,
        helm_guard::release::decode::Storage::Secret,
        helm_guard::release::DecodeLimits::default(),
        helm_guard::release::decode::Fingerprinting::Take,
    )
    .unwrap();
    let grew = HEAP.peak_usage().saturating_sub(before);
    assert_eq!(payload.info.status, helm_guard::release::Status::Deployed);
    // serde_json would hold 5.4 million maps (hundreds of MiB); the decompressed text alone is
    // 30 MiB. A streaming read needs its buffers only.
    assert!(grew < 4 << 20, "reading the bomb grew the heap by {grew} bytes");
}
