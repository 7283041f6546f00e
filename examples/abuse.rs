//! Hostile clients against the real binary, with its memory measured from /proc (the goals of
//! "bounded and authenticated"; results in BENCHMARKS.md; tests/abuse.rs runs small versions in CI).
//!
//!     cargo build --release && cargo run --release --example abuse -- SCENARIO [GUARD_BINARY]
//!
//! SCENARIO: `bomb` (a 98 KiB CREATE whose config is ~30 MiB of tiny maps), `updates` (16
//! concurrent UPDATEs of a release whose manifest is 6.5 MiB), `slow-bodies` (40 connections
//! that send 8 MiB - 1 of a body and never finish it, while a well-behaved client keeps asking),
//! `sigterm` (SIGTERM during a load run on 16 keep-alive connections), `recycle` (16 concurrent
//! break-glass DELETEs of a large record, each keeping a copy in the recycle bin: needs a cluster
//! in KUBECONFIG). Each starts its own guard (snapshot mode but for `recycle`, loopback ports
//! 18443/19090), bounded in time; loopback only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

#[path = "support/tls.rs"]
mod tls;

const ADDR: &str = "127.0.0.1:18443";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");

fn fixture(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(format!("{FIXTURES}/{path}")).unwrap()).unwrap()
}

fn release_of(object: &Value) -> Value {
    let stored = object["data"]["release"].as_str().unwrap().as_bytes();
    let json = helm_guard::release::decode::codec::decode_secret_payload(stored, Default::default()).unwrap();
    serde_json::from_slice(&json).unwrap()
}

fn with_release(mut object: Value, release_json: &[u8]) -> Value {
    let stored = helm_guard::release::decode::codec::encode_secret_payload(release_json);
    object["data"]["release"] = json!(String::from_utf8(stored).unwrap());
    object
}

/// VmRSS and VmHWM of a process, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

struct Guard {
    child: Child,
    config: Arc<rustls::ClientConfig>,
}

impl Guard {
    async fn start(binary: &str, extra: &[&str]) -> Guard {
        let snapshot = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cluster-snapshot.json");
        Guard::start_on(binary, &["--snapshot", snapshot], extra).await
    }

    /// A guard on `source` (a snapshot, or the cluster in KUBECONFIG).
    async fn start_on(binary: &str, source: &[&str], extra: &[&str]) -> Guard {
        let certs = "target/abuse-certs";
        let child = Command::new(binary)
            .arg("serve")
            .args(source)
            .args(["--dev-certs", certs, "--listen", ADDR])
            .args(["--metrics-listen", "127.0.0.1:19090", "--log-format", "text"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("the guard binary (cargo build --release)");
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(ADDR).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ca = std::fs::read(format!("{certs}/ca.crt")).unwrap();
        Guard { child, config: tls::client_config(&ca) }
    }

    async fn tls(&self) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect(ADDR).await?;
        let name = ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(self.config.clone()).connect(name, tcp).await
    }

    async fn connect(&self) -> Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(self.tls().await.ok()?)).await.ok()?;
        tokio::spawn(conn);
        Some(sender)
    }

    fn memory(&self) -> (f64, f64) {
        memory(self.child.id())
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one request; `Ok((status, connection: close?))`.
async fn post(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    body: Bytes,
) -> Result<(u16, bool), String> {
    exchange(sender, body).await.map(|(status, close, _)| (status, close))
}

/// Sends one request; `Ok((status, connection: close?, the answer's body))`.
async fn exchange(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    body: Bytes,
) -> Result<(u16, bool, Bytes), String> {
    let request = hyper::Request::builder()
        .method("POST")
        .uri("/validate?timeout=5s")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap();
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let close = response.headers().get("connection").is_some_and(|v| v == "close");
    let status = response.status().as_u16();
    let answer = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, close, answer))
}

fn small_review() -> Bytes {
    Bytes::from(
        std::fs::read(format!(
            "{FIXTURES}/03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json"
        ))
        .unwrap(),
    )
}

