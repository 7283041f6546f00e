//! HTTP routes: the two webhooks, health, readiness and metrics.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use tower_http::trace::TraceLayer;

use super::AppState;
use super::metrics::DecisionLabels;
use super::serve::LastRequest;
use crate::admission::{Reviewed, Webhook, review};

/// The HTTPS router the API server calls. It also answers health and metrics, so a probe can use
/// either port.
///
/// Each webhook request is bounded in its handler (`bounded`): a request timeout, then a
/// concurrency permit taken before the body is read. tower-http's `TraceLayer` (a span and a
/// line per request, at debug level) is added only when the log filter lets its lines through:
/// idle, it cost 4 % of a busy guard's throughput (BENCHMARKS.md, "The stack around the
/// handler").
pub fn webhook_router(state: Arc<AppState>) -> Router {
    let webhooks = Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .with_state(state.clone());
    let webhooks =
        if request_traces_enabled() { webhooks.layer(TraceLayer::new_for_http()) } else { webhooks };
    webhooks.merge(metrics_router(state))
}

/// Whether the log filter lets tower-http's per-request lines through (`RUST_LOG=debug`, or
/// `RUST_LOG=info,tower_http=debug`).
fn request_traces_enabled() -> bool {
    tracing::enabled!(target: "tower_http::trace::on_request", tracing::Level::DEBUG)
        || tracing::enabled!(target: "tower_http::trace::on_response", tracing::Level::DEBUG)
}

/// Health, readiness and metrics on plain HTTP.
pub(crate) fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// The connection a request came on (absent when the router is served by something other than
/// [`super::serve`], as in some tests).
type Connection = Option<Extension<LastRequest>>;

async fn validate(
    state: State<Arc<AppState>>,
    query: RawQuery,
    connection: Connection,
    body: Body,
) -> Response {
    webhook(Webhook::Validate, state, query, connection, body).await
}

async fn mutate(
    state: State<Arc<AppState>>,
    query: RawQuery,
    connection: Connection,
    body: Body,
) -> Response {
    webhook(Webhook::Mutate, state, query, connection, body).await
}

/// One webhook request: reviewed within its bounds, and answered.
async fn webhook(
    webhook: Webhook,
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    connection: Connection,
    body: Body,
) -> Response {
    let arrived = Instant::now();
    // What the API server waits for the answer (`?timeout=5s`: the webhook's timeoutSeconds),
    // and never past --request-timeout.
    let waits = api_server_timeout(query.as_deref())
        .map_or(state.limits.request_timeout, |timeout| timeout.min(state.limits.request_timeout));
    let deadline = state.admission.deadline(arrived, Some(waits));
    bounded(&state, webhook, admit(state.clone(), webhook, connection, body, deadline)).await
}

/// The `timeout` the API server puts in a webhook's URL, in Go's duration format (`5s`, `30s`;
/// `timeoutSeconds` is 1 to 30).
fn api_server_timeout(query: Option<&str>) -> Option<std::time::Duration> {
    let value = query?.split('&').find_map(|pair| pair.strip_prefix("timeout="))?;
    let seconds: u64 = value.strip_suffix('s')?.parse().ok()?;
    Some(std::time::Duration::from_secs(seconds))
}

/// A webhook request within its bounds, outermost first: `--request-timeout` (waiting for a
/// permit counts), then one of `--max-concurrent-reviews` permits, taken before the body is read,
/// so that a burst of large or slow bodies holds at most that many of them in memory.
///
/// Here rather than as tower layers, which box the route's service and future once more per
/// request each (3 % of a busy guard's throughput). The review is polled before the timer, so a
/// request decided at once never registers it (registering wakes tokio's I/O driver,
/// tokio-rs/tokio#5207: a system call per request).
async fn bounded(state: &AppState, webhook: Webhook, review: impl Future<Output = Response>) -> Response {
    let permitted = async {
        // The semaphore is never closed; if it were, the request could not be decided.
        let Ok(_permit) = state.reviews.acquire().await else {
            return error(StatusCode::SERVICE_UNAVAILABLE, "helm-guard is not taking requests");
        };
        review.await
    };
    let timeout = state.limits.request_timeout;
    match tokio::time::timeout(timeout, permitted).await {
        Ok(response) => response,
        Err(_) => {
            state.metrics.rejected(webhook, "request-timeout");
            tracing::warn!(webhook = webhook.as_str(), ?timeout, "a request ran out of --request-timeout");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "helm-guard could not answer in time: the request took longer than {timeout:?} (--request-timeout)"
                ),
            )
        }
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into(), "code": status.as_u16()}))).into_response()
}

