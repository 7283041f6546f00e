//! Turning watcher events into updates of what a watch keeps current: the index (records,
//! namespaces, HelmCharts) and the other replicas' claim books ([`super::claim_books`]). One
//! relist buffer for all of them. Separate from the watchers themselves so that tests can feed
//! events by hand and compare with the snapshot source.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::Event;

use super::helmcharts::HelmChart;

use super::index::{IndexedRecord, ReleaseIndex};
use super::namespaces::NamespaceInfo;
use crate::release::Driver;
use crate::release::history::{PayloadStatus, RevisionFacts};
use crate::release::record::{release_key, status_label, version_hint};

impl IndexedRecord {
    /// What a record's metadata tells (as the watch brings it: no payload), if its labels make it
    /// one of Helm's records of `driver`: the labels stand in until a verdict needs the payload
    /// (it is read then, once per resourceVersion). Also for a [`super::PayloadFetcher`]'s
    /// listing.
    pub fn from_meta(driver: Driver, meta: &ObjectMeta) -> Option<IndexedRecord> {
        let empty = BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&empty);
        let name = meta.name.as_deref()?;
        let key = release_key(driver, meta.namespace.as_deref().unwrap_or_default(), labels)?;
        let facts = RevisionFacts {
            revision: version_hint(name, labels),
            payload: PayloadStatus::NotLoaded,
            label: status_label(labels),
            stored_at: meta.creation_timestamp.as_ref().map(|time| time.0.as_second()),
            field_conflict: false,
            namespace_apart: false,
        };
        Some(IndexedRecord {
            key,
            object: name.to_owned(),
            uid: meta.uid.clone(),
            facts,
            resource_version: meta.resource_version.clone(),
        })
    }
}

/// What a Namespace's metadata tells.
pub(crate) fn namespace_from_meta(meta: &ObjectMeta) -> Option<(String, NamespaceInfo)> {
    Some((meta.name.clone()?, NamespaceInfo::from_meta(meta)))
}

/// What one watcher's objects (`M`) become in what it keeps current (its `Target`: the index, or
/// the claim books of the other replicas).
pub(crate) trait IndexSink<M> {
    /// What the target keeps of one object.
    type Item;
    /// What the watch keeps current.
    type Target: Heard;
    /// What an object tells, if it is one of ours.
    fn read(&self, object: &M) -> Option<Self::Item>;
    /// A completed (re-)list: everything of this kind at once, as of `resource_version` (the
    /// highest of its objects').
    fn replace(&self, target: &Self::Target, items: Vec<Self::Item>, resource_version: u64);
    /// One object added or changed.
    fn upsert(&self, target: &Self::Target, item: Self::Item);
    /// The watch brought `object` changed into none of ours (its labels changed): what the
    /// target held of it goes.
    fn not_ours(&self, _target: &Self::Target, _object: &M) {}
    /// One object gone.
    fn remove(&self, target: &Self::Target, object: &M);
    /// The resourceVersion of an event's object, where the target tracks how far this watch has
    /// come ([`super::fence`]); `None` for the rest.
    fn version(&self, _object: &M) -> Option<u64> {
        None
    }
    /// The target now holds this watch's events up to `resource_version`.
    fn progressed(&self, _target: &Self::Target, _resource_version: u64) {}
}

/// What a watch keeps current, told each time the watch delivers something.
pub(crate) trait Heard {
    /// The watch delivered something: the target is current as of now.
    fn heard(&self) {}
}

/// Every watch of the index (records, namespaces, HelmCharts) shows that the API server answers.
impl Heard for ReleaseIndex {
    fn heard(&self) {
        self.mark_synced();
    }
}

/// A watcher's events applied to its target: single changes as they come, a (re-)list gathered
/// and swapped in whole at its end (`InitDone`), so that verdicts never see half a list. Every
/// watch of the guard goes through one (records, namespaces, HelmCharts, claim books).
#[derive(Debug)]
pub(crate) struct Feed<S, T> {
    sink: S,
    relist: Option<Vec<T>>,
    /// The highest resourceVersion of the (re-)list being gathered.
    relist_version: u64,
}

impl<S, T> Feed<S, T> {
    /// A feed into `sink`.
    pub(crate) fn with_sink(sink: S) -> Feed<S, T> {
        Feed { sink, relist: None, relist_version: 0 }
    }