async fn bomb(binary: &str) {
    let guard = Guard::start(binary, &[]).await;
    let mut sender = guard.connect().await.unwrap();
    post(&mut sender, small_review()).await.unwrap();
    let (_, before) = guard.memory();
    let mut review =
        fixture("01-helm4-install-upgrade/001-validate-create-secret-sh.helm.release.v1.web.v2.json");
    let text = serde_json::to_string(&release_of(&review["request"]["object"])).unwrap();
    let at = text.find("\"config\":{").unwrap() + "\"config\":{".len();
    let inner = "{\"a\":{},\"b\":{}},".repeat(1_900_000);
    let bomb = format!("{}\"bomb\":[{inner}{{}}],{}", &text[..at], &text[at..]);
    review["request"]["object"] = with_release(review["request"]["object"].clone(), bomb.as_bytes());
    let body = Bytes::from(serde_json::to_vec(&review).unwrap());
    let started = Instant::now();
    let answer = post(&mut sender, body.clone()).await;
    let (_, after) = guard.memory();
    println!("config bomb: body {} KiB, {} MiB decoded", body.len() / 1024, bomb.len() >> 20);
    println!("  answer {answer:?} in {:?}", started.elapsed());
    println!("  peak RSS before {before:.1} MiB, after {after:.1} MiB: +{:.1} MiB", after - before);
    guard.stop();
}

/// Copies of a real manifest, each with a line of noise (`NOISE` characters, default 110), so
/// that it compresses like real ones do: 6.5 MiB, stored in 0.48 MiB (`NOISE=400`: near the
/// 1 MiB Kubernetes allows a Secret).
fn large_manifest(base: &str) -> String {
    let noise_per_copy: usize = std::env::var("NOISE").ok().and_then(|n| n.parse().ok()).unwrap_or(110);
    let mut manifest = String::new();
    let mut n: u64 = 0;
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    while manifest.len() < 6_815_744 {
        let mut noise = String::new();
        while noise.len() < noise_per_copy {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            noise.push_str(&format!("{:016x}", seed >> 1));
        }
        manifest.push_str(&format!("# copy {n}: {}\n{base}", &noise[..noise_per_copy]));
        n += 1;
    }
    manifest
}

