//! One record as the index keeps it: its facts, its identity, and whether an approved deletion
//! hides it.

use std::time::Instant;

use crate::release::history::{PayloadStatus, RevisionFacts};
use crate::release::record::same_object;

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) facts: RevisionFacts,
    /// The object's uid, when the source has it: what tells it from a later object of its name.
    pub(super) uid: Option<Box<str>>,
    /// The object's resourceVersion (live source): what its verified payload facts belong to.
    pub(super) resource_version: Option<Box<str>>,
    /// Set when the guard approved this object's deletion and the watch has not confirmed it.
    pub(super) hidden_until: Option<Instant>,
    /// Whether the guard has seen this object `deployed`: the release's last good revision is
    /// the newest such record, whatever it was moved to since (POLICY.md, "The recycle bin").
    pub(super) deployed_once: bool,
}

impl Entry {
    pub(super) fn new(facts: RevisionFacts, uid: Option<String>, resource_version: Option<String>) -> Entry {
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
    pub(super) fn keep_from(&mut self, before: Option<&Entry>) {
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
    pub(super) fn is(&self, uid: Option<&str>) -> bool {
        same_object(self.uid.as_deref(), uid)
    }

    pub(super) fn visible(&self, now: Instant) -> bool {
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
