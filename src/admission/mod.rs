//! AdmissionReview in, AdmissionResponse out.
//!
//! [`review::parse`] reads the API server's request, [`Admission::review`] sends it to
//! [`validating`] or [`mutating`], and [`ledger`] turns the outcome into audit annotations and one
//! structured log line. [`review::encode`] writes the answer.

pub mod ledger;
pub mod mutating;
pub mod review;
pub mod validating;

use std::sync::Arc;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

use crate::cluster::{PayloadFetcher, ReleaseIndex};
use crate::policy::PolicyConfig;
use crate::release::history::PayloadStatus;
use crate::release::{DecodeLimits, RecordId, ReleaseKey};
pub use ledger::LedgerEntry;

/// Which webhook a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Webhook {
    Validate,
    Mutate,
}

impl Webhook {
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Validate => "validate",
            Webhook::Mutate => "mutate",
        }
    }
}

/// Everything a verdict needs besides the request.
#[derive(Debug, Clone)]
pub struct Admission {
    pub index: Arc<ReleaseIndex>,
    pub config: PolicyConfig,
    pub limits: DecodeLimits,
    /// Live source only: reads a payload the index does not hold.
    pub fetcher: Option<Arc<dyn PayloadFetcher>>,
}

/// A request's answer and its ledger entry.
#[derive(Debug)]
pub struct Reviewed {
    pub response: AdmissionResponse,
    pub entry: LedgerEntry,
}

impl Admission {
    /// Decides one request; logs the decision as one ledger line.
    pub fn review(&self, webhook: Webhook, request: &AdmissionRequest<DynamicObject>) -> Reviewed {
        let reviewed = match webhook {
            Webhook::Validate => validating::validate(self, request),
            Webhook::Mutate => mutating::mutate(self, request),
        };
        reviewed.entry.emit();
        reviewed
    }

    /// What the index knows of a namespace, and its mode: the `helm-guard.io/mode` label, else
    /// the global default.
    fn namespace(&self, namespace: &str) -> (crate::cluster::NamespaceInfo, crate::policy::Mode) {
        let info = self.index.namespace(namespace);
        let mode = info.mode.unwrap_or(self.config.default_mode);
        (info, mode)
    }

    /// A metadata-only index knows a revision's status from its label; where the label is missing
    /// or not a status, one GET of the payload tells it. Helm always writes the label, so this is
    /// the exception (a hand edit), not the rule.
    fn fill_missing_statuses(&self, key: &ReleaseKey) {
        let Some(fetcher) = &self.fetcher else { return };
        for facts in self.index.history(key) {
            if facts.payload == PayloadStatus::NotLoaded && facts.label.is_none() {
                let id = RecordId { key: key.clone(), revision: facts.revision };
                if let Some(fetched) = fetcher.fetch(&id) {
                    self.index.upsert(&id, fetched);
                }
            }
        }
    }
}
