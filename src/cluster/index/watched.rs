//! Whether a release's view is one state its watch brought: what lets a verdict rest on a view
//! that lags (POLICY.md, "A view that lags").
//!
//! The watch of one resource type delivers its events in resourceVersion order, so records the
//! index holds as the watch brought them are the release as it was stored at one moment: an
//! earlier state of what is stored now. Reads put newer things beside them: a payload read at a
//! newer resourceVersion, a consistent listing of one release, a read that found a record gone.
//! Such a view mixes two moments, and the argument that a lagging view answers as the stored
//! release would fails on it. So the index remembers, under its lock, how far each driver's
//! watch has brought records and which records a read removed ahead of the watch; a release all
//! of whose records are at or below that mark, none removed ahead, is as watched.

use std::collections::{BTreeMap, HashMap};

use super::ReleaseRecords;
use crate::cluster::rounds::revision;
use crate::release::{Driver, ReleaseKey};

#[derive(Debug, Default)]
pub(super) struct Watched {
    /// Per driver, the resourceVersion of the last event (or the (re-)list) applied.
    through: HashMap<Driver, u64>,
    /// Per release, the objects a read found gone before the watch brought their deletion (by
    /// name, with the uid of the object gone where known).
    gone_ahead: HashMap<ReleaseKey, BTreeMap<Box<str>, Option<Box<str>>>>,
    /// Per driver, how many (re-)lists were swapped in: one may take the index back (a list
    /// served from a cache that lags), so a confirmation holds only within one.
    relists: HashMap<Driver, u64>,
}

impl Watched {
    /// The watch's events of `driver` (records and fences: one stream) are applied up to
    /// `version`.
    pub(super) fn applied(&mut self, driver: Driver, version: u64) {
        let through = self.through.entry(driver).or_default();
        *through = (*through).max(version);
    }

    /// The resourceVersion of the last event of `driver`'s watch the index applied (a relist's
    /// own, lower than before when it was served from a cache that lags).
    pub(super) fn through(&self, driver: Driver) -> u64 {
        self.through.get(&driver).copied().unwrap_or(0)
    }

    /// The watch brought the deletion of `object`.
    pub(super) fn deleted(&mut self, key: &ReleaseKey, object: &str) {
        if let Some(gone) = self.gone_ahead.get_mut(key) {
            gone.remove(object);
            if gone.is_empty() {
                self.gone_ahead.remove(key);
            }
        }
    }

    /// A (re-)list of `drivers` replaced their records: the index is that list, consistent as of
    /// `through` (which may be older than what the watch brought before: a list served from the
    /// API server's cache).
    pub(super) fn relisted(&mut self, drivers: &[Driver], through: u64) {
        for &driver in drivers {
            self.through.insert(driver, through);
            *self.relists.entry(driver).or_default() += 1;
        }
        self.gone_ahead.retain(|key, _| !drivers.contains(&key.driver));
    }

    /// A read found `object` (of `uid`) gone, and it left the index before the watch brought its
    /// deletion.
    pub(super) fn gone(&mut self, key: &ReleaseKey, object: &str, uid: Option<&str>) {
        self.gone_ahead.entry(key.clone()).or_default().insert(object.into(), uid.map(Into::into));
    }

    /// Whether a read found this very object gone: a listing that still shows it is older.
    pub(super) fn found_gone(&self, key: &ReleaseKey, object: &str, uid: Option<&str>) -> bool {
        let gone = self.gone_ahead.get(key).and_then(|gone| gone.get(object));
        gone.is_some_and(|gone| uid.is_some() && gone.as_deref() == uid)
    }

    /// How many (re-)lists of `driver` were swapped in.
    pub(super) fn relists(&self, driver: Driver) -> u64 {
        self.relists.get(&driver).copied().unwrap_or(0)
    }

    /// Whether `records`, all of release `key`, are the release as its watch brought it: each at
    /// a resourceVersion the watch has applied, none removed ahead of it.
    pub(super) fn holds(&self, key: &ReleaseKey, records: Option<&ReleaseRecords>) -> bool {
        let through = self.through(key.driver);
        !self.gone_ahead.contains_key(key)
            && records.into_iter().flatten().all(|(_, entry)| {
                revision(entry.resource_version.as_deref()).is_some_and(|version| version <= through)
            })
    }
}
