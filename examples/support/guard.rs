//! The release binary started as a guard for the measuring tools (`abuse`, `soak`), and clients
//! of it over HTTP/1.1 and HTTP/2.

#![allow(dead_code, reason = "each tool uses a part of it")]

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

/// Where the guard listens (loopback only; metrics on 19090).
pub const ADDR: &str = "127.0.0.1:18443";
/// Where its log goes: a line per refusal is not the tools' output.
pub const LOG: &str = "target/guard-under-test.log";

/// VmRSS and VmHWM of a process, in MiB.
pub fn memory(pid: u32) -> (f64, f64) {
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

pub struct Guard {
    pub child: Child,
    pub config: Arc<rustls::ClientConfig>,
}

impl Guard {
    pub async fn start(binary: &str, extra: &[&str]) -> Guard {
        let snapshot = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cluster-snapshot.json");
        Guard::start_on(binary, &["--snapshot", snapshot], extra).await
    }

    /// A guard on `source` (a snapshot, or the cluster in KUBECONFIG).
    pub async fn start_on(binary: &str, source: &[&str], extra: &[&str]) -> Guard {
        let certs = "target/abuse-certs";
        let log = std::fs::File::create(LOG).unwrap();
        let child = Command::new(binary)
            .arg("serve")
            .args(source)
            .args(["--dev-certs", certs, "--listen", ADDR])
            .args(["--metrics-listen", "127.0.0.1:19090", "--log-format", "text"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the guard binary (cargo build --release)");
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(ADDR).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ca = std::fs::read(format!("{certs}/ca.crt")).unwrap();
        Guard { child, config: super::tls::client_config(&ca) }
    }

    pub async fn tls(&self) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect(ADDR).await?;
        let name = ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(self.config.clone()).connect(name, tcp).await
    }

    pub async fn connect(&self) -> Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(self.tls().await.ok()?)).await.ok()?;
        tokio::spawn(conn);
        Some(sender)
    }

    pub fn memory(&self) -> (f64, f64) {
        memory(self.child.id())
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection to the guard, over HTTP/1.1 or HTTP/2.
pub enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// What became of one request.
pub enum Outcome {
    /// Answered: the status, and whether the answer also closed the connection.
    Answered(u16, bool),
    /// The connection was closed before the request went out: the client knows nothing was
    /// sent and goes elsewhere (Go's transport retries such a request on another connection).
    NotSent,
    /// Sent and not answered: a Helm operation refused.
    Lost(String),
}

impl Guard {
    /// A connection over `h2` or HTTP/1.1; `Err` says why none was made.
    pub async fn connect_with(&self, h2: bool) -> Result<Sender, String> {
        let tcp = tokio::net::TcpStream::connect(ADDR).await.map_err(|e| format!("connect: {e}"))?;
        // As Go's client (the API server's) does.
        tcp.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
        let mut config = (*self.config).clone();
        if h2 {
            config.alpn_protocols = vec![b"h2".to_vec()];
        }
        let name = ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let io = TokioIo::new(tls);
        if h2 {
            let (sender, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .map_err(|e| format!("h2 handshake: {e}"))?;
            tokio::spawn(conn);
            Ok(Sender::H2(sender))
        } else {
            let (sender, conn) =
                hyper::client::conn::http1::handshake(io).await.map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(conn);
            Ok(Sender::H1(sender))
        }
    }
}

impl Sender {
    /// POSTs `body` to `path` (with its query). No answer within 10 s (the API server waits at
    /// most the webhook's `timeoutSeconds`, 5 s here) counts as none.
    pub async fn send(&mut self, path: &str, body: Bytes) -> Outcome {
        match tokio::time::timeout(Duration::from_secs(10), self.exchange(path, body)).await {
            Ok(sent) => sent,
            Err(_) => Outcome::Lost("no answer within 10 s".into()),
        }
    }

    async fn exchange(&mut self, path: &str, body: Bytes) -> Outcome {
        let request = hyper::Request::builder()
            .method("POST")
            .uri(format!("https://localhost{path}"))
            .header("content-type", "application/json")
            .body(Full::new(body))
            .unwrap();
        let response = match self {
            Sender::H1(sender) => {
                if sender.ready().await.is_err() {
                    return Outcome::NotSent;
                }
                sender.send_request(request).await
            }
            Sender::H2(sender) => {
                if sender.ready().await.is_err() {
                    return Outcome::NotSent;
                }
                sender.send_request(request).await
            }
        };
        let response = match response {
            Ok(response) => response,
            // hyper says so when a request was refused unprocessed (HTTP/2 REFUSED_STREAM, or a
            // GOAWAY whose last stream id is below it): the client may send it again elsewhere.
            Err(e) if e.is_canceled() || refused_by_goaway(&e) => return Outcome::NotSent,
            Err(e) => return Outcome::Lost(format!("no answer: {e:?}")),
        };
        let close = response.headers().get("connection").is_some_and(|v| v == "close");
        let status = response.status().as_u16();
        match response.into_body().collect().await {
            Ok(_) => Outcome::Answered(status, close),
            Err(e) => Outcome::Lost(format!("answer cut: {e}")),
        }
    }
}

/// An HTTP/2 stream the server's GOAWAY refused (its id above the last the server takes): not
/// processed, and retried elsewhere by Go's client (`errClientConnGotGoAway`).
fn refused_by_goaway(error: &hyper::Error) -> bool {
    use std::error::Error as _;
    error
        .source()
        .and_then(|e| e.downcast_ref::<h2::Error>())
        .is_some_and(|e| e.is_go_away() && e.is_remote())
}
