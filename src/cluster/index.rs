//! The release index: per release, the revisions Helm sees, minus deletions the guard approved.
//!
//! Memory-lean on purpose: no payloads, only [`RevisionFacts`] (a few dozen bytes) per revision.
//! Every verdict that may change the index runs inside [`ReleaseIndex::decide`], under one lock,
//! so two concurrent deletions of one release are decided one after the other and the second
//! sees the first.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::policy::Mode;
use crate::release::history::{Classification, RevisionFacts, classify};
use crate::release::{RecordId, ReleaseKey};

/// Where the index's contents come from, which decides what an approved write does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A dump loaded once: nothing else will update it, so approved writes are applied at once.
    Snapshot,
    /// Watchers on the cluster: they are the truth. An approved deletion is hidden until the watch
    /// confirms it, or until `tombstone_ttl` passes (the delete may have failed further down).
    Live { tombstone_ttl: Duration },
}

/// What a namespace contributes to verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// The `helm-guard.io/mode` label, when it names a mode.
    pub mode: Option<Mode>,
    /// The namespace has a deletionTimestamp (or phase Terminating).
    pub terminating: bool,
}

impl NamespaceInfo {
    /// From a Namespace's metadata: its mode label and whether it is being deleted.
    pub fn from_meta(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> NamespaceInfo {
        NamespaceInfo {
            mode: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::policy::MODE_LABEL))
                .and_then(|m| m.parse().ok()),
            terminating: meta.deletion_timestamp.is_some(),
        }
    }
}

/// A change a verdict makes to the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexChange {
    /// An approved CREATE or UPDATE.
    Upsert(RevisionFacts),
    /// An approved DELETE of this revision.
    Delete(u32),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    facts: RevisionFacts,
    /// Set when the guard approved this revision's deletion and the watch has not confirmed it.
    hidden_until: Option<Instant>,
}

impl Entry {
    fn visible(&self, now: Instant) -> bool {
        self.hidden_until.is_none_or(|until| until <= now)
    }
}

#[derive(Debug, Default)]
struct IndexState {
    releases: HashMap<ReleaseKey, BTreeMap<u32, Entry>>,
    namespaces: HashMap<String, NamespaceInfo>,
}

impl IndexState {
    fn visible(&self, key: &ReleaseKey, now: Instant) -> Vec<RevisionFacts> {
        self.releases
            .get(key)
            .map(|revisions| revisions.values().filter(|e| e.visible(now)).map(|e| e.facts).collect())
            .unwrap_or_default()
    }

    fn remove(&mut self, id: &RecordId) {
        if let Some(revisions) = self.releases.get_mut(&id.key) {
            revisions.remove(&id.revision);
            if revisions.is_empty() {
                self.releases.remove(&id.key);
            }
        }
    }
}

#[derive(Debug)]
pub struct ReleaseIndex {
    source: SourceKind,
    state: Mutex<IndexState>,
    ready: AtomicBool,
    last_sync: Mutex<Option<Instant>>,
}

