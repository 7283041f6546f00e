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
//! in KUBECONFIG), `floods` (300 connections that never start TLS and 3,000 half-sent requests on
//! the metrics listener, each from a pod's address of its own, beside a steady load of reviews and
//! health checks). Each starts its own guard (snapshot mode but for `recycle`, loopback ports
//! 18443/19090), bounded in time; loopback only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

#[path = "support/guard.rs"]
mod guard;
#[path = "support/tls.rs"]
mod tls;
use guard::{Guard, Outcome, Sender};

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
    let guard = Guard::start_on(binary, &["--guard-namespace", bin, &keep], &[]).await;
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

/// One rollout's SIGTERM under load. The load runs before, through and after the shutdown
/// delay, as the API server's would: new connections only while the endpoint is still listed
/// (to the end of the delay), kept-alive ones until the guard closes them. Every request sent on
/// a connection the guard accepted must be answered; the run counts those that were not.
async fn sigterm_run(binary: &str, h2: bool, term_at: Duration) -> (usize, usize, usize) {
    let delay = Duration::from_secs(5);
    let guard = Arc::new(Guard::start(binary, &["--shutdown-delay", "5s"]).await);
    // Each request its own uid, so that a lost one can be looked for in the guard's ledger.
    let template: Arc<Value> = Arc::new(serde_json::from_slice(&small_review()).unwrap());
    let lost_uids = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let start = Instant::now();
    let (answered, lost, not_sent) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    // What each client is doing (0 done, 1 connecting, 2 sending), told if one never ends.
    let doing: Arc<[std::sync::atomic::AtomicU8; 16]> = Arc::new(Default::default());
    for worker in 0..16 {
        let (guard, template, doing, lost_uids) =
            (guard.clone(), template.clone(), doing.clone(), lost_uids.clone());
        let (answered, lost, not_sent) = (answered.clone(), lost.clone(), not_sent.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender: Option<Sender> = None;
            let mut sequence = 0u64;
            loop {
                if sender.is_none() {
                    // The endpoint is gone once the delay ends: no new connections.
                    if start.elapsed() >= term_at + delay {
                        doing[worker].store(0, Ordering::Relaxed);
                        return;
                    }
                    doing[worker].store(1, Ordering::Relaxed);
                    match guard.connect_with(h2).await {
                        Ok(s) => sender = Some(s),
                        Err(e) => {
                            if lost.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("  refused at {:?} while still an endpoint: {e}", start.elapsed());
                            }
                            continue;
                        }
                    }
                }
                let Some(s) = sender.as_mut() else { continue };
                doing[worker].store(2, Ordering::Relaxed);
                sequence += 1;
                let uid = format!("sigterm-{worker}-{sequence}");
                let mut review = (*template).clone();
                review["request"]["uid"] = json!(uid);
                let body = Bytes::from(serde_json::to_vec(&review).unwrap());
                match s.send("/validate?timeout=5s", body).await {
                    Outcome::Answered(200, close) => {
                        answered.fetch_add(1, Ordering::Relaxed);
                        if close {
                            sender = None;
                        }
                    }
                    Outcome::Answered(status, _) => {
                        if lost.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("  answered {status} at {:?}", start.elapsed());
                        }
                    }
                    Outcome::NotSent => {
                        not_sent.fetch_add(1, Ordering::Relaxed);
                        sender = None;
                    }
                    Outcome::Lost(why) => {
                        if lost.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("  lost at {:?}: {why}", start.elapsed());
                        }
                        lost_uids.lock().unwrap().push((uid, why));
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
        // The guard is gone within its grace (20 s) after the delay; a client still waiting
        // long after is this tool's fault, told rather than waited for.
        match tokio::time::timeout(delay + Duration::from_secs(40), task).await {
            Ok(done) => done.unwrap(),
            Err(_) => {
                let doing: Vec<u8> = doing.iter().map(|d| d.load(Ordering::Relaxed)).collect();
                panic!("a client never finished (0 done, 1 connecting, 2 sending): {doing:?}");
            }
        }
    }
    if let Ok(mut guard) = Arc::try_unwrap(guard) {
        // It exits by itself once its connections are done; it is killed only past the grace.
        let exited = (0..250).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            matches!(guard.child.try_wait(), Ok(Some(_)))
        });
        if !exited {
            eprintln!("  the guard had not exited 25 s after the delay ended");
        }
        guard.stop();
    }
    // Whether the guard decided each lost request (its ledger line is in the log): if so, the
    // answer was lost between the guard's decision and the client.
    let log = std::fs::read_to_string(guard::LOG).unwrap_or_default();
    for (uid, why) in lost_uids.lock().unwrap().iter() {
        let decided = log.contains(&format!("\"{uid}\""));
        eprintln!(
            "  lost {uid} ({why}): {}",
            if decided { "decided by the guard (in its ledger)" } else { "not in the guard's ledger" }
        );
    }
    (answered.load(Ordering::Relaxed), lost.load(Ordering::Relaxed), not_sent.load(Ordering::Relaxed))
}

