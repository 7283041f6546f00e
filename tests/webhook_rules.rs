//! Every rule of POLICY.md through the real HTTPS path, on real records re-encoded into the
//! histories each rule is about.

use crate::common;

use common::guard::{Guard, Options};
use common::*;
use helm_guard::policy::Mode;
use serde_json::{Value, json};

async fn guard_with(records: Vec<Value>) -> Guard {
    Guard::start(Options { snapshot: records, ..Options::default() }).await
}

fn reason(response: &Value) -> &str {
    response["auditAnnotations"]["reason"].as_str().unwrap()
}

fn namespace(name: &str, labels: Value, terminating: bool) -> Value {
    let mut ns =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
    if terminating {
        ns["metadata"]["deletionTimestamp"] = json!("2026-11-29T16:00:00Z");
        ns["status"] = json!({"phase": "Terminating"});
    }
    ns
}

#[tokio::test]
async fn d1_namespace_teardown_is_allowed() {
    let mut records = web(&[(2, "superseded"), (3, "deployed")]);
    records.push(namespace("demo", json!({}), true));
    let guard = guard_with(records.clone()).await;
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "namespace-teardown"));

    let guard = guard_with(web(&[(2, "superseded"), (3, "deployed")])).await;
    let by_controller = as_user(
        delete_review(&records[1]),
        "system:serviceaccount:kube-system:namespace-controller",
        &["system:serviceaccounts"],
    );
    let response = guard.validate(&by_controller).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "namespace-teardown"));
}

#[tokio::test]
async fn d2_break_glass_and_exemptions() {
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let mut forced = records[1].clone();
    forced["metadata"]["annotations"] =
        json!({"helm-guard.io/allow-delete": "INC-42: restoring from backup"});
    let guard = guard_with(records.clone()).await;
    let response = guard.validate(&delete_review(&forced)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "break-glass"));
    assert_eq!(response["auditAnnotations"]["break-glass-reason"], "INC-42: restoring from backup");

    let mut empty_reason = records[1].clone();
    empty_reason["metadata"]["annotations"] = json!({"helm-guard.io/allow-delete": "  "});
    let guard = guard_with(records.clone()).await;
    assert_eq!(
        guard.validate(&delete_review(&empty_reason)).await["allowed"],
        false,
        "an empty reason is no reason"
    );

    let guard = Guard::start(Options {
        snapshot: records.clone(),
        exempt_users: vec!["backup-operator".into()],
        exempt_groups: vec!["platform:admins".into()],
        ..Options::default()
    })
    .await;
    let by_user = guard.validate(&as_user(delete_review(&records[1]), "backup-operator", &[])).await;
    assert_eq!(
        (reason(&by_user), &by_user["auditAnnotations"]["exempt-identity"]),
        ("exempt", &json!("user:backup-operator"))
    );
    let by_group = guard.validate(&as_user(delete_review(&records[1]), "alice", &["platform:admins"])).await;
    assert_eq!(
        (reason(&by_group), &by_group["auditAnnotations"]["exempt-identity"]),
        ("exempt", &json!("group:platform:admins"))
    );
}

#[tokio::test]
async fn d3_an_undecodable_record_may_go_with_a_warning() {
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let mut corrupt = records[1].clone();
    corrupt["data"]["release"] = json!("bm90IGhlbG0ncyBiYXNlNjQ=");
    let guard = guard_with(records).await;
    let response = guard.validate(&delete_review(&corrupt)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "undecodable-record"));
    assert!(response["warnings"][0].as_str().unwrap().contains("does not decode"));
}

/// The view follows what the guard let through: an edit it refused changes nothing of what the
/// next verdict sees.
#[tokio::test]
async fn a_refused_edit_leaves_the_view_as_it_was() {
    let records = web(&[(1, "superseded"), (2, "deployed"), (3, "failed")]);
    let guard = guard_with(records.clone()).await;
    // Revision 1 made deployed again by hand: not an edit Helm makes (a rollback writes a new
    // revision). Had the view taken it, revision 2 would no longer be the only one deployed.
    let forged = rewrite(&records[0], 1, "deployed");
    let refused = guard.validate(&update_review(&records[0], &forged)).await;
    assert_eq!(refused["allowed"], false, "{refused}");
    let delete = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(
        (delete["allowed"].as_bool(), reason(&delete)),
        (Some(false), "last-deployed-revision"),
        "{delete}"
    );
}

