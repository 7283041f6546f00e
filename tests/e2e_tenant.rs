//! A tenant who means it, on a real API server with real Helm 3 and 4 (issue 57): the breaks in
//! two steps of each write looking like Helm's are refused at some step, as a tenant with the
//! `admin` ClusterRole in its namespace makes them with kubectl; Helm's own uninstall, upgrades
//! over a deployed and a failed latest, and a rollback pass through the same guard; and a release
//! whose record nears the 1 MiB Kubernetes stores in one Secret is installed with the guard's
//! warning printed by Helm (issue 58, "the 1 MiB wall"); and a release upgraded in a loop is
//! stopped at its namespace's `helm-guard.io/max-revisions-per-hour` while its uninstall passes;
//! and release v2 records (Helm's next storage), read by Helm 3 and 4 as their own and guarded
//! as v1 records are; and records forged in Helm's exact shape refused, break-glass granted by RBAC
//! (issue 80).
//!
//! `cargo test --test e2e_suites e2e_tenant:: -- --ignored`, with `helm`, `helm3` and `kubectl`
//! on PATH and the cluster in KUBECONFIG (`../shared/tools/kube-local up`).

use crate::common;

use std::path::Path;

use common::cluster::{kubectl_apply, run, said};
use futures::FutureExt;
use helm_guard::policy::PolicyConfig;
use serde_json::{Value, json};

/// The record of `release` at `revision` as stored, with its payload's status set to `status`
/// (label and payload together, as Helm writes them).
fn with_status(ns: &str, release: &str, revision: u32, status: &str) -> Value {
    let name = format!("sh.helm.release.v1.{release}.v{revision}");
    let got = run(&["kubectl", "get", "secret", &name, "-n", ns, "-o", "json"]);
    assert!(got.status.success(), "{}", said(&got));
    let object: Value = serde_json::from_slice(&got.stdout).unwrap();
    let mut payload = common::release_json(&object);
    payload["info"]["status"] = json!(status);
    let mut object = common::with_release_json(object, &payload);
    object["metadata"]["labels"]["status"] = json!(status);
    object
}

/// The tenant's `kubectl replace` of a record with `status`; whether it went through, and what was said.
fn tenant_sets(dir: &Path, ns: &str, release: &str, revision: u32, status: &str) -> (bool, String) {
    let object = with_status(ns, release, revision, status);
    let file = dir.join(format!("{release}-{revision}-{status}.json"));
    std::fs::write(&file, serde_json::to_vec(&object).unwrap()).unwrap();
    let done = run(&["kubectl", "replace", "-f", file.to_str().unwrap(), "--as", "tenant"]);
    (done.status.success(), said(&done))
}

fn tenant_deletes(ns: &str, release: &str, revision: u32) -> (bool, String) {
    let name = format!("sh.helm.release.v1.{release}.v{revision}");
    let done = run(&["kubectl", "delete", "secret", &name, "-n", ns, "--as", "tenant"]);
    (done.status.success(), said(&done))
}

