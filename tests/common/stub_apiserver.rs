//! A stub of the API server that speaks the list/watch protocol over HTTP for release Secrets:
//! lists and watches of metadata, GETs of one Secret, lists of one release, pages of a
//! namespace's records (the read-ahead's), the guard's fence writes (with events held back until
//! the next, a watch that lags). What it asserts of the
//! guard's requests (the watch's selector, the fence's name) is the guard's wire protocol.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub type Watchers = Arc<Mutex<Vec<mpsc::UnboundedSender<Value>>>>;

#[derive(Clone)]
pub struct Stub {
    pub secrets: Arc<Vec<Value>>,
    /// Open watches on Secrets; a test pushes events into them.
    pub secret_watches: Watchers,
    /// Names of the Secrets whose payload the guard was sent (GETs, listings of a release).
    pub gets: Arc<Mutex<Vec<String>>>,
    /// What never answers (an API server in trouble).
    pub hangs: Hangs,
    /// Lists of one release answered so far.
    pub lists: Arc<std::sync::atomic::AtomicUsize>,
    /// Watch events held back until the next fence write (a watch that lags what is stored),
    /// and the resourceVersions handed out.
    pub lagging: Arc<Mutex<Vec<Value>>>,
    pub versions: Arc<std::sync::atomic::AtomicU64>,
    /// Fence writes answered so far.
    pub fences: Arc<std::sync::atomic::AtomicUsize>,
    /// Pages of a namespace's records (the read-ahead's) answered so far.
    pub pages: Arc<std::sync::atomic::AtomicUsize>,
    /// Events created so far (events.k8s.io/v1).
    pub events: Arc<std::sync::atomic::AtomicUsize>,
}

impl Stub {
    /// A stub that stores `secrets`, answers everything, and whose watch lags nothing.
    pub fn new(secrets: Vec<Value>) -> Stub {
        Stub {
            secrets: Arc::new(secrets),
            secret_watches: Arc::default(),
            gets: Arc::default(),
            hangs: Hangs::Nothing,
            lists: Arc::default(),
            lagging: Arc::default(),
            versions: Arc::new(std::sync::atomic::AtomicU64::new(1000)),
            fences: Arc::default(),
            pages: Arc::default(),
            events: Arc::default(),
        }
    }
}

/// Which calls of the guard's a stub API server leaves unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hangs {
    Nothing,
    /// Whatever carries payloads: GETs of single Secrets, listings of one release's, pages of a
    /// namespace's (the read-ahead's).
    Reads,
    /// Lists of one release's Secrets, after the first this many.
    ListsAfter(usize),
}

pub fn metadata_only(object: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": object["metadata"]})
}

pub fn list(items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "100"},
        "items": items,
    })
}

pub async fn version() -> impl IntoResponse {
    axum::Json(json!({
        "major": "1", "minor": "36", "gitVersion": "v1.36.2", "gitCommit": "stub", "gitTreeState": "clean",
        "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"
    }))
}

pub fn is_watch(query: &std::collections::HashMap<String, String>) -> bool {
    query.get("watch").map(String::as_str) == Some("true")
}

/// A watch that stays open and sends what the channel gives.
pub fn watch_stream(receiver: Option<mpsc::UnboundedReceiver<Value>>) -> Body {
    match receiver {
        Some(receiver) => {
            let lines = tokio_stream_from(receiver).map(|event| {
                Ok::<_, std::io::Error>(format!("{}\n", serde_json::to_string(&event).unwrap()))
            });
            Body::from_stream(lines)
        }
        None => Body::from_stream(futures::stream::pending::<Result<String, std::io::Error>>()),
    }
}

