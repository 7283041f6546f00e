//! The writers of releases ([`crate::release::writer`]), remembered where every replica, a
//! restart and the CLI find them: one Lease per release in the guard's namespace (the claim
//! books' kind, so no new permission), its writers as JSON in an annotation. Helm's records are
//! never edited to keep them.
//!
//! A CREATE the guard allows is only an offer: the API server may still refuse it, and anyone on
//! the pod network can send the guard a review the API server never sent. The writer is
//! remembered once the watch shows the record stored, created no earlier than the offer; two
//! offers of one record by different writers cancel out. So a forged review can keep a writer
//! from being known (the age rule then stands), not name a false one, and it never makes the
//! guard write: offers are bounded in number and age, and only a stored record is attributed.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};

use super::events::{EventQueue, Notice};
use super::index::ReleaseIndex;
use crate::release::ReleaseKey;
use crate::release::history::{CHURN_PER_HOUR, revisions_within};
use crate::release::writer::{Liveness, ReleaseWriters, Writer};

/// The label of the writers' Leases.
pub(crate) const WRITERS_LABEL: &str = "helm-guard.io/writers";
/// The annotation that holds a release's writers, as JSON.
const WRITERS_ANNOTATION: &str = "helm-guard.io/writers";
const NAMESPACE_ANNOTATION: &str = "helm-guard.io/release-namespace";
const RELEASE_ANNOTATION: &str = "helm-guard.io/release";
/// Offers kept waiting for their record at most; more drop the oldest.
const MAX_OFFERS: usize = 1024;
/// How long an offer waits for the watch to show its record.
const OFFER_TTL: Duration = Duration::from_secs(30);
/// How long a pod's answer is reused.
const POD_ANSWER_TTL: Duration = Duration::from_secs(3);

/// The Lease of a release's writers: `helm-guard-writers.NAMESPACE.RELEASE` (a namespace has no
/// dot, so the name is unambiguous; at most 136 characters).
pub(crate) fn lease_name(namespace: &str, release: &str) -> String {
    format!("helm-guard-writers.{namespace}.{release}")
}

/// (namespace, release)
type Release = (String, String);
/// When the API server was asked about a pod, and the uid it said is under the pod's name.
type PodAnswer = (Instant, Option<String>);

#[derive(Debug)]
struct Offer {
    key: ReleaseKey,
    object: String,
    revision: u32,
    writer: Writer,
    /// Unix seconds when offered: the record must be created no earlier.
    at: i64,
    since: Instant,
}

/// The writers of every release, as the Leases say, and the offers waiting for their records.
pub(crate) struct Writers {
    namespace: String,
    leases: Api<Lease>,
    client: kube::Client,
    offers: Mutex<Vec<Offer>>,
    known: Mutex<HashMap<Release, ReleaseWriters>>,
    pods: Mutex<HashMap<(String, String), PodAnswer>>,
    /// The pending latest revisions and whether their writers run, as last judged
    /// (`cluster::unlock`): what the metrics, the pod mutation and the reports read, without a call.
    judged: Mutex<HashMap<ReleaseKey, (u32, Liveness)>>,
}

impl std::fmt::Debug for Writers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writers").field("leases", &self.leases.resource_url()).finish_non_exhaustive()
    }
}

impl Writers {
    /// Writers kept as Leases in `namespace`.
    pub(crate) fn new(client: kube::Client, namespace: &str) -> Writers {
        Writers {
            namespace: namespace.to_owned(),
            leases: Api::namespaced(client.clone(), namespace),
            client,
            offers: Mutex::default(),
            known: Mutex::default(),
            pods: Mutex::default(),
            judged: Mutex::default(),
        }
    }

    /// The guard's namespace, where the Leases are.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A CREATE of `object` (revision `revision` of `key`) by `writer` was allowed.
    pub(crate) fn offer(&self, key: &ReleaseKey, object: &str, revision: u32, writer: Writer) {
        let mut offers = self.offers.lock().unwrap_or_else(PoisonError::into_inner);
        if offers.len() >= MAX_OFFERS {
            offers.remove(0);
        }
        let at = jiff::Timestamp::now().as_second();
        offers.push(Offer {
            key: key.clone(),
            object: object.to_owned(),
            revision,
            writer,
            at,
            since: Instant::now(),
        });
    }

