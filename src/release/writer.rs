//! Who wrote a release's records, as the API server said in the admission request, and whether
//! that writer still runs. Pure: what the guard remembers and what the pod it names says are
//! read elsewhere (`cluster::writers`).
//!
//! For in-cluster writers the API server says which pod: a service-account token bound to a pod
//! (every pod's projected token on Kubernetes 1.30 and later) puts
//! `authentication.kubernetes.io/pod-name` and `pod-uid` in `userInfo.extra`. A pending revision
//! whose writer's pod is gone, or replaced by a pod of another uid, is stuck whatever its age;
//! one whose writer's pod still runs is not, whatever its age; a writer with no pod (a laptop,
//! external CI) leaves the age rule (`--stuck-after`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `userInfo.extra` key of a pod-bound token: the pod's name.
pub(crate) const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// `userInfo.extra` key of a pod-bound token: the pod's uid.
pub(crate) const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// How many revisions' writers are remembered per release (the owner is kept besides).
pub(crate) const REMEMBERED_REVISIONS: usize = 10;

/// The identity that wrote a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Writer {
    /// The user name (`system:serviceaccount:NS:NAME` for a service account).
    pub user: String,
    /// The pod whose bound token it used, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<WriterPod>,
}

/// The pod a writer's token was bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriterPod {
    /// The pod's namespace: the service account's, the only one its token can be bound in.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid: a later pod of the same name is another writer.
    pub uid: String,
}

impl Writer {
    /// The writer of a request, from its `userInfo`. A pod is named only for a service account's
    /// token that carries both the pod's name and uid.
    pub fn of_request(username: &str, extra: Option<&BTreeMap<String, Vec<String>>>) -> Writer {
        let one = |key: &str| {
            extra.and_then(|extra| extra.get(key)).and_then(|values| match values.as_slice() {
                [value] if !value.is_empty() => Some(value.clone()),
                _ => None,
            })
        };
        let namespace = username.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':'));
        let pod = match (namespace, one(POD_NAME_EXTRA), one(POD_UID_EXTRA)) {
            (Some((namespace, _)), Some(name), Some(uid)) => {
                Some(WriterPod { namespace: namespace.to_owned(), name, uid })
            }
            _ => None,
        };
        Writer { user: username.to_owned(), pod }
    }

    /// `user (pod NS/NAME)`, for messages.
    pub(crate) fn describe(&self) -> String {
        match &self.pod {
            Some(pod) => format!("{} (pod {}/{})", self.user, pod.namespace, pod.name),
            None => self.user.clone(),
        }
    }
}

/// Whether a writer still runs, as far as the API server says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Liveness {
    /// Its pod exists with the uid its token was bound to.
    Alive,
    /// Its pod is gone, has ended, or the name belongs to a pod of another uid.
    Gone,
    /// The writer used no pod-bound token (a laptop, external CI).
    NoPod,
    /// The guard does not know who wrote the revision, or could not ask about the pod.
    Unknown,
}

impl Liveness {
    /// What the API server said of the writer's pod: `uid` the uid of the pod now under its
    /// name that can still run, `None` when there is none (or it has ended).
    pub fn of_pod(writer: &Writer, uid: Option<&str>) -> Liveness {
        match (&writer.pod, uid) {
            (None, _) => Liveness::NoPod,
            (Some(pod), Some(uid)) if pod.uid == uid => Liveness::Alive,
            (Some(_), _) => Liveness::Gone,
        }
    }

    /// `alive`, `gone`, `no-pod`, `unknown`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why a pending revision counts as stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum StuckBecause {
    /// Its writer's pod is gone: no one will finish the operation, whatever its age.
    WriterGone,
    /// Unchanged for longer than `--stuck-after`, its writer not known to run in a pod.
    Age,
}