pub fn tokio_stream_from(mut receiver: mpsc::UnboundedReceiver<Value>) -> impl futures::Stream<Item = Value> {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

pub async fn secrets(
    State(stub): State<Stub>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> axum::response::Response {
    assert_eq!(query.get("labelSelector").map(String::as_str), Some("owner in (helm,helm-guard-fence)"));
    // Helm selects its records by label alone: a Secret of any type is one.
    assert_eq!(query.get("fieldSelector"), None);
    if is_watch(&query) {
        let (sender, receiver) = mpsc::unbounded_channel();
        stub.secret_watches.lock().unwrap().push(sender);
        return watch_stream(Some(receiver)).into_response();
    }
    // What the watch holds back is not in its list either.
    let lagging: Vec<Value> =
        stub.lagging.lock().unwrap().iter().map(|o| o["metadata"]["name"].clone()).collect();
    let listed = stub.secrets.iter().filter(|s| !lagging.contains(&s["metadata"]["name"]));
    axum::Json(list(listed.map(metadata_only).collect())).into_response()
}

/// A list of one release's Secrets, payloads included, a page at a time (the guard confirming a
/// history before a verdict that rests on it, or reading a release it has not read yet).
pub async fn namespace_secrets(
    State(stub): State<Stub>,
    axum::extract::Path(namespace): axum::extract::Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    let metadata = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("as=PartialObjectMetadataList"));
    let selector = query.get("labelSelector").cloned().unwrap_or_default();
    if selector == "owner=helm" && !metadata {
        return namespace_page(&stub, &namespace, &query).await;
    }
    let release = selector.strip_prefix("owner=helm,name=").expect("the guard lists one release's records");
    if !metadata {
        assert_eq!(
            query.get("limit").map(String::as_str),
            Some("16"),
            "payloads are listed a page at a time"
        );
    }
    let answered = stub.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let items: Vec<Value> = stub
        .secrets
        .iter()
        .filter(|s| {
            s["metadata"]["namespace"] == namespace.as_str() && s["metadata"]["labels"]["name"] == release
        })
        .cloned()
        .collect();
    if !metadata {
        let names = items.iter().filter_map(|s| s["metadata"]["name"].as_str()).map(str::to_owned);
        stub.gets.lock().unwrap().extend(names);
    }
    let hangs = stub.hangs == Hangs::Reads && !metadata;
    if hangs || matches!(stub.hangs, Hangs::ListsAfter(first) if answered >= first) {
        return futures::future::pending().await;
    }
    if metadata {
        return axum::Json(list(items.iter().map(metadata_only).collect())).into_response();
    }
    axum::Json(json!({"apiVersion": "v1", "kind": "SecretList", "metadata": {"resourceVersion": "100"}, "items": items}))
        .into_response()
}

/// A page of a namespace's records, payloads included (the read-ahead's): `limit` of them from
/// the `continue` token on, in name order, as the API server pages a listing.
async fn namespace_page(
    stub: &Stub,
    namespace: &str,
    query: &std::collections::HashMap<String, String>,
) -> axum::response::Response {
    let limit: usize = query.get("limit").expect("payloads are listed a page at a time").parse().unwrap();
    let from: usize = query.get("continue").map_or(0, |token| token.parse().expect("a token this stub gave"));
    let mut records: Vec<&Value> = stub
        .secrets
        .iter()
        .filter(|s| s["metadata"]["namespace"] == namespace && s["metadata"]["labels"]["owner"] == "helm")
        .collect();
    records.sort_by_key(|s| s["metadata"]["name"].as_str().map(str::to_owned));
    let page: Vec<Value> = records.iter().skip(from).take(limit).map(|s| (*s).clone()).collect();
    stub.pages.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let names = page.iter().filter_map(|s| s["metadata"]["name"].as_str()).map(str::to_owned);
    stub.gets.lock().unwrap().extend(names);
    if stub.hangs == Hangs::Reads {
        return futures::future::pending().await;
    }
    let next = if from + limit < records.len() { (from + limit).to_string() } else { String::new() };
    let metadata = json!({"resourceVersion": "100", "continue": next});
    axum::Json(json!({"apiVersion": "v1", "kind": "SecretList", "metadata": metadata, "items": page}))
        .into_response()
}

/// A GET of one Secret, payload included (the guard's on-demand fetch).
pub async fn one_secret(
    State(stub): State<Stub>,
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
) -> axum::response::Response {
    stub.gets.lock().unwrap().push(name.clone());
    if stub.hangs == Hangs::Reads {
        return futures::future::pending().await;
    }
    match stub.secrets.iter().find(|s| s["metadata"]["namespace"] == namespace && s["metadata"]["name"] == name) {
        Some(secret) => axum::Json(secret.clone()).into_response(),
        None => (
            axum::http::StatusCode::NOT_FOUND,
            axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})),
        )
            .into_response(),
    }
}

