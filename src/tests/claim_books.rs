//! Replicas that agree, in CI: two and three in-process replicas, each with its own index and its
//! own claim book, against a stub of the API server's Leases (list, watch, server-side apply)
//! whose watches lag by a random time each (in resourceVersion order, as a watch keeps it) and
//! whose writes sometimes fail. Random pairs of conflicting deletions (two deployed revisions of
//! one release, each harmless alone) reach two replicas at once: never both approved. And a book
//! in a format this version cannot read refuses every agreement, "retry", until it is gone.
//! (tests/e2e_replicas.rs races replicas on a real API server.)

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::*;
use futures::StreamExt;
use helm_guard::admission::{Admission, LiveParts, Settings};
use helm_guard::cluster::DeleteCoordinator;
use helm_guard::cluster::claim_books::BookCoordinator;
use helm_guard::cluster::connect::{ClusterAccess, connect};
use helm_guard::policy::PolicyConfig;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The Leases of one namespace as an API server keeps them: objects, a resourceVersion counter,
/// every event so far (a watch from a version replays what came after it), open watches.
#[derive(Default)]
struct Leases {
    objects: BTreeMap<String, Value>,
    version: u64,
    events: Vec<(u64, Value)>,
    watches: Vec<mpsc::UnboundedSender<Value>>,
}

#[derive(Clone)]
struct Stub {
    leases: Arc<Mutex<Leases>>,
    /// One write in this many fails (500), unapplied; 0: none.
    fail_one_in: u64,
    seed: Arc<Mutex<fastrand::Rng>>,
}

impl Stub {
    fn store(&self, name: &str, mut object: Value, kind: &str) -> Value {
        let mut leases = self.leases.lock().unwrap();
        leases.version += 1;
        let version = leases.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        object["metadata"]["name"] = json!(name);
        object["apiVersion"] = json!("coordination.k8s.io/v1");
        object["kind"] = json!("Lease");
        leases.objects.insert(name.to_owned(), object.clone());
        let event = json!({"type": kind, "object": object});
        leases.events.push((version, event.clone()));
        leases.watches.retain(|watch| watch.send(event.clone()).is_ok());
        object
    }

    fn fails(&self) -> bool {
        self.fail_one_in > 0 && self.seed.lock().unwrap().u64(..self.fail_one_in) == 0
    }
}

fn status(code: StatusCode, reason: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code.as_u16()});
    (code, axum::Json(body)).into_response()
}

