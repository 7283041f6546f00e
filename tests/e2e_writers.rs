//! Helm's other writers, on a real API server: the calls that Rancher Fleet's agent, Flux's
//! helm-controller, klipper-helm's helm-set-status and helm-mapkubeapis make to Helm's storage
//! (read from their source, each named below), replayed as those writers' own identities in a
//! namespace behind a live guard (its default settings) and in an unguarded twin. Every writer
//! ends as its twin with nothing refused; a person's deletion of the same records is refused; and
//! `helm-guard forget --apply` forgets a release that `helm-guard restore --apply` brings back as
//! `helm history` showed it.
//!
//! `cargo test --test e2e_suites e2e_writers:: -- --ignored`, with `helm`, `kubectl` on PATH and the cluster
//! in KUBECONFIG (`../shared/tools/kube-local up`).

use crate::common;

use common::cluster::{kubectl_apply, run, said};
use common::writers::{
    FLEET_AGENT, FLEET_IMPERSONATED, FLUX, KLIPPER, fleet_forget, helm_object, kubectl_as, latest_record,
    now, set_status, write,
};
use futures::FutureExt as _;
use helm_guard::live::BinBounds;
use helm_guard::policy::PolicyConfig;
use serde_json::{Value, json};

const GUARD: &str = env!("CARGO_BIN_EXE_helm-guard");

/// `helm history` as (revision, status, description): what two namespaces must agree on.
fn history(release: &str, namespace: &str) -> Vec<(u64, String, String)> {
    let done = run(&["helm", "history", release, "-n", namespace, "-o", "json", "--max", "100"]);
    if !done.status.success() {
        return Vec::new();
    }
    let rows: Vec<Value> = serde_json::from_slice(&done.stdout).unwrap();
    rows.iter()
        .map(|r| {
            let text = |key: &str| r[key].as_str().unwrap_or_default().to_owned();
            (r["revision"].as_u64().unwrap(), text("status"), text("description"))
        })
        .collect()
}

/// One writer's calls in one namespace: whether every call succeeded, and what was said.
type Writer<'a> = &'a dyn Fn(&str) -> (bool, String);

/// Runs `writer` in the guarded namespace and in its twin; both must succeed alike and end with
/// the same `helm history`.
fn alike(what: &str, release: &str, namespaces: [&str; 2], writer: Writer<'_>) {
    let [guarded, twin] = namespaces.map(writer);
    let [seen, expected] = namespaces.map(|ns| history(release, ns));
    assert!(
        guarded.0 == twin.0 && seen == expected,
        "{what}: behind the guard {} ({}) {seen:?}; without it {} ({}) {expected:?}",
        guarded.0,
        guarded.1,
        twin.0,
        twin.1
    );
    assert!(guarded.0, "{what}: the writer's own calls failed in both: {}", guarded.1);
}