/// The guard's fence write: answered with a new resourceVersion, and then, in order, the events
/// held back and the fence's own event on every open watch (as a watch cache delivers them).
pub async fn fence(
    State(stub): State<Stub>,
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
) -> axum::response::Response {
    assert_eq!(name, "helm-guard-fence");
    stub.fences.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let version = stub.versions.fetch_add(1, std::sync::atomic::Ordering::SeqCst).to_string();
    let (label, value) = ("owner", "helm-guard-fence");
    let object = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace,
        "labels": {label: value}, "resourceVersion": version}});
    let held: Vec<Value> = std::mem::take(&mut *stub.lagging.lock().unwrap());
    let events: Vec<Value> = held
        .into_iter()
        .map(|object| json!({"type": "ADDED", "object": metadata_only(&object)}))
        .chain([json!({"type": "MODIFIED", "object": metadata_only(&object)})])
        .collect();
    for watch in stub.secret_watches.lock().unwrap().iter() {
        for event in &events {
            let _ = watch.send(event.clone());
        }
    }
    axum::Json(object).into_response()
}

/// An Event written: answered as stored, and counted.
pub async fn event(
    State(stub): State<Stub>,
    axum::Json(mut event): axum::Json<Value>,
) -> axum::response::Response {
    stub.events.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    event["metadata"]["resourceVersion"] = json!("1");
    (axum::http::StatusCode::CREATED, axum::Json(event)).into_response()
}

pub async fn empty(
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> axum::response::Response {
    if is_watch(&query) {
        return watch_stream(None).into_response();
    }
    axum::Json(list(Vec::new())).into_response()
}

pub async fn start_stub(secrets_items: Vec<Value>) -> (String, Watchers) {
    let (server, watches, _) = start_stub_counting(secrets_items).await;
    (server, watches)
}

pub async fn start_stub_counting(secrets_items: Vec<Value>) -> (String, Watchers, Arc<Mutex<Vec<String>>>) {
    start_stub_with(secrets_items, Hangs::Nothing).await
}

pub async fn start_stub_with(
    secrets_items: Vec<Value>,
    hangs: Hangs,
) -> (String, Watchers, Arc<Mutex<Vec<String>>>) {
    start_stub_app(Stub { hangs, ..Stub::new(secrets_items) }).await
}

pub async fn start_stub_app(stub: Stub) -> (String, Watchers, Arc<Mutex<Vec<String>>>) {
    let (watches, gets) = (stub.secret_watches.clone(), stub.gets.clone());
    let app = Router::new()
        .route("/version", get(version))
        .route("/api/v1/secrets", get(secrets))
        .route("/api/v1/configmaps", get(empty))
        .route("/api/v1/namespaces", get(empty))
        .route("/api/v1/namespaces/{namespace}/secrets", get(namespace_secrets))
        .route("/api/v1/namespaces/{namespace}/secrets/{name}", get(one_secret).patch(fence))
        .route("/apis/events.k8s.io/v1/namespaces/{namespace}/events", axum::routing::post(event))
        .with_state(stub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), watches, gets)
}

pub fn kubeconfig(dir: &tempfile::TempDir, server: &str) -> std::path::PathBuf {
    let path = dir.path().join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster:\n    server: {server}\ncontexts:\n- name: stub\n  context:\n    cluster: stub\n    user: stub\ncurrent-context: stub\nusers:\n- name: stub\n  user: {{}}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}
