//! The live source without a cluster: the index fed with watcher events reaches the same state as
//! the snapshot source for the same objects.

use crate::common;

use std::time::Duration;

use common::*;
use helm_guard::cluster::feed::{NamespaceFeed, RecordFeed};
use helm_guard::cluster::{ReleaseIndex, SourceKind, snapshot};
use helm_guard::release::{DecodeLimits, Driver, ReleaseKey, ReleaseState};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

/// What a metadata watch delivers for an object: its metadata and nothing else.
fn meta<K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned>(
    object: &Value,
) -> PartialObjectMeta<K> {
    serde_json::from_value(json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": object["metadata"],
    }))
    .unwrap()
}

fn snapshot_items() -> Vec<Value> {
    fixture("snapshot/cluster-snapshot.json")["items"].as_array().unwrap().clone()
}

fn live_index() -> ReleaseIndex {
    ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(30) })
}

#[test]
fn an_initial_list_matches_the_snapshot_source() {
    let items = snapshot_items();
    let dir = tempfile::tempdir().unwrap();
    let path = write_temp(&dir, "snapshot.json", &list(items.clone()));
    let from_snapshot = ReleaseIndex::new(SourceKind::Snapshot);
    snapshot::load(&from_snapshot, &path, DecodeLimits::default()).unwrap();

    let from_watch = live_index();
    let mut feed = RecordFeed::new(Driver::Secret);
    assert!(!feed.apply(&from_watch, Event::<PartialObjectMeta<Secret>>::Init));
    for item in &items {
        assert!(!feed.apply(&from_watch, Event::InitApply(meta::<Secret>(item))));
    }
    assert!(
        feed.apply(&from_watch, Event::<PartialObjectMeta<Secret>>::InitDone),
        "InitDone completes the list"
    );

    assert_eq!(from_watch.revision_count(), from_snapshot.revision_count());
    for (namespace, release) in [
        ("demo", "web"),
        ("orphan", "app"),
        ("pending", "first"),
        ("pending", "gone"),
        ("pending", "rb"),
        ("stuck", "job"),
    ] {
        let key = secret_release(namespace, release);
        assert_eq!(
            indexed_release(&from_watch, &key),
            indexed_release(&from_snapshot, &key),
            "{namespace}/{release}"
        );
    }
}

#[test]
fn apply_and_delete_events_keep_the_index_current() {
    let items = snapshot_items();
    let index = live_index();
    let mut feed = RecordFeed::new(Driver::Secret);
    feed.apply(&index, Event::<PartialObjectMeta<Secret>>::Init);
    for item in &items {
        feed.apply(&index, Event::InitApply(meta::<Secret>(item)));
    }
    feed.apply(&index, Event::<PartialObjectMeta<Secret>>::InitDone);

    // orphan/app gets an upgrade: revision 2 created deployed.
    let app_v1 = items.iter().find(|i| i["metadata"]["name"] == "sh.helm.release.v1.app.v1").unwrap();
    let app_v2 = rewrite(app_v1, 2, "deployed");
    feed.apply(&index, Event::Apply(meta::<Secret>(&app_v2)));
    assert_eq!(indexed_release(&index, &secret_release("orphan", "app")).1, ReleaseState::Healthy);

    // demo/web's failed revision 4 is deleted: revision 3 (deployed) is the latest.
    let web_v4 = items.iter().find(|i| i["metadata"]["name"] == "sh.helm.release.v1.web.v4").unwrap();
    feed.apply(&index, Event::Delete(meta::<Secret>(web_v4)));
    assert_eq!(indexed_release(&index, &secret_release("demo", "web")).1, ReleaseState::Healthy);

    // A re-list that no longer holds pending/rb drops it.
    feed.apply(&index, Event::<PartialObjectMeta<Secret>>::Init);
    for item in items.iter().filter(|i| i["metadata"]["labels"]["name"] != "rb") {
        feed.apply(&index, Event::InitApply(meta::<Secret>(item)));
    }
    feed.apply(&index, Event::<PartialObjectMeta<Secret>>::InitDone);
    assert!(index.history(&secret_release("pending", "rb")).is_empty());
    assert_eq!(
        indexed_release(&index, &secret_release("demo", "web")).1,
        ReleaseState::Failed,
        "the re-list is the truth"
    );
}

