//! `helm-guard serve`: the admission webhook.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytesize::ByteSize;
use clap::ValueEnum;

use super::ClusterArgs;
use super::{DecodeArgs, Exit};
use crate::admission::{Admission, LiveParts, Settings};
use crate::cluster::registration::{self, Registration};
use crate::cluster::{ReleaseIndex, SourceKind, snapshot};
use crate::policy::{Mode, PolicyConfig};
use crate::policy_reports::writer::{ApiChoice, WriterOptions};
use crate::recycle_bin::copy::BinBounds;
use crate::server::limits::ConnectionLimits;
use crate::server::{self, AppState, Metrics, RequestLimits, ServerSettings, TlsFiles, log_format};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// Human-readable lines.
    Text,
}

/// The one way replicas agree: `--coordination` is accepted for manifests written before it
/// was the only one, and only with that value.
fn one_agreement(value: &str) -> Result<String, String> {
    match value {
        "watch" => Ok(value.to_owned()),
        _ => Err(format!(
            "`{value}` is no longer offered: replicas agree through claim books only, one replica as several \
             (docs/concepts/replicas.md); drop --coordination"
        )),
    }
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  helm-guard serve --snapshot examples/cluster-snapshot.json --dev-certs target/dev-certs\n  helm-guard serve --tls-cert /tls/tls.crt --tls-key /tls/tls.key          in a pod, as the chart runs it\n  helm-guard serve --mode audit --kubeconfig ~/.kube/config --dev-certs /tmp/c\n\nExit status: 0 stopped by SIGTERM or Ctrl-C once drained, 2 bad input (a flag, a missing --snapshot file), 3 it could not start (an address that cannot be bound, a certificate that cannot be loaded, no cluster)."
)]
pub(crate) struct ServeArgs {
    /// HTTPS address the API server calls.
    #[arg(
        help_heading = "Listening and TLS",
        long,
        env = "HELM_GUARD_LISTEN",
        default_value = "0.0.0.0:8443"
    )]
    pub listen: SocketAddr,
    /// Serving certificate chain (PEM); reloaded when the file changes. Required with
    /// --tls-key, unless --dev-certs is given.
    #[arg(help_heading = "Listening and TLS", long, env = "HELM_GUARD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Serving private key (PEM); reloaded when the file changes.
    #[arg(help_heading = "Listening and TLS", long, env = "HELM_GUARD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Development only: make a throwaway CA and a certificate for localhost in DIR (ca.crt,
    /// tls.crt, tls.key) and serve with them.
    #[arg(help_heading = "Listening and TLS", long, env = "HELM_GUARD_DEV_CERTS", value_name = "DIR", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub dev_certs: Option<PathBuf>,
    /// What to do with a request the policy denies.
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_MODE", default_value_t,
          value_parser = clap::builder::TypedValueParser::try_map(clap::builder::PossibleValuesParser::new(<Mode as strum::VariantArray>::VARIANTS.iter().map(|m| m.as_str())), |m| m.parse::<Mode>()))]
    pub mode: Mode,
    /// A user whose requests are always allowed (repeatable; comma-separated in the env var).
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_EXEMPT_USERS", value_delimiter = ',')]
    pub exempt_user: Vec<String>,
    /// A group whose members' requests are always allowed (repeatable; comma-separated in the env var).
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_EXEMPT_GROUPS", value_delimiter = ',')]
    pub exempt_group: Vec<String>,
    /// A user who may opt a namespace out: set `helm-guard.io/ignore=true` or a weaker
    /// `helm-guard.io/mode` on it (repeatable; comma-separated in the env var).
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_OPT_OUT_USERS", value_delimiter = ',')]
    pub opt_out_user: Vec<String>,
    /// A group whose members may opt a namespace out (repeatable; comma-separated in the env var).
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_OPT_OUT_GROUPS", value_delimiter = ',')]
    pub opt_out_group: Vec<String>,
    /// A group whose members' break-glass and restore annotations (`helm-guard.io/allow-delete`,
    /// `helm-guard.io/restored-from`) count, beside `system:masters` and whoever the API server
    /// allows `breakglass` on `releases.helm-guard.io` (the ClusterRole helm-guard-break-glass)
    /// (repeatable; comma-separated in the env var).
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_BREAK_GLASS_GROUPS", value_delimiter = ',')]
    pub break_glass_group: Vec<String>,
    /// A user that forgets releases: its deletions of records the rules would refuse are let
    /// through, each record kept in the recycle bin first (D10; repeatable, comma-separated in the
    /// env var).
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_FORGETTER_USERS", value_delimiter = ',')]
    pub forgetter_user: Vec<String>,
    /// A group whose members forget releases, as --forgetter-user (repeatable, comma-separated in
    /// the env var). Replaces the default, the service accounts of Rancher Fleet's agent
    /// namespaces; `''` names none.
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_FORGETTER_GROUPS", value_delimiter = ',', value_name = "GROUP",
          default_values_t = crate::policy::config::DEFAULT_FORGETTER_GROUPS.iter().map(|g| (*g).to_owned()).collect::<Vec<String>>())]
    pub forgetter_group: Vec<String>,
    /// A namespace anyone may opt out (repeatable; comma-separated in the env var).
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_EXEMPT_NAMESPACES", value_delimiter = ',')]
    pub exempt_namespace: Vec<String>,
    /// A record label that no update may add, change or remove (U2b; repeatable, comma-separated
    /// in the env var). Replaces the default, helm-controller's configHash; `''` protects none.
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_PROTECTED_LABELS", value_delimiter = ',', value_name = "KEY",
          default_values_t = crate::policy::config::DEFAULT_PROTECTED_LABELS.iter().map(|l| (*l).to_owned()).collect::<Vec<String>>())]
    pub protected_label: Vec<String>,
    /// A HelmChart, `NAMESPACE/NAME`, protected as if labelled helm-guard.io/protect: its
    /// helm-install pods never uninstall the release to reinstall it (repeatable, comma-separated in
    /// the env var). Replaces the default (K3s's and RKE2's CNI, multus, CRD, CSI and CPI charts);
    /// `''` protects none by name.
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_PROTECTED_CHARTS", value_delimiter = ',', value_name = "NAMESPACE/NAME",
          default_values_t = crate::policy::config::DEFAULT_PROTECTED_CHARTS.iter().map(|c| (*c).to_owned()).collect::<Vec<String>>())]
    pub protected_chart: Vec<String>,
    /// Serve verdicts from a dump instead of a cluster: the `scan --from-file` format; Namespace
    /// objects in it, if any, give per-namespace modes and teardown.
    #[arg(help_heading = "The cluster", long, env = "HELM_GUARD_SNAPSHOT", value_name = "FILE", conflicts_with_all = ["kubeconfig", "context"])]
    pub snapshot: Option<PathBuf>,
    #[command(flatten, next_help_heading = "The cluster")]
    pub cluster: ClusterArgs,
    /// Accepted for manifests of earlier versions, only as `watch`: replicas agree one way.
    #[arg(help_heading = "Replicas", long, env = "HELM_GUARD_COORDINATION", hide = true, value_parser = one_agreement)]
    pub coordination: Option<String>,
    /// The guard's own namespace, where its claim books, fence and recycle bin are (default: the
    /// service account's namespace in a pod, else the kubeconfig context's).
    #[arg(help_heading = "The cluster", long, alias = "lease-namespace", env = "HELM_GUARD_NAMESPACE")]
    pub guard_namespace: Option<String>,
    /// Once ready, fill the webhook configurations of this name with the webhooks of
    /// manifests/webhooks.yaml, calling the Service of this name in --guard-namespace and trusting
    /// --webhook-ca-file, and keep them so (the chart's way: an install whose pods never become
    /// ready refuses nothing). The configurations must exist: the guard patches, never creates.
    #[arg(
        help_heading = "The cluster",
        long,
        env = "HELM_GUARD_REGISTER_WEBHOOKS",
        value_name = "NAME",
        requires = "webhook_ca_file",
        conflicts_with = "snapshot"
    )]
    pub register_webhooks: Option<String>,
    /// The PEM of the CA that signed --tls-cert, for the registered webhooks' caBundle (read again
    /// every 10s, so a rotated CA reaches the API server).
    #[arg(help_heading = "The cluster", long, env = "HELM_GUARD_WEBHOOK_CA_FILE", value_name = "FILE")]
    pub webhook_ca_file: Option<PathBuf>,
    /// How long the API server waits for the registered webhooks, in seconds (1 to 30); a
    /// decision ends a second before (--decision-deadline at most).
    #[arg(help_heading = "The cluster", long, env = "HELM_GUARD_WEBHOOK_TIMEOUT", value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u8).range(1..=30))]
    pub webhook_timeout: u8,
    /// Show that the watch has caught up before a verdict that rests on a release's history by a
    /// fence round (one write of `helm-guard-fence` in --guard-namespace shared by every verdict
    /// waiting), not by a listing of the release per verdict (`docs/concepts/live-view.md`);
    /// `--watch-fence=false` lists every time.
    #[arg(help_heading = "The cluster", long, env = "HELM_GUARD_WATCH_FENCE", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_fence: bool,
    /// Read every record's payload once the index is ready, a page at a time, and each record the
    /// watch brings a new version of, so that verdicts rarely wait on a GET;
    /// `--read-ahead=false` reads only what a verdict needs, when it needs it.
    #[arg(help_heading = "The cluster", long, env = "HELM_GUARD_READ_AHEAD", default_value_t = true, action = clap::ArgAction::Set)]
    pub read_ahead: bool,
    /// At most this many revisions of a release created an hour where its namespace has no
    /// `helm-guard.io/max-revisions-per-hour` label (POLICY.md C8); 0 or unset: no cap.
    #[arg(long, env = "HELM_GUARD_MAX_REVISIONS_PER_HOUR", value_name = "N")]
    pub max_revisions_per_hour: Option<u32>,
    /// Lock every release to its owner where its namespace has no `helm-guard.io/owner-lock`
    /// label (POLICY.md O1).
    #[arg(long, env = "HELM_GUARD_OWNER_LOCK", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub owner_lock: bool,
    /// Mark a pending revision failed (as `helm set-status` does) once the pod its writer's
    /// token was bound to is gone, so the next `helm upgrade` runs: never while that pod runs,
    /// never a revision whose writer the guard does not know (`docs/operate/stuck.md`).
    #[arg(help_heading = "The cluster", long, env = "HELM_GUARD_UNLOCK_ABANDONED", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub unlock_abandoned: bool,
    /// Keep a copy of each record whose deletion only an override lets through (the break-glass
    /// annotation, an exemption, warn or audit mode, a record Helm cannot read) as a Secret in
    /// --recycle-bin-namespace before approving it (`docs/operate/restore.md`);
    /// `--recycle-bin=false` turns it off.
    #[arg(help_heading = "Recycle bin", long, env = "HELM_GUARD_RECYCLE_BIN", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub recycle_bin: bool,
    /// Where the copies are kept (default: --guard-namespace). Whoever can read Secrets there can
    /// read the values of every release whose record was let go: a namespace of its own narrows
    /// that to those it grants (SECURITY.md).
    #[arg(
        help_heading = "Recycle bin",
        long,
        env = "HELM_GUARD_RECYCLE_BIN_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub recycle_bin_namespace: Option<String>,
    /// How long a copy is kept.
    #[arg(help_heading = "Recycle bin", long, env = "HELM_GUARD_RECYCLE_TTL", default_value = "7d", value_parser = humantime::parse_duration)]
    pub recycle_ttl: Duration,
    /// Copies the bin holds at most; the oldest go first.
    #[arg(help_heading = "Recycle bin", long, env = "HELM_GUARD_RECYCLE_MAX_COPIES", default_value_t = BinBounds::default().copies)]
    pub recycle_max_copies: usize,
    /// Bytes the bin holds at most.
    #[arg(help_heading = "Recycle bin", long, env = "HELM_GUARD_RECYCLE_MAX_BYTES", value_name = "SIZE", default_value_t = ByteSize::b(BinBounds::default().bytes))]
    pub recycle_max_bytes: ByteSize,
    /// Copies of one release the bin holds at most.
    #[arg(help_heading = "Recycle bin", long, env = "HELM_GUARD_RECYCLE_MAX_RELEASE_COPIES", default_value_t = BinBounds::default().release_copies)]
    pub recycle_max_release_copies: usize,
    /// Bytes of one release the bin holds at most.
    #[arg(help_heading = "Recycle bin", long, env = "HELM_GUARD_RECYCLE_MAX_RELEASE_BYTES", value_name = "SIZE", default_value_t = ByteSize::b(BinBounds::default().release_bytes))]
    pub recycle_max_release_bytes: ByteSize,
    /// When a copy cannot be stored within the decision deadline, approve the deletion anyway
    /// (with a warning) instead of refusing it with "retry".
    #[arg(help_heading = "Recycle bin", long, env = "HELM_GUARD_RECYCLE_BEST_EFFORT")]
    pub recycle_best_effort: bool,
    /// This replica's name in the Leases (default: $HOSTNAME, the pod name).
    #[arg(help_heading = "Replicas", long, env = "HELM_GUARD_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Write a Kubernetes Event on each record whose DELETE or UPDATE was refused or warned
    /// (not for dry runs); `--emit-events=false` turns them off.
    #[arg(help_heading = "The cluster", long, env = "HELM_GUARD_EMIT_EVENTS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub emit_events: bool,
    /// How long an approved deletion stays hidden from verdicts while the watch has not confirmed it.
    #[arg(help_heading = "Replicas", long, env = "HELM_GUARD_TOMBSTONE_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub tombstone_ttl: Duration,
    /// Plain-HTTP address for /metrics, /healthz and /readyz.
    #[arg(
        help_heading = "Listening and TLS",
        long,
        env = "HELM_GUARD_METRICS_LISTEN",
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_listen: SocketAddr,
    /// Log lines as JSON (for log collectors) or as text for people (coloured on a terminal).
    #[arg(
        help_heading = "Logs and shutdown",
        long,
        env = "HELM_GUARD_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    pub log_format: LogFormat,
    /// Only the API server may call: require a client certificate signed by a CA in this PEM file
    /// (reloaded on change). See `docs/operate/certificates.md`.
    #[arg(help_heading = "Listening and TLS", long, env = "HELM_GUARD_CLIENT_CA_FILE", value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// With --client-ca-file: the client certificate's subject CN must be this (repeatable).
    #[arg(
        help_heading = "Listening and TLS",
        long,
        env = "HELM_GUARD_CLIENT_CN",
        value_delimiter = ',',
        requires = "client_ca_file"
    )]
    pub client_cn: Vec<String>,
    /// Largest AdmissionReview body accepted. The largest the API server sends: an UPDATE of a
    /// Secret holding the 1 MiB Kubernetes allows, old and new, in base64: under 3.5 MiB.
    /// Bytes, or with a unit (64KiB, 4MiB).
    #[arg(help_heading = "Limits and deadlines", long, env = "HELM_GUARD_MAX_BODY_BYTES", value_name = "SIZE",
          default_value_t = ByteSize::b(crate::server::DEFAULT_MAX_BODY_BYTES as u64))]
    pub max_body_bytes: ByteSize,
    /// A request's body must have arrived this long after its turn came; else 408 and the
    /// connection is closed.
    #[arg(help_heading = "Limits and deadlines", long, env = "HELM_GUARD_BODY_READ_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    pub body_read_timeout: Duration,
    /// A whole request (its turn, its body, its decision) past this gets 503. Keep it above
    /// --decision-deadline and at or below the webhooks' timeoutSeconds.
    #[arg(help_heading = "Limits and deadlines", long, env = "HELM_GUARD_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Open HTTPS connections at once; more are closed as soon as they are accepted.
    #[arg(
        help_heading = "Limits and deadlines",
        long,
        env = "HELM_GUARD_MAX_CONNECTIONS",
        default_value_t = 256
    )]
    pub max_connections: usize,
    /// Open connections at once from one source address (the API server multiplexes its calls
    /// over a few): no pod can take every slot.
    #[arg(
        help_heading = "Limits and deadlines",
        long,
        env = "HELM_GUARD_MAX_CONNECTIONS_PER_SOURCE",
        default_value_t = 64
    )]
    pub max_connections_per_source: usize,
    /// A connection whose client sends nothing for this long is closed (above the API server's
    /// own 90 s idle timeout, so that it closes first).
    #[arg(help_heading = "Limits and deadlines", long, env = "HELM_GUARD_IDLE_TIMEOUT", default_value = "120s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// Decisions under way at once (each may decode a payload up to --max-decoded-bytes); more
    /// requests wait their turn.
    #[arg(help_heading = "Limits and deadlines", long, env = "HELM_GUARD_MAX_CONCURRENT_REVIEWS", default_value_t = crate::server::DEFAULT_MAX_CONCURRENT_REVIEWS)]
    pub max_concurrent_reviews: usize,
    /// The most one decision may spend on the API server (all its calls share it). A decision
    /// also ends a second before the API server stops waiting (the `timeout` it sends: the
    /// webhook's timeoutSeconds) and before --request-timeout. A DELETE that cannot be shown
    /// harmless in time is refused with a message to retry.
    #[arg(help_heading = "Limits and deadlines", long, env = "HELM_GUARD_DECISION_DEADLINE", default_value = "9s", value_parser = humantime::parse_duration)]
    pub decision_deadline: Duration,
    /// A pending revision unchanged for longer than this is stuck.
    #[arg(help_heading = "Policy", long, env = "HELM_GUARD_STUCK_AFTER", default_value = "15m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    /// Write release health as PolicyReports (one replica at a time, holding a Lease): into
    /// every report API the cluster serves (`auto`: wgpolicyk8s.io and openreports.io, whichever
    /// CRDs are installed, looked for again every 30 s), one of them, or none.
    #[arg(
        help_heading = "PolicyReports",
        long,
        env = "HELM_GUARD_POLICY_REPORTS",
        value_enum,
        default_value_t
    )]
    pub policy_reports: crate::policy_reports::writer::ApiChoice,
    /// How often changed releases are written to their reports: a report lags the index by at
    /// most this (and one write).
    #[arg(help_heading = "PolicyReports", long, env = "HELM_GUARD_POLICY_REPORT_DEBOUNCE", default_value = "5s", value_parser = humantime::parse_duration)]
    pub policy_report_debounce: Duration,
    /// How often every report is read back and put right (one edited or deleted by hand).
    #[arg(help_heading = "PolicyReports", long, env = "HELM_GUARD_POLICY_REPORT_RESYNC", default_value = "10m", value_parser = humantime::parse_duration)]
    pub policy_report_resync: Duration,
    /// The most namespace reports written; namespaces past it (in name order) get none.
    #[arg(
        help_heading = "PolicyReports",
        long,
        env = "HELM_GUARD_POLICY_REPORT_MAX_REPORTS",
        default_value_t = 5000
    )]
    pub policy_report_max_reports: usize,
    /// How often to check the certificate files for changes.
    #[arg(help_heading = "Listening and TLS", long, env = "HELM_GUARD_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub tls_reload_interval: Duration,
    /// After SIGTERM, stay up (unready) this long so endpoints drop the pod first. Ctrl-C
    /// (SIGINT) stops without it.
    #[arg(help_heading = "Logs and shutdown", long, env = "HELM_GUARD_SHUTDOWN_DELAY", default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,
    /// Then give in-flight requests this long to finish.
    #[arg(help_heading = "Logs and shutdown", long, env = "HELM_GUARD_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    #[command(flatten, next_help_heading = "Limits and deadlines")]
    pub decode: DecodeArgs,
}

