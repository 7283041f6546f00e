//! Replicas that agree: two guards, each with its own index, decide deletions of one release at
//! the same instant through a shared coordinator. Here the coordinator is an in-memory stand-in
//! with the Lease's semantics (a version, writes conditional on it) and the worst interleaving
//! forced: both replicas read the claims before either writes. The real Lease, with two guard
//! processes on a real API server, is checked by tests/e2e_replicas.rs.

use crate::common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};

use common::leases::{Replica, SharedLeases};
use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings, Webhook, review as admission_review};
use helm_guard::cluster::coordination::DeleteCoordinator;
use helm_guard::policy::PolicyConfig;
use serde_json::Value;

/// A replica's admission: its own index of `records`, the shared Leases (or none).
fn replica(records: &[Value], coordinator: Option<Replica>) -> Admission {
    let live = LiveParts {
        coordinator: coordinator.map(|c| Arc::new(c) as Arc<dyn DeleteCoordinator>),
        ..LiveParts::default()
    };
    common::guard::snapshot_admission_with(records, Settings::new(PolicyConfig::default()), live)
}

fn delete(admission: &Admission, record: &Value) -> (bool, String) {
    decide(admission, &delete_review(record))
}

/// v1 and v2 both deployed (an interrupted upgrade leaves that), v3 failed: deleting v1 alone
/// is fine and so is deleting v2 alone; both together leave nothing to roll back to.
fn two_deployed() -> Vec<Value> {
    web(&[(1, "deployed"), (2, "deployed"), (3, "failed")])
}

/// Two replicas decide "delete v1" and "delete v2" at the same instant.
fn race(coordinated: bool) -> [(bool, String); 2] {
    let records = two_deployed();
    let leases = Arc::new(SharedLeases::new(2));
    let coordinator = |name| coordinated.then(|| Replica { leases: leases.clone(), name });
    let (a, b) = (replica(&records, coordinator("a")), replica(&records, coordinator("b")));
    let start = Barrier::new(2);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| {
            start.wait();
            delete(&a, &records[0])
        });
        let second = scope.spawn(|| {
            start.wait();
            delete(&b, &records[1])
        });
        [first.join().unwrap(), second.join().unwrap()]
    })
}

#[test]
fn each_deletion_alone_is_approved() {
    let records = two_deployed();
    for record in &records[..2] {
        let alone = replica(&records, Some(Replica { leases: Arc::new(SharedLeases::new(0)), name: "a" }));
        assert_eq!(delete(&alone, record), (true, "history-pruning".to_owned()));
    }
}

#[test]
fn uncoordinated_replicas_approve_both_and_orphan_the_release() {
    // The gap this closes: without coordination both are approved.
    let [first, second] = race(false);
    assert!(first.0 && second.0, "{first:?} {second:?}");
}

#[test]
fn coordinated_replicas_never_approve_both() {
    for _ in 0..50 {
        let [first, second] = race(true);
        let approved = [&first, &second].iter().filter(|d| d.0).count();
        assert_eq!(approved, 1, "exactly one approved: {first:?} {second:?}");
        let refused = if first.0 { &second } else { &first };
        assert_eq!(refused.1, "last-deployed-revision", "the second sees the first's claim: {refused:?}");
    }
}

#[test]
fn a_coordinator_that_does_not_answer_refuses_the_deletion_with_retry() {
    let records = two_deployed();
    let mut leases = SharedLeases::new(0);
    leases.unavailable = true;
    let admission = replica(&records, Some(Replica { leases: Arc::new(leases), name: "a" }));
    let body = serde_json::to_vec(&delete_review(&records[0])).unwrap();
    let reviewed = admission.review_now(Webhook::Validate, admission_review::parse(&body).unwrap());
    assert!(!reviewed.response.allowed);
    assert_eq!(reviewed.response.audit_annotations["reason"], "coordination-unavailable");
    assert!(
        reviewed.response.result.message.contains("retry in a moment"),
        "{}",
        reviewed.response.result.message
    );
    assert_eq!(admission.counts().coordination_refused.get(), 1);
    // The refused approval left no tombstone: deleting v2 is still fine on its own.
    assert!(admission.index().history(&web_key()).len() == 3);
}

#[test]
fn refusals_creations_updates_and_helms_pruning_never_touch_the_leases() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let leases = Arc::new(SharedLeases::new(0));
    let admission = replica(&records, Some(Replica { leases: leases.clone(), name: "a" }));
    assert_eq!(delete(&admission, &records[1]), (false, "latest-deployed-revision".to_owned()));
    let updated = rewrite(&records[1], 2, "superseded");
    let body = serde_json::to_vec(&update_review(&records[1], &updated)).unwrap();
    admission.review_now(Webhook::Validate, admission_review::parse(&body).unwrap());
    // Helm's history pruning (a superseded revision below the latest) holds whatever else is
    // deleted at once: approved with no claim.
    let fresh = replica(&records, Some(Replica { leases: leases.clone(), name: "a" }));
    assert_eq!(delete(&fresh, &records[0]), (true, "history-pruning".to_owned()));
    assert_eq!((leases.reads.load(Ordering::SeqCst), leases.writes.load(Ordering::SeqCst)), (0, 0));
}

#[test]
fn an_approval_another_could_turn_is_agreed_once() {
    let records = two_deployed();
    let leases = Arc::new(SharedLeases::new(0));
    let admission = replica(&records, Some(Replica { leases: leases.clone(), name: "a" }));
    assert_eq!((leases.reads.load(Ordering::SeqCst), leases.writes.load(Ordering::SeqCst)), (0, 0));
    assert_eq!(delete(&admission, &records[0]), (true, "history-pruning".to_owned()));
    assert_eq!((leases.reads.load(Ordering::SeqCst), leases.writes.load(Ordering::SeqCst)), (1, 1));
}
