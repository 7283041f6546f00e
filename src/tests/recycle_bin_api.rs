//! The recycle bin's API calls against a stub API server that keeps Secrets as a real one does
//! (`stringData` folded into `data`, a name taken refused with 409, a quota's 403): the copy
//! written is the record back, a retried copy counts as kept, a refusal is said, and the sweep
//! holds the bin to its bounds. (No Kubernetes API server runs on the CI machines;
//! tests/e2e_recycle.rs covers a real one.)

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use common::*;
use helm_guard::recycle_bin::api::{ApiRecycleBin, BinError, BinStats, RecycleBin, sweep};
use helm_guard::recycle_bin::copy::{BinBounds, Eviction, Keeping, RecycledCopy};
use helm_guard::release::Record;
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Stub {
    secrets: Arc<Mutex<Vec<Value>>>,
    /// Refuse creates as a full ResourceQuota does.
    quota_full: Arc<std::sync::atomic::AtomicBool>,
    /// Never answer a create (an API server in trouble).
    hang: Arc<std::sync::atomic::AtomicBool>,
    /// Listings served (the sweep's).
    lists: Arc<std::sync::atomic::AtomicUsize>,
    /// The release records stored (outside the bin's namespace), by namespace and name.
    records: Arc<Mutex<Vec<Value>>>,
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
        "code": code.as_u16(), "message": message});
    (code, axum::Json(body)).into_response()
}

async fn create(
    State(stub): State<Stub>,
    Path(namespace): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if stub.hang.load(std::sync::atomic::Ordering::SeqCst) {
        return futures::future::pending().await;
    }
    let mut secret: Value = serde_json::from_slice(&body).unwrap();
    let name = secret["metadata"]["name"].as_str().unwrap().to_owned();
    if stub.quota_full.load(std::sync::atomic::Ordering::SeqCst) {
        let message = format!(
            "secrets \"{name}\" is forbidden: exceeded quota: bin, requested: secrets=1, used: secrets=0, limited: secrets=0"
        );
        return status(StatusCode::FORBIDDEN, "Forbidden", &message);
    }
    let mut secrets = stub.secrets.lock().unwrap();
    if secrets.iter().any(|s| s["metadata"]["name"] == name.as_str()) {
        return status(StatusCode::CONFLICT, "AlreadyExists", &format!("secrets \"{name}\" already exists"));
    }
    assert_eq!(secret["metadata"]["namespace"], namespace.as_str());
    // What the API server stores: stringData folded into data, as base64.
    let folded: Vec<(String, Value)> = secret["stringData"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            (k.clone(), json!(base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap())))
        })
        .collect();
    let object = secret.as_object_mut().unwrap();
    object.remove("stringData");
    let data = object.entry("data").or_insert(json!({}));
    for (key, value) in folded {
        data[key] = value;
    }
    secrets.push(secret.clone());
    (StatusCode::CREATED, axum::Json(secret)).into_response()
}

async fn list(State(stub): State<Stub>) -> Response {
    stub.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let items: Vec<Value> = stub
        .secrets
        .lock()
        .unwrap()
        .iter()
        .map(|s| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": s["metadata"]}))
        .collect();
    axum::Json(json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "1"}, "items": items}))
    .into_response()
}

/// A GET of one Secret: a record's (what the bin checks before a copy), or a copy's.
async fn read(State(stub): State<Stub>, Path((namespace, name)): Path<(String, String)>) -> Response {
    let records = stub.records.lock().unwrap();
    let copies = stub.secrets.lock().unwrap();
    let found = records
        .iter()
        .chain(copies.iter())
        .find(|s| s["metadata"]["name"] == name.as_str() && s["metadata"]["namespace"] == namespace.as_str());
    match found {
        Some(object) => axum::Json(object.clone()).into_response(),
        None => status(StatusCode::NOT_FOUND, "NotFound", &format!("secrets \"{name}\" not found")),
    }
}

async fn remove(State(stub): State<Stub>, Path((_, name)): Path<(String, String)>) -> Response {
    let mut secrets = stub.secrets.lock().unwrap();
    let Some(at) = secrets.iter().position(|s| s["metadata"]["name"] == name.as_str()) else {
        return status(StatusCode::NOT_FOUND, "NotFound", "not found");
    };
    let gone = secrets.remove(at);
    axum::Json(gone).into_response()
}