    /// Applies one event; true when it completed a list.
    pub(crate) fn apply<M>(&mut self, index: &<S as IndexSink<M>>::Target, event: Event<M>) -> bool
    where
        S: IndexSink<M, Item = T>,
    {
        index.heard();
        match event {
            Event::Init => {
                self.relist = Some(Vec::new());
                self.relist_version = 0;
            }
            Event::InitApply(object) => {
                self.relist_version = self.relist_version.max(self.sink.version(&object).unwrap_or(0));
                if let (Some(relist), Some(item)) = (self.relist.as_mut(), self.sink.read(&object)) {
                    relist.push(item);
                }
            }
            Event::InitDone => {
                self.sink.replace(index, self.relist.take().unwrap_or_default(), self.relist_version);
                self.sink.progressed(index, self.relist_version);
                return true;
            }
            Event::Apply(object) => {
                match self.sink.read(&object) {
                    Some(item) => self.sink.upsert(index, item),
                    None => self.sink.not_ours(index, &object),
                }
                if let Some(version) = self.sink.version(&object) {
                    self.sink.progressed(index, version);
                }
            }
            Event::Delete(object) => {
                self.sink.remove(index, &object);
                if let Some(version) = self.sink.version(&object) {
                    self.sink.progressed(index, version);
                }
            }
        }
        false
    }
}

/// Release records of one driver.
#[derive(Debug)]
pub(crate) struct RecordSink(pub Driver);

impl<K> IndexSink<PartialObjectMeta<K>> for RecordSink {
    type Item = IndexedRecord;
    type Target = ReleaseIndex;

    fn read(&self, object: &PartialObjectMeta<K>) -> Option<IndexedRecord> {
        IndexedRecord::from_meta(self.0, &object.metadata)
    }

    fn replace(&self, index: &ReleaseIndex, items: Vec<IndexedRecord>, resource_version: u64) {
        index.replace_records(&[self.0], items, resource_version);
    }

    fn upsert(&self, index: &ReleaseIndex, item: IndexedRecord) {
        index.upsert(item);
    }

    fn not_ours(&self, index: &ReleaseIndex, object: &PartialObjectMeta<K>) {
        let meta = &object.metadata;
        if let Some(name) = meta.name.as_deref() {
            index.not_a_record(self.0, meta.namespace.as_deref().unwrap_or_default(), name);
        }
    }

    fn remove(&self, index: &ReleaseIndex, object: &PartialObjectMeta<K>) {
        if let Some(record) = IndexedRecord::from_meta(self.0, &object.metadata) {
            index.remove(&record.key, &record.object, record.uid.as_deref());
        }
    }

    // Every object of the watch counts, records and fences alike: the stream is in order.
    fn version(&self, object: &PartialObjectMeta<K>) -> Option<u64> {
        super::rounds::revision(object.metadata.resource_version.as_deref())
    }

    fn progressed(&self, index: &ReleaseIndex, resource_version: u64) {
        index.applied(self.0, resource_version);
    }
}

/// Namespaces (their labels, and whether they are going away).
#[derive(Debug, Default)]
pub(crate) struct NamespaceSink;

impl<K> IndexSink<PartialObjectMeta<K>> for NamespaceSink {
    type Item = (String, NamespaceInfo);
    type Target = ReleaseIndex;

    fn read(&self, object: &PartialObjectMeta<K>) -> Option<(String, NamespaceInfo)> {
        namespace_from_meta(&object.metadata)
    }

    fn replace(&self, index: &ReleaseIndex, items: Vec<(String, NamespaceInfo)>, _: u64) {
        index.namespaces().replace(items);
    }

    fn upsert(&self, index: &ReleaseIndex, (name, info): (String, NamespaceInfo)) {
        index.namespaces().set(&name, info);
    }

    fn remove(&self, index: &ReleaseIndex, object: &PartialObjectMeta<K>) {
        if let Some(name) = object.metadata.name.as_deref() {
            index.namespaces().remove(name);
        }
    }
}

/// K3s/RKE2 HelmCharts (their target namespace and protection).
#[derive(Debug, Default)]
pub(crate) struct ChartSink;

impl IndexSink<DynamicObject> for ChartSink {
    type Item = HelmChart;
    type Target = ReleaseIndex;

    fn read(&self, object: &DynamicObject) -> Option<HelmChart> {
        HelmChart::from_object(object)
    }

    fn replace(&self, index: &ReleaseIndex, items: Vec<HelmChart>, _: u64) {
        index.charts().replace(items);
    }

    fn upsert(&self, index: &ReleaseIndex, item: HelmChart) {
        index.charts().upsert(item);
    }

    fn remove(&self, index: &ReleaseIndex, object: &DynamicObject) {
        if let Some(chart) = HelmChart::from_object(object) {
            index.charts().remove(&chart.namespace, &chart.name);
        }
    }
}

/// The release records of one driver.
pub(crate) type RecordFeed = Feed<RecordSink, IndexedRecord>;
/// The namespaces.
pub(crate) type NamespaceFeed = Feed<NamespaceSink, (String, NamespaceInfo)>;
/// The HelmCharts.
pub(crate) type ChartFeed = Feed<ChartSink, HelmChart>;

impl RecordFeed {
    /// The feed of one driver's records.
    pub(crate) fn new(driver: Driver) -> RecordFeed {
        Feed::with_sink(RecordSink(driver))
    }
}

impl Default for ChartFeed {
    fn default() -> Self {
        Feed::with_sink(ChartSink)
    }
}

impl Default for NamespaceFeed {
    fn default() -> Self {
        Feed::with_sink(NamespaceSink)
    }
}
