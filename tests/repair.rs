//! `helm-guard repair`'s plans, on real records re-encoded into broken histories, and its edits
//! judged by the guard's own UPDATE rules: repair changes only what Helm itself changes. The
//! whole command against a real API server with real Helm is in tests/e2e_helm.rs.

use crate::common;

use common::*;
use helm_guard::admission::{Webhook, review as admission_review};
use helm_guard::release::record::{DecodedRecord, Record};
use helm_guard::release::repair::{RepairPlan, edited_object, plan};
use helm_guard::release::writer::{Liveness, Writer};
use helm_guard::release::{DecodeLimits, ReleaseState, Status};
use serde_json::{Value, json};

const NOW: i64 = 1_800_000_000;
const STUCK_AFTER: i64 = 15 * 60;

/// Records of `web` whose latest was stored `age` seconds before NOW, of a release installed
/// long before (Helm copies the install's `modifiedAt` label onto every later revision).
fn records(revisions: &[(u32, &str)], age: i64) -> Vec<Value> {
    let mut records = web(revisions);
    let stored = jiff::Timestamp::from_second(NOW - age).unwrap().to_string();
    for record in &mut records {
        record["metadata"]["labels"]["modifiedAt"] = json!((NOW - 90 * 86_400).to_string());
        record["metadata"]["creationTimestamp"] = json!(stored);
    }
    records
}

fn decoded(records: &[Value]) -> Vec<DecodedRecord> {
    records
        .iter()
        .map(|r| DecodedRecord::new(Record::from_object(r, None).unwrap().unwrap(), DecodeLimits::default()))
        .collect()
}

fn plan_of(records: &[Value]) -> RepairPlan {
    plan_with_writer(records, None)
}

fn plan_with_writer(records: &[Value], writer: Option<&(Writer, Liveness)>) -> RepairPlan {
    let decoded = decoded(records);
    let refs: Vec<&DecodedRecord> = decoded.iter().collect();
    plan(&decoded[0].record.id.key, &refs, NOW, STUCK_AFTER, writer)
}

/// A controller's writer: a service account whose token was bound to pod `flux-0`.
fn controller() -> Writer {
    let extra = [
        ("authentication.kubernetes.io/pod-name".to_owned(), vec!["flux-0".to_owned()]),
        ("authentication.kubernetes.io/pod-uid".to_owned(), vec!["uid-0".to_owned()]),
    ]
    .into();
    Writer::of_request("system:serviceaccount:flux-system:helm-controller", Some(&extra))
}

#[test]
fn a_pending_revision_is_repaired_young_once_its_writer_is_gone_and_never_while_it_runs() {
    let young = records(&[(1, "deployed"), (2, "pending-upgrade")], 60);
    let gone = plan_with_writer(&young, Some(&(controller(), Liveness::Gone)));
    assert_eq!(changes(&gone), vec![(2, Status::PendingUpgrade, Status::Failed, false)]);
    assert!(
        gone.steps[0].why.contains(
            "its writer system:serviceaccount:flux-system:helm-controller (pod flux-system/flux-0) is gone"
        ),
        "{gone:?}"
    );

    let old = records(&[(1, "deployed"), (2, "pending-upgrade")], 86_400);
    let running = plan_with_writer(&old, Some(&(controller(), Liveness::Alive)));
    assert!(running.steps.is_empty(), "a day-long --wait whose pod runs is not stuck: {running:?}");
    let refused = running.refused.unwrap();
    assert!(
        refused.contains("still runs")
            && refused.contains("pod flux-system/flux-0")
            && refused.contains("--force"),
        "{refused}"
    );

    // A writer with no pod: the age rule.
    let laptop = Writer::of_request("alice", None);
    assert_eq!(changes(&plan_with_writer(&old, Some(&(laptop.clone(), Liveness::NoPod)))).len(), 1);
    assert!(plan_with_writer(&young, Some(&(laptop, Liveness::NoPod))).steps.is_empty());
}

fn changes(plan: &RepairPlan) -> Vec<(u32, Status, Status, bool)> {
    plan.steps.iter().map(|s| (s.revision, s.from, s.to, s.label_only)).collect()
}

#[test]
fn a_stuck_pending_revision_is_marked_failed_and_a_young_one_is_left_to_helm() {
    let stuck = plan_of(&records(&[(1, "deployed"), (2, "pending-upgrade")], 3600));
    assert_eq!(stuck.state, ReleaseState::PendingUpgrade);
    assert_eq!(changes(&stuck), vec![(2, Status::PendingUpgrade, Status::Failed, false)]);
    assert!(stuck.refused.is_none());
    assert!(stuck.advice.iter().any(|a| a.contains("`helm rollback web 1 -n demo`")), "{:?}", stuck.advice);

    let young = plan_of(&records(&[(1, "deployed"), (2, "pending-upgrade")], 60));
    assert!(young.steps.is_empty());
    assert!(young.refused.as_deref().is_some_and(|r| r.contains("Helm may still be running")), "{young:?}");
}

#[test]
fn several_deployed_revisions_keep_only_the_newest() {
    let several = plan_of(&records(&[(1, "deployed"), (2, "deployed"), (3, "deployed")], 3600));
    assert_eq!(
        changes(&several),
        vec![
            (1, Status::Deployed, Status::Superseded, false),
            (2, Status::Deployed, Status::Superseded, false)
        ]
    );
}