async fn updates(binary: &str) {
    let guard = Guard::start(binary, &[]).await;
    let template =
        fixture("01-helm4-install-upgrade/006-validate-update-secret-sh.helm.release.v1.web.v3.json");
    let mut release = release_of(&template["request"]["oldObject"]);
    let manifest = large_manifest(release["manifest"].as_str().unwrap());
    release["manifest"] = json!(manifest);
    let mut review = template.clone();
    for side in ["oldObject", "object"] {
        let status = release_of(&template["request"][side])["info"]["status"].clone();
        let mut this = release.clone();
        this["info"]["status"] = status;
        review["request"][side] =
            with_release(template["request"][side].clone(), &serde_json::to_vec(&this).unwrap());
    }
    let body = Bytes::from(serde_json::to_vec(&review).unwrap());
    let (idle, _) = guard.memory();
    let answered = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut sender = guard.connect().await.unwrap();
        let (body, answered) = (body.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                if let Ok((200, _)) = post(&mut sender, body.clone()).await {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (_, peak) = guard.memory();
    println!(
        "16 concurrent UPDATEs of a {:.1} MiB-manifest release, 5 rounds:",
        manifest.len() as f64 / 1048576.0
    );
    let stored = review["request"]["object"]["data"]["release"].as_str().unwrap().len();
    println!(
        "  stored data.release {:.2} MiB (API base64), body {:.2} MiB each; {} of 80 answered 200 in {:?}",
        stored as f64 / 1048576.0,
        body.len() as f64 / 1048576.0,
        answered.load(Ordering::Relaxed),
        started.elapsed()
    );
    println!("  RSS idle {idle:.1} MiB, whole-process peak {peak:.1} MiB");
    guard.stop();
}

/// 16 concurrent break-glass DELETEs of a large record, 5 rounds, against the cluster in
/// KUBECONFIG: each keeps a copy in the recycle bin (namespace `helm-guard-abuse-bin`, made and
/// removed here) before it is approved.
async fn recycle(binary: &str) {
    let bin = "helm-guard-abuse-bin";
    let made = Command::new("kubectl").args(["create", "namespace", bin]).status().unwrap();
    assert!(made.success(), "kubectl create namespace {bin} (a cluster in KUBECONFIG)");
    // RECYCLE_BIN=false: the same DELETEs without the copies, to measure what they cost.
    let keep = std::env::var("RECYCLE_BIN").unwrap_or_else(|_| "true".into());
    let keep = format!("--recycle-bin={keep}");
    let guard =
        Guard::start_on(binary, &["--lease-namespace", bin, "--coordination", "none", &keep], &[]).await;
    // The watchers list the cluster before the guard is ready; decisions wait for it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let template =
        fixture("03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json");
    let mut release = release_of(&template["request"]["oldObject"]);
    let manifest = large_manifest(release["manifest"].as_str().unwrap());
    release["manifest"] = json!(manifest);
    let mut old =
        with_release(template["request"]["oldObject"].clone(), &serde_json::to_vec(&release).unwrap());
    old["metadata"]["annotations"] = json!({"helm-guard.io/allow-delete": "abuse run"});
    let body = |n: usize| {
        // Another object each time: another copy.
        let mut review = template.clone();
        review["request"]["uid"] = json!(format!("abuse-{n}"));
        let mut old = old.clone();
        old["metadata"]["uid"] = json!(format!("00000000-0000-0000-0000-{n:012}"));
        review["request"]["oldObject"] = old;
        Bytes::from(serde_json::to_vec(&review).unwrap())
    };
    let (idle, _) = guard.memory();
    let (kept, approved) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for connection in 0..16 {
        let mut sender = guard.connect().await.unwrap();
        let bodies: Vec<Bytes> = (0..5).map(|round| body(connection * 5 + round)).collect();
        let (kept, approved) = (kept.clone(), approved.clone());
        tasks.push(tokio::spawn(async move {
            for body in bodies {
                let Ok((_, _, answer)) = exchange(&mut sender, body).await else { continue };
                let answer: Value = serde_json::from_slice(&answer).unwrap_or_default();
                if answer["response"]["auditAnnotations"]["recycle-bin-copy"].is_string() {
                    kept.fetch_add(1, Ordering::Relaxed);
                }
                if answer["response"]["allowed"] == true {
                    approved.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let took = started.elapsed();
    let (_, peak) = guard.memory();
    let stored = old["data"]["release"].as_str().unwrap().len();
    println!("16 concurrent break-glass DELETEs, each keeping a copy, 5 rounds:");
    println!(
        "  stored data.release {:.2} MiB (API base64), body {:.2} MiB each; {} of 80 approved, {} with a copy kept, in {took:?}",
        stored as f64 / 1048576.0,
        body(0).len() as f64 / 1048576.0,
        approved.load(Ordering::Relaxed),
        kept.load(Ordering::Relaxed)
    );
    println!("  RSS idle {idle:.1} MiB, whole-process peak {peak:.1} MiB");
    guard.stop();
    let _ = Command::new("kubectl").args(["delete", "namespace", bin, "--wait=false"]).status();
}

async fn slow_bodies(binary: &str) {
    let guard = Guard::start(binary, &[]).await;
    let (idle, _) = guard.memory();
    let started = Instant::now();
    let closed = Arc::new(AtomicUsize::new(0));
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..40 {
        let mut tls = guard.tls().await.unwrap();
        let closed = closed.clone();
        let chunk = chunk.clone();
        tokio::spawn(async move {
            // At --max-body-bytes by default (the worst that gets buffered); ANNOUNCE=8388608
            // for the 8 MiB of the original report (refused at once with 413).
            let announced: usize =
                std::env::var("ANNOUNCE").ok().and_then(|n| n.parse().ok()).unwrap_or(4 * 1024 * 1024);
            let head =
                format!("POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-length: {announced}\r\n\r\n");
            let mut sent = 0;
            let _ = tls.write_all(head.as_bytes()).await;
            while sent < announced - 1 {
                let n = chunk.len().min(announced - 1 - sent);
                if tls.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                sent += n;
            }
            // Never finish; wait for the server to close.
            let mut rest = Vec::new();
            let _ = tokio::time::timeout(
                Duration::from_secs(70),
                tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut rest),
            )
            .await;
            if started.elapsed() < Duration::from_secs(60) {
                closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut answered = 0;
    let mut asked = 0;
    let mut peak = 0.0f64;
    // Ask at least 15 s, and until every unfinished body is cut off.
    while started.elapsed() < Duration::from_secs(15)
        || (started.elapsed() < Duration::from_secs(60) && closed.load(Ordering::Relaxed) < 40)
    {
        asked += 1;
        if let Some(mut sender) = guard.connect().await
            && let Ok((200, _)) =
                tokio::time::timeout(Duration::from_secs(10), post(&mut sender, small_review()))
                    .await
                    .unwrap_or(Err(String::new()))
        {
            answered += 1;
        }
        peak = peak.max(guard.memory().1);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("40 connections each announcing a body and sending all of it but one byte:");
    println!(
        "  closed by the server within 60 s: {} of 40 (after {:?})",
        closed.load(Ordering::Relaxed),
        started.elapsed()
    );
    println!("  a well-behaved client meanwhile: {answered} of {asked} answered");
    println!("  RSS idle {idle:.1} MiB, whole-process peak {peak:.1} MiB");
    guard.stop();
}

async fn sigterm(binary: &str) {
    let delay = Duration::from_secs(5);
    let guard = Guard::start(binary, &["--shutdown-delay", "5s"]).await;
    let body = small_review();
    let start = Instant::now();
    let term_at = Duration::from_secs(3);
    let failed = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let guard = Arc::new(guard);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (guard, body, failed, sent) = (guard.clone(), body.clone(), failed.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender = None;
            // Requests sent before the shutdown delay ends must all be answered.
            while start.elapsed() < term_at + delay {
                if sender.is_none() {
                    sender = guard.connect().await;
                }
                let Some(s) = sender.as_mut() else {
                    if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("connect failed at {:?}", start.elapsed());
                    }
                    continue;
                };
                sent.fetch_add(1, Ordering::Relaxed);
                match post(s, body.clone()).await {
                    Ok((200, close)) => {
                        if close {
                            sender = None;
                        }
                    }
                    other => {
                        if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("request failed at {:?}: {other:?}", start.elapsed());
                        }
                        sender = None;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(term_at).await;
    let pid = guard.child.id();
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    for task in tasks {
        task.await.unwrap();
    }
    println!("SIGTERM at 3 s during a load run on 16 keep-alive connections, --shutdown-delay 5s:");
    println!(
        "  {} requests sent before the delay ended, {} failed",
        sent.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    if let Ok(guard) = Arc::try_unwrap(guard) {
        guard.stop();
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let binary = args.get(1).map_or("target/release/helm-guard", String::as_str);
    match args.first().map(String::as_str) {
        Some("bomb") => bomb(binary).await,
        Some("updates") => updates(binary).await,
        Some("slow-bodies") => slow_bodies(binary).await,
        Some("sigterm") => sigterm(binary).await,
        Some("recycle") => recycle(binary).await,
        _ => {
            eprintln!("usage: abuse bomb|updates|slow-bodies|sigterm|recycle [GUARD_BINARY]");
            std::process::exit(2);
        }
    }
}
