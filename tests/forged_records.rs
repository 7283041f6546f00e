//! Records forged in Helm's shape (issue 80): a CREATE is let in only when it is the record Helm's
//! storage writes for its payload (`pkg/storage/driver` `newSecretsObject`, `makeKey`) as the next
//! revision Helm stores. Each forgery is a real Helm 4 record changed in one place, sent through
//! the HTTPS path of a guard holding release `web` (revisions 1 and 2 superseded, 3 deployed);
//! beside them, Helm's own next revision goes through.

use crate::common;

use common::guard::{Guard, Options};
use common::*;
use helm_guard::release::Status;
use serde_json::{Value, json};

/// Revision `revision` of `web` as Helm 4 writes it, `status` in payload and label.
fn revision(revision: u32, status: Status) -> Value {
    rewrite(&helm4_secret(), revision, status.as_str())
}

/// `record` with its payload changed by `edit`.
fn payload_edited(record: Value, edit: impl FnOnce(&mut Value)) -> Value {
    let mut release = release_json(&record);
    edit(&mut release);
    with_release_json(record, &release)
}

#[tokio::test]
async fn a_create_is_let_in_only_as_the_record_helm_writes_for_its_payload() {
    let guard = Guard::start(Options {
        snapshot: web(&[(1, "superseded"), (2, "superseded"), (3, "deployed")]),
        ..Options::default()
    })
    .await;
    let next = || revision(4, Status::PendingUpgrade);
    let answer = guard.validate(&create_review(&next())).await;
    assert_eq!(
        (answer["allowed"].as_bool(), answer["auditAnnotations"]["reason"].as_str()),
        (Some(true), Some("helm-create")),
        "Helm's next revision: {answer}"
    );

    let with = |edit: &dyn Fn(&mut Value)| {
        let mut record = next();
        edit(&mut record);
        record
    };
    // (what the forgery is, the record, the reason, what the refusal says)
    let forged: Vec<(&str, Value, &str, &str)> = vec![
        (
            "a zero-padded revision in the name (Helm's own update and delete then miss it)",
            with(&|r| r["metadata"]["name"] = json!("sh.helm.release.v1.web.v04")),
            "implausible-record",
            "Helm names the record of this payload sh.helm.release.v1.web.v4",
        ),
        (
            "a version label Go parses as 4 and Helm never writes",
            with(&|r| r["metadata"]["labels"]["version"] = json!("+4")),
            "implausible-record",
            "labels the record of this payload version=4",
        ),
        (
            "another release's name and label over web's payload",
            with(&|r| {
                r["metadata"]["name"] = json!("sh.helm.release.v1.rb.v4");
                r["metadata"]["labels"]["name"] = json!("rb");
            }),
            "implausible-record",
            "Helm names the record of this payload sh.helm.release.v1.web.v4",
        ),
        (
            "a status label that is not the payload's",
            with(&|r| r["metadata"]["labels"]["status"] = json!("deployed")),
            "implausible-record",
            "status=pending-upgrade",
        ),
        (
            "a payload in another namespace than the release's revisions",
            payload_edited(next(), |p| p["namespace"] = json!("kube-system")),
            "implausible-record",
            "names a namespace other than demo",
        ),
        (
            "a Secret type Helm's driver never writes",
            with(&|r| r["type"] = json!("Opaque")),
            "implausible-record",
            "not \"Opaque\"",
        ),
        ("immutable", with(&|r| r["immutable"] = json!(true)), "foreign-metadata", "sets immutable"),
        (
            "a finalizer",
            with(&|r| r["metadata"]["finalizers"] = json!(["tenant.example/hold"])),
            "foreign-metadata",
            "sets a finalizer",
        ),
        (
            "an owner reference",
            with(
                &|r| r["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "6b1a7f3e-0000-4000-8000-000000000001"}]),
            ),
            "foreign-metadata",
            "sets an owner reference",
        ),
        (
            "an unreadable record under the next revision's name",
            with(&|r| r["data"]["release"] = json!("bm90IGEgcmVsZWFzZQ==")),
            "implausible-record",
            "already exists",
        ),
        (
            "an object without Helm's owner label under the next revision's name",
            with(&|r| {
                r["metadata"]["labels"] = json!({"app": "squat"});
            }),
            "implausible-record",
            "no owner=helm label",
        ),
        (
            "the last revision Go's uint32 holds, as a rollback",
            revision(u32::MAX, Status::PendingRollback),
            "implausible-record",
            "the highest a 32-bit Helm reads",
        ),
        (
            "a jump past the gap ceiling over the deployed latest",
            revision((1 << 30) + 1, Status::PendingUpgrade),
            "implausible-record",
            "never past 1073741824",
        ),
    ];
    for (what, record, reason, says) in forged {
        let answer = guard.validate(&create_review(&record)).await;
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            (answer["allowed"].as_bool(), answer["auditAnnotations"]["reason"].as_str()),
            (Some(false), Some(reason)),
            "{what}: {answer}"
        );
        assert!(message.contains(says), "{what}: {message}");
    }
    // Nothing forged was taken in: Helm's next revision is still the one it writes.
    let answer = guard.validate(&create_review(&next())).await;
    assert_eq!(answer["allowed"], true, "{answer}");
}

