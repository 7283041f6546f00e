//! What a live DELETE waits on the API server for, and what it changes: a verdict read off the
//! rest of the history is confirmed against what is stored (one listing; the watch may lag),
//! one the rest cannot turn costs nothing, and an approval takes effect in the view only once
//! it stands. Agreeing with the other replicas: `src/tests/replicas.rs`; keeping a copy in the
//! recycle bin first: `src/tests/recycle_bin.rs`, `a_copy_is_stored_before_the_deletion_is_approved`.

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

use common::*;
use futures::future::BoxFuture;
use helm_guard::admission::{Admission, LiveParts, Settings};
use helm_guard::cluster::{Fetched, IndexedRecord, Listing, PayloadFetcher, Payloads};
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
    fn fetch<'a>(
        &'a self,
        key: &'a ReleaseKey,
        names: &'a [String],
        _: Instant,
    ) -> BoxFuture<'a, Vec<(String, Fetched)>> {
        let named = |name: &String| self.objects.iter().find(|o| o["metadata"]["name"] == name.as_str());
        Box::pin(std::future::ready(
            names.iter().map(|name| (name.clone(), fetched(named(name), key))).collect(),
        ))
    }

    fn list<'a>(&'a self, key: &'a ReleaseKey, _: Payloads, _: Instant) -> BoxFuture<'a, Option<Listing>> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        let listed = self
            .objects
            .iter()
            .filter_map(|o| {
                let meta: ObjectMeta = serde_json::from_value(o["metadata"].clone()).unwrap();
                IndexedRecord::from_meta(Driver::Secret, &meta)
            })
            .filter(|record| record.key == *key)
            .collect();
        Box::pin(std::future::ready(Some(Listing { records: listed, resource_version: None })))
    }
}

/// The index lags what is stored: it has revisions 1 and 2, the store also has 3, deployed (an
/// upgrade the watch has not brought). Deleting revision 2 looks like deleting the latest
/// deployed revision; it is history pruning, and the listing shows it.
#[test]
fn a_lagging_index_is_confirmed_by_one_listing() {
    let stored = web(&[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    let lagging = web(&[(1, "superseded"), (2, "deployed")]);
    let (admission, fetcher) = live_guard(&lagging, &stored);
    assert_eq!(decide(&admission, &delete_review(&stored[1])), (true, "history-pruning".to_owned()));
    assert_eq!(fetcher.listings.load(Ordering::SeqCst), 1, "confirmed by one listing");
}

/// A live guard whose index holds `indexed` and whose API server stores `stored`.
fn live_guard(indexed: &[Value], stored: &[Value]) -> (Admission, Arc<Stored>) {
    let fetcher = Arc::new(Stored { objects: stored.to_vec(), listings: AtomicUsize::new(0) });
    let live =
        LiveParts { fetcher: Some(fetcher.clone() as Arc<dyn PayloadFetcher>), ..LiveParts::default() };
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
/// costs nothing, and so does Helm's purge below the marked latest, when the view is the release
/// as its watch brought it, holds the record as stored and shows the release in the shape the
/// purge leaves it (POLICY.md, "A view that lags"); and a verdict of "could not read the rest" is confirmed too, because the listing
/// reads what was missing.
#[test]
fn which_live_verdicts_are_confirmed_against_what_is_stored() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let mut undecodable = records[0].clone();
    undecodable["data"]["release"] = Value::String("bm90IGEgcmVsZWFzZQ==".into());
    let teardown = |record: &Value| {
        as_user(delete_review(record), "system:serviceaccount:kube-system:namespace-controller", &[])
    };
    // As the API server stores them: a uid and a resourceVersion each.
    let stored_as = |mut records: Vec<Value>| {
        for (at, record) in records.iter_mut().enumerate() {
            record["metadata"]["uid"] = Value::String(format!("uid-{at}"));
            record["metadata"]["resourceVersion"] = Value::String(format!("{}", 100 + at));
        }
        records
    };
    let purging = stored_as(web(&[(1, "superseded"), (2, "failed"), (3, "uninstalling")]));
    let mut rewritten = purging[0].clone();
    rewritten["metadata"]["resourceVersion"] = Value::String("999".into());
    let with_deployed = stored_as(web(&[(1, "deployed"), (2, "superseded"), (3, "uninstalling")]));
    let cases: [Confirmation; 9] = [
        (
            "Helm's purge below the marked latest",
            purging.clone(),
            delete_review(&purging[0]),
            (true, "uninstall-purge"),
            0,
        ),
        (
            "Helm's purge of a failed revision",
            purging.clone(),
            delete_review(&purging[1]),
            (true, "uninstall-purge"),
            0,
        ),
        (
            "the marked latest, last",
            purging[2..].to_vec(),
            delete_review(&purging[2]),
            (true, "uninstall"),
            1,
        ),
        (
            "a purge the view holds an older object of (the watch has not brought its update)",
            purging.clone(),
            delete_review(&rewritten),
            (true, "uninstall-purge"),
            1,
        ),
        (
            "a purge beside a deployed revision",
            with_deployed.clone(),
            delete_review(&with_deployed[1]),
            (true, "uninstall-purge"),
            1,
        ),
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
        let (admission, store) = live_guard(&stored, &stored);
        assert_eq!(decide(&admission, &review), (allowed, reason.to_owned()), "{what}");
        assert_eq!(store.listings.load(Ordering::SeqCst), listings, "{what}: listings");
    }

    // The purge on a view that is not one state its watch brought: a listing of the release
    // found revision 3 gone before the watch brought its deletion (while other records may still
    // lag), so the view is confirmed first.
    let purging = stored_as(web(&[(1, "superseded"), (2, "failed"), (3, "superseded"), (4, "uninstalling")]));
    let (admission, store) = live_guard(&purging, &purging);
    let listed = [&purging[0], &purging[1], &purging[3]].map(|o| {
        IndexedRecord::from_meta(Driver::Secret, &serde_json::from_value(o["metadata"].clone()).unwrap())
            .unwrap()
    });
    admission.index().sync_release(&web_key(), Listing { records: listed.to_vec(), resource_version: None });
    assert_eq!(decide(&admission, &delete_review(&purging[0])), (true, "uninstall-purge".to_owned()));
    assert_eq!(store.listings.load(Ordering::SeqCst), 1, "a view a read moved ahead is confirmed");

    // A guard just started knows revision 2 by its labels alone (the read-ahead has not read its
    // payload): deciding on the index says "could not read"; the listing reads it, and Helm's
    // pruning of revision 1 is approved.
    let (admission, store) = live_guard(&[], &records);
    let labels_only = records
        .iter()
        .map(|o| {
            let meta: ObjectMeta = serde_json::from_value(o["metadata"].clone()).unwrap();
            IndexedRecord::from_meta(Driver::Secret, &meta).unwrap()
        })
        .collect();
    admission.index().sync_release(&web_key(), Listing { records: labels_only, resource_version: None });
    let first = records[0]["metadata"]["name"].as_str();
    assert_eq!(admission.index().unverified(&web_key(), first).len(), 1, "revision 2 not read yet");
    assert_eq!(decide(&admission, &delete_review(&records[0])), (true, "history-pruning".to_owned()));
    assert_eq!(store.listings.load(Ordering::SeqCst), 1);
}

/// An approval confirmed against what is stored takes effect in the view at once (the record is
/// hidden until the watch brings its deletion; `inspect`, the metrics and the reports read the
/// view). (One that also needs the replicas' agreement takes effect once agreed, and not at all
/// when no agreement comes: src/tests/replicas.rs.)
#[test]
fn a_confirmed_approval_hides_the_record_at_once() {
    // v1 and v2 both deployed, v3 failed: deleting v1 is approved.
    let records = web(&[(1, "deployed"), (2, "deployed"), (3, "failed")]);
    let (alone, _) = live_guard(&records, &records);
    assert_eq!(decide(&alone, &delete_review(&records[0])), (true, "history-pruning".to_owned()));
    assert_eq!(revisions(&alone), [2, 3], "hidden once confirmed");
}

/// An API server that answers a release's listing only once released: every decision that
/// confirms its history waits on it.
#[derive(Debug)]
struct HeldListing {
    stored: Stored,
    waiting: AtomicUsize,
    released: tokio::sync::watch::Sender<bool>,
}

impl PayloadFetcher for HeldListing {
    fn fetch<'a>(
        &'a self,
        key: &'a ReleaseKey,
        names: &'a [String],
        deadline: Instant,
    ) -> BoxFuture<'a, Vec<(String, Fetched)>> {
        self.stored.fetch(key, names, deadline)
    }

    fn list<'a>(
        &'a self,
        key: &'a ReleaseKey,
        payloads: Payloads,
        deadline: Instant,
    ) -> BoxFuture<'a, Option<Listing>> {
        Box::pin(async move {
            let mut released = self.released.subscribe();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let _ = released.wait_for(|released| *released).await;
            self.stored.list(key, payloads, deadline).await
        })
    }
}