/// An UPDATE that changes a record's `name` label (another release's record now), then its
/// `owner` to the fence's (no record, though the watch still selects it), takes it out of the
/// release it was indexed under each time: the one its name says (Helm's), then one it does not
/// (remembered). Else the index would hold a record that is not stored.
#[test]
fn a_record_whose_labels_moved_it_leaves_the_release_it_was_under() {
    let index = live_index();
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    relist(&index, &records);
    let mut feed = RecordFeed::new(Driver::Secret);
    let release = |name: &str| {
        let key = ReleaseKey { release: name.into(), ..web_key() };
        index.history(&key).iter().map(|facts| facts.revision).collect::<Vec<u32>>()
    };
    assert_eq!((release("web"), release("api")), (vec![1, 2], vec![]));
    let mut moved = records[0].clone();
    moved["metadata"]["labels"]["name"] = json!("api");
    feed.apply(&index, Event::Apply(meta::<Secret>(&moved)));
    assert_eq!((release("web"), release("api")), (vec![2], vec![1]), "another release's record now");
    moved["metadata"]["labels"]["owner"] = json!("helm-guard-fence");
    feed.apply(&index, Event::Apply(meta::<Secret>(&moved)));
    assert_eq!((release("web"), release("api")), (vec![2], vec![]), "no record now");
    assert_eq!(index.revision_count(), 1);
    // A record named apart as a relist brings it, then as a listing of its release does.
    let mut apart = records[1].clone();
    apart["metadata"]["labels"]["name"] = json!("api");
    relist(&index, std::slice::from_ref(&apart));
    let fenced = |mut object: Value, at: u64| {
        object["metadata"]["labels"]["owner"] = json!("helm-guard-fence");
        object["metadata"]["resourceVersion"] = json!(at.to_string());
        Event::Apply(meta::<Secret>(&object))
    };
    feed.apply(&index, fenced(apart.clone(), 900));
    assert_eq!(release("api"), Vec::<u32>::new(), "named apart in a relist");
    apart["metadata"]["resourceVersion"] = json!("901");
    let listed =
        helm_guard::cluster::IndexedRecord::from_meta(Driver::Secret, &meta::<Secret>(&apart).metadata);
    let listing =
        helm_guard::cluster::Listing { records: listed.into_iter().collect(), resource_version: None };
    index.sync_release(&ReleaseKey { release: "api".into(), ..web_key() }, listing);
    assert_eq!(release("api"), vec![2]);
    feed.apply(&index, fenced(apart, 902));
    assert_eq!(release("api"), Vec::<u32>::new(), "named apart in a listing");
}

#[test]
fn a_configmap_watch_ignores_configmaps_that_are_not_records() {
    let index = live_index();
    let mut feed = RecordFeed::new(Driver::ConfigMap);
    let record = helm3_configmap();
    let stray = json!({"metadata": {"name": "settings", "namespace": "cm", "labels": {"owner": "helm"}}});
    feed.apply(&index, Event::Apply(meta::<k8s_openapi::api::core::v1::ConfigMap>(&record)));
    feed.apply(&index, Event::Apply(meta::<k8s_openapi::api::core::v1::ConfigMap>(&stray)));
    assert_eq!(index.revision_count(), 1);
    let key = ReleaseKey { driver: Driver::ConfigMap, namespace: "cm".into(), release: "api".into() };
    assert_eq!(indexed_release(&index, &key).1, ReleaseState::Healthy);
}

#[test]
fn namespace_events_carry_the_mode_label_and_teardown() {
    let index = live_index();
    let mut feed = NamespaceFeed::default();
    let labelled = json!({"metadata": {"name": "demo", "labels": {"helm-guard.io/mode": "audit"}}});
    let going = json!({"metadata": {"name": "old", "deletionTimestamp": "2026-11-29T16:00:00Z"}});
    feed.apply(&index, Event::<PartialObjectMeta<Namespace>>::Init);
    feed.apply(&index, Event::InitApply(meta::<Namespace>(&labelled)));
    assert!(feed.apply(&index, Event::<PartialObjectMeta<Namespace>>::InitDone));
    assert_eq!(index.namespaces().get("demo").mode, Some(helm_guard::policy::Mode::Audit));
    feed.apply(&index, Event::Apply(meta::<Namespace>(&going)));
    assert!(index.namespaces().get("old").terminating);
    feed.apply(&index, Event::Delete(meta::<Namespace>(&going)));
    assert!(!index.namespaces().get("old").terminating);
}