fn helm_ok(helm: &str, args: &[&str]) -> String {
    let mut all = vec![helm];
    all.extend_from_slice(args);
    let done = run(&all);
    assert!(done.status.success(), "{helm} {args:?}: {}", said(&done));
    said(&done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm and kubectl: cargo test --test e2e_suites e2e_tenant:: -- --ignored"]
async fn a_tenants_breaks_in_two_steps_are_refused_and_helm_passes() {
    let guard = common::cluster::start_guard_with("helm-guard-e2e-tenant", 44, PolicyConfig::default()).await;
    let common::cluster::LiveGuard { client, namespace, url, ca_pem, running, dir, .. } = guard;
    let ns = namespace.clone();
    let checks = std::panic::AssertUnwindSafe(async {
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}}));
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "tenant-admin", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}]}));
        let chart = dir.path().join("demo");
        assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
        let chart = chart.to_str().unwrap().to_owned();
        let chart = chart.as_str();
        let helm = |bin: &str, extra: &[&str]| {
            let mut all = extra.to_vec();
            all.extend(["-n", ns.as_str()]);
            helm_ok(bin, &all)
        };

        // Chain 1: the deployed latest marked uninstalling, then deleted while older records stay.
        for (bin, verb) in [("helm", "install"), ("helm3", "upgrade"), ("helm", "upgrade")] {
            helm(bin, &[verb, "one", chart]);
        }
        let (marked, said_) = tenant_sets(dir.path(), &ns, "one", 3, "uninstalling");
        assert!(marked, "marking the latest is Helm's uninstall: {said_}");
        let (deleted, said_) = tenant_deletes(&ns, "one", 3);
        assert!(!deleted && said_.contains("deletes the `uninstalling` latest last"), "{said_}");
        // Helm's own uninstall finishes it, the latest last.
        helm("helm", &["uninstall", "one"]);

        // Chain 2: the only deployed revision under a failed latest superseded.
        helm("helm", &["install", "two", chart]);
        let failed = run(&["helm", "upgrade", "two", chart, "--set", "image.tag=does-not-exist", "--wait", "--timeout", "2s", "-n", &ns]);
        assert!(!failed.status.success(), "the upgrade fails: {}", said(&failed));
        let (superseded, said_) = tenant_sets(dir.path(), &ns, "two", 1, "superseded");
        assert!(!superseded && said_.contains("no operation above it"), "{said_}");
        // A forged deployed revision over the failed latest.
        let mut forged = with_status(&ns, "two", 2, "deployed");
        let object = forged.as_object_mut().unwrap();
        object["metadata"] = json!({"name": "sh.helm.release.v1.two.v3", "namespace": ns,
            "labels": {"owner": "helm", "name": "two", "version": "3", "status": "deployed"}});
        let mut payload = common::release_json(&forged);
        payload["version"] = json!(3);
        let forged = common::with_release_json(forged, &payload);
        let file = dir.path().join("forged.json");
        std::fs::write(&file, serde_json::to_vec(&forged).unwrap()).unwrap();
        let created = run(&["kubectl", "create", "-f", file.to_str().unwrap(), "--as", "tenant"]);
        assert!(!created.status.success() && said(&created).contains("is not one Helm makes"), "{}", said(&created));
        // Helm upgrades over the failed latest, and rolls back, through the same guard.
        helm("helm3", &["upgrade", "two", chart]);
        helm("helm", &["rollback", "two", "1"]);

        // Chain 3: a single deployed revision superseded, failed, then deleted.
        helm("helm", &["install", "three", chart]);
        assert!(tenant_sets(dir.path(), &ns, "three", 1, "superseded").0, "helm-mapkubeapis' first step");
        assert!(tenant_sets(dir.path(), &ns, "three", 1, "failed").0, "klipper-helm's reset");
        let (deleted, said_) = tenant_deletes(&ns, "three", 1);
        assert!(!deleted && said_.contains("no revision would be left"), "{said_}");
        helm("helm", &["upgrade", "three", chart]);

        // The 1 MiB wall: a chart file that does not compress, near the limit once stored.
        let big = dir.path().join("big");
        assert!(run(&["helm", "create", big.to_str().unwrap()]).status.success());
        let mut rng = fastrand::Rng::with_seed(58);
        let noise: String = std::iter::repeat_with(|| rng.alphanumeric()).take(720_000).collect();
        std::fs::write(big.join("noise.txt"), noise).unwrap();
        for bin in ["helm", "helm3"] {
            let release = format!("big-{bin}");
            let done = run(&[bin, "install", &release, big.to_str().unwrap(), "-n", &ns]);
            assert!(done.status.success(), "{}", said(&done));
            assert!(said(&done).contains("Kubernetes stores in one Secret"), "{bin} prints the warning: {}", said(&done));
        }
        // scan names it.
        let scan = run(&[env!("CARGO_BIN_EXE_helm-guard"), "scan", "-n", &ns, "--release", "big-helm", "-o", "json"]);
        assert!(said(&scan).contains("near-size-limit"), "{}", said(&scan));

        // A writer in a loop, stopped at the namespace's cap (C8); its uninstall still passes.
        assert!(run(&["kubectl", "label", "ns", &ns, "helm-guard.io/max-revisions-per-hour=4"]).status.success());
        helm("helm", &["install", "loop", chart]);
        for _ in 0..3 {
            helm("helm", &["upgrade", "loop", chart]);
        }
        let refused = run(&["helm", "upgrade", "loop", chart, "-n", &ns]);
        assert!(!refused.status.success(), "the fifth revision in an hour: {}", said(&refused));
        assert!(said(&refused).contains("4 revisions created in the last hour"), "{}", said(&refused));
        // scan names the loop; prune cuts its history through the guard, the latest kept.
        let prune = [env!("CARGO_BIN_EXE_helm-guard"), "prune", "loop", "-n", &ns, "--keep", "2"];
        let planned = run(&prune);
        assert!(!planned.status.success() && said(&planned).contains("delete sh.helm.release.v1.loop.v1"), "{}", said(&planned));
        let pruned = run(&[&prune[..], &["--apply"]].concat());
        assert!(pruned.status.success() && said(&pruned).contains("Deleted 2 records"), "{}", said(&pruned));
        let history = run(&["helm", "history", "loop", "-n", &ns, "-o", "json"]);
        let history: Value = serde_json::from_slice(&history.stdout).unwrap();
        let revisions: Vec<u64> = history.as_array().unwrap().iter().map(|r| r["revision"].as_u64().unwrap()).collect();
        assert_eq!(revisions, vec![3, 4], "helm history after prune --keep 2");
        helm("helm", &["uninstall", "loop"]);

        // Helm's next storage (issue 59): release v2 records, made as helm/helm#32667 stores them
        // (a Secret of type helm.sh/release.v2 under a v1 record's name and labels, a Charts v3
        // chart) from real Helm 4 records, in a namespace outside this guard's scope until done.
        let next = format!("{ns}-v2");
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": next}}));
        helm_ok("helm", &["install", "web", chart, "-n", &next]);
        helm_ok("helm", &["upgrade", "web", chart, "-n", &next]);
        for revision in [1, 2] {
            let name = format!("sh.helm.release.v1.web.v{revision}");
            let got = run(&["kubectl", "get", "secret", &name, "-n", &next, "-o", "json"]);
            let stored: Value = serde_json::from_slice(&got.stdout).unwrap();
            let mut payload = common::release_json(&stored);
            payload["name"] = json!("nxt");
            payload["chart"]["metadata"]["apiVersion"] = json!("v3");
            payload["apply_method"] = json!("ssa");
            let mut labels = stored["metadata"]["labels"].clone();
            labels["name"] = json!("nxt");
            let record = json!({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v2",
                "metadata": {"name": format!("sh.helm.release.v1.nxt.v{revision}"), "namespace": next, "labels": labels},
                "data": stored["data"].clone()});
            let record = common::with_release_json(record, &payload);
            let file = dir.path().join(format!("nxt-{revision}.json"));
            std::fs::write(&file, serde_json::to_vec(&record).unwrap()).unwrap();
            let created = run(&["kubectl", "create", "-f", file.to_str().unwrap()]);
            assert!(created.status.success(), "{}", said(&created));
        }
        // A Helm that knows only v1 reads them as its own, in one history (POLICY.md).
        for bin in ["helm", "helm3"] {
            let history = helm_ok(bin, &["history", "nxt", "-n", &next]);
            assert!(history.contains("superseded") && history.contains("deployed"), "{bin}: {history}");
        }
        // Guarded from now on: the latest deployed v2 record stays, the superseded one may go.
        let scoped = format!("helm-guard-e2e={ns}");
        assert!(run(&["kubectl", "label", "ns", &next, &scoped]).status.success());
        let refused = common::eventually(std::time::Duration::from_secs(15), || {
            let dry = run(&["kubectl", "delete", "secret", "sh.helm.release.v1.nxt.v2", "-n", &next, "--dry-run=server"]);
            std::future::ready(!dry.status.success() && said(&dry).contains("latest, deployed revision"))
        })
        .await;
        assert!(refused, "the latest deployed v2 record cannot be deleted");
        let deleted = run(&["kubectl", "delete", "secret", "sh.helm.release.v1.nxt.v2", "-n", &next]);
        assert!(!deleted.status.success(), "{}", said(&deleted));
        let pruned = run(&["kubectl", "delete", "secret", "sh.helm.release.v1.nxt.v1", "-n", &next]);
        assert!(pruned.status.success(), "the superseded v2 record goes, as Helm's pruning: {}", said(&pruned));
        let _ = run(&["kubectl", "delete", "namespace", &next, "--wait=false"]);
    })
    .catch_unwind()
    .await;
    common::cluster::cleanup(&client, &namespace, false).await;
    running.shutdown().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}

