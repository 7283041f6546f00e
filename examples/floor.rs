//! The floor for any webhook handler, as one is commonly written: axum + axum-server
//! (rustls/ring; the guard has its own accept loop and rustls config swap), a handler that only
//! parses the body as JSON and allows. `examples/load.rs` measures the guard
//! against it in one run (BENCHMARKS.md, "Against the floor").
//!
//!     cargo run --release --example floor -- CERT_PEM KEY_PEM [ADDR]
//!
//! e.g. with the certificates of `helm-guard serve --dev-certs target/dev-certs`:
//! `taskset -c 0 target/release/examples/floor target/dev-certs/tls.crt target/dev-certs/tls.key`.
//! Loopback only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use serde_json::{Value, json};

async fn allow(body: Bytes) -> axum::Json<Value> {
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let uid = review["request"]["uid"].clone();
    axum::Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true},
    }))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: floor CERT_PEM KEY_PEM [ADDR]");
        std::process::exit(2);
    }
    let addr: std::net::SocketAddr =
        args.get(2).map_or("127.0.0.1:8444", String::as_str).parse().expect("ADDR");
    assert!(addr.ip().is_loopback(), "the floor serves this machine only");
    let _ = rustls::crypto::ring::default_provider().install_default();
    // One worker thread, like the guard pinned to one core.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let config = RustlsConfig::from_pem_file(&args[0], &args[1]).await.expect("certificate and key");
        let app = Router::new().route("/validate", post(allow)).route("/mutate", post(allow));
        eprintln!("allow-all floor on https://{addr}");
        axum_server::bind_rustls(addr, config).serve(app.into_make_service()).await.unwrap();
    });
}