    /// The owner of a release: the writer of its earliest revision attributed.
    pub(crate) fn owner(&self, namespace: &str, release: &str) -> Option<Writer> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(&(namespace.to_owned(), release.to_owned())).and_then(|w| w.owner.clone())
    }

    /// The writer of one revision, when remembered.
    pub(crate) fn writer_of(&self, namespace: &str, release: &str, revision: u32) -> Option<Writer> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(&(namespace.to_owned(), release.to_owned())).and_then(|w| w.of(revision).cloned())
    }

    /// Whether the writer of `revision`, the pending latest of `key`, runs, as last judged;
    /// `Unknown` when it was not (yet).
    pub(crate) fn judged(&self, key: &ReleaseKey, revision: u32) -> Liveness {
        let judged = self.judged.lock().unwrap_or_else(PoisonError::into_inner);
        judged.get(key).filter(|(judged, _)| *judged == revision).map_or(Liveness::Unknown, |(_, l)| *l)
    }

    /// Keeps the judgement of the pending latest revisions in `pending`, and only them.
    pub(crate) fn set_judged(&self, pending: HashMap<ReleaseKey, (u32, Liveness)>) {
        *self.judged.lock().unwrap_or_else(PoisonError::into_inner) = pending;
    }

    /// Whether `writer` still runs: its pod asked of the API server (answers reused briefly).
    pub(crate) async fn liveness(&self, writer: Option<&Writer>) -> Liveness {
        let Some(writer) = writer else { return Liveness::Unknown };
        let Some(pod) = &writer.pod else { return Liveness::NoPod };
        let key = (pod.namespace.clone(), pod.name.clone());
        let cached = self.pods.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
        let uid = match cached.filter(|(at, _)| at.elapsed() < POD_ANSWER_TTL) {
            Some((_, uid)) => uid,
            None => match pod_uid(&self.client, &pod.namespace, &pod.name).await {
                Ok(uid) => {
                    let mut pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
                    pods.retain(|_, (at, _)| at.elapsed() < POD_ANSWER_TTL);
                    pods.insert(key, (Instant::now(), uid.clone()));
                    uid
                }
                Err(error) => {
                    tracing::debug!(%error, pod = %pod.name, "the writer's pod could not be asked about");
                    return Liveness::Unknown;
                }
            },
        };
        Liveness::of_pod(writer, uid.as_deref())
    }

    /// Attributes the offers whose records the watch shows stored; drops the expired and the
    /// ambiguous ones. A revision that takes its release past the churn threshold is told as an
    /// Event on the record and its HelmChart, naming its writer.
    async fn attribute(&self, index: &ReleaseIndex, events: Option<&EventQueue>) {
        let ready: Vec<Offer> = {
            let mut offers = self.offers.lock().unwrap_or_else(PoisonError::into_inner);
            offers.retain(|offer| offer.since.elapsed() < OFFER_TTL);
            let mut ready = Vec::new();
            let mut waiting = Vec::new();
            for offer in offers.drain(..) {
                let created = index
                    .history(&offer.key)
                    .iter()
                    .find(|facts| facts.revision == offer.revision)
                    .and_then(|facts| facts.stored_at);
                match created {
                    // Created after the offer, to the second (the API server's clock and ours).
                    Some(created) if created + 2 >= offer.at => ready.push(offer),
                    // A record created before the offer: the offer is not its creation.
                    Some(_) => {}
                    None => waiting.push(offer),
                }
            }
            *offers = waiting;
            ready
        };
        let mut by_object: BTreeMap<(String, String), Vec<Offer>> = BTreeMap::new();
        for offer in ready {
            by_object.entry((offer.key.namespace.clone(), offer.object.clone())).or_default().push(offer);
        }
        for ((namespace, object), offers) in by_object {
            let Some(first) = offers.first() else { continue };
            if offers.iter().any(|o| o.writer != first.writer) {
                tracing::warn!(%namespace, %object, "two writers claimed one record's creation: its writer stays unknown");
                continue;
            }
            if let Err(error) = self.remember(&first.key, first.revision, first.writer.clone()).await {
                tracing::warn!(%error, release = %first.key, "the writer of a revision could not be remembered");
            }
            if let Some(events) = events {
                churn(index, events, first, &object);
            }
        }
    }

    /// Adds one revision's writer to the release's Lease (created when missing; a conflict read
    /// again, a few times).
    async fn remember(&self, key: &ReleaseKey, revision: u32, writer: Writer) -> Result<(), kube::Error> {
        let name = lease_name(&key.namespace, &key.release);
        for _ in 0..3 {
            let stored = self.leases.get_opt(&name).await?;
            let mut lease = stored.clone().unwrap_or_else(|| Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some([(WRITERS_LABEL.to_owned(), "true".to_owned())].into()),
                    annotations: Some(
                        [
                            (NAMESPACE_ANNOTATION.to_owned(), key.namespace.clone()),
                            (RELEASE_ANNOTATION.to_owned(), key.release.clone()),
                        ]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                ..Lease::default()
            });
            let mut writers = read_lease(&lease).map(|(_, w)| w).unwrap_or_default();
            writers.remember(revision, writer.clone());
            let json = serde_json::to_string(&writers).unwrap_or_default();
            lease.metadata.annotations.get_or_insert_default().insert(WRITERS_ANNOTATION.to_owned(), json);
            let done = match stored {
                Some(_) => self.leases.replace(&name, &PostParams::default(), &lease).await,
                None => self.leases.create(&PostParams::default(), &lease).await,
            };
            match done {
                Ok(lease) => {
                    self.apply(&lease);
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    fn apply(&self, lease: &Lease) {
        if let Some((release, writers)) = read_lease(lease) {
            self.known.lock().unwrap_or_else(PoisonError::into_inner).insert(release, writers);
        }
    }

    fn forget(&self, lease: &Lease) {
        if let Some((release, _)) = read_lease(lease) {
            self.known.lock().unwrap_or_else(PoisonError::into_inner).remove(&release);
        }
    }
}

/// Tells of a revision created in a loop: more than [`CHURN_PER_HOUR`] in the last hour.
fn churn(index: &ReleaseIndex, events: &EventQueue, offer: &Offer, object: &str) {
    let history = index.history(&offer.key);
    let created = revisions_within(&history, jiff::Timestamp::now().as_second(), 3600, None);
    if created <= CHURN_PER_HOUR {
        return;
    }
    let (namespace, release) = (&offer.key.namespace, &offer.key.release);
    let notice = Notice {
        namespace: namespace.clone(),
        api_version: "v1".to_owned(),
        kind: offer.key.driver.kind().to_owned(),
        name: object.to_owned(),
        uid: None,
        action: "Create".to_owned(),
        reason: "RevisionChurn".to_owned(),
        note: format!(
            "release {namespace}/{release} has had {created} revisions created in the last hour, revision {} by {}: a writer \
             upgrading in a loop fills etcd. See `helm history {release} -n {namespace}`; cap it with the namespace label \
             helm-guard.io/max-revisions-per-hour, cut the history with `helm-guard prune {release} -n {namespace} --keep N`",
            offer.revision,
            offer.writer.describe()
        ),
        type_: "Warning",
        watched: false,
    };
    if let Some(chart) = index.charts().managing(namespace, release) {
        events.offer(notice.about_chart(&chart));
    }
    events.offer(notice);
}

/// The release a writers' Lease is about and the writers it holds.
fn read_lease(lease: &Lease) -> Option<(Release, ReleaseWriters)> {
    let annotations = lease.metadata.annotations.as_ref()?;
    let release =
        (annotations.get(NAMESPACE_ANNOTATION)?.clone(), annotations.get(RELEASE_ANNOTATION)?.clone());
    let writers = annotations.get(WRITERS_ANNOTATION).and_then(|json| serde_json::from_str(json).ok());
    Some((release, writers.unwrap_or_default()))
}

/// The uid of the pod under `name` while it can still run: `None` when there is none, or when
/// it has ended (`Succeeded`, `Failed`: a writer's container killed, by the OOM killer say, under
/// `restartPolicy: Never` leaves its pod behind, with no one in it to finish the operation).
pub(crate) async fn pod_uid(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods.get_opt(name).await?;
    let ended = |pod: &Pod| {
        let phase = pod.status.as_ref().and_then(|status| status.phase.as_deref());
        matches!(phase, Some("Succeeded" | "Failed"))
    };
    Ok(pod.filter(|pod| !ended(pod)).and_then(|pod| pod.metadata.uid))
}

/// Every release's writers in `namespace` (the CLI's read): (namespace, release) to writers.
pub(crate) async fn list_writers(
    client: &kube::Client,
    namespace: &str,
) -> Result<HashMap<Release, ReleaseWriters>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let listed = leases.list(&ListParams::default().labels(&format!("{WRITERS_LABEL}=true"))).await?;
    Ok(listed.items.iter().filter_map(read_lease).collect())
}

/// The writers of the releases among `objects` (records as listed) whose latest revision is
/// pending by its labels, and whether their pods run: what `scan` and `repair` judge a pending
/// revision by. Read from the guard's Leases in `guard_namespace`; none, with a warning, for a
/// user who may not read them.
pub(crate) async fn pending_writers(
    client: &kube::Client,
    guard_namespace: &str,
    objects: &[serde_json::Value],
) -> crate::release::scan::LatestWriters {
    let mut latest: HashMap<Release, (u32, bool)> = HashMap::new();
    for record in objects.iter().filter_map(|o| crate::release::Record::from_object(o, None).ok().flatten()) {
        let release = (record.id.key.namespace.clone(), record.id.key.release.clone());
        let pending = record.status_label().is_some_and(crate::release::Status::is_pending);
        let entry = latest.entry(release).or_insert((record.id.revision, pending));
        if record.id.revision > entry.0 {
            *entry = (record.id.revision, pending);
        }
    }
    latest.retain(|_, (_, pending)| *pending);
    let mut found = crate::release::scan::LatestWriters::new();
    if latest.is_empty() {
        return found;
    }
    let known = match list_writers(client, guard_namespace).await {
        Ok(known) => known,
        Err(error) => {
            eprintln!(
                "warning: could not read the writers helm-guard remembers in namespace {guard_namespace} ({error}): pending revisions are judged by age alone"
            );
            return found;
        }
    };
    for (release, (revision, _)) in latest {
        let Some(writer) = known.get(&release).and_then(|w| w.of(revision)).cloned() else { continue };
        let liveness = match &writer.pod {
            None => Liveness::NoPod,
            Some(pod) => match pod_uid(client, &pod.namespace, &pod.name).await {
                Ok(uid) => Liveness::of_pod(&writer, uid.as_deref()),
                Err(error) => {
                    eprintln!("warning: could not ask about pod {}/{} ({error})", pod.namespace, pod.name);
                    Liveness::Unknown
                }
            },
        };
        found.insert(release, (writer, liveness));
    }
    found
}

/// Keeps `writers` current from a watch of the Leases and attributes offers as the `index`
/// shows their records: runs until the process ends.
pub(crate) async fn run(writers: Arc<Writers>, index: Arc<ReleaseIndex>, events: Option<EventQueue>) {
    let watch = {
        let writers = writers.clone();
        let config = watcher::Config::default().labels(&format!("{WRITERS_LABEL}=true"));
        watcher(writers.leases.clone(), config).default_backoff().for_each(move |event| {
            match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => writers.apply(&lease),
                Ok(watcher::Event::Delete(lease)) => writers.forget(&lease),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(error) => tracing::debug!(%error, "the writers' watch restarts"),
            }
            std::future::ready(())
        })
    };
    let attribute = async {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            writers.attribute(&index, events.as_ref()).await;
        }
    };
    tokio::join!(watch, attribute);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_name_is_unambiguous_and_within_the_limit() {
        let name = lease_name(&"n".repeat(63), &"r".repeat(53));
        assert!(name.len() <= 253, "{}", name.len());
        assert_eq!(lease_name("shop", "web.v2"), "helm-guard-writers.shop.web.v2");
    }

    #[test]
    fn a_lease_is_read_back_as_the_release_and_its_writers() {
        let mut writers = ReleaseWriters::default();
        writers.remember(1, Writer::of_request("system:serviceaccount:flux:helm", None));
        let lease = Lease {
            metadata: ObjectMeta {
                annotations: Some(
                    [
                        (NAMESPACE_ANNOTATION.to_owned(), "shop".to_owned()),
                        (RELEASE_ANNOTATION.to_owned(), "web".to_owned()),
                        (WRITERS_ANNOTATION.to_owned(), serde_json::to_string(&writers).unwrap()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..Lease::default()
        };
        assert_eq!(read_lease(&lease), Some((("shop".to_owned(), "web".to_owned()), writers)));
    }
}
