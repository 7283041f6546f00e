//! Release health as PolicyReports, on a real API server with real Helm: with no report CRD the
//! guard writes nothing and stays healthy; the Policy WG's CRDs installed later are picked up
//! without a restart; releases broken as users break them (the latest deployed revision deleted
//! by break-glass, an upgrade left pending past `--stuck-after`, an unreadable record, a
//! namespace opted out) show the right rule, result and severity within seconds; each repair
//! (`helm-guard restore --apply`, `helm-guard repair --apply`, `helm rollback`) turns it to
//! pass; an uninstall takes its result away; a report edited by hand is put back; the
//! OpenReports CRDs installed too get the same results; and of two replicas one writes, the
//! other does not, with no rewrite while nothing changes.
//!
//! The CRDs come from their upstream repositories at test time, never from this one:
//! `$HELM_GUARD_E2E_WGPOLICY_GIT` and `$HELM_GUARD_E2E_OPENREPORTS_GIT` name a git directory
//! (a clone or a bare mirror) of kubernetes-sigs/wg-policy-prototypes and openreports/reports-api;
//! without them the test clones each from GitHub.
//!
//! `cargo test --test e2e_suites e2e_policy_reports:: -- --ignored`, with `helm`, `kubectl` and `git` on PATH
//! and the cluster in KUBECONFIG (`../shared/tools/kube-local up`).

use crate::common;

use std::time::Duration;

use common::cluster::{kubectl_apply, run, said};
use futures::FutureExt;
use helm_guard::policy::{Mode, PolicyConfig};
use helm_guard::policy_reports::writer::{ApiChoice, WriterOptions};
use serde_json::{Value, json};

const GUARD: &str = env!("CARGO_BIN_EXE_helm-guard");

/// The CRDs of each API: (environment variable, upstream, files).
const WGPOLICY: (&str, &str, [&str; 2]) = (
    "HELM_GUARD_E2E_WGPOLICY_GIT",
    "https://github.com/kubernetes-sigs/wg-policy-prototypes",
    [
        "policy-report/crd/v1alpha2/wgpolicyk8s.io_policyreports.yaml",
        "policy-report/crd/v1alpha2/wgpolicyk8s.io_clusterpolicyreports.yaml",
    ],
);
const OPENREPORTS: (&str, &str, [&str; 2]) = (
    "HELM_GUARD_E2E_OPENREPORTS_GIT",
    "https://github.com/openreports/reports-api",
    ["config/crd/openreports.io_reports.yaml", "config/crd/openreports.io_clusterreports.yaml"],
);
const CRD_NAMES: [&str; 4] = [
    "policyreports.wgpolicyk8s.io",
    "clusterpolicyreports.wgpolicyk8s.io",
    "reports.openreports.io",
    "clusterreports.openreports.io",
];

/// The CRD files of one API, read from its upstream repository.
fn crds((variable, upstream, files): (&str, &str, [&str; 2]), scratch: &std::path::Path) -> Vec<String> {
    let git_dir = match std::env::var(variable) {
        Ok(dir) => dir,
        Err(_) => {
            let into = scratch.join(upstream.rsplit('/').next().unwrap());
            let done = run(&["git", "clone", "--depth", "1", upstream, into.to_str().unwrap()]);
            assert!(done.status.success(), "set {variable} to a clone of {upstream}: {}", said(&done));
            into.join(".git").to_str().unwrap().to_owned()
        }
    };
    files
        .iter()
        .map(|file| {
            let done = run(&["git", "--git-dir", &git_dir, "show", &format!("HEAD:{file}")]);
            assert!(done.status.success(), "{file} in {git_dir}: {}", said(&done));
            String::from_utf8(done.stdout).unwrap()
        })
        .collect()
}