/// Objects that are not records keep their names' freedom: only Helm's record names are judged,
/// and an exempt restorer (Velero) may write anything back.
#[tokio::test]
async fn only_helms_record_names_are_held_and_an_exempt_restorer_passes() {
    let guard = Guard::start(Options {
        snapshot: web(&[(3, "deployed")]),
        exempt_users: vec!["system:serviceaccount:velero:velero".into()],
        ..Options::default()
    })
    .await;
    let mut plain = revision(4, Status::PendingUpgrade);
    plain["metadata"]["labels"] = json!({"app": "web"});
    plain["metadata"]["name"] = json!("web-settings");
    let answer = guard.validate(&create_review(&plain)).await;
    assert_eq!(
        (answer["allowed"].as_bool(), answer["auditAnnotations"]["reason"].as_str()),
        (Some(true), Some("not-a-release-record")),
        "{answer}"
    );
    let mut squat = plain.clone();
    squat["metadata"]["name"] = json!("sh.helm.release.v1.web.v4");
    let by_velero = as_user(create_review(&squat), "system:serviceaccount:velero:velero", &[]);
    let answer = guard.validate(&by_velero).await;
    assert_eq!(
        (answer["allowed"].as_bool(), answer["auditAnnotations"]["reason"].as_str()),
        (Some(true), Some("exempt")),
        "{answer}"
    );
}

