//! The HTTPS server the API server calls, and the plain-HTTP metrics and health listener.
//!
//! [`start`] binds both listeners and returns a [`Running`] server; [`serve`] accepts the HTTPS
//! connections and drains them at shutdown, [`limits`] bounds each, [`routes`] holds the
//! handlers, [`tls`] the certificate and its reload, [`metrics`] the Prometheus registry.

pub mod limits;
pub mod log_format;
pub(crate) mod metrics;
pub mod routes;
pub(crate) mod serve;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;

use crate::admission::Admission;
pub use metrics::Metrics;
pub(crate) use serve::Phase;
pub use tls::TlsFiles;

/// Listener settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// The webhooks' HTTPS address.
    pub listen: SocketAddr,
    /// The plain-HTTP address of health, readiness and metrics.
    pub metrics_listen: SocketAddr,
    /// The serving certificate and key (and the client CA, if any).
    pub tls: TlsFiles,
    /// How often the certificate files are checked for changes.
    pub tls_reload_every: Duration,
    /// Open connections and how long a silent one stays.
    pub connections: limits::ConnectionLimits,
    /// After SIGTERM: how long to stay up unready, so endpoints drop this pod before it stops.
    pub shutdown_delay: Duration,
    /// After that: how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
}

/// Decisions under way at once; each may decode a payload up to `--max-decoded-bytes`, so this
/// bounds the memory a burst of large requests can take. Requests beyond it wait their turn.
pub const DEFAULT_MAX_CONCURRENT_REVIEWS: usize = 16;

/// The default of `--max-body-bytes`: an UPDATE of a Secret holding the 1 MiB Kubernetes allows
/// (old and new object, base64) is under 3.5 MiB.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Bounds per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest request body accepted; larger gets 413.
    pub max_body_bytes: usize,
    /// The body must have arrived this long after its permit was taken; else 408.
    pub body_read_timeout: Duration,
    /// A whole request (waiting for a permit, the body, the decision); else 503.
    pub request_timeout: Duration,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_read_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// What the handlers share.
#[derive(Debug)]
pub struct AppState {
    /// What decisions need.
    pub admission: Admission,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The per-request bounds.
    pub limits: RequestLimits,
    /// Decisions under way at once; the permit is taken before the body is read.
    pub(crate) reviews: Arc<tokio::sync::Semaphore>,
    /// Where the server is in its life; the connections watch it.
    phase: tokio::sync::watch::Sender<Phase>,
}

impl AppState {
    /// The shared state of a server deciding with `admission`.
    pub fn new(admission: Admission, metrics: Arc<Metrics>, limits: RequestLimits) -> AppState {
        AppState {
            admission,
            metrics,
            limits,
            reviews: Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_CONCURRENT_REVIEWS)),
            phase: tokio::sync::watch::Sender::new(Phase::Serving),
        }
    }

    /// Changes how many decisions may run at once.
    #[must_use]
    pub fn with_max_concurrent_reviews(mut self, reviews: usize) -> AppState {
        self.reviews = Arc::new(tokio::sync::Semaphore::new(reviews.max(1)));
        self
    }

    /// SIGTERM came: answers now close their connections.
    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.phase.borrow() != Phase::Serving
    }

    /// Ready: the index has a complete view and the server is not shutting down.
    pub(crate) fn is_ready(&self) -> bool {
        self.admission.index().is_ready() && !self.is_shutting_down()
    }
}

/// How long the metrics server may take to finish its scrapes at shutdown.
const METRICS_GRACE: Duration = Duration::from_secs(5);

/// A started server.
#[derive(Debug)]
pub struct Running {
    /// The webhooks' address, as bound.
    pub addr: SocketAddr,
    /// The metrics address, as bound.
    pub metrics_addr: SocketAddr,
    /// The shared state.
    pub state: Arc<AppState>,
    settings: ServerSettings,
    metrics_shutdown: tokio::sync::watch::Sender<bool>,
    /// The HTTPS server: it drains and ends when the phase is [`Phase::Draining`].
    https: JoinHandle<()>,
    /// The plain-HTTP metrics and probes server: stopped gracefully by `metrics_shutdown`.
    metrics: JoinHandle<()>,
    /// Polls the certificate files; it never ends by itself and is aborted last.
    tls_reload: JoinHandle<()>,
}