/// A burst of 10,000 live DELETEs all waiting on the API server at once, on a runtime of two
/// workers and one blocking thread: a decision that waits holds no thread (with a thread per
/// waiting verdict, one would wait at a time and the rest would never start). Once the API
/// answers, every one is approved. `--nocapture` prints the memory the waiting burst took.
#[test]
fn ten_thousand_deletes_wait_on_the_api_at_once_without_a_thread_each() {
    const BURST: usize = 10_000;
    // As the API server stores them: each at a resourceVersion of its own.
    let mut records = web(&[(1, "superseded"), (2, "deployed")]);
    for (version, record) in records.iter_mut().enumerate() {
        record["metadata"]["resourceVersion"] = Value::String(format!("{}", 100 + version));
    }
    let held = Arc::new(HeldListing {
        stored: Stored { objects: records.clone(), listings: AtomicUsize::new(0) },
        waiting: AtomicUsize::new(0),
        released: tokio::sync::watch::Sender::new(false),
    });
    let live = LiveParts { fetcher: Some(held.clone() as Arc<dyn PayloadFetcher>), ..LiveParts::default() };
    let mut settings = Settings::new(PolicyConfig::default());
    settings.decision_deadline = std::time::Duration::from_secs(600);
    let admission = common::guard::snapshot_admission_with(&records, settings, live);
    let body = serde_json::to_vec(&delete_review(&records[0])).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let rss_before = resident_kib();
    runtime.block_on(async {
        let decisions: Vec<_> = (0..BURST)
            .map(|_| {
                let (admission, request) =
                    (admission.clone(), helm_guard::admission::review::parse(&body).unwrap());
                tokio::spawn(async move {
                    admission.review(helm_guard::admission::Webhook::Validate, request).await
                })
            })
            .collect();
        let started = std::time::Instant::now();
        while held.waiting.load(Ordering::SeqCst) < BURST {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "only {} of {BURST} decisions waiting at once",
                held.waiting.load(Ordering::SeqCst)
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        eprintln!(
            "{BURST} decisions waiting on the API at once: resident memory {} KiB more than before",
            resident_kib().saturating_sub(rss_before)
        );
        held.released.send_replace(true);
        for decision in decisions {
            let reviewed = decision.await.unwrap();
            assert!(reviewed.response.allowed, "{:?}", reviewed.response.result.message);
        }
    });
}

/// This process's resident memory, from /proc.
fn resident_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).unwrap_or(0)
}
