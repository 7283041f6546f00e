//! `cargo bench --bench review`: one AdmissionReview from bytes in to bytes out, without the
//! network: parsing, deciding (with the ledger line written to a sink), and encoding. The
//! network's share and the comparison with the allow-all floor come from `examples/load.rs`
//! (BENCHMARKS.md, "Against the floor").

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a benchmark stops on a broken setup"
)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use helm_guard::admission::{Admission, Webhook, review};
use helm_guard::cluster::{ReleaseIndex, SourceKind, snapshot};
use helm_guard::policy::PolicyConfig;
use helm_guard::release::DecodeLimits;

const DELETE: &str = "tests/fixtures/admission/03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json";
const POD: &str =
    "tests/fixtures/admission/17-helm-install-pod-create/001-mutate-create-pod-helm-install-web-.json";

fn admission() -> Admission {
    let index = Arc::new(ReleaseIndex::new(SourceKind::Snapshot));
    let snapshot = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cluster-snapshot.json");
    snapshot::load(&index, std::path::Path::new(snapshot), DecodeLimits::default()).unwrap();
    index.set_ready(true);
    Admission::snapshot(index, PolicyConfig::default())
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

fn reviews(c: &mut Criterion) {
    // The ledger line is formatted as in production (JSON) and written to a sink.
    let subscriber = tracing_subscriber::fmt().json().with_writer(std::io::sink).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let admission = admission();
    for (name, path, webhook) in [("DELETE", DELETE, Webhook::Validate), ("pod CREATE", POD, Webhook::Mutate)]
    {
        let body = read(path);
        c.bench_function(&format!("parse {name} review"), |b| {
            b.iter(|| review::parse(black_box(&body)).unwrap())
        });
        c.bench_function(&format!("decide {name} review (parse, verdict, ledger, encode)"), |b| {
            b.iter(|| {
                let request = review::parse(black_box(&body)).unwrap();
                let reviewed = futures::executor::block_on(admission.review(webhook, request));
                review::encode(reviewed.response)
            })
        });
    }
    let body = read(DELETE);
    c.bench_function("floor: parse DELETE review as a JSON value", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&body)).unwrap())
    });
}

criterion_group!(benches, reviews);
criterion_main!(benches);
