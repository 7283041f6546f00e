//! AdmissionReview in, AdmissionResponse out.
//!
//! [`review::parse`] reads the API server's request (its objects by [`crate::object`]),
//! [`Admission::review_by`] sends it to [`validating`] (a DELETE's four steps in [`delete`]) or
//! [`mutating`], and [`ledger`] turns the outcome into audit annotations and one structured log
//! line. [`review::encode`] writes the answer.

mod decided;
pub(crate) mod delete;
pub(crate) mod ledger;
pub(crate) mod mutating;
pub mod review;
pub(crate) mod validating;

use std::sync::Arc;

use crate::object::ReviewObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

use std::time::{Duration, Instant};

use crate::cluster::freshness::Freshness;
use crate::cluster::{PayloadFetcher, ReleaseIndex};
use crate::policy::PolicyConfig;
use crate::release::DecodeLimits;
pub(crate) use ledger::LedgerEntry;

/// Which webhook a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Webhook {
    /// The validating webhook on release records.
    Validate,
    /// The mutating webhook on helm-install pods.
    Mutate,
}

impl Webhook {
    /// The webhook as its path and metric labels spell it.
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Everything a verdict needs besides the request: the view of the releases, how to decide, what
/// a live decision may do beyond the view, and the counts it keeps.
#[derive(Debug, Clone)]
pub struct Admission {
    index: Arc<ReleaseIndex>,
    settings: Settings,
    live: LiveParts,
    counts: DecisionCounts,
    /// Payload readings by the payload's bytes.
    memo: Arc<crate::release::decode::memo::PayloadMemo>,
    /// A live guard's way to show the index current before a verdict rests on it; `None` for a
    /// snapshot, whose index is all there is.
    freshness: Option<Freshness>,
    /// The writers of releases: who created each revision, offered here as CREATEs are allowed
    /// (`cluster::writers`); `None` for a snapshot or without a guard namespace.
    writers: Option<Arc<crate::cluster::writers::Writers>>,
    /// The background tasks that feed a live guard's decisions (none for a snapshot).
    tasks: Arc<crate::tasks::Tasks>,
}

/// How decisions are made: the policy and the bounds on each decision.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The policy's configuration.
    pub policy: PolicyConfig,
    /// Bounds on reading payloads.
    pub limits: DecodeLimits,
    /// The most one decision may spend on API calls (see [`Admission::deadline`]).
    pub decision_deadline: Duration,
    /// Approve a deletion whose copy could not be stored (with a warning) instead of refusing it.
    pub recycle_best_effort: bool,
}

impl Settings {
    /// `policy` with the default limits and deadline.
    pub fn new(policy: PolicyConfig) -> Settings {
        Settings {
            policy,
            limits: DecodeLimits::default(),
            decision_deadline: DEFAULT_DECISION_DEADLINE,
            recycle_best_effort: false,
        }
    }
}

/// What a decision may do beyond the index when the source is live; all `None` (the default) for
/// a snapshot.
#[derive(Debug, Clone, Default)]
pub struct LiveParts {
    /// Reads a payload the index does not hold, and shows the index current.
    pub fetcher: Option<Arc<dyn PayloadFetcher>>,
    /// With several replicas: agrees approvals of deletions with the others.
    pub coordinator: Option<Arc<dyn crate::cluster::DeleteCoordinator>>,
    /// Events about refusals and warnings go here (never waited for).
    pub events: Option<crate::cluster::events::EventQueue>,
    /// A deletion let go keeps a copy here first (`recycle_bin`).
    pub recycle_bin: Option<Arc<dyn crate::recycle_bin::api::RecycleBin>>,
    /// Says who may break glass beyond `system:masters` and `--break-glass-group` (the API
    /// server's authorizer); without it, no one else.
    pub break_glass: Option<Arc<dyn crate::cluster::BreakGlassAuthority>>,
}

/// The counts decisions keep, shared with the metrics.
#[derive(Debug, Clone, Default)]
pub struct DecisionCounts {
    /// Decisions that could not read every record they needed (a read failed, or the deadline
    /// ran out).
    pub deadline_exceeded: crate::tally::Tally,
    /// Decisions that listed their release because the watch could not be shown caught up.
    pub confirmed_by_listing: crate::tally::Tally,
    /// Deletions refused because they could not be agreed with the other replicas in time.
    pub coordination_refused: crate::tally::Tally,
}

