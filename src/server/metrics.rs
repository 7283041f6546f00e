//! Prometheus metrics (prometheus-client), served on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{
    EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::admission::Webhook;
use crate::cluster::ReleaseIndex;
use crate::policy::{Decision, Reason};
use crate::release::ReleaseState;
use crate::release::history::Anomaly;
use crate::release::writer::StuckBecause;
use crate::tally::Tally;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of `helm_guard_admission_decisions_total`.
pub(crate) struct DecisionLabels {
    /// Which webhook.
    pub webhook: Webhook,
    /// `CREATE`, `UPDATE`, `DELETE`.
    pub operation: &'static str,
    /// What was decided.
    pub decision: Decision,
    /// The rule that decided.
    pub reason: Reason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of `helm_guard_admission_duration_seconds`.
pub(crate) struct WebhookLabels {
    /// Which webhook.
    pub webhook: Webhook,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of `helm_guard_admission_rejected_requests_total`.
pub(crate) struct RejectedLabels {
    /// Which webhook.
    pub webhook: Webhook,
    /// Why (`bad-request`, `too-large`, `body-timeout`, `request-timeout`, `internal`).
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of `helm_guard_tls_reloads_total`.
pub(crate) struct ResultLabels {
    /// `success` or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of the anomaly gauge.
pub(crate) struct AnomalyLabels {
    /// Which anomaly.
    pub anomaly: Anomaly,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of the stuck gauge.
pub(crate) struct StuckLabels {
    /// `writer-gone` or `age`.
    pub because: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of the dropped-Events counter.
pub(crate) struct CauseLabels {
    /// Why they were dropped.
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of the opted-out namespaces gauge.
pub(crate) struct OptedOutLabels {
    /// The namespace.
    pub namespace: String,
    /// `ignored`, `warn` or `audit`.
    pub protection: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of the recycle bin's evictions.
pub(crate) struct EvictionLabels {
    /// Why (a bound's name, or `expired`).
    pub reason: &'static str,
}

/// The recycle bin's eviction counts, one series per reason.
#[derive(Debug)]
struct RecycleEvictions(crate::recycle_bin::api::BinStats);

impl EncodeMetric for RecycleEvictions {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for &why in <crate::recycle_bin::copy::Eviction as strum::VariantArray>::VARIANTS {
            let labels = EvictionLabels { reason: why.into() };
            let count = self.0.evicted(why).get();
            encoder.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&count, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// The core's levels are Prometheus gauges here.
impl EncodeMetric for crate::tally::Level {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&i64::try_from(self.get()).unwrap_or(i64::MAX))
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of the releases gauge.
pub(crate) struct StateLabels {
    /// Which state.
    pub state: ReleaseState,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

/// Why a request was answered with an HTTP error (`helm_guard_admission_rejected_requests_total`).
pub(crate) const REJECTIONS: &[&str] =
    &["bad-request", "too-large", "body-timeout", "request-timeout", "internal"];
/// Why an Event was dropped (`helm_guard_events_dropped_total`).
pub(crate) const EVENT_DROP_CAUSES: [&str; 2] = ["queue-full", "api-error"];

#[derive(Debug)]
/// The guard's Prometheus metrics (`/metrics`).
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    rejected: Family<RejectedLabels, Counter>,
    tls_reloads: Family<ResultLabels, Counter>,
    releases: Family<StateLabels, Gauge>,
    releases_stuck: Family<StuckLabels, Gauge>,
    anomalies: Family<AnomalyLabels, Gauge>,
    revisions: Gauge,
    opted_out: Family<OptedOutLabels, Gauge>,
    /// Watches restarted after an error.
    pub watch_restarts: Tally,
    /// Fence rounds written ([`crate::cluster::fence`]).
    pub fence_rounds: Tally,
    /// Payloads read ahead of the verdicts that need them.
    pub payloads_read_ahead: Tally,
    /// What decisions count: listings instead of a fence round, deadlines run out, deletions
    /// the replicas could not agree in time.
    pub decision_counts: crate::admission::DecisionCounts,
    events_dropped: Family<CauseLabels, Tally>,
    seconds_since_sync: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// When the serving certificate expires (Unix seconds), set at each (re)load.
    pub tls_certificate_expiry: Gauge,
    /// Whether the last probe came back through the API server (1), did not (0), or could not
    /// be sent (-1); -1 until the first (`cluster::registration`).
    pub apiserver_reachable: Gauge,
    /// The recycle bin's counts.
    pub recycle_bin: crate::recycle_bin::api::BinStats,
    /// What the PolicyReport writer did.
    pub policy_reports: crate::policy_reports::writer::WriterStats,
}

impl Metrics {
    /// The metrics, registered.
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("helm_guard");
        let decisions = Family::default();
        registry.register(
            "admission_decisions",
            "Admission decisions by webhook, operation, decision and reason",
            decisions.clone(),
        );
        let latency = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register(
            "admission_duration_seconds",
            "Time to decide one admission request",
            latency.clone(),
        );
        let rejected = Family::default();
        registry.register(
            "admission_rejected_requests",
            "Requests answered with an HTTP error (bad JSON, too large, ...)",
            rejected.clone(),
        );
        let tls_reloads = Family::default();
        registry.register("tls_reloads", "Certificate reloads by result", tls_reloads.clone());
        let releases = Family::default();
        registry.register("releases", "Releases in the index by state", releases.clone());
        let releases_stuck = Family::default();
        registry.register(
            "releases_stuck",
            "Releases whose pending revision no one will finish, by why: writer-gone (its writer's pod is gone) or age (unchanged for longer than --stuck-after, its writer not known to run in a pod)",
            releases_stuck.clone(),
        );
        let anomalies = Family::default();
        registry.register(
            "release_anomalies",
            "Releases with an anomaly (multiple-deployed, status-label-mismatch, undecodable-record)",
            anomalies.clone(),
        );
        let revisions = Gauge::default();
        registry.register("revisions_indexed", "Release revisions held in the index", revisions.clone());
        let opted_out = Family::default();
        registry.register(
            "namespace_opted_out_timestamp_seconds",
            "Namespaces whose labels (helm-guard.io/ignore, a weaker helm-guard.io/mode) leave them less protected than the global mode: when the labels were last set (0: unknown)",
            opted_out.clone(),
        );
        let watch_restarts = Tally::default();
        registry.register("watch_restarts", "Times a watch failed and re-listed", watch_restarts.clone());
        let fence_rounds = Tally::default();
        registry.register(
            "fence_rounds",
            "Fence rounds written: one proves the watch caught up for every verdict waiting on it",
            fence_rounds.clone(),
        );
        let payloads_read_ahead = Tally::default();
        registry.register(
            "payloads_read_ahead",
            "Record payloads read ahead of the verdicts that need them",
            payloads_read_ahead.clone(),
        );
        let decision_counts = crate::admission::DecisionCounts::default();
        registry.register(
            "confirmed_by_listing",
            "Verdicts that listed their release because no fence round completed in time",
            decision_counts.confirmed_by_listing.clone(),
        );
        registry.register(
            "decision_deadline_exceeded",
            "Decisions that could not read every record they needed: the API server failed or did not answer within --decision-deadline",
            decision_counts.deadline_exceeded.clone(),
        );
        registry.register(
            "delete_coordination_refused",
            "Deletions refused because their approval could not be agreed with the other replicas in time",
            decision_counts.coordination_refused.clone(),
        );
        let policy_reports = crate::policy_reports::writer::WriterStats::default();
        registry.register(
            "policy_reports_written",
            "PolicyReports created or changed by this replica (the holder of the writer's Lease)",
            policy_reports.written.clone(),
        );
        registry.register(
            "policy_reports_deleted",
            "PolicyReports deleted because their namespace has no release left",
            policy_reports.deleted.clone(),
        );
        registry.register(
            "policy_report_errors",
            "PolicyReport API calls that failed (retried the next round)",
            policy_reports.failed.clone(),
        );
        let events_dropped = Family::default();
        registry.register(
            "events_dropped",
            "Events about refusals not written: the queue was full, or the API did not take them",
            events_dropped.clone(),
        );
        // Every known label value from the start, at 0: a dashboard shows 0, not "no data", and
        // `increase()` counts the first occurrence.
        for webhook in [Webhook::Validate, Webhook::Mutate] {
            let _ = latency.get_or_create(&WebhookLabels { webhook });
            for &error in REJECTIONS {
                let _ = rejected.get_or_create(&RejectedLabels { webhook, error });
            }
        }
        for result in ["success", "error"] {
            let _ = tls_reloads.get_or_create(&ResultLabels { result });
        }
        for cause in EVENT_DROP_CAUSES {
            let _ = events_dropped.get_or_create(&CauseLabels { cause });
        }
        let seconds_since_sync = Gauge::default();
        registry.register(
            "seconds_since_last_sync",
            "Seconds since the index last heard from its source",
            seconds_since_sync.clone(),
        );
        registry.register(
            "build",
            "The running build: version, git commit and build date",
            prometheus_client::metrics::info::Info::new(vec![
                ("version", crate::build::VERSION),
                ("commit", crate::build::COMMIT),
                ("build_date", crate::build::DATE),
            ]),
        );
        let tls_certificate_expiry = Gauge::default();
        registry.register(
            "tls_certificate_expiry_seconds",
            "When the serving certificate expires, in Unix seconds (alert on it minus time())",
            tls_certificate_expiry.clone(),
        );
        let apiserver_reachable = Gauge::default();
        apiserver_reachable.set(-1);
        registry.register(
            "apiserver_reachable",
            "Whether the API server reached the guard through its Service at the last probe: 1 yes, 0 no, -1 not probed (no --register-webhooks) or could not ask",
            apiserver_reachable.clone(),
        );
        let recycle_bin = crate::recycle_bin::api::BinStats::default();
        registry.register(
            "recycle_bin_copies",
            "Copies of let-go records held in the recycle bin, as last listed",
            recycle_bin.copies.clone(),
        );
        registry.register("recycle_bin_bytes", "Bytes of those copies", recycle_bin.bytes.clone());
        registry.register(
            "recycle_bin_kept",
            "Copies stored before a deletion was approved",
            recycle_bin.kept.clone(),
        );
        registry.register(
            "recycle_bin_failures",
            "Copies that could not be stored (each a deletion refused, or with --recycle-best-effort let go without one)",
            recycle_bin.failed.clone(),
        );
        registry.register(
            "recycle_bin_evicted",
            "Copies evicted from the recycle bin, by reason (expired, release-copies, release-bytes, copies, bytes)",
            RecycleEvictions(recycle_bin.clone()),
        );
        Arc::new(Metrics {
            registry,
            decisions,
            latency,
            rejected,
            tls_reloads,
            releases,
            releases_stuck,
            anomalies,
            revisions,
            opted_out,
            watch_restarts,
            fence_rounds,
            payloads_read_ahead,
            decision_counts,
            events_dropped,
            seconds_since_sync,
            tls_certificate_expiry,
            apiserver_reachable,
            recycle_bin,
            policy_reports,
        })
    }

