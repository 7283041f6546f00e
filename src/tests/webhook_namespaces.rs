//! The namespace webhook (POLICY.md N1–N4) as the API server calls it: a real UPDATE review's
//! envelope carrying a real Namespace (`tests/fixtures/namespace-tenant-a.json`, read from
//! kube-apiserver v1.36.2) whose opt-out labels change.

use crate::common;

use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings, Webhook, review as admission_review};
use helm_guard::cluster::events::{EventQueue, Notice};
use helm_guard::policy::{Mode, PolicyConfig};
use serde_json::{Value, json};

fn tenant_a() -> Value {
    serde_json::from_str(&std::fs::read_to_string("tests/fixtures/namespace-tenant-a.json").unwrap()).unwrap()
}

fn labelled(labels: &[(&str, &str)]) -> Value {
    let mut namespace = tenant_a();
    for (key, value) in labels {
        namespace["metadata"]["labels"][*key] = json!(value);
    }
    namespace
}

/// The UPDATE of namespace tenant-a from `old` to `new`, by `user`.
fn namespace_update(old: &Value, new: &Value, user: &str, groups: &[&str]) -> Value {
    let mut review = update_review(old, new);
    let request = &mut review["request"];
    request["kind"] = json!({"group": "", "version": "v1", "kind": "Namespace"});
    request["resource"] = json!({"group": "", "version": "v1", "resource": "namespaces"});
    request["requestKind"] = request["kind"].clone();
    request["requestResource"] = request["resource"].clone();
    request["name"] = json!("tenant-a");
    request.as_object_mut().unwrap().remove("namespace");
    as_user(review, user, groups)
}

fn guard(mode: Mode) -> (Admission, tokio::sync::mpsc::Receiver<Notice>) {
    let (queue, notices) = EventQueue::new(16, Default::default());
    let config = PolicyConfig {
        default_mode: mode,
        opt_out_groups: vec!["platform".into()],
        exempt_namespaces: vec!["sandbox".into()],
        ..PolicyConfig::default()
    };
    let live = LiveParts { events: Some(queue), ..LiveParts::default() };
    (common::guard::snapshot_admission_with(&[], Settings::new(config), live), notices)
}

fn decide(admission: &Admission, review: &Value) -> kube::core::admission::AdmissionResponse {
    let request = admission_review::parse(&serde_json::to_vec(review).unwrap()).unwrap();
    admission.review_now(Webhook::Validate, request).response
}

#[test]
fn a_tenant_cannot_opt_its_namespace_out_and_an_opt_out_holder_can() {
    let (admission, mut notices) = guard(Mode::Enforce);
    let before = tenant_a();
    for opt_out in [("helm-guard.io/mode", "audit"), ("helm-guard.io/ignore", "true")] {
        let refused = decide(
            &admission,
            &namespace_update(&before, &labelled(&[opt_out]), "tenant", &["system:authenticated"]),
        );
        assert!(!refused.allowed, "{opt_out:?}");
        assert_eq!(refused.result.code, 403);
        assert!(
            refused.result.message.contains("only members of group platform may do that"),
            "{}",
            refused.result.message
        );
        assert_eq!(refused.audit_annotations["reason"], "opt-out-refused");
        let notice = notices.try_recv().expect("a refusal is an Event");
        assert_eq!(
            (notice.namespace.as_str(), notice.kind.as_str(), notice.name.as_str()),
            ("default", "Namespace", "tenant-a")
        );
    }

    let allowed = decide(
        &admission,
        &namespace_update(&before, &labelled(&[("helm-guard.io/mode", "audit")]), "bob", &["platform"]),
    );
    assert!(allowed.allowed);
    let annotations = allowed.audit_annotations;
    assert_eq!(annotations["reason"], "opt-out");
    let notice = notices.try_recv().expect("an allowed opt-out is an Event");
    assert!(
        notice.note.starts_with("allowed opt-out (enforce -> audit) by bob (group:platform)"),
        "{}",
        notice.note
    );
    assert_eq!(notice.uid.as_deref(), before["metadata"]["uid"].as_str(), "kubectl selects Events by uid");
}

#[test]
fn stricter_labels_and_unrelated_edits_pass_for_anyone_without_an_event() {
    let (admission, mut notices) = guard(Mode::Enforce);
    let audit = labelled(&[("helm-guard.io/mode", "audit")]);
    for (old, new) in [
        (tenant_a(), labelled(&[("team", "billing")])),
        (audit.clone(), tenant_a()),
        (audit, labelled(&[("helm-guard.io/mode", "warn")])),
        (labelled(&[("helm-guard.io/ignore", "true")]), tenant_a()),
    ] {
        let response = decide(&admission, &namespace_update(&old, &new, "tenant", &[]));
        assert!(response.allowed);
        assert_eq!(response.audit_annotations["reason"], "not-an-opt-out");
    }
    assert!(notices.try_recv().is_err());
}

#[test]
fn an_exempt_namespace_may_be_opted_out_by_anyone_and_warn_mode_only_warns() {
    let (admission, _notices) = guard(Mode::Enforce);
    let mut sandbox = tenant_a();
    sandbox["metadata"]["name"] = json!("sandbox");
    let mut ignored = sandbox.clone();
    ignored["metadata"]["labels"]["helm-guard.io/ignore"] = json!("true");
    let mut review = namespace_update(&sandbox, &ignored, "tenant", &[]);
    review["request"]["name"] = json!("sandbox");
    let response = decide(&admission, &review);
    assert!(response.allowed);
    assert_eq!(response.audit_annotations["reason"], "opt-out");

    let (warned, _notices) = guard(Mode::Warn);
    let response = decide(
        &warned,
        &namespace_update(&tenant_a(), &labelled(&[("helm-guard.io/ignore", "true")]), "tenant", &[]),
    );
    assert!(response.allowed);
    let warnings = response.warnings.unwrap();
    assert!(warnings.iter().any(|w| w.contains("would deny [opt-out-refused]")), "{warnings:?}");
}
