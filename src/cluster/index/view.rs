//! A release as one verdict reads it, and as the census and the reports read it, under the
//! index's lock.

use std::time::Instant;

use super::entry::Entry;
use super::{IndexState, ReleaseKey};
use crate::release::history::RevisionFacts;

/// A release as one verdict reads it under the index's lock: the records it is decided on (the
/// view derefs to them: every record but the one asked about, less those an approved deletion
/// hides), and what the index holds besides.
pub(crate) struct ReleaseView<'a> {
    pub(super) visible: Vec<RevisionFacts>,
    pub(super) state: &'a IndexState,
    pub(super) key: &'a ReleaseKey,
    pub(super) except: Option<&'a str>,
}

impl std::ops::Deref for ReleaseView<'_> {
    type Target = [RevisionFacts];

    fn deref(&self) -> &[RevisionFacts] {
        &self.visible
    }
}

impl ReleaseView<'_> {
    /// Every record of the release but the one asked about, those an approved deletion hides
    /// included: what the watch may still show.
    pub(crate) fn held(&self) -> Vec<RevisionFacts> {
        self.state.others(self.key, self.except).map(|entry| entry.facts).collect()
    }

    /// The records the view shows with those it hides shown again, when it hides any.
    pub(crate) fn with_hidden(&self) -> Option<Vec<RevisionFacts>> {
        (self.visible.len() < self.state.others(self.key, self.except).count()).then(|| self.held())
    }

    /// Whether the record asked about, of `uid`, is the release's last good revision as the index
    /// knows it now (after any payloads a confirmation read).
    pub(crate) fn is_last_deployed(&self, uid: Option<&str>) -> Option<bool> {
        self.state.is_last_deployed(self.key, self.except?, uid)
    }

    /// Whether the index holds the object asked about as it is stored: this uid at this
    /// resourceVersion.
    pub(crate) fn holds_as_stored(&self, uid: Option<&str>, resource_version: Option<&str>) -> bool {
        let entry = self.except.and_then(|object| self.state.releases.get(self.key)?.get(object));
        entry.is_some_and(|entry| {
            entry.is(uid)
                && resource_version.is_some()
                && entry.resource_version.as_deref() == resource_version
        })
    }

    /// How many (re-)lists of the release's driver were swapped in (a confirmation holds only
    /// within one).
    pub(crate) fn relists(&self) -> u64 {
        self.state.watched.relists(self.key.driver)
    }

    /// Whether the release (the record asked about included) is as its watch brought it: one
    /// earlier state of what is stored, no read having moved part of it ahead (`watched.rs`).
    pub(crate) fn is_as_watched(&self) -> bool {
        self.state.watched.holds(self.key, self.state.releases.get(self.key))
    }
}

/// A release's records as [`super::ReleaseIndex::each_release`] shows them, in object-name order.
pub(crate) struct Records<'a> {
    pub(super) records: std::collections::btree_map::Iter<'a, Box<str>, Entry>,
    pub(super) now: Instant,
}

/// One record as [`Records`] shows it.
pub(crate) struct HeldRecord<'a> {
    /// The object's name.
    pub(crate) object: &'a str,
    /// What the record says.
    pub(crate) facts: RevisionFacts,
    /// The object's resourceVersion, when the source has one.
    pub(crate) resource_version: Option<&'a str>,
    /// False while an approved deletion hides it: verdicts do not see it.
    pub(crate) visible: bool,
}

impl<'a> Iterator for Records<'a> {
    type Item = HeldRecord<'a>;

    fn next(&mut self) -> Option<HeldRecord<'a>> {
        self.records.next().map(|(object, entry)| HeldRecord {
            object,
            facts: entry.facts,
            resource_version: entry.resource_version.as_deref(),
            visible: entry.visible(self.now),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.records.size_hint()
    }
}

impl ExactSizeIterator for Records<'_> {}
