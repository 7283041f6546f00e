//! The release index: per release, the revisions Helm sees, minus deletions the guard approved.
//!
//! Memory-lean on purpose: no payloads, only [`RevisionFacts`] (a few dozen bytes), the object
//! name, uid and resourceVersion per record. Records are kept by object, as Helm lists them: two
//! objects may hold one revision.
//!
//! A record is its object, not its name: Helm reuses names (`sh.helm.release.v1.web.v1` of a
//! release installed again after an uninstall), so whatever the index remembers of an object (a
//! pending approved deletion, a payload read) holds only while the object of that name has the
//! same uid. Where a uid is unknown (a dump without one, a claim from an older guard) the name
//! stands in.
//! Every verdict that may change the index runs inside [`ReleaseIndex::decide`], under one lock,
//! so two concurrent deletions of one release are decided one after the other and the second
//! sees the first; it reads the release through a [`ReleaseView`] (`view.rs`), which also tells
//! whether the release is one state its watch brought (`watched.rs`).

//!
//! The index holds records and tombstones alone. Beside it, and reached through it because every
//! verdict reads them too, are components with their own locks: the [`Namespaces`], the
//! [`HelmCharts`], the watches' [`WatchProgress`] and the [`ChangedNamespaces`] the reports
//! rewrite. What is computed from the records is computed elsewhere, through
//! [`ReleaseIndex::each_release`]: the census ([`super::census`]) and the read-ahead's queue
//! ([`super::fetch`]).

mod entry;
mod listing;
mod moved;
mod view;
mod watched;

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use entry::Entry;
pub(crate) use view::{Records, ReleaseView};

use super::changes::ChangedNamespaces;
use super::fence::WatchProgress;
use super::helmcharts::HelmCharts;
use super::namespaces::Namespaces;
use crate::release::ReleaseKey;
use crate::release::history::{PayloadStatus, RevisionFacts};

/// Where the index's contents come from, which decides what an approved write does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A dump loaded once: nothing else will update it, so approved writes are applied at once.
    Snapshot,
    /// Watchers on the cluster: they are the truth. An approved deletion is hidden until the watch
    /// confirms it, or until `tombstone_ttl` passes (the delete may have failed further down).
    Live {
        /// How long an approved deletion stays hidden without the watch confirming it.
        tombstone_ttl: Duration,
    },
}

/// A change a verdict makes to the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexChange {
    /// An approved CREATE or UPDATE of this object.
    Upsert {
        /// The object's name.
        object: String,
        /// What the record says.
        facts: RevisionFacts,
    },
    /// An approved DELETE of this object.
    Delete {
        /// The object's name.
        object: String,
        /// The object's uid, when the request carried one.
        uid: Option<String>,
    },
}

/// A release's records, by object name (two objects may hold one revision).
type ReleaseRecords = BTreeMap<Box<str>, Entry>;

#[derive(Debug, Default)]
struct IndexState {
    releases: HashMap<ReleaseKey, ReleaseRecords>,
    /// How far the watch brought each driver's records, and what reads moved ahead of it.
    watched: watched::Watched,
    /// The records indexed under a release their name does not say (`moved.rs`).
    named_apart: HashMap<moved::ObjectId, Box<str>>,
}

impl IndexState {
    /// The entry of the object named `object` with `uid`, if the index holds that object.
    fn entry(&mut self, key: &ReleaseKey, object: &str, uid: Option<&str>) -> Option<&mut Entry> {
        self.releases.get_mut(key)?.get_mut(object).filter(|entry| entry.is(uid))
    }

    /// Whether `object` (of `uid`) is the record of `key` the guard last saw deployed: the newest
    /// record it has seen `deployed`, among those stored whose payload Helm can read (a record
    /// that does not decode is let in with any labels: its `deployed` label must not make another
    /// record's deletion look like it leaves the last good one). `None` when it has seen none of
    /// them deployed (it started after the release lost its deployed revision).
    fn is_last_deployed(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) -> Option<bool> {
        let (name, entry) = self
            .releases
            .get(key)?
            .iter()
            .filter(|(_, entry)| entry.deployed_once && entry.facts.payload != PayloadStatus::Undecodable)
            .max_by_key(|(_, entry)| entry.facts.revision)?;
        Some(**name == *object && entry.is(uid))
    }

    fn visible(&self, key: &ReleaseKey, except: Option<&str>, now: Instant) -> Vec<RevisionFacts> {
        self.others(key, except).filter(|entry| entry.visible(now)).map(|entry| entry.facts).collect()
    }