    /// Counts a decision and how long it took.
    pub(crate) fn decision(&self, labels: DecisionLabels, took: Duration) {
        self.latency.get_or_create(&WebhookLabels { webhook: labels.webhook }).observe(took.as_secs_f64());
        self.decisions.get_or_create(&labels).inc();
    }

    /// Counts a request that was not decided (`error` says why).
    pub(crate) fn rejected(&self, webhook: Webhook, error: &'static str) {
        debug_assert!(REJECTIONS.contains(&error), "{error} is not in REJECTIONS");
        self.rejected.get_or_create(&RejectedLabels { webhook, error }).inc();
    }

    /// Counts Events dropped because the queue was full (`queue-full`) or the API refused or
    /// timed out (`api-error`).
    pub(crate) fn events_dropped(&self, cause: &'static str) -> Tally {
        debug_assert!(EVENT_DROP_CAUSES.contains(&cause), "{cause} is not in EVENT_DROP_CAUSES");
        self.events_dropped.get_or_create(&CauseLabels { cause }).clone()
    }

    /// Counts a certificate reload.
    pub(crate) fn tls_reload(&self, ok: bool) {
        self.tls_reloads.get_or_create(&ResultLabels { result: if ok { "success" } else { "error" } }).inc();
    }

    /// Renders the metrics, refreshing the index gauges first.
    pub(crate) fn render(
        &self,
        index: &ReleaseIndex,
        writer: &dyn Fn(&crate::release::ReleaseKey, u32) -> crate::release::writer::Liveness,
        stuck_after_secs: i64,
        default_mode: crate::policy::Mode,
        seconds_since_sync: f64,
    ) -> String {
        let now = jiff::Timestamp::now().as_second();
        let census = crate::cluster::census::census(index, now, stuck_after_secs, writer);
        for &state in <ReleaseState as strum::VariantArray>::VARIANTS {
            let count = census.states.get(&state).copied().unwrap_or_default();
            self.releases.get_or_create(&StateLabels { state }).set(count as i64);
        }
        for because in [StuckBecause::WriterGone, StuckBecause::Age] {
            let count = census.stuck.get(&because).copied().unwrap_or_default();
            self.releases_stuck.get_or_create(&StuckLabels { because: because.into() }).set(count as i64);
        }
        for &anomaly in <Anomaly as strum::VariantArray>::VARIANTS {
            let count = census.anomalies.get(&anomaly).copied().unwrap_or_default();
            self.anomalies.get_or_create(&AnomalyLabels { anomaly }).set(count as i64);
        }
        self.revisions.set(census.revisions as i64);
        // Namespaces come and go: the family is rebuilt, so one that opted back in disappears.
        self.opted_out.clear();
        for opted in index.namespaces().opted_out(default_mode) {
            let labels = OptedOutLabels { namespace: opted.namespace, protection: opted.protection };
            self.opted_out.get_or_create(&labels).set(opted.since.unwrap_or_default());
        }
        self.seconds_since_sync.set(seconds_since_sync);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The core's counts are Prometheus counters here, and only here.
impl EncodeMetric for Tally {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

impl TypedMetric for Tally {
    const TYPE: MetricType = MetricType::Counter;
}

/// The enums' own names are the label values (`decision="denied"`, `state="orphaned-superseded"`).
macro_rules! label_values {
    ($($name:ty),*) => {$(
        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    )*};
}

label_values!(Webhook, Decision, Reason, ReleaseState, Anomaly);