async fn start() -> (kube::Client, Stub) {
    let stub = Stub::default();
    let app = Router::new()
        .route("/api/v1/namespaces/{namespace}/secrets", get(list).post(create))
        .route("/api/v1/namespaces/{namespace}/secrets/{name}", get(read).delete(remove))
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    (kube::Client::try_from(config).unwrap(), stub)
}

fn bin(client: &kube::Client) -> Arc<ApiRecycleBin> {
    Arc::new(ApiRecycleBin {
        client: client.clone(),
        namespace: "helm-guard".into(),
        stats: BinStats::default(),
        stored: Arc::new(tokio::sync::Notify::new()),
    })
}

/// Revision `revision` of web, as a real Helm 4 record with its own uid, stored.
fn record(stub: &Stub, revision: u32) -> Record {
    let mut object = web(&[(revision, "deployed")]).remove(0);
    object["metadata"]["uid"] = json!(format!("uid-{revision}"));
    let record = Record::from_object(&object, None).unwrap().unwrap();
    stub.stores(&record);
    record
}

impl Stub {
    /// Stores `record` as the API server holds it.
    fn stores(&self, record: &Record) {
        let metadata = json!({"name": record.object_name, "namespace": record.id.key.namespace,
            "uid": record.uid, "resourceVersion": record.resource_version, "labels": record.labels,
            "annotations": record.annotations});
        let payload = record.payload.as_deref().map(|p| std::str::from_utf8(p).unwrap());
        let mut data = json!(record.other_data);
        data["release"] = json!(payload);
        self.records.lock().unwrap().push(json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
            "type": record.secret_type, "data": data}));
    }
}

/// Keeps a copy as a decision does, within 2 s.
async fn keep(bin: &Arc<ApiRecycleBin>, record: Record, at: i64) -> Result<(), BinError> {
    keep_within(bin, record, at, Duration::from_secs(2)).await
}

