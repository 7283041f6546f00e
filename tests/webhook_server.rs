//! The HTTPS server itself: bad input, TLS (ALPN, reload), health, metrics and shutdown.

use crate::common;

use std::time::Duration;

use common::guard::{
    Guard, HttpsClient, Options, client_config, localhost_bundle, peer_certificate, pem_to_der, send,
};
use common::*;
use helm_guard::policy::Mode;
use serde_json::{Value, json};

fn error_body(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("not a JSON error: {}", String::from_utf8_lossy(body)))
}

#[tokio::test]
async fn bad_bodies_get_clear_http_errors() {
    let guard = Guard::start(Options { max_body_bytes: 64 * 1024, ..Options::default() }).await;

    let (status, body) = guard.client.post("/validate", b"{not json".to_vec()).await;
    assert_eq!(status, 400);
    assert!(error_body(&body)["error"].as_str().unwrap().contains("not a JSON object"));

    let v1beta1 = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {}});
    let (status, body) = guard.client.post("/validate", serde_json::to_vec(&v1beta1).unwrap()).await;
    assert_eq!(status, 400);
    assert!(error_body(&body)["error"].as_str().unwrap().contains("admission.k8s.io/v1"));

    let mut no_uid = review(
        "admission/02-delete-oldest-and-dryrun-latest/001-validate-delete-secret-sh.helm.release.v1.web.v1.json",
    );
    no_uid["request"]["operation"] = json!("EXPLODE");
    let (status, _) = guard.client.post("/mutate", serde_json::to_vec(&no_uid).unwrap()).await;
    assert_eq!(status, 400);

    // A real DELETE whose record's payload is a number: no object the API server stores.
    let mut numeric_payload = review(
        "admission/03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json",
    );
    numeric_payload["request"]["oldObject"]["data"]["release"] = json!(42);
    let (status, body) = guard.client.post("/validate", serde_json::to_vec(&numeric_payload).unwrap()).await;
    assert_eq!(status, 400);
    let error = error_body(&body)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("malformed") && error.contains("expected a string"), "{error}");

    // A real request is larger than the 64 KiB limit set here once padded.
    let mut huge = review(
        "admission/05-helm3-install-upgrade/007-validate-create-secret-sh.helm.release.v1.cache.v1.json",
    );
    huge["request"]["object"]["metadata"]["annotations"] = json!({"padding": "x".repeat(100 * 1024)});
    let (status, body) = guard.client.post("/validate", serde_json::to_vec(&huge).unwrap()).await;
    assert_eq!(status, 413);
    assert!(error_body(&body)["error"].as_str().unwrap().contains("larger than 65536 bytes"));

    let (status, _) = guard.client.get("/validate").await;
    assert_eq!(status, 405);

    // The server is still fine.
    let (status, _) = guard.client.get("/healthz").await;
    assert_eq!(status, 200);
}