impl Admission {
    /// Decisions on `index`, made as `settings` say, with what `live` allows beyond the index,
    /// counted in `counts`.
    pub fn new(
        index: Arc<ReleaseIndex>,
        settings: Settings,
        live: LiveParts,
        counts: DecisionCounts,
    ) -> Admission {
        let freshness = live.fetcher.clone().map(|fetcher| {
            let (exceeded, listed) = (counts.deadline_exceeded.clone(), counts.confirmed_by_listing.clone());
            Freshness::new(fetcher, index.clone(), exceeded, listed)
        });
        Admission {
            index,
            settings,
            live,
            counts,
            memo: Default::default(),
            freshness,
            writers: None,
            tasks: Default::default(),
        }
    }

    /// Whether the writer of `revision`, the pending latest of `key`, runs, as last judged
    /// (`cluster::unlock`); `Unknown` without writers.
    pub(crate) fn writer_liveness(
        &self,
        key: &crate::release::ReleaseKey,
        revision: u32,
    ) -> crate::release::writer::Liveness {
        self.writers.as_ref().map_or(crate::release::writer::Liveness::Unknown, |w| w.judged(key, revision))
    }

    /// Remembers who writes releases in `writers`, and locks releases to their owners where a
    /// namespace says so.
    pub(crate) fn with_writers(self, writers: Option<Arc<crate::cluster::writers::Writers>>) -> Admission {
        Admission { writers, ..self }
    }

    /// The same, owning the background `tasks` that feed it.
    pub(crate) fn with_tasks(self, tasks: Arc<crate::tasks::Tasks>) -> Admission {
        Admission { tasks, ..self }
    }

    /// The background tasks that feed the decisions: stopped after the server has drained.
    pub fn tasks(&self) -> &Arc<crate::tasks::Tasks> {
        &self.tasks
    }

    /// Decisions on a snapshot's `index` under `policy`, with the default limits and deadline.
    pub fn snapshot(index: Arc<ReleaseIndex>, policy: PolicyConfig) -> Admission {
        Admission::new(index, Settings::new(policy), LiveParts::default(), DecisionCounts::default())
    }

    /// What the guard knows of the cluster's releases.
    pub fn index(&self) -> &Arc<ReleaseIndex> {
        &self.index
    }

    /// How decisions are made.
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The counts decisions keep.
    pub fn counts(&self) -> &DecisionCounts {
        &self.counts
    }
}

/// The default of `--decision-deadline`: the webhooks' 10 s timeout less [`ANSWER_MARGIN`].
pub(crate) const DEFAULT_DECISION_DEADLINE: Duration = Duration::from_secs(9);

/// What a decision leaves of the API server's timeout for its answer to get back (encoding, the
/// network): an answer the API server gives up on refuses Helm.
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// A request's answer and its ledger entry.
#[derive(Debug)]
pub struct Reviewed {
    /// What goes back to the API server.
    pub response: AdmissionResponse,
    /// What is logged and annotated.
    pub entry: LedgerEntry,
}

impl Admission {
    /// When a decision on a request that arrived at `arrived` must be done with the API server:
    /// a slow API server should cost Helm time, not its operation, so a decision may use what
    /// the API server waits for it (`timeout`, the webhook's `timeoutSeconds`, which it sends
    /// with each request) less `ANSWER_MARGIN`, and never more than `--decision-deadline`.
    pub(crate) fn deadline(&self, arrived: Instant, timeout: Option<Duration>) -> Instant {
        let allowed = timeout.map_or(self.settings.decision_deadline, |timeout| {
            self.settings.decision_deadline.min(timeout.saturating_sub(ANSWER_MARGIN))
        });
        arrived + allowed
    }

    /// Decides one request, arrived now, within `--decision-deadline`; see `Admission::review_by`.
    pub async fn review(&self, webhook: Webhook, request: AdmissionRequest<ReviewObject>) -> Reviewed {
        self.review_by(webhook, request, self.deadline(Instant::now(), None)).await
    }

    /// Decides one request; its API calls end by `deadline`, and a decision that waits on them
    /// holds no thread (a snapshot's decisions never wait: the future is ready at its first
    /// poll). Logs the decision as one ledger line.
    pub(crate) async fn review_by(
        &self,
        webhook: Webhook,
        request: AdmissionRequest<ReviewObject>,
        deadline: Instant,
    ) -> Reviewed {
        let reviewed = match webhook {
            Webhook::Validate => validating::validate(self, request, deadline).await,
            Webhook::Mutate => mutating::mutate(self, request, deadline).await,
        };
        reviewed.entry.emit();
        if let Some(events) = &self.live.events {
            for notice in self.notices(&reviewed.entry) {
                events.offer(notice);
            }
        }
        reviewed
    }