async fn admit(
    state: Arc<AppState>,
    webhook: Webhook,
    connection: Connection,
    body: Body,
    deadline: Instant,
) -> Response {
    let started = Instant::now();
    let limits = state.limits;
    let bytes = match read_body(body, limits.max_body_bytes, limits.body_read_timeout).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            state.metrics.rejected(webhook, "too-large");
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {} bytes (--max-body-bytes)", limits.max_body_bytes),
            );
        }
        Err(BodyError::Broken(why)) => {
            state.metrics.rejected(webhook, "bad-request");
            return error(StatusCode::BAD_REQUEST, format!("the request body could not be read: {why}"));
        }
        Err(BodyError::Late) => {
            // A client that cannot send its body in time does not keep the connection either.
            if let Some(Extension(connection)) = &connection {
                connection.close();
            }
            state.metrics.rejected(webhook, "body-timeout");
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {:?} (--body-read-timeout)",
                    limits.body_read_timeout
                ),
            );
        }
    };
    // Parsing a large body is CPU work: on the blocking pool, so that it does not hold up the
    // other requests of this worker. The common case, tens of KiB, is parsed here.
    let parsed = if bytes.len() <= INLINE_MAX_BODY_BYTES {
        review::parse_body(&bytes)
    } else {
        match tokio::task::spawn_blocking(move || review::parse_body(&bytes)).await {
            Ok(parsed) => parsed,
            Err(panic) => return internal_error(&state, webhook, &panic.to_string()),
        }
    };
    let request = match parsed {
        Ok(request) => request,
        Err(bad) => return bad_request(&state, webhook, &bad),
    };
    // One path for every request: a decision that waits on the API server awaits it here and
    // holds no thread; one that does not is ready at its first poll. A panic (none is known)
    // refuses the request instead of dropping the connection.
    let decided = std::panic::AssertUnwindSafe(state.admission.review_by(webhook, request, deadline));
    match futures::FutureExt::catch_unwind(decided).await {
        Ok(reviewed) => answer(&state, webhook, started, reviewed),
        Err(_) => internal_error(&state, webhook, "the decision panicked"),
    }
}

/// Why a request body was not read.
#[derive(Debug)]
enum BodyError {
    /// Past `--max-body-bytes`.
    TooLarge,
    /// Not all there within `--body-read-timeout`.
    Late,
    /// The connection failed under it.
    Broken(String),
}

