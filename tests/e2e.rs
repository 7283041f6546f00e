//! End-to-end against a real cluster (the one in KUBECONFIG). Ignored unless asked for:
//! `cargo test --test e2e_suites e2e:: -- --ignored`.
//!
//! The guard runs in this process; the API server must reach it at
//! https://$HELM_GUARD_E2E_HOST:$HELM_GUARD_E2E_PORT (defaults 127.0.0.1 and 9443). With kind or
//! k3d the API server runs in a container: set HELM_GUARD_E2E_HOST to the address of this machine
//! on the Docker network (see CONTRIBUTING.md, "End-to-end tests").
//!
//! Everything it creates is scoped to one fresh namespace and two webhook configurations whose
//! namespaceSelector matches only that namespace; they are removed at the end, webhooks first,
//! also when a check fails.

use crate::common;

use std::time::Duration;

use common::*;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server (the cluster in KUBECONFIG): cargo test --test e2e_suites e2e:: -- --ignored"]
async fn end_to_end_against_a_real_cluster() {
    let guard = common::cluster::start_guard("helm-guard-e2e", 0).await;
    let common::cluster::LiveGuard { client, namespace, url, ca_pem, running, .. } = guard;
    let checks = std::panic::AssertUnwindSafe(run_checks(client.clone(), namespace.clone(), url, ca_pem))
        .catch_unwind()
        .await;
    common::cluster::cleanup(&client, &namespace, checks.is_ok()).await;
    running.shutdown().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}

fn in_namespace(mut object: Value, namespace: &str) -> Value {
    let meta = object["metadata"].as_object_mut().unwrap();
    for key in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
        meta.remove(key);
    }
    meta.insert("namespace".into(), json!(namespace));
    object
}

fn secret(object: Value) -> Secret {
    serde_json::from_value(object).unwrap()
}

