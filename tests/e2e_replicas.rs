//! Replicas that agree, on a real API server: two `helm-guard serve` processes watch the same
//! cluster and agree approvals of deletions through Leases. Ignored unless asked for, like
//! tests/e2e.rs: `cargo test --test e2e_suites e2e_replicas:: -- --ignored`, against the cluster in KUBECONFIG.
//!
//! For many releases whose revisions 1 and 2 are both `deployed` and 3 `failed`, the two guards
//! receive, at the same instant, "delete revision 1" and "delete revision 2": each harmless
//! alone, together they leave the release nothing to roll back to. Never both approved. It also
//! measures what the agreement costs an approved deletion (BENCHMARKS.md).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::guard::HttpsClient;
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const RELEASES: usize = 40;

/// A `helm-guard serve` process and how to reach it.
struct GuardProcess {
    child: Child,
    https: HttpsClient,
    metrics: String,
    _certs: tempfile::TempDir,
}

impl Drop for GuardProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(replica: &str, lease_namespace: &str, extra: &[&str]) -> GuardProcess {
    start_binary(env!("CARGO_BIN_EXE_helm-guard"), replica, lease_namespace, extra)
}

/// `start` with another build of the guard (the previous version's, for a rolling upgrade). The
/// guard's namespace is passed as `--lease-namespace`, the name every version accepts.
fn start_binary(binary: &str, replica: &str, lease_namespace: &str, extra: &[&str]) -> GuardProcess {
    let certs = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary)
        .args(["serve", "--dev-certs", certs.path().to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args([
            "--metrics-listen",
            "127.0.0.1:0",
            "--lease-namespace",
            lease_namespace,
            "--replica-id",
            replica,
        ])
        .args(["--shutdown-delay", "0s"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    let serving: Value = lines
        .by_ref()
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .find(|event| event["message"] == "serving")
        .unwrap_or_else(|| panic!("guard {replica} did not start"));
    // Keep reading its log, so that a full pipe never stalls it.
    std::thread::spawn(move || lines.for_each(drop));
    let ca = std::fs::read_to_string(certs.path().join("ca.crt")).unwrap();
    let https = HttpsClient::new(serving["addr"].as_str().unwrap().parse().unwrap(), &ca);
    let guard = GuardProcess {
        child,
        https,
        metrics: serving["metrics_addr"].as_str().unwrap().to_owned(),
        _certs: certs,
    };
    let started = Instant::now();
    while !http_get(&guard.metrics, "/readyz").starts_with("HTTP/1.1 200") {
        assert!(started.elapsed() < Duration::from_secs(30), "guard {replica} not ready within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    guard
}

fn http_get(addr: &str, path: &str) -> String {
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else { return String::new() };
    let _ = write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// The verdict on a DELETE of `record`: (allowed, reason).
async fn delete(guard: &HttpsClient, record: &Value) -> (bool, String) {
    let (status, body) = guard.post("/validate", serde_json::to_vec(&delete_review(record)).unwrap()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let review: Value = serde_json::from_slice(&body).unwrap();
    let response = &review["response"];
    (
        response["allowed"].as_bool().unwrap(),
        response["auditAnnotations"]["reason"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server (the cluster in KUBECONFIG): cargo test --test e2e_suites e2e_replicas:: -- --ignored"]
async fn two_replicas_never_approve_deletions_that_together_orphan_a_release() {
    let client = Client::try_default().await.expect("a cluster in KUBECONFIG");
    let suffix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 1_000_000;
    // The one way of agreeing: claim books read from a watch.
    {
        let ns = format!("helm-guard-e2e-replicas-{suffix}");
        let namespaces = Api::<Namespace>::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
        let checks = std::panic::AssertUnwindSafe(checks(client.clone(), ns.clone()));
        let outcome = futures::FutureExt::catch_unwind(checks).await;
        let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

async fn checks(client: Client, ns: String) {
    // The records exist before the guards start: their first lists hold them.
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let stored = conflicting_pairs(&secrets, &ns, "rel", RELEASES).await;
    // For the cost: a release whose revision 1 may go (D5) as often as asked, agreed first: it
    // is deployed, and so is revision 2 (Helm's pruning of a superseded revision needs none).
    let bench = create_release(&secrets, &ns, "bench", &[(1, "deployed"), (2, "deployed")]).await;

    // Claims (and the sweep) on a short clock, so that the sweep is seen within the test.
    let ttl = ["--tombstone-ttl", "3s"];
    let (a, b) = (start("replica-a", &ns, &ttl), start("replica-b", &ns, &ttl));
    race(&a.https, &b.https, &stored, "two replicas").await;
    let leases = Api::<Lease>::namespaced(client.clone(), &ns);
    let written =
        leases.list(&ListParams::default().labels("app.kubernetes.io/managed-by=helm-guard")).await.unwrap();
    {
        // One claim book per replica; each approval agreed left a claim on its release.
        assert!(written.items.len() <= 2, "one book per replica: {}", written.items.len());
        let claimed: std::collections::BTreeSet<String> = written
            .items
            .iter()
            .flat_map(|book| {
                let text = &book.metadata.annotations.as_ref().unwrap()["helm-guard.io/deletions"];
                let claims: Vec<Value> = serde_json::from_str(text).unwrap();
                claims.into_iter().map(|c| c["release"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
            })
            .collect();
        // The claims of the first races may have expired (3 s); the last one's holds.
        let last = format!("secret {ns}/rel-{}", RELEASES - 1);
        assert!(claimed.contains(&last), "the last agreed approval's claim is in a book: {claimed:?}");
        assert!(claimed.iter().all(|release| release.starts_with(&format!("secret {ns}/rel-"))));
    }

    // What an approved deletion costs: the same approved DELETE, sequentially, to a replica of
    // two and to a single replica (the same code, with no other book).
    let single = start("single", &ns, &[]);
    let fresh = &bench[0];
    let mut report = String::new();
    for (name, guard) in [("two replicas", &a), ("one replica", &single)] {
        let mut sender = guard.https.connect().await;
        let mut took = Vec::new();
        for _ in 0..200 {
            let body = serde_json::to_vec(&delete_review(fresh)).unwrap();
            let started = Instant::now();
            let (_, answer) = common::guard::send(&mut sender, "POST", "/validate", body).await;
            took.push(started.elapsed());
            let review: Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(review["response"]["auditAnnotations"]["reason"], "history-pruning", "{name}");
        }
        took.sort();
        report += &format!(
            "approved DELETE, {name}: p50 {:?}, p99 {:?}\n",
            took[took.len() / 2],
            took[took.len() * 99 / 100]
        );
    }
    let refusal = delete(&a.https, &bench[1]).await;
    assert_eq!(refusal, (false, "latest-deployed-revision".to_owned()));
    eprintln!("{report}");

    // Once every claim has expired, the sweep deletes the Leases.
    let swept = eventually(Duration::from_secs(60), || async {
        let ours = ListParams::default().labels("app.kubernetes.io/managed-by=helm-guard");
        leases.list(&ours).await.unwrap().items.is_empty()
    })
    .await;
    assert!(swept, "the expired Leases were swept");
}

/// Sends each pair's two deletions to the two guards at the same instant (the first of a pair to
/// `a` on even pairs, to `b` on odd ones): never both approved, and one always (each alone is
/// harmless, so refusing both would refuse what Helm may do), the other refused by D4.
async fn race(a: &HttpsClient, b: &HttpsClient, pairs: &[[Value; 2]], step: &str) {
    for (i, [v1, v2]) in pairs.iter().enumerate() {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let send = |guard: HttpsClient, record: Value| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let body = serde_json::to_vec(&delete_review(&record)).unwrap();
                let mut sender = guard.connect().await;
                barrier.wait().await;
                let (_, answer) = common::guard::send(&mut sender, "POST", "/validate", body).await;
                let review: Value = serde_json::from_slice(&answer).unwrap();
                let response = &review["response"];
                (
                    response["allowed"].as_bool().unwrap(),
                    response["auditAnnotations"]["reason"].as_str().unwrap().to_owned(),
                )
            })
        };
        let (to_first, to_second) = if i % 2 == 0 { (a, b) } else { (b, a) };
        let (first, second) = (send(to_first.clone(), v1.clone()), send(to_second.clone(), v2.clone()));
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        let release = v1["metadata"]["labels"]["name"].as_str().unwrap_or_default();
        assert!(
            !(first.0 && second.0),
            "{step}, release {release}: both deletions approved: {first:?} {second:?}"
        );
        assert!(
            first.0 || second.0,
            "{step}, release {release}: one of them is harmless: {first:?} {second:?}"
        );
        let refused = if first.0 { &second } else { &first };
        assert_eq!(refused.1, "last-deployed-revision", "{step}, release {release}: {refused:?}");
    }
}

/// Creates `count` releases named `{prefix}-N` whose revisions 1 and 2 are both deployed and 3
/// failed, and returns each one's records 1 and 2 as stored.
async fn conflicting_pairs(secrets: &Api<Secret>, ns: &str, prefix: &str, count: usize) -> Vec<[Value; 2]> {
    let mut stored = Vec::new();
    for i in 0..count {
        let revisions = [(1, "deployed"), (2, "deployed"), (3, "failed")];
        let created = create_release(secrets, ns, &format!("{prefix}-{i}"), &revisions).await;
        stored.push([created[0].clone(), created[1].clone()]);
    }
    stored
}

/// Creates the records of release `name` in `ns`, one per (revision, status), and returns them
/// as stored (with their kind, as an AdmissionReview carries them).
async fn create_release(
    secrets: &Api<Secret>,
    ns: &str,
    name: &str,
    revisions: &[(u32, &str)],
) -> Vec<Value> {
    let mut base = helm4_secret();
    base["metadata"]["namespace"] = json!(ns);
    let mut created = Vec::new();
    for record in history(&base, revisions).iter().map(|r| as_release(r, name)) {
        let secret: Secret = serde_json::from_value(record).unwrap();
        let mut value =
            serde_json::to_value(secrets.create(&PostParams::default(), &secret).await.unwrap()).unwrap();
        value["kind"] = json!("Secret");
        value["apiVersion"] = json!("v1");
        created.push(value);
    }
    created
}

/// A rolling upgrade of the guard, as a Deployment does it: two replicas of the previous version
/// (`HELM_GUARD_PREVIOUS_BIN`, the binary built from the commit CONTRIBUTING.md names), replaced
/// one at a time by this build, with conflicting pairs of deletions racing to both replicas at
/// each step (old and old, new and old in both directions, new and new). The two versions agree
/// through the same claim books: never both of a pair approved, never both refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server and HELM_GUARD_PREVIOUS_BIN: cargo test --test e2e_suites e2e_replicas:: -- --ignored"]
async fn a_rolling_upgrade_from_the_previous_version_keeps_the_replicas_agreeing() {
    let previous = std::env::var("HELM_GUARD_PREVIOUS_BIN")
        .expect("HELM_GUARD_PREVIOUS_BIN: the previous version's helm-guard binary (CONTRIBUTING.md)");
    let client = Client::try_default().await.expect("a cluster in KUBECONFIG");
    let suffix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 1_000_000;
    let ns = format!("helm-guard-e2e-upgrade-{suffix}");
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .unwrap();
    let steps = std::panic::AssertUnwindSafe(async {
        let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
        let pairs = [
            conflicting_pairs(&secrets, &ns, "old-old", 12).await,
            conflicting_pairs(&secrets, &ns, "new-old", 12).await,
            conflicting_pairs(&secrets, &ns, "new-new", 12).await,
        ];
        let version = |binary: &str| {
            String::from_utf8(Command::new(binary).arg("--version").output().unwrap().stdout).unwrap()
        };
        eprintln!("from {}to   {}", version(&previous), version(env!("CARGO_BIN_EXE_helm-guard")));
        let old_a = start_binary(&previous, "replica-a", &ns, &[]);
        let old_b = start_binary(&previous, "replica-b", &ns, &[]);
        race(&old_a.https, &old_b.https, &pairs[0], "previous and previous").await;
        // The Deployment replaces replica a: the new one is ready, then the old one stops.
        let new_a = start("replica-a2", &ns, &[]);
        drop(old_a);
        race(&new_a.https, &old_b.https, &pairs[1], "new and previous").await;
        let new_b = start("replica-b2", &ns, &[]);
        drop(old_b);
        race(&new_a.https, &new_b.https, &pairs[2], "new and new").await;
    });
    let outcome = futures::FutureExt::catch_unwind(steps).await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
