//! Replicas that agree, in CI: two and three in-process replicas, each with its own index and its
//! own claim book, against a stub of the API server's Leases (list, watch, merge patch, create)
//! whose watches lag by a random time each (in resourceVersion order, as a watch keeps it) and
//! whose writes sometimes fail. Random pairs of conflicting deletions (two deployed revisions of
//! one release, each harmless alone) reach two replicas at once: never both approved. And a book
//! in a format this version cannot read refuses every agreement, "retry", until it is gone.
//! (tests/e2e_replicas.rs races replicas on a real API server.)

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use super::lease_stub::LeaseServer;
use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings};
use helm_guard::policy::PolicyConfig;
use serde_json::{Value, json};

/// `releases` releases, each with revisions 1 and 2 deployed and 3 failed: deleting 1 or 2 is
/// harmless alone (D5), both together leave nothing to roll back to.
fn records(releases: usize) -> Vec<Value> {
    let base = web(&[(1, "deployed"), (2, "deployed"), (3, "failed")]);
    (0..releases).flat_map(|i| base.iter().map(move |r| as_release(r, &format!("rel-{i}")))).collect()
}

/// A replica: its own index of `records`, its own claim book in the stub.
async fn replica(server: &LeaseServer, name: &str, records: &[Value]) -> Admission {
    let admission = common::guard::snapshot_admission(records);
    let tasks = Arc::new(helm_guard::tasks::Tasks::default());
    let book = server.book(name, admission.index().clone(), &tasks).await;
    let live = LiveParts { coordinator: Some(book), ..LiveParts::default() };
    common::guard::snapshot_admission_with(records, Settings::new(PolicyConfig::default()), live)
        .with_tasks(tasks)
}

async fn verdict(admission: &Admission, review: &Value) -> (bool, String) {
    let body = serde_json::to_vec(review).unwrap();
    let request = helm_guard::admission::review::parse(&body).unwrap();
    let reviewed = admission.review(helm_guard::admission::Webhook::Validate, request).await;
    (
        reviewed.response.allowed,
        reviewed.response.audit_annotations.get("reason").cloned().unwrap_or_default(),
    )
}

/// Random, seeded: for each release, two replicas chosen at random get one of its two deployed
/// revisions each, at once. Never both approved; over the run, approvals happen (the books are
/// written and read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_deletions_at_two_of_several_replicas_are_never_both_approved() {
    const RELEASES: usize = 24;
    for (seed, replicas) in [(1_u64, 2_usize), (2, 3), (3, 3)] {
        let server = LeaseServer::start(seed, 8, 25).await;
        let records = records(RELEASES);
        let mut guards = Vec::new();
        for name in ["replica-a", "replica-b", "replica-c"].iter().take(replicas) {
            guards.push(Arc::new(replica(&server, name, &records).await));
        }
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut approved = 0;
        for release in 0..RELEASES {
            let first = rng.usize(..replicas);
            let second = (first + 1 + rng.usize(..replicas - 1)) % replicas;
            let (v1, v2) = (&records[release * 3], &records[release * 3 + 1]);
            let (a, b) = (guards[first].clone(), guards[second].clone());
            let (review_a, review_b) = (delete_review(v1), delete_review(v2));
            let one = tokio::spawn(async move { verdict(&a, &review_a).await });
            let two = tokio::spawn(async move { verdict(&b, &review_b).await });
            let (one, two) = (one.await.unwrap(), two.await.unwrap());
            assert!(
                !(one.0 && two.0),
                "seed {seed}, {replicas} replicas, rel-{release}: both approved ({one:?}, {two:?})"
            );
            for refused in [&one, &two].into_iter().filter(|v| !v.0) {
                assert!(
                    ["last-deployed-revision", "coordination-unavailable"].contains(&refused.1.as_str()),
                    "seed {seed}: {refused:?}"
                );
            }
            approved += usize::from(one.0) + usize::from(two.0);
        }
        assert!(approved > RELEASES / 2, "seed {seed}: {approved} of {RELEASES} releases had an approval");
    }
}

/// A book of another format (a newer version's, or garbage) in the namespace: this version
/// cannot read its claims, so it refuses every approval that needs agreement, "retry", rather
/// than read it as empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_book_this_version_cannot_read_refuses_agreement() {
    let server = LeaseServer::start(7, 0, 25).await;
    let records = records(2);
    let guard = replica(&server, "replica-a", &records).await;
    // Agreement works first (the books' watch is up)...
    let agreed = common::eventually(Duration::from_secs(10), || async {
        verdict(&guard, &delete_review(&records[0])).await == (true, "history-pruning".to_owned())
    })
    .await;
    assert!(agreed, "an approval that needs agreement, agreed");
    // ... then a newer version's book appears.
    let newer = json!({"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "helm-guard", "helm-guard.io/lease": "claim-book"},
        "annotations": {"helm-guard.io/claims-format": "2", "helm-guard.io/deletions": "{}"}}});
    server.stub.store("helm-guard-claims-newer", newer, "ADDED");
    let refused = common::eventually(Duration::from_secs(10), || async {
        verdict(&guard, &delete_review(&records[3])).await == (false, "coordination-unavailable".to_owned())
    })
    .await;
    assert!(refused, "an approval that needs agreement is refused while the book is unreadable");
}