async fn run_checks(client: Client, namespace: String, url: String, ca_pem: String) {
    let ns = namespace.as_str();
    let namespaces = Api::<Namespace>::all(client.clone());
    let labelled = json!({"metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(labelled).unwrap()).await.unwrap();

    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let base = in_namespace(helm4_secret(), ns);
    let web = history(&base, &[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    let cache: Vec<Value> = history(&base, &[(1, "superseded"), (2, "deployed")])
        .iter()
        .map(|r| as_release(r, "cache"))
        .collect();
    let orphan = as_release(&history(&base, &[(1, "superseded")])[0], "orphan");
    for record in web.iter().chain(cache.iter()).chain(std::iter::once(&orphan)) {
        secrets.create(&PostParams::default(), &secret(record.clone())).await.unwrap();
    }

    common::cluster::register_webhooks(&client, ns, &url, &ca_pem).await;
    // Wait until the API server calls the guard: a dry-run delete of the latest deployed revision
    // gets refused.
    let dry_run = DeleteParams { dry_run: true, ..DeleteParams::default() };
    let guarded = eventually(Duration::from_secs(30), || async {
        secrets.delete("sh.helm.release.v1.web.v3", &dry_run).await.is_err()
    })
    .await;
    assert!(guarded, "the webhook took effect within 30 s");

    // Deleting the latest deployed revision is refused, with the reason.
    let refused = secrets.delete("sh.helm.release.v1.web.v3", &DeleteParams::default()).await.unwrap_err();
    let text = refused.to_string();
    assert!(text.contains("latest, deployed revision") && text.contains("cannot re-use a name"), "{text}");

    // The refusal is an Event on the record, where `kubectl describe` looks (core/v1 Events by
    // involvedObject name and uid); the client's two retries join its series.
    for _ in 0..2 {
        assert!(secrets.delete("sh.helm.release.v1.web.v3", &DeleteParams::default()).await.is_err());
    }
    let uid = secrets.get("sh.helm.release.v1.web.v3").await.unwrap().metadata.uid.unwrap();
    let described = ListParams::default()
        .fields(&format!("involvedObject.name=sh.helm.release.v1.web.v3,involvedObject.uid={uid}"));
    let core_events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns);
    let counted = eventually(Duration::from_secs(25), || async {
        core_events.list(&described).await.unwrap().items.iter().any(|e| {
            e.reason.as_deref() == Some("LatestDeployedRevision")
                && e.type_.as_deref() == Some("Warning")
                && e.message.as_deref().is_some_and(|m| m.starts_with("denied DELETE by "))
                && e.series.as_ref().is_some_and(|s| s.count == Some(3))
        })
    })
    .await;
    assert!(counted, "one Event, a series of 3: {:#?}", core_events.list(&described).await.unwrap().items);

    // Deleting the oldest is allowed.
    secrets.delete("sh.helm.release.v1.web.v1", &DeleteParams::default()).await.unwrap();

    // A collection delete is decided per record: revision 2 goes, revision 3 stays.
    let selector = ListParams::default().labels("owner=helm,name=web");
    let _ = secrets.delete_collection(&DeleteParams::default(), &selector).await;
    let left: Vec<String> =
        secrets.list(&selector).await.unwrap().items.into_iter().filter_map(|s| s.metadata.name).collect();
    assert_eq!(left, vec!["sh.helm.release.v1.web.v3".to_owned()]);

    // An uninstall-style purge: latest marked uninstalling, then every revision, oldest first.
    let uninstalling = rewrite(&cache[1], 2, "uninstalling");
    let mut current = secrets.get("sh.helm.release.v1.cache.v2").await.unwrap();
    current.data = secret(uninstalling).data;
    current.metadata.labels.get_or_insert_default().insert("status".into(), "uninstalling".into());
    secrets.replace("sh.helm.release.v1.cache.v2", &PostParams::default(), &current).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // let the watch see the update
    secrets.delete("sh.helm.release.v1.cache.v1", &DeleteParams::default()).await.unwrap();
    secrets.delete("sh.helm.release.v1.cache.v2", &DeleteParams::default()).await.unwrap();

    // A helm-install pod for the orphaned release comes back with `upgrade`.
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let mut pod = review("admission/17-helm-install-pod-create/001-mutate-create-pod-helm-install-web-.json")
        ["request"]["object"]
        .clone();
    pod["metadata"] = json!({"name": "helm-install-orphan", "namespace": ns, "labels": {"helmcharts.helm.cattle.io/chart": "orphan"}});
    let spec = pod["spec"].as_object_mut().unwrap();
    // What the API server fills in itself, or refuses to be told.
    for key in
        ["serviceAccountName", "serviceAccount", "volumes", "tolerations", "priority", "preemptionPolicy"]
    {
        spec.remove(key);
    }
    spec.insert("restartPolicy".into(), json!("Never"));
    let container = &mut pod["spec"]["containers"][0];
    container.as_object_mut().unwrap().remove("volumeMounts");
    for var in container["env"].as_array_mut().unwrap() {
        match var["name"].as_str() {
            Some("NAME") => var["value"] = json!("orphan"),
            Some("TARGET_NAMESPACE" | "CHART_NAMESPACE") => var["value"] = json!(ns),
            _ => {}
        }
    }
    // A new namespace gets its `default` service account a moment after it is created.
    let accounts = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), ns);
    let account = eventually(Duration::from_secs(30), || async {
        accounts.get_opt("default").await.unwrap().is_some()
    })
    .await;
    assert!(account, "the namespace's default service account came");
    let created = pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    let annotations = created.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("helm-guard.io/release-state").map(String::as_str),
        Some("orphaned-superseded")
    );
    let args = created.spec.unwrap().containers[0].args.clone().unwrap();
    assert_eq!(args[0], "upgrade");
    let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    let _ = pods.delete("helm-install-orphan", &now).await;

    // Deleting the whole namespace completes (the namespace controller's deletions are allowed).
    namespaces.delete(ns, &DeleteParams::default()).await.unwrap();
    let gone =
        eventually(Duration::from_secs(120), || async { namespaces.get_opt(ns).await.unwrap().is_none() })
            .await;
    assert!(gone, "the namespace was deleted within 2 minutes");
}
