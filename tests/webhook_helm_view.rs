//! The "Helm's view" rules through the real HTTPS path, on real records: crafted records count
//! as Helm reads them, edits Helm never makes are refused, the recovery tools' edits pass, and the
//! garbage collector is no namespace teardown.

use crate::common;

use common::guard::{Guard, Options};
use common::*;
use serde_json::{Value, json};

/// demo/web: revision 2 superseded, 3 deployed; then whatever `extra` adds.
fn rb_history(extra: Vec<Value>) -> Vec<Value> {
    let mut records = history(&helm4_secret(), &[(2, "superseded"), (3, "deployed")]);
    records.extend(extra);
    records
}

async fn guard_with(records: Vec<Value>) -> Guard {
    Guard::start(Options { snapshot: records, ..Options::default() }).await
}

fn verdict(response: &Value) -> (bool, &str) {
    (response["allowed"].as_bool().unwrap(), response["auditAnnotations"]["reason"].as_str().unwrap())
}

/// Revision 4 labelled deployed, with the release JSON `change` makes of revision 3's.
fn crafted_v4(change: impl FnOnce(&mut Value)) -> Value {
    let mut record = rewrite(&helm4_secret(), 4, "deployed");
    let mut release = release_json(&record);
    change(&mut release);
    record = with_release_json(record, &release);
    record
}

#[tokio::test]
async fn a_record_helm_cannot_read_does_not_make_the_latest_deletable() {
    // Reproduced against the earlier build: with such a v4 the DELETE of v3 was allowed.
    for (what, v4) in [
        ("config not an object", crafted_v4(|r| r["config"] = json!(1))),
        ("a time Go does not parse", crafted_v4(|r| r["info"]["last_deployed"] = json!("yesterday"))),
    ] {
        let records = rb_history(vec![v4]);
        let guard = guard_with(records.clone()).await;
        let response = guard.validate(&delete_review(&records[1])).await;
        assert_eq!(verdict(&response), (false, "latest-deployed-revision"), "{what}");
    }
}

#[tokio::test]
async fn a_record_helm_reads_counts_whatever_its_name_type_and_labels() {
    // Go-style keys, an Opaque Secret named rb-latest, labels saying superseded: Helm reads
    // revision 4 pending-upgrade, so v3 is no longer the latest but the only deployed one.
    let mut v4 = crafted_v4(|r| {
        let o = r.as_object_mut().unwrap();
        o.remove("version");
        o.insert("Version".into(), json!(4));
        let mut info = o.remove("info").unwrap();
        info.as_object_mut().unwrap().remove("status");
        info.as_object_mut().unwrap().insert("Status".into(), json!("pending-upgrade"));
        o.insert("Info".into(), info);
    });
    v4["type"] = json!("Opaque");
    v4["metadata"]["name"] = json!("rb-latest");
    v4["metadata"]["labels"]["status"] = json!("superseded");
    let records = rb_history(vec![v4.clone()]);
    let guard = guard_with(records.clone()).await;
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(verdict(&response), (false, "last-deployed-revision"));
    // The crafted latest itself goes: a pending revision over a deployed one.
    let response = guard.validate(&delete_review(&v4)).await;
    assert_eq!(verdict(&response), (true, "stuck-revision-recovery"));
}

#[tokio::test]
async fn a_second_object_of_a_revision_is_kept_apart() {
    let mut copy = rewrite(&helm4_secret(), 3, "superseded");
    copy["metadata"]["name"] = json!("rb-copy");
    let records = rb_history(vec![copy.clone()]);
    let guard = guard_with(records.clone()).await;
    assert_eq!(
        verdict(&guard.validate(&delete_review(&records[1])).await),
        (false, "last-deployed-revision")
    );
    assert_eq!(verdict(&guard.validate(&delete_review(&copy)).await), (true, "history-pruning"));
}

#[tokio::test]
async fn the_garbage_collector_outside_a_terminating_namespace_is_decided_like_anyone() {
    let records = rb_history(vec![]);
    let guard = guard_with(records.clone()).await;
    for user in
        ["system:serviceaccount:kube-system:generic-garbage-collector", "system:kube-controller-manager"]
    {
        let review = as_user(delete_review(&records[1]), user, &["system:serviceaccounts"]);
        assert_eq!(verdict(&guard.validate(&review).await), (false, "latest-deployed-revision"), "{user}");
    }
}

