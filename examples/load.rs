//! A bounded load run against a running guard, over HTTPS with keep-alive connections.
//!
//!     cargo run --release --example load -- ADDR CA_PEM REVIEW_JSON [REQUESTS] [CONCURRENCY] [PATH]
//!
//! e.g. `cargo run --release --example load -- 127.0.0.1:8443 certs/dev/ca.crt \
//!   tests/fixtures/admission/03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json`
//!
//! Sends REQUESTS (default 20,000) requests over CONCURRENCY (default 16) connections, stops after
//! 120 s at the latest, and prints throughput and latency percentiles. Loopback only: it is meant
//! for a guard started on this machine. Results: BENCHMARKS.md.

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
    assert!(addr.ip().is_loopback(), "load runs target this machine only");
    let ca = std::fs::read(&args[1]).expect("CA file");
    let body = Bytes::from(std::fs::read(&args[2]).expect("review file"));
    let requests: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let concurrency: usize = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(16);
    let path = args.get(5).cloned().unwrap_or_else(|| "/validate?timeout=5s".into());

    let connector = tokio_rustls::TlsConnector::from(tls::client_config(&ca));

    let issued = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(120);
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (connector, body, path, issued) = (connector.clone(), body.clone(), path.clone(), issued.clone());
        workers.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.expect("TLS");
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
            tokio::spawn(conn);
            let mut latencies = Vec::new();
            let mut errors = 0usize;
            while issued.fetch_add(1, Ordering::Relaxed) < requests && Instant::now() < deadline {
                let request = hyper::Request::post(path.as_str())
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .unwrap();
                let sent = Instant::now();
                match sender.send_request(request).await {
                    Ok(response) if response.status() == 200 => {
                        let _ = response.into_body().collect().await;
                        latencies.push(sent.elapsed());
                    }
                    _ => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (l, e) = worker.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "requests: {} ok, {errors} failed, in {:.2} s over {concurrency} connections",
        latencies.len(),
        elapsed.as_secs_f64()
    );
    println!("throughput: {:.0} requests/s", latencies.len() as f64 / elapsed.as_secs_f64());
    println!(
        "latency: p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        latencies.last().copied().unwrap_or_default()
    );
}
