//! AdmissionReview in, AdmissionResponse out.
//!
//! [`review::parse`] reads the API server's request, [`Admission::review`] sends it to
//! [`validating`] or [`mutating`], and [`ledger`] turns the outcome into audit annotations and one
//! structured log line. [`review::encode`] writes the answer.

pub mod ledger;
pub mod mutating;
pub mod object;
pub mod review;
pub mod validating;

use std::sync::Arc;

use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use object::ReviewObject;

use std::time::{Duration, Instant};

use crate::cluster::{Fetched, PayloadFetcher, ReleaseIndex};
use crate::policy::PolicyConfig;
use crate::release::{DecodeLimits, ReleaseKey};
pub use ledger::LedgerEntry;

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
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Everything a verdict needs besides the request.
#[derive(Debug, Clone)]
pub struct Admission {
    /// What the guard knows of the cluster's releases.
    pub index: Arc<ReleaseIndex>,
    /// The policy's configuration.
    pub config: PolicyConfig,
    /// Bounds on reading payloads.
    pub limits: DecodeLimits,
    /// Live source only: reads a payload the index does not hold.
    pub fetcher: Option<Arc<dyn PayloadFetcher>>,
    /// What one decision may spend on API calls; below the webhooks' `timeoutSeconds`.
    pub decision_deadline: Duration,
    /// Decisions that ran out of `decision_deadline` before reading every record they needed.
    pub deadline_exceeded: crate::tally::Tally,
    /// Decisions that listed their release because the watch could not be shown caught up.
    pub confirmed_by_listing: crate::tally::Tally,
    /// Payload readings by the payload's bytes.
    pub memo: Arc<crate::release::decode::memo::PayloadMemo>,
    /// Live source with several replicas: agrees approvals of deletions with the others.
    pub coordinator: Option<Arc<dyn crate::cluster::DeleteCoordinator>>,
    /// Deletions refused because they could not be agreed with the other replicas in time.
    pub coordination_refused: crate::tally::Tally,
    /// Live source: Events about refusals and warnings go here (never waited for).
    pub events: Option<crate::cluster::events::EventQueue>,
    /// Live source: a deletion let go keeps a copy here first (`cluster::recycle_bin`).
    pub recycle_bin: Option<Arc<dyn crate::cluster::recycle_bin::RecycleBin>>,
    /// Approve a deletion whose copy could not be stored (with a warning) instead of refusing it.
    pub recycle_best_effort: bool,
}

impl Admission {
    /// Decisions on `index` under `config`, with the default limits and deadline, and nothing
    /// live: no payload reads, no agreement between replicas, no Events. Add those with struct
    /// update syntax: `Admission { fetcher: Some(..), ..Admission::new(index, config) }`.
    pub fn new(index: Arc<ReleaseIndex>, config: PolicyConfig) -> Admission {
        Admission {
            index,
            config,
            limits: DecodeLimits::default(),
            fetcher: None,
            decision_deadline: DEFAULT_DECISION_DEADLINE,
            deadline_exceeded: Default::default(),
            confirmed_by_listing: Default::default(),
            memo: Default::default(),
            coordinator: None,
            coordination_refused: Default::default(),
            events: None,
            recycle_bin: None,
            recycle_best_effort: false,
        }
    }
}

/// The default of `--decision-deadline`: well below the webhooks' 5 s timeout.
pub const DEFAULT_DECISION_DEADLINE: Duration = Duration::from_secs(2);

/// A request's answer and its ledger entry.
#[derive(Debug)]
pub struct Reviewed {
    /// What goes back to the API server.
    pub response: AdmissionResponse,
    /// What is logged and annotated.
    pub entry: LedgerEntry,
}

/// Whether a decision may wait on the API server (it then runs on a blocking thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// Decided on a blocking thread: the decision may wait on the API server.
    Allowed,
    /// Decided on an async worker: a decision that needs the API server says so instead.
    Forbidden,
}

/// A decision that needs to read from the API server, asked for with [`Io::Forbidden`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedsIo;

impl Admission {
    /// Decides one request unless, with `io` forbidden, it would have to wait on the API server
    /// (with `Io::Allowed` it always decides); logs the decision as one ledger line. A decision
    /// that says `NeedsIo` has changed nothing.
    pub fn review(
        &self,
        webhook: Webhook,
        request: AdmissionRequest<ReviewObject>,
        io: Io,
    ) -> Result<Reviewed, NeedsIo> {
        let reviewed = match webhook {
            Webhook::Validate => validating::validate(self, request, io)?,
            Webhook::Mutate => mutating::mutate(self, request, io)?,
        };
        reviewed.entry.emit();
        if let Some(events) = &self.events {
            for notice in self.notices(&reviewed.entry) {
                events.offer(notice);
            }
        }
        Ok(reviewed)
    }

