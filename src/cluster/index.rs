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
//! sees the first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::policy::Mode;
use crate::release::history::{PayloadStatus, RevisionFacts, classify};
use crate::release::record::same_object;
use crate::release::{Driver, ReleaseKey};

/// What [`ReleaseIndex::take_touched`] says when a namespace itself (its labels) changed: no
/// namespace is named so.
pub(crate) const NAMESPACES_TOUCHED: &str = "";

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
    /// an hour (POLICY.md C8).
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

#[derive(Debug, Clone)]
struct Entry {
    facts: RevisionFacts,
    /// The object's uid, when the source has it: what tells it from a later object of its name.
    uid: Option<Box<str>>,
    /// The object's resourceVersion (live source): what its verified payload facts belong to.
    resource_version: Option<Box<str>>,
    /// Set when the guard approved this object's deletion and the watch has not confirmed it.
    hidden_until: Option<Instant>,
    /// Whether the guard has seen this object `deployed`: the release's last good revision is
    /// the newest such record, whatever it was moved to since (POLICY.md, "The recycle bin").
    deployed_once: bool,
}

impl Entry {
    fn new(facts: RevisionFacts, uid: Option<String>, resource_version: Option<String>) -> Entry {
        Entry {
            facts,
            uid: uid.map(Into::into),
            resource_version: resource_version.map(Into::into),
            hidden_until: None,
            deployed_once: facts.status() == Some(crate::release::Status::Deployed),
        }
    }

    /// A new view of an object (a watch event, a list) keeps what is known of the same object
    /// from `before`: a payload read at this resourceVersion, an approved deletion the watch has
    /// not confirmed, its uid. A new object under the name keeps nothing.
    fn keep_from(&mut self, before: Option<&Entry>) {
        if let Some(before) = before.filter(|before| before.is(self.uid.as_deref())) {
            self.facts = before.facts_after(self.facts, self.resource_version.as_deref());
            self.hidden_until = before.hidden_until;
            self.deployed_once |= before.deployed_once;
            if self.uid.is_none() {
                self.uid.clone_from(&before.uid);
            }
        }
    }

    /// Whether this entry is the object with `uid` (see [`same_object`]).
    fn is(&self, uid: Option<&str>) -> bool {
        same_object(self.uid.as_deref(), uid)
    }

    fn visible(&self, now: Instant) -> bool {
        self.hidden_until.is_none_or(|until| until <= now)
    }

    /// The facts of a new view of this object: the payload read at this resourceVersion stays (a
    /// metadata event does not carry it); anything newer must be read again.
    fn facts_after(&self, facts: RevisionFacts, resource_version: Option<&str>) -> RevisionFacts {
        let same = resource_version.is_some() && self.resource_version.as_deref() == resource_version;
        if same && facts.payload == PayloadStatus::NotLoaded && self.facts.payload != PayloadStatus::NotLoaded
        {
            self.facts
        } else {
            facts
        }
    }
}

/// The index's releases counted by state, stuck revisions and anomalies; records held (hidden
/// ones included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Releases by state.
    pub states: BTreeMap<crate::release::ReleaseState, usize>,
    /// Releases whose latest revision is stuck pending, by why.
    pub stuck: BTreeMap<crate::release::writer::StuckBecause, usize>,
    /// Releases by anomaly.
    pub anomalies: BTreeMap<crate::release::history::Anomaly, usize>,
    /// Records held.
    pub revisions: usize,
}

/// A release's records, by object name (two objects may hold one revision).
type ReleaseRecords = BTreeMap<Box<str>, Entry>;

#[derive(Debug, Default)]
struct IndexState {
    releases: HashMap<ReleaseKey, ReleaseRecords>,
    namespaces: HashMap<String, NamespaceInfo>,
    /// The namespaces whose records changed since the last [`ReleaseIndex::take_touched`], when
    /// someone asked to know ([`ReleaseIndex::track_touched`]; else nothing is kept).
    touched: Option<BTreeSet<String>>,
}