fn apply_text(text: &str) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("kubectl")
        .args(["apply", "--server-side", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let done = child.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", said(&done));
    let established =
        run(&["kubectl", "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]);
    assert!(established.status.success(), "{}", said(&established));
}

/// A report as `kubectl get` shows it (`kind` a resource name), or `None`.
fn report(resource: &str, namespace: Option<&str>) -> Option<Value> {
    let mut args = vec!["kubectl", "get", resource, "helm-guard", "-o", "json"];
    if let Some(namespace) = namespace {
        args.extend(["-n", namespace]);
    }
    let done = run(&args);
    done.status.success().then(|| serde_json::from_slice(&done.stdout).unwrap())
}

/// The result of `release` in the namespace's report: (rule, result, severity).
fn finding(resource: &str, namespace: &str, release: &str) -> Option<(String, String, String)> {
    let report = report(resource, Some(namespace))?;
    let result =
        report["results"].as_array()?.iter().find(|r| r["properties"]["release"] == release)?.clone();
    let text = |field: &str| result[field].as_str().unwrap_or_default().to_owned();
    Some((text("rule"), text("result"), text("severity")))
}

/// Waits until `release`'s result is `(rule, result, severity)` (`None`: absent), within 20 s.
async fn shows(resource: &str, namespace: &str, release: &str, expected: Option<(&str, &str, &str)>) {
    let want = expected.map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()));
    let held = common::eventually(Duration::from_secs(20), || {
        let found = finding(resource, namespace, release);
        let matches = found == want;
        async move { matches }
    })
    .await;
    assert!(
        held,
        "{resource} {namespace}: {release} should be {expected:?}, is {:?}",
        finding(resource, namespace, release)
    );
}

fn helm(args: &[&str]) -> std::process::Output {
    run(&[&["helm"], args].concat())
}

fn metric(running: &helm_guard::server::Running, name: &str) -> u64 {
    let text = common::cluster::metrics_of(running);
    text.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name} in /metrics:\n{text}"))
}

