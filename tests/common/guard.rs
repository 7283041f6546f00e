//! An in-process helm-guard on an ephemeral port with a throwaway CA, and a real HTTPS client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use helm_guard::admission::{Admission, LiveParts, Settings};
use helm_guard::certs::{CertBundle, generate, write};
use helm_guard::cluster::{ReleaseIndex, SourceKind, snapshot};
use helm_guard::policy::{Mode, PolicyConfig};
use helm_guard::release::DecodeLimits;
use helm_guard::server::limits::ConnectionLimits;
use helm_guard::server::{self, AppState, Metrics, RequestLimits, Running, ServerSettings, TlsFiles};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio_rustls::rustls;

pub struct Options {
    pub snapshot: Vec<Value>,
    pub mode: Mode,
    pub exempt_users: Vec<String>,
    pub exempt_groups: Vec<String>,
    pub ready: bool,
    pub max_body_bytes: usize,
    pub tls_reload_every: Duration,
    pub shutdown_delay: Duration,
    pub max_concurrent_reviews: usize,
    pub request_limits: RequestLimits,
    pub connections: ConnectionLimits,
    pub client_ca: Option<std::path::PathBuf>,
    pub client_names: Vec<String>,
    /// A live source's reads and listings, for a test that stands in for the API server.
    pub fetcher: Option<Arc<dyn helm_guard::cluster::PayloadFetcher>>,
    /// Who may break glass beyond system:masters (the API server's authorizer, live).
    pub break_glass: Option<Arc<dyn helm_guard::cluster::BreakGlassAuthority>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            snapshot: Vec::new(),
            mode: Mode::Enforce,
            exempt_users: Vec::new(),
            exempt_groups: Vec::new(),
            ready: true,
            max_body_bytes: 8 * 1024 * 1024,
            tls_reload_every: Duration::from_secs(3600),
            shutdown_delay: Duration::ZERO,
            max_concurrent_reviews: helm_guard::server::DEFAULT_MAX_CONCURRENT_REVIEWS,
            request_limits: RequestLimits::default(),
            connections: ConnectionLimits::default(),
            client_ca: None,
            fetcher: None,
            break_glass: None,
            client_names: Vec::new(),
        }
    }
}

pub struct Guard {
    pub running: Option<Running>,
    /// The CA that signed the serving certificate.
    pub ca_pem: String,
    pub client: HttpsClient,
    pub dir: tempfile::TempDir,
    pub index: Arc<ReleaseIndex>,
}

pub fn localhost_bundle() -> CertBundle {
    generate(&["localhost".to_owned(), "127.0.0.1".to_owned()], 1).unwrap()
}

impl Guard {
    pub async fn start(options: Options) -> Guard {
        let dir = tempfile::tempdir().unwrap();
        let bundle = localhost_bundle();
        write(&bundle, &dir.path().join("certs")).unwrap();
        let snapshot_path = dir.path().join("snapshot.json");
        std::fs::write(&snapshot_path, serde_json::to_vec(&super::list(options.snapshot)).unwrap()).unwrap();

        let index = Arc::new(ReleaseIndex::new(SourceKind::Snapshot));
        snapshot::load(&index, &snapshot_path, DecodeLimits::default()).unwrap();
        index.set_ready(options.ready);
        let config = PolicyConfig {
            default_mode: options.mode,
            exempt_users: options.exempt_users,
            exempt_groups: options.exempt_groups,
            ..PolicyConfig::default()
        };
        let live = LiveParts {
            fetcher: options.fetcher.clone(),
            break_glass: options.break_glass.clone(),
            ..LiveParts::default()
        };
        let admission = Admission::new(index.clone(), Settings::new(config), live, Default::default());
        let state = Arc::new(
            AppState::new(
                admission,
                Metrics::new(),
                RequestLimits { max_body_bytes: options.max_body_bytes, ..options.request_limits },
            )
            .with_max_concurrent_reviews(options.max_concurrent_reviews),
        );
        let settings = ServerSettings {
            tls_reload_every: options.tls_reload_every,
            shutdown_delay: options.shutdown_delay,
            connections: options.connections,
            ..settings("127.0.0.1:0".parse().unwrap(), &dir.path().join("certs"))
        };
        let mut settings = settings;
        settings.tls.client_ca = options.client_ca.clone();
        settings.tls.client_names = options.client_names.clone();
        let running = server::start(settings, state).await.unwrap();
        let client = HttpsClient::new(running.addr, &bundle.ca_pem);
        Guard { running: Some(running), client, dir, index, ca_pem: bundle.ca_pem.clone() }
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    /// Sends an AdmissionReview through the guard's router, as the HTTPS server hands it on (TLS
    /// has its own tests, through `client`), and returns its `response`, checking the envelope.
    pub async fn review(&self, path: &str, review: &Value) -> Value {
        use tower::ServiceExt as _;
        let request = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(serde_json::to_vec(review).unwrap()))
            .unwrap();
        let router = helm_guard::server::routes::webhook_router(self.running().state.clone());
        let answer = router.oneshot(request).await.unwrap();
        let status = answer.status().as_u16();
        let body = axum::body::to_bytes(answer.into_body(), usize::MAX).await.unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        let response = answer["response"].clone();
        assert_eq!(response["uid"], review["request"]["uid"], "the response carries the request's uid");
        response
    }

    pub async fn validate(&self, review: &Value) -> Value {
        self.review("/validate?timeout=5s", review).await
    }