    /// Every record of the release but `except`, hidden ones included.
    fn others<'a>(
        &'a self,
        key: &ReleaseKey,
        except: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let records = self.releases.get(key).into_iter().flatten();
        records.filter(move |(object, _)| Some(&***object) != except).map(|(_, entry)| entry)
    }

    fn remove(&mut self, key: &ReleaseKey, object: &str, uid: Option<&str>) {
        if let Some(records) = self.releases.get_mut(key) {
            if records.get(object).is_some_and(|entry| entry.is(uid)) {
                records.remove(object);
            }
            if records.is_empty() {
                self.releases.remove(key);
            }
        }
    }
}

/// One record as a source delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedRecord {
    /// The release.
    pub key: ReleaseKey,
    /// The object's name.
    pub object: String,
    /// The object's uid, when the source has one.
    pub uid: Option<String>,
    /// What the record says.
    pub facts: RevisionFacts,
    /// The object's resourceVersion, when the source has one.
    pub resource_version: Option<String>,
}

/// Every release in the cluster, by the facts of its records; what verdicts decide against.
/// One writer (the watch, or a snapshot), many readers; [`ReleaseIndex::decide`] the one place
/// a verdict both reads and changes it.
#[derive(Debug)]
pub struct ReleaseIndex {
    source: SourceKind,
    state: Mutex<IndexState>,
    ready: AtomicBool,
    last_sync: Mutex<Option<Instant>>,
    changes: Arc<ChangedNamespaces>,
    namespaces: Namespaces,
    charts: HelmCharts,
    progress: WatchProgress,
}

impl ReleaseIndex {
    /// An empty index, fed by `source`.
    pub fn new(source: SourceKind) -> ReleaseIndex {
        let changes = Arc::new(ChangedNamespaces::default());
        ReleaseIndex {
            source,
            state: Mutex::default(),
            ready: AtomicBool::new(false),
            last_sync: Mutex::default(),
            namespaces: Namespaces::new(changes.clone()),
            changes,
            charts: HelmCharts::default(),
            progress: WatchProgress::default(),
        }
    }

    /// The namespaces, as their watch (or the snapshot) delivers them.
    pub(crate) fn namespaces(&self) -> &Namespaces {
        &self.namespaces
    }

    /// The K3s/RKE2 HelmCharts (live source with the CRD installed; else empty).
    pub(crate) fn charts(&self) -> &HelmCharts {
        &self.charts
    }

    /// How far the record watches have been applied (live source; see [`super::fence`]).
    pub(crate) fn progress(&self) -> &WatchProgress {
        &self.progress
    }

    /// The namespaces whose records or labels changed, for the PolicyReport writer.
    pub(crate) fn changes(&self) -> &ChangedNamespaces {
        &self.changes
    }