/// `RUNS` rollouts (default 1), `PROTO=h2` for HTTP/2, `TERM_AT` seconds of load before SIGTERM
/// (default 12: over 100,000 requests a run).
async fn sigterm(binary: &str) {
    let runs: usize = std::env::var("RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(1);
    let h2 = std::env::var("PROTO").is_ok_and(|p| p == "h2");
    let term_at =
        Duration::from_secs(std::env::var("TERM_AT").ok().and_then(|n| n.parse().ok()).unwrap_or(12));
    println!(
        "SIGTERM after {term_at:?} of load on 16 keep-alive {} connections, --shutdown-delay 5s:",
        if h2 { "HTTP/2" } else { "HTTP/1.1" }
    );
    let mut clean = 0;
    for run in 1..=runs {
        let (answered, lost, not_sent) = sigterm_run(binary, h2, term_at).await;
        if lost == 0 {
            clean += 1;
        }
        println!(
            "  run {run}: {} requests, {answered} answered, {lost} lost; {not_sent} closed before they were sent",
            answered + lost
        );
    }
    println!("  {clean} of {runs} runs lost nothing");
}

/// A connection from `source` (a loopback address standing for a pod) to `to`.
async fn from(source: &str, to: &str) -> Option<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind(format!("{source}:0").parse().unwrap()).ok()?;
    socket.connect(to.parse().unwrap()).await.ok()
}

/// Any pod against the listeners: `RAW` (300) connections to the webhook port that never start
/// TLS, reopened as the guard closes them, from 10 addresses; `HALF` (3,000) requests to the
/// metrics port whose headers never end, from 20; beside them a review every 20 ms on a
/// kept-alive connection and a health check every second, for 30 s. Counts the reviews and
/// checks that failed, and the guard's RSS.
async fn floods(binary: &str) {
    let guard = Guard::start(binary, &[]).await;
    let (idle, _) = guard.memory();
    let count =
        |name: &str, default: usize| std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    let (raw, half) = (count("RAW", 300), count("HALF", 3000));
    let started = Instant::now();
    let until = started + Duration::from_secs(30);
    let reopened = Arc::new(AtomicUsize::new(0));
    for n in 0..raw {
        let reopened = reopened.clone();
        tokio::spawn(async move {
            let source = format!("127.0.1.{}", 1 + n % 10);
            while Instant::now() < until {
                let Some(mut tcp) = from(&source, guard::ADDR).await else { break };
                let mut byte = [0u8; 1];
                // Held until the guard closes it; then again.
                let _ =
                    tokio::time::timeout_at(until.into(), tokio::io::AsyncReadExt::read(&mut tcp, &mut byte))
                        .await;
                reopened.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut held = Vec::new();
    for n in 0..half {
        if let Some(mut tcp) = from(&format!("127.0.2.{}", 1 + n % 20), "127.0.0.1:19090").await {
            let _ = tcp.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-slow: ").await;
            held.push(tcp);
        }
    }
    let (mut asked, mut failed, mut probes, mut probes_failed) = (0, 0, 0, 0);
    let mut peak = 0.0f64;
    let mut sender = guard.connect().await;
    let mut last_probe = Instant::now() - Duration::from_secs(1);
    while Instant::now() < until {
        asked += 1;
        let answered = match sender.as_mut() {
            Some(s) => matches!(
                tokio::time::timeout(Duration::from_secs(10), post(s, small_review())).await,
                Ok(Ok((200, _)))
            ),
            None => false,
        };
        if !answered {
            failed += 1;
            sender = guard.connect().await;
        }
        if last_probe.elapsed() >= Duration::from_secs(1) {
            last_probe = Instant::now();
            probes += 1;
            let probe = async {
                let mut tcp = tokio::net::TcpStream::connect("127.0.0.1:19090").await.ok()?;
                tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.ok()?;
                let mut answer = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut answer).await.ok()?;
                answer.starts_with(b"HTTP/1.1 200").then_some(())
            };
            if tokio::time::timeout(Duration::from_secs(5), probe).await.ok().flatten().is_none() {
                probes_failed += 1;
            }
        }
        peak = peak.max(guard.memory().1);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{raw} connections that never start TLS (10 sources), {half} half-sent metrics requests (20 sources), 30 s:"
    );
    println!("  raw connections closed by the guard and opened again: {}", reopened.load(Ordering::Relaxed));
    println!("  half-sent requests opened: {}", held.len());
    println!("  reviews: {failed} failed of {asked}; health checks: {probes_failed} failed of {probes}");
    println!("  RSS idle {idle:.1} MiB, whole-process peak {peak:.1} MiB");
    guard.stop();
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
        Some("floods") => floods(binary).await,
        _ => {
            eprintln!("usage: abuse bomb|updates|slow-bodies|sigterm|recycle|floods [GUARD_BINARY]");
            std::process::exit(2);
        }
    }
}
