//! `cargo bench --bench release`: decoding records and classifying histories. Results: BENCHMARKS.md.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a benchmark stops on a broken setup"
)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use helm_guard::release::history::{PayloadStatus, RevisionFacts, classify};
use helm_guard::release::objects::parse_objects;
use helm_guard::release::{DecodeLimits, Record, Status};

/// The largest record among the fixtures.
fn largest_fixture_record() -> Record {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");
    let mut largest: Option<Record> = None;
    for scenario in std::fs::read_dir(dir).unwrap() {
        for file in std::fs::read_dir(scenario.unwrap().path()).into_iter().flatten() {
            let text = std::fs::read(file.unwrap().path()).unwrap();
            for object in parse_objects(&text).unwrap() {
                if let Ok(Some(record)) = Record::from_object(&object, None) {
                    let size = |r: &Record| r.payload.as_ref().map_or(0, |p| p.len());
                    if largest.as_ref().is_none_or(|l| size(&record) > size(l)) {
                        largest = Some(record);
                    }
                }
            }
        }
    }
    largest.unwrap()
}

fn decode(c: &mut Criterion) {
    let record = largest_fixture_record();
    let limits = DecodeLimits::default();
    c.bench_function("decode largest fixture record", |b| {
        b.iter(|| black_box(&record).decode(limits).unwrap())
    });

    // A multi-MiB release (real charts reach 6.5 MB decoded): the fixture's manifest repeated.
    let mut release: serde_json::Value =
        serde_json::from_slice(&record.decode_json(limits).unwrap()).unwrap();
    let manifest = release["manifest"].as_str().unwrap().repeat(2000);
    release["manifest"] = manifest.into();
    let json = serde_json::to_vec(&release).unwrap();
    let mut big = record.clone();
    big.payload = Some(helm_guard::release::decode::codec::encode_secret_payload(&json).into());
    let decoded_mib = json.len() as f64 / (1024.0 * 1024.0);
    c.bench_function(&format!("decode {decoded_mib:.1} MiB release"), |b| {
        b.iter(|| black_box(&big).decode(limits).unwrap())
    });
}

fn classify_history(c: &mut Criterion) {
    let facts: Vec<RevisionFacts> = (1..=100)
        .map(|revision| {
            let status = if revision == 100 { Status::Deployed } else { Status::Superseded };
            RevisionFacts {
                revision,
                payload: PayloadStatus::Decoded(status),
                label: Some(status),
                stored_at: Some(1_795_968_000),
                field_conflict: false,
                namespace_apart: false,
            }
        })
        .rev()
        .collect();
    c.bench_function("classify 100-revision history", |b| {
        b.iter(|| classify(black_box(&facts), 1_795_969_000, 900))
    });
}

criterion_group!(benches, decode, classify_history);
criterion_main!(benches);
