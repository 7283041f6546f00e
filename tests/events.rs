//! Events about refusals: what a refused or warned change of a record puts on the queue, and
//! what it does not. Writing them to a real API server is checked by tests/e2e.rs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

use common::*;
use helm_guard::admission::{Admission, Io, Webhook, review as admission_review};
use helm_guard::cluster::events::{EventQueue, Notice};
use helm_guard::policy::{Mode, PolicyConfig};
use serde_json::Value;

fn with_events(records: &[Value], mode: Mode) -> (Admission, tokio::sync::mpsc::Receiver<Notice>) {
    let (queue, notices) = EventQueue::new(16, Default::default());
    let admission = Admission {
        config: PolicyConfig { default_mode: mode, ..PolicyConfig::default() },
        events: Some(queue),
        ..common::guard::snapshot_admission(records)
    };
    (admission, notices)
}

fn review(admission: &Admission, review: &Value) -> bool {
    let request = admission_review::parse(&serde_json::to_vec(review).unwrap()).unwrap();
    admission.review(Webhook::Validate, request, Io::Allowed).unwrap().response.allowed
}

#[test]
fn a_refused_delete_becomes_a_notice_on_the_record() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let (admission, mut notices) = with_events(&records, Mode::Enforce);
    let mut v2 = records[1].clone();
    v2["metadata"]["uid"] = Value::String("0b6f3a1e-2c4d-4e8f-9a7b-5c3d2e1f0a9b".into());
    assert!(!review(&admission, &as_user(delete_review(&v2), "alice", &[])));
    let notice = notices.try_recv().expect("a notice");
    assert_eq!(
        (notice.namespace.as_str(), notice.kind.as_str(), notice.name.as_str(), notice.action.as_str()),
        ("demo", "Secret", "sh.helm.release.v1.web.v2", "Delete")
    );
    assert_eq!(
        notice.uid.as_deref(),
        Some("0b6f3a1e-2c4d-4e8f-9a7b-5c3d2e1f0a9b"),
        "kubectl describe selects by uid"
    );
    assert_eq!(notice.reason, "LatestDeployedRevision");
    assert!(
        notice.note.starts_with("denied DELETE by alice (latest-deployed-revision): revision 2 is the latest, deployed revision of release demo/web"),
        "{}",
        notice.note
    );
    assert!(!notice.note.contains("Instead"), "the first sentence only: {}", notice.note);
}

#[test]
fn allowed_and_dry_run_changes_make_no_notice_and_warn_mode_does() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let (admission, mut notices) = with_events(&records, Mode::Enforce);
    assert!(review(&admission, &delete_review(&records[0])), "history pruning is allowed");
    assert!(!review(&admission, &dry_run(delete_review(&records[1]))));
    assert!(notices.try_recv().is_err(), "neither an approval nor a dry run is an Event");

    let (warned, mut notices) = with_events(&records, Mode::Warn);
    assert!(review(&warned, &delete_review(&records[1])));
    let notice = notices.try_recv().expect("a would-be refusal is an Event too");
    assert!(notice.note.starts_with("warned DELETE"), "{}", notice.note);
}

#[test]
fn a_refused_update_becomes_a_notice() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let (admission, mut notices) = with_events(&records, Mode::Enforce);
    let mut hidden = records[1].clone();
    hidden["metadata"]["labels"]["owner"] = Value::String("nobody".into());
    assert!(!review(&admission, &update_review(&records[1], &hidden)));
    let notice = notices.try_recv().expect("a notice");
    assert_eq!((notice.action.as_str(), notice.reason.as_str()), ("Update", "IdentityLabelChange"));
}