/// A record an exempt user moves to another release (its `name` label changed) leaves the
/// release it was in: the next verdict on that release no longer counts it.
#[tokio::test]
async fn a_record_moved_to_another_release_leaves_its_old_one() {
    let records = web(&[(1, "deployed"), (2, "deployed"), (3, "failed")]);
    let guard = Guard::start(Options {
        snapshot: records.clone(),
        exempt_users: vec!["backup-operator".into()],
        ..Options::default()
    })
    .await;
    let mut moved = records[0].clone();
    moved["metadata"]["labels"]["name"] = json!("other");
    let update = guard.validate(&as_user(update_review(&records[0], &moved), "backup-operator", &[])).await;
    assert_eq!((update["allowed"].as_bool(), reason(&update)), (Some(true), "exempt"), "{update}");
    // Revision 2 is now the only deployed revision of web.
    let delete = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(
        (delete["allowed"].as_bool(), reason(&delete)),
        (Some(false), "last-deployed-revision"),
        "{delete}"
    );
}

/// The ledger line says what each record went through, as the status Helm reads on each side.
#[test]
fn the_ledger_says_what_each_record_went_through() {
    use helm_guard::admission::{Webhook, review as admission_review};
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let admission = common::guard::snapshot_admission(&records);
    let transition = |review: Value| {
        let parsed = admission_review::parse(&serde_json::to_vec(&review).unwrap()).unwrap();
        admission.review_now(Webhook::Validate, parsed).entry.about.transition
    };
    let mut corrupt = records[0].clone();
    corrupt["data"]["release"] = json!("AAAA");
    let fourth = web(&[(4, "pending-upgrade")]).remove(0);
    let cases = [
        (delete_review(&records[1]), "deployed -> (deleted)"),
        (update_review(&records[1], &rewrite(&records[1], 3, "superseded")), "deployed -> superseded"),
        (update_review(&records[0], &corrupt), "superseded -> undecodable"),
        (create_review(&fourth), "(new) -> pending-upgrade"),
    ];
    for (review, said) in cases {
        assert_eq!(transition(review).as_deref(), Some(said));
    }
}

/// Fails closed: a DELETE whose review carries no oldObject cannot be shown harmless.
#[tokio::test]
async fn a_delete_review_without_its_old_object_is_refused() {
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let guard = guard_with(records.clone()).await;
    let mut review = delete_review(&records[0]);
    review["request"].as_object_mut().unwrap().remove("oldObject");
    let response = guard.validate(&review).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(false), "no-old-object"));
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("carries no oldObject"), "{message}");
}

#[tokio::test]
async fn d4_to_d9_on_real_records() {
    // (history, revision deleted, allowed, reason)
    type Row = (&'static [(u32, &'static str)], u32, bool, &'static str);
    let table: [Row; 11] = [
        (&[(3, "deployed"), (4, "failed")], 3, false, "last-deployed-revision"),
        (&[(1, "superseded"), (2, "superseded"), (3, "deployed")], 1, true, "history-pruning"),
        (&[(2, "uninstalling")], 2, true, "uninstall"),
        (&[(1, "superseded"), (2, "uninstalling")], 2, false, "uninstall-order"),
        (&[(1, "failed")], 1, false, "would-orphan-release"),
        (&[(1, "uninstalled")], 1, true, "uninstall"),
        (&[(1, "deployed"), (2, "pending-upgrade")], 2, true, "stuck-revision-recovery"),
        (&[(1, "pending-install")], 1, true, "stuck-revision-recovery"),
        (&[(2, "superseded"), (3, "deployed")], 3, false, "latest-deployed-revision"),
        (&[(1, "superseded")], 1, false, "would-orphan-release"),
        (&[(3, "superseded"), (4, "failed")], 4, false, "would-orphan-release"),
    ];
    for (revisions, deleted, allowed, expected) in table {
        let records = web(revisions);
        let target = records
            .iter()
            .find(|r| r["metadata"]["labels"]["version"].as_str() == Some(deleted.to_string().as_str()))
            .unwrap();
        let guard = guard_with(records.clone()).await;
        let response = guard.validate(&delete_review(target)).await;
        assert_eq!(
            (response["allowed"].as_bool(), reason(&response)),
            (Some(allowed), expected),
            "{revisions:?}"
        );
    }
}

