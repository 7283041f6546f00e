//! A soak: a million generated reviews against the release binary, over HTTP/1.1 or HTTP/2,
//! with its memory read from /proc (results in BENCHMARKS.md).
//!
//!     cargo build --release --bins --examples
//!     target/release/examples/soak                  # REVIEWS=1000000 PROTO=http1 SEED=1
//!     PROTO=h2 target/release/examples/soak
//!
//! Every review the API server has sent in `tests/fixtures/admission` (record CREATE, UPDATE and
//! DELETE of Secrets and ConfigMaps, a helm-install pod), and namespace reviews made from them,
//! each sent as it is, mutated (a value anywhere replaced by another of any type, a key removed,
//! a payload damaged) or hostile (cut short, bytes changed, nested past any parser's depth, a
//! 1 MiB string, the wrong kind, not JSON, empty). Seeded and reproducible. It fails (exit 1)
//! on any 5xx, any request not answered, any panic in the guard's log, or a peak memory more than
//! 10 % above the peak after the first tenth.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};

#[path = "support/guard.rs"]
mod guard;
#[path = "support/tls.rs"]
mod tls;
use guard::{Guard, Outcome, Sender};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");
/// Distinct reviews generated; the run cycles through them.
const POOL: usize = 50_000;
const CONNECTIONS: usize = 16;

/// A review the API server sent, and the webhook it went to.
struct Fixture {
    path: &'static str,
    review: Value,
}

fn fixtures() -> Vec<Fixture> {
    let mut found = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(FIXTURES)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let review: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                let webhook =
                    if name.contains("-mutate-") { "/mutate?timeout=5s" } else { "/validate?timeout=5s" };
                found.push(Fixture { path: webhook, review });
            }
        }
    }
    found.sort_by_key(|f| f.review["request"]["uid"].to_string());
    // Namespace reviews: the opt-out label set, removed, and the namespace deleted.
    let template = found.iter().find(|f| f.path.starts_with("/validate")).unwrap().review.clone();
    for (operation, old, new) in [
        ("UPDATE", json!({}), json!({"helm-guard.io/enforce": "off"})),
        ("UPDATE", json!({"helm-guard.io/enforce": "off"}), json!({})),
        ("DELETE", json!({}), Value::Null),
    ] {
        let mut review = template.clone();
        let request = &mut review["request"];
        request["kind"] = json!({"group": "", "version": "v1", "kind": "Namespace"});
        request["resource"] = json!({"group": "", "version": "v1", "resource": "namespaces"});
        request["operation"] = json!(operation);
        request["namespace"] = Value::Null;
        let namespace = |labels: &Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo", "labels": labels}});
        request["oldObject"] = namespace(&old);
        request["object"] = if new.is_null() { Value::Null } else { namespace(&new) };
        found.push(Fixture { path: "/validate?timeout=5s", review });
    }
    found
}

/// A value of a random type.
fn any_value(rng: &mut fastrand::Rng) -> Value {
    match rng.usize(0..7) {
        0 => Value::Null,
        1 => json!(rng.bool()),
        2 => json!(rng.i64(..)),
        3 => json!(rng.f64() * 1e6),
        4 => json!((0..rng.usize(0..40)).map(|_| rng.alphanumeric()).collect::<String>()),
        5 => json!([]),
        _ => json!({}),
    }
}

/// Replaces a value somewhere in `value` by one of any type, or removes a key.
fn mutate(value: &mut Value, rng: &mut fastrand::Rng) {
    let descend = rng.usize(0..4) != 0;
    match value {
        Value::Object(map) if !map.is_empty() && descend => {
            let key = map.keys().nth(rng.usize(0..map.len())).unwrap().clone();
            if rng.usize(0..8) == 0 {
                map.remove(&key);
            } else {
                mutate(map.get_mut(&key).unwrap(), rng);
            }
        }
        Value::Array(items) if !items.is_empty() && descend => {
            let i = rng.usize(0..items.len());
            mutate(&mut items[i], rng);
        }
        _ => *value = any_value(rng),
    }
}

/// One review: as sent (40 %), mutated (35 %), a payload damaged (10 %), or hostile (15 %).
fn generate(fixtures: &[Fixture], rng: &mut fastrand::Rng, n: usize) -> (&'static str, Bytes) {
    let fixture = &fixtures[rng.usize(0..fixtures.len())];
    let mut review = fixture.review.clone();
    review["request"]["uid"] = json!(format!("soak-{n}"));
    let roll = rng.usize(0..100);
    if (40..75).contains(&roll) {
        for _ in 0..rng.usize(1..4) {
            mutate(&mut review, rng);
        }
    } else if (75..85).contains(&roll) {
        for side in ["object", "oldObject"] {
            if let Some(payload) = review["request"][side]["data"]["release"].as_str() {
                let mut bytes = payload.as_bytes().to_vec();
                if !bytes.is_empty() {
                    let at = rng.usize(0..bytes.len());
                    match rng.usize(0..3) {
                        0 => bytes.truncate(at),
                        1 => bytes[at] = b"A=/+!\n"[rng.usize(0..6)],
                        _ => bytes.insert(at, b'='),
                    }
                }
                review["request"][side]["data"]["release"] = json!(String::from_utf8_lossy(&bytes));
            }
        }
    }
    let mut body = serde_json::to_vec(&review).unwrap();
    if roll >= 85 {
        body = match rng.usize(0..8) {
            0 => body[..rng.usize(0..body.len())].to_vec(),
            1 => {
                for _ in 0..rng.usize(1..9) {
                    let at = rng.usize(0..body.len());
                    body[at] = rng.u8(..);
                }
                body
            }
            2 => {
                let depth = rng.usize(100..100_000);
                let mut deep =
                    br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"#.to_vec();
                deep.extend(std::iter::repeat_n(b'[', depth));
                deep.extend(std::iter::repeat_n(b']', depth));
                deep.push(b'}');
                deep
            }
            3 => {
                review["request"]["userInfo"]["username"] = json!("x".repeat(1 << 20));
                serde_json::to_vec(&review).unwrap()
            }
            4 => {
                review["apiVersion"] = json!("admission.k8s.io/v1beta1");
                serde_json::to_vec(&review).unwrap()
            }
            5 => (0..rng.usize(0..4096)).map(|_| rng.u8(..)).collect(),
            6 => Vec::new(),
            _ => {
                review["request"]["operation"] = json!("CONNECT");
                serde_json::to_vec(&review).unwrap()
            }
        };
    }
    (fixture.path, Bytes::from(body))
}