/// Break-glass is a privilege granted the Kubernetes way (issue 80, class 1): the annotations that
/// lift the rules (`allow-delete` on a DELETE or UPDATE, `restored-from` on a CREATE) count for a
/// requester the API server's authorizer allows `breakglass` on the release, for
/// `system:masters`, and for no one else by default; the authorizer is asked only for a request
/// that carries one of them (Helm's own writes never wait on it).
#[tokio::test]
async fn break_glass_and_restore_count_only_for_whom_the_authorizer_allows() {
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let holders = BreakGlassHolders::of(&["oncall"]);
    let guard = Guard::start(Options {
        snapshot: records.clone(),
        break_glass: Some(holders.clone()),
        ..Options::default()
    })
    .await;
    let reason =
        |answer: &Value| answer["auditAnnotations"]["reason"].as_str().unwrap_or_default().to_owned();
    let mut forced = records[1].clone();
    forced["metadata"]["annotations"] = json!({"helm-guard.io/allow-delete": "INC-42"});
    let tenant = ["system:serviceaccounts", "system:serviceaccounts:demo", "system:authenticated"];
    let by_tenant =
        guard.validate(&as_user(delete_review(&forced), "system:serviceaccount:demo:ci", &tenant)).await;
    assert_eq!(
        (by_tenant["allowed"].as_bool(), reason(&by_tenant)),
        (Some(false), "latest-deployed-revision".into())
    );
    let message = by_tenant["status"]["message"].as_str().unwrap();
    assert!(message.contains("allows `breakglass` on releases.helm-guard.io"), "{message}");
    let by_oncall =
        guard.validate(&as_user(delete_review(&forced), "oncall", &["system:authenticated"])).await;
    assert_eq!((by_oncall["allowed"].as_bool(), reason(&by_oncall)), (Some(true), "break-glass".into()));
    let by_admin = guard.validate(&as_user(delete_review(&forced), "admin", &["system:masters"])).await;
    assert_eq!(reason(&by_admin), "break-glass", "system:masters without asking");

    // A restore's annotation on a forged deployed revision over the deployed one: the master key
    // of issue 80's first class, for the tenant.
    let mut restored = rewrite(&records[1], 4, "deployed");
    restored["metadata"]["annotations"] = json!({"helm-guard.io/restored-from": "helm-guard/copy"});
    let by_tenant =
        guard.validate(&as_user(create_review(&restored), "system:serviceaccount:demo:ci", &tenant)).await;
    assert_eq!(
        (by_tenant["allowed"].as_bool(), reason(&by_tenant)),
        (Some(false), "implausible-record".into())
    );
    let by_oncall = guard.validate(&as_user(create_review(&restored), "oncall", &[])).await;
    assert_eq!((by_oncall["allowed"].as_bool(), reason(&by_oncall)), (Some(true), "restore".into()));

    // Asked for the annotated requests of those not in system:masters, and for nothing else.
    let asked = holders.asked.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(asked, 4, "two deletions and two creations by requesters outside system:masters");
    // The snapshot took the approved writes in: revision 3 deleted, 4 restored deployed.
    let next = rewrite(&records[1], 5, "pending-upgrade");
    let helm = guard.validate(&as_user(create_review(&next), "system:serviceaccount:demo:ci", &tenant)).await;
    assert_eq!(helm["allowed"], true, "{helm}");
    assert_eq!(holders.asked.load(std::sync::atomic::Ordering::Relaxed), asked, "Helm's write asks nothing");
    // Nor does Helm's later update of a restored record, which keeps its restore annotation.
    let mut stored = rewrite(&records[1], 5, "pending-upgrade");
    stored["metadata"]["annotations"] = json!({"helm-guard.io/restored-from": "helm-guard/copy"});
    let finished = update_review(&stored, &rewrite(&stored, 5, "deployed"));
    let helm = guard.validate(&as_user(finished, "system:serviceaccount:demo:ci", &tenant)).await;
    assert_eq!(helm["allowed"], true, "{helm}");
    assert_eq!(
        holders.asked.load(std::sync::atomic::Ordering::Relaxed),
        asked,
        "a restored record's update asks nothing"
    );
}

/// A grant on one release is a grant on that release alone: an UPDATE that moves another
/// release's record under the granted one's name, annotated, asks about both and is refused
/// (the grant for `a` does not reach `web`'s deployed revision).
#[tokio::test]
async fn a_grant_on_one_release_does_not_reach_another_through_its_labels() {
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let guard = Guard::start(Options {
        snapshot: records.clone(),
        break_glass: Some(BreakGlassHolders::on_one_release(&[("oncall-a", "a"), ("oncall-web", "web")])),
        ..Options::default()
    })
    .await;
    let mut moved = records[1].clone();
    moved["metadata"]["labels"]["name"] = json!("a");
    moved["metadata"]["annotations"] = json!({"helm-guard.io/allow-delete": "INC-9"});
    let by_a = guard.validate(&as_user(update_review(&records[1], &moved), "oncall-a", &[])).await;
    assert_eq!(
        (by_a["allowed"].as_bool(), by_a["auditAnnotations"]["reason"].as_str()),
        (Some(false), Some("identity-label-change")),
        "{by_a}"
    );
    let by_web = as_user(update_review(&records[1], &moved), "oncall-web", &[]);
    let answer = guard.validate(&by_web).await;
    assert_eq!(answer["allowed"], false, "a grant on web alone does not reach a: {answer}");
}