/// Records forged in Helm's exact shape and the annotations that lift the rules (issue 80), on a
/// real API server as a tenant bound to `admin` in its namespace makes them with kubectl: each
/// forgery of a real Helm record is refused (an object that is not a record under Helm's name
/// too, through `record-names.helm-guard.io`); the break-glass and restore annotations count
/// only for a user bound to the ClusterRole helm-guard-break-glass (asked of the API server's
/// authorizer); Helm's next upgrade then goes on over the real history.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm and kubectl: cargo test --test e2e_suites e2e_tenant:: -- --ignored"]
async fn forged_records_are_refused_and_break_glass_is_granted_by_rbac() {
    let guard = common::cluster::start_guard_with("helm-guard-e2e-forged", 48, PolicyConfig::default()).await;
    let common::cluster::LiveGuard { client, namespace, url, ca_pem, running, dir, .. } = guard;
    let ns = namespace.clone();
    let checks = std::panic::AssertUnwindSafe(async {
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}}));
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        let bind = |user: &str, kind: &str, role: &str| {
            kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": format!("{user}-{role}"), "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}));
        };
        // The shipped ClusterRole's rules, as a Role of this namespace (a ClusterRole left behind
        // would stand in the way of the chart's), bound to oncall alone.
        let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/rbac.yaml")).unwrap();
        let documents: Vec<Value> = serde_saphyr::from_multiple(&rbac).unwrap();
        let shipped = documents.iter().find(|d| d["metadata"]["name"] == "helm-guard-break-glass").unwrap();
        assert_eq!(shipped["kind"], "ClusterRole");
        kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "helm-guard-break-glass", "namespace": ns}, "rules": shipped["rules"]}));
        for user in ["tenant", "oncall"] {
            bind(user, "ClusterRole", "admin");
        }
        bind("oncall", "Role", "helm-guard-break-glass");
        let chart = dir.path().join("demo");
        assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
        let chart = chart.to_str().unwrap();
        helm_ok("helm", &["install", "web", chart, "-n", &ns]);
        helm_ok("helm3", &["upgrade", "web", chart, "-n", &ns]);

        let create_as = |user: &str, object: &Value, file: &str| {
            let path = dir.path().join(file);
            std::fs::write(&path, serde_json::to_vec(object).unwrap()).unwrap();
            let done = run(&["kubectl", "create", "-f", path.to_str().unwrap(), "--as", user]);
            (done.status.success(), said(&done))
        };
        // Helm's next record, forged in one place each.
        let next = || {
            let mut record = with_status(&ns, "web", 2, "pending-upgrade");
            let mut payload = common::release_json(&record);
            payload["version"] = json!(3);
            record = common::with_release_json(record, &payload);
            let meta = record["metadata"].as_object_mut().unwrap();
            meta.retain(|key, _| ["name", "namespace", "labels"].contains(&key.as_str()));
            record["metadata"]["name"] = json!("sh.helm.release.v1.web.v3");
            record["metadata"]["labels"]["version"] = json!("3");
            record
        };
        let forgeries: Vec<(&str, Value, &str)> = vec![
            ("zero-padded", { let mut r = next(); r["metadata"]["name"] = json!("sh.helm.release.v1.web.v03"); r }, "Helm names the record of this payload sh.helm.release.v1.web.v3"),
            ("another namespace", { let r = next(); let mut p = common::release_json(&r); p["namespace"] = json!("kube-system"); common::with_release_json(r, &p) }, "names a namespace other than"),
            ("immutable", { let mut r = next(); r["immutable"] = json!(true); r }, "sets immutable"),
            ("unreadable", { let mut r = next(); r["data"]["release"] = json!("bm90IGEgcmVsZWFzZQ=="); r }, "already exists"),
            ("not a record", { let mut r = next(); r["metadata"]["labels"] = json!({"app": "squat"}); r }, "no owner=helm label"),
            ("restored by a tenant", {
                let mut r = with_status(&ns, "web", 2, "deployed");
                let mut p = common::release_json(&r);
                p["version"] = json!(3);
                r = common::with_release_json(r, &p);
                r["metadata"] = json!({"name": "sh.helm.release.v1.web.v3", "namespace": ns,
                    "labels": {"owner": "helm", "name": "web", "version": "3", "status": "deployed"},
                    "annotations": {"helm-guard.io/restored-from": "helm-guard/anything"}});
                r
            }, "is not one Helm makes"),
        ];
        for (what, object, says) in &forgeries {
            let (created, message) = create_as("tenant", object, &format!("{}.json", what.replace(' ', "-")));
            assert!(!created && message.contains(says), "{what}: {message}");
        }
        // Break-glass: the tenant's annotation counts for nothing, oncall's does.
        let annotated = run(&["kubectl", "annotate", "secret", "sh.helm.release.v1.web.v2", "-n", &ns,
            "helm-guard.io/allow-delete=INC-80", "--as", "tenant"]);
        assert!(annotated.status.success(), "annotations are free: {}", said(&annotated));
        let by_tenant = run(&["kubectl", "delete", "secret", "sh.helm.release.v1.web.v2", "-n", &ns, "--as", "tenant", "--dry-run=server"]);
        assert!(!by_tenant.status.success() && said(&by_tenant).contains("allows `breakglass`"), "{}", said(&by_tenant));
        let by_oncall = run(&["kubectl", "delete", "secret", "sh.helm.release.v1.web.v2", "-n", &ns, "--as", "oncall", "--dry-run=server"]);
        assert!(by_oncall.status.success(), "oncall holds helm-guard-break-glass: {}", said(&by_oncall));
        let unannotated = run(&["kubectl", "annotate", "secret", "sh.helm.release.v1.web.v2", "-n", &ns,
            "helm-guard.io/allow-delete-", "--as", "tenant"]);
        assert!(unannotated.status.success(), "{}", said(&unannotated));

        // Nothing forged got in: Helm's next upgrade goes on over the real history.
        helm_ok("helm", &["upgrade", "web", chart, "-n", &ns]);
        let history = helm_ok("helm", &["history", "web", "-n", &ns, "-o", "json"]);
        let history: Vec<Value> = serde_json::from_str(&history).unwrap();
        let revisions: Vec<(u64, &str)> =
            history.iter().map(|h| (h["revision"].as_u64().unwrap(), h["status"].as_str().unwrap())).collect();
        assert_eq!(revisions, [(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    })
    .catch_unwind()
    .await;
    common::cluster::cleanup(&client, &namespace, false).await;
    running.shutdown().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}
