//! Turning watcher events into index updates. Separate from the watchers themselves so that tests
//! can feed events by hand and compare with the snapshot source.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

use super::index::{IndexedRecord, NamespaceInfo, ReleaseIndex};
use crate::release::Driver;
use crate::release::history::{PayloadStatus, RevisionFacts};
use crate::release::record::{changed_at_label, release_key, status_label, version_hint};

/// What a record's metadata tells without its payload: the labels stand in until a verdict needs
/// the payload (it is read then, once per resourceVersion).
pub fn record_from_meta(driver: Driver, meta: &ObjectMeta) -> Option<IndexedRecord> {
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let name = meta.name.as_deref()?;
    let key = release_key(driver, meta.namespace.as_deref().unwrap_or_default(), labels)?;
    let facts = RevisionFacts {
        revision: version_hint(name, labels),
        payload: PayloadStatus::NotLoaded,
        label: status_label(labels),
        changed_at: changed_at_label(labels),
    };
    Some(IndexedRecord {
        key,
        object: name.to_owned(),
        facts,
        resource_version: meta.resource_version.clone(),
    })
}

/// What a Namespace's metadata tells.
pub fn namespace_from_meta(meta: &ObjectMeta) -> Option<(String, NamespaceInfo)> {
    Some((meta.name.clone()?, NamespaceInfo::from_meta(meta)))
}

/// Applies one watcher's events for release records of one driver.
#[derive(Debug)]
pub struct RecordFeed {
    driver: Driver,
    /// Records of a (re-)list in progress, swapped in whole at `InitDone`.
    relist: Option<Vec<IndexedRecord>>,
}

impl RecordFeed {
    pub fn new(driver: Driver) -> RecordFeed {
        RecordFeed { driver, relist: None }
    }

    /// Applies one event; true when it completed a list.
    pub fn apply<M: kube::Resource>(&mut self, index: &ReleaseIndex, event: Event<M>) -> bool {
        index.mark_synced();
        match event {
            Event::Init => {
                self.relist = Some(Vec::new());
                false
            }
            Event::InitApply(object) => {
                if let (Some(relist), Some(found)) =
                    (self.relist.as_mut(), record_from_meta(self.driver, object.meta()))
                {
                    relist.push(found);
                }
                false
            }
            Event::InitDone => {
                index.replace_records(&[self.driver], self.relist.take().unwrap_or_default());
                true
            }
            Event::Apply(object) => {
                if let Some(record) = record_from_meta(self.driver, object.meta()) {
                    index.upsert(record);
                }
                false
            }
            Event::Delete(object) => {
                if let Some(record) = record_from_meta(self.driver, object.meta()) {
                    index.remove(&record.key, &record.object);
                }
                false
            }
        }
    }
}

/// Applies the Namespace watcher's events.
#[derive(Debug, Default)]
pub struct NamespaceFeed {
    relist: Option<Vec<(String, NamespaceInfo)>>,
}

impl NamespaceFeed {
    pub fn apply<M: kube::Resource>(&mut self, index: &ReleaseIndex, event: Event<M>) -> bool {
        match event {
            Event::Init => {
                self.relist = Some(Vec::new());
                false
            }
            Event::InitApply(object) => {
                if let (Some(relist), Some(found)) =
                    (self.relist.as_mut(), namespace_from_meta(object.meta()))
                {
                    relist.push(found);
                }
                false
            }
            Event::InitDone => {
                index.replace_namespaces(self.relist.take().unwrap_or_default());
                true
            }
            Event::Apply(object) => {
                if let Some((name, info)) = namespace_from_meta(object.meta()) {
                    index.set_namespace(&name, info);
                }
                false
            }
            Event::Delete(object) => {
                if let Some(name) = object.meta().name.as_deref() {
                    index.remove_namespace(name);
                }
                false
            }
        }
    }
}