/// An UPDATE of web v3 (deployed) into what `edit` makes of it.
async fn update_v3(edit: impl FnOnce(&mut Value, &mut Value)) -> Value {
    let records = rb_history(vec![]);
    let old = records[1].clone();
    let mut release = release_json(&old);
    let mut new = old.clone();
    edit(&mut new, &mut release);
    let new = with_release_json(new, &release);
    let guard = guard_with(records).await;
    guard.validate(&update_review(&old, &new)).await
}

#[tokio::test]
async fn edits_helm_never_makes_are_refused() {
    /// Edits the object and its release JSON.
    type Edit = Box<dyn FnOnce(&mut Value, &mut Value)>;
    let table: Vec<(&str, Edit, &str)> = vec![
        ("values", Box::new(|_, r| r["config"] = json!({"replicaCount": 9})), "payload-content-change"),
        (
            "manifest",
            Box::new(|_, r| r["manifest"] = json!("---\nkind: Nothing\n")),
            "payload-content-change",
        ),
        (
            "chart",
            Box::new(|_, r| r["chart"]["metadata"]["version"] = json!("9.9.9")),
            "payload-content-change",
        ),
        ("version", Box::new(|_, r| r["version"] = json!(30)), "payload-content-change"),
        (
            "payload status without its label",
            Box::new(|_, r| r["info"]["status"] = json!("superseded")),
            "status-label-mismatch",
        ),
        (
            "label without the payload",
            Box::new(|o, _| o["metadata"]["labels"]["status"] = json!("superseded")),
            "status-label-mismatch",
        ),
        (
            "deployed to failed",
            Box::new(|o, r| {
                r["info"]["status"] = json!("failed");
                o["metadata"]["labels"]["status"] = json!("failed");
            }),
            "status-transition",
        ),
        (
            "an owner reference",
            Box::new(|o, _| {
                o["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}])
            }),
            "foreign-metadata",
        ),
        (
            "a finalizer",
            Box::new(|o, _| o["metadata"]["finalizers"] = json!(["example.com/keep"])),
            "foreign-metadata",
        ),
    ];
    for (what, edit, reason) in table {
        let response = update_v3(edit).await;
        assert_eq!(verdict(&response), (false, reason), "{what}");
    }
}

#[tokio::test]
async fn edits_helm_and_its_recovery_tools_make_pass() {
    // Helm supersedes v3 on the next upgrade: payload and label together, new description.
    let response = update_v3(|o, r| {
        r["info"]["status"] = json!("superseded");
        r["info"]["description"] = json!("Superseded");
        o["metadata"]["labels"]["status"] = json!("superseded");
    })
    .await;
    assert_eq!(verdict(&response), (true, "helm-update"));
    // Keys in another order (a tool that re-serialises): the same revision to Helm.
    let records = rb_history(vec![]);
    let old = records[1].clone();
    let release = release_json(&old);
    let reversed: Vec<String> = release
        .as_object()
        .unwrap()
        .iter()
        .rev()
        .map(|(key, value)| format!("{}:{}", json!(key), value))
        .collect();
    let text = format!("{{{}}}", reversed.join(","));
    assert!(!text.starts_with(r#"{"chart""#), "the keys are really reordered");
    let mut new = old.clone();
    new["data"]["release"] = json!(
        String::from_utf8(helm_guard::release::decode::codec::encode_secret_payload(text.as_bytes()))
            .unwrap()
    );
    let guard = guard_with(records).await;
    assert_eq!(verdict(&guard.validate(&update_review(&old, &new)).await), (true, "helm-update"));

    // `helm set-status` unlocks a stuck pending revision: payload and label to failed.
    let records = history(&helm4_secret(), &[(2, "deployed"), (3, "pending-upgrade")]);
    let stuck = records[1].clone();
    let unlocked = rewrite(&helm4_secret(), 3, "failed");
    let guard = guard_with(records).await;
    assert_eq!(verdict(&guard.validate(&update_review(&stuck, &unlocked)).await), (true, "helm-update"));
}