    /// The Events a decision calls for: on the record, and on the HelmChart that manages its
    /// release; for a rewritten helm-install pod, on the HelmChart that made it.
    fn notices(&self, entry: &LedgerEntry) -> Vec<crate::cluster::events::Notice> {
        if let Some((namespace, name)) = &entry.helm_chart {
            let chart = self.index.charts.get(namespace, name);
            return chart.and_then(|chart| entry.pod_notice(&chart)).into_iter().collect();
        }
        let Some(notice) = entry.notice() else { return Vec::new() };
        let managing = entry
            .release
            .as_deref()
            .and_then(|release| release.split_once('/'))
            .and_then(|(namespace, release)| self.index.charts.managing(namespace, release));
        let on_chart = managing.map(|chart| notice.about_chart(&chart));
        std::iter::once(notice).chain(on_chart).collect()
    }

    /// Reads a request's record, or recalls the reading of the same bytes (a record's CREATE,
    /// its UPDATEs' old sides and its DELETE carry the same payload). With the content
    /// fingerprint, so that one reading serves every kind of request.
    fn read_record(&self, record: crate::release::Record) -> crate::release::DecodedRecord {
        crate::release::DecodedRecord::remembered(
            record,
            self.limits,
            crate::release::decode::Fingerprinting::Take,
            &self.memo,
        )
    }

    /// What the index knows of a namespace, and its mode: the `helm-guard.io/mode` label, else
    /// the global default.
    fn namespace(&self, namespace: &str) -> (crate::cluster::NamespaceInfo, crate::policy::Mode) {
        let info = self.index.namespace(namespace);
        let mode = info.mode.unwrap_or(self.config.default_mode);
        (info, mode)
    }

    /// Makes the index's view of one release at least as new as the request (the watch may lag
    /// a record just written), then reads what is still unread. Within the decision deadline;
    /// whether that was shown (without it the index stays as it was). Shown by the watch's fence
    /// when a round completes within half the deadline (one write for every verdict waiting),
    /// else by a consistent listing of the release.
    fn confirm_history(
        &self,
        key: &ReleaseKey,
        except: Option<&str>,
        started: Instant,
        io: Io,
    ) -> Result<bool, NeedsIo> {
        let Some(fetcher) = &self.fetcher else { return Ok(true) };
        if io == Io::Forbidden {
            return Err(NeedsIo);
        }
        if fetcher.caught_up(key.driver, started + self.decision_deadline / 2) {
            self.read_history(key, except, started, io)?;
            return Ok(true);
        }
        self.confirmed_by_listing.inc();
        let listed = fetcher.list(key, started + self.decision_deadline);
        let confirmed = listed.is_some();
        match listed {
            Some(listed) => self.index.sync_release(key, listed),
            None => self.deadline_exceeded.inc(),
        }
        self.read_history(key, except, started, io)?;
        Ok(confirmed)
    }

    /// A metadata-only index knows a record by its labels, which anyone may set; a verdict that
    /// depends on the release's history first reads what Helm reads: the payload of every record
    /// not yet read at its current resourceVersion, all within the decision deadline. A record
    /// still unread afterwards counts as unread in the history (and refuses what it must).
    /// `except`: the record the request is about (its payload is in the request).
    fn read_history(
        &self,
        key: &ReleaseKey,
        except: Option<&str>,
        started: Instant,
        io: Io,
    ) -> Result<(), NeedsIo> {
        let Some(fetcher) = &self.fetcher else { return Ok(()) };
        let unread = self.index.unverified(key, except);
        if unread.is_empty() {
            return Ok(());
        }
        if io == Io::Forbidden {
            return Err(NeedsIo);
        }
        let objects: Vec<String> = unread.iter().map(|(object, _)| object.clone()).collect();
        let answers = fetcher.fetch(key, &objects, started + self.decision_deadline);
        if answers.len() < objects.len() {
            self.deadline_exceeded.inc();
        }
        for (object, fetched) in answers {
            let seen = unread.iter().find(|(o, _)| *o == object).and_then(|(_, rv)| rv.as_deref());
            match fetched {
                Fetched::Read(read) => self.index.verified(key, &object, seen, read),
                // Whatever object had the name: none of this release has it now.
                Fetched::Gone => self.index.remove(key, &object, None),
            }
        }
        Ok(())
    }
}
