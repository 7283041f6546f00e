//! Which namespaces' releases changed since someone last asked: what the PolicyReport writer
//! rewrites. Kept only once someone asks to be told ([`ChangedNamespaces::track`]): a guard that
//! writes no reports keeps nothing.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// What [`ChangedNamespaces::take`] names when a namespace itself (its labels) changed: no
/// namespace is named so.
pub(crate) const NAMESPACES_CHANGED: &str = "";

/// The namespaces whose records (or labels) changed since the last [`ChangedNamespaces::take`].
#[derive(Debug, Default)]
pub(crate) struct ChangedNamespaces {
    /// `None` until someone tracks changes.
    changed: Mutex<Option<BTreeSet<String>>>,
}

impl ChangedNamespaces {
    /// Notes that `namespace` changed ([`NAMESPACES_CHANGED`] for a namespace's own labels).
    pub(crate) fn touch(&self, namespace: &str) {
        self.touch_each([namespace]);
    }

    /// Notes that each of `namespaces` changed (a relist's), under one lock; nothing is even
    /// looked at while no one tracks changes.
    pub(crate) fn touch_each<'a>(&self, namespaces: impl IntoIterator<Item = &'a str>) {
        let mut changed = self.changed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(changed) = changed.as_mut() else { return };
        for namespace in namespaces {
            if !changed.contains(namespace) {
                changed.insert(namespace.to_owned());
            }
        }
    }

    /// From now on, remember what changes.
    pub(crate) fn track(&self) {
        let mut changed = self.changed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        changed.get_or_insert_with(BTreeSet::new);
    }

    /// The namespaces that changed since the last call (or since [`ChangedNamespaces::track`]),
    /// forgotten as they are told.
    pub(crate) fn take(&self) -> BTreeSet<String> {
        let mut changed = self.changed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        changed.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_kept_until_someone_tracks_and_each_change_is_told_once() {
        let changes = ChangedNamespaces::default();
        changes.touch("a");
        changes.track();
        assert!(changes.take().is_empty(), "before tracking nothing was kept");
        changes.touch("b");
        changes.touch("b");
        changes.touch(NAMESPACES_CHANGED);
        assert_eq!(changes.take(), BTreeSet::from(["b".to_owned(), NAMESPACES_CHANGED.to_owned()]));
        assert!(changes.take().is_empty(), "told once");
        changes.touch_each(["c", "d", "c"]);
        assert_eq!(changes.take(), BTreeSet::from(["c".to_owned(), "d".to_owned()]), "a relist's, each once");
    }
}