/// Stands in for the API server's listings and counts how many decisions wait on one at once:
/// each listing waits for another to begin (up to 300 ms), so decisions that may overlap do.
#[derive(Debug, Default)]
struct OverlapMeter {
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl helm_guard::cluster::PayloadFetcher for OverlapMeter {
    fn fetch<'a>(
        &'a self,
        _: &'a helm_guard::release::ReleaseKey,
        _: &'a [String],
        _: std::time::Instant,
    ) -> futures::future::BoxFuture<'a, Vec<(String, helm_guard::cluster::Fetched)>> {
        Box::pin(std::future::ready(Vec::new()))
    }

    fn list<'a>(
        &'a self,
        _: &'a helm_guard::release::ReleaseKey,
        _: helm_guard::cluster::Payloads,
        _: std::time::Instant,
    ) -> futures::future::BoxFuture<'a, Option<helm_guard::cluster::Listing>> {
        Box::pin(async move {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            let waited = std::time::Instant::now();
            while self.in_flight.load(SeqCst) == 1 && waited.elapsed() < Duration::from_millis(300) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.most.fetch_max(self.in_flight.load(SeqCst), SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.in_flight.fetch_sub(1, SeqCst);
            None
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_beyond_the_concurrency_limit_wait_their_turn() {
    let records = history(&helm4_secret(), &[(1, "superseded"), (2, "deployed")]);
    let most_at_once = |limit: usize| {
        let records = records.clone();
        async move {
            let meter = std::sync::Arc::new(OverlapMeter::default());
            let guard = Guard::start(Options {
                snapshot: records.clone(),
                max_concurrent_reviews: limit,
                fetcher: Some(meter.clone()),
                ..Options::default()
            })
            .await;
            // History pruning rests on the history: each decision lists the release first.
            let reviews: Vec<Value> = (0..4).map(|_| delete_review(&records[0])).collect();
            let answers = futures::future::join_all(reviews.iter().map(|r| guard.validate(r))).await;
            assert!(
                answers.iter().all(|a| a["auditAnnotations"]["reason"] == "unread-history"),
                "{answers:?}"
            );
            meter.most.load(std::sync::atomic::Ordering::SeqCst)
        }
    };
    assert_eq!(most_at_once(1).await, 1, "one decision at a time");
    assert!(most_at_once(4).await > 1, "without the limit, decisions overlap (the meter sees it)");
}

/// The reachability probe (src/cluster/registration.rs): the guard's own dry-run CREATE of a
/// ConfigMap labelled helm-guard.io/probe comes back refused with its nonce, in every mode (only
/// the API server can carry that refusal back, which proves it reached the guard); the same
/// ConfigMap without the label is no concern of the guard's.
#[tokio::test]
async fn the_reachability_probe_is_refused_with_its_nonce_in_every_mode() {
    let mut probe = review(
        "admission/07-configmap-driver-install-upgrade/015-validate-create-configmap-sh.helm.release.v1.api.v1.json",
    );
    probe["request"]["namespace"] = json!("helm-guard");
    probe["request"]["dryRun"] = json!(true);
    probe["request"]["object"] = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"generateName": "helm-guard-probe-", "namespace": "helm-guard",
                     "labels": {"helm-guard.io/probe": "1764912000123456789"}},
    });
    for mode in [Mode::Enforce, Mode::Audit] {
        let guard = Guard::start(Options { mode, ..Options::default() }).await;
        let response = guard.validate(&probe).await;
        assert_eq!(response["allowed"], false, "{mode:?}: {response}");
        assert_eq!(response["auditAnnotations"]["reason"], "probe");
        assert_eq!(
            response["status"]["message"],
            "helm-guard probe 1764912000123456789: the API server reached helm-guard through its Service"
        );
    }
    // A label value no API server stores (over 63 characters) gets no reply to echo.
    let mut long = probe.clone();
    long["request"]["object"]["metadata"]["labels"]["helm-guard.io/probe"] = json!("x".repeat(64));
    let guard = Guard::start(Options::default()).await;
    let response = guard.validate(&long).await;
    assert_eq!(
        (response["allowed"].as_bool(), response["status"]["message"].as_str()),
        (Some(false), Some("helm-guard: not a probe"))
    );
    // Without the label: not a record, not a probe.
    probe["request"]["object"]["metadata"]["labels"] = json!({"app": "x"});
    let response = guard.validate(&probe).await;
    assert_eq!(
        (response["allowed"].as_bool(), &response["auditAnnotations"]["reason"]),
        (Some(true), &json!("not-a-release-record"))
    );
}