/// Log lines waiting for the writer thread at most; a request that would add one more waits for
/// it (no line is dropped: the ledger is the record of every decision). About 1 MiB of ledger.
const LOG_LINES_QUEUED: usize = 1024;

/// Logs to stderr from a writer thread (tracing-appender), so that no request waits on a `write`
/// call: a buffered writer, written out each time the queue runs empty (BENCHMARKS.md, "The log
/// writer"). The guard writes out the rest when dropped.
fn init_logging(format: LogFormat) -> anyhow::Result<tracing_appender::non_blocking::WorkerGuard> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (writer, flush) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(LOG_LINES_QUEUED)
        .thread_name("helm-guard-log")
        .finish(std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    let _ = match format {
        LogFormat::Json => log_format::json_subscriber(writer).with_env_filter(filter).try_init(),
        // Colour codes only where a terminal shows them, not in files or log collectors.
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
    Ok(flush)
}

pub(super) async fn run(args: &ServeArgs) -> anyhow::Result<Exit> {
    if args.dev_certs.is_none() && (args.tls_cert.is_none() || args.tls_key.is_none()) {
        eprintln!(
            "error: no serving certificate: pass --tls-cert FILE and --tls-key FILE (see `helm-guard certs`), or --dev-certs DIR for a local trial"
        );
        return Ok(Exit::BadInput);
    }
    if let Err(error) = recycle_bounds(args).check() {
        eprintln!("error: {error}");
        return Ok(Exit::BadInput);
    }
    let _flush = init_logging(args.log_format)?;
    // A snapshot that is missing or does not read is bad input, as for `scan --from-file`.
    let snapshot = match args.snapshot.as_deref().map(|path| load_snapshot(path, args)).transpose() {
        Ok(snapshot) => snapshot,
        Err(error) => {
            eprintln!("error: {error:#}");
            return Ok(Exit::BadInput);
        }
    };
    // A failure from here on (binding, TLS, the cluster) is the run's: exit 3 (main).
    serve(args, snapshot).await?;
    Ok(Exit::Ok)
}

async fn serve(args: &ServeArgs, snapshot: Option<Arc<ReleaseIndex>>) -> anyhow::Result<()> {
    let mut tls = match (&args.dev_certs, &args.tls_cert, &args.tls_key) {
        (Some(dir), _, _) => dev_certs(dir)?,
        (None, Some(cert), Some(key)) => TlsFiles::new(cert.clone(), key.clone()),
        _ => anyhow::bail!("no serving certificate"),
    };
    tls.client_ca = args.client_ca_file.clone();
    tls.client_names = args.client_cn.clone();
    let metrics = Metrics::new();
    let config = PolicyConfig {
        default_mode: args.mode,
        exempt_users: args.exempt_user.clone(),
        exempt_groups: args.exempt_group.clone(),
        stuck_after: args.stuck_after,
        protected_labels: args.protected_label.iter().filter(|l| !l.is_empty()).cloned().collect(),
        protected_charts: args.protected_chart.iter().filter(|c| !c.is_empty()).cloned().collect(),
        opt_out_users: args.opt_out_user.clone(),
        opt_out_groups: args.opt_out_group.clone(),
        exempt_namespaces: args.exempt_namespace.clone(),
        break_glass_groups: args.break_glass_group.clone(),
        forgetter_users: args.forgetter_user.iter().filter(|u| !u.is_empty()).cloned().collect(),
        forgetter_groups: args.forgetter_group.iter().filter(|g| !g.is_empty()).cloned().collect(),
        max_revisions_per_hour: args.max_revisions_per_hour.filter(|max| *max > 0),
        owner_lock: args.owner_lock,
    };
    let decide = Settings {
        policy: config,
        limits: args.decode.limits(),
        decision_deadline: args.decision_deadline,
        recycle_best_effort: args.recycle_best_effort,
    };
    let (admission, client) = match snapshot {
        Some(index) => {
            (Admission::new(index, decide, LiveParts::default(), metrics.decision_counts.clone()), None)
        }
        None => {
            let (admission, client) = watch_cluster(args, decide, &metrics).await?;
            (admission, Some(client))
        }
    };
    let state = Arc::new(
        AppState::new(
            admission,
            metrics,
            RequestLimits {
                max_body_bytes: super::bytes(args.max_body_bytes),
                body_read_timeout: args.body_read_timeout,
                request_timeout: args.request_timeout,
            },
        )
        .with_max_concurrent_reviews(args.max_concurrent_reviews),
    );
    let settings = ServerSettings {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        tls,
        tls_reload_every: args.tls_reload_interval,
        connections: ConnectionLimits {
            max_connections: args.max_connections,
            max_per_source: args.max_connections_per_source,
            idle_timeout: args.idle_timeout,
        },
        shutdown_delay: args.shutdown_delay,
        shutdown_grace: args.shutdown_grace,
    };
    let stop = server::termination()?;
    let running = server::start(settings, state.clone()).await?;
    if let (Some(name), Some(ca_file), Some(client)) =
        (&args.register_webhooks, &args.webhook_ca_file, client)
    {
        let registration = Registration {
            name: name.clone(),
            namespace: guard_namespace(args, &client),
            ca_file: ca_file.clone(),
            timeout_seconds: args.webhook_timeout,
            fail_closed: args.mode == crate::policy::Mode::Enforce,
        };
        let (reachable, tasks) = (state.metrics.apiserver_reachable.clone(), state.admission.tasks().clone());
        tasks.spawn(registration::keep_registered(client, registration, move || state.is_ready(), reachable));
    }
    running.stop(stop.await).await;
    Ok(())
}

fn load_snapshot(path: &std::path::Path, args: &ServeArgs) -> anyhow::Result<Arc<ReleaseIndex>> {
    let index = Arc::new(ReleaseIndex::new(SourceKind::Snapshot));
    let loaded = snapshot::load(&index, path, args.decode.limits())?;
    for problem in &loaded.problems {
        tracing::warn!(object = %problem.object, error = %problem.error, "snapshot record skipped by Helm");
    }
    tracing::info!(snapshot = %path.display(), records = loaded.records, namespaces = loaded.namespaces, charts = loaded.charts, "snapshot loaded");
    Ok(index)
}

/// Connects to the cluster and starts the live parts (`live`).
async fn watch_cluster(
    args: &ServeArgs,
    decide: Settings,
    metrics: &Metrics,
) -> anyhow::Result<(Admission, kube::Client)> {
    let client = crate::cluster::connect::connect(&args.cluster.access()).await.context(
        "no cluster to watch; pass --snapshot FILE to run the guard from a dump without a cluster",
    )?;
    let identity = args
        .replica_id
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("helm-guard-{}", std::process::id()));
    let guard_namespace = guard_namespace(args, &client);
    let fence_namespace = args.watch_fence.then(|| guard_namespace.clone());
    let bin_namespace = args.recycle_bin_namespace.clone().unwrap_or_else(|| guard_namespace.clone());
    let policy_reports = (args.policy_reports != ApiChoice::Off).then(|| WriterOptions {
        apis: args.policy_reports,
        debounce: args.policy_report_debounce,
        resync: args.policy_report_resync,
        rediscover: std::time::Duration::from_secs(30),
        lease_namespace: guard_namespace.clone(),
        identity: identity.clone(),
        stuck_after_secs: i64::try_from(args.stuck_after.as_secs()).unwrap_or(i64::MAX),
        default_mode: decide.policy.default_mode,
        protected_charts: decide.policy.protected_charts.clone(),
        bin_namespace: args.recycle_bin.then(|| bin_namespace.clone()),
        max_reports: args.policy_report_max_reports,
    });
    let recycle_bin = args
        .recycle_bin
        .then(|| crate::live::RecycleOptions { namespace: bin_namespace, bounds: recycle_bounds(args) });
    let options = crate::live::LiveOptions {
        tombstone_ttl: args.tombstone_ttl,
        claims_namespace: Some(guard_namespace.clone()),
        // Past any verdict's deadline that could still be waiting on the books, with room to spare.
        claim_keep_after_deletion: args.decision_deadline + std::time::Duration::from_secs(5),
        fence_namespace,
        read_ahead: args.read_ahead,
        identity,
        emit_events: args.emit_events,
        recycle_bin,
        unlock_abandoned: args.unlock_abandoned,
        policy_reports,
    };
    Ok((crate::live::admission(client.clone(), decide, options, metrics), client))
}

