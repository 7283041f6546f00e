//! The live source against a stub API server that speaks the list/watch protocol over HTTP: the
//! watchers list, the index becomes ready with the same state as the snapshot, and watch events
//! arrive. (No Kubernetes API server can run on the CI machines; tests/e2e.rs covers a real one.)

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::stub_apiserver::*;
use common::*;
use helm_guard::cluster::connect::{ClusterAccess, connect};
use helm_guard::cluster::watch;
use helm_guard::cluster::{ReleaseIndex, SourceKind};
use helm_guard::release::ReleaseState;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchers_list_become_ready_and_follow_events() {
    let items = fixture("snapshot/cluster-snapshot.json")["items"].as_array().unwrap().clone();
    let (server, watches) = start_stub(items.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ClusterAccess { kubeconfig: Some(kubeconfig(&dir, &server)), context: None };
    let client = connect(&args).await.expect("connects and reads /version");

    let index = Arc::new(ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(30) }));
    let restarts = helm_guard::tally::Tally::default();
    tokio::spawn(watch::run(client, index.clone(), restarts.clone()));
    let ready = eventually(Duration::from_secs(5), || async { index.is_ready() }).await;
    assert!(ready, "ready once the three initial lists are done");
    assert_eq!(index.revision_count(), 10);
    assert_eq!(indexed_release(&index, &secret_release("demo", "web")).1, ReleaseState::Failed);
    assert_eq!(indexed_release(&index, &secret_release("orphan", "app")).1, ReleaseState::OrphanedSuperseded);
    assert_eq!(restarts.get(), 0);

    // A watch event: orphan/app is upgraded to revision 2.
    let app_v1 = items.iter().find(|i| i["metadata"]["name"] == "sh.helm.release.v1.app.v1").unwrap();
    let mut app_v2 = rewrite(app_v1, 2, "deployed");
    app_v2["metadata"]["resourceVersion"] = json!("101"); // as every real watch event has
    assert!(eventually(Duration::from_secs(5), || async { !watches.lock().unwrap().is_empty() }).await);
    for watch in watches.lock().unwrap().iter() {
        let _ = watch.send(json!({"type": "ADDED", "object": metadata_only(&app_v2)}));
    }
    let upgraded = eventually(Duration::from_secs(5), || async {
        indexed_release(&index, &secret_release("orphan", "app")).1 == ReleaseState::Healthy
    })
    .await;
    assert!(upgraded, "the watch event reached the index");
    assert_eq!(restarts.get(), 0, "no watch failed");
}

#[tokio::test]
async fn no_reachable_api_server_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let args = ClusterAccess {
        kubeconfig: Some(kubeconfig(&dir, &format!("http://127.0.0.1:{port}"))),
        context: None,
    };
    let error = connect(&args).await.err().expect("no API server there");
    assert!(format!("{error:#}").contains("cannot reach the Kubernetes API server"), "{error:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_watch_is_retried_while_the_last_good_state_serves() {
    let items = fixture("snapshot/cluster-snapshot.json")["items"].as_array().unwrap().clone();
    let (server, watches) = start_stub(items).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ClusterAccess { kubeconfig: Some(kubeconfig(&dir, &server)), context: None };
    let client = connect(&args).await.unwrap();
    let index = Arc::new(ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(30) }));
    let restarts = helm_guard::tally::Tally::default();
    tokio::spawn(watch::run(client, index.clone(), restarts.clone()));
    assert!(
        eventually(Duration::from_secs(5), || async {
            index.is_ready() && !watches.lock().unwrap().is_empty()
        })
        .await
    );
    // A broken event (no resourceVersion) fails the watch.
    for watch in watches.lock().unwrap().iter() {
        let _ = watch.send(json!({"type": "ADDED", "object": {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"name": "x"}}}));
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            restarts.get() > 0 && watches.lock().unwrap().len() > 1
        })
        .await
    );
    assert!(restarts.get() > 0, "the failure is counted");
    assert!(watches.lock().unwrap().len() > 1, "and the watch is opened again");
    assert!(index.is_ready());
    assert_eq!(
        indexed_release(&index, &secret_release("demo", "web")).1,
        ReleaseState::Failed,
        "the last good state still serves"
    );
}

