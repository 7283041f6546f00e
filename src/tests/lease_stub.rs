//! A stub of the API server's Leases in one namespace (list, watch, merge patch, create), for the
//! claim books that ship to run against in process: every write kept with its resourceVersion,
//! every watch replaying what came after its version, each watch lagging by a random time of its
//! own (in resourceVersion order, as a watch keeps it), and writes that fail when asked.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use helm_guard::cluster::DeleteCoordinator;
use helm_guard::cluster::claim_books::BookCoordinator;
use helm_guard::cluster::connect::{ClusterAccess, connect};
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

/// The stub's state, shared by its handlers and the test.
#[derive(Clone)]
pub(super) struct Stub {
    leases: Arc<Mutex<Leases>>,
    /// One write in this many fails (500), unapplied; 0: none; 1: every one.
    fail_one_in: u64,
    /// The longest a watch event is held back, in milliseconds.
    max_lag_ms: u64,
    seed: Arc<Mutex<fastrand::Rng>>,
    /// Writes applied.
    writes: Arc<AtomicUsize>,
}

impl Stub {
    /// Stores `object` as the Lease `name`, as a write would, and tells the watches (`kind`:
    /// `ADDED` or `MODIFIED`).
    pub(super) fn store(&self, name: &str, mut object: Value, kind: &str) -> Value {
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
    let max_lag = stub.max_lag_ms;
    let lines = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).then(move |event| {
        let lag = Duration::from_millis(rng.u64(..=max_lag));
        async move {
            tokio::time::sleep(lag).await;
            Ok::<_, std::io::Error>(format!("{}\n", serde_json::to_string(&event).unwrap()))
        }
    });
    Body::from_stream(lines).into_response()
}

/// A merge patch of a Lease, as the guard writes its book: its fields laid over the Lease there,
/// 404 when there is none.
async fn patch(
    State(stub): State<Stub>,
    Path((_, name)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert_eq!(content_type, "application/merge-patch+json", "the guard writes its book with a merge patch");
    if stub.fails() {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
    }
    let patch: Value = serde_json::from_str(&body).unwrap();
    let existing = stub.leases.lock().unwrap().objects.get(&name).cloned();
    let Some(mut object) = existing else { return status(StatusCode::NOT_FOUND, "NotFound") };
    stub.writes.fetch_add(1, Ordering::SeqCst);
    json_patch::merge(&mut object, &patch);
    axum::Json(stub.store(&name, object, "MODIFIED")).into_response()
}

/// A Lease created (the guard's first write of its book): 409 when one has the name.
async fn create(State(stub): State<Stub>, body: String) -> Response {
    if stub.fails() {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
    }
    let object: Value = serde_json::from_str(&body).unwrap();
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    if stub.leases.lock().unwrap().objects.contains_key(&name) {
        return status(StatusCode::CONFLICT, "AlreadyExists");
    }
    stub.writes.fetch_add(1, Ordering::SeqCst);
    (StatusCode::CREATED, axum::Json(stub.store(&name, object, "ADDED"))).into_response()
}

async fn serve(stub: Stub) -> String {
    let leases = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases";
    let version = json!({"major": "1", "minor": "36", "gitVersion": "v1.36.2", "platform": "linux/amd64"});
    let app = Router::new()
        .route("/version", get(move || std::future::ready(axum::Json(version.clone()))))
        .route(leases, get(list_or_watch).post(create))
        .route(&format!("{leases}/{{name}}"), axum::routing::patch(patch))
        .with_state(stub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn client(server: &str, dir: &std::path::Path) -> kube::Client {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster:\n    server: {server}\ncontexts:\n- name: stub\n  context:\n    cluster: stub\n    user: stub\ncurrent-context: stub\nusers:\n- name: stub\n  user: {{}}\n"
    );
    std::fs::write(&path, text).unwrap();
    connect(&ClusterAccess { kubeconfig: Some(path), context: None }).await.unwrap()
}

/// The stub, served on a port of its own.
pub(super) struct LeaseServer {
    pub(super) stub: Stub,
    url: String,
    dir: tempfile::TempDir,
}

impl LeaseServer {
    /// Serves a namespace of no Leases: one write in `fail_one_in` fails (0: none; 1: all), each
    /// watch event is held back up to `max_lag_ms`, the randomness seeded with `seed`.
    pub(super) async fn start(seed: u64, fail_one_in: u64, max_lag_ms: u64) -> LeaseServer {
        let stub = Stub {
            leases: Arc::default(),
            fail_one_in,
            max_lag_ms,
            seed: Arc::new(Mutex::new(fastrand::Rng::with_seed(seed))),
            writes: Arc::default(),
        };
        let url = serve(stub.clone()).await;
        LeaseServer { stub, url, dir: tempfile::tempdir().unwrap() }
    }

    /// The claim book of replica `name`, as `serve` starts it: claims for 30 s, dropped 10 s
    /// after `index` shows their deletion; its watch and rounds in `tasks`.
    pub(super) async fn book(
        &self,
        name: &str,
        index: Arc<helm_guard::cluster::ReleaseIndex>,
        tasks: &helm_guard::tasks::Tasks,
    ) -> Arc<dyn DeleteCoordinator> {
        let leases = kube::Api::namespaced(client(&self.url, self.dir.path()).await, "helm-guard");
        let ttl = Duration::from_secs(30);
        Arc::new(BookCoordinator::start(leases, name.to_owned(), ttl, index, Duration::from_secs(10), tasks))
    }

    /// The writes applied so far (failed ones not counted).
    pub(super) fn writes(&self) -> usize {
        self.stub.writes.load(Ordering::SeqCst)
    }
}