impl IndexState {
    /// Notes that a record of `namespace` changed, for whoever tracks changes.
    fn touch(&mut self, namespace: &str) {
        if let Some(touched) = &mut self.touched
            && !touched.contains(namespace)
        {
            touched.insert(namespace.to_owned());
        }
    }

    /// The entry of the object named `object` with `uid`, if the index holds that object.
    fn entry(&mut self, key: &ReleaseKey, object: &str, uid: Option<&str>) -> Option<&mut Entry> {
        self.releases.get_mut(key)?.get_mut(object).filter(|entry| entry.is(uid))
    }

    fn visible(&self, key: &ReleaseKey, except: Option<&str>, now: Instant) -> Vec<RevisionFacts> {
        self.releases
            .get(key)
            .map(|records| {
                records
                    .iter()
                    .filter(|(object, entry)| entry.visible(now) && Some(&***object) != except)
                    .map(|(_, entry)| entry.facts)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn remove(&mut self, key: &ReleaseKey, object: &str, uid: Option<&str>) {
        self.touch(&key.namespace);
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

#[derive(Debug)]
/// Every release in the cluster, by the facts of its records; what verdicts decide against.
pub struct ReleaseIndex {
    /// The K3s/RKE2 HelmCharts (live source with the CRD installed; else empty).
    pub charts: super::helmcharts::HelmCharts,
    /// How far the record watches have been applied (live source; see [`super::fence`]).
    pub progress: super::fence::WatchProgress,
    source: SourceKind,
    state: Mutex<IndexState>,
    ready: AtomicBool,
    last_sync: Mutex<Option<Instant>>,
}

impl ReleaseIndex {
    /// An empty index, fed by `source`.
    pub fn new(source: SourceKind) -> ReleaseIndex {
        ReleaseIndex {
            charts: Default::default(),
            progress: Default::default(),
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
        state.touch(&record.key.namespace);
        let records = state.releases.entry(record.key).or_default();
        entry.keep_from(records.get(record.object.as_str()));
        records.insert(record.object.into(), entry);
    }

    /// Removes one record (the watch saw it deleted, or a read found it gone): only the object
    /// with `uid`, not a later one of its name.
    pub(crate) fn remove(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) {
        self.lock().remove(key, object, uid);
    }

    /// Replaces every record of the given drivers at once (a completed re-list or a snapshot load).
    /// Approved deletions still waiting for confirmation stay hidden; payload facts read at an
    /// unchanged resourceVersion stay.
    pub(crate) fn replace_records(
        &self,
        drivers: &[crate::release::Driver],
        records: impl IntoIterator<Item = IndexedRecord>,
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
        if state.touched.is_some() {
            let namespaces: BTreeSet<String> = (state.releases.keys().chain(fresh.keys()))
                .filter(|key| drivers.contains(&key.driver))
                .map(|key| key.namespace.clone())
                .collect();
            namespaces.iter().for_each(|namespace| state.touch(namespace));
        }
        state.releases.retain(|key, _| !drivers.contains(&key.driver));
        state.releases.extend(fresh);
    }

    /// Makes one release's records what a consistent listing found (`listed`, every record of
    /// `key` stored when it was read): records the watch has not brought yet are added, records
    /// it has not yet seen go are dropped. What is known of a listed object (a payload read at
    /// its resourceVersion, a pending approved deletion) stays.
    pub fn sync_release(&self, key: &ReleaseKey, listed: Vec<IndexedRecord>) {
        let mut state = self.lock();
        state.touch(&key.namespace);
        let old = state.releases.remove(key).unwrap_or_default();
        let fresh: ReleaseRecords = listed
            .into_iter()
            .filter(|record| record.key == *key)
            .map(|record| {
                let mut entry = Entry::new(record.facts, record.uid, record.resource_version);
                entry.keep_from(old.get(record.object.as_str()));
                (record.object.into(), entry)
            })
            .collect();
        if !fresh.is_empty() {
            state.releases.insert(key.clone(), fresh);
        }
    }

    /// Adds or changes a namespace.
    pub(crate) fn set_namespace(&self, name: &str, info: NamespaceInfo) {
        let mut state = self.lock();
        if state.namespaces.get(name) != Some(&info) {
            state.touch(NAMESPACES_TOUCHED);
        }
        state.namespaces.insert(name.to_owned(), info);
    }

    /// Forgets a namespace.
    pub(crate) fn remove_namespace(&self, name: &str) {
        let mut state = self.lock();
        state.touch(NAMESPACES_TOUCHED);
        state.namespaces.remove(name);
    }

    /// Replaces every namespace at once (a completed list).
    pub(crate) fn replace_namespaces(&self, namespaces: impl IntoIterator<Item = (String, NamespaceInfo)>) {
        let mut state = self.lock();
        state.touch(NAMESPACES_TOUCHED);
        state.namespaces = namespaces.into_iter().collect();
    }

    /// The namespaces whose labels leave them less protected than the global `default` mode, by
    /// name.
    pub(crate) fn opted_out(&self, default: Mode) -> Vec<crate::policy::namespace::OptedOut> {
        let mut opted: Vec<_> = self
            .lock()
            .namespaces
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

    /// What is known of a namespace; an unknown one has no mode label and is not terminating.
    pub(crate) fn namespace(&self, name: &str) -> NamespaceInfo {
        self.lock().namespaces.get(name).cloned().unwrap_or_default()
    }

    /// The records of a release as verdicts see them.
    pub fn history(&self, key: &ReleaseKey) -> Vec<RevisionFacts> {
        self.lock().visible(key, None, Instant::now())
    }

    /// The visible records of a release (but `except`) whose payload has not been read at their
    /// current resourceVersion: (object name, resourceVersion).
    pub fn unverified(&self, key: &ReleaseKey, except: Option<&str>) -> Vec<(String, Option<String>)> {
        let now = Instant::now();
        let state = self.lock();
        let Some(records) = state.releases.get(key) else { return Vec::new() };
        records
            .iter()
            .filter(|(object, entry)| {
                entry.visible(now)
                    && entry.facts.payload == PayloadStatus::NotLoaded
                    && Some(&***object) != except
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

    /// Up to `limit` records anywhere whose payload the index has not read at their current
    /// resourceVersion: what the read-ahead reads next.
    pub(crate) fn unread(&self, limit: usize) -> Vec<(ReleaseKey, String, Option<String>)> {
        let now = Instant::now();
        let state = self.lock();
        let mut unread = Vec::new();
        for (key, records) in &state.releases {
            for (object, entry) in records {
                if unread.len() >= limit {
                    return unread;
                }
                if entry.visible(now) && entry.facts.payload == PayloadStatus::NotLoaded {
                    let version = entry.resource_version.as_deref().map(str::to_owned);
                    unread.push((key.clone(), object.to_string(), version));
                }
            }
        }
        unread
    }

    /// The namespaces holding a record of `driver` whose payload is unread, in order.
    pub(crate) fn namespaces_unread(&self, driver: Driver) -> Vec<String> {
        let state = self.lock();
        let unread = state.releases.iter().filter(|(key, records)| {
            key.driver == driver
                && records.values().any(|entry| entry.facts.payload == PayloadStatus::NotLoaded)
        });
        let namespaces: BTreeSet<&str> = unread.map(|(key, _)| key.namespace.as_str()).collect();
        namespaces.into_iter().map(str::to_owned).collect()
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
        state.touch(&key.namespace);
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

    /// Whether `object` (of `uid`) is the record of `key` the guard last saw deployed (the newest
    /// record it has seen `deployed`, among those stored): `None` when it has seen none of them
    /// deployed (it started after the release lost its deployed revision).
    pub(crate) fn is_last_deployed(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) -> Option<bool> {
        let state = self.lock();
        let records = state.releases.get(key)?;
        let (name, entry) = records
            .iter()
            .filter(|(_, entry)| entry.deployed_once)
            .max_by_key(|(_, entry)| entry.facts.revision)?;
        Some(**name == *object && entry.is(uid))
    }

    /// Runs a verdict on a release's records (all but `except`, the object the request is about)
    /// and applies the change it approves, atomically.
    pub(crate) fn decide<R>(
        &self,
        key: &ReleaseKey,
        except: Option<&str>,
        verdict: impl FnOnce(&[RevisionFacts]) -> (R, Option<IndexChange>),
    ) -> R {
        let now = Instant::now();
        let mut state = self.lock();
        let (result, change) = verdict(&state.visible(key, except, now));
        if change.is_some() {
            state.touch(&key.namespace);
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
                state.remove(key, &object, uid.as_deref())
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
        state.touch(&key.namespace);
        if let Some(entry) = state.entry(key, object, uid) {
            entry.hidden_until = Some(entry.hidden_until.map_or(until, |before| before.max(until)));
        }
    }

    /// Shows a record hidden by an approval that did not stand (its claim was not written).
    pub(crate) fn unhide(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) {
        let mut state = self.lock();
        state.touch(&key.namespace);
        if let Some(entry) = state.entry(key, object, uid) {
            entry.hidden_until = None;
        }
    }

    /// Applies one approved change outside a verdict (CREATE and UPDATE need no history).
    pub(crate) fn apply(&self, key: &ReleaseKey, change: IndexChange) {
        self.decide(key, None, |_| ((), Some(change)));
    }

    /// How the releases classify, counted (for metrics). Classified in place under the lock,
    /// one release at a time in a reused buffer: no history is copied and nothing is allocated
    /// per release but what classifying takes, so a scrape holds verdicts up only briefly
    /// (BENCHMARKS.md, "Metrics").
    ///
    /// A pending latest revision is judged by its writer as `writer` says
    /// ([`crate::release::Classification::with_writer`]).
    pub fn census(
        &self,
        now_unix: i64,
        stuck_after_secs: i64,
        writer: &dyn Fn(&ReleaseKey, u32) -> crate::release::writer::Liveness,
    ) -> Census {
        let now = Instant::now();
        let mut census = Census::default();
        let mut history = Vec::new();
        let state = self.lock();
        for (key, records) in &state.releases {
            history.clear();
            history.extend(records.values().filter(|entry| entry.visible(now)).map(|entry| entry.facts));
            census.revisions += records.len();
            let classification =
                classify(&history, now_unix, stuck_after_secs).judged_by(|revision| writer(key, revision));
            *census.states.entry(classification.state).or_default() += 1;
            if let Some(because) = classification.stuck_because {
                *census.stuck.entry(because).or_default() += 1;
            }
            for anomaly in classification.anomalies {
                *census.anomalies.entry(anomaly).or_default() += 1;
            }
        }
        census
    }

    /// From now on, remember which namespaces' records change, for `ReleaseIndex::take_touched`
    /// (the PolicyReport writer; nothing is kept for anyone else).
    pub(crate) fn track_touched(&self) {
        let mut state = self.lock();
        if state.touched.is_none() {
            state.touched = Some(BTreeSet::new());
        }
    }

    /// The namespaces whose records changed since the last call (or since
    /// [`ReleaseIndex::track_touched`]), and forgets them.
    pub(crate) fn take_touched(&self) -> BTreeSet<String> {
        self.lock().touched.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Every release of the namespaces in `namespaces` (of every namespace when `None`) with
    /// the records verdicts see, by namespace: what the PolicyReport writer classifies, outside
    /// the lock.
    pub(crate) fn releases_in(
        &self,
        namespaces: Option<&BTreeSet<String>>,
    ) -> BTreeMap<String, Vec<(ReleaseKey, Vec<RevisionFacts>)>> {
        let now = Instant::now();
        let state = self.lock();
        let mut found: BTreeMap<String, Vec<(ReleaseKey, Vec<RevisionFacts>)>> = BTreeMap::new();
        for (key, records) in &state.releases {
            if namespaces.is_some_and(|wanted| !wanted.contains(&key.namespace)) {
                continue;
            }
            let facts: Vec<RevisionFacts> =
                records.values().filter(|entry| entry.visible(now)).map(|entry| entry.facts).collect();
            found.entry(key.namespace.clone()).or_default().push((key.clone(), facts));
        }
        found
    }

    /// How many records the index holds (hidden ones included).
    pub(crate) fn revision_count(&self) -> usize {
        self.lock().releases.values().map(BTreeMap::len).sum()
    }

    /// The releases whose latest revision is pending, with that revision: the operations under
    /// way, or abandoned.
    pub(crate) fn pending_latest(&self) -> Vec<(ReleaseKey, u32)> {
        let now = Instant::now();
        let state = self.lock();
        let mut pending = Vec::new();
        for (key, records) in &state.releases {
            let latest = records
                .values()
                .filter(|entry| entry.visible(now))
                .map(|entry| entry.facts)
                .max_by_key(|facts| facts.revision);
            if let Some(facts) =
                latest.filter(|facts| facts.status().is_some_and(crate::release::Status::is_pending))
            {
                pending.push((key.clone(), facts.revision));
            }
        }
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::{Driver, Status};

    fn key() -> ReleaseKey {
        ReleaseKey { driver: Driver::Secret, namespace: "demo".into(), release: "web".into() }
    }

    fn facts(revision: u32, status: Status) -> RevisionFacts {
        RevisionFacts {
            revision,
            payload: PayloadStatus::NotLoaded,
            label: Some(status),
            stored_at: None,
            field_conflict: false,
        }
    }

    fn object(revision: u32) -> String {
        format!("sh.helm.release.v1.web.v{revision}")
    }

    fn record(revision: u32, status: Status, resource_version: &str) -> IndexedRecord {
        IndexedRecord {
            key: key(),
            object: object(revision),
            uid: Some(format!("uid-{revision}")),
            facts: facts(revision, status),
            resource_version: Some(resource_version.to_owned()),
        }
    }

    fn index(source: SourceKind) -> ReleaseIndex {
        let index = ReleaseIndex::new(source);
        for (revision, status) in [(1, Status::Superseded), (2, Status::Deployed)] {
            index.upsert(record(revision, status, "1"));
        }
        index
    }

    fn delete(revision: u32) -> Option<IndexChange> {
        Some(IndexChange::Delete { object: object(revision), uid: Some(format!("uid-{revision}")) })
    }

    /// The release's last good revision is the newest record the guard saw deployed, whatever it
    /// was moved to since; a newer record that was never deployed does not take its place, one
    /// deployed later does, and a new object under the name starts afresh.
    #[test]
    fn the_record_last_seen_deployed_is_remembered_through_its_downgrades() {
        let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(30) });
        let last = |revision: u32| {
            index.is_last_deployed(&key(), &object(revision), Some(&format!("uid-{revision}")))
        };
        assert_eq!((last(1), last(2)), (Some(false), Some(true)));
        // v2 superseded, then failed, under a forged v3 that never ran.
        index.upsert(record(2, Status::Superseded, "2"));
        index.upsert(record(3, Status::PendingUpgrade, "3"));
        index.upsert(record(2, Status::Failed, "4"));
        assert_eq!((last(2), last(3)), (Some(true), Some(false)));
        // v3 deployed: it is the last good one now.
        index.upsert(record(3, Status::Deployed, "5"));
        assert_eq!((last(2), last(3)), (Some(false), Some(true)));
        // Another object under v3's name (a reinstall) was never seen deployed.
        index.upsert(IndexedRecord {
            uid: Some("uid-other".into()),
            ..record(3, Status::PendingInstall, "6")
        });
        assert_eq!(index.is_last_deployed(&key(), &object(2), Some("uid-2")), Some(true));
        let fresh = ReleaseIndex::new(SourceKind::Snapshot);
        fresh.upsert(record(1, Status::Superseded, "1"));
        assert_eq!(fresh.is_last_deployed(&key(), &object(1), Some("uid-1")), None, "never seen deployed");
    }

    #[test]
    fn a_snapshot_applies_approved_changes_at_once() {
        let index = index(SourceKind::Snapshot);
        index.decide(&key(), None, |_| ((), delete(1)));
        let upsert = IndexChange::Upsert { object: object(3), facts: facts(3, Status::PendingUpgrade) };
        index.decide(&key(), None, |_| ((), Some(upsert)));
        let revisions: Vec<u32> = index.history(&key()).iter().map(|f| f.revision).collect();
        assert_eq!(revisions, vec![2, 3]);
    }

    #[test]
    fn live_hides_an_approved_deletion_until_confirmed_or_expired() {
        let waiting = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        waiting.decide(&key(), None, |_| ((), delete(2)));
        assert_eq!(waiting.history(&key()).len(), 1, "hidden from the next verdict");
        waiting.upsert(record(2, Status::Deployed, "2"));
        assert_eq!(waiting.history(&key()).len(), 1, "a watch update does not unhide it");
        waiting.remove(&key(), &object(2), Some("uid-2"));
        assert_eq!(waiting.revision_count(), 1, "the watch confirmed it");

        let expired = index(SourceKind::Live { tombstone_ttl: Duration::ZERO });
        expired.decide(&key(), None, |_| ((), delete(2)));
        assert_eq!(expired.history(&key()).len(), 2, "restored once the timeout passed");

        let live = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        let upsert = IndexChange::Upsert { object: object(3), facts: facts(3, Status::Deployed) };
        live.decide(&key(), None, |_| ((), Some(upsert)));
        assert_eq!(live.history(&key()).len(), 2, "live writes come from the watch only");
    }

    #[test]
    fn a_relist_keeps_pending_deletions_hidden_and_drops_vanished_releases() {
        let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        index.decide(&key(), None, |_| ((), delete(2)));
        let other = ReleaseKey { release: "other".into(), ..key() };
        index.upsert(IndexedRecord { key: other.clone(), ..record(1, Status::Deployed, "1") });
        index.replace_records(
            &[Driver::Secret],
            [1, 2].map(|revision| record(revision, Status::Deployed, "1")),
        );
        assert_eq!(index.history(&key()).len(), 1);
        assert!(index.history(&other).is_empty());
    }

    #[test]
    fn two_objects_of_one_revision_are_both_kept() {
        let index = index(SourceKind::Snapshot);
        index.upsert(IndexedRecord { object: "rb-copy".into(), ..record(2, Status::Superseded, "1") });
        assert_eq!(index.history(&key()).len(), 3);
        let others = index.decide(&key(), Some("rb-copy"), |others| (others.len(), None));
        assert_eq!(others, 2, "the object a request is about is left out, its twin is not");
    }

    fn read(resource_version: &str, facts: RevisionFacts) -> crate::cluster::ReadRecord {
        let uid = Some(format!("uid-{}", facts.revision));
        crate::cluster::ReadRecord { uid, resource_version: Some(resource_version.to_owned()), facts }
    }

    /// A reinstall brings back the names of the first incarnation's records: what the index
    /// remembered of the old objects (their approved deletions, their payload readings) must not
    /// stand for the new ones.
    #[test]
    fn a_name_reused_by_a_new_object_starts_afresh() {
        let first = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        first.decide(&key(), None, |_| ((), delete(2)));
        assert_eq!(first.history(&key()).len(), 1);
        // The watch missed the deletion (a relist brings the new object): not hidden.
        let reinstalled =
            IndexedRecord { uid: Some("uid-2-again".into()), ..record(2, Status::Deployed, "9") };
        first.replace_records(&[Driver::Secret], [record(1, Status::Superseded, "1"), reinstalled.clone()]);
        assert_eq!(first.history(&key()).len(), 2, "the new object is not the deleted one");
        // The old object's deletion event arriving late does not remove the new one.
        first.remove(&key(), &object(2), Some("uid-2"));
        assert_eq!(first.history(&key()).len(), 2);
        // Nor does a claim or a tombstone on the old object hide it.
        first.hide(&key(), &object(2), Some("uid-2"), Instant::now() + Duration::from_secs(3600));
        first.decide(&key(), None, |_| ((), delete(2)));
        assert_eq!(first.history(&key()).len(), 2);
        // A claim from an older guard, by name only, still hides whatever has the name.
        first.hide(&key(), &object(2), None, Instant::now() + Duration::from_secs(3600));
        assert_eq!(first.history(&key()).len(), 1);

        // By a watch event, the same: a new uid under the name replaces what was known.
        let live = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        let decoded =
            RevisionFacts { payload: PayloadStatus::Decoded(Status::Deployed), ..facts(2, Status::Deployed) };
        live.verified(&key(), &object(2), Some("1"), read("1", decoded));
        live.decide(&key(), None, |_| ((), delete(2)));
        live.upsert(IndexedRecord { resource_version: Some("1".into()), ..reinstalled });
        assert_eq!(live.history(&key()).len(), 2, "not hidden");
        assert_eq!(
            live.unverified(&key(), None).len(),
            2,
            "the old object's payload reading is not the new one's"
        );
    }

    #[test]
    fn payload_facts_last_while_the_object_is_unchanged() {
        let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        assert_eq!(index.unverified(&key(), None).len(), 2);
        let facts2 =
            RevisionFacts { payload: PayloadStatus::Decoded(Status::Deployed), ..facts(2, Status::Deployed) };
        index.verified(&key(), &object(2), Some("1"), read("1", facts2));
        assert_eq!(index.unverified(&key(), None), vec![(object(1), Some("1".to_owned()))]);
        index.upsert(record(2, Status::Deployed, "1"));
        assert_eq!(index.unverified(&key(), None).len(), 1, "a relist at the same resourceVersion keeps it");
        index.upsert(record(2, Status::Deployed, "7"));
        assert_eq!(index.unverified(&key(), None).len(), 2, "a new resourceVersion must be read again");
        index.verified(&key(), &object(2), Some("5"), read("6", facts2));
        assert_eq!(
            index.unverified(&key(), None).len(),
            2,
            "a read older than what the watch brought is dropped"
        );
        index.verified(&key(), &object(2), Some("7"), read("8", facts2));
        assert_eq!(index.unverified(&key(), None).len(), 1, "a read newer than a lagging watch is taken");
        index.upsert(record(2, Status::Deployed, "8"));
        assert_eq!(index.unverified(&key(), None).len(), 1, "and kept when the watch catches up");
    }

    #[test]
    fn the_namespaces_whose_records_changed_are_told_once_and_only_when_asked() {
        let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
        assert!(index.take_touched().is_empty(), "nothing kept before anyone asks");
        index.track_touched();
        index.upsert(record(3, Status::Deployed, "3"));
        let mut other = record(1, Status::Deployed, "1");
        other.key.namespace = "other".into();
        index.upsert(other);
        assert_eq!(index.take_touched().into_iter().collect::<Vec<_>>(), ["demo", "other"]);
        assert!(index.take_touched().is_empty(), "told once");
        index.decide(&key(), None, |_| ((), delete(1)));
        assert_eq!(index.take_touched().len(), 1, "an approved deletion hides a record: the history changed");
        index.decide(&key(), None, |_| ((), None));
        assert!(index.take_touched().is_empty(), "a verdict that changes nothing");
        let by_namespace = index.releases_in(None);
        assert_eq!(by_namespace.keys().collect::<Vec<_>>(), ["demo", "other"]);
        let demo: Vec<u32> = by_namespace["demo"][0].1.iter().map(|f| f.revision).collect();
        assert_eq!(demo.len(), 2, "the hidden revision 1 is not seen: {demo:?}");
        index.set_namespace("demo", NamespaceInfo::default());
        assert_eq!(
            index.take_touched().into_iter().collect::<Vec<_>>(),
            [NAMESPACES_TOUCHED],
            "a namespace's labels"
        );
        index.set_namespace("demo", NamespaceInfo::default());
        assert!(index.take_touched().is_empty(), "the same labels again");
        let only: BTreeSet<String> = ["other".to_owned()].into();
        assert_eq!(index.releases_in(Some(&only)).keys().collect::<Vec<_>>(), ["other"]);
    }
}