async fn keep_within(
    bin: &Arc<ApiRecycleBin>,
    record: Record,
    at: i64,
    deadline: Duration,
) -> Result<(), BinError> {
    let keeping = Keeping { reason: "break-glass", requester: "alice", at, readable: true };
    bin.keep(&record, &keeping, Instant::now() + deadline).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_copy_reads_back_as_the_record_and_a_retry_counts_as_kept() {
    let (client, stub) = start().await;
    let bin = bin(&client);
    let original = record(&stub, 3);
    keep(&bin, original.clone(), 1_800_000_000).await.unwrap();
    keep(&bin, original.clone(), 1_800_000_005)
        .await
        .expect("the same object at the same version: already kept");
    let stored = stub.secrets.lock().unwrap().clone();
    assert_eq!(stored.len(), 1);
    let meta = serde_json::from_value(stored[0]["metadata"].clone()).unwrap();
    let data = stored[0]["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (k.clone(), base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap())
        })
        .collect();
    let copy = RecycledCopy::read(&meta, &data).unwrap();
    let back = Record::from_object(&copy.original().unwrap(), None).unwrap().unwrap();
    assert_eq!((back.payload, back.labels), (original.payload, original.labels));
    assert_eq!(bin.stats.kept.get(), 2);

    stub.quota_full.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = keep(&bin, record(&stub, 4), 1_800_000_010).await.unwrap_err();
    assert!(
        matches!(refused, BinError::Api(_)) && refused.to_string().contains("exceeded quota"),
        "{refused}"
    );
    assert_eq!(bin.stats.failed.get(), 1);

    stub.quota_full.store(false, std::sync::atomic::Ordering::SeqCst);
    stub.hang.store(true, std::sync::atomic::Ordering::SeqCst);
    let late =
        keep_within(&bin, record(&stub, 5), 1_800_000_020, Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(late, BinError::Deadline), "{late}");
    assert_eq!(bin.stats.failed.get(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_evicts_the_oldest_copies_past_the_bounds_and_counts_them() {
    let (client, stub) = start().await;
    let bin = bin(&client);
    let now = jiff::Timestamp::now().as_second();
    for (revision, age) in [(1, 30), (2, 20), (3, 10)] {
        keep(&bin, record(&stub, revision), now - age).await.unwrap();
    }
    // A copy older than the TTL, of another release.
    let mut old = record(&stub, 1);
    old.id.key.release = "api".into();
    old.labels.insert("name".into(), "api".into());
    (old.object_name, old.uid) = ("sh.helm.release.v1.api.v1".into(), Some("uid-api-1".into()));
    stub.stores(&old);
    keep(&bin, old, now - 3600).await.unwrap();
    let bounds = BinBounds { release_copies: 2, ttl_secs: 600, ..BinBounds::default() };
    let stats = bin.stats.clone();
    tokio::spawn(sweep(
        client.clone(),
        "helm-guard".into(),
        bounds,
        stats.clone(),
        bin.stored.clone(),
        Duration::from_secs(3600),
    ));
    let swept =
        eventually(Duration::from_secs(10), || async { stub.secrets.lock().unwrap().len() == 2 }).await;
    assert!(
        swept,
        "{:?}",
        stub.secrets.lock().unwrap().iter().map(|s| s["metadata"]["labels"].clone()).collect::<Vec<_>>()
    );
    let revisions: Vec<String> = stub
        .secrets
        .lock()
        .unwrap()
        .iter()
        .map(|s| s["metadata"]["labels"]["helm-guard.io/revision"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(revisions, ["2", "3"], "the oldest copy of web and the expired one went");
    assert!(eventually(Duration::from_secs(5), || async { stats.copies.get() == 2 }).await);
    assert_eq!(
        (stats.evicted(Eviction::Expired).get(), stats.evicted(Eviction::ReleaseCopies).get()),
        (1, 1)
    );
    assert!(stats.bytes.get() > 0);
}

/// The sweep lists the bin after each new copy (a copy can take it past its bounds), not after a
/// retried deletion whose copy an earlier try stored: a client retrying costs no listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_new_copy_wakes_the_sweep() {
    use std::sync::atomic::Ordering;
    let (client, stub) = start().await;
    let bin = bin(&client);
    let stats = bin.stats.clone();
    let every = Duration::from_secs(3600);
    tokio::spawn(sweep(
        client.clone(),
        "helm-guard".into(),
        BinBounds::default(),
        stats,
        bin.stored.clone(),
        every,
    ));
    let listed = |n: usize| {
        let lists = stub.lists.clone();
        eventually(Duration::from_secs(5), move || {
            let lists = lists.clone();
            async move { lists.load(Ordering::SeqCst) >= n }
        })
    };
    assert!(listed(1).await, "the first sweep at start");
    keep(&bin, record(&stub, 1), 1_800_000_000).await.unwrap();
    assert!(listed(2).await, "a new copy is swept");
    keep(&bin, record(&stub, 1), 1_800_000_001).await.unwrap();
    keep(&bin, record(&stub, 2), 1_800_000_002).await.unwrap();
    assert!(listed(3).await, "the next new copy is swept");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stub.lists.load(Ordering::SeqCst), 3, "the retry of revision 1 listed nothing");
    assert_eq!(bin.stats.kept.get(), 3, "each approval that kept a copy counts, the retry too");
}

/// A review the API server never sent (anyone on the pod network can POST one) names a record
/// that is not stored, or not as it says (another uid; the stored uid and resourceVersion with
/// content of its own): no copy is kept, and the deletion is refused for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_kept_only_of_the_object_stored_under_the_name() {
    let (client, stub) = start().await;
    let bin = bin(&client);
    let mut made_up = record(&stub, 3);
    stub.records.lock().unwrap().clear();
    let refused = keep(&bin, made_up.clone(), 1_800_000_000).await.unwrap_err();
    assert!(
        matches!(refused, BinError::NotStored(..)) && refused.to_string().contains("none is"),
        "{refused}"
    );
    let stored = record(&stub, 3);
    made_up.uid = Some("uid-forged".into());
    let refused = keep(&bin, made_up, 1_800_000_000).await.unwrap_err();
    assert!(refused.to_string().contains("uid uid-3"), "{refused}");
    // The stored object's uid and resourceVersion, a payload and a break-glass annotation of
    // the tenant's own: its copy would stand for the record's when Helm later deletes it.
    let mut forged = stored.clone();
    forged.annotations.insert("helm-guard.io/allow-delete".into(), "mine".into());
    let refused = keep(&bin, forged, 1_800_000_000).await.unwrap_err();
    assert!(refused.to_string().contains("other labels, annotations or data"), "{refused}");
    let mut forged = stored.clone();
    forged.payload = record(&stub, 4).payload;
    let refused = keep(&bin, forged, 1_800_000_000).await.unwrap_err();
    assert!(refused.to_string().contains("other labels, annotations or data"), "{refused}");
    assert!(stub.secrets.lock().unwrap().is_empty(), "nothing in the bin");
    keep(&bin, stored, 1_800_000_000).await.unwrap();
    assert_eq!(stub.secrets.lock().unwrap().len(), 1);
}