async fn list_or_watch(
    State(stub): State<Stub>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let leases = stub.leases.lock().unwrap();
    if query.get("watch").map(String::as_str) != Some("true") {
        let items: Vec<Value> = leases.objects.values().cloned().collect();
        let list = json!({"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"resourceVersion": leases.version.to_string()}, "items": items});
        return axum::Json(list).into_response();
    }
    let from: u64 = query.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let (sender, mut receiver) = mpsc::unbounded_channel();
    for (_, event) in leases.events.iter().filter(|(version, _)| *version > from) {
        sender.send(event.clone()).unwrap();
    }
    drop(leases);
    stub.leases.lock().unwrap().watches.push(sender);
    // Each watch lags by its own random delays, keeping the order of events.
    let mut rng = fastrand::Rng::with_seed(stub.seed.lock().unwrap().u64(..));
    let lines = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).then(move |event| {
        let lag = Duration::from_millis(rng.u64(..25));
        async move {
            tokio::time::sleep(lag).await;
            Ok::<_, std::io::Error>(format!("{}\n", serde_json::to_string(&event).unwrap()))
        }
    });
    Body::from_stream(lines).into_response()
}

/// A server-side apply of a whole Lease: created when absent, else its fields laid over it (the
/// guard applies the same fields each time, so a merge is what the API server makes of it).
async fn apply(
    State(stub): State<Stub>,
    Path((_, name)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert_eq!(
        content_type, "application/apply-patch+yaml",
        "the guard writes its books with a server-side apply"
    );
    if stub.fails() {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
    }
    let applied: Value = serde_json::from_str(&body).unwrap();
    let existing = stub.leases.lock().unwrap().objects.get(&name).cloned();
    match existing {
        None => (StatusCode::CREATED, axum::Json(stub.store(&name, applied, "ADDED"))).into_response(),
        Some(mut object) => {
            json_patch::merge(&mut object, &applied);
            axum::Json(stub.store(&name, object, "MODIFIED")).into_response()
        }
    }
}

async fn start(stub: Stub) -> String {
    let leases = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases";
    let version = json!({"major": "1", "minor": "36", "gitVersion": "v1.36.2", "platform": "linux/amd64"});
    let app = Router::new()
        .route("/version", get(move || std::future::ready(axum::Json(version.clone()))))
        .route(leases, get(list_or_watch))
        .route(&format!("{leases}/{{name}}"), axum::routing::patch(apply))
        .with_state(stub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn client(server: &str, dir: &tempfile::TempDir) -> kube::Client {
    let path = dir.path().join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster:\n    server: {server}\ncontexts:\n- name: stub\n  context:\n    cluster: stub\n    user: stub\ncurrent-context: stub\nusers:\n- name: stub\n  user: {{}}\n"
    );
    std::fs::write(&path, text).unwrap();
    connect(&ClusterAccess { kubeconfig: Some(path), context: None }).await.unwrap()
}

/// `releases` releases, each with revisions 1 and 2 deployed and 3 failed: deleting 1 or 2 is
/// harmless alone (D5), both together leave nothing to roll back to.
fn records(releases: usize) -> Vec<Value> {
    let base = web(&[(1, "deployed"), (2, "deployed"), (3, "failed")]);
    (0..releases).flat_map(|i| base.iter().map(move |r| as_release(r, &format!("rel-{i}")))).collect()
}

/// A replica: its own index of `records`, its own claim book in the stub.
async fn replica(server: &str, dir: &tempfile::TempDir, name: &str, records: &[Value]) -> Admission {
    let admission = common::guard::snapshot_admission(records);
    let leases = kube::Api::namespaced(client(server, dir).await, "helm-guard");
    let tasks = Arc::new(helm_guard::tasks::Tasks::default());
    let books = BookCoordinator::start(
        leases,
        name.to_owned(),
        Duration::from_secs(30),
        admission.index().clone(),
        Duration::from_secs(10),
        &tasks,
    );
    let live = LiveParts {
        coordinator: Some(Arc::new(books) as Arc<dyn DeleteCoordinator>),
        ..LiveParts::default()
    };
    common::guard::snapshot_admission_with(records, Settings::new(PolicyConfig::default()), live)
        .with_tasks(tasks)
}

async fn verdict(admission: &Admission, review: &Value) -> (bool, String) {
    let body = serde_json::to_vec(review).unwrap();
    let request = helm_guard::admission::review::parse(&body).unwrap();
    let reviewed = admission.review(helm_guard::admission::Webhook::Validate, request).await;
    (
        reviewed.response.allowed,
        reviewed.response.audit_annotations.get("reason").cloned().unwrap_or_default(),
    )
}

/// Random, seeded: for each release, two replicas chosen at random get one of its two deployed
/// revisions each, at once. Never both approved; over the run, approvals happen (the books are
/// written and read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_deletions_at_two_of_several_replicas_are_never_both_approved() {
    const RELEASES: usize = 24;
    for (seed, replicas) in [(1_u64, 2_usize), (2, 3), (3, 3)] {
        let stub = Stub {
            leases: Arc::default(),
            fail_one_in: 8,
            seed: Arc::new(Mutex::new(fastrand::Rng::with_seed(seed))),
        };
        let server = start(stub).await;
        let dir = tempfile::tempdir().unwrap();
        let records = records(RELEASES);
        let mut guards = Vec::new();
        for name in ["replica-a", "replica-b", "replica-c"].iter().take(replicas) {
            guards.push(Arc::new(replica(&server, &dir, name, &records).await));
        }
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut approved = 0;
        for release in 0..RELEASES {
            let first = rng.usize(..replicas);
            let second = (first + 1 + rng.usize(..replicas - 1)) % replicas;
            let (v1, v2) = (&records[release * 3], &records[release * 3 + 1]);
            let (a, b) = (guards[first].clone(), guards[second].clone());
            let (review_a, review_b) = (delete_review(v1), delete_review(v2));
            let one = tokio::spawn(async move { verdict(&a, &review_a).await });
            let two = tokio::spawn(async move { verdict(&b, &review_b).await });
            let (one, two) = (one.await.unwrap(), two.await.unwrap());
            assert!(
                !(one.0 && two.0),
                "seed {seed}, {replicas} replicas, rel-{release}: both approved ({one:?}, {two:?})"
            );
            for refused in [&one, &two].into_iter().filter(|v| !v.0) {
                assert!(
                    ["last-deployed-revision", "coordination-unavailable"].contains(&refused.1.as_str()),
                    "seed {seed}: {refused:?}"
                );
            }
            approved += usize::from(one.0) + usize::from(two.0);
        }
        assert!(approved > RELEASES / 2, "seed {seed}: {approved} of {RELEASES} releases had an approval");
    }
}

/// A book of another format (a newer version's, or garbage) in the namespace: this version
/// cannot read its claims, so it refuses every approval that needs agreement, "retry", rather
/// than read it as empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_book_this_version_cannot_read_refuses_agreement() {
    let stub = Stub {
        leases: Arc::default(),
        fail_one_in: 0,
        seed: Arc::new(Mutex::new(fastrand::Rng::with_seed(7))),
    };
    let server = start(stub.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let records = records(2);
    let guard = replica(&server, &dir, "replica-a", &records).await;
    // Agreement works first (the books' watch is up)...
    let agreed = common::eventually(Duration::from_secs(10), || async {
        verdict(&guard, &delete_review(&records[0])).await == (true, "history-pruning".to_owned())
    })
    .await;
    assert!(agreed, "an approval that needs agreement, agreed");
    // ... then a newer version's book appears.
    let newer = json!({"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "helm-guard", "helm-guard.io/lease": "claim-book"},
        "annotations": {"helm-guard.io/claims-format": "2", "helm-guard.io/deletions": "{}"}}});
    stub.store("helm-guard-claims-newer", newer, "ADDED");
    let refused = common::eventually(Duration::from_secs(10), || async {
        verdict(&guard, &delete_review(&records[3])).await == (false, "coordination-unavailable".to_owned())
    })
    .await;
    assert!(refused, "an approval that needs agreement is refused while the book is unreadable");
}