/// A guard in this process over a live index fed by a stub API server holding `records`; ready.
async fn live_guard(
    records: Vec<Value>,
    hangs: Hangs,
) -> (helm_guard::server::Running, common::guard::HttpsClient, Arc<Mutex<Vec<String>>>, tempfile::TempDir) {
    let (server, _watches, gets) = start_stub_with(records, hangs).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ClusterAccess { kubeconfig: Some(kubeconfig(&dir, &server)), context: None };
    let client = connect(&args).await.unwrap();
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let (running, index, ca_pem) = common::guard::start_live(
        client,
        helm_guard::policy::PolicyConfig::default(),
        "127.0.0.1:0".parse().unwrap(),
        &names,
        &dir.path().join("certs"),
        Duration::from_secs(3600),
        None,
    )
    .await;
    let https = common::guard::HttpsClient::new(running.addr, &ca_pem);
    assert!(eventually(Duration::from_secs(5), || async { index.is_ready() }).await);
    (running, https, gets, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_over_a_live_index_fetches_a_missing_status_and_hides_approved_deletions() {
    // demo/web: revision 1 deployed but its status label removed by hand, 2 deployed, 3 failed.
    let mut records = history(&helm4_secret(), &[(1, "deployed"), (2, "deployed"), (3, "failed")]);
    records[0]["metadata"]["labels"].as_object_mut().unwrap().remove("status");
    for (n, record) in records.iter_mut().enumerate() {
        record["metadata"]["resourceVersion"] = json!(format!("{}", 50 + n));
    }
    let (running, https, gets, _dir) = live_guard(records.clone(), Hangs::Nothing).await;

    let post = |review: Value| {
        let https = https.clone();
        async move {
            let (status, body) = https.post("/validate", serde_json::to_vec(&review).unwrap()).await;
            assert_eq!(status, 200);
            let answer: Value = serde_json::from_slice(&body).unwrap();
            (
                answer["response"]["allowed"].as_bool().unwrap(),
                answer["response"]["auditAnnotations"]["reason"].as_str().unwrap().to_owned(),
            )
        }
    };
    // Revision 2 may go only because revision 1 is deployed too; its label does not say so, a
    // GET of its payload does. Labels can lie, so every other record is read as Helm reads it,
    // once per resourceVersion.
    assert_eq!(post(delete_review(&records[1])).await, (true, "history-pruning".to_owned()));
    // Two of them unread: one listing of the release sends all three, payloads included.
    let mut read = gets.lock().unwrap().clone();
    read.sort();
    let names = ["sh.helm.release.v1.web.v1", "sh.helm.release.v1.web.v2", "sh.helm.release.v1.web.v3"];
    assert_eq!(read, names.map(str::to_owned));
    // Approved, not yet confirmed by the watch: hidden from the next verdict, which reads nothing
    // again.
    assert_eq!(post(delete_review(&records[0])).await, (false, "last-deployed-revision".to_owned()));
    assert_eq!(gets.lock().unwrap().len(), 3);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_never_outlasts_its_deadline_against_an_api_server_that_hangs() {
    let records = history(&helm4_secret(), &[(1, "superseded"), (2, "deployed"), (3, "failed")]);
    let (running, https, gets, _dir) = live_guard(records.clone(), Hangs::Reads).await;
    let started = std::time::Instant::now();
    // The API server waits 3 s (the webhook's timeoutSeconds, in the URL as it sends it).
    let (status, body) =
        https.post("/validate?timeout=3s", serde_json::to_vec(&delete_review(&records[0])).unwrap()).await;
    let took = started.elapsed();
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    // Refused, saying to retry, before the API server gives up (the decision takes what it
    // waits less a second for the answer, not --decision-deadline's 4 s).
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["auditAnnotations"]["reason"], "unread-history");
    assert!(answer["response"]["status"]["message"].as_str().unwrap().contains("retry"));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(!gets.lock().unwrap().is_empty(), "the payloads were asked for");
    let (_, metrics) = https.get("/metrics").await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(metrics.contains("helm_guard_decision_deadline_exceeded_total 1"), "{metrics}");
    running.shutdown().await;
}

/// A watch can lag what is stored, so an approval that rests on the release's history waits for a
/// listing of the release; one that cannot be had within the deadline refuses, saying to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_without_the_listing_of_its_release_is_refused_for_a_retry() {
    let mut records = history(&helm4_secret(), &[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    for (n, record) in records.iter_mut().enumerate() {
        record["metadata"]["resourceVersion"] = json!(format!("{}", 60 + n));
    }
    let (running, https, gets, _dir) = live_guard(records.clone(), Hangs::ListsAfter(2)).await;
    let verdict = |review: Value| {
        let https = https.clone();
        async move {
            let body = serde_json::to_vec(&review).unwrap();
            let (status, body) = https.post("/validate?timeout=3s", body).await;
            assert_eq!(status, 200);
            let answer: Value = serde_json::from_slice(&body).unwrap();
            let response = &answer["response"];
            let reason = response["auditAnnotations"]["reason"].as_str().unwrap().to_owned();
            (response["allowed"].as_bool().unwrap(), reason, response["status"]["message"].to_string())
        }
    };
    // The first two listings come: the first with every payload (two unread), the second of
    // metadata alone (all read) (dry runs: nothing is hidden).
    let (allowed, reason, _) = verdict(dry_run(delete_review(&records[0]))).await;
    assert_eq!((allowed, reason.as_str()), (true, "history-pruning"));
    let (allowed, reason, _) = verdict(dry_run(delete_review(&records[2]))).await;
    assert_eq!((allowed, reason.as_str()), (false, "latest-deployed-revision"));
    assert_eq!(gets.lock().unwrap().len(), 3);
    // The next does not: the oldest revision would be harmless to delete as far as the watch
    // knows, but that cannot be confirmed.
    let started = std::time::Instant::now();
    let (allowed, reason, message) = verdict(delete_review(&records[0])).await;
    assert!(!allowed && reason == "unread-history", "{reason}: {message}");
    assert!(message.contains("could not list the records") && message.contains("retry"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(3), "before the API server gives up");
    // A refusal needs no listing to stand: the latest deployed revision stays refused.
    let (allowed, reason, _) = verdict(delete_review(&records[2])).await;
    assert_eq!((allowed, reason.as_str()), (false, "latest-deployed-revision"));
    running.shutdown().await;
}

// One async worker: a verdict that waited on the API server where the request was read would
// hold it, and nothing else (this test's own requests included) would move until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_verdict_waiting_on_the_api_server_holds_up_no_other_request() {
    let records = history(&helm4_secret(), &[(1, "superseded"), (2, "deployed"), (3, "failed")]);
    let (running, https, gets, _dir) = live_guard(records.clone(), Hangs::Reads).await;
    let waiting = tokio::spawn({
        let https = https.clone();
        let review = serde_json::to_vec(&delete_review(&records[0])).unwrap();
        async move { https.post("/validate", review).await }
    });
    // The guard has asked the API server for a payload it will never get.
    assert!(eventually(Duration::from_secs(5), || async { !gets.lock().unwrap().is_empty() }).await);

    // Meanwhile an UPDATE, decided from its own objects without a call, is answered.
    let mut labelled = records[2].clone();
    labelled["metadata"]["labels"]["team"] = json!("payments");
    let (status, body) =
        https.post("/validate", serde_json::to_vec(&update_review(&records[2], &labelled)).unwrap()).await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    // An unrelated label on a record is not Helm's business (U8): allowed, as Helm's own update.
    assert_eq!(
        (answer["response"]["allowed"].as_bool(), answer["response"]["auditAnnotations"]["reason"].as_str()),
        (Some(true), Some("helm-update")),
        "{answer}"
    );
    assert!(!waiting.is_finished(), "answered while the other verdict still waits on the API server");

    // And the waiting one ends at its deadline, refused for a retry.
    let (status, body) = waiting.await.unwrap();
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["auditAnnotations"]["reason"], "unread-history");
    running.shutdown().await;
}

/// What a test of a guard with a fence reads back: the guard, an HTTPS client to it, and the
/// stub's counts of listings (of a release), fence rounds and pages (of a namespace), and its log
/// of payloads sent.
struct Fenced {
    running: helm_guard::server::Running,
    https: common::guard::HttpsClient,
    lists: Arc<std::sync::atomic::AtomicUsize>,
    fences: Arc<std::sync::atomic::AtomicUsize>,
    pages: Arc<std::sync::atomic::AtomicUsize>,
    gets: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Fenced {
    /// A live guard with a fence over a stub that stores `secrets` and whose watch holds back
    /// `lagging` until the next fence round, reading payloads ahead or not; ready.
    async fn start(secrets: Vec<Value>, lagging: Vec<Value>, read_ahead: bool) -> Self {
        let stub = Stub { lagging: Arc::new(Mutex::new(lagging)), ..Stub::new(secrets) };
        let (lists, fences, pages) = (stub.lists.clone(), stub.fences.clone(), stub.pages.clone());
        let (server, _watches, gets) = start_stub_app(stub).await;
        let dir = tempfile::tempdir().unwrap();
        let args = ClusterAccess { kubeconfig: Some(kubeconfig(&dir, &server)), context: None };
        let client = connect(&args).await.unwrap();
        let options = helm_guard::live::LiveOptions {
            claims_namespace: None,
            fence_namespace: Some("helm-guard".into()),
            read_ahead,
            recycle_bin: None,
            unlock_abandoned: false,
            policy_reports: None,
            ..common::cluster::live_options(None, Default::default())
        };
        let names = ["localhost".to_owned()];
        let (running, index, ca_pem) = common::guard::start_live_with(
            client,
            helm_guard::policy::PolicyConfig::default(),
            "127.0.0.1:0".parse().unwrap(),
            &names,
            &dir.path().join("certs"),
            options,
        )
        .await;
        assert!(eventually(Duration::from_secs(5), || async { index.is_ready() }).await);
        let https = common::guard::HttpsClient::new(running.addr, &ca_pem);
        Fenced { running, https, lists, fences, pages, gets, _dir: dir }
    }

    /// The answer to a dry run of deleting `record`.
    async fn delete(&self, record: &Value) -> Value {
        let (status, body) =
            self.https.post("/validate", serde_json::to_vec(&dry_run(delete_review(record))).unwrap()).await;
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }

    fn lists(&self) -> usize {
        self.lists.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn fences(&self) -> usize {
        self.fences.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn metrics(&self) -> String {
        String::from_utf8(self.https.get("/metrics").await.1).unwrap()
    }
}

/// A watch that lags a record stored before the request (revision 3, deployed, delivered only
/// with the next fence round): the verdict on deleting revision 2 waits for the round, sees
/// revision 3, and approves (revision 2 is then history); nothing is listed, and the round is
/// counted. Without the wait, it would have refused revision 2 as the latest deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_waits_for_the_fence_round_and_sees_what_the_watch_lagged() {
    let mut records = history(&helm4_secret(), &[(1, "superseded"), (2, "deployed"), (3, "deployed")]);
    for (n, record) in records.iter_mut().enumerate() {
        record["metadata"]["resourceVersion"] = json!(format!("{}", 70 + n));
    }
    // Stored: all three (GETs read them); the watch lists the first two.
    let guard = Fenced::start(records.clone(), vec![records[2].clone()], false).await;
    let answer = guard.delete(&records[1]).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["auditAnnotations"]["reason"], "history-pruning");
    assert_eq!(guard.lists(), 0, "no listing");
    assert!(guard.fences() >= 1);
    let metrics = guard.metrics().await;
    assert!(metrics.contains("helm_guard_confirmed_by_listing_total 0"), "{metrics}");
    assert!(!metrics.contains("helm_guard_fence_rounds_total 0"), "{metrics}");
    guard.running.shutdown().await;
}

/// A release the guard has not read yet (two or more records known by their labels alone: a guard
/// just started, its read-ahead under way) is shown current and read by one listing of it,
/// payloads included: no fence round, no GET per record. The verdict is the one the payloads
/// give: revision 1 is history below the deployed revision 3, its deletion Helm's pruning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_release_is_shown_current_and_read_by_one_listing() {
    let records = history(&helm4_secret(), &[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    let guard = Fenced::start(records.clone(), Vec::new(), false).await;
    let answer = guard.delete(&records[0]).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["auditAnnotations"]["reason"], "history-pruning");
    assert_eq!(guard.lists(), 1, "one listing of the release");
    assert_eq!(guard.fences(), 0, "no fence round");
    assert_eq!(guard.gets.lock().unwrap().len(), 3, "the listing's three records, each once: no GET");
    // Not a listing for want of a fence round.
    let metrics = guard.metrics().await;
    assert!(metrics.contains("helm_guard_confirmed_by_listing_total 0"), "{metrics}");
    guard.running.shutdown().await;
}

/// A guard just started reads every payload ahead of the verdicts, a namespace at a time and a
/// page of 16 at a time, following the API server's continue tokens (never one listing of the
/// whole cluster, whose every page costs etcd as much as the records left after it): 20 records
/// in one namespace (two pages) and 3 in another, each sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_ahead_reads_every_payload_a_namespace_and_a_page_at_a_time() {
    let revisions: Vec<(u32, &str)> = (1..=20).map(|revision| (revision, "superseded")).collect();
    let mut records = history(&helm4_secret(), &revisions);
    let mut elsewhere = history(&helm4_secret(), &[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    for record in &mut elsewhere {
        record["metadata"]["namespace"] = json!("elsewhere");
    }
    records.extend(elsewhere);
    let guard = Fenced::start(records.clone(), Vec::new(), true).await;
    let all_read = || async { guard.metrics().await.contains("helm_guard_payloads_read_ahead_total 23") };
    assert!(eventually(Duration::from_secs(10), all_read).await, "{}", guard.metrics().await);
    let mut sent = guard.gets.lock().unwrap().clone();
    sent.sort();
    let mut stored: Vec<String> =
        records.iter().map(|record| record["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    stored.sort();
    assert_eq!(sent, stored, "every record sent once");
    assert_eq!(
        guard.pages.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "16 + 4 records in one, 3 in the other"
    );
    guard.running.shutdown().await;
}

/// Issue 61: the guard owns its background tasks. A live guard runs its watches and the rest;
/// once the server has shut down (no longer admitting, drained) none is left running, and the
/// API server sees every watch the guard held closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_background_task_running_and_closes_the_watches() {
    let records = history(&helm4_secret(), &[(1, "superseded"), (2, "deployed")]);
    let (server, watches, _) = start_stub_with(records, Hangs::Nothing).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ClusterAccess { kubeconfig: Some(kubeconfig(&dir, &server)), context: None };
    let client = connect(&args).await.unwrap();
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let (running, index, _) = common::guard::start_live(
        client,
        helm_guard::policy::PolicyConfig::default(),
        "127.0.0.1:0".parse().unwrap(),
        &names,
        &dir.path().join("certs"),
        Duration::from_secs(3600),
        None,
    )
    .await;
    assert!(eventually(Duration::from_secs(5), || async { index.is_ready() }).await);
    let tasks = running.state.admission.tasks().clone();
    assert!(tasks.running() >= 2, "the watches and the Event writer run: {}", tasks.running());
    assert!(eventually(Duration::from_secs(5), || async { !watches.lock().unwrap().is_empty() }).await);
    running.shutdown().await;
    assert_eq!(tasks.running(), 0, "every background task stopped");
    let closed = eventually(Duration::from_secs(5), || async {
        watches.lock().unwrap().iter().all(tokio::sync::mpsc::UnboundedSender::is_closed)
    })
    .await;
    assert!(closed, "the API server sees the guard's watches closed");
}
