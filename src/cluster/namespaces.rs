//! The namespaces as verdicts see them: each one's labels (mode, protection, opt-outs, limits)
//! and whether it is being deleted. Fed by the namespace watch (or a snapshot); read by every
//! verdict and by the reports.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::changes::{ChangedNamespaces, NAMESPACES_CHANGED};
use crate::policy::Mode;

/// What a namespace contributes to verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// The `helm-guard.io/mode` label, when it names a mode.
    pub mode: Option<Mode>,
    /// The namespace has a deletionTimestamp (or phase Terminating).
    pub terminating: bool,
    /// The `helm-guard.io/protect=true` label: its HelmCharts are never reinstalled.
    pub protect: bool,
    /// The `helm-guard.io/ignore=true` label (the webhooks do not see the namespace).
    pub ignored: bool,
    /// When the opt-out labels were last set, in Unix seconds.
    pub labels_set_at: Option<i64>,
    /// The `helm-guard.io/max-revisions-per-hour` label: a release here gets no more revisions
    /// an hour (POLICY.md C8); 0: no cap here, whatever the global flag says.
    pub max_revisions_per_hour: Option<u32>,
    /// The `helm-guard.io/owner-lock` label, `true` or `false`: a release here is written by its
    /// owner alone (POLICY.md O1); without it, `--owner-lock` decides.
    pub owner_lock: Option<bool>,
}

impl NamespaceInfo {
    /// From a Namespace's metadata: its mode label and whether it is being deleted.
    pub(crate) fn from_meta(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> NamespaceInfo {
        NamespaceInfo {
            mode: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::policy::MODE_LABEL))
                .and_then(|m| m.parse().ok()),
            terminating: meta.deletion_timestamp.is_some(),
            protect: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::policy::pod::PROTECT_LABEL))
                .map(String::as_str)
                == Some("true"),
            ignored: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::policy::namespace::IGNORE_LABEL))
                .map(String::as_str)
                == Some("true"),
            labels_set_at: crate::policy::namespace::labels_set_at(meta),
            max_revisions_per_hour: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::policy::create::MAX_REVISIONS_LABEL))
                .and_then(|n| n.parse().ok()),
            owner_lock: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::policy::owner::OWNER_LOCK_LABEL))
                .and_then(|v| v.parse().ok()),
        }
    }
}

/// Every namespace the guard knows, by name.
#[derive(Debug, Default)]
pub(crate) struct Namespaces {
    known: RwLock<HashMap<String, NamespaceInfo>>,
    changes: Arc<ChangedNamespaces>,
}

impl Namespaces {
    /// No namespace yet; a change of labels is told to `changes`.
    pub(crate) fn new(changes: Arc<ChangedNamespaces>) -> Namespaces {
        Namespaces { known: RwLock::default(), changes }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, NamespaceInfo>> {
        self.known.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, NamespaceInfo>> {
        self.known.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds or changes a namespace.
    pub(crate) fn set(&self, name: &str, info: NamespaceInfo) {
        let mut known = self.write();
        if known.get(name) != Some(&info) {
            self.changes.touch(NAMESPACES_CHANGED);
        }
        known.insert(name.to_owned(), info);
    }

    /// Forgets a namespace.
    pub(crate) fn remove(&self, name: &str) {
        self.changes.touch(NAMESPACES_CHANGED);
        self.write().remove(name);
    }

    /// Replaces every namespace at once (a completed list).
    pub(crate) fn replace(&self, namespaces: impl IntoIterator<Item = (String, NamespaceInfo)>) {
        self.changes.touch(NAMESPACES_CHANGED);
        *self.write() = namespaces.into_iter().collect();
    }

    /// What is known of a namespace; an unknown one has no mode label and is not terminating.
    pub(crate) fn get(&self, name: &str) -> NamespaceInfo {
        self.read().get(name).cloned().unwrap_or_default()
    }

    /// The namespaces whose labels leave them less protected than the global `default` mode, by
    /// name.
    pub(crate) fn opted_out(&self, default: Mode) -> Vec<crate::policy::namespace::OptedOut> {
        let mut opted: Vec<_> = self
            .read()
            .iter()
            .filter_map(|(name, info)| {
                let protection = crate::policy::namespace::Protection {
                    ignored: info.ignored,
                    mode: info.mode.unwrap_or(default),
                };
                crate::policy::namespace::OptedOut::when_weaker(
                    name.clone(),
                    protection,
                    default,
                    info.labels_set_at,
                )
            })
            .collect();
        opted.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        opted
    }
}