/// How far the index holds the record watch (what a fence round waits for): a (re-)list counts
/// once swapped in whole, a change once applied; a fence object moves it without being a record;
/// each driver's watch counts for its own records only.
#[test]
fn the_watch_progress_is_what_the_index_holds() {
    let index = live_index();
    let mut feed = RecordFeed::new(Driver::Secret);
    let at = |mut item: Value, rv: &str| {
        item["metadata"]["resourceVersion"] = json!(rv);
        meta::<Secret>(&item)
    };
    let items = snapshot_items();
    feed.apply(&index, Event::<PartialObjectMeta<Secret>>::Init);
    feed.apply(&index, Event::InitApply(at(items[0].clone(), "10")));
    feed.apply(&index, Event::InitApply(at(items[1].clone(), "12")));
    assert_eq!(index.progress().through(Driver::Secret), 0, "half a list is not held yet");
    feed.apply(&index, Event::<PartialObjectMeta<Secret>>::InitDone);
    assert_eq!(index.progress().through(Driver::Secret), 12);
    let revisions = index.revision_count();
    let (name, value) = helm_guard::cluster::fence::FENCE_LABEL;
    let fence = json!({"metadata": {"name": helm_guard::cluster::fence::FENCE_NAME, "namespace": "helm-guard",
        "labels": {name: value}, "resourceVersion": "15"}});
    feed.apply(&index, Event::Apply(meta::<Secret>(&fence)));
    assert_eq!(index.progress().through(Driver::Secret), 15, "the fence's own event");
    assert_eq!(index.revision_count(), revisions, "a fence is not a record");
    feed.apply(&index, Event::Delete(at(items[0].clone(), "16")));
    assert_eq!(index.progress().through(Driver::Secret), 16);
    feed.apply(&index, Event::Apply(at(items[1].clone(), "14")));
    assert_eq!(index.progress().through(Driver::Secret), 16, "never backwards");
    assert_eq!(index.progress().through(Driver::ConfigMap), 0, "the other driver's watch is its own");
}

/// An API server whose fence round completes after the record watch re-listed (a reconnect to
/// another API server of an HA control plane, whose cache may lag what the watch had brought):
/// the round's proof was about the index before the relist.
#[derive(Debug)]
struct RelistDuringRound {
    stored: Vec<Value>,
    index: std::sync::Arc<ReleaseIndex>,
    relist: bool,
    /// Fence rounds waited on.
    rounds: std::sync::atomic::AtomicUsize,
}

impl RelistDuringRound {
    fn new(stored: &[Value], index: &std::sync::Arc<ReleaseIndex>, relist: bool) -> RelistDuringRound {
        RelistDuringRound {
            stored: stored.to_vec(),
            index: index.clone(),
            relist,
            rounds: Default::default(),
        }
    }
}

impl helm_guard::cluster::PayloadFetcher for RelistDuringRound {
    fn fetch<'a>(
        &'a self,
        key: &'a ReleaseKey,
        names: &'a [String],
        _: std::time::Instant,
    ) -> futures::future::BoxFuture<'a, Vec<(String, helm_guard::cluster::Fetched)>> {
        let named = |name: &String| self.stored.iter().find(|o| o["metadata"]["name"] == name.as_str());
        Box::pin(std::future::ready(
            names.iter().map(|name| (name.clone(), fetched(named(name), key))).collect(),
        ))
    }

    fn list<'a>(
        &'a self,
        _: &'a ReleaseKey,
        _: helm_guard::cluster::Payloads,
        _: std::time::Instant,
    ) -> futures::future::BoxFuture<'a, Option<helm_guard::cluster::Listing>> {
        Box::pin(std::future::ready(None))
    }

    fn caught_up(&self, _: Driver, _: std::time::Instant) -> futures::future::BoxFuture<'_, bool> {
        self.rounds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.relist {
            relist(&self.index, &self.stored);
        }
        Box::pin(std::future::ready(true))
    }
}

fn relist(index: &ReleaseIndex, objects: &[Value]) {
    let mut feed = RecordFeed::new(Driver::Secret);
    feed.apply(index, Event::<PartialObjectMeta<Secret>>::Init);
    for object in objects {
        feed.apply(index, Event::InitApply(meta::<Secret>(object)));
    }
    feed.apply(index, Event::<PartialObjectMeta<Secret>>::InitDone);
}

/// A live guard on `fetcher`'s API server and index.
fn guard_on(fetcher: std::sync::Arc<RelistDuringRound>) -> helm_guard::admission::Admission {
    let index = fetcher.index.clone();
    let live = helm_guard::admission::LiveParts {
        fetcher: Some(fetcher),
        ..helm_guard::admission::LiveParts::default()
    };
    let settings = helm_guard::admission::Settings::new(helm_guard::policy::PolicyConfig::default());
    helm_guard::admission::Admission::new(index, settings, live, Default::default())
}

/// The confirmations of a live guard on `fetcher`'s API server and index.
fn freshness_on(fetcher: RelistDuringRound) -> helm_guard::cluster::freshness::Freshness {
    let index = fetcher.index.clone();
    helm_guard::cluster::freshness::Freshness::new(
        std::sync::Arc::new(fetcher),
        index,
        Default::default(),
        Default::default(),
    )
}