#[test]
fn a_label_that_disagrees_is_set_from_the_payload() {
    let mut history = records(&[(1, "superseded"), (2, "deployed")], 3600);
    history[0]["metadata"]["labels"]["status"] = json!("deployed");
    let mismatch = plan_of(&history);
    assert_eq!(changes(&mismatch), vec![(1, Status::Superseded, Status::Superseded, true)]);
}

#[test]
fn an_orphaned_release_gets_advice_and_no_edit() {
    let orphaned = plan_of(&records(&[(1, "superseded"), (2, "superseded")], 3600));
    assert_eq!(orphaned.state, ReleaseState::OrphanedSuperseded);
    assert!(orphaned.steps.is_empty());
    assert!(orphaned.advice[0].contains("`helm upgrade web CHART -n demo`"), "{:?}", orphaned.advice);
    assert!(orphaned.advice[0].contains("`helm rollback web 2 -n demo`"), "{:?}", orphaned.advice);
    assert!(
        plan_of(&records(&[(1, "superseded"), (2, "deployed")], 3600)).steps.is_empty(),
        "healthy: nothing"
    );
}

#[test]
fn every_edit_is_one_the_guard_lets_through_and_helm_reads_as_planned() {
    for history in [
        records(&[(1, "deployed"), (2, "pending-upgrade")], 3600),
        records(&[(1, "deployed"), (2, "pending-install")], 3600),
        records(&[(1, "deployed"), (2, "deployed"), (3, "failed")], 3600),
        {
            let mut h = records(&[(1, "superseded"), (2, "deployed")], 3600);
            h[0]["metadata"]["labels"]["status"] = json!("failed");
            h
        },
    ] {
        let repair = plan_of(&history);
        assert!(!repair.steps.is_empty());
        let admission = common::guard::snapshot_admission(&history);
        let decoded = decoded(&history);
        for step in &repair.steps {
            let index = history.iter().position(|r| r["metadata"]["name"] == step.object.as_str()).unwrap();
            let edited =
                edited_object(history[index].clone(), &decoded[index], step, DecodeLimits::default(), NOW)
                    .unwrap();
            let read = DecodedRecord::new(
                Record::from_object(&edited, None).unwrap().unwrap(),
                DecodeLimits::default(),
            );
            assert_eq!(read.status(), Some(step.to), "Helm reads the new status");
            assert_eq!(edited["metadata"]["labels"]["status"], step.to.as_str());
            let body = serde_json::to_vec(&update_review(&history[index], &edited)).unwrap();
            let reviewed = admission.review_now(Webhook::Validate, admission_review::parse(&body).unwrap());
            assert!(
                reviewed.response.allowed,
                "{} of {}: {:?}",
                step.why, step.object, reviewed.response.result.message
            );
        }
    }
}

fn prune_of(records: &[Value], keep: usize) -> helm_guard::release::prune::PrunePlan {
    let decoded = decoded(records);
    let refs: Vec<&DecodedRecord> = decoded.iter().collect();
    helm_guard::release::prune::plan_prune(&decoded[0].record.id.key, &refs, keep)
}

fn deleted(plan: &helm_guard::release::prune::PrunePlan) -> Vec<u32> {
    plan.steps.iter().map(|s| s.revision).collect()
}

#[test]
fn prune_deletes_the_oldest_first_and_keeps_the_newest() {
    let mut history: Vec<(u32, &str)> = (1..12).map(|r| (r, "superseded")).collect();
    history.push((12, "deployed"));
    let plan = prune_of(&records(&history, 60), 3);
    assert_eq!(deleted(&plan), (1..=9).collect::<Vec<_>>(), "the oldest first, as Helm's removeLeastRecent");
    assert_eq!(plan.kept, vec![10, 11, 12]);
    assert!(prune_of(&records(&history, 60), 100).steps.is_empty());
}

#[test]
fn prune_never_takes_the_latest_or_the_last_deployed_revision() {
    // A loop of failed upgrades above the last good revision.
    let mut history: Vec<(u32, &str)> = vec![(1, "superseded"), (2, "deployed")];
    history.extend((3..=8).map(|r| (r, "failed")));
    let plan = prune_of(&records(&history, 60), 1);
    assert_eq!(plan.kept, vec![2, 8], "the last deployed and the latest, beyond --keep 1");
    assert_eq!(deleted(&plan), vec![1, 3, 4, 5, 6, 7]);
    // Each deletion is one the guard lets Helm's pruning make.
    let mut remaining = records(&history, 60);
    for revision in deleted(&plan) {
        let at = remaining
            .iter()
            .position(|r| r["metadata"]["labels"]["version"].as_str() == Some(revision.to_string().as_str()))
            .unwrap();
        let record = remaining.remove(at);
        let mut others = remaining.clone();
        others.push(record.clone());
        let admission = common::guard::snapshot_admission(&others);
        let body = serde_json::to_vec(&delete_review(&record)).unwrap();
        let reviewed = admission.review_now(Webhook::Validate, admission_review::parse(&body).unwrap());
        assert!(reviewed.response.allowed, "revision {revision}: {:?}", reviewed.response.result.message);
    }
}