/// What the guard reads on, and for how long, after a body passed `--max-body-bytes`.
const DRAIN_BYTES: usize = 8 * 1024 * 1024;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads a request body of at most `max` bytes within `within`. Past `max` it reads on and
/// discards what the client still sends (at most [`DRAIN_BYTES`], for [`DRAIN_TIME`]) before the
/// 413 goes out: closing on a client that is still writing resets the connection under it, and
/// Go's `net/http` client (the API server's) then reports a write error instead of the answer.
/// Go's and hyper's own servers read on for the same reason. A body drained to its end also
/// leaves the connection fit for the next request.
async fn read_body(body: Body, max: usize, within: std::time::Duration) -> Result<Bytes, BodyError> {
    use axum::body::HttpBody as _;
    use futures::StreamExt as _;
    let announced = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX);
    let mut stream = body.into_data_stream();
    let collected = tokio::time::timeout(within, async {
        let mut bytes = Vec::with_capacity(announced.min(max));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|error| BodyError::Broken(error.to_string()))?;
            if bytes.len().saturating_add(chunk.len()) > max {
                return Err(BodyError::TooLarge);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(bytes))
    })
    .await
    .unwrap_or(Err(BodyError::Late));
    if let Err(BodyError::TooLarge) = collected {
        let drain = async {
            let mut drained = 0usize;
            while let Some(Ok(chunk)) = stream.next().await {
                drained = drained.saturating_add(chunk.len());
                if drained > DRAIN_BYTES {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    }
    collected
}

/// Bodies up to this size are parsed on the async worker that read them; larger ones on the
/// blocking pool.
const INLINE_MAX_BODY_BYTES: usize = 64 * 1024;

fn answer(state: &AppState, webhook: Webhook, started: Instant, reviewed: Reviewed) -> Response {
    state.metrics.decision(
        DecisionLabels {
            webhook,
            operation: reviewed.entry.asked.operation,
            decision: reviewed.entry.decision,
            reason: reviewed.entry.reason,
        },
        started.elapsed(),
    );
    ([(header::CONTENT_TYPE, "application/json")], review::encode(reviewed.response)).into_response()
}

fn bad_request(state: &AppState, webhook: Webhook, bad: &review::ReviewError) -> Response {
    state.metrics.rejected(webhook, "bad-request");
    tracing::warn!(webhook = webhook.as_str(), error = %bad, "rejected a request that is not an AdmissionReview v1");
    error(StatusCode::BAD_REQUEST, bad.to_string())
}

fn internal_error(state: &AppState, webhook: Webhook, what: &str) -> Response {
    state.metrics.rejected(webhook, "internal");
    tracing::error!(webhook = webhook.as_str(), error = %what, "deciding a request failed");
    error(StatusCode::INTERNAL_SERVER_ERROR, "helm-guard failed to decide this request")
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.is_ready() {
        "ready".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let admission = &state.admission;
    let since_sync = admission.index().since_sync().map_or(f64::NAN, |d| d.as_secs_f64());
    let text = state.metrics.render(
        admission.index(),
        &|key, revision| admission.writer_liveness(key, revision),
        admission.settings().policy.stuck_after_secs(),
        admission.settings().policy.default_mode,
        since_sync,
    );
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_timeout_is_read_from_the_query() {
        use std::time::Duration;
        assert_eq!(api_server_timeout(Some("timeout=5s")), Some(Duration::from_secs(5)));
        assert_eq!(api_server_timeout(Some("a=b&timeout=30s")), Some(Duration::from_secs(30)));
        for unreadable in [None, Some(""), Some("timeout=5"), Some("timeout=1m0s"), Some("timeout=-1s")] {
            assert_eq!(api_server_timeout(unreadable), None, "{unreadable:?}");
        }
    }

    /// The router a filter builds, asked once: the lines it wrote.
    async fn lines_of_one_request(filter: &str) -> String {
        use tower::ServiceExt;
        let lines = crate::server::log_format::Captured::default();
        let subscriber =
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(lines.clone()).finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let index = Arc::new(crate::cluster::ReleaseIndex::new(crate::cluster::SourceKind::Snapshot));
        let admission = crate::admission::Admission::snapshot(index, Default::default());
        let state = Arc::new(AppState::new(admission, super::super::Metrics::new(), Default::default()));
        let request = axum::http::Request::post("/validate").body(axum::body::Body::from("{}")).unwrap();
        let response = webhook_router(state).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "an empty review is refused either way");
        lines.text()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_router_traces_requests_only_when_the_filter_shows_them() {
        let traced = lines_of_one_request("info,tower_http=debug").await;
        assert!(traced.contains("started processing request"), "{traced}");
        assert!(traced.contains("finished processing request"), "{traced}");
        let quiet = lines_of_one_request("info").await;
        assert!(!quiet.contains("processing request"), "{quiet}");
    }

    #[test]
    fn request_traces_follow_the_log_filter() {
        let quiet = tracing_subscriber::fmt().with_env_filter("info").finish();
        tracing::subscriber::with_default(quiet, || assert!(!request_traces_enabled()));
        let traced = tracing_subscriber::fmt().with_env_filter("info,tower_http=debug").finish();
        tracing::subscriber::with_default(traced, || assert!(request_traces_enabled()));
    }
}
