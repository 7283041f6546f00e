//! Records whose labels moved them. An UPDATE may change a record's `name` label (it is another
//! release's record now) or its `owner` (no record, though the record watch still selects it:
//! `helm-guard-fence`); the watch then brings the object under its new key, or as no record, and
//! its entry under the old key must go, or the index holds a record that is not stored. The old
//! key is the one its name says (Helm names a record `sh.helm.release.v1.<release>.v<N>`), or,
//! for the few records indexed under a release their name does not say, the one remembered here.
//! (Only break-glass or exempt requesters, or a namespace not in enforce mode, get such an
//! UPDATE past U2.)

use super::{IndexState, ReleaseKey};
use crate::release::Driver;
use crate::release::record::parse_object_name;

/// An object of one driver in one namespace.
pub(super) type ObjectId = (Driver, Box<str>, Box<str>);

impl IndexState {
    /// `object` is indexed under `key`: remembered when its name does not say that release.
    pub(super) fn indexed_under(&mut self, key: &ReleaseKey, object: &str) {
        let said = parse_object_name(object).is_some_and(|(release, _)| release == key.release);
        if said && self.named_apart.is_empty() {
            return;
        }
        let id: ObjectId = (key.driver, key.namespace.as_str().into(), object.into());
        if said {
            self.named_apart.remove(&id);
        } else {
            self.named_apart.insert(id, key.release.as_str().into());
        }
    }

    /// The watch brought `object` of `driver` in `namespace` as a record of `now`, or of no
    /// release: removes it from any other release it is indexed under. Whether it removed one.
    pub(super) fn moved(
        &mut self,
        driver: Driver,
        namespace: &str,
        object: &str,
        now: Option<&ReleaseKey>,
    ) -> bool {
        let by_name = parse_object_name(object).map(|(release, _)| release);
        let remembered = if self.named_apart.is_empty() {
            None
        } else {
            self.named_apart.remove(&(driver, namespace.into(), object.into()))
        };
        let mut removed = false;
        for release in [by_name, remembered.as_deref()].into_iter().flatten() {
            if now.is_some_and(|now| now.release == release) {
                continue;
            }
            let old = ReleaseKey { driver, namespace: namespace.to_owned(), release: release.to_owned() };
            let Some(uid) =
                self.releases.get(&old).and_then(|records| records.get(object)).map(|e| e.uid.clone())
            else {
                continue;
            };
            self.remove(&old, object, uid.as_deref());
            self.watched.deleted(&old, object);
            removed = true;
        }
        removed
    }
}
