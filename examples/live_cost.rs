//! The cost of one live verdict in instructions, the figure CI's gate compares with a committed
//! baseline (`.ci/instructions`; wall-clock rates on a shared 2-core machine vary up to 2x between
//! runs, instruction counts do not):
//!
//!     cargo build --release --example live_cost
//!     valgrind --tool=callgrind --callgrind-out-file=/tmp/cg target/release/examples/live_cost KIND N
//!
//! One process holds a stub API server (tests/common/stub_apiserver.rs: lists and watches,
//! payloads, the fence, Events) with 200 releases of two revisions each (revision 1 superseded,
//! 2 deployed, re-encoded from a real Helm 4 record), and the guard's live parts assembled as
//! `serve` assembles them (watchers, read-ahead, fence, Events). Once every payload is read ahead
//! it decides N DELETE reviews, each of a release of its own, as the API server sends them:
//! `refusal` deletes the latest deployed revision (D8, with its Event written), `approval`
//! revision 1 (history pruning, D5: confirmed by a fence round). Every run sets up the same,
//! whatever N, so a run's total less the N = 0 run's, divided by N, is the instructions per
//! verdict: the guard's and the stub's together, the API server's side being part of what a
//! verdict costs here.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::sync::atomic::Ordering;
use std::time::Duration;

use helm_guard::admission::{Settings, Webhook, review};
use helm_guard::policy::PolicyConfig;
use helm_guard::release::{Driver, ReleaseKey};
use helm_guard::server::Metrics;
use serde_json::{Value, json};

#[path = "support/records.rs"]
mod records;
#[allow(dead_code, reason = "the tests' stub, of which this tool uses a part")]
#[path = "../tests/common/stub_apiserver.rs"]
mod stub_apiserver;

const RELEASES: usize = 200;
const NAMESPACE: &str = "bench";
const DELETE: &str = "tests/fixtures/admission/02-delete-oldest-and-dryrun-latest/001-validate-delete-secret-sh.helm.release.v1.web.v1.json";

fn release(r: usize) -> String {
    format!("r{r:04}")
}

/// What the stub stores: every release's two revisions, each with the uid and resourceVersion a
/// real API server gives it.
fn stored() -> Vec<Value> {
    let (base, payload) = records::base();
    let mut version = 10;
    let mut records = Vec::new();
    for r in 0..RELEASES {
        for (revision, status) in [(1, "superseded"), (2, "deployed")] {
            let mut record = records::record(&base, &payload, NAMESPACE, &release(r), revision, status);
            version += 1;
            record["metadata"]["uid"] = json!(format!("uid-{r}-{revision}"));
            record["metadata"]["resourceVersion"] = json!(version.to_string());
            records.push(record);
        }
    }
    records
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().expect("usage: live_cost refusal|approval N").clone();
    let revision = match kind.as_str() {
        "refusal" => 2,
        "approval" => 1,
        other => panic!("{other}: refusal or approval"),
    };
    let n: usize = args.get(1).and_then(|n| n.parse().ok()).expect("usage: live_cost refusal|approval N");
    assert!(n <= RELEASES, "at most {RELEASES} verdicts, one per release");
    // The ledger line formatted as in production (JSON), written to a sink.
    let subscriber = helm_guard::server::log_format::json_subscriber(std::io::sink).finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    // One thread: callgrind runs one at a time anyway, and one thread schedules alike every run.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(measure(revision, n));
}

async fn measure(revision: usize, n: usize) {
    let records = stored();
    let stub = stub_apiserver::Stub::new(records.clone());
    let events = stub.events.clone();
    let (server, _watches, _gets) = stub_apiserver::start_stub_app(stub).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(stub_apiserver::kubeconfig(&dir, &server)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let options = helm_guard::live::LiveOptions {
        tombstone_ttl: Duration::from_secs(30),
        claims_namespace: None,
        claim_keep_after_deletion: Duration::from_secs(7),
        fence_namespace: Some("helm-guard".to_owned()),
        read_ahead: true,
        identity: "live-cost".to_owned(),
        emit_events: true,
        recycle_bin: None,
        unlock_abandoned: false,
        policy_reports: None,
    };
    let admission =
        helm_guard::live::admission(client, Settings::new(PolicyConfig::default()), options, &Metrics::new());
    let index = admission.index().clone();
    let key =
        |r: usize| ReleaseKey { driver: Driver::Secret, namespace: NAMESPACE.into(), release: release(r) };
    // Warm: the index ready and every payload read ahead, as a guard that has been serving is.
    let warm = || index.is_ready() && (0..RELEASES).all(|r| index.unverified(&key(r), None).is_empty());
    for _ in 0..3000 {
        if warm() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(warm(), "every payload read ahead within 30 s");

    // The API server's side: every release's review made ahead, whatever N, so that the
    // difference between runs is the verdicts alone.
    let template: Value = serde_json::from_slice(&std::fs::read(DELETE).unwrap()).unwrap();
    let bodies: Vec<Vec<u8>> = (0..RELEASES)
        .map(|r| {
            let name = format!("sh.helm.release.v1.{}.v{revision}", release(r));
            let stored = records.iter().find(|o| o["metadata"]["name"] == name.as_str()).unwrap();
            let mut body = template.clone();
            body["request"]["uid"] = json!(format!("live-cost-{r}"));
            body["request"]["name"] = json!(name);
            body["request"]["namespace"] = json!(NAMESPACE);
            body["request"]["oldObject"] = stored.clone();
            serde_json::to_vec(&body).unwrap()
        })
        .collect();
    let (mut allowed, mut refused) = (0, 0);
    for body in bodies.iter().take(n) {
        let request = review::parse(body).unwrap();
        let reviewed = admission.review(Webhook::Validate, request).await;
        if reviewed.response.allowed {
            allowed += 1;
        } else {
            refused += 1;
        }
        drop(review::encode(reviewed.response));
    }
    let expected = if revision == 1 { (n, 0) } else { (0, n) };
    assert_eq!((allowed, refused), expected, "(allowed, refused) of {n} verdicts");
    // A refusal's Event is part of its cost: wait until each is written.
    if revision == 2 {
        for _ in 0..3000 {
            if events.load(Ordering::SeqCst) >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(events.load(Ordering::SeqCst), n, "one Event per refusal");
    }
    println!("{n} verdicts: {allowed} allowed, {refused} refused");
}