/// Binds the HTTPS and metrics listeners and starts serving.
pub async fn start(settings: ServerSettings, state: Arc<AppState>) -> anyhow::Result<Running> {
    let (tls_config, loaded_pem) = tls::load(&settings.tls, &state.metrics)?;
    // Bound here rather than inside the server task, so that a busy port fails the start with
    // its reason ("Address already in use").
    let listener = std::net::TcpListener::bind(settings.listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .and_then(tokio::net::TcpListener::from_std)
        .with_context(|| format!("binding {}", settings.listen))?;
    let addr = listener.local_addr()?;
    let app = routes::webhook_router(state.clone());
    // Both listeners are bound before any task starts, so that a failed start leaves nothing
    // running.
    let metrics_listener = std::net::TcpListener::bind(settings.metrics_listen)
        .with_context(|| format!("binding the metrics listener {}", settings.metrics_listen))?;
    metrics_listener.set_nonblocking(true)?;
    let metrics_listener = tokio::net::TcpListener::from_std(metrics_listener)?;
    let metrics_addr = metrics_listener.local_addr()?;

    let https = tokio::spawn(serve::serve(
        listener,
        tls_config.clone(),
        settings.connections,
        app,
        state.phase.subscribe(),
        settings.shutdown_grace,
    ));
    let tls_reload = tokio::spawn(tls::reload_on_change(
        settings.tls.clone(),
        tls_config,
        loaded_pem,
        settings.tls_reload_every,
        state.metrics.clone(),
    ));
    let (metrics_shutdown, stop) = tokio::sync::watch::channel(false);
    let metrics_app = routes::metrics_router(state.clone());
    let metrics = tokio::spawn(serve::serve_plain(metrics_listener, metrics_app, stop));
    tracing::info!(%addr, %metrics_addr, "serving");
    Ok(Running { addr, metrics_addr, state, settings, metrics_shutdown, https, metrics, tls_reload })
}

impl Running {
    /// Stops as `stop` asks: after SIGTERM as [`Running::shutdown`] says; after SIGINT without
    /// the delay.
    pub(crate) async fn stop(mut self, stop: Stop) {
        if stop == Stop::Interrupt {
            self.settings.shutdown_delay = Duration::ZERO;
        }
        self.shutdown().await;
    }

    /// Stops being ready, waits `shutdown_delay`, lets in-flight requests finish (up to
    /// `shutdown_grace`), then stops.
    pub async fn shutdown(self) {
        self.state.phase.send_replace(Phase::Closing);
        tracing::info!(delay = ?self.settings.shutdown_delay, "shutting down: no longer ready");
        tokio::time::sleep(self.settings.shutdown_delay).await;
        // The HTTPS server answers every request sent on a connection it accepted, within the
        // grace period.
        self.state.phase.send_replace(Phase::Draining);
        let _ = self.https.await;
        // The metrics server finishes its scrapes; a scrape takes milliseconds.
        let _ = self.metrics_shutdown.send(true);
        let mut metrics = self.metrics;
        if tokio::time::timeout(METRICS_GRACE, &mut metrics).await.is_err() {
            tracing::warn!("the metrics server did not stop within {METRICS_GRACE:?}; stopping it");
            metrics.abort();
        }
        self.tls_reload.abort();
        // Nothing is admitted any more: the watches and the rest of the background go.
        self.state.admission.tasks().stop().await;
        tracing::info!("stopped");
    }
}

/// The signal that stops the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGTERM: an orchestrator's, sent while the endpoints still route here, so the guard keeps
    /// answering through `--shutdown-delay`.
    Terminate,
    /// SIGINT (Ctrl-C): a person at a terminal, who expects it to stop at once; requests in
    /// flight still finish.
    Interrupt,
}

/// Listens for SIGTERM and SIGINT from the moment it is called (so that one arriving while the
/// server starts is not lost to the default action, which kills the process); the future
/// resolves at the first, with which it was.
#[cfg(unix)]
pub(crate) fn termination() -> anyhow::Result<impl std::future::Future<Output = Stop>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => Stop::Terminate,
            _ = interrupt.recv() => Stop::Interrupt,
        }
    })
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
pub(crate) fn termination() -> anyhow::Result<impl std::future::Future<Output = Stop>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        Stop::Interrupt
    })
}
