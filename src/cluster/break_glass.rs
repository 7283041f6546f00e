//! Who may break glass: the API server's own authorizer, asked as kubectl's `auth can-i` asks it.
//!
//! The break-glass annotation (`helm-guard.io/allow-delete`) and the restore annotation
//! (`helm-guard.io/restored-from`) lift the rules for one record, so they are a privilege,
//! granted the Kubernetes way: a requester counts when RBAC (or whatever authorizer the cluster
//! runs) allows it the verb `breakglass` on `releases.helm-guard.io`, in the record's namespace,
//! for the release's name. `cluster-admin` holds it on every platform (`*` on `*`); `admin` and
//! `edit` do not; the chart's ClusterRole `helm-guard-break-glass` grants it, bound to nobody.
//! Asked only for a request that carries one of the annotations, so Helm's own writes never wait
//! on it; answers are remembered briefly, so that a flood of annotated reviews (anyone on the pod
//! network can POST one) asks the API server at most once a requester and release a while.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

/// The API group, resource and verb a break-glass holder is allowed (`kubectl auth can-i
/// breakglass releases.helm-guard.io/NAME -n NAMESPACE`).
pub(crate) const GROUP: &str = "helm-guard.io";
/// See [`GROUP`].
pub(crate) const RESOURCE: &str = "releases";
/// See [`GROUP`].
pub(crate) const VERB: &str = "breakglass";

/// How long an answer of the authorizer is taken as it was: a binding added or removed counts
/// within this.
const REMEMBERED_FOR: Duration = Duration::from_secs(10);
/// The most answers remembered at once; past it, the expired ones go, and a new answer is not
/// remembered until one has (a flood of new requesters cannot wipe the others' answers).
const MOST_REMEMBERED: usize = 4096;

/// Who asks, as the API server's review names them.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    /// The user name.
    pub username: &'a str,
    /// The user's uid, when the authenticator gives one.
    pub uid: Option<&'a str>,
    /// The user's groups.
    pub groups: &'a [String],
    /// The authenticator's extra fields (a pod-bound token's pod, say).
    pub extra: Option<&'a BTreeMap<String, Vec<String>>>,
}

/// Decides whether a requester may break glass on a release: the seam a live guard plugs the API
/// server's authorizer into (and a test, a stub).
pub trait BreakGlassAuthority: Send + Sync + std::fmt::Debug {
    /// Whether `asker` is allowed `breakglass` on release `release` in `namespace`; false when
    /// that cannot be told by `deadline` (the annotation then does not count: the rules decide).
    fn allows<'a>(
        &'a self,
        asker: Asker<'a>,
        namespace: &'a str,
        release: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, bool>;
}

/// Who was asked about what, whole: the review sent names the requester by user, uid, groups and
/// extra (an authorizer may read any of them), the release by namespace and name.
type Question = (String, Option<String>, Vec<String>, Option<BTreeMap<String, Vec<String>>>, String, String);

/// The answers remembered, by the question asked.
type Remembered = HashMap<Question, (bool, Instant)>;

/// The API server's authorizer, asked with SubjectAccessReviews (the guard's ClusterRole creates
/// them).
pub(crate) struct AccessReviews {
    client: kube::Client,
    remembered: Mutex<Remembered>,
}

impl std::fmt::Debug for AccessReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessReviews").finish_non_exhaustive()
    }
}

impl AccessReviews {
    pub(crate) fn new(client: kube::Client) -> AccessReviews {
        AccessReviews { client, remembered: Mutex::new(HashMap::new()) }
    }

    fn recall(&self, key: &Question, now: Instant) -> Option<bool> {
        let remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        remembered
            .get(key)
            .filter(|(_, at)| now.duration_since(*at) < REMEMBERED_FOR)
            .map(|(allowed, _)| *allowed)
    }

    fn remember(&self, key: Question, allowed: bool, now: Instant) {
        let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.len() >= MOST_REMEMBERED {
            remembered.retain(|_, (_, at)| now.duration_since(*at) < REMEMBERED_FOR);
        }
        if remembered.len() < MOST_REMEMBERED {
            remembered.insert(key, (allowed, now));
        }
    }
}

