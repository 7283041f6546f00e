//! A consistent listing of one release brought into the index: what the watch brought after the
//! listing's moment stays.

use super::entry::Entry;
use super::{ReleaseIndex, ReleaseKey, ReleaseRecords};

impl ReleaseIndex {
    /// Brings one release's records up to what a consistent listing found: records the watch has
    /// not brought yet are added, records it has not yet seen go are dropped (gone ahead of the
    /// watch). The index may be newer than the listing (the watch went on while it was read):
    /// what is newer stays, by resourceVersion: a record at a later version than listed, a
    /// record made after the listing's moment, and a listed record the watch has since brought
    /// the deletion of. What is known of a listed object (a payload read at its resourceVersion,
    /// a pending approved deletion) stays.
    pub fn sync_release(&self, key: &ReleaseKey, listing: crate::cluster::Listing) {
        let version = |rv: Option<&str>| crate::cluster::rounds::revision(rv);
        let as_of = version(listing.resource_version.as_deref());
        let mut state = self.lock();
        self.changes.touch(&key.namespace);
        let through = state.watched.through(key.driver);
        let mut old = state.releases.remove(key).unwrap_or_default();
        let mut fresh = ReleaseRecords::new();
        for record in listing.records.into_iter().filter(|record| record.key == *key) {
            let listed = version(record.resource_version.as_deref());
            match old.remove(record.object.as_str()) {
                Some(entry) if version(entry.resource_version.as_deref()) > listed && listed.is_some() => {
                    fresh.insert(record.object.into(), entry);
                }
                // Brought by the watch, and removed since; or found gone by a read since.
                None if listed.is_some_and(|listed| listed <= through)
                    || state.watched.found_gone(key, &record.object, record.uid.as_deref()) => {}
                before => {
                    let mut entry = Entry::new(record.facts, record.uid, record.resource_version);
                    entry.keep_from(before.as_ref());
                    fresh.insert(record.object.into(), entry);
                }
            }
        }
        for (object, entry) in old {
            if as_of.is_some() && version(entry.resource_version.as_deref()) > as_of {
                fresh.insert(object, entry);
            } else {
                state.watched.gone(key, &object, entry.uid.as_deref());
            }
        }
        if !fresh.is_empty() {
            fresh.keys().for_each(|object| state.indexed_under(key, object));
            state.releases.insert(key.clone(), fresh);
        }
    }
}
