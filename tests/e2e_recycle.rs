//! Nothing lost, on a real API server with real Helm: a break-glass deletion of a release's only
//! deployed revision, an exempt user's deletion and a warn-mode deletion (Helm 3, configmap
//! driver) each leave a copy in the guard's recycle bin; `helm-guard restore --apply` brings each
//! back, and `helm history` is what it was while `helm status`, `helm upgrade` and
//! `helm rollback` run; the bin's bounds evict the oldest copies; and a copy the API server
//! refuses to store (a ResourceQuota in the guard's namespace) refuses the deletion with "retry",
//! the record kept.
//!
//! `cargo test --test e2e_suites e2e_recycle:: -- --ignored`, with `helm`, `helm3` and `kubectl` on PATH and
//! the cluster in KUBECONFIG (`../shared/tools/kube-local up`).

use crate::common;

use std::time::Duration;

use common::cluster::{kubectl_apply, metrics_of, run, said};
use futures::FutureExt;
use helm_guard::live::BinBounds;
use helm_guard::policy::PolicyConfig;
use serde_json::{Value, json};

const GUARD: &str = env!("CARGO_BIN_EXE_helm-guard");

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Runs `helm` (Helm 4), `helm3`, or `helm3-configmap`: Helm 3 with `HELM_DRIVER=configmap`.
fn helm(which: &str, args: &[&str]) -> std::process::Output {
    let mut command = match which {
        "helm3-configmap" => {
            let mut command = std::process::Command::new("helm3");
            command.env("HELM_DRIVER", "configmap");
            command
        }
        binary => std::process::Command::new(binary),
    };
    common::cluster::output(command.args(args))
}

/// `helm history` as JSON, each line whole.
fn history(which: &str, release: &str, namespace: &str) -> Vec<Value> {
    let done = helm(which, &["history", release, "-n", namespace, "-o", "json"]);
    assert!(done.status.success(), "{}", said(&done));
    serde_json::from_slice(&done.stdout).unwrap()
}

/// The copies of `release` in the bin in `bin_namespace`, which is not the guard's (it runs in
/// the test's process), so the CLI is told where the bin is.
fn copies(bin_namespace: &str, release: &str) -> Vec<Value> {
    let done = run(&[
        GUARD,
        "scan",
        "--recycle-bin",
        "--guard-namespace",
        "helm-guard-e2e-no-such-namespace",
        "--recycle-bin-namespace",
        bin_namespace,
        "--release",
        release,
        "-o",
        "json",
    ]);
    assert!(done.status.success(), "{}", said(&done));
    serde_json::from_slice(&done.stdout).unwrap()
}

fn restore(release: &str, namespace: &str, guard_namespace: &str, apply: bool) -> std::process::Output {
    let mut args = vec![GUARD, "restore", release, "-n", namespace, "--guard-namespace", guard_namespace];
    if apply {
        args.push("--apply");
    }
    run(&args)
}

