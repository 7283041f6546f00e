//! Events about refusals: what a refused or warned change of a record puts on the queue, and
//! what it does not. Writing them to a real API server is checked by tests/e2e.rs.

use crate::common;

use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings, Webhook, review as admission_review};
use helm_guard::cluster::events::{EventQueue, Notice};
use helm_guard::policy::{Mode, PolicyConfig};
use serde_json::Value;

fn with_events(records: &[Value], mode: Mode) -> (Admission, tokio::sync::mpsc::Receiver<Notice>) {
    let (queue, notices) = EventQueue::new(16, Default::default());
    let settings = Settings::new(PolicyConfig { default_mode: mode, ..PolicyConfig::default() });
    let live = LiveParts { events: Some(queue), ..LiveParts::default() };
    let admission = common::guard::snapshot_admission_with(records, settings, live);
    (admission, notices)
}

fn review(admission: &Admission, review: &Value) -> bool {
    let request = admission_review::parse(&serde_json::to_vec(review).unwrap()).unwrap();
    admission.review_now(Webhook::Validate, request).response.allowed
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

/// A HelmChart that manages `demo/web`, as K3s's helm-controller stores it.
fn chart() -> Value {
    serde_json::json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"namespace": "kube-system", "name": "web", "uid": "5e1d-chart"},
        "spec": {"chart": "demo", "targetNamespace": "demo"}})
}

#[test]
fn a_refusal_about_a_release_a_helmchart_manages_is_a_notice_on_the_chart_too() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let (admission, mut notices) = with_events(&[records.clone(), vec![chart()]].concat(), Mode::Enforce);
    let mut forged = records[1].clone();
    forged["metadata"]["labels"]["helmcharts.helm.cattle.io/configHash"] = Value::String("FORGED".into());
    assert!(!review(&admission, &update_review(&records[1], &forged)));
    let on_record = notices.try_recv().expect("a notice on the record");
    assert_eq!((on_record.kind.as_str(), on_record.reason.as_str()), ("Secret", "ProtectedLabelChange"));
    let on_chart = notices.try_recv().expect("a notice on the HelmChart");
    assert_eq!(
        (
            on_chart.api_version.as_str(),
            on_chart.kind.as_str(),
            on_chart.namespace.as_str(),
            on_chart.name.as_str()
        ),
        ("helm.cattle.io/v1", "HelmChart", "kube-system", "web")
    );
    assert_eq!(on_chart.uid.as_deref(), Some("5e1d-chart"), "kubectl describe helmchart selects by uid");
    assert!(
        on_chart.note.starts_with("Secret demo/sh.helm.release.v1.web.v2: denied UPDATE"),
        "{}",
        on_chart.note
    );

    // A release no chart manages: the record's notice only.
    let (unmanaged, mut notices) = with_events(&records, Mode::Enforce);
    assert!(!review(&unmanaged, &update_review(&records[1], &forged)));
    assert!(notices.try_recv().is_ok() && notices.try_recv().is_err());
}

#[test]
fn a_rewritten_helm_install_pod_is_a_notice_on_its_chart_and_an_annotated_one_is_not() {
    let orphaned = web(&[(1, "superseded"), (2, "superseded")]);
    let (admission, mut notices) = with_events(&[orphaned, vec![chart()]].concat(), Mode::Enforce);
    let pod =
        common::review("admission/17-helm-install-pod-create/001-mutate-create-pod-helm-install-web-.json");
    let request = admission_review::parse(&serde_json::to_vec(&pod).unwrap()).unwrap();
    assert!(admission.review_now(Webhook::Mutate, request).response.allowed);
    let notice = notices.try_recv().expect("a notice on the HelmChart");
    assert_eq!(
        (notice.kind.as_str(), notice.name.as_str(), notice.reason.as_str()),
        ("HelmChart", "web", "HelmInstallPodRewritten")
    );
    assert!(
        notice.note.contains("install -> upgrade") && notice.note.contains("now: upgrade"),
        "{}",
        notice.note
    );

    let healthy = web(&[(1, "deployed")]);
    let (admission, mut notices) = with_events(&[healthy, vec![chart()]].concat(), Mode::Enforce);
    let request = admission_review::parse(&serde_json::to_vec(&pod).unwrap()).unwrap();
    admission.review_now(Webhook::Mutate, request);
    assert!(notices.try_recv().is_err(), "a pod only annotated is no Event");
}

/// An Event is written only about an object stored with the uid the review gave it: a review the
/// API server never sent, naming a record that is not there (or another object of its name),
/// writes none. Against a stub API server that stores one record and counts the Events created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_is_written_only_about_an_object_stored_as_the_review_said() {
    use axum::extract::{Path, State};
    use axum::routing::{get, post};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let created = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let read = move |Path((_, name)): Path<(String, String)>| async move {
        counted.fetch_add(1, Ordering::SeqCst);
        if name == "sh.helm.release.v1.web.v2" {
            axum::Json(serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": name, "namespace": "demo", "uid": "stored-uid"}}))
            .into_response()
        } else {
            (
                axum::http::StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "reason": "NotFound", "code": 404})),
            )
                .into_response()
        }
    };
    let create = |State(created): State<Arc<AtomicUsize>>, body: axum::body::Bytes| async move {
        created.fetch_add(1, Ordering::SeqCst);
        (axum::http::StatusCode::CREATED, body).into_response()
    };
    use axum::response::IntoResponse;
    let app = axum::Router::new()
        .route("/api/v1/namespaces/{namespace}/secrets/{name}", get(read))
        .route("/apis/events.k8s.io/v1/namespaces/{namespace}/events", post(create))
        .with_state(created.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client =
        kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
    let (queue, notices) = EventQueue::new(16, Default::default());
    let writer = tokio::spawn(helm_guard::cluster::events::write_events(
        client,
        notices,
        "test".into(),
        Default::default(),
    ));
    let notice = |name: &str, uid: &str| Notice {
        namespace: "demo".into(),
        api_version: "v1".into(),
        kind: "Secret".into(),
        name: name.into(),
        uid: Some(uid.into()),
        action: "Delete".into(),
        reason: "LatestDeployedRevision".into(),
        note: "denied".into(),
        type_: "Warning",
        watched: false,
    };
    queue.offer(notice("sh.helm.release.v1.web.v9", "made-up"));
    queue.offer(notice("sh.helm.release.v1.web.v2", "another-uid"));
    queue.offer(notice("sh.helm.release.v1.web.v2", "stored-uid"));
    let written = common::eventually(std::time::Duration::from_secs(5), || {
        std::future::ready(created.load(Ordering::SeqCst) >= 1)
    })
    .await;
    assert!(written, "the Event about the stored object is written");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(created.load(Ordering::SeqCst), 1, "and only that one");
    // One the watch holds under its uid needs no GET (issue 62: a GET per new series).
    let asked = reads.load(Ordering::SeqCst);
    queue.offer(Notice { watched: true, ..notice("sh.helm.release.v1.web.v3", "watched-uid") });
    let written = common::eventually(std::time::Duration::from_secs(5), || {
        std::future::ready(created.load(Ordering::SeqCst) >= 2)
    })
    .await;
    assert!(written, "the Event about the watched object is written");
    assert_eq!(reads.load(Ordering::SeqCst), asked, "without a GET");
    writer.abort();
}