fn helm_ok(args: &[&str]) {
    let done = run(&[&["helm"], args].concat());
    assert!(done.status.success(), "helm {args:?}: {}", said(&done));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm and kubectl: cargo test --test e2e_suites e2e_writers:: -- --ignored"]
async fn every_writer_of_helms_storage_ends_as_its_unguarded_twin() {
    let guard =
        common::cluster::start_guard_live("helm-guard-e2e-writers", 61, PolicyConfig::default(), |ns| {
            common::cluster::live_options(Some(&format!("{ns}-guard")), BinBounds::default())
        })
        .await;
    let common::cluster::LiveGuard { client, namespace: ns, url, ca_pem, running, dir, .. } = guard;
    let (twin, guard_ns) = (format!("{ns}-twin"), format!("{ns}-guard"));
    let checks = std::panic::AssertUnwindSafe(async {
        for (name, labels) in
            [(&guard_ns, json!({})), (&ns, json!({"helm-guard-e2e": ns})), (&twin, json!({}))]
        {
            kubectl_apply(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
            );
        }
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        common::writers::bind();
        let chart = dir.path().join("demo");
        assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
        let chart = chart.to_str().unwrap();
        let both = [ns.as_str(), twin.as_str()];

        // 1. Fleet forgets a release of its default history, 2 revisions (`MaxHelmHistory`), as
        // its agent; then one of 10 revisions (listed v1, v10, v2, ...: the latest goes second)
        // as an account it impersonates.
        for (release, revisions, who) in
            [("fleet-agent-a", 4, FLEET_AGENT), ("fleet-b", 10, FLEET_IMPERSONATED)]
        {
            for namespace in both {
                helm_ok(&["install", release, chart, "-n", namespace]);
                for _ in 1..revisions {
                    let max = if revisions == 4 { "2" } else { "0" };
                    helm_ok(&["upgrade", release, chart, "-n", namespace, "--history-max", max]);
                }
            }
            let before = history(release, &ns);
            // A person's deletion of the latest deployed revision is refused.
            let latest = format!("sh.helm.release.v1.{release}.v{revisions}");
            let person = run(&["kubectl", "delete", "secret", &latest, "-n", &ns]);
            assert!(!person.status.success(), "a person deleting {latest}: {}", said(&person));
            assert!(said(&person).contains("latest, deployed revision"), "{}", said(&person));
            alike(&format!("Fleet forgets {release}"), release, both, &|namespace| {
                fleet_forget(who, "secret", release, namespace)
            });
            assert!(history(release, &ns).is_empty());
            // The ones the rules would refuse are kept, named as Fleet's forget.
            let copies = run(&[
                GUARD,
                "scan",
                "--recycle-bin",
                "--guard-namespace",
                &guard_ns,
                "--release",
                release,
                "-o",
                "json",
            ]);
            let copies: Vec<Value> = serde_json::from_slice(&copies.stdout).unwrap();
            assert!(
                !copies.is_empty()
                    && copies.iter().all(|c| c["reason"] == "release-forget" && c["requester"] == who.0),
                "{copies:?}"
            );
            // ... so `restore` brings those back: the latest, deployed.
            let restored =
                run(&[GUARD, "restore", release, "-n", &ns, "--guard-namespace", &guard_ns, "--apply"]);
            assert!(restored.status.success(), "{}", said(&restored));
            let back = history(release, &ns);
            assert_eq!(back.last(), before.last(), "the latest revision back as it was");
            let _ = run(&[
                "kubectl",
                "delete",
                "secrets",
                "-n",
                &ns,
                "-l",
                &format!("owner=helm,name={release}"),
            ]);
        }
        let events = run(&["kubectl", "get", "events.events.k8s.io", "-n", &ns, "-o", "json"]);
        let events: Value = serde_json::from_slice(&events.stdout).unwrap();
        let of_fleet: Vec<&Value> = events["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["note"].as_str().unwrap_or_default().contains("fleet-")
                    && e["note"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("by system:serviceaccount:cattle-fleet")
            })
            .collect();
        assert!(!of_fleet.is_empty(), "Fleet's forgets are Events: {events}");
        assert!(
            of_fleet.iter().all(|e| e["type"] == "Normal" && e["reason"] == "ReleaseForget"),
            "{of_fleet:?}"
        );

        // 2. Fleet's drift correction whose rollback fails applying its manifest (`rollback.go`
        // `RemoveExternalChanges`, Helm 4 with `ServerSideApply` off): the rollback supersedes
        // the revision it started from and stores a failed "Rollback" revision; Fleet deletes it
        // and writes the revision it started from back as it read it (`removeFailedRollback`).
        // The manifest's apply fails here by a ValidatingAdmissionPolicy on ServiceAccounts.
        let block = format!("{ns}-block");
        kubectl_apply(
            &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": block},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["serviceaccounts"]}]},
                "validations": [{"expression": "false", "message": "e2e: this rollback fails applying its manifest"}]}}),
        );
        kubectl_apply(
            &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": block},
            "spec": {"policyName": block, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"helm-guard-e2e-block": block}}}}}),
        );
        for namespace in both {
            helm_ok(&["install", "drift", chart, "-n", namespace]);
            helm_ok(&["upgrade", "drift", chart, "-n", namespace]);
        }
        alike("Fleet removes a failed rollback", "drift", both, &|namespace| {
            let current = latest_record("secret", "drift", namespace).unwrap();
            let version = common::release_json(&current)["version"].as_u64().unwrap();
            // Drift on a field the chart sets, then the rollback Fleet runs to undo it.
            let drift = label_drift_account(namespace, "app.kubernetes.io/managed-by=someone");
            assert!(drift.status.success(), "{}", said(&drift));
            kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace,
                "labels": {"helm-guard-e2e-block": block, "helm-guard-e2e": if namespace == ns { ns.as_str() } else { "twin" }}}}));
            let blocked = eventually_true(|| !label_drift_account(namespace, "probe=1").status.success());
            assert!(blocked, "the policy blocks ServiceAccount updates");
            let rollback = run(&[
                "helm",
                "rollback",
                "drift",
                &version.to_string(),
                "-n",
                namespace,
                "--server-side=false",
            ]);
            let _ = run(&["kubectl", "label", "namespace", namespace, "helm-guard-e2e-block-"]);
            assert!(!rollback.status.success(), "the rollback fails: {}", said(&rollback));
            let failed = latest_record("secret", "drift", namespace).unwrap();
            let failed_release = common::release_json(&failed);
            assert_eq!(failed_release["version"].as_u64(), Some(version + 1));
            assert_eq!(failed_release["info"]["status"], "failed");
            assert!(
                failed_release["info"]["description"].as_str().unwrap().starts_with("Rollback"),
                "{failed_release}"
            );
            let name = failed["metadata"]["name"].as_str().unwrap();
            let deleted = kubectl_as(FLEET_AGENT, &["delete", "secret", name, "-n", namespace]);
            if !deleted.status.success() {
                return (false, said(&deleted));
            }
            let mut labels = current["metadata"]["labels"].clone();
            labels["modifiedAt"] = json!(now());
            let written = write(
                Some(FLEET_AGENT),
                "replace",
                &helm_object(&current, &common::release_json(&current), labels),
            );
            (written.status.success(), said(&written))
        });
        assert_eq!(history("drift", &ns).last().map(|r| r.1.as_str()), Some("deployed"), "healthy again");

        // 3. Flux unlocks a release stuck pending (`internal/reconcile/unlock.go`), and
        // klipper-helm's helm-set-status marks one failed before its retry (`entry`).
        for (release, who, description) in [
            ("flux", FLUX, "Release unlocked from stale 'pending-upgrade' state"),
            ("klipper", KLIPPER, "Marked as failed by helm-set-status"),
        ] {
            for namespace in both {
                helm_ok(&["install", release, chart, "-n", namespace]);
                // An upgrade left pending (its Helm killed): the record `upgrade.go` stores first,
                // the deployed revision left as it is until the upgrade ends.
                let deployed = latest_record("secret", release, namespace).unwrap();
                let mut payload = common::release_json(&deployed);
                payload["version"] = json!(2);
                payload["info"]["status"] = json!("pending-upgrade");
                let mut labels = deployed["metadata"]["labels"].clone();
                labels["status"] = json!("pending-upgrade");
                labels["version"] = json!("2");
                labels["createdAt"] = json!(now());
                let mut pending = helm_object(&deployed, &payload, labels);
                pending["metadata"]["name"] = json!(format!("sh.helm.release.v1.{release}.v2"));
                let done = write(None, "create", &pending);
                assert!(done.status.success(), "{}", said(&done));
            }
            alike(&format!("{release} unlocks a pending upgrade"), release, both, &|namespace| {
                let latest = latest_record("secret", release, namespace).unwrap();
                let done = set_status(who, &latest, "failed", Some(description));
                (done.status.success(), said(&done))
            });
            helm_ok(&["upgrade", release, chart, "-n", &ns]);
        }

        // 4. helm-mapkubeapis (klipper-helm before every upgrade): the deployed revision
        // superseded, then a new deployed revision with the mapped manifest.
        for namespace in both {
            helm_ok(&["install", "mapped", chart, "-n", namespace]);
        }
        alike("helm-mapkubeapis maps a release", "mapped", both, &|namespace| {
            common::writers::map_kube_apis("secret", "mapped", namespace)
        });
        let mapped = history("mapped", &ns);
        assert_eq!(
            mapped.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(),
            ["superseded", "deployed"],
            "{mapped:?}"
        );

        // 5. A person forgets a release: the plan, then --apply, then restore.
        helm_ok(&["install", "moved", chart, "-n", &ns]);
        helm_ok(&["upgrade", "moved", chart, "-n", &ns]);
        helm_ok(&["upgrade", "moved", chart, "-n", &ns]);
        let before = history("moved", &ns);
        let forget = |apply: bool| {
            let mut args = vec![GUARD, "forget", "moved", "-n", &ns, "--guard-namespace", &guard_ns];
            if apply {
                args.push("--apply");
            }
            run(&args)
        };
        let plan = forget(false);
        assert!(plan.status.success() && said(&plan).contains("3 records to delete"), "{}", said(&plan));
        assert_eq!(history("moved", &ns), before, "a plan changes nothing");
        let forgot = forget(true);
        assert!(forgot.status.success(), "{}", said(&forgot));
        assert!(said(&forgot).contains("Forgot release"), "{}", said(&forgot));
        assert!(history("moved", &ns).is_empty(), "no record left");
        let kept = run(&["kubectl", "get", "deployment", "moved-demo", "-n", &ns]);
        assert!(kept.status.success(), "its resources stay: {}", said(&kept));
        let restored =
            run(&[GUARD, "restore", "moved", "-n", &ns, "--guard-namespace", &guard_ns, "--apply"]);
        assert!(restored.status.success(), "{}", said(&restored));
        assert_eq!(history("moved", &ns), before, "helm history as it was");
        helm_ok(&["upgrade", "moved", chart, "-n", &ns]);
        let _ =
            run(&["kubectl", "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", &block]);
    });
    let outcome = checks.catch_unwind().await;
    running.shutdown().await;
    common::cluster::cleanup(&client, &ns, false).await;
    for namespace in [&twin, &guard_ns] {
        let _ = run(&["kubectl", "delete", "namespace", namespace, "--wait=false"]);
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// `kubectl label --overwrite` of the drift release's ServiceAccount.
fn label_drift_account(namespace: &str, label: &str) -> std::process::Output {
    run(&["kubectl", "label", "serviceaccount", "drift-demo", "-n", namespace, "--overwrite", label])
}

/// Polls `check` for up to 20 s: whether it held.
fn eventually_true(mut check: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(20) {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}
