//! The server decides each request inline first, on the async worker that read it, where no
//! call may wait on the API server (it holds no `Blocking` token); a verdict that must wait hands
//! the request on with nothing changed, and is decided where waiting is allowed. One test per
//! path that waits: confirming the history against what is stored (here), agreeing with the
//! other replicas (`tests/replicas.rs`,
//! `an_approval_another_could_turn_is_agreed_on_a_blocking_thread`), keeping a copy in the
//! recycle bin (`tests/recycle_bin.rs`,
//! `keeping_a_copy_is_never_done_inline_but_handed_to_where_it_may_wait`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::leases::{Replica, SharedLeases};
use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings, Webhook, review as admission_review};
use helm_guard::cluster::coordination::DeleteCoordinator;
use helm_guard::cluster::feed::record_from_meta;
use helm_guard::cluster::{Blocking, Fetched, IndexedRecord, PayloadFetcher};
use helm_guard::policy::PolicyConfig;
use helm_guard::release::{Driver, ReleaseKey};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// What the API server stores: listed (metadata) as a consistent read answers it, counted.
#[derive(Debug)]
struct Stored {
    objects: Vec<Value>,
    listings: AtomicUsize,
}

impl PayloadFetcher for Stored {
    fn fetch(&self, key: &ReleaseKey, names: &[String], _: Instant, _: &Blocking) -> Vec<(String, Fetched)> {
        let named = |name: &String| self.objects.iter().find(|o| o["metadata"]["name"] == name.as_str());
        names.iter().map(|name| (name.clone(), fetched(named(name), key))).collect()
    }

    fn list(&self, key: &ReleaseKey, _: Instant, _: &Blocking) -> Option<Vec<IndexedRecord>> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        Some(
            self.objects
                .iter()
                .filter_map(|o| {
                    let meta: ObjectMeta = serde_json::from_value(o["metadata"].clone()).unwrap();
                    record_from_meta(Driver::Secret, &meta)
                })
                .filter(|record| record.key == *key)
                .collect(),
        )
    }
}

/// The index lags what is stored: it has revisions 1 and 2, the store also has 3, deployed (an
/// upgrade the watch has not brought). Deleting revision 2 looks like deleting the latest
/// deployed revision; it is history pruning.
#[test]
fn confirming_the_history_is_never_done_inline_but_handed_to_where_it_may_wait() {
    let stored = web(&[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    let lagging = web(&[(1, "superseded"), (2, "deployed")]);
    let fetcher = Arc::new(Stored { objects: stored.clone(), listings: AtomicUsize::new(0) });
    let live =
        LiveParts { fetcher: Some(fetcher.clone() as Arc<dyn PayloadFetcher>), ..LiveParts::default() };
    let admission =
        common::guard::snapshot_admission_with(&lagging, Settings::new(PolicyConfig::default()), live);
    let body = serde_json::to_vec(&delete_review(&stored[1])).unwrap();
    let inline = admission.review(Webhook::Validate, admission_review::parse(&body).unwrap(), None);
    assert!(inline.is_err(), "asks to be decided where it may wait");
    assert_eq!(fetcher.listings.load(Ordering::SeqCst), 0, "nothing listed inline");
    assert_eq!(admission.index().history(&web_key()).len(), 2, "the index as it was");

    let reviewed = admission
        .review(Webhook::Validate, admission_review::parse(&body).unwrap(), Some(&blocking()))
        .unwrap();
    assert_eq!(fetcher.listings.load(Ordering::SeqCst), 1, "confirmed by one listing");
    assert!(reviewed.response.allowed, "{:?}", reviewed.response.result.message);
    assert_eq!(reviewed.response.audit_annotations["reason"], "history-pruning");
}

/// Which requests the server sends to the blocking pool before deciding them at all, so that a
/// live DELETE is decided once: DELETEs of records when the source is live; nothing in snapshot
/// mode, and no UPDATE or CREATE.
#[test]
fn a_live_delete_is_sent_where_it_may_wait_before_it_is_decided() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let fetcher = Arc::new(Stored { objects: records.clone(), listings: AtomicUsize::new(0) });
    let parts = LiveParts { fetcher: Some(fetcher as Arc<dyn PayloadFetcher>), ..LiveParts::default() };
    let live =
        common::guard::snapshot_admission_with(&records, Settings::new(PolicyConfig::default()), parts);
    let snapshot = common::guard::snapshot_admission(&records);
    let parse = |review: &Value| admission_review::parse(&serde_json::to_vec(review).unwrap()).unwrap();
    let delete = parse(&delete_review(&records[0]));
    let update = parse(&update_review(&records[1], &rewrite(&records[1], 2, "superseded")));
    assert!(live.waits_on_the_api(Webhook::Validate, &delete));
    assert!(!live.waits_on_the_api(Webhook::Validate, &update));
    assert!(!snapshot.waits_on_the_api(Webhook::Validate, &delete));
    // What it predicts holds: decided inline, the live DELETE would have asked to wait.
    assert!(live.review(Webhook::Validate, delete, None).is_err());
    assert!(live.review(Webhook::Validate, update, None).is_ok());
}

/// A live guard whose index holds `indexed` and whose API server stores `stored`.
fn live_guard(indexed: &[Value], stored: &[Value], coordinator: Option<Replica>) -> (Admission, Arc<Stored>) {
    let fetcher = Arc::new(Stored { objects: stored.to_vec(), listings: AtomicUsize::new(0) });
    let live = LiveParts {
        fetcher: Some(fetcher.clone() as Arc<dyn PayloadFetcher>),
        coordinator: coordinator.map(|c| Arc::new(c) as Arc<dyn DeleteCoordinator>),
        ..LiveParts::default()
    };
    (common::guard::snapshot_admission_with(indexed, Settings::new(PolicyConfig::default()), live), fetcher)
}

fn revisions(admission: &Admission) -> Vec<u32> {
    let mut revisions: Vec<u32> = admission.index().history(&web_key()).iter().map(|r| r.revision).collect();
    revisions.sort_unstable();
    revisions
}

/// A row of the table: what, the records, the review, the verdict, the listings it costs.
type Confirmation = (&'static str, Vec<Value>, Value, (bool, &'static str), usize);