    /// The Events a decision calls for: on the record, and on the HelmChart that manages its
    /// release; for a rewritten helm-install pod, on the HelmChart that made it.
    fn notices(&self, entry: &LedgerEntry) -> Vec<crate::cluster::events::Notice> {
        if let Some((namespace, name)) = &entry.about.helm_chart {
            let chart = self.index.charts().get(namespace, name);
            return chart.and_then(|chart| entry.pod_notice(&chart)).into_iter().collect();
        }
        let Some(mut notice) = entry.notice() else { return Vec::new() };
        let release = entry.about.release.as_deref().and_then(|release| release.split_once('/'));
        // A record the watch holds under the review's uid is stored as the review said: the
        // Event writer need not GET it (issue 62: a GET per new Event series cost refusals).
        if let (Some((namespace, release)), Some(driver)) =
            (release, crate::release::Driver::of_kind("", &notice.kind))
        {
            let key = crate::release::ReleaseKey {
                driver,
                namespace: namespace.to_owned(),
                release: release.to_owned(),
            };
            notice.watched =
                notice.uid.is_some() && self.index.holds(&key, &notice.name, notice.uid.as_deref());
        }
        let managing =
            release.and_then(|(namespace, release)| self.index.charts().managing(namespace, release));
        let on_chart = managing.map(|chart| notice.about_chart(&chart));
        std::iter::once(notice).chain(on_chart).collect()
    }

    /// Reads a request's record, or recalls the reading of the same bytes (a record's CREATE,
    /// its UPDATEs' old sides and its DELETE carry the same payload). With the content
    /// fingerprint when `fingerprinting` asks for it: an UPDATE compares its sides' contents, a
    /// CREATE's reading serves its UPDATEs; a DELETE needs none, and the fingerprint (a SHA-256
    /// over the chart and manifest) is half of what reading a payload costs. A large payload is
    /// read on the blocking pool (CPU work that would stall the other requests of this worker),
    /// the rest here.
    async fn read_record(
        &self,
        record: crate::release::Record,
        fingerprinting: crate::release::decode::Fingerprinting,
    ) -> crate::release::DecodedRecord {
        let (limits, memo) = (self.settings.limits, self.memo.clone());
        let read =
            move |record| crate::release::DecodedRecord::remembered(record, limits, fingerprinting, &memo);
        if record.payload.as_ref().map_or(0, bytes::Bytes::len) <= crate::release::decode::LARGE_PAYLOAD_BYTES
        {
            return read(record);
        }
        let (fallback, on_the_pool) = (record.clone(), read.clone());
        match tokio::task::spawn_blocking(move || on_the_pool(record)).await {
            Ok(decoded) => decoded,
            // The pool is gone (the runtime shutting down): read it here.
            Err(_) => read(fallback),
        }
    }

    /// What the index knows of a namespace, and its mode: the `helm-guard.io/mode` label, else
    /// the global default.
    fn namespace(&self, namespace: &str) -> (crate::cluster::NamespaceInfo, crate::policy::Mode) {
        let info = self.index.namespaces().get(namespace);
        let mode = info.mode.unwrap_or(self.settings.policy.default_mode);
        (info, mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_ends_before_the_api_server_stops_waiting_and_within_its_own_bound() {
        let mut admission = Admission::snapshot(
            Arc::new(ReleaseIndex::new(crate::cluster::SourceKind::Snapshot)),
            PolicyConfig::default(),
        );
        let now = Instant::now();
        let seconds = |s| Duration::from_secs(s);
        // The webhooks' default 10 s: 9 s, the default bound.
        assert_eq!(admission.deadline(now, Some(seconds(10))), now + seconds(9));
        // A webhook that waits 5 s: 4 s; one that waits 2 s: 1 s.
        assert_eq!(admission.deadline(now, Some(seconds(5))), now + seconds(4));
        assert_eq!(admission.deadline(now, Some(seconds(2))), now + seconds(1));
        // One that waits 30 s: still the bound.
        assert_eq!(admission.deadline(now, Some(seconds(30))), now + seconds(9));
        admission.settings.decision_deadline = seconds(20);
        assert_eq!(admission.deadline(now, Some(seconds(30))), now + seconds(20));
        assert_eq!(admission.deadline(now, None), now + seconds(20));
        // Less than the margin leaves nothing: decided from what is known.
        assert_eq!(admission.deadline(now, Some(Duration::from_millis(500))), now);
    }
}
