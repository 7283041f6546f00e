//! Replicas that agree, as the guard ships them: two guards, each with its own index and its own
//! claim book against the stub of the API server's Leases ([`super::lease_stub`]), decide
//! deletions of one release at the same instant. Which verdicts ask the books at all, what a
//! book that cannot be written does to a verdict and to the index, and that of two conflicting
//! approvals exactly one stands. (tests/e2e_replicas.rs races guard processes on a real API
//! server; `claim_books.rs` races random pairs over three replicas with failing writes.)

use crate::common;

use std::sync::Arc;

use super::lease_stub::LeaseServer;
use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings, Webhook, review as admission_review};
use helm_guard::cluster::SourceKind;
use helm_guard::policy::PolicyConfig;
use serde_json::Value;

/// A replica's admission: its own live index of `records` (an approved deletion hidden until the
/// watch would bring it), its own claim book in `server` (none without a server).
async fn replica(records: &[Value], books: Option<(&LeaseServer, &str)>) -> Admission {
    let ttl = std::time::Duration::from_secs(30);
    let index = common::guard::index_of(records, SourceKind::Live { tombstone_ttl: ttl });
    let tasks = Arc::new(helm_guard::tasks::Tasks::default());
    let coordinator = match books {
        Some((server, name)) => Some(server.book(name, index.clone(), &tasks).await),
        None => None,
    };
    let live = LiveParts { coordinator, ..LiveParts::default() };
    Admission::new(index, Settings::new(PolicyConfig::default()), live, Default::default()).with_tasks(tasks)
}

async fn delete(admission: &Admission, record: &Value) -> (bool, String) {
    let body = serde_json::to_vec(&delete_review(record)).unwrap();
    let reviewed = admission.review(Webhook::Validate, admission_review::parse(&body).unwrap()).await;
    let reason = reviewed.response.audit_annotations.get("reason").cloned().unwrap_or_default();
    (reviewed.response.allowed, reason)
}

/// v1 and v2 both deployed (an interrupted upgrade leaves that), v3 failed: deleting v1 alone
/// is fine and so is deleting v2 alone; both together leave nothing to roll back to.
fn two_deployed() -> Vec<Value> {
    web(&[(1, "deployed"), (2, "deployed"), (3, "failed")])
}

fn revisions(admission: &Admission) -> Vec<u32> {
    let mut revisions: Vec<u32> = admission.index().history(&web_key()).iter().map(|r| r.revision).collect();
    revisions.sort_unstable();
    revisions
}

/// Two replicas decide "delete v1" and "delete v2" at the same instant, each with its claim book
/// in `server` (or none).
async fn race(server: Option<&LeaseServer>) -> [(bool, String); 2] {
    let records = two_deployed();
    let (a, b) = (
        replica(&records, server.map(|server| (server, "a"))).await,
        replica(&records, server.map(|server| (server, "b"))).await,
    );
    let (first, second) = tokio::join!(delete(&a, &records[0]), delete(&b, &records[1]));
    [first, second]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_deletion_alone_is_approved_and_hidden_once_agreed() {
    let records = two_deployed();
    for record in &records[..2] {
        let server = LeaseServer::start(1, 0, 5).await;
        let alone = replica(&records, Some((&server, "a"))).await;
        assert_eq!(delete(&alone, record).await, (true, "history-pruning".to_owned()));
        assert_eq!(revisions(&alone).len(), 2, "hidden once agreed");
        assert_eq!(server.writes(), 1, "one write of the book agreed it");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncoordinated_replicas_approve_both_and_orphan_the_release() {
    // The gap this closes: without coordination both are approved.
    let [first, second] = race(None).await;
    assert!(first.0 && second.0, "{first:?} {second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinated_replicas_never_approve_both() {
    for seed in 0..20 {
        let server = LeaseServer::start(seed, 0, 5).await;
        let [first, second] = race(Some(&server)).await;
        let approved = [&first, &second].iter().filter(|d| d.0).count();
        assert_eq!(approved, 1, "seed {seed}: exactly one approved: {first:?} {second:?}");
        let refused = if first.0 { &second } else { &first };
        assert_eq!(refused.1, "last-deployed-revision", "seed {seed}: the second sees the first's claim");
    }
}

/// A book that cannot be written: the approval is refused, "retry", and leaves no tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_book_that_cannot_be_written_refuses_the_deletion_with_retry() {
    let records = two_deployed();
    let server = LeaseServer::start(1, 1, 5).await;
    let admission = replica(&records, Some((&server, "a"))).await;
    let body = serde_json::to_vec(&delete_review(&records[0])).unwrap();
    let reviewed = admission.review(Webhook::Validate, admission_review::parse(&body).unwrap()).await;
    assert!(!reviewed.response.allowed);
    assert_eq!(reviewed.response.audit_annotations["reason"], "coordination-unavailable");
    assert!(
        reviewed.response.result.message.contains("retry in a moment"),
        "{}",
        reviewed.response.result.message
    );
    assert_eq!(admission.counts().coordination_refused.get(), 1);
    assert_eq!(revisions(&admission), [1, 2, 3], "still there: the deletion did not happen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_creations_updates_and_helms_pruning_never_write_a_book() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let server = LeaseServer::start(1, 0, 5).await;
    let admission = replica(&records, Some((&server, "a"))).await;
    assert_eq!(delete(&admission, &records[1]).await, (false, "latest-deployed-revision".to_owned()));
    let updated = rewrite(&records[1], 2, "superseded");
    let body = serde_json::to_vec(&update_review(&records[1], &updated)).unwrap();
    admission.review(Webhook::Validate, admission_review::parse(&body).unwrap()).await;
    // Helm's history pruning (a superseded revision below the latest) holds whatever else is
    // deleted at once: approved with no claim.
    let fresh = replica(&records, Some((&server, "b"))).await;
    assert_eq!(delete(&fresh, &records[0]).await, (true, "history-pruning".to_owned()));
    assert_eq!(server.writes(), 0);
}