    pub async fn metrics_get(&self, path: &str) -> (u16, String) {
        let addr = self.running().metrics_addr;
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        let request =
            hyper::Request::get(path).header("host", "localhost").body(Full::new(Bytes::new())).unwrap();
        // A kept-alive connection is ready for the next request once the last one is fully done.
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

/// Test server settings: metrics on an ephemeral loopback port, TLS files `tls.crt`/`tls.key` in
/// `certs`.
pub fn settings(listen: SocketAddr, certs: &std::path::Path) -> ServerSettings {
    ServerSettings {
        listen,
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        tls: TlsFiles::new(certs.join("tls.crt"), certs.join("tls.key")),
        tls_reload_every: Duration::from_secs(3600),
        connections: ConnectionLimits::default(),
        shutdown_delay: Duration::ZERO,
        shutdown_grace: Duration::from_secs(5),
    }
}

/// The admission of a guard serving `records` as a snapshot, with the default policy and
/// nothing live (no fetcher, coordinator or Events).
pub fn snapshot_admission(records: &[serde_json::Value]) -> Admission {
    Admission::snapshot(snapshot_index(records), PolicyConfig::default())
}

/// The admission of a guard whose index holds `records` (as a snapshot would), deciding as
/// `settings` say, with the live parts `live`.
pub fn snapshot_admission_with(
    records: &[serde_json::Value],
    settings: Settings,
    live: LiveParts,
) -> Admission {
    Admission::new(snapshot_index(records), settings, live, Default::default())
}

/// An index of `records`, loaded as a snapshot, ready.
pub fn snapshot_index(records: &[serde_json::Value]) -> Arc<ReleaseIndex> {
    index_of(records, SourceKind::Snapshot)
}

/// An index of `records` as `source` keeps it (a live one hides an approved deletion until the
/// watch brings it), loaded from a dump, ready.
pub fn index_of(records: &[serde_json::Value], source: SourceKind) -> Arc<ReleaseIndex> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.json");
    std::fs::write(&path, serde_json::to_vec(&super::list(records.to_vec())).unwrap()).unwrap();
    let index = Arc::new(ReleaseIndex::new(source));
    snapshot::load(&index, &path, DecodeLimits::default()).unwrap();
    index.set_ready(true);
    index
}

/// A guard on a live index that watches `client`, serving on `listen` with a certificate for
/// `names` written into `certs`, agreeing deletions through Leases in `lease_namespace` when
/// given (and keeping its recycle bin there), under `config`. It reads no payload ahead: what a
/// verdict needs it reads itself, so that a test can count those reads. Returns the server, its
/// index and the CA to trust.
pub async fn start_live(
    client: kube::Client,
    config: PolicyConfig,
    listen: SocketAddr,
    names: &[String],
    certs: &std::path::Path,
    tombstone_ttl: Duration,
    lease_namespace: Option<&str>,
) -> (Running, Arc<ReleaseIndex>, String) {
    let options = helm_guard::live::LiveOptions {
        tombstone_ttl,
        read_ahead: false,
        ..super::cluster::live_options(lease_namespace, Default::default())
    };
    start_live_with(client, config, listen, names, certs, options).await
}

/// [`start_live`] with the live parts as `options` say.
pub async fn start_live_with(
    client: kube::Client,
    config: PolicyConfig,
    listen: SocketAddr,
    names: &[String],
    certs: &std::path::Path,
    options: helm_guard::live::LiveOptions,
) -> (Running, Arc<ReleaseIndex>, String) {
    let bundle = generate(names, 1).unwrap();
    write(&bundle, certs).unwrap();
    let metrics = Metrics::new();
    // Assembled as `serve` assembles it, Events and Leases included.
    let admission = helm_guard::live::admission(client, Settings::new(config), options, &metrics);
    let index = admission.index().clone();
    let running = server::start(
        settings(listen, certs),
        Arc::new(AppState::new(admission, metrics, RequestLimits::default())),
    )
    .await
    .unwrap();
    (running, index, bundle.ca_pem)
}

/// A TLS client that trusts one CA.
#[derive(Clone)]
pub struct HttpsClient {
    pub addr: SocketAddr,
    pub config: Arc<rustls::ClientConfig>,
}

pub fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

pub type Connection = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

impl HttpsClient {
    pub fn new(addr: SocketAddr, ca_pem: &str) -> HttpsClient {
        HttpsClient { addr, config: client_config(ca_pem, &[b"http/1.1"]) }
    }

    pub async fn tls(&self) -> std::io::Result<Connection> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(self.config.clone()).connect(name, tcp).await
    }

    /// A new HTTP/1.1 connection.
    pub async fn connect(&self) -> SendRequest<Full<Bytes>> {
        let tls = self.tls().await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        sender
    }

    pub async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let mut sender = self.connect().await;
        send(&mut sender, "POST", path, body).await
    }

    pub async fn get(&self, path: &str) -> (u16, Vec<u8>) {
        let mut sender = self.connect().await;
        send(&mut sender, "GET", path, Vec::new()).await
    }
}

pub async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    // A kept-alive connection is ready for the next request once the last one is fully done.
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    (status, response.into_body().collect().await.unwrap().to_bytes().to_vec())
}

/// The certificate the server presented on a connection.
pub fn peer_certificate(connection: &Connection) -> Vec<u8> {
    connection.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

pub fn pem_to_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap().to_vec()
}
