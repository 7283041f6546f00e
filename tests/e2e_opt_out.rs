//! Opting out is a privilege, on a real API server: a tenant with the `admin` ClusterRole in its
//! namespace and update rights on namespaces (as Rancher projects or Capsule commonly grant) can
//! neither label its namespace out of the guard nor into a weaker mode, so its releases stay
//! guarded; an opt-out holder can, and leaves an Event; stricter labels and unrelated edits pass;
//! and with the guard down only opt-outs are held up (the namespace webhook's `matchConditions`
//! and `failurePolicy: Fail`).
//!
//! `cargo test --test e2e_suites e2e_opt_out:: -- --ignored`, with `helm` and `kubectl` on PATH and the cluster
//! in KUBECONFIG (`../shared/tools/kube-local up`).

use crate::common;

use std::time::Duration;

use common::cluster::{kubectl_apply, run, said};
use futures::FutureExt;
use helm_guard::policy::PolicyConfig;
use serde_json::{Value, json};

/// The tenant's and the platform admin's rights: `admin` in the namespace, and updates of
/// namespaces (labels included) cluster-wide.
fn grant(namespace: &str, users: &[&str]) {
    kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("{namespace}-namespace-editor")},
        "rules": [{"apiGroups": [""], "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
            "verbs": ["get", "list", "update", "patch"]}]}));
    for user in users {
        kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{user}-admin"), "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}));
        kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{namespace}-{user}-namespace-editor")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{namespace}-namespace-editor")},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm and kubectl: cargo test --test e2e_suites e2e_opt_out:: -- --ignored"]
async fn only_an_opt_out_holder_can_switch_the_guard_off_for_a_namespace() {
    let config = PolicyConfig { opt_out_users: vec!["platform-admin".into()], ..PolicyConfig::default() };
    let guard = common::cluster::start_guard_with("helm-guard-e2e-optout", 41, config).await;
    let common::cluster::LiveGuard { client, namespace, url, ca_pem, running, dir, .. } = guard;
    let ns = namespace.clone();
    let mut running = Some(running);
    let checks = std::panic::AssertUnwindSafe(async {
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}}));
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        grant(&ns, &["tenant", "platform-admin"]);
        let chart = dir.path().join("demo");
        assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
        for verb in ["install", "upgrade"] {
            let done = run(&["helm", verb, "app", chart.to_str().unwrap(), "-n", &ns]);
            assert!(done.status.success(), "{}", said(&done));
        }
        let label = |label: &str, user: &str| run(&["kubectl", "label", "ns", &ns, label, "--overwrite", "--as", user]);
        let delete_latest = || run(&["kubectl", "delete", "secret", "sh.helm.release.v1.app.v2", "-n", &ns, "--as", "tenant"]);

        // The tenant's way around the guard, closed.
        let refused = delete_latest();
        assert!(!refused.status.success() && said(&refused).contains("latest, deployed revision"), "{}", said(&refused));
        for opt_out in ["helm-guard.io/mode=audit", "helm-guard.io/mode=warn", "helm-guard.io/ignore=true"] {
            let done = label(opt_out, "tenant");
            assert!(!done.status.success(), "{opt_out} by the tenant: {}", said(&done));
            assert!(said(&done).contains("only user platform-admin may do that"), "{}", said(&done));
        }
        let refused = delete_latest();
        assert!(!refused.status.success(), "still guarded: {}", said(&refused));
        // Nor through the subresources, whose updates the API server keeps the labels of.
        let patch = r#"{"metadata":{"labels":{"helm-guard.io/ignore":"true"}}}"#;
        let status = ["kubectl", "patch", "ns", &ns, "--subresource=status", "--type=merge", "-p", patch, "--as", "tenant"];
        let done = run(&status);
        assert!(!done.status.success() && said(&done).contains("only user platform-admin"), "status: {}", said(&done));
        let listed = run(&["kubectl", "get", "ns", &ns, "-o", "json"]);
        let mut object: Value = serde_json::from_slice(&listed.stdout).unwrap();
        object["metadata"]["labels"]["helm-guard.io/ignore"] = json!("true");
        let file = dir.path().join("finalize.json");
        std::fs::write(&file, serde_json::to_vec(&object).unwrap()).unwrap();
        let finalize = format!("/api/v1/namespaces/{ns}/finalize");
        let done = run(&["kubectl", "replace", "--raw", &finalize, "-f", file.to_str().unwrap(), "--as", "tenant"]);
        assert!(!done.status.success() && said(&done).contains("only user platform-admin"), "finalize: {}", said(&done));
        let labels = run(&["kubectl", "get", "ns", &ns, "-o", "jsonpath={.metadata.labels}"]);
        assert!(!said(&labels).contains("helm-guard.io/ignore"), "{}", said(&labels));

        // What anyone may do: an unrelated label, a stricter mode.
        assert!(label("team=payments", "tenant").status.success());
        assert!(label("helm-guard.io/mode=enforce", "tenant").status.success());

        // The opt-out holder may, and an Event says so.
        let done = label("helm-guard.io/mode=warn", "platform-admin");
        assert!(done.status.success(), "{}", said(&done));
        let event = common::eventually(Duration::from_secs(20), || {
            let listed = run(&["kubectl", "get", "events.events.k8s.io", "-n", "default", "-o", "json"]);
            let events: Value = serde_json::from_slice(&listed.stdout).unwrap_or_default();
            let found = events["items"].as_array().into_iter().flatten().any(|e| {
                e["regarding"]["kind"] == "Namespace" && e["regarding"]["name"] == ns.as_str() && e["reason"] == "OptOut"
            });
            std::future::ready(found)
        })
        .await;
        assert!(event, "an Event on namespace {ns} in default");
        // Back to enforce (stricter: anyone).
        assert!(label("helm-guard.io/mode-", "tenant").status.success());

        // The guard away: the namespace webhook fails closed, but only opt-outs reach it.
        running.take().unwrap().shutdown().await;
        assert!(label("team=billing", "tenant").status.success(), "an unrelated edit never waits on the guard");
        let done = label("helm-guard.io/ignore=true", "platform-admin");
        assert!(!done.status.success() && said(&done).contains("namespaces.helm-guard.io"), "{}", said(&done));
    })
    .catch_unwind()
    .await;
    common::cluster::cleanup(&client, &namespace, false).await;
    for object in [
        format!("clusterrole/{namespace}-namespace-editor"),
        format!("clusterrolebinding/{namespace}-tenant-namespace-editor"),
        format!("clusterrolebinding/{namespace}-platform-admin-namespace-editor"),
    ] {
        let _ = run(&["kubectl", "delete", &object, "--ignore-not-found"]);
    }
    if let Some(running) = running {
        running.shutdown().await;
    }
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}
