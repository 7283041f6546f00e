//! A release as one verdict reads it, under the index's lock.

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
}
