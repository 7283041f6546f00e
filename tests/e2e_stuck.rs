//! Every release knows its writer (issue 58), on a real API server with real Helm 4 run as an
//! in-cluster writer: a service account's token bound to a pod (`kubectl create token
//! --bound-object-kind Pod`), so the API server names the pod in each request's `userInfo.extra`.
//! An upgrade killed in its `--wait` leaves a pending revision: while its writer's pod exists it is
//! not stuck (`scan`, `repair` refuses), once the pod is deleted it is at once, young (`repair
//! --apply` fixes it; `serve --unlock-abandoned` marks it failed itself, and never while the pod
//! runs); beside it, an unguarded twin's release stays locked. Under `helm-guard.io/owner-lock`
//! another identity's upgrade is refused and the owner's passes.
//!
//! `cargo test --test e2e_suites e2e_stuck:: -- --ignored`, with `helm` and `kubectl` on PATH and
//! the cluster in KUBECONFIG (`../shared/tools/kube-local up`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{kubectl_apply, kubectl_json, run, said};
use futures::FutureExt;
use helm_guard::policy::PolicyConfig;
use serde_json::{Value, json};

/// A pod that exists and never runs (no node matches its selector; a pod bound to a node that
/// does not exist is deleted by the pod GC within seconds): what a writer's token is bound to.
fn writer_pod(ns: &str, name: &str) -> String {
    kubectl_apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeSelector": {"helm-guard-e2e/no-such-node": "true"}, "serviceAccountName": "deployer",
                 "containers": [{"name": "helm", "image": "helm:never-pulled"}]}}));
    kubectl_json(&["get", "pod", name, "-n", ns])["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// A kubeconfig whose user is service account `deployer` with a token bound to pod `pod`.
fn bound_kubeconfig(dir: &Path, ns: &str, pod: &str, uid: &str) -> PathBuf {
    let token = run(&[
        "kubectl",
        "create",
        "token",
        "deployer",
        "-n",
        ns,
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        pod,
        "--bound-object-uid",
        uid,
        "--duration",
        "1h",
    ]);
    assert!(token.status.success(), "{}", said(&token));
    let token = String::from_utf8_lossy(&token.stdout).trim().to_owned();
    let view = run(&["kubectl", "config", "view", "--minify", "--raw", "-o", "json"]);
    let mut config: Value = serde_json::from_slice(&view.stdout).unwrap();
    config["users"] = json!([{"name": "deployer", "user": {"token": token}}]);
    config["contexts"][0]["context"]["user"] = json!("deployer");
    let path = dir.join(format!("kubeconfig-{pod}"));
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

fn helm_as(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["helm", "--kubeconfig", kubeconfig.to_str().unwrap()];
    all.extend_from_slice(args);
    run(&all)
}

fn status_of(ns: &str, release: &str, revision: u32) -> Option<String> {
    let name = format!("sh.helm.release.v1.{release}.v{revision}");
    let got = run(&["kubectl", "get", "secret", &name, "-n", ns, "-o", "jsonpath={.metadata.labels.status}"]);
    got.status.success().then(|| String::from_utf8_lossy(&got.stdout).into_owned())
}

/// `helm upgrade --wait` of a chart that never becomes ready, killed (SIGKILL, as a controller's
/// pod is) once its pending revision is stored: the release is left `pending-upgrade`.
fn upgrade_killed(kubeconfig: &Path, ns: &str, release: &str, chart: &str, revision: u32) {
    let mut helm = Command::new("helm")
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "upgrade", release, chart, "-n", ns])
        .args(["--set", "image.tag=never-ready", "--wait", "--timeout", "10m"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while status_of(ns, release, revision).as_deref() != Some("pending-upgrade") {
        assert!(started.elapsed() < Duration::from_secs(60), "the upgrade never stored its pending revision");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    helm.kill().unwrap();
    helm.wait().unwrap();
}

fn helm_guard(args: &[&str]) -> (bool, String) {
    let done = Command::new(env!("CARGO_BIN_EXE_helm-guard")).args(args).output().unwrap();
    (done.status.success(), said(&done))
}

/// `scan -o json` of one release.
fn scanned(ns: &str, release: &str) -> Value {
    let args = [
        "scan",
        "-n",
        ns,
        "--release",
        release,
        "--guard-namespace",
        ns,
        "--stuck-after",
        "1s",
        "-o",
        "json",
    ];
    let (_, out) = helm_guard(&args);
    let start = out.find('[').unwrap_or_else(|| panic!("{out}"));
    let reports: Value = serde_json::from_str(&out[start..]).unwrap_or_else(|e| panic!("{e}: {out}"));
    reports[0].clone()
}

fn eventually(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The guard's namespace (also the releases'), with service account `deployer` (admin there)
/// and a Helm chart; the twin, opted out.
fn setup(guard: &common::cluster::LiveGuard) -> (String, String) {
    let ns = guard.namespace.clone();
    kubectl_apply(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}}),
    );
    let twin = format!("{ns}-twin");
    kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": twin,
        "labels": {"helm-guard-e2e": ns, "helm-guard.io/ignore": "true"}}}));
    for namespace in [&ns, &twin] {
        kubectl_apply(
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": namespace}}),
        );
        kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "deployer-admin", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": namespace}]}));
    }
    let chart = guard.dir.path().join("demo");
    assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
    (twin, chart.to_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm and kubectl: cargo test --test e2e_suites e2e_stuck:: -- --ignored"]
async fn a_pending_upgrade_is_stuck_when_its_writers_pod_is_gone_and_never_while_it_runs() {
    let guard = common::cluster::start_guard_with("helm-guard-e2e-stuck", 45, PolicyConfig::default()).await;
    let (ns, dir) = (guard.namespace.clone(), guard.dir.path().to_owned());
    let (twin, chart) = setup(&guard);
    common::cluster::register_webhooks(&guard.client, &ns, &guard.url, &guard.ca_pem).await;
    let checks = std::panic::AssertUnwindSafe(async {
        for namespace in [&ns, &twin] {
            let uid = writer_pod(namespace, "writer");
            let kubeconfig = bound_kubeconfig(&dir, namespace, "writer", &uid);
            let installed = helm_as(&kubeconfig, &["install", "web", &chart, "-n", namespace]);
            assert!(installed.status.success(), "{}", said(&installed));
            upgrade_killed(&kubeconfig, namespace, "web", &chart, 2);
        }
        // The writer of revision 2 is remembered (a Lease in the guard's namespace, not Helm's
        // records), its pod named; it runs, so revision 2 is not stuck however old.
        std::thread::sleep(Duration::from_secs(3));
        let report = scanned(&ns, "web");
        assert_eq!(report["state"], "pending-upgrade", "{report}");
        assert_eq!(report["stuck"], false, "its writer's pod exists: {report}");
        let writer = &report["writer"];
        assert_eq!(writer["user"], format!("system:serviceaccount:{ns}:deployer"), "{report}");
        assert_eq!(writer["pod"], format!("{ns}/writer"), "{report}");
        assert_eq!(writer["alive"], true, "{report}");
        let (repaired, out) = helm_guard(&[
            "repair",
            "web",
            "-n",
            &ns,
            "--guard-namespace",
            &ns,
            "--stuck-after",
            "1s",
            "--apply",
        ]);
        assert!(!repaired && out.contains("still runs"), "{out}");
        assert_eq!(status_of(&ns, "web", 2).as_deref(), Some("pending-upgrade"));

        // The pod deleted: stuck at once, young, and repair fixes it.
        for namespace in [&ns, &twin] {
            assert!(
                run(&["kubectl", "delete", "pod", "writer", "-n", namespace, "--grace-period=0", "--force"])
                    .status
                    .success()
            );
        }
        eventually(Duration::from_secs(10), "stuck once the writer's pod is gone", || {
            let report = scanned(&ns, "web");
            report["stuck"] == true
                && report["stuck_because"] == "writer-gone"
                && report["writer"]["alive"] == false
        });
        let young = scanned(&ns, "web");
        assert!(young["hint"].as_str().unwrap().starts_with("stuck (its writer's pod is gone)"), "{young}");
        let (repaired, out) = helm_guard(&["repair", "web", "-n", &ns, "--guard-namespace", &ns, "--apply"]);
        assert!(
            repaired,
            "repair --apply of a young revision whose writer is gone (default --stuck-after 15m): {out}"
        );
        assert_eq!(status_of(&ns, "web", 2).as_deref(), Some("failed"));
        let upgraded = run(&["helm", "upgrade", "web", &chart, "-n", &ns]);
        assert!(upgraded.status.success(), "{}", said(&upgraded));
        // Unguarded, the same release stays locked: Helm refuses every upgrade.
        let locked = run(&["helm", "upgrade", "web", &chart, "-n", &twin]);
        assert!(!locked.status.success() && said(&locked).contains("another operation"), "{}", said(&locked));
    });
    let outcome = checks.catch_unwind().await;
    common::cluster::cleanup(&guard.client, &guard.namespace, false).await;
    let _ = run(&["kubectl", "delete", "namespace", &format!("{}-twin", guard.namespace), "--wait=false"]);
    guard.running.shutdown().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm and kubectl: cargo test --test e2e_suites e2e_stuck:: -- --ignored"]
async fn unlock_abandoned_marks_failed_only_once_the_writers_pod_is_gone_and_the_owner_lock_holds() {
    let guard = common::cluster::start_guard_live(
        "helm-guard-e2e-unlock",
        46,
        PolicyConfig::default(),
        |namespace| helm_guard::live::LiveOptions {
            unlock_abandoned: true,
            ..common::cluster::live_options(Some(namespace), Default::default())
        },
    )
    .await;
    let (ns, dir) = (guard.namespace.clone(), guard.dir.path().to_owned());
    let (_twin, chart) = setup(&guard);
    common::cluster::register_webhooks(&guard.client, &ns, &guard.url, &guard.ca_pem).await;
    let checks = std::panic::AssertUnwindSafe(async {
        let uid = writer_pod(&ns, "writer");
        let kubeconfig = bound_kubeconfig(&dir, &ns, "writer", &uid);
        assert!(helm_as(&kubeconfig, &["install", "web", &chart, "-n", &ns]).status.success());
        upgrade_killed(&kubeconfig, &ns, "web", &chart, 2);
        // Never while the writer's pod runs.
        std::thread::sleep(Duration::from_secs(15));
        let managers = run(&[
            "kubectl",
            "get",
            "secret",
            "sh.helm.release.v1.web.v2",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ]);
        let pods = run(&["kubectl", "get", "pods", "-n", &ns, "-o", "wide"]);
        assert_eq!(
            status_of(&ns, "web", 2).as_deref(),
            Some("pending-upgrade"),
            "unlocked while its writer runs: {} {}",
            said(&managers),
            said(&pods)
        );
        assert!(
            run(&["kubectl", "delete", "pod", "writer", "-n", &ns, "--grace-period=0", "--force"])
                .status
                .success()
        );
        eventually(Duration::from_secs(30), "--unlock-abandoned marks it failed", || {
            status_of(&ns, "web", 2).as_deref() == Some("failed")
        });
        let events = run(&[
            "kubectl",
            "get",
            "events",
            "-n",
            &ns,
            "--field-selector",
            "reason=UnlockedAbandoned",
            "-o",
            "name",
        ]);
        assert!(!said(&events).trim().is_empty(), "an Event says so: {}", said(&events));
        let copies = run(&[
            "kubectl",
            "get",
            "secrets",
            "-n",
            &ns,
            "-l",
            "helm-guard.io/recycle-bin=copy",
            "-o",
            "name",
        ]);
        assert!(
            !said(&copies).trim().is_empty(),
            "the record as it was is kept in the recycle bin: {}",
            said(&copies)
        );

        // The owner lock: the release is the service account's (any of its pods); the cluster
        // admin's upgrade is refused, the owner's passes.
        assert!(
            run(&["kubectl", "label", "namespace", &ns, "helm-guard.io/owner-lock=true"]).status.success()
        );
        std::thread::sleep(Duration::from_secs(2));
        let other = run(&["helm", "upgrade", "web", &chart, "-n", &ns]);
        assert!(!other.status.success(), "another identity's upgrade: {}", said(&other));
        assert!(
            said(&other)
                .contains(&format!("is written only by its owner, system:serviceaccount:{ns}:deployer")),
            "{}",
            said(&other)
        );
        let uid = writer_pod(&ns, "writer-2");
        let owner = bound_kubeconfig(&dir, &ns, "writer-2", &uid);
        let upgraded = helm_as(&owner, &["upgrade", "web", &chart, "-n", &ns]);
        assert!(upgraded.status.success(), "the owner's upgrade: {}", said(&upgraded));

        // A loop: 41 revisions within a minute are named churn, by scan and by an Event that
        // names the writer.
        for _ in 0..38 {
            let upgraded = helm_as(&owner, &["upgrade", "web", &chart, "-n", &ns, "--history-max", "0"]);
            assert!(upgraded.status.success(), "{}", said(&upgraded));
        }
        let report = scanned(&ns, "web");
        assert_eq!(report["revision"], 41, "{report}");
        assert!(
            report["anomalies"].as_array().unwrap().iter().any(|a| a.as_str().unwrap().contains("churn")),
            "{report}"
        );
        eventually(Duration::from_secs(15), "an Event names the loop and its writer", || {
            let events =
                kubectl_json(&["get", "events", "-n", &ns, "--field-selector", "reason=RevisionChurn"]);
            events["items"].as_array().unwrap().iter().any(|e| {
                let note = e["message"].as_str().or(e["note"].as_str()).unwrap_or_default();
                note.contains(&format!("system:serviceaccount:{ns}:deployer (pod {ns}/writer-2)"))
            })
        });
    });
    let outcome = checks.catch_unwind().await;
    common::cluster::cleanup(&guard.client, &guard.namespace, false).await;
    let _ = run(&["kubectl", "delete", "namespace", &format!("{}-twin", guard.namespace), "--wait=false"]);
    guard.running.shutdown().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
