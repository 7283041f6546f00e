//! A hostile client against the real HTTPS server, in seconds (the full-size runs with memory
//! figures are `examples/abuse.rs`, results in BENCHMARKS.md): who may connect, slow and
//! unfinished bodies, idle and surplus connections, shutdown, echoed text, and a verdict's
//! deadline against an API server that never answers.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::guard::{Guard, Options, client_config};
use common::*;
use helm_guard::server::RequestLimits;
use helm_guard::server::limits::ConnectionLimits;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

/// A client CA and a client certificate with subject CN `cn`: (CA PEM, cert PEM, key PEM).
fn client_identity(cn: &str) -> (String, String, String) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, "client CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn with_client_cert(guard: &Guard, cert_pem: &str, key_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(guard.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .unwrap();
    Arc::new(config)
}

/// Handshakes and sends one request on a fresh connection; `Err` when the server refuses.
async fn try_post(guard: &Guard, config: Arc<rustls::ClientConfig>, body: &Value) -> Result<u16, String> {
    let tcp = tokio::net::TcpStream::connect(guard.running().addr).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let body = serde_json::to_vec(body).unwrap();
    let request = hyper::Request::builder()
        .method("POST")
        .uri("/validate")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    sender.send_request(request).await.map(|r| r.status().as_u16()).map_err(|e| e.to_string())
}

#[tokio::test]
async fn with_a_client_ca_only_certified_callers_get_through() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = client_identity("kube-apiserver");
    let ca_path = dir.path().join("client-ca.crt");
    std::fs::write(&ca_path, &ca).unwrap();
    let (guard, records) = guard_over_a_release(Options {
        client_ca: Some(ca_path.clone()),
        client_names: vec!["kube-apiserver".into()],
        ..Options::default()
    })
    .await;
    let review = delete_review(&records[1]);

    // No certificate: refused at the handshake (TLS 1.3 reports it on the first read).
    let anonymous = try_post(&guard, client_config(&guard.ca_pem, &[b"http/1.1"]), &review).await;
    assert!(anonymous.is_err(), "{anonymous:?}");
    // The API server's certificate: served.
    assert_eq!(try_post(&guard, with_client_cert(&guard, &cert, &key), &review).await, Ok(200));
    // A certificate from another CA, named like the API server: refused.
    let (_, forged_cert, forged_key) = client_identity("kube-apiserver");
    assert!(try_post(&guard, with_client_cert(&guard, &forged_cert, &forged_key), &review).await.is_err());

    // Same CA, pinned name differs: refused.
    let guard_other_name = Guard::start(Options {
        snapshot: records,
        client_ca: Some(ca_path),
        client_names: vec!["someone-else".into()],
        ..Options::default()
    })
    .await;
    assert!(
        try_post(&guard_other_name, with_client_cert(&guard_other_name, &cert, &key), &review).await.is_err()
    );
}