fn writer(namespace: &str, identity: &str) -> WriterOptions {
    WriterOptions {
        apis: ApiChoice::Auto,
        debounce: Duration::from_secs(1),
        resync: Duration::from_secs(5),
        rediscover: Duration::from_secs(2),
        lease_namespace: format!("{namespace}-guard"),
        identity: identity.to_owned(),
        stuck_after_secs: 5,
        default_mode: Mode::Enforce,
        protected_charts: Vec::new(),
        bin_namespace: Some(format!("{namespace}-guard")),
        max_reports: 10_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm, kubectl and git: cargo test --test e2e_suites e2e_policy_reports:: -- --ignored"]
async fn broken_releases_show_in_policy_reports_and_turn_to_pass_when_repaired() {
    // The writer's log lines, shown with --nocapture.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("helm_guard::policy_reports=info")
        .with_test_writer()
        .try_init();
    let scratch = tempfile::tempdir().unwrap();
    let (wgpolicy, openreports) = (crds(WGPOLICY, scratch.path()), crds(OPENREPORTS, scratch.path()));
    for crd in CRD_NAMES {
        let _ = run(&["kubectl", "delete", "crd", crd, "--ignore-not-found"]);
    }
    let guard = common::cluster::start_guard_live("helm-guard-e2e-polr", 43, PolicyConfig::default(), |ns| {
        let mut options = common::cluster::live_options(Some(&format!("{ns}-guard")), Default::default());
        options.policy_reports = Some(writer(ns, "replica-a"));
        options
    })
    .await;
    let common::cluster::LiveGuard { client, namespace: ns, url, ca_pem, running, dir, .. } = guard;
    let (guard_ns, lab_ns) = (format!("{ns}-guard"), format!("{ns}-lab"));
    let checks = std::panic::AssertUnwindSafe(async {
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": guard_ns}}));
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}}));
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lab_ns,
            "labels": {"helm-guard.io/ignore": "true"}}}));
        common::cluster::register_webhooks(&client, &ns, &url, &ca_pem).await;
        let chart = dir.path().join("demo");
        assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
        let chart = chart.to_str().unwrap();
        for (verb, release) in [("install", "web"), ("upgrade", "web"), ("install", "held")] {
            let done = helm(&[verb, release, chart, "-n", &ns]);
            assert!(done.status.success(), "{}", said(&done));
        }

        // No CRD: nothing written, the guard healthy (the installs above went through it), once
        // this replica holds the writer's Lease and has looked for the APIs.
        let holding = common::eventually(Duration::from_secs(30), || {
            let lease = run(&["kubectl", "get", "lease", "helm-guard-policy-reports", "-n", &guard_ns, "-o",
                "jsonpath={.spec.holderIdentity}"]);
            async move { lease.stdout == b"replica-a" }
        })
        .await;
        assert!(holding, "the only replica holds the writer's Lease");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(report("policyreports.wgpolicyk8s.io", Some(&ns)).is_none());
        assert_eq!(metric(&running, "helm_guard_policy_reports_written_total"), 0);

        // The Policy WG's CRDs installed: picked up without a restart.
        for crd in &wgpolicy {
            apply_text(crd);
        }
        let polr = "policyreports.wgpolicyk8s.io";
        shows(polr, &ns, "web", Some(("healthy", "pass", "info"))).await;
        shows(polr, &ns, "held", Some(("healthy", "pass", "info"))).await;
        // The cluster's report is written on its own round: waited for, as the namespaces' are.
        let written = common::eventually(Duration::from_secs(30), || {
            std::future::ready(report("clusterpolicyreports.wgpolicyk8s.io", None).is_some())
        })
        .await;
        assert!(written, "the cluster report is written");
        let cluster = report("clusterpolicyreports.wgpolicyk8s.io", None).expect("the cluster report");
        let lab = cluster["results"].as_array().unwrap().iter().find(|r| r["properties"]["namespace"] == lab_ns.as_str());
        let lab = lab.unwrap_or_else(|| panic!("{lab_ns} opted out: {cluster:#}"));
        assert_eq!((lab["rule"].as_str(), lab["result"].as_str()), (Some("namespace-opted-out"), Some("warn")));

        // An unreadable record: error.
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client.clone(), &ns);
        let junk = serde_json::from_value(json!({"metadata": {"name": "junk-v1",
            "labels": {"owner": "helm", "name": "junk", "version": "1", "status": "deployed"}},
            "type": "helm.sh/release.v1", "data": {"release": "bm90IGEgcmVsZWFzZQ=="}}))
        .unwrap();
        secrets.create(&Default::default(), &junk).await.unwrap();
        shows(polr, &ns, "junk", Some(("absent", "error", "high"))).await;

        // The latest deployed revision deleted by break-glass: the crash loop, critical; its copy
        // in the cluster report; restored, it passes.
        let annotate = run(&["kubectl", "annotate", "secret", "sh.helm.release.v1.web.v2", "-n", &ns,
            "helm-guard.io/allow-delete=INC-9 e2e"]);
        assert!(annotate.status.success(), "{}", said(&annotate));
        let deleted = run(&["kubectl", "delete", "secret", "sh.helm.release.v1.web.v2", "-n", &ns]);
        assert!(deleted.status.success(), "{}", said(&deleted));
        shows(polr, &ns, "web", Some(("orphaned-superseded", "fail", "critical"))).await;
        let kept = common::eventually(Duration::from_secs(20), || {
            let cluster = report("clusterpolicyreports.wgpolicyk8s.io", None);
            let found = cluster.is_some_and(|c| {
                c["results"].as_array().into_iter().flatten().any(|r| {
                    r["rule"] == "recycle-bin-copy" && r["properties"]["release"] == "web" && r["properties"]["namespace"] == ns.as_str()
                })
            });
            async move { found }
        })
        .await;
        assert!(kept, "the copy in the cluster report: {:#}", report("clusterpolicyreports.wgpolicyk8s.io", None).unwrap_or_default());
        let restored = run(&[GUARD, "restore", "web", "-n", &ns, "--guard-namespace", &guard_ns, "--apply"]);
        assert!(restored.status.success(), "{}", said(&restored));
        shows(polr, &ns, "web", Some(("healthy", "pass", "info"))).await;

        // An upgrade held pending (its pods never run here, `--wait` waits), its helm killed:
        // past --stuck-after it fails; `repair` marks it failed (warn: revision 1 still
        // deployed); `helm rollback` makes it healthy.
        let mut upgrade = std::process::Command::new("helm")
            .args(["upgrade", "held", chart, "-n", &ns, "--wait", "--timeout", "10m", "--set", "replicaCount=2"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        shows(polr, &ns, "held", Some(("pending-upgrade", "fail", "high"))).await;
        upgrade.kill().unwrap();
        let _ = upgrade.wait();
        let repaired = run(&[GUARD, "repair", "held", "-n", &ns, "--stuck-after", "1s", "--apply"]);
        assert!(repaired.status.success(), "{}", said(&repaired));
        shows(polr, &ns, "held", Some(("failed", "warn", "medium"))).await;
        let rolled = helm(&["rollback", "held", "1", "-n", &ns]);
        assert!(rolled.status.success(), "{}", said(&rolled));
        shows(polr, &ns, "held", Some(("healthy", "pass", "info"))).await;

        // Edited by hand: put back at the next resync.
        let edited = run(&["kubectl", "patch", polr, "helm-guard", "-n", &ns, "--type", "merge", "-p",
            r#"{"summary": {"pass": 99}}"#]);
        assert!(edited.status.success(), "{}", said(&edited));
        let put_back = common::eventually(Duration::from_secs(20), || {
            let pass = report(polr, Some(&ns)).map(|r| r["summary"]["pass"].clone());
            async move { pass == Some(json!(2)) }
        })
        .await;
        assert!(put_back, "{:#}", report(polr, Some(&ns)).unwrap_or_default());

        // Uninstalled: its result goes.
        let done = helm(&["uninstall", "web", "-n", &ns]);
        assert!(done.status.success(), "{}", said(&done));
        shows(polr, &ns, "web", None).await;
        shows(polr, &ns, "held", Some(("healthy", "pass", "info"))).await;

        // OpenReports installed too: the same results there.
        for crd in &openreports {
            apply_text(crd);
        }
        let reps = "reports.openreports.io";
        shows(reps, &ns, "held", Some(("healthy", "pass", "info"))).await;
        shows(reps, &ns, "junk", Some(("absent", "error", "high"))).await;
        assert_eq!(report(reps, Some(&ns)).unwrap()["source"], "helm-guard");

        // A second replica: one writer (the Lease's holder), and nothing rewritten while nothing
        // changes.
        let second_metrics = helm_guard::server::Metrics::new();
        let mut second = common::cluster::live_options(Some(&guard_ns), Default::default());
        second.identity = "e2e-second".into();
        second.policy_reports = Some(writer(&ns, "replica-b"));
        let _second = helm_guard::live::admission(
            client.clone(),
            helm_guard::admission::Settings::new(PolicyConfig::default()),
            second,
            &second_metrics,
        );
        tokio::time::sleep(Duration::from_secs(8)).await;
        let before = report(polr, Some(&ns)).unwrap();
        let first_wrote = metric(&running, "helm_guard_policy_reports_written_total");
        tokio::time::sleep(Duration::from_secs(12)).await;
        let after = report(polr, Some(&ns)).unwrap();
        assert_eq!(
            before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"],
            "no rewrite while nothing changes, across resyncs"
        );
        let done = helm(&["upgrade", "held", chart, "-n", &ns]);
        assert!(done.status.success(), "{}", said(&done));
        let upgraded = common::eventually(Duration::from_secs(20), || {
            let revision = report(polr, Some(&ns)).and_then(|r| {
                r["results"].as_array()?.iter().find(|r| r["properties"]["release"] == "held").cloned()
            });
            async move { revision.is_some_and(|r| r["properties"]["revision"] == "4") }
        })
        .await;
        assert!(upgraded, "{:#}", report(polr, Some(&ns)).unwrap_or_default());
        let (first, second) =
            (metric(&running, "helm_guard_policy_reports_written_total") - first_wrote, second_metrics.policy_reports.written.get());
        assert!(first > 0 && second == 0, "one writer: the first replica wrote {first}, the second {second}");
    })
    .catch_unwind()
    .await;
    common::cluster::cleanup(&client, &ns, false).await;
    for namespace in [&guard_ns, &lab_ns] {
        let _ = run(&["kubectl", "delete", "namespace", namespace, "--wait=false"]);
    }
    for crd in CRD_NAMES {
        let _ = run(&["kubectl", "delete", "crd", crd, "--ignore-not-found", "--wait=false"]);
    }
    running.shutdown().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}