/// The writers the guard remembers of one release: who wrote its first revision it saw (the
/// owner, for the owner lock) and the last few revisions' writers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseWriters {
    /// The writer of the earliest revision the guard attributed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Writer>,
    /// The revision the owner wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_revision: Option<u32>,
    /// The writers of the last [`REMEMBERED_REVISIONS`] revisions attributed.
    #[serde(default)]
    pub revisions: BTreeMap<u32, Writer>,
}

impl ReleaseWriters {
    /// Remembers `writer` as the one who created `revision`; a revision's first writer stays (a
    /// later claim to have created it is not its creation). The owner is the writer of the
    /// lowest revision attributed: an earlier one found later takes its place.
    pub fn remember(&mut self, revision: u32, writer: Writer) {
        if self.revisions.contains_key(&revision) {
            return;
        }
        if self.owner_revision.is_none_or(|owned| revision < owned) {
            self.owner = Some(writer.clone());
            self.owner_revision = Some(revision);
        }
        self.revisions.insert(revision, writer);
        while self.revisions.len() > REMEMBERED_REVISIONS {
            self.revisions.pop_first();
        }
    }

    /// The writer of `revision`, when remembered.
    pub fn of(&self, revision: u32) -> Option<&Writer> {
        self.revisions.get(&revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extra(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), vec![(*v).to_owned()])).collect()
    }

    #[test]
    fn a_pod_bound_service_account_token_names_its_pod() {
        let bound = extra(&[(POD_NAME_EXTRA, "helm-install-web-x1"), (POD_UID_EXTRA, "u-1")]);
        let writer = Writer::of_request("system:serviceaccount:kube-system:helm-web", Some(&bound));
        let pod = writer.pod.as_ref().unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
            ("kube-system", "helm-install-web-x1", "u-1")
        );
        assert_eq!(
            writer.describe(),
            "system:serviceaccount:kube-system:helm-web (pod kube-system/helm-install-web-x1)"
        );
    }

    #[test]
    fn no_pod_without_a_service_account_or_both_keys() {
        let bound = extra(&[(POD_NAME_EXTRA, "p"), (POD_UID_EXTRA, "u")]);
        // A user cannot name a pod by forging extra on a non-service-account identity.
        assert_eq!(Writer::of_request("alice", Some(&bound)).pod, None);
        let half = extra(&[(POD_NAME_EXTRA, "p")]);
        assert_eq!(Writer::of_request("system:serviceaccount:a:b", Some(&half)).pod, None);
        assert_eq!(Writer::of_request("system:serviceaccount:a:b", None).pod, None);
    }

    #[test]
    fn a_pod_is_alive_only_under_its_own_uid() {
        let bound = extra(&[(POD_NAME_EXTRA, "p"), (POD_UID_EXTRA, "u-1")]);
        let writer = Writer::of_request("system:serviceaccount:a:b", Some(&bound));
        assert_eq!(Liveness::of_pod(&writer, Some("u-1")), Liveness::Alive);
        assert_eq!(
            Liveness::of_pod(&writer, Some("u-2")),
            Liveness::Gone,
            "a pod of the same name, recreated"
        );
        assert_eq!(Liveness::of_pod(&writer, None), Liveness::Gone);
        assert_eq!(Liveness::of_pod(&Writer::of_request("alice", None), None), Liveness::NoPod);
    }

    #[test]
    fn the_owner_is_the_writer_of_the_lowest_revision_and_only_ten_are_kept() {
        let mut writers = ReleaseWriters::default();
        for revision in 3..20 {
            writers.remember(revision, Writer::of_request(&format!("u{revision}"), None));
        }
        assert_eq!(writers.owner.as_ref().unwrap().user, "u3");
        writers.remember(1, Writer::of_request("first", None));
        assert_eq!(writers.owner.as_ref().unwrap().user, "first");
        assert_eq!(writers.revisions.len(), REMEMBERED_REVISIONS);
        assert_eq!(writers.of(19).unwrap().user, "u19");
        assert!(writers.of(3).is_none());
        writers.remember(19, Writer::of_request("later", None));
        assert_eq!(writers.of(19).unwrap().user, "u19", "a revision's first writer stays");
    }
}