impl ReleaseIndex {
    pub fn new(source: SourceKind) -> ReleaseIndex {
        ReleaseIndex {
            source,
            state: Mutex::default(),
            ready: AtomicBool::new(false),
            last_sync: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, IndexState> {
        // A panic while holding the lock cannot leave the maps half-written in a way that matters
        // more than refusing all further verdicts would.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ready once the source has delivered a complete view (the snapshot loaded, every initial
    /// list done).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
        if ready {
            self.mark_synced();
        }
    }

    /// The source delivered a complete list or an event: the index is current as of now.
    pub fn mark_synced(&self) {
        *self.last_sync.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Time since the source was last heard from; `None` before the first sync.
    pub fn since_sync(&self) -> Option<Duration> {
        self.last_sync.lock().unwrap_or_else(|p| p.into_inner()).map(|at| at.elapsed())
    }

    /// Adds or replaces one revision (a watch event or a snapshot record). A pending approved
    /// deletion stays pending: the object still existing is no news until the watch deletes it.
    pub fn upsert(&self, id: &RecordId, facts: RevisionFacts) {
        let mut state = self.lock();
        let revisions = state.releases.entry(id.key.clone()).or_default();
        let hidden_until = revisions.get(&id.revision).and_then(|e| e.hidden_until);
        revisions.insert(id.revision, Entry { facts, hidden_until });
    }

    /// Removes one revision (the watch saw it deleted).
    pub fn remove(&self, id: &RecordId) {
        self.lock().remove(id);
    }

    /// Replaces every record of the given drivers at once (a completed re-list or a snapshot load).
    /// Approved deletions still waiting for confirmation stay hidden.
    pub fn replace_records(
        &self,
        drivers: &[crate::release::Driver],
        records: impl IntoIterator<Item = (RecordId, RevisionFacts)>,
    ) {
        let mut fresh: HashMap<ReleaseKey, BTreeMap<u32, Entry>> = HashMap::new();
        for (id, facts) in records {
            fresh.entry(id.key).or_default().insert(id.revision, Entry { facts, hidden_until: None });
        }
        let now = Instant::now();
        let mut state = self.lock();
        for (key, revisions) in fresh.iter_mut() {
            if let Some(old) = state.releases.get(key) {
                for (revision, entry) in revisions.iter_mut() {
                    entry.hidden_until =
                        old.get(revision).and_then(|e| e.hidden_until).filter(|until| *until > now);
                }
            }
        }
        state.releases.retain(|key, _| !drivers.contains(&key.driver));
        state.releases.extend(fresh);
    }

    pub fn set_namespace(&self, name: &str, info: NamespaceInfo) {
        self.lock().namespaces.insert(name.to_owned(), info);
    }

    pub fn remove_namespace(&self, name: &str) {
        self.lock().namespaces.remove(name);
    }

    pub fn replace_namespaces(&self, namespaces: impl IntoIterator<Item = (String, NamespaceInfo)>) {
        self.lock().namespaces = namespaces.into_iter().collect();
    }

    /// What is known of a namespace; an unknown one has no mode label and is not terminating.
    pub fn namespace(&self, name: &str) -> NamespaceInfo {
        self.lock().namespaces.get(name).cloned().unwrap_or_default()
    }

    /// The revisions of a release as verdicts see them.
    pub fn history(&self, key: &ReleaseKey) -> Vec<RevisionFacts> {
        self.lock().visible(key, Instant::now())
    }

    /// Runs a verdict on a release's history and applies the change it approves, atomically.
    pub fn decide<R>(
        &self,
        key: &ReleaseKey,
        verdict: impl FnOnce(&[RevisionFacts]) -> (R, Option<IndexChange>),
    ) -> R {
        let now = Instant::now();
        let mut state = self.lock();
        let (result, change) = verdict(&state.visible(key, now));
        match (change, self.source) {
            (None, _) => {}
            (Some(IndexChange::Upsert(facts)), SourceKind::Snapshot) => {
                let revisions = state.releases.entry(key.clone()).or_default();
                revisions.insert(facts.revision, Entry { facts, hidden_until: None });
            }
            // Live: only the watch writes records; a write that a later admission step refuses
            // must not leave a phantom revision behind.
            (Some(IndexChange::Upsert(_)), SourceKind::Live { .. }) => {}
            (Some(IndexChange::Delete(revision)), SourceKind::Snapshot) => {
                state.remove(&RecordId { key: key.clone(), revision });
            }
            (Some(IndexChange::Delete(revision)), SourceKind::Live { tombstone_ttl }) => {
                if let Some(entry) = state.releases.get_mut(key).and_then(|r| r.get_mut(&revision)) {
                    entry.hidden_until = Some(now + tombstone_ttl);
                }
            }
        }
        result
    }

    /// Applies one approved change outside a verdict (CREATE and UPDATE need no history).
    pub fn apply(&self, key: &ReleaseKey, change: IndexChange) {
        self.decide(key, |_| ((), Some(change)));
    }

    /// Every release with its classification (for metrics). The histories are copied under the
    /// lock and classified after it is released, so a scrape does not hold up verdicts.
    pub fn classify_all(&self, now_unix: i64, stuck_after_secs: i64) -> Vec<(ReleaseKey, Classification)> {
        let now = Instant::now();
        let histories: Vec<(ReleaseKey, Vec<RevisionFacts>)> = {
            let state = self.lock();
            state.releases.keys().map(|key| (key.clone(), state.visible(key, now))).collect()
        };
        histories
            .into_iter()
            .map(|(key, facts)| {
                let classification = classify(&facts, now_unix, stuck_after_secs);
                (key, classification)
            })
            .collect()
    }

    /// How many revisions the index holds (hidden ones included).
    pub fn revision_count(&self) -> usize {
        self.lock().releases.values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::history::PayloadStatus;
    use crate::release::{Driver, Status};

    fn key() -> ReleaseKey {
        ReleaseKey { driver: Driver::Secret, namespace: "demo".into(), release: "web".into() }
    }

    fn facts(revision: u32, status: Status) -> RevisionFacts {
        RevisionFacts { revision, payload: PayloadStatus::NotLoaded, label: Some(status), changed_at: None }
    }

    fn index(source: SourceKind) -> ReleaseIndex {
        let index = ReleaseIndex::new(source);
        for (revision, status) in [(1, Status::Superseded), (2, Status::Deployed)] {
            index.upsert(&RecordId { key: key(), revision }, facts(revision, status));
        }
        index
    }

    #[test]
    fn a_snapshot_applies_approved_changes_at_once() {
        let index = index(SourceKind::Snapshot);
        index.decide(&key(), |_| ((), Some(IndexChange::Delete(1))));
        index.decide(&key(), |_| ((), Some(IndexChange::Upsert(facts(3, Status::PendingUpgrade)))));
        let revisions: Vec<u32> = index.history(&key()).iter().map(|f| f.revision).collect();
        assert_eq!(revisions, vec![2, 3]);
    }

    #[test]
    fn live_hides_an_approved_deletion_until_confirmed_or_expired() {
        let waiting = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        waiting.decide(&key(), |_| ((), Some(IndexChange::Delete(2))));
        assert_eq!(waiting.history(&key()).len(), 1, "hidden from the next verdict");
        waiting.upsert(&RecordId { key: key(), revision: 2 }, facts(2, Status::Deployed));
        assert_eq!(waiting.history(&key()).len(), 1, "a watch update does not unhide it");
        waiting.remove(&RecordId { key: key(), revision: 2 });
        assert_eq!(waiting.revision_count(), 1, "the watch confirmed it");

        let expired = index(SourceKind::Live { tombstone_ttl: Duration::ZERO });
        expired.decide(&key(), |_| ((), Some(IndexChange::Delete(2))));
        assert_eq!(expired.history(&key()).len(), 2, "restored once the timeout passed");

        let live = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        live.decide(&key(), |_| ((), Some(IndexChange::Upsert(facts(3, Status::Deployed)))));
        assert_eq!(live.history(&key()).len(), 2, "live writes come from the watch only");
    }

    #[test]
    fn a_relist_keeps_pending_deletions_hidden_and_drops_vanished_releases() {
        let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        index.decide(&key(), |_| ((), Some(IndexChange::Delete(2))));
        let other = ReleaseKey { release: "other".into(), ..key() };
        index.upsert(&RecordId { key: other.clone(), revision: 1 }, facts(1, Status::Deployed));
        index.replace_records(
            &[Driver::Secret],
            [1, 2].map(|revision| (RecordId { key: key(), revision }, facts(revision, Status::Deployed))),
        );
        assert_eq!(index.history(&key()).len(), 1);
        assert!(index.history(&other).is_empty());
    }
}