    /// Shows `visit` every release with its records (hidden ones too: [`view::HeldRecord::visible`]),
    /// under the lock, until it breaks: what the census, the reports and the read-ahead compute
    /// from. `visit` must be quick: verdicts wait for it.
    pub(crate) fn each_release(&self, mut visit: impl FnMut(&ReleaseKey, Records<'_>) -> ControlFlow<()>) {
        let now = Instant::now();
        let state = self.lock();
        for (key, records) in &state.releases {
            if visit(key, Records { records: records.iter(), now }).is_break() {
                return;
            }
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

    /// Says whether every source has delivered its first complete list.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
        if ready {
            self.mark_synced();
        }
    }

    /// The source delivered a complete list or an event: the index is current as of now.
    pub(crate) fn mark_synced(&self) {
        *self.last_sync.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Time since the source was last heard from; `None` before the first sync.
    pub(crate) fn since_sync(&self) -> Option<Duration> {
        self.last_sync.lock().unwrap_or_else(|p| p.into_inner()).map(|at| at.elapsed())
    }

    /// Adds or replaces one record (a watch event or a snapshot record). A pending approved
    /// deletion of the same object stays pending: the object still existing is no news until
    /// the watch deletes it. A new object under a remembered name starts afresh.
    pub fn upsert(&self, record: IndexedRecord) {
        let mut entry = Entry::new(record.facts, record.uid, record.resource_version);
        let mut state = self.lock();
        self.changes.touch(&record.key.namespace);
        let (driver, object) = (record.key.driver, record.object.as_str());
        state.moved(driver, &record.key.namespace, object, Some(&record.key));
        state.indexed_under(&record.key, object);
        let records = state.releases.entry(record.key).or_default();
        entry.keep_from(records.get(record.object.as_str()));
        records.insert(record.object.into(), entry);
    }

    /// The watch brought `object` of `driver` in `namespace` as no record (its labels changed):
    /// it leaves whatever release it was indexed under.
    pub(crate) fn not_a_record(&self, driver: crate::release::Driver, namespace: &str, object: &str) {
        let mut state = self.lock();
        if state.moved(driver, namespace, object, None) {
            self.changes.touch(namespace);
        }
    }

    /// Removes one record the watch saw deleted: only the object with `uid`, not a later one of
    /// its name.
    pub(crate) fn remove(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) {
        self.changes.touch(&key.namespace);
        let mut state = self.lock();
        state.remove(key, object, uid);
        state.watched.deleted(key, object);
    }

    /// Removes a record a read found gone, ahead of the watch, if the index still holds it as it
    /// was when the read began (`seen`, its resourceVersion then): not a later object of its name
    /// the watch brought meanwhile.
    pub(crate) fn gone(&self, key: &ReleaseKey, object: &str, seen: Option<&str>) {
        self.changes.touch(&key.namespace);
        let mut state = self.lock();
        let held = state.releases.get(key).and_then(|records| records.get(object));
        let Some(entry) = held.filter(|entry| entry.resource_version.as_deref() == seen) else { return };
        let uid = entry.uid.clone();
        state.remove(key, object, uid.as_deref());
        state.watched.gone(key, object, uid.as_deref());
    }

    /// Replaces every record of the given drivers at once (a completed re-list or a snapshot load),
    /// a list consistent as of `through`. Approved deletions still waiting for confirmation stay
    /// hidden; payload facts read at an unchanged resourceVersion stay.
    pub(crate) fn replace_records(
        &self,
        drivers: &[crate::release::Driver],
        records: impl IntoIterator<Item = IndexedRecord>,
        through: u64,
    ) {
        let mut fresh: HashMap<ReleaseKey, ReleaseRecords> = HashMap::new();
        for record in records {
            let entry = Entry::new(record.facts, record.uid, record.resource_version);
            fresh.entry(record.key).or_default().insert(record.object.into(), entry);
        }
        let mut state = self.lock();
        for (key, records) in fresh.iter_mut() {
            let Some(old) = state.releases.get(key) else { continue };
            for (object, entry) in records.iter_mut() {
                entry.keep_from(old.get(object));
            }
        }
        self.changes.touch_each(
            (state.releases.keys().chain(fresh.keys()))
                .filter(|key| drivers.contains(&key.driver))
                .map(|key| key.namespace.as_str()),
        );
        state.releases.retain(|key, _| !drivers.contains(&key.driver));
        state.named_apart.retain(|(driver, _, _), _| !drivers.contains(driver));
        for (key, records) in &fresh {
            records.keys().for_each(|object| state.indexed_under(key, object));
        }
        state.releases.extend(fresh);
        state.watched.relisted(drivers, through);
    }

    /// The watch of `driver` applied an event at `version` (a fence's too: records and fences
    /// are one stream): the index's own mark, under its lock, then the [`WatchProgress`] the
    /// fence rounds wait on. The one place either advances (a relist sets the index's).
    pub(crate) fn applied(&self, driver: crate::release::Driver, version: u64) {
        self.lock().watched.applied(driver, version);
        self.progress.applied(driver, version);
    }

    /// How many (re-)lists of `driver` were swapped in: a confirmation holds only within one
    /// (a relist served from a cache that lags may take the index back).
    pub(crate) fn relists(&self, driver: crate::release::Driver) -> u64 {
        self.lock().watched.relists(driver)
    }

    /// The records of a release as verdicts see them.
    pub fn history(&self, key: &ReleaseKey) -> Vec<RevisionFacts> {
        self.lock().visible(key, None, Instant::now())
    }

    /// The records of a release (but `except`) whose payload has not been read at their current
    /// resourceVersion: (object name, resourceVersion). Hidden ones too: a verdict reads them as
    /// they may still be stored ([`ReleaseView::with_hidden`]).
    pub fn unverified(&self, key: &ReleaseKey, except: Option<&str>) -> Vec<(String, Option<String>)> {
        let state = self.lock();
        let Some(records) = state.releases.get(key) else { return Vec::new() };
        records
            .iter()
            .filter(|(object, entry)| {
                entry.facts.payload == PayloadStatus::NotLoaded && Some(&***object) != except
            })
            .map(|(object, entry)| (object.to_string(), entry.resource_version.as_deref().map(str::to_owned)))
            .collect()
    }

    /// Whether the index holds the object `object` (with `uid`) of release `key`, hidden or not:
    /// false once the watch has brought its deletion.
    pub(crate) fn holds(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) -> bool {
        self.lock()
            .releases
            .get(key)
            .and_then(|records| records.get(object))
            .is_some_and(|entry| entry.is(uid))
    }

    /// Records what a record's payload says, as read at `read.resource_version`. `seen`: the
    /// resourceVersion the index had when the read began. The read is taken when the index has
    /// not moved since (the watch may lag the read: the read is newer, and may even be of a new
    /// object under the name, whose uid it then takes) or has moved to exactly the version read;
    /// otherwise the watch brought something newer than the read, which is dropped.
    pub(crate) fn verified(
        &self,
        key: &ReleaseKey,
        object: &str,
        seen: Option<&str>,
        read: super::ReadRecord,
    ) {
        let mut state = self.lock();
        self.changes.touch(&key.namespace);
        if let Some(entry) = state.releases.get_mut(key).and_then(|records| records.get_mut(object)) {
            let now = entry.resource_version.as_deref();
            if now == seen || now == read.resource_version.as_deref() {
                if !entry.is(read.uid.as_deref()) {
                    // A new object under the name, not yet seen by the watch: nothing of the
                    // old one's applies to it.
                    entry.hidden_until = None;
                    entry.deployed_once = false;
                }
                entry.facts = read.facts;
                entry.deployed_once |= read.facts.status() == Some(crate::release::Status::Deployed);
                // Kept where unchanged (the usual case): 100,000 reads ahead would otherwise
                // free and allocate two strings each, scattering the index over the heap.
                if entry.resource_version.as_deref() != read.resource_version.as_deref() {
                    entry.resource_version = read.resource_version.map(Into::into);
                }
                if read.uid.is_some() && entry.uid.as_deref() != read.uid.as_deref() {
                    entry.uid = read.uid.map(Into::into);
                }
            }
        }
    }

    /// Whether `object` (of `uid`) is the record of `key` the guard last saw deployed
    /// ([`IndexState::is_last_deployed`]; verdicts read it through their [`ReleaseView`]).
    #[cfg(test)]
    pub(crate) fn is_last_deployed(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) -> Option<bool> {
        self.lock().is_last_deployed(key, object, uid)
    }

    /// Runs a verdict on a release's records (all but `except`, the object the request is about)
    /// and applies the change it approves, atomically.
    pub(crate) fn decide<R>(
        &self,
        key: &ReleaseKey,
        except: Option<&str>,
        verdict: impl FnOnce(&ReleaseView<'_>) -> (R, Option<IndexChange>),
    ) -> R {
        let now = Instant::now();
        let mut state = self.lock();
        let visible = state.visible(key, except, now);
        let (result, change) = verdict(&ReleaseView { visible, state: &state, key, except });
        if change.is_some() {
            self.changes.touch(&key.namespace);
        }
        match (change, self.source) {
            (None, _) => {}
            (Some(IndexChange::Upsert { object, facts }), SourceKind::Snapshot) => {
                let records = state.releases.entry(key.clone()).or_default();
                let mut entry = Entry::new(facts, None, None);
                entry.keep_from(records.get(object.as_str()));
                records.insert(object.into(), entry);
            }
            // Live: only the watch writes records; a write that a later admission step refuses
            // must not leave a phantom revision behind.
            (Some(IndexChange::Upsert { .. }), SourceKind::Live { .. }) => {}
            (Some(IndexChange::Delete { object, uid }), SourceKind::Snapshot) => {
                state.remove(key, &object, uid.as_deref());
            }
            (Some(IndexChange::Delete { object, uid }), SourceKind::Live { tombstone_ttl }) => {
                if let Some(entry) = state.entry(key, &object, uid.as_deref()) {
                    entry.hidden_until = Some(now + tombstone_ttl);
                }
            }
        }
        result
    }

    /// Hides a record until `until`, as an approved deletion does: another replica approved it
    /// (its claim, see [`super::coordination`]). A record this index does not hold, or a later
    /// object of that name, is left alone; a longer hiding stays.
    pub(crate) fn hide(&self, key: &ReleaseKey, object: &str, uid: Option<&str>, until: Instant) {
        let mut state = self.lock();
        self.changes.touch(&key.namespace);
        if let Some(entry) = state.entry(key, object, uid) {
            entry.hidden_until = Some(entry.hidden_until.map_or(until, |before| before.max(until)));
        }
    }

    /// Shows a record hidden by an approval that did not stand (its claim was not written).
    pub(crate) fn unhide(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) {
        let mut state = self.lock();
        self.changes.touch(&key.namespace);
        if let Some(entry) = state.entry(key, object, uid) {
            entry.hidden_until = None;
        }
    }

    /// Applies one approved change outside a verdict (CREATE and UPDATE need no history).
    pub(crate) fn apply(&self, key: &ReleaseKey, change: IndexChange) {
        self.decide(key, None, |_| ((), Some(change)));
    }

    /// How many records the index holds (hidden ones included).
    pub(crate) fn revision_count(&self) -> usize {
        self.lock().releases.values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests;
