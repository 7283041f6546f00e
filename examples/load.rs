//! A bounded load run against a running guard, over HTTPS with keep-alive connections.
//!
//!     cargo run --release --example load -- ADDR CA_PEM REVIEW_JSON [REQUESTS] [CONCURRENCY] [PATH]
//!
//! REVIEW_JSON is one AdmissionReview, or with `.jsonl` one per line, sent in turn (reviews spread
//! over many releases: `examples/live_load.rs` writes them).
//!
//! e.g. `cargo run --release --example load -- 127.0.0.1:8443 certs/dev/ca.crt \
//!   tests/fixtures/admission/03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json`
//!
//! Sends REQUESTS (default 20,000) requests over CONCURRENCY (default 16) connections, stops after
//! 120 s at the latest, and prints throughput and latency percentiles. Loopback only: it is meant
//! for a guard started on this machine. Results: BENCHMARKS.md.
//!
//! With `LOAD_FLOOR=ADDR` (an `examples/floor.rs` on the same stack) it measures the floor and
//! the guard in turn, three rounds each, and prints the guard's ratio to the floor (best round
//! of each); with `LOAD_MIN_RATIO=R` it exits 1 when the guard's throughput is below R times the
//! floor's. `.ci/bench-ratio` runs it in CI for a few seconds with R = 0.3: it fails on a gross
//! regression, never on machine noise.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio_rustls::rustls::pki_types::ServerName;

#[path = "support/tls.rs"]
mod tls;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: load ADDR CA_PEM REVIEW_JSON [REQUESTS] [CONCURRENCY] [PATH]");
        std::process::exit(2);
    }
    let addr: std::net::SocketAddr = args[0].parse().expect("ADDR like 127.0.0.1:8443");
    let ca = std::fs::read(&args[1]).expect("CA file");
    let file = std::fs::read(&args[2]).expect("review file");
    let bodies: Vec<Bytes> = if args[2].ends_with(".jsonl") {
        file.split(|b| *b == b'\n').filter(|line| !line.is_empty()).map(Bytes::copy_from_slice).collect()
    } else {
        vec![Bytes::from(file)]
    };
    let requests: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let concurrency: usize = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(16);
    let path = args.get(5).cloned().unwrap_or_else(|| "/validate?timeout=5s".into());
    let connector = tokio_rustls::TlsConnector::from(tls::client_config(&ca));
    let load = Load { connector, bodies: Arc::new(bodies), path, requests, concurrency };

    let Some(floor) = std::env::var("LOAD_FLOOR").ok() else {
        load.run(addr).await.print();
        return;
    };
    let floor: std::net::SocketAddr = floor.parse().expect("LOAD_FLOOR like 127.0.0.1:8444");
    let (mut best_floor, mut best_guard): (Option<Measured>, Option<Measured>) = (None, None);
    for _ in 0..3 {
        let f = load.run(floor).await;
        let g = load.run(addr).await;
        assert_eq!(g.errors, 0, "the guard failed requests");
        if best_floor.as_ref().is_none_or(|b| f.throughput() > b.throughput()) {
            best_floor = Some(f);
        }
        if best_guard.as_ref().is_none_or(|b| g.throughput() > b.throughput()) {
            best_guard = Some(g);
        }
    }
    let (floor, guard) = (best_floor.unwrap(), best_guard.unwrap());
    println!("floor:");
    floor.print();
    println!("guard:");
    guard.print();
    let ratio = guard.throughput() / floor.throughput();
    let p50 = guard.pct(0.5).as_secs_f64() / floor.pct(0.5).as_secs_f64();
    println!("ratio: throughput {ratio:.2}x, p50 {p50:.2}x (c={concurrency})");
    if let Some(min) = std::env::var("LOAD_MIN_RATIO").ok().and_then(|r| r.parse::<f64>().ok())
        && ratio < min
    {
        eprintln!("FAIL: the guard's throughput is {ratio:.2}x the floor's, below {min}x");
        std::process::exit(1);
    }
}

struct Load {
    connector: tokio_rustls::TlsConnector,
    bodies: Arc<Vec<Bytes>>,
    path: String,
    requests: usize,
    concurrency: usize,
}

struct Measured {
    latencies: Vec<Duration>,
    errors: usize,
    /// Answers that allowed the request (the rest of the latencies refused it).
    allowed: usize,
    elapsed: Duration,
    concurrency: usize,
}

impl Measured {
    fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn pct(&self, p: f64) -> Duration {
        let l = &self.latencies;
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1))).copied().unwrap_or_default()
    }

    fn print(&self) {
        println!(
            "requests: {} answered ({} allowed), {} failed, in {:.2} s over {} connections",
            self.latencies.len(),
            self.allowed,
            self.errors,
            self.elapsed.as_secs_f64(),
            self.concurrency
        );
        println!("throughput: {:.0} requests/s", self.throughput());
        println!(
            "latency: p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
            self.pct(0.50),
            self.pct(0.90),
            self.pct(0.99),
            self.latencies.last().copied().unwrap_or_default()
        );
    }
}

impl Load {
    async fn run(&self, addr: std::net::SocketAddr) -> Measured {
        assert!(addr.ip().is_loopback(), "load runs target this machine only");
        let issued = Arc::new(AtomicUsize::new(0));
        let deadline = Instant::now() + Duration::from_secs(120);
        let started = Instant::now();
        let mut workers = Vec::new();
        for _ in 0..self.concurrency {
            let (connector, bodies, path, issued) =
                (self.connector.clone(), self.bodies.clone(), self.path.clone(), issued.clone());
            let requests = self.requests;
            workers.push(tokio::spawn(async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let tls =
                    connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.expect("TLS");
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
                tokio::spawn(conn);
                let mut latencies = Vec::new();
                let (mut errors, mut allowed) = (0usize, 0usize);
                loop {
                    let n = issued.fetch_add(1, Ordering::Relaxed);
                    if n >= requests || Instant::now() >= deadline {
                        break;
                    }
                    let request = hyper::Request::post(path.as_str())
                        .header("host", "localhost")
                        .header("content-type", "application/json")
                        .body(Full::new(bodies[n % bodies.len()].clone()))
                        .unwrap();
                    let sent = Instant::now();
                    if sender.ready().await.is_err() {
                        errors += 1;
                        break;
                    }
                    match sender.send_request(request).await {
                        Ok(response) if response.status() == 200 => {
                            let body = response.into_body().collect().await.map(|b| b.to_bytes());
                            latencies.push(sent.elapsed());
                            let said = body.unwrap_or_default();
                            allowed += usize::from(said.windows(14).any(|w| w == b"\"allowed\":true"));
                        }
                        _ => errors += 1,
                    }
                }
                (latencies, errors, allowed)
            }));
        }
        let mut latencies = Vec::new();
        let (mut errors, mut allowed) = (0, 0);
        for worker in workers {
            let (l, e, a) = worker.await.unwrap();
            latencies.extend(l);
            errors += e;
            allowed += a;
        }
        let elapsed = started.elapsed();
        latencies.sort();
        Measured { latencies, errors, allowed, elapsed, concurrency: self.concurrency }
    }
}