/// Deletes a record the guard lets go, as an exempt `user` or else with the break-glass
/// annotation, and returns what kubectl said (the guard's warnings).
fn force_delete(namespace: &str, object: &str, user: Option<&str>) -> String {
    let mut args = vec!["kubectl", "delete", "secret", object, "-n", namespace];
    match user {
        Some(user) => args.extend(["--as", user]),
        None => {
            let annotate = run(&[
                "kubectl",
                "annotate",
                "secret",
                object,
                "-n",
                namespace,
                "helm-guard.io/allow-delete=INC-7 e2e",
            ]);
            assert!(annotate.status.success(), "{}", said(&annotate));
        }
    }
    let done = run(&args);
    assert!(done.status.success(), "{}", said(&done));
    said(&done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm, helm3 and kubectl: cargo test --test e2e_suites e2e_recycle:: -- --ignored"]
async fn what_the_guard_lets_go_is_kept_and_restored_as_helm_had_it() {
    let config = PolicyConfig { exempt_users: vec!["ops-bot".into()], ..PolicyConfig::default() };
    // The bin in a namespace of its own (a quota there must not touch the releases').
    let bounds = BinBounds { release_copies: 3, ..BinBounds::default() };
    let guard = common::cluster::start_guard_live("helm-guard-e2e-bin", 51, config, |ns| {
        common::cluster::live_options(Some(&format!("{ns}-guard")), bounds)
    })
    .await;
    let common::cluster::LiveGuard { client, namespace: ns, url, ca_pem, running, dir, .. } = guard;
    let (warn_ns, guard_ns) = (format!("{ns}-warn"), format!("{ns}-guard"));
    let checks = std::panic::AssertUnwindSafe(async {
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": guard_ns}}));
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}}));
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": warn_ns,
            "labels": {"helm-guard-e2e": ns, "helm-guard.io/mode": "warn"}}}));
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "ops-bot-admin", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ops-bot"}]}));
        let chart = dir.path().join("demo");
        assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
        let chart = chart.to_str().unwrap();
        for verb in ["install", "upgrade"] {
            let done = run(&["helm", verb, "app", chart, "-n", &ns]);
            assert!(done.status.success(), "{}", said(&done));
        }
        let before = history("helm", "app", &ns);
        assert_eq!(before.len(), 2);

        // 1. Break-glass: the only deployed revision, forced away. A copy is kept, and said.
        let said_by_kubectl = force_delete(&ns, "sh.helm.release.v1.app.v2", None);
        assert!(said_by_kubectl.contains("is kept in the recycle bin"), "{said_by_kubectl}");
        assert!(said_by_kubectl.contains(&format!("helm-guard restore app -n {ns} --revision 2")), "{said_by_kubectl}");
        assert_eq!(history("helm", "app", &ns).len(), 1, "Helm lost revision 2");
        let kept = copies(&guard_ns, "app");
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!((kept[0]["revision"].as_u64(), kept[0]["reason"].as_str()), (Some(2), Some("break-glass")));

        // An Event on the record says so too.
        let event = common::eventually(Duration::from_secs(20), || {
            let listed = run(&["kubectl", "get", "events.events.k8s.io", "-n", &ns, "-o", "json"]);
            let events: Value = serde_json::from_slice(&listed.stdout).unwrap_or_default();
            let found = events["items"].as_array().into_iter().flatten().any(|e| {
                e["regarding"]["name"] == "sh.helm.release.v1.app.v2"
                    && e["reason"] == "BreakGlass"
                    && e["note"].as_str().unwrap_or_default().contains("recycle bin")
            });
            std::future::ready(found)
        })
        .await;
        assert!(event, "an Event on the deleted record names its copy");

        // The plan, then the restore: `helm history` is what it was.
        let plan = restore("app", &ns, &guard_ns, false);
        assert!(plan.status.success(), "{}", said(&plan));
        assert!(said(&plan).contains("revision 2 (deployed)") && said(&plan).contains("Nothing changed"), "{}", said(&plan));
        eprintln!("{}", said(&plan));
        assert_eq!(history("helm", "app", &ns).len(), 1, "a plan changes nothing");
        let applied = restore("app", &ns, &guard_ns, true);
        assert!(applied.status.success() && said(&applied).contains("Restored 1 record"), "{}", said(&applied));
        assert_eq!(history("helm", "app", &ns), before, "helm history as it was");
        let status = run(&["helm", "status", "app", "-n", &ns, "-o", "json"]);
        let status: Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!((status["version"].as_u64(), status["info"]["status"].as_str()), (Some(2), Some("deployed")));
        let again = restore("app", &ns, &guard_ns, true);
        assert_eq!(again.status.code(), Some(1), "never over an existing object: {}", said(&again));
        assert!(said(&again).contains("exists now"), "{}", said(&again));
        let upgrade = run(&["helm", "upgrade", "app", chart, "-n", &ns]);
        assert!(upgrade.status.success(), "{}", said(&upgrade));
        let rollback = run(&["helm", "rollback", "app", "2", "-n", &ns]);
        assert!(rollback.status.success(), "{}", said(&rollback));

        // 2. An exempt user deletes the latest (the rollback's revision 4): kept as `exempt`.
        let before = history("helm", "app", &ns);
        force_delete(&ns, "sh.helm.release.v1.app.v4", Some("ops-bot"));
        let kept = copies(&guard_ns, "app");
        assert!(kept.iter().any(|c| c["revision"] == 4 && c["reason"] == "exempt" && c["requester"] == "ops-bot"), "{kept:?}");
        assert!(restore("app", &ns, &guard_ns, true).status.success());
        assert_eq!(history("helm", "app", &ns), before);
        assert!(run(&["helm", "upgrade", "app", chart, "-n", &ns]).status.success());

        // 3. Warn mode, Helm 3 with the configmap driver: the deletion goes through with a
        // warning, and a copy.
        let helm3 = "helm3-configmap";
        for verb in ["install", "upgrade"] {
            let done = helm(helm3, &[verb, "legacy", chart, "-n", &warn_ns]);
            assert!(done.status.success(), "{}", said(&done));
        }
        let before = history(helm3, "legacy", &warn_ns);
        let done = run(&["kubectl", "delete", "configmap", "sh.helm.release.v1.legacy.v2", "-n", &warn_ns]);
        assert!(done.status.success() && said(&done).contains("would deny"), "{}", said(&done));
        let kept = copies(&guard_ns, "legacy");
        assert_eq!(kept[0]["reason"], "latest-deployed-revision", "{kept:?}");
        let applied = run(&[GUARD, "restore", "legacy", "-n", &warn_ns, "--guard-namespace", &guard_ns, "--revision", "2", "--apply"]);
        assert!(applied.status.success(), "{}", said(&applied));
        assert_eq!(history(helm3, "legacy", &warn_ns), before);
        assert!(helm(helm3, &["upgrade", "legacy", chart, "-n", &warn_ns]).status.success());
        let restored = run(&["kubectl", "get", "configmap", "sh.helm.release.v1.legacy.v2", "-n", &warn_ns, "-o", "json"]);
        let restored: Value = serde_json::from_slice(&restored.stdout).unwrap();
        assert_eq!(restored["metadata"]["labels"]["owner"], "helm", "a ConfigMap again, Helm's labels on it");

        // Helm's own deletions keep nothing: an uninstall purges every record, no copy made.
        let held = copies(&guard_ns, "legacy").len();
        assert!(helm(helm3, &["uninstall", "legacy", "-n", &warn_ns]).status.success());
        assert_eq!(copies(&guard_ns, "legacy").len(), held);

        // 4. The bounds: at most 3 copies of one release; the oldest go first.
        for verb in ["install", "upgrade", "upgrade", "upgrade"] {
            assert!(run(&["helm", verb, "many", chart, "-n", &ns]).status.success());
        }
        for revision in (1..=4).rev() {
            force_delete(&ns, &format!("sh.helm.release.v1.many.v{revision}"), None);
            // Copies are ordered by the second they were kept in.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let evicted = common::eventually(Duration::from_secs(20), || {
            let kept: Vec<u64> = copies(&guard_ns, "many").iter().map(|c| c["revision"].as_u64().unwrap()).collect();
            std::future::ready(kept.len() == 3 && !kept.contains(&4))
        })
        .await;
        assert!(evicted, "the first copy (revision 4) evicted: {:?}", copies(&guard_ns, "many"));
        let metrics = metrics_of(&running);
        assert!(metrics.contains("helm_guard_recycle_bin_evicted_total{reason=\"release-copies\"} 1\n"), "{metrics}");
        // app v2 (break-glass), app v4 (exempt), legacy v2 (warn), many v4..v1.
        assert!(metrics.contains("helm_guard_recycle_bin_kept_total 7\n"), "{metrics}");

        // 5. A copy the API server will not store: the deletion is refused, "retry", nothing lost.
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "full", "namespace": guard_ns},
            "spec": {"hard": {"secrets": "0"}}}));
        let counted = common::eventually(Duration::from_secs(20), || {
            let quota = run(&["kubectl", "get", "resourcequota", "full", "-n", &guard_ns, "-o", "jsonpath={.status.hard.secrets}"]);
            std::future::ready(quota.stdout == b"0")
        })
        .await;
        assert!(counted, "the quota controller counted the guard's namespace");
        let annotate = run(&["kubectl", "annotate", "secret", "sh.helm.release.v1.app.v5", "-n", &ns, "helm-guard.io/allow-delete=INC-8"]);
        assert!(annotate.status.success(), "{}", said(&annotate));
        let refused = run(&["kubectl", "delete", "secret", "sh.helm.release.v1.app.v5", "-n", &ns]);
        assert!(!refused.status.success(), "{}", said(&refused));
        for needle in ["recycle bin", "exceeded quota", "retry"] {
            assert!(said(&refused).contains(needle), "{needle}: {}", said(&refused));
        }
        let status = run(&["helm", "status", "app", "-n", &ns]);
        assert!(status.status.success() && said(&status).contains("REVISION: 5"), "{}", said(&status));
        assert!(metrics_of(&running).contains("helm_guard_recycle_bin_failures_total 1\n"));
        assert!(run(&["kubectl", "delete", "resourcequota", "full", "-n", &guard_ns]).status.success());
        let retried = common::eventually(Duration::from_secs(20), || {
            std::future::ready(run(&["kubectl", "delete", "secret", "sh.helm.release.v1.app.v5", "-n", &ns]).status.success())
        })
        .await;
        assert!(retried, "the retry goes through once the copy can be stored");

        // 6. A record Helm cannot read, at the size Kubernetes allows: kept whole, given back
        // byte for byte (under a name of its own: C2 keeps Helm's names for records Helm reads).
        use k8s_openapi::api::core::v1::Secret;
        let secrets = kube::Api::<Secret>::namespaced(client.clone(), &ns);
        let mut seed: u64 = 7;
        let noise: Vec<u8> = (0..1_040_000)
            .map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (seed >> 33) as u8
            })
            .collect();
        let big: Secret = serde_json::from_value(json!({"metadata": {"name": "junk-v1",
            "labels": {"owner": "helm", "name": "junk", "version": "1", "status": "deployed"}},
            "type": "helm.sh/release.v1", "data": {"release": base64_of(&noise)}}))
        .unwrap();
        secrets.create(&Default::default(), &big).await.unwrap();
        let done = run(&["kubectl", "delete", "secret", "junk-v1", "-n", &ns]);
        assert!(done.status.success() && said(&done).contains("does not decode"), "{}", said(&done));
        assert_eq!(copies(&guard_ns, "junk")[0]["reason"], "undecodable-record");
        let applied = restore("junk", &ns, &guard_ns, true);
        assert!(applied.status.success(), "{}", said(&applied));
        let back = secrets.get("junk-v1").await.unwrap();
        assert!(back.data.unwrap()["release"].0 == noise, "the same bytes");
        assert_eq!(back.type_.as_deref(), Some("helm.sh/release.v1"));
    })
    .catch_unwind()
    .await;
    common::cluster::cleanup(&client, &ns, false).await;
    for namespace in [&warn_ns, &guard_ns] {
        let _ = run(&["kubectl", "delete", "namespace", namespace, "--wait=false"]);
    }
    running.shutdown().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}