/// The guard's namespace: --guard-namespace (HELM_GUARD_LEASE_NAMESPACE in manifests of earlier
/// versions), else the service account's or the context's.
fn guard_namespace(args: &ServeArgs, client: &kube::Client) -> String {
    args.guard_namespace
        .clone()
        .or_else(|| std::env::var("HELM_GUARD_LEASE_NAMESPACE").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| client.default_namespace().to_owned())
}

/// The recycle bin's bounds, as the flags set them.
fn recycle_bounds(args: &ServeArgs) -> BinBounds {
    BinBounds {
        copies: args.recycle_max_copies,
        bytes: args.recycle_max_bytes.as_u64(),
        release_copies: args.recycle_max_release_copies,
        release_bytes: args.recycle_max_release_bytes.as_u64(),
        ttl_secs: i64::try_from(args.recycle_ttl.as_secs()).unwrap_or(i64::MAX),
    }
}

/// Reuses the certificates in `dir`, or makes them for localhost.
fn dev_certs(dir: &std::path::Path) -> anyhow::Result<TlsFiles> {
    let files = TlsFiles::new(dir.join("tls.crt"), dir.join("tls.key"));
    if !files.cert.exists() || !files.key.exists() {
        let names = ["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
        let bundle = crate::certs::generate(&names, 30).context("making development certificates")?;
        crate::certs::write(&bundle, dir)?;
        tracing::warn!(dir = %dir.display(), "made throwaway development certificates; trust {}/ca.crt", dir.display());
    }
    Ok(files)
}