/// What a live DELETE costs the API server, by what it is decided on: a verdict read off the rest
/// of the history is confirmed by one listing (the watch may lag), whichever way it goes; one
/// the rest of the history cannot turn (teardown of a namespace, a record that does not decode)
/// costs nothing; and a verdict of "could not read the rest" is confirmed too, because the
/// listing reads what was missing.
#[test]
fn which_live_verdicts_are_confirmed_against_what_is_stored() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let mut undecodable = records[0].clone();
    undecodable["data"]["release"] = Value::String("bm90IGEgcmVsZWFzZQ==".into());
    let teardown = |record: &Value| {
        as_user(delete_review(record), "system:serviceaccount:kube-system:namespace-controller", &[])
    };
    let cases: [Confirmation; 4] = [
        (
            "Helm pruning its history",
            records.clone(),
            delete_review(&records[0]),
            (true, "history-pruning"),
            1,
        ),
        (
            "the latest deployed revision",
            records.clone(),
            delete_review(&records[1]),
            (false, "latest-deployed-revision"),
            1,
        ),
        ("a namespace's teardown", records.clone(), teardown(&records[1]), (true, "namespace-teardown"), 0),
        (
            "a record that does not decode",
            vec![undecodable.clone(), records[1].clone()],
            delete_review(&undecodable),
            (true, "undecodable-record"),
            0,
        ),
    ];
    for (what, stored, review, (allowed, reason), listings) in cases {
        let (admission, store) = live_guard(&stored, &stored, None);
        assert_eq!(decide_where_it_may_wait(&admission, &review), (allowed, reason.to_owned()), "{what}");
        assert_eq!(store.listings.load(Ordering::SeqCst), listings, "{what}: listings");
    }

    // A guard just started knows revision 2 by its labels alone (the read-ahead has not read its
    // payload): deciding on the index says "could not read"; the listing reads it, and Helm's
    // pruning of revision 1 is approved.
    let (admission, store) = live_guard(&[], &records, None);
    let labels_only = records
        .iter()
        .map(|o| {
            let meta: ObjectMeta = serde_json::from_value(o["metadata"].clone()).unwrap();
            record_from_meta(Driver::Secret, &meta).unwrap()
        })
        .collect();
    admission.index().sync_release(&web_key(), labels_only);
    let first = records[0]["metadata"]["name"].as_str();
    assert_eq!(admission.index().unverified(&web_key(), first).len(), 1, "revision 2 not read yet");
    assert_eq!(
        decide_where_it_may_wait(&admission, &delete_review(&records[0])),
        (true, "history-pruning".to_owned())
    );
    assert_eq!(store.listings.load(Ordering::SeqCst), 1);
}

/// An approval confirmed against what is stored takes effect in the view at once (the record is
/// hidden until the watch brings its deletion; `inspect`, the metrics and the reports read the
/// view); one that still needs the other replicas' agreement takes effect only once agreed,
/// and not at all when no agreement comes.
#[test]
fn a_confirmed_approval_hides_the_record_unless_the_replicas_have_not_agreed() {
    // v1 and v2 both deployed, v3 failed: deleting v1 is approved, and needs agreement (deleting
    // v2 at the same time would leave nothing to roll back to).
    let records = web(&[(1, "deployed"), (2, "deployed"), (3, "failed")]);

    let (alone, _) = live_guard(&records, &records, None);
    assert_eq!(
        decide_where_it_may_wait(&alone, &delete_review(&records[0])),
        (true, "history-pruning".to_owned())
    );
    assert_eq!(revisions(&alone), [2, 3], "hidden once confirmed");

    let leases = Arc::new(SharedLeases::new(0));
    let (agreed, _) = live_guard(&records, &records, Some(Replica { leases: leases.clone(), name: "a" }));
    assert_eq!(
        decide_where_it_may_wait(&agreed, &delete_review(&records[0])),
        (true, "history-pruning".to_owned())
    );
    assert_eq!(revisions(&agreed), [2, 3], "hidden once agreed");

    let mut silent = SharedLeases::new(0);
    silent.unavailable = true;
    let (unagreed, _) = live_guard(&records, &records, Some(Replica { leases: Arc::new(silent), name: "a" }));
    assert_eq!(
        decide_where_it_may_wait(&unagreed, &delete_review(&records[0])),
        (false, "coordination-unavailable".to_owned())
    );
    assert_eq!(revisions(&unagreed), [1, 2, 3], "still there: the deletion did not happen");
}