#[tokio::test]
async fn objects_that_are_not_release_records_are_allowed_as_such() {
    let guard = Guard::start(Options::default()).await;
    let mut opaque = review(
        "admission/02-delete-oldest-and-dryrun-latest/001-validate-delete-secret-sh.helm.release.v1.web.v1.json",
    );
    opaque["request"]["oldObject"]["type"] = json!("Opaque");
    // Helm selects records by their labels alone: an Opaque Secret labelled owner=helm and
    // name=web is a record of web (Helm lists it), and is decided as one.
    let response = guard.validate(&opaque).await;
    assert_ne!(response["auditAnnotations"]["reason"], json!("not-a-release-record"), "{response}");
    assert_eq!(response["auditAnnotations"]["release"], json!("demo/web"));
    // Without Helm's labels it is no record, whatever its type or name.
    opaque["request"]["oldObject"]["metadata"]["labels"].as_object_mut().unwrap().remove("name");
    let response = guard.validate(&opaque).await;
    assert_eq!(
        (response["allowed"].as_bool(), &response["auditAnnotations"]["reason"]),
        (Some(true), &json!("not-a-release-record"))
    );

    let mut deployment =
        review("admission/17-helm-install-pod-create/001-mutate-create-pod-helm-install-web-.json");
    deployment["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let response = guard.validate(&deployment).await;
    assert_eq!(response["auditAnnotations"]["reason"], "not-a-release-record");
}

#[tokio::test]
async fn http2_is_offered_by_alpn() {
    let guard = Guard::start(Options::default()).await;
    let bundle_ca = std::fs::read_to_string(guard.dir.path().join("certs/ca.crt")).unwrap();
    let client =
        HttpsClient { addr: guard.running().addr, config: client_config(&bundle_ca, &[b"h2", b"http/1.1"]) };
    let tls = client.tls().await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get("https://localhost/healthz")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), hyper::Version::HTTP_2);
}

#[tokio::test]
async fn tls_1_2_and_1_3_are_both_served() {
    use tokio_rustls::rustls;
    let guard = Guard::start(Options::default()).await;
    let ca = std::fs::read_to_string(guard.dir.path().join("certs/ca.crt")).unwrap();
    for (version, expected) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls::pki_types::CertificateDer::from(pem_to_der(&ca))).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let client = HttpsClient { addr: guard.running().addr, config: std::sync::Arc::new(config) };
        let tls = client.tls().await.unwrap();
        assert_eq!(tls.get_ref().1.protocol_version(), Some(expected));
    }
}

/// Lays out certificates as Kubernetes mounts a Secret: files behind a `..data` symlink that is
/// swapped to update them.
fn mount(dir: &std::path::Path, version: &str, bundle: &helm_guard::certs::CertBundle) {
    let data = dir.join(version);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tls.crt"), &bundle.cert_pem).unwrap();
    std::fs::write(data.join("tls.key"), &bundle.key_pem).unwrap();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        let link = dir.join(file);
        if !link.exists() {
            std::os::unix::fs::symlink(format!("..data/{file}"), link).unwrap();
        }
    }
}

#[tokio::test]
async fn a_swapped_certificate_is_served_to_new_connections_and_open_ones_keep_working() {
    let guard =
        Guard::start(Options { tls_reload_every: Duration::from_millis(50), ..Options::default() }).await;
    // Re-point the server's files at a Secret-style mount: first the original pair...
    let certs = guard.dir.path().join("certs");
    let original = helm_guard::certs::CertBundle {
        ca_pem: std::fs::read_to_string(certs.join("ca.crt")).unwrap(),
        cert_pem: std::fs::read_to_string(certs.join("tls.crt")).unwrap(),
        key_pem: std::fs::read_to_string(certs.join("tls.key")).unwrap(),
    };
    let mounted = tempfile::tempdir().unwrap();
    mount(mounted.path(), "v1", &original);
    std::fs::remove_file(certs.join("tls.crt")).unwrap();
    std::fs::remove_file(certs.join("tls.key")).unwrap();
    std::os::unix::fs::symlink(mounted.path().join("tls.crt"), certs.join("tls.crt")).unwrap();
    std::os::unix::fs::symlink(mounted.path().join("tls.key"), certs.join("tls.key")).unwrap();

    let old_client = guard.client.clone();
    let mut open = old_client.connect().await;
    let (status, _) = send(&mut open, "GET", "/healthz", Vec::new()).await;
    assert_eq!(status, 200);

    // ...then the swap to a certificate from another CA.
    let rotated = localhost_bundle();
    mount(mounted.path(), "v2", &rotated);
    let new_client = HttpsClient::new(guard.running().addr, &rotated.ca_pem);
    let trusted = eventually(Duration::from_secs(5), || async { new_client.tls().await.is_ok() }).await;
    assert!(trusted, "the new certificate is served within 5 s");
    assert_eq!(peer_certificate(&new_client.tls().await.unwrap()), pem_to_der(&rotated.cert_pem));
    assert!(old_client.tls().await.is_err(), "new handshakes no longer get the old certificate");

    // The connection opened before the swap still works.
    let (status, body) = send(&mut open, "GET", "/readyz", Vec::new()).await;
    assert_eq!((status, body.as_slice()), (200, &b"ready"[..]));
    let (_, metrics) = guard.metrics_get("/metrics").await;
    assert!(metrics.contains("helm_guard_tls_reloads_total{result=\"success\"} 1"), "{metrics}");
}

