//! The guard is down, on a real API server: with the shipped webhook configurations every Helm
//! operation on a guarded release is refused at its first write and leaves its history as it
//! was (no `pending-*` revision, no half-purge of records); the records of a release the guard's
//! own pods need (RKE2's CNI in kube-system) go through; and the two ways out of the
//! runbook (`docs/operate/outage.md`) work: the break-glass group, and removing
//! the webhook configuration.
//!
//! `cargo test --test e2e_suites e2e_outage:: -- --ignored`, with `helm` and `kubectl` on PATH and the
//! cluster in KUBECONFIG (`../shared/tools/kube-local up`).

use crate::common;

use std::process::Output;

use common::cluster::{run, said};
use futures::FutureExt;

fn history(release: &str, namespace: &str) -> Vec<(u64, String)> {
    let done = run(&["helm", "history", release, "-n", namespace, "-o", "json"]);
    if !done.status.success() {
        return Vec::new();
    }
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&done.stdout).unwrap();
    rows.iter().map(|r| (r["revision"].as_u64().unwrap(), r["status"].as_str().unwrap().to_owned())).collect()
}

/// The refusal an outage gives: the API server could not call the fail-closed webhook.
fn refused_by_the_outage(done: &Output) -> bool {
    !done.status.success() && said(done).contains("failed calling webhook \"records.helm-guard.io\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm and kubectl: cargo test --test e2e_suites e2e_outage:: -- --ignored"]
async fn while_the_guard_is_down_helm_is_refused_at_its_first_write_and_the_runbook_works() {
    let guard = common::cluster::start_guard("helm-guard-e2e-outage", 42).await;
    let common::cluster::LiveGuard { client, namespace, url, ca_pem, running, dir, .. } = guard;
    let ns = namespace.clone();
    let mut running = Some(running);
    let checks = std::panic::AssertUnwindSafe(async {
        assert!(run(&["kubectl", "create", "namespace", &ns]).status.success());
        assert!(
            run(&["kubectl", "label", "namespace", &ns, &format!("helm-guard-e2e={ns}")]).status.success()
        );
        // kube-system joins the test's scope for the release the guard needs.
        assert!(
            run(&[
                "kubectl",
                "label",
                "namespace",
                "kube-system",
                &format!("helm-guard-e2e={ns}"),
                "--overwrite"
            ])
            .status
            .success()
        );
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        let chart = dir.path().join("demo");
        let chart = chart.to_str().unwrap();
        assert!(run(&["helm", "create", chart]).status.success());
        for verb in ["install", "upgrade"] {
            let done = run(&["helm", verb, "app", chart, "-n", &ns]);
            assert!(done.status.success(), "{}", said(&done));
        }
        let before = history("app", &ns);
        assert_eq!(before, [(1, "superseded".to_owned()), (2, "deployed".to_owned())]);

        running.take().unwrap().shutdown().await;

        // Every operation stops at its first write, and nothing of the release changed.
        for args in [
            vec!["helm", "upgrade", "app", chart, "-n", &ns],
            vec!["helm", "rollback", "app", "1", "-n", &ns],
            vec!["helm", "install", "other", chart, "-n", &ns],
        ] {
            let done = run(&args);
            assert!(refused_by_the_outage(&done), "{args:?}: {}", said(&done));
            assert_eq!(history("app", &ns), before, "{args:?} left the history as it was");
        }
        assert!(history("other", &ns).is_empty(), "no record of the refused install");
        // helm uninstall ignores a failed status update and deletes the resources; its purge is
        // then refused: the records stay, as they were, for the uninstall to be run again.
        let done = run(&["helm", "uninstall", "app", "-n", &ns]);
        assert!(refused_by_the_outage(&done), "{}", said(&done));
        assert_eq!(history("app", &ns), before, "every record kept");

        // The release the guard's pods need goes through.
        let done = run(&["helm", "install", "rke2-canal", chart, "-n", "kube-system"]);
        assert!(
            done.status.success(),
            "the CNI's release is never held up by a guard that is down: {}",
            said(&done)
        );

        // Way out 1: the break-glass group never reaches the guard.
        let done = run(&[
            "helm",
            "upgrade",
            "app",
            chart,
            "-n",
            &ns,
            "--kube-as-user",
            "incident-responder",
            "--kube-as-group",
            "helm-guard.io:break-glass",
            "--kube-as-group",
            "system:masters",
        ]);
        assert!(done.status.success(), "{}", said(&done));
        assert_eq!(history("app", &ns).last().unwrap(), &(3, "deployed".to_owned()));

        // Way out 2: without the webhook configuration Helm runs unguarded.
        common::cluster::cleanup(&client, &ns, true).await;
        let done = run(&["helm", "upgrade", "app", chart, "-n", &ns]);
        assert!(done.status.success(), "{}", said(&done));
        // ... and the configuration back while the guard is still down stops it again.
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        assert!(refused_by_the_outage(&run(&["helm", "upgrade", "app", chart, "-n", &ns])));
    })
    .catch_unwind()
    .await;
    common::cluster::cleanup(&client, &namespace, false).await;
    let _ = run(&["helm", "uninstall", "rke2-canal", "-n", "kube-system"]);
    let _ = run(&["kubectl", "label", "namespace", "kube-system", "helm-guard-e2e-"]);
    if let Some(running) = running {
        running.shutdown().await;
    }
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}