#[tokio::main]
async fn main() {
    let total: usize = std::env::var("REVIEWS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
    let seed: u64 = std::env::var("SEED").ok().and_then(|n| n.parse().ok()).unwrap_or(1);
    let h2 = std::env::var("PROTO").is_ok_and(|p| p == "h2");
    let binary = std::env::args().nth(1).unwrap_or_else(|| "target/release/helm-guard".into());
    let fixtures = fixtures();
    let mut rng = fastrand::Rng::with_seed(seed);
    let pool: Arc<Vec<(&'static str, Bytes)>> =
        Arc::new((0..POOL.min(total)).map(|n| generate(&fixtures, &mut rng, n)).collect());
    println!(
        "soak: {total} reviews over {} ({CONNECTIONS} connections), {} distinct generated from {} reviews (seed {seed})",
        if h2 { "HTTP/2" } else { "HTTP/1.1" },
        pool.len(),
        fixtures.len()
    );
    let guard = Arc::new(Guard::start(&binary, &[]).await);
    let next = Arc::new(AtomicUsize::new(0));
    let counts: Arc<[AtomicUsize; 6]> = Arc::new(Default::default());
    // The peak (VmHWM) at each tenth of the run.
    let peaks = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (guard, pool, next, counts, peaks) =
            (guard.clone(), pool.clone(), next.clone(), counts.clone(), peaks.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(total / CONNECTIONS + 1);
            let mut sender: Option<Sender> = None;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return latencies;
                }
                if n > 0 && n % (total / 10).max(1) == 0 {
                    peaks.lock().unwrap().push(guard.memory().1);
                }
                if sender.is_none() {
                    sender = Some(guard.connect_with(h2).await.expect("a connection to the guard"));
                }
                let (path, body) = &pool[n % pool.len()];
                let sent = Instant::now();
                let outcome = sender.as_mut().unwrap().send(path, body.clone()).await;
                latencies.push(sent.elapsed().as_micros() as u32);
                // 0: 2xx, 1: 4xx, 2: 5xx, 3: not answered, 4: closed before sending, 5: other.
                let slot = match outcome {
                    Outcome::Answered(status, close) => {
                        if close {
                            sender = None;
                        }
                        match status {
                            200..=299 => 0,
                            400..=499 => 1,
                            500..=599 => 2,
                            _ => 5,
                        }
                    }
                    Outcome::Lost(why) => {
                        eprintln!("  review {n} not answered: {why}");
                        sender = None;
                        3
                    }
                    Outcome::NotSent => {
                        sender = None;
                        4
                    }
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let took = started.elapsed();
    let (rss, peak) = guard.memory();
    let peaks = peaks.lock().unwrap().clone();
    let peak_at_tenth = peaks.first().copied().unwrap_or_default();
    latencies.sort_unstable();
    let pct =
        |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)] as f64 / 1000.0;
    let count = |i: usize| counts[i].load(Ordering::Relaxed);
    let log = std::fs::read_to_string(guard::LOG).unwrap_or_default();
    let panics = log.lines().filter(|l| l.contains("panicked")).count();
    println!(
        "  {} answered in {took:.1?} ({:.0}/s): {} 2xx, {} 4xx, {} 5xx, {} other; {} not answered, {} closed before sending",
        count(0) + count(1) + count(2) + count(5),
        total as f64 / took.as_secs_f64(),
        count(0),
        count(1),
        count(2),
        count(5),
        count(3),
        count(4)
    );
    println!("  latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms", pct(0.50), pct(0.99), pct(1.0));
    println!(
        "  memory: peak {peak_at_tenth:.1} MiB after the first tenth, {peak:.1} MiB at the end ({:+.1} %), RSS now {rss:.1} MiB",
        (peak / peak_at_tenth - 1.0) * 100.0
    );
    let series: Vec<String> = peaks.iter().map(|p| format!("{p:.1}")).collect();
    println!("  peak at each tenth: {} MiB", series.join(", "));
    println!("  panics in the guard's log: {panics}");
    let Ok(mut guard) = Arc::try_unwrap(guard) else { panic!("the clients are done") };
    let alive = matches!(guard.child.try_wait(), Ok(None));
    guard.stop();
    let failures: Vec<&str> = [
        (count(2) > 0, "5xx answers"),
        (count(3) > 0, "requests not answered"),
        (count(5) > 0, "unexpected statuses"),
        (panics > 0, "panics"),
        (!alive, "the guard exited"),
        (peak > peak_at_tenth * 1.10, "peak memory more than 10 % above the first tenth's"),
    ]
    .into_iter()
    .filter_map(|(failed, what)| failed.then_some(what))
    .collect();
    if !failures.is_empty() {
        println!("  FAILED: {}", failures.join(", "));
        std::process::exit(1);
    }
    println!("  passed");
}