#[tokio::test]
async fn a_broken_certificate_update_keeps_the_old_one() {
    let guard =
        Guard::start(Options { tls_reload_every: Duration::from_millis(50), ..Options::default() }).await;
    let certs = guard.dir.path().join("certs");
    std::fs::write(
        certs.join("tls.crt"),
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let failed = eventually(Duration::from_secs(5), || async {
        guard.metrics_get("/metrics").await.1.contains("helm_guard_tls_reloads_total{result=\"error\"}")
    })
    .await;
    assert!(failed, "the bad files were seen and refused: {}", guard.metrics_get("/metrics").await.1);
    let (status, _) = guard.client.get("/healthz").await;
    assert_eq!(status, 200, "the old certificate still serves");
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let namespace = |name: &str, labels: serde_json::Value| {
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels,
            "managedFields": [{"manager": "kubectl-label", "operation": "Update", "time": "2026-11-20T08:30:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:helm-guard.io/mode": {}}}}}]}})
    };
    let namespaces = vec![
        namespace("tenant-a", serde_json::json!({"helm-guard.io/mode": "audit"})),
        namespace("tenant-b", serde_json::json!({"helm-guard.io/mode": "enforce"})),
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "sandbox", "labels": {"helm-guard.io/ignore": "true"}}}),
    ];
    let guard = Guard::start(Options {
        snapshot: [history(&helm4_secret(), &[(1, "superseded")]), namespaces].concat(),
        ..Options::default()
    })
    .await;
    assert_eq!(guard.metrics_get("/healthz").await.0, 200);
    assert_eq!(guard.metrics_get("/readyz").await, (200, "ready".to_owned()));
    let records = history(&helm4_secret(), &[(1, "superseded")]);
    guard.validate(&delete_review(&records[0])).await;
    let (status, metrics) = guard.metrics_get("/metrics").await;
    assert_eq!(status, 200);
    for needle in [
        "helm_guard_admission_decisions_total{webhook=\"validate\",operation=\"DELETE\",decision=\"denied\",reason=\"would-orphan-release\"} 1",
        "helm_guard_releases{state=\"orphaned-superseded\"} 1",
        "helm_guard_revisions_indexed 1",
        "helm_guard_admission_duration_seconds_count{webhook=\"validate\"} 1",
        "helm_guard_namespace_opted_out_timestamp_seconds{namespace=\"tenant-a\",protection=\"audit\"} 1795163400",
        "helm_guard_namespace_opted_out_timestamp_seconds{namespace=\"sandbox\",protection=\"ignored\"} 0",
    ] {
        assert!(metrics.contains(needle), "{needle} missing:\n{metrics}");
    }
    assert!(!metrics.contains("namespace=\"tenant-b\""), "an enforcing namespace is not opted out");
    // The HTTPS port answers the same probes.
    assert_eq!(guard.client.get("/readyz").await.0, 200);

    let unready = Guard::start(Options { ready: false, ..Options::default() }).await;
    assert_eq!(unready.metrics_get("/readyz").await.0, 503);
}

#[tokio::test]
async fn shutdown_stops_being_ready_then_stops() {
    let mut guard =
        Guard::start(Options { shutdown_delay: Duration::from_millis(500), ..Options::default() }).await;
    let running = guard.running.take().unwrap();
    let (addr, metrics_addr) = (running.addr, running.metrics_addr);
    let stopping = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let unready =
        eventually(Duration::from_millis(300), || async { guard.client.get("/readyz").await.0 == 503 }).await;
    assert!(unready, "not ready while draining");
    assert_eq!(guard.client.get("/healthz").await.0, 200, "still serving while draining");
    stopping.await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "HTTPS listener closed");
    let _ = metrics_addr;
}
