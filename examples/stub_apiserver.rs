//! A stub Kubernetes API server for measuring the live source at scale, with no cluster.
//!
//!     cargo run --release --example stub_apiserver -- [REVISIONS] [PORT]
//!
//! Serves REVISIONS (default 100,000) release Secrets as metadata lists, paged like a real API
//! server (`limit`/`continue`), with the managedFields a real server returns, and watches that
//! stay open. It writes a kubeconfig to target/stub-kubeconfig; then run
//! `helm-guard serve --kubeconfig target/stub-kubeconfig ...` and read its /proc/PID/status.
//! Loopback only. Results: BENCHMARKS.md.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

fn secret_metadata(n: u32) -> Value {
    let release = n / 10;
    let revision = n % 10 + 1;
    let status = if revision == 10 { "deployed" } else { "superseded" };
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": {
            "name": format!("sh.helm.release.v1.service-{release:06}.v{revision}"),
            "namespace": format!("team-{:04}", release % 2000),
            "uid": format!("00000000-0000-0000-0000-{n:012}"),
            "resourceVersion": format!("{}", 1000 + n),
            "creationTimestamp": "2026-11-29T16:04:02Z",
            "labels": {"name": format!("service-{release:06}"), "owner": "helm", "status": status,
                       "version": revision.to_string(), "modifiedAt": "1795968223"},
            "managedFields": [{"manager": "Helm", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-29T16:04:02Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:release": {}},
                             "f:metadata": {"f:labels": {".": {}, "f:modifiedAt": {}, "f:name": {}, "f:owner": {}, "f:status": {}, "f:version": {}}},
                             "f:type": {}}}]
        }
    })
}

fn page(total: u32, query: &HashMap<String, String>, item: impl Fn(u32) -> Value) -> Value {
    let start: u32 = query.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: u32 = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(total).max(1);
    let end = (start + limit).min(total);
    let mut metadata = json!({"resourceVersion": "200000"});
    if end < total {
        metadata["continue"] = json!(end.to_string());
    }
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": metadata,
           "items": (start..end).map(item).collect::<Vec<_>>()})
}

fn answer(total: u32, query: HashMap<String, String>, item: impl Fn(u32) -> Value) -> Response {
    if query.get("watch").map(String::as_str) == Some("true") {
        return Body::from_stream(futures::stream::pending::<Result<String, std::io::Error>>())
            .into_response();
    }
    axum::Json(page(total, &query, item)).into_response()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let revisions: u32 = args.first().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(6443);
    let total = Arc::new(revisions);
    let app = Router::new()
        .route(
            "/version",
            get(|| async {
                axum::Json(json!({"major": "1", "minor": "36", "gitVersion": "v1.36.2", "gitCommit": "stub",
                    "gitTreeState": "clean", "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.25",
                    "compiler": "gc", "platform": "linux/amd64"}))
            }),
        )
        .route(
            "/api/v1/secrets",
            get(|State(total): State<Arc<u32>>, Query(q): Query<HashMap<String, String>>| async move {
                answer(*total, q, secret_metadata)
            }),
        )
        .route(
            "/api/v1/configmaps",
            get(|Query(q): Query<HashMap<String, String>>| async move { answer(0, q, secret_metadata) }),
        )
        .route(
            "/api/v1/namespaces",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                answer(2000, q, |n| {
                    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": {"name": format!("team-{n:04}"), "resourceVersion": "1"}})
                })
            }),
        )
        .with_state(total);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: stub\n  context:\n    cluster: stub\n    user: stub\ncurrent-context: stub\nusers:\n- name: stub\n  user: {{}}\n"
    );
    std::fs::create_dir_all("target").ok();
    std::fs::write("target/stub-kubeconfig", kubeconfig).expect("write target/stub-kubeconfig");
    eprintln!(
        "stub API server with {revisions} release Secrets on 127.0.0.1:{port}; kubeconfig: target/stub-kubeconfig"
    );
    axum::serve(listener, app).await.expect("serve");
}