/// Helm's first purge request after its UPDATE marked the latest `uninstalling`: the watch
/// brought that update's labels, not its payload. Read alone at the version the watch brought,
/// the view is still one its watch brought and the purge holds with no fence round
/// (POLICY.md, "A view that lags"); a read that finds a later version (a write the watch has
/// not brought) puts the view ahead, and the round is waited for.
#[test]
fn the_purges_first_request_reads_the_marked_latest_and_waits_on_no_round() {
    let stored_at = |revisions: &[(u32, &str)], versions: &[u64]| {
        let mut records = web(revisions);
        for ((at, record), version) in records.iter_mut().enumerate().zip(versions) {
            record["metadata"]["uid"] = json!(format!("uid-{at}"));
            record["metadata"]["resourceVersion"] = json!(version.to_string());
        }
        records
    };
    let before = stored_at(&[(1, "superseded"), (2, "failed"), (3, "deployed")], &[10, 11, 12]);
    let marked = stored_at(&[(1, "superseded"), (2, "failed"), (3, "uninstalling")], &[10, 11, 13]);
    for (stored_latest, rounds) in [(13, 0), (14, 1)] {
        let mut stored = marked.clone();
        stored[2]["metadata"]["resourceVersion"] = json!(stored_latest.to_string());
        let index = std::sync::Arc::new(live_index());
        relist(&index, &before);
        index.set_ready(true);
        let fetcher = std::sync::Arc::new(RelistDuringRound::new(&stored, &index, false));
        let admission = guard_on(fetcher.clone());
        // Every payload read (the read-ahead), then the watch brings Helm's UPDATE of revision 3.
        let freshness = freshness_on(RelistDuringRound::new(&before, &index, false));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        futures::executor::block_on(freshness.read(&web_key(), None, deadline));
        RecordFeed::new(Driver::Secret).apply(&index, Event::Apply(meta::<Secret>(&marked[2])));
        assert_eq!(index.unverified(&web_key(), None).len(), 1, "the marked latest's new payload unread");
        let decided = decide(&admission, &delete_review(&stored[0]));
        assert_eq!((decided.0, decided.1.as_str()), (true, "uninstall-purge"), "stored at {stored_latest}");
        assert_eq!(
            fetcher.rounds.load(std::sync::atomic::Ordering::SeqCst),
            rounds,
            "fence rounds, the marked latest stored at {stored_latest} (the watch brought 13)"
        );
    }
}

/// A verdict confirmed by a fence round holds only if no relist was swapped in meanwhile (one may
/// have taken the index back below what the round showed): Helm's pruning of revision 1 is
/// approved when the watch went on, and refused "retry" when it re-listed during the round.
#[test]
fn a_relist_during_the_confirmation_leaves_an_approval_nothing_to_rest_on() {
    let mut stored = web(&[(1, "superseded"), (2, "deployed")]);
    for (at, record) in stored.iter_mut().enumerate() {
        record["metadata"]["uid"] = json!(format!("uid-{at}"));
        record["metadata"]["resourceVersion"] = json!(format!("{}", 10 + at));
    }
    for (relisted, expected) in [(false, (true, "history-pruning")), (true, (false, "unread-history"))] {
        let index = std::sync::Arc::new(live_index());
        relist(&index, &stored);
        index.set_ready(true);
        let admission = guard_on(std::sync::Arc::new(RelistDuringRound::new(&stored, &index, relisted)));
        let decided = decide(&admission, &delete_review(&stored[0]));
        assert_eq!((decided.0, decided.1.as_str()), expected, "relisted during the round: {relisted}");
    }
}

/// The count of relists a confirmation holds within: the one it ran in, and no longer once
/// another relist is swapped in.
#[tokio::test]
async fn a_confirmation_holds_only_within_the_relists_it_counted() {
    let stored = web(&[(1, "superseded"), (2, "deployed")]);
    let index = std::sync::Arc::new(live_index());
    relist(&index, &stored);
    let freshness = freshness_on(RelistDuringRound::new(&stored, &index, false));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    // Asked about revision 1: one other record unread, so a fence round, not a listing.
    let asked = stored[0]["metadata"]["name"].as_str();
    let confirmed = freshness.confirm(&web_key(), asked, deadline).await;
    assert_eq!(confirmed, Some(index.relists(Driver::Secret)), "confirmed within the relist it counted");
    relist(&index, &stored);
    assert_ne!(
        confirmed,
        Some(index.relists(Driver::Secret)),
        "a relist since: the confirmation holds nothing"
    );
}
