//! The cost of one review without the network, in a form `valgrind --tool=callgrind` counts
//! repeatably (wall-clock benchmarks on a shared machine vary by a third from run to run):
//!
//!     cargo build --release --example review_cost
//!     valgrind --tool=callgrind --callgrind-out-file=/tmp/cg target/release/examples/review_cost REVIEW [N]
//!     callgrind_annotate --inclusive=yes /tmp/cg | head -40
//!
//! Decides REVIEW (an AdmissionReview file; `/validate` unless its object is a Pod) N times
//! (default 1,000) against examples/cluster-snapshot.json, with the ledger line formatted as in
//! production (JSON) and written to a sink. Instructions per review: the total of `main`
//! divided by N (less the set-up, which a run with N = 0 measures). With `floor` as a third
//! argument it runs the floor's handler instead (`examples/floor.rs`: the body parsed as JSON, an
//! allow answered): what any webhook on this stack pays. With `subscriber-json` the ledger line
//! is formatted by tracing-subscriber's own JSON format instead of `server/log_format.rs` (what
//! keeping that formatter saves). Results: BENCHMARKS.md.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::sync::Arc;

use helm_guard::admission::{Admission, Webhook, review};
use helm_guard::cluster::{ReleaseIndex, SourceKind, snapshot};
use helm_guard::policy::PolicyConfig;
use helm_guard::release::DecodeLimits;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let body = std::fs::read(args.first().expect("usage: review_cost REVIEW [N]")).unwrap();
    let n: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1_000);
    if args.get(2).map(String::as_str) == Some("floor") {
        let mut bytes = 0;
        for _ in 0..n {
            let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let answer = serde_json::json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"].clone(), "allowed": true},
            });
            bytes += serde_json::to_vec(&answer).unwrap().len();
        }
        println!("{n} floor answers, {bytes} bytes");
        return;
    }
    if args.get(2).map(String::as_str) == Some("subscriber-json") {
        // The ledger line by tracing-subscriber's own JSON format, the same fields and order.
        let format = tracing_subscriber::fmt::format().json().flatten_event(true).with_current_span(false);
        let subscriber = tracing_subscriber::fmt().with_writer(std::io::sink).event_format(format).finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
    } else {
        let subscriber = helm_guard::server::log_format::json_subscriber(std::io::sink).finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
    }
    let index = Arc::new(ReleaseIndex::new(SourceKind::Snapshot));
    snapshot::load(&index, std::path::Path::new("examples/cluster-snapshot.json"), DecodeLimits::default())
        .unwrap();
    index.set_ready(true);
    let admission = Admission::snapshot(index, PolicyConfig::default());
    let webhook =
        if review::parse(&body).unwrap().kind.kind == "Pod" { Webhook::Mutate } else { Webhook::Validate };
    let mut bytes = 0;
    for _ in 0..n {
        let request = review::parse(&body).unwrap();
        let reviewed = futures::executor::block_on(admission.review(webhook, request));
        bytes += review::encode(reviewed.response).len();
    }
    println!("{n} reviews, {} bytes of answers", bytes);
}