#[tokio::test]
async fn d9_the_orphan_of_the_shipped_snapshot_cannot_lose_its_last_record() {
    let snapshot = fixture("snapshot/cluster-snapshot.json");
    let items = snapshot["items"].as_array().unwrap().clone();
    let app = items.iter().find(|i| i["metadata"]["name"] == "sh.helm.release.v1.app.v1").unwrap().clone();
    let guard = guard_with(items).await;
    let response = guard.validate(&delete_review(&app)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(false), "would-orphan-release"));
    assert!(response["status"]["message"].as_str().unwrap().contains("no revision would be left"));
}

#[tokio::test]
async fn u1_to_u5_on_real_records() {
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let old = records[1].clone();
    let guard = guard_with(records.clone()).await;

    let mut no_owner = old.clone();
    no_owner["metadata"]["labels"].as_object_mut().unwrap().remove("owner");
    let response = guard.validate(&update_review(&old, &no_owner)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(false), "identity-label-change"));

    let mut forced = no_owner.clone();
    forced["metadata"]["annotations"] =
        json!({"helm-guard.io/allow-delete": "moving to the configmap driver"});
    let response = guard.validate(&update_review(&old, &forced)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "break-glass"));

    let mut other_type = old.clone();
    other_type["type"] = json!("Opaque");
    let response = guard.validate(&update_review(&old, &other_type)).await;
    assert_eq!(reason(&response), "identity-label-change");

    let superseded = records[0].clone();
    let mut relabelled = superseded.clone();
    relabelled["metadata"]["labels"]["status"] = json!("deployed");
    let response = guard.validate(&update_review(&superseded, &relabelled)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(false), "status-label-mismatch"));
    assert!(response["status"]["message"].as_str().unwrap().contains("helm rollback"));

    let mut corrupted = old.clone();
    corrupted["data"]["release"] = json!("AAAA");
    let response = guard.validate(&update_review(&old, &corrupted)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(false), "payload-corruption"));

    let superseding = rewrite(&old, 3, "superseded");
    let response = guard.validate(&update_review(&old, &superseding)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "helm-update"));
    assert_eq!(response["auditAnnotations"]["status"], "superseded");
}

#[tokio::test]
async fn warn_and_audit_modes_allow_and_say_so() {
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let warn =
        Guard::start(Options { snapshot: records.clone(), mode: Mode::Warn, ..Options::default() }).await;
    let response = warn.validate(&delete_review(&records[1])).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["decision"], "warned");
    assert_eq!(response["auditAnnotations"]["mode"], "warn");
    assert_eq!(reason(&response), "latest-deployed-revision");
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with(
            "helm-guard (warn mode) would deny [latest-deployed-revision]: helm-guard: revision 3 is the latest"
        ) && warning.chars().count() <= 256,
        "{warning}"
    );

    let audit =
        Guard::start(Options { snapshot: records.clone(), mode: Mode::Audit, ..Options::default() }).await;
    let response = audit.validate(&delete_review(&records[1])).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["decision"], "warned");
    assert_eq!(response["auditAnnotations"]["mode"], "audit");
    assert!(response.get("warnings").is_none(), "audit mode tells only the audit log: {response}");
    // A person's dry run (`kubectl delete --dry-run=server`, `helm-guard check`) is told.
    let response = audit.validate(&dry_run(delete_review(&records[1]))).await;
    assert_eq!(response["allowed"], true);
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with(
            "helm-guard (audit mode, said to dry runs only) would deny [latest-deployed-revision]: "
        ) && warning.chars().count() <= 256,
        "{warning}"
    );
}

#[tokio::test]
async fn a_namespace_label_overrides_the_global_mode() {
    let mut records = web(&[(2, "superseded"), (3, "deployed")]);
    records.push(namespace("demo", json!({"helm-guard.io/mode": "warn"}), false));
    let guard = guard_with(records.clone()).await;
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(
        (response["allowed"].as_bool(), &response["auditAnnotations"]["decision"]),
        (Some(true), &json!("warned"))
    );

    records.pop();
    records.push(namespace("demo", json!({"helm-guard.io/mode": "enforce"}), false));
    let guard =
        Guard::start(Options { snapshot: records.clone(), mode: Mode::Audit, ..Options::default() }).await;
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(
        (response["allowed"].as_bool(), &response["auditAnnotations"]["decision"]),
        (Some(false), &json!("denied"))
    );
}