/// Opens a TLS connection and sends the headers of a POST whose body never ends.
async fn unfinished_body(guard: &Guard, announced: usize) -> common::guard::Connection {
    let mut tls = guard.client.tls().await.unwrap();
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {announced}\r\n\r\n{{\"kind\":"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    tls
}

/// Reads what the server sends until it closes the connection.
async fn read_until_closed(tls: &mut common::guard::Connection, within: Duration) -> Option<String> {
    let mut answer = Vec::new();
    match tokio::time::timeout(within, tls.read_to_end(&mut answer)).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn an_unfinished_body_is_cut_off_and_others_are_still_answered() {
    let (guard, records) = guard_over_a_release(Options {
        max_concurrent_reviews: 2,
        request_limits: RequestLimits {
            body_read_timeout: Duration::from_millis(500),
            ..RequestLimits::default()
        },
        ..Options::default()
    })
    .await;
    let started = Instant::now();
    // More unfinished bodies than permits: the permit is taken before the body is read, so they
    // queue rather than all buffering at once.
    let mut slow = Vec::new();
    for _ in 0..4 {
        slow.push(unfinished_body(&guard, 8 * 1024 * 1024 - 1).await);
    }
    // A real request still gets its answer once the slow ones have timed out.
    let answer = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(answer["auditAnnotations"]["reason"], "latest-deployed-revision");
    for mut connection in slow {
        let answer =
            read_until_closed(&mut connection, Duration::from_secs(10)).await.expect("closed by the server");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("--body-read-timeout"), "{answer}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_request_not_answered_within_the_request_timeout_gets_503() {
    let (guard, records) = guard_over_a_release(Options {
        request_limits: RequestLimits {
            request_timeout: Duration::from_millis(300),
            body_read_timeout: Duration::from_secs(30),
            ..RequestLimits::default()
        },
        ..Options::default()
    })
    .await;
    let started = Instant::now();
    let mut slow = unfinished_body(&guard, 1024).await;
    let answer = read_until_closed(&mut slow, Duration::from_secs(10)).await.expect("closed by the server");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("could not answer in time"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(10), "answered by the request timeout, not the body's");
    let (_, metrics) = guard.metrics_get("/metrics").await;
    assert!(
        metrics.contains(
            r#"helm_guard_admission_rejected_requests_total{webhook="validate",error="request-timeout"} 1"#
        ),
        "{metrics}"
    );
    // Requests that arrive whole are answered as ever.
    let answer = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(answer["auditAnnotations"]["reason"], "latest-deployed-revision");
}

/// Anyone on the pod network can open connections and never start TLS, or start a request and
/// never finish its headers: neither takes what the API server needs. 300 raw connections (from
/// one source, past its share of handshakes) beside the webhook's reviews, 600 half-sent requests
/// on the metrics listener beside its health checks: every review and probe is answered.
#[tokio::test]
async fn connections_that_never_start_tls_or_never_finish_starve_no_one() {
    let (guard, records) = guard_over_a_release(Options::default()).await;
    // Another pod: its own source address (127.0.0.2 is loopback too).
    let from_a_pod = |to: std::net::SocketAddr| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        socket.connect(to).await.unwrap()
    };
    let (addr, metrics_addr) = (guard.running().addr, guard.running().metrics_addr);
    let mut raw = Vec::new();
    for _ in 0..300 {
        raw.push(from_a_pod(addr).await);
    }
    let body = serde_json::to_vec(&delete_review(&records[1])).unwrap();
    for _ in 0..5 {
        let (status, answer) = guard.client.post("/validate?timeout=5s", body.clone()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    }
    let mut half_sent = Vec::new();
    for _ in 0..600 {
        let mut tcp = from_a_pod(metrics_addr).await;
        // Refused past its share: the write may find the connection closed.
        let _ = tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").await;
        half_sent.push(tcp);
    }
    let (status, health) = guard.metrics_get("/healthz").await;
    assert_eq!(status, 200, "{health}");
    let (status, _) = guard.client.post("/validate?timeout=5s", body).await;
    assert_eq!(status, 200);
    drop((raw, half_sent));
}

/// Many pods (issue 80, class 11): 200 source addresses holding 16 silent connections each, more
/// than the guard once had handshake places for in all; the API server's reviews on fresh
/// connections are all answered, and a silent connection is closed within its first-byte
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_pods_of_silent_connections_leave_the_api_server_its_places() {
    let (guard, records) = guard_over_a_release(Options::default()).await;
    let addr = guard.running().addr;
    let mut raw = Vec::new();
    for pod in 0..200u32 {
        let source = std::net::Ipv4Addr::new(127, 1, (pod / 250) as u8, (pod % 250 + 2) as u8);
        for _ in 0..16 {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind((source, 0).into()).unwrap();
            raw.push(socket.connect(addr).await.unwrap());
        }
    }
    let body = serde_json::to_vec(&delete_review(&records[1])).unwrap();
    for _ in 0..10 {
        let (status, answer) = guard.client.post("/validate?timeout=5s", body.clone()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    }
    // One more, from another pod, silent: closed by the server within its first-byte deadline
    // (not the handshake's 5 s).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((std::net::Ipv4Addr::new(127, 2, 0, 2), 0).into()).unwrap();
    let mut silent = socket.connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(6), silent.read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "a silent connection is closed: {read:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "within its first-byte deadline: {:?}",
        started.elapsed()
    );
    drop(raw);
}

#[tokio::test]
async fn idle_and_surplus_connections_are_closed() {
    let guard = Guard::start(Options {
        connections: ConnectionLimits {
            max_connections: 2,
            idle_timeout: Duration::from_millis(500),
            ..ConnectionLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut first = guard.client.tls().await.unwrap();
    let _second = guard.client.tls().await.unwrap();
    // A third connection is closed at once, once its handshake is done (or as it ends).
    match guard.client.tls().await {
        Err(_) => {}
        Ok(mut third) => assert!(
            read_until_closed(&mut third, Duration::from_millis(400)).await.is_some(),
            "the cap holds"
        ),
    }
    // A connection that says nothing is closed after the idle timeout.
    assert!(read_until_closed(&mut first, Duration::from_secs(5)).await.is_some(), "idle connection closed");
}

#[tokio::test]
async fn a_kept_alive_connection_waits_out_the_idle_timeout_between_requests() {
    // The API server keeps its connections up to 90 s between calls; the guard must not close
    // one sooner (a request sent as it closes fails). Headers used to have 10 s from the end of
    // the previous answer.
    let (guard, records) = guard_over_a_release(Options {
        connections: ConnectionLimits {
            idle_timeout: Duration::from_secs(30),
            ..ConnectionLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut sender = guard.client.connect().await;
    let body = serde_json::to_vec(&delete_review(&records[1])).unwrap();
    let (status, _) = common::guard::send(&mut sender, "POST", "/validate", body.clone()).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let (status, _) = common::guard::send(&mut sender, "POST", "/validate", body).await;
    assert_eq!(status, 200, "the same connection, 11 s later");
}

#[tokio::test]
async fn while_shutting_down_answers_close_their_connections() {
    let (mut guard, records) =
        guard_over_a_release(Options { shutdown_delay: Duration::from_secs(2), ..Options::default() }).await;
    let mut sender = guard.client.connect().await;
    let body = serde_json::to_vec(&delete_review(&records[1])).unwrap();
    let (status, _) = common::guard::send(&mut sender, "POST", "/validate", body.clone()).await;
    assert_eq!(status, 200);
    let running = guard.running.take().unwrap();
    let stopping = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Within the shutdown delay: answered, with `Connection: close`, and the connection ends.
    let request = hyper::Request::builder()
        .method("POST")
        .uri("/validate")
        .header("host", "localhost")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers().get("connection").map(|v| v.to_str().unwrap()), Some("close"));
    stopping.await.unwrap();
}

/// A rollout's last instant: connections the guard accepted before it stopped listening, over
/// HTTP/1.1 and HTTP/2, whose first request comes only after it did, are answered (and then
/// closed); a connection idle since an earlier answer is closed at once; the listener refuses
/// new ones; and the server is done as soon as its connections are.
#[tokio::test]
async fn after_the_delay_every_accepted_connection_gets_its_first_request_answered() {
    let (mut guard, records) =
        guard_over_a_release(Options { shutdown_delay: Duration::from_millis(500), ..Options::default() })
            .await;
    let body = serde_json::to_vec(&delete_review(&records[1])).unwrap();
    let addr = guard.running().addr;
    let h2_client = common::guard::HttpsClient { addr, config: client_config(&guard.ca_pem, &[b"h2"]) };
    let mut idle = guard.client.connect().await;
    assert_eq!(common::guard::send(&mut idle, "POST", "/validate", body.clone()).await.0, 200);
    let mut fresh_h1 = guard.client.connect().await;
    let (mut fresh_h2, h2_conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(h2_client.tls().await.unwrap()),
    )
    .await
    .unwrap();
    tokio::spawn(h2_conn);
    let running = guard.running.take().unwrap();
    let started = Instant::now();
    let stopping = tokio::spawn(running.shutdown());
    // Past the delay: the listener is closed, the two fresh connections are still open.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener refuses new connections");
    assert!(idle.ready().await.is_err(), "the connection idle since its answer was closed");
    let h1 = hyper::Request::post("/validate")
        .header("host", "localhost")
        .body(http_body_util::Full::new(bytes::Bytes::from(body.clone())))
        .unwrap();
    let answer = fresh_h1.send_request(h1).await.expect("the HTTP/1.1 request is answered");
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers().get("connection").map(|v| v.to_str().unwrap()), Some("close"));
    let h2 = hyper::Request::post("https://localhost/validate")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    assert_eq!(fresh_h2.send_request(h2).await.expect("the HTTP/2 request is answered").status(), 200);
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("the server stops once its connections are done")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(6), "well within --shutdown-grace");
}

/// A release of two revisions (2 superseded, 3 deployed), and a guard started over them with
/// `options`.
async fn guard_over_a_release(options: Options) -> (Guard, Vec<Value>) {
    let records = history(&helm4_secret(), &[(2, "superseded"), (3, "deployed")]);
    let guard = Guard::start(Options { snapshot: records.clone(), ..options }).await;
    (guard, records)
}

#[tokio::test]
async fn a_huge_break_glass_reason_is_cut_in_the_annotations() {
    let records = history(&helm4_secret(), &[(2, "superseded"), (3, "deployed")]);
    let mut forced = records[1].clone();
    forced["metadata"]["annotations"] = json!({"helm-guard.io/allow-delete": "x".repeat(200_000)});
    let guard = Guard::start(Options { snapshot: records, ..Options::default() }).await;
    let response = guard.validate(&delete_review(&forced)).await;
    assert_eq!(response["auditAnnotations"]["reason"], "break-glass");
    let reason = response["auditAnnotations"]["break-glass-reason"].as_str().unwrap();
    assert!(reason.chars().count() <= helm_guard::policy::MAX_ECHOED_CHARS, "{} chars", reason.len());
}

#[tokio::test]
async fn while_shutting_down_http2_connections_get_a_goaway() {
    let (mut guard, records) =
        guard_over_a_release(Options { shutdown_delay: Duration::from_secs(3), ..Options::default() }).await;
    let client = common::guard::HttpsClient {
        addr: guard.running().addr,
        config: client_config(&guard.ca_pem, &[b"h2"]),
    };
    let tls = client.tls().await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    let connection = tokio::spawn(conn);
    let body = serde_json::to_vec(&delete_review(&records[1])).unwrap();
    let post = |body: Vec<u8>| {
        hyper::Request::post("https://localhost/validate")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap()
    };
    assert_eq!(sender.send_request(post(body.clone())).await.unwrap().status(), 200);
    let running = guard.running.take().unwrap();
    let stopping = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Within the shutdown delay: the request is answered, then the server's GOAWAY ends the
    // connection long before the delay is over.
    let started = Instant::now();
    assert_eq!(sender.send_request(post(body)).await.unwrap().status(), 200);
    tokio::time::timeout(Duration::from_secs(2), connection)
        .await
        .expect("the connection ended within the shutdown delay")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    stopping.await.unwrap();
}

/// Reads one HTTP/1.1 answer with a `content-length`: its status line and body.
async fn read_answer(tls: &mut common::guard::Connection) -> (String, String) {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        assert_eq!(tls.read(&mut byte).await.unwrap(), 1, "the connection ended inside a head: {seen:?}");
        seen.push(byte[0]);
    }
    let head = String::from_utf8(seen).unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; length];
    tls.read_exact(&mut body).await.unwrap();
    (head.lines().next().unwrap().to_owned(), String::from_utf8(body).unwrap())
}

/// A client that sends the whole of an oversized body before it reads (as Go's `net/http`, the
/// API server's client, does over HTTP/1.1) gets every byte taken and reads its 413, not a reset;
/// the connection then serves the next request.
#[tokio::test]
async fn an_oversized_body_is_read_to_its_end_and_answered_413() {
    let (guard, records) =
        guard_over_a_release(Options { max_body_bytes: 64 * 1024, ..Options::default() }).await;
    for _ in 0..10 {
        let mut tls = guard.client.tls().await.unwrap();
        let size = 6 * 1024 * 1024;
        let head = format!(
            "POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b' '; 64 * 1024];
        for sent in 0..size / chunk.len() {
            tls.write_all(&chunk).await.unwrap_or_else(|e| panic!("write failed after {sent} chunks: {e}"));
        }
        tls.flush().await.unwrap();
        let (status, body) = read_answer(&mut tls).await;
        assert_eq!(status, "HTTP/1.1 413 Payload Too Large", "{body}");
        assert!(body.contains("larger than 65536 bytes (--max-body-bytes)"), "{body}");
        // The same connection answers the next request.
        let review = serde_json::to_vec(&delete_review(&records[1])).unwrap();
        let head = format!(
            "POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            review.len()
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.write_all(&review).await.unwrap();
        let (status, body) = read_answer(&mut tls).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("latest-deployed-revision"), "{body}");
    }
}