/// The review kubectl's `auth can-i` would send for `asker`.
pub(crate) fn access_review(asker: Asker<'_>, namespace: &str, release: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(asker.username.to_owned()),
            uid: asker.uid.map(str::to_owned),
            groups: Some(asker.groups.to_vec()),
            extra: asker.extra.cloned(),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.to_owned()),
                resource: Some(RESOURCE.to_owned()),
                verb: Some(VERB.to_owned()),
                namespace: Some(namespace.to_owned()),
                name: Some(release.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

impl BreakGlassAuthority for AccessReviews {
    fn allows<'a>(
        &'a self,
        asker: Asker<'a>,
        namespace: &'a str,
        release: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let key = (
                asker.username.to_owned(),
                asker.uid.map(str::to_owned),
                asker.groups.to_vec(),
                asker.extra.cloned(),
                namespace.to_owned(),
                release.to_owned(),
            );
            if let Some(allowed) = self.recall(&key, Instant::now()) {
                return allowed;
            }
            let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
            let review = access_review(asker, namespace, release);
            let params = PostParams::default();
            let asked = tokio::time::timeout_at(deadline.into(), api.create(&params, &review));
            match asked.await {
                Ok(Ok(answer)) => {
                    let allowed = answer.status.is_some_and(|status| status.allowed);
                    self.remember(key, allowed, Instant::now());
                    allowed
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, user = asker.username, %namespace, %release,
                        "could not ask the API server whether the requester may break glass; the annotation does not count");
                    false
                }
                Err(_) => {
                    tracing::warn!(user = asker.username, %namespace, %release,
                        "the API server did not say in time whether the requester may break glass; the annotation does not count");
                    false
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The review is the one `kubectl auth can-i breakglass releases.helm-guard.io/web -n demo
    /// --as alice --as-group dev` sends: the requester whole, the release by name.
    #[test]
    fn the_review_asks_for_the_verb_on_the_release_as_the_requester() {
        let groups = vec!["dev".to_owned(), "system:authenticated".to_owned()];
        let extra =
            BTreeMap::from([("authentication.kubernetes.io/pod-name".to_owned(), vec!["p".to_owned()])]);
        let asker = Asker { username: "alice", uid: Some("u-1"), groups: &groups, extra: Some(&extra) };
        let review = serde_json::to_value(access_review(asker, "demo", "web")).unwrap();
        assert_eq!(
            review["spec"],
            serde_json::json!({
                "user": "alice", "uid": "u-1", "groups": ["dev", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["p"]},
                "resourceAttributes": {"group": "helm-guard.io", "resource": "releases", "verb": "breakglass",
                    "namespace": "demo", "name": "web"}
            })
        );
    }

    /// Answers are remembered for a while and the memory is bounded.
    #[tokio::test]
    async fn answers_are_remembered_briefly_within_a_bound() {
        let reviews = AccessReviews::new(
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap(),
        );
        let now = Instant::now();
        let key = |i: usize| (format!("u{i}"), None, Vec::new(), None, "demo".to_owned(), "web".to_owned());
        reviews.remember(key(0), true, now);
        assert_eq!(reviews.recall(&key(0), now), Some(true));
        assert_eq!(reviews.recall(&key(0), now + REMEMBERED_FOR), None, "expired");
        // The same user with another uid (another token) is another question.
        let other_uid =
            (key(0).0, Some("u-2".to_owned()), Vec::new(), None, "demo".to_owned(), "web".to_owned());
        assert_eq!(reviews.recall(&other_uid, now), None);
        for i in 1..=MOST_REMEMBERED + 10 {
            reviews.remember(key(i), false, now);
        }
        assert_eq!(reviews.remembered.lock().unwrap().len(), MOST_REMEMBERED);
        assert_eq!(reviews.recall(&key(0), now), Some(true), "a flood does not wipe an answer still good");
    }
}