#[tokio::test]
async fn a_dry_run_gets_the_real_verdict_and_changes_nothing() {
    let records = web(&[(2, "superseded"), (3, "deployed"), (4, "failed")]);
    let guard = guard_with(records.clone()).await;
    // Deleting the failed latest is a stuck-revision recovery; as a dry run it must not hide it.
    let response = guard.validate(&dry_run(delete_review(&records[2]))).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "stuck-revision-recovery"));
    // Had the dry run hidden revision 4, revision 3 would now be the latest (D8); it is not.
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(reason(&response), "last-deployed-revision");
    // For real this time: revision 4 goes, and revision 3 becomes the latest, deployed.
    assert_eq!(guard.validate(&delete_review(&records[2])).await["allowed"], true);
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(reason(&response), "latest-deployed-revision");

    // A dry-run CREATE of revision 5 (an upgrade's) adds nothing either: revision 3 is still the
    // latest.
    let fifth = web(&[(5, "pending-upgrade")]).remove(0);
    let created = guard.validate(&dry_run(create_review(&fifth))).await;
    assert_eq!(created["allowed"], true, "{created}");
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(reason(&response), "latest-deployed-revision");
}

#[tokio::test]
async fn a_collection_delete_is_decided_record_by_record() {
    // `kubectl delete secret -l owner=helm,name=web` reaches the webhook as one DELETE per
    // object, oldest first: the history is pruned until the latest deployed revision.
    let records = web(&[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    let guard = guard_with(records.clone()).await;
    let mut verdicts = Vec::new();
    for record in &records {
        let response = guard.validate(&delete_review(record)).await;
        verdicts.push((response["allowed"].as_bool().unwrap(), reason(&response).to_owned()));
    }
    assert_eq!(
        verdicts,
        vec![
            (true, "history-pruning".to_owned()),
            (true, "history-pruning".to_owned()),
            (false, "latest-deployed-revision".to_owned())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_deletions_never_together_orphan_a_release() {
    // Either deletion alone is pruning (another deployed revision remains); both together would
    // leave a failed latest with nothing deployed.
    for round in 0..20 {
        let records = web(&[(1, "deployed"), (2, "deployed"), (3, "failed")]);
        let guard = guard_with(records.clone()).await;
        let (one, two) = (delete_review(&records[0]), delete_review(&records[1]));
        let (first, second) = tokio::join!(guard.validate(&one), guard.validate(&two));
        let allowed = [&first, &second].iter().filter(|r| r["allowed"] == true).count();
        assert_eq!(allowed, 1, "round {round}: {first} {second}");
        let denied = if first["allowed"] == true { &second } else { &first };
        assert_eq!(reason(denied), "last-deployed-revision");
    }
}

/// C2: a record Helm cannot read is let in with a warning under a name of its own, and refused
/// under the name Helm stores a revision under (Helm's write of it would fail "already exists").
#[tokio::test]
async fn creates_are_logged_and_allowed_even_when_they_do_not_decode() {
    let guard = guard_with(Vec::new()).await;
    let mut create = review(
        "admission/05-helm3-install-upgrade/007-validate-create-secret-sh.helm.release.v1.cache.v1.json",
    );
    create["request"]["object"]["data"]["release"] = json!("AAAA");
    let under_helms_name = guard.validate(&create).await;
    assert_eq!(
        (under_helms_name["allowed"].as_bool(), reason(&under_helms_name)),
        (Some(false), "implausible-record")
    );
    create["request"]["object"]["metadata"]["name"] = json!("cache-notes");
    create["request"]["name"] = json!("cache-notes");
    let response = guard.validate(&create).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(true), "helm-create"));
    assert!(response["warnings"][0].as_str().unwrap().contains("Helm will ignore this record"));
}

#[tokio::test]
async fn audit_mode_keeps_the_would_be_denial_in_the_ledger() {
    use helm_guard::admission::{Admission, Webhook, review as admission_review};
    use helm_guard::policy::PolicyConfig;
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let guard = guard_with(records.clone()).await;
    let config = PolicyConfig { default_mode: Mode::Audit, ..PolicyConfig::default() };
    let admission = Admission::snapshot(guard.index.clone(), config);
    let request = admission_review::parse(&serde_json::to_vec(&delete_review(&records[1])).unwrap()).unwrap();
    // A snapshot index: decided inline, as the server does, with nothing to wait for.
    let reviewed = admission.review_now(Webhook::Validate, request);
    assert!(reviewed.response.allowed);
    assert_eq!(reviewed.entry.decision, helm_guard::policy::Decision::Warned);
    let message = reviewed.entry.message.unwrap_or_default();
    assert!(message.contains("revision 3 is the latest, deployed revision of release demo/web"), "{message}");
}

/// A payload that decodes past `--max-decoded-bytes` is one Helm reads and the guard cannot: its
/// deletion, its update and its creation are refused (they used to count as unreadable and
/// pass), unless the break-glass annotation counts.
#[test]
fn a_record_past_the_decode_bound_is_refused_not_waved_through() {
    use helm_guard::admission::{LiveParts, Settings, Webhook, review as admission_review};
    use helm_guard::policy::PolicyConfig;
    let records = web(&[(2, "superseded"), (3, "deployed")]);
    let mut settings = Settings::new(PolicyConfig::default());
    settings.limits.max_decoded_bytes = 1024;
    let admission = common::guard::snapshot_admission_with(&records, settings, LiveParts::default());
    let decide = |review: &Value| {
        let request = admission_review::parse(&serde_json::to_vec(review).unwrap()).unwrap();
        serde_json::to_value(admission.review_now(Webhook::Validate, request).response).unwrap()
    };
    let old = &records[0];
    let mut glass = old.clone();
    glass["metadata"]["annotations"] = json!({"helm-guard.io/allow-delete": "INC-7"});
    for (what, review) in [
        ("delete", delete_review(old)),
        ("update", update_review(old, &rewrite(old, 2, "failed"))),
        ("create", create_review(&web(&[(4, "pending-upgrade")]).remove(0))),
    ] {
        let answer = decide(&review);
        assert_eq!(
            (answer["allowed"].as_bool(), reason(&answer)),
            (Some(false), "payload-too-large"),
            "{what}"
        );
        assert!(answer["status"]["message"].as_str().unwrap().contains("--max-decoded-bytes"), "{what}");
    }
    assert_eq!(reason(&decide(&delete_review(&glass))), "break-glass");
    // `helm-guard restore` of such a record by a break-glass holder (here system:masters): its
    // restore annotation counts as the break-glass one does.
    let mut restored = web(&[(4, "pending-upgrade")]).remove(0);
    restored["metadata"]["annotations"] = json!({"helm-guard.io/restored-from": "helm-guard/copy"});
    assert_eq!(reason(&decide(&create_review(&restored))), "restore");
    let by_tenant = as_user(create_review(&restored), "tenant", &["system:authenticated"]);
    assert_eq!(reason(&decide(&by_tenant)), "payload-too-large", "not for whom it does not count");
}

/// The 1 MiB wall (issue 58): Helm stores each revision whole in one Secret, and Kubernetes
/// stores at most 1 MiB of data in one. A revision past 80% of it is let through with a warning
/// that Helm prints, naming the size and the limit; a small one gets none.
#[tokio::test]
async fn a_record_near_the_object_limit_is_written_with_a_warning() {
    let guard = guard_with(web(&[(2, "deployed")])).await;
    let small = web(&[(3, "pending-upgrade")]).remove(0);
    let answer = guard.validate(&create_review(&small)).await;
    assert_eq!((answer["allowed"].as_bool(), answer.get("warnings")), (Some(true), None));
    // Values that do not compress, as a chart's binary files do not: about 0.9 MiB stored.
    let mut rng = fastrand::Rng::with_seed(58);
    let noise: String = std::iter::repeat_with(|| rng.alphanumeric()).take(900_000).collect();
    let mut payload = release_json(&small);
    payload["config"] = json!({"blob": noise});
    let large = with_release_json(small, &payload);
    let answer = guard.validate(&create_review(&large)).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    let warning = answer["warnings"][0].as_str().unwrap();
    assert!(warning.contains("of the 1048576 Kubernetes stores in one Secret"), "{warning}");
    assert!(warning.contains("sh.helm.release.v1.web.v3"), "{warning}");
}

/// C8 (issue 58): a namespace labelled `helm-guard.io/max-revisions-per-hour=N` lets a release get
/// no more than N revisions an hour, counted from its records' own creation times; the next is
/// refused with the count and the writer, and the release's uninstall still passes.
#[tokio::test]
async fn a_writer_in_a_loop_is_stopped_at_the_namespaces_cap() {
    let now = jiff::Timestamp::now();
    let looping = |label: Option<&str>| {
        let mut records = web(&[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
        for (i, record) in records.iter_mut().enumerate() {
            let created = now - jiff::SignedDuration::from_secs(60 - 10 * i as i64);
            record["metadata"]["creationTimestamp"] = json!(created.to_string());
        }
        let mut labels = json!({"kubernetes.io/metadata.name": "demo"});
        if let Some(max) = label {
            labels["helm-guard.io/max-revisions-per-hour"] = json!(max);
        }
        records.push(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo", "labels": labels}}),
        );
        records
    };
    let next = create_review(&web(&[(4, "pending-upgrade")]).remove(0));
    let guard = guard_with(looping(Some("3"))).await;
    let answer = guard.validate(&next).await;
    assert_eq!((answer["allowed"].as_bool(), reason(&answer)), (Some(false), "revision-rate"), "{answer}");
    let message = answer["status"]["message"].as_str().unwrap();
    assert!(message.contains("3 revisions created in the last hour"), "{message}");
    let records = looping(Some("3"));
    let marked = guard.validate(&update_review(&records[2], &rewrite(&records[2], 3, "uninstalling"))).await;
    assert_eq!(marked["allowed"], true, "helm uninstall is never held by the cap");
    for (label, allowed) in [(Some("4"), true), (None, true)] {
        let guard = guard_with(looping(label)).await;
        assert_eq!(guard.validate(&next).await["allowed"], allowed, "{label:?}");
    }
}

/// Helm's next storage (issue 59): release v2 records (Charts v3, helm/helm#32667, on main only)
/// are stored under the same names and labels as v1 records, as Secrets of type
/// `helm.sh/release.v2` or ConfigMaps labelled `helm.sh/release-version: v2`, their payload the same
/// gzipped JSON (`internal/release/v2` keeps v1's field names; its chart's `apiVersion` is `v3`).
/// Built here from a real Helm 4 record as that source writes them (no Helm release ships them
/// yet). The guard reads them as Helm's main does and protects them as v1 records; the label a
/// v2-aware Helm reads them by cannot be edited away.
#[tokio::test]
async fn release_v2_records_are_protected_as_v1_records_are() {
    let as_v2 = |record: &Value| {
        let mut payload = release_json(record);
        payload["chart"]["metadata"]["apiVersion"] = json!("v3");
        payload["apply_method"] = json!("ssa");
        let mut record = with_release_json(record.clone(), &payload);
        record["type"] = json!("helm.sh/release.v2");
        record
    };
    let records: Vec<Value> = web(&[(1, "superseded"), (2, "deployed")]).iter().map(as_v2).collect();
    let guard = guard_with(records.clone()).await;
    let response = guard.validate(&delete_review(&records[1])).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(reason(&response), "latest-deployed-revision");
    let response = guard.validate(&delete_review(&records[0])).await;
    assert_eq!(response["allowed"], true, "the superseded revision goes, as Helm's pruning: {response}");

    // A v2 record above v1 ones (a release upgraded to a Charts v3 chart): one history.
    let mut mixed = web(&[(1, "superseded")]);
    mixed.push(as_v2(&web(&[(2, "deployed")])[0]));
    let guard = guard_with(mixed.clone()).await;
    let response = guard.validate(&delete_review(&mixed[1])).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(false), "latest-deployed-revision"));

    // The ConfigMap's release-version label is an identity label (U2).
    let mut labelled = records[1].clone();
    labelled["metadata"]["labels"]["helm.sh/release-version"] = json!("v2");
    let mut unlabelled = labelled.clone();
    unlabelled["metadata"]["labels"].as_object_mut().unwrap().remove("helm.sh/release-version");
    let guard = guard_with(vec![records[0].clone(), labelled.clone()]).await;
    let response = guard.validate(&update_review(&labelled, &unlabelled)).await;
    assert_eq!((response["allowed"].as_bool(), reason(&response)), (Some(false), "identity-label-change"));
}
