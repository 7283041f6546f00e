//! K3s and RKE2 on a real API server: klipper-helm's entry scripts (v0.9.8, `971f9fd^:entry`, and
//! the current `HEAD:entry`, read from a local copy of k3s-io/klipper-helm) run with the args and
//! env of the pods the real job controller makes from helm-controller-shaped Jobs, after the
//! guard's mutation. What each script then does (the Helm commands it runs, its exit status) is
//! checked against the pod's `helm-guard.io/action`, and the release against what the case
//! expects: install, upgrade with a new config hash and server-side apply, orphaned recovery
//! (rewritten for v0.9.8, left to HEAD), a killed upgrade, each failure policy on a failed release,
//! a protected chart, a skipped revision, the delete job after a reinstall, the configHash
//! forgery, and Events on HelmCharts (the CRD applied from k3s-io/helm-controller).
//!
//! Pods never run on kube-local, so the scripts run here, with `helm` on PATH a wrapper that logs
//! each command and runs the real Helm (Helm 3 for v0.9.8, whose image shipped it; Helm 4 for
//! HEAD), `mapkubeapis` a no-op, and `set-status` the edit k3s-io/helm-set-status makes
//! (`pkg/status/status.go`: the latest revision through Helm's storage, status and description
//! set, `last_deployed` now; the storage's `Update` keeps the labels, sets `status` and
//! `modifiedAt`, writes no annotations), made with kubectl and jq.
//!
//! `KLIPPER_HELM_GIT=<git dir of k3s-io/klipper-helm> HELM_CONTROLLER_GIT=<git dir of
//! k3s-io/helm-controller> cargo test --test e2e_suites e2e_k3s:: -- --ignored --nocapture`, with `helm3`,
//! `helm`, `kubectl`, `jq` on PATH and the cluster in KUBECONFIG (`../shared/tools/kube-local
//! up`). The scripts are read from the repositories at run time, never committed here.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::cluster::{kubectl_apply, output, said as text};
use futures::FutureExt;
use helm_guard::release::{Driver, ReleaseKey};
use serde_json::{Value, json};

const HASH_LABEL: &str = "helmcharts.helm.cattle.io/configHash";

/// One entry script and the Helm its image shipped.
struct Script {
    image: &'static str,
    entry: PathBuf,
    /// PATH entry with the `helm` wrapper.
    bin: PathBuf,
    log: PathBuf,
}

struct Bench {
    namespace: String,
    dir: tempfile::TempDir,
    chart: PathBuf,
    index: std::sync::Arc<helm_guard::cluster::ReleaseIndex>,
    old: Script,
    head: Script,
    jobs: std::cell::Cell<u32>,
}

fn must(command: &mut Command) -> String {
    let done = output(command);
    assert!(done.status.success(), "{command:?} failed: {}", text(&done));
    String::from_utf8_lossy(&done.stdout).into_owned()
}

fn git_show(variable: &str, spec: &str) -> String {
    let git_dir = std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} names the git directory of the repository (fetch it, e.g. /work/.mirror/…/repo)")
    });
    must(Command::new("git").args(["--git-dir", &git_dir, "show", spec]))
}

/// The `helm` the scripts find: logs the command, stands in for the plugins the image has.
const WRAPPER: &str = r#"#!/bin/bash
echo "$*" >> "$HELM_WRAPPER_LOG"
case "$1" in
  mapkubeapis) exit 0 ;;
  set-status)
    shift
    ns=default; args=()
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --namespace|-n) ns="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
      esac
    done
    release="${args[0]}"; status="${args[1]}"
    latest=$(kubectl get secrets -n "$ns" -l "owner=helm,name=$release" -o json \
      | jq '.items | max_by(.metadata.labels.version | tonumber)')
    payload=$(jq -r .data.release <<<"$latest" | base64 -d | base64 -d | gunzip \
      | jq -c --arg s "$status" '.info.status = $s | .info.description = "status forced by helm-set-status" | .info.last_deployed = (now | todate)')
    encoded=$(printf '%s' "$payload" | gzip -c | base64 -w0 | base64 -w0)
    jq --arg d "$encoded" --arg s "$status" --arg t "$(date +%s)" \
      '.data.release = $d | .metadata.labels.status = $s | .metadata.labels.modifiedAt = $t | del(.metadata.annotations)' <<<"$latest" \
      | kubectl replace -f -
    ;;
  *) exec "$HELM_WRAPPER_REAL" "$@" ;;
esac
"#;

fn script(dir: &Path, name: &str, spec: &str, image: &'static str) -> Script {
    let folder = dir.join(name);
    let bin = folder.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // The one path of the image that this machine must not write to.
    let source = git_show("KLIPPER_HELM_GIT", spec)
        .replace("/dev/termination-log", &folder.join("termination-log").display().to_string());
    let entry = folder.join("entry");
    std::fs::write(&entry, source).unwrap();
    std::fs::write(bin.join("helm"), WRAPPER).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(bin.join("helm"), std::fs::Permissions::from_mode(0o755)).unwrap();
    Script { image, entry, bin, log: folder.join("helm.log") }
}

fn which(program: &str) -> String {
    must(Command::new("sh").args(["-c", &format!("command -v {program}")])).trim().to_owned()
}

/// What a run of the entry script did.
#[derive(Debug)]
struct Run {
    pod: Value,
    /// The Helm commands that write (install, upgrade, uninstall, set-status), in order.
    commands: Vec<String>,
    succeeded: bool,
    said: String,
}

impl Run {
    fn annotation(&self, key: &str) -> &str {
        self.pod["metadata"]["annotations"][key].as_str().unwrap_or_default()
    }

    fn env(&self, name: &str) -> Option<&str> {
        let env = self.pod["spec"]["containers"][0]["env"].as_array()?;
        env.iter().rev().find(|var| var["name"] == name)?["value"].as_str()
    }
}

/// The commands and exit status `helm-guard.io/action` promises.
fn promised(action: &str) -> (Vec<&'static str>, bool) {
    let (reset, rest) = match action.strip_prefix("reset-to-failed, then ") {
        Some(rest) => (true, rest),
        None => (false, action),
    };
    let (mut commands, succeeds): (Vec<&str>, bool) = match rest {
        "install" => (vec!["install"], true),
        a if a.starts_with("install (refused") => (vec!["install"], false),
        "upgrade"
        | "upgrade (failure policy retry)"
        | "upgrade (failure policy retry) with --force-conflicts=true" => (vec!["upgrade"], true),
        "reset-and-upgrade" => (vec!["set-status", "upgrade"], true),
        "reinstall (uninstalls first)" => (vec!["uninstall", "install"], true),
        "wait-for-operator" => (vec![], false),
        "uninstall" => (vec!["uninstall"], true),
        a if a.starts_with("skip:") || a == "nothing-to-delete" => (vec![], true),
        other => panic!("an action the suite does not know: {other:?}"),
    };
    if reset {
        commands.insert(0, "set-status");
    }
    (commands, succeeds)
}

impl Bench {
    fn helm(&self, args: &[&str]) -> Output {
        output(Command::new("helm").args(args).args(["-n", &self.namespace]))
    }

    fn history(&self, release: &str) -> Vec<(u32, String)> {
        let done = self.helm(&["history", release, "-o", "json"]);
        if !done.status.success() {
            return Vec::new();
        }
        let rows: Vec<Value> = serde_json::from_slice(&done.stdout).unwrap();
        rows.iter()
            .map(|row| (row["revision"].as_u64().unwrap() as u32, row["status"].as_str().unwrap().to_owned()))
            .collect()
    }

    fn record(&self, release: &str, revision: u32) -> Value {
        let name = format!("sh.helm.release.v1.{release}.v{revision}");
        serde_json::from_str(&must(Command::new("kubectl").args([
            "get",
            "secret",
            &name,
            "-n",
            &self.namespace,
            "-o",
            "json",
        ])))
        .unwrap()
    }

    /// The HelmChart of `release`, as K3s stores one (the helm-controller does not run here).
    fn chart(&self, release: &str, protect: bool) {
        let labels = if protect { json!({"helm-guard.io/protect": "true"}) } else { json!({}) };
        kubectl_apply(&json!({
            "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": release, "namespace": self.namespace, "labels": labels},
            "spec": {"chart": "demo", "targetNamespace": self.namespace}
        }));
    }

    /// Waits until the guard's view of the release has helm history's latest revision and status.
    async fn settle(&self, release: &str) {
        let key = ReleaseKey {
            driver: Driver::Secret,
            namespace: self.namespace.clone(),
            release: release.to_owned(),
        };
        let latest = self.history(release).last().cloned();
        let seen = common::eventually(Duration::from_secs(15), || async {
            let facts = self.index.history(&key);
            let known =
                facts.iter().max_by_key(|f| f.revision).map(|f| (f.revision, f.label.map(|s| s.to_string())));
            known == latest.clone().map(|(revision, status)| (revision, Some(status)))
        })
        .await;
        assert!(seen, "the guard's view of {release} did not reach {latest:?}");
    }

    /// A helm-controller-shaped Job for `release`; the pod the job controller makes of it, as the
    /// guard mutated it; the entry script run with that pod's args and env.
    async fn run_job(&self, script: &Script, release: &str, command: &str, env: &[(&str, &str)]) -> Run {
        self.settle(release).await;
        let n = self.jobs.get() + 1;
        self.jobs.set(n);
        let job = format!("helm-{command}-{release}-{n}");
        let expected = self.history(release).last().map_or(0, |(revision, _)| *revision).to_string();
        let mut variables = vec![
            json!({"name": "NAME", "value": release}),
            json!({"name": "VERSION", "value": ""}),
            json!({"name": "REPO", "value": ""}),
            json!({"name": "HELM_DRIVER", "value": "secret"}),
            json!({"name": "CHART_NAMESPACE", "value": self.namespace}),
            json!({"name": "CHART", "value": self.chart.display().to_string()}),
            json!({"name": "HELM_VERSION", "value": ""}),
            json!({"name": "TARGET_NAMESPACE", "value": self.namespace}),
            json!({"name": "FAILURE_POLICY", "value": "reinstall"}),
            json!({"name": "EXPECTED_RELEASE_REVISION", "value": expected}),
        ];
        for (name, value) in env {
            variables.retain(|var| var["name"] != *name);
            variables.push(json!({"name": name, "value": value}));
        }
        let args = if command == "delete" {
            json!(["delete"])
        } else {
            json!(["install", "--namespace", self.namespace])
        };
        kubectl_apply(&json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job, "namespace": self.namespace, "labels": {"helmcharts.helm.cattle.io/chart": release}},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": {"helmcharts.helm.cattle.io/chart": release}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "helm", "image": script.image, "args": args, "env": variables
                }]}
            }}
        }));
        let mut pod = Value::Null;
        let made = common::eventually(Duration::from_secs(30), || {
            let found = output(Command::new("kubectl").args([
                "get",
                "pods",
                "-n",
                &self.namespace,
                "-l",
                &format!("job-name={job}"),
                "-o",
                "json",
            ]));
            let items: Value = serde_json::from_slice(&found.stdout).unwrap_or_default();
            if let Some(first) = items["items"].get(0) {
                pod = first.clone();
            }
            std::future::ready(!pod.is_null())
        })
        .await;
        assert!(made, "the job controller made no pod for {job}");
        let container = &pod["spec"]["containers"][0];
        let _ = std::fs::remove_file(&script.log);
        let mut run = Command::new("bash");
        run.arg(&script.entry);
        for arg in container["args"].as_array().unwrap() {
            run.arg(arg.as_str().unwrap());
        }
        for var in container["env"].as_array().unwrap() {
            if let Some(value) = var["value"].as_str() {
                run.env(var["name"].as_str().unwrap(), value);
            }
        }
        let path = format!("{}:{}", script.bin.display(), std::env::var("PATH").unwrap());
        let real = if script.image.contains("v0.9.8") { which("helm3") } else { which("helm") };
        run.env("PATH", path)
            .env("HELM_WRAPPER_LOG", &script.log)
            .env("HELM_WRAPPER_REAL", real)
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", "6443")
            .env("HOME", self.dir.path());
        let done = output(&mut run);
        let logged = std::fs::read_to_string(&script.log).unwrap_or_default();
        let commands = logged
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|c| matches!(*c, "install" | "upgrade" | "uninstall" | "set-status"))
            .map(str::to_owned)
            .collect();
        let run = Run { pod, commands, succeeded: done.status.success(), said: text(&done) };
        let action = run.annotation("helm-guard.io/action").to_owned();
        // `ACTION, with FLAGS`: the server-side-apply flags the script gives Helm.
        let (what, flags) = action.split_once(", with ").unwrap_or((action.as_str(), ""));
        let (commands, succeeds) = promised(what);
        assert_eq!(
            (run.commands.iter().map(String::as_str).collect::<Vec<_>>(), run.succeeded),
            (commands, succeeds),
            "{job}: the pod said `{action}`, the script did otherwise:\n{}",
            run.said
        );
        for flag in flags.split_whitespace().filter(|flag| flag.starts_with("--")) {
            assert!(
                run.said.contains(flag),
                "{job}: the pod said `{action}`, the script ran Helm without {flag}:\n{}",
                run.said
            );
        }
        run
    }

    fn install(&self, release: &str, hash: &str) {
        let label = format!("{HASH_LABEL}={hash}");
        let chart = self.chart.display().to_string();
        must(Command::new("helm").args([
            "install",
            release,
            &chart,
            "-n",
            &self.namespace,
            "--labels",
            &label,
        ]));
    }

    fn upgrade(&self, release: &str) {
        let chart = self.chart.display().to_string();
        must(Command::new("helm").args(["upgrade", release, &chart, "-n", &self.namespace]));
    }

    /// An upgrade that fails: `--wait` on pods that never run.
    fn fail(&self, release: &str) {
        let chart = self.chart.display().to_string();
        let done = self.helm(&["upgrade", release, &chart, "--wait", "--timeout", "2s"]);
        assert!(!done.status.success());
        assert_eq!(self.history(release).last().unwrap().1, "failed");
    }

    /// An upgrade killed while it waits: its revision stays `pending-upgrade`.
    async fn kill_upgrade(&self, release: &str) {
        let chart = self.chart.display().to_string();
        let mut child = Command::new("helm")
            .args(["upgrade", release, &chart, "-n", &self.namespace, "--wait", "--timeout", "60s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pending = common::eventually(Duration::from_secs(20), || {
            std::future::ready(self.history(release).last().is_some_and(|(_, s)| s == "pending-upgrade"))
        })
        .await;
        child.kill().unwrap();
        let _ = child.wait();
        assert!(pending, "the upgrade did not start");
    }

    /// The latest revision deleted by hand, with the break-glass annotation: the release is left
    /// orphaned-superseded (PROBLEM.md).
    fn orphan(&self, release: &str) {
        let latest = self.history(release).last().unwrap().0;
        let name = format!("secret/sh.helm.release.v1.{release}.v{latest}");
        must(Command::new("kubectl").args([
            "annotate",
            &name,
            "-n",
            &self.namespace,
            "helm-guard.io/allow-delete=e2e: make an orphan",
        ]));
        must(Command::new("kubectl").args(["delete", &name, "-n", &self.namespace]));
        assert_eq!(self.history(release).last().unwrap().1, "superseded");
    }

    /// The Events the guard wrote on the HelmChart `release`.
    async fn chart_events(&self, release: &str, reason: &str) -> Vec<Value> {
        let mut found = Vec::new();
        // Whether any came in time is for the caller to assert, on what was found.
        let _ = common::eventually(Duration::from_secs(20), || {
            let listed = output(Command::new("kubectl").args([
                "get",
                "events.events.k8s.io",
                "-n",
                &self.namespace,
                "-o",
                "json",
            ]));
            let events: Value = serde_json::from_slice(&listed.stdout).unwrap_or_default();
            found = events["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| {
                    e["regarding"]["kind"] == "HelmChart"
                        && e["regarding"]["name"] == release
                        && e["reason"] == reason
                })
                .collect();
            std::future::ready(!found.is_empty())
        })
        .await;
        found
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real API server, helm3, helm, kubectl, jq and the klipper-helm and helm-controller repositories: KLIPPER_HELM_GIT=… HELM_CONTROLLER_GIT=… cargo test --test e2e_suites e2e_k3s:: -- --ignored"]
async fn klipper_helm_scripts_do_what_the_guard_says_on_a_real_api_server() {
    let guard = common::cluster::start_guard("helm-guard-e2e-k3s", 40).await;
    let common::cluster::LiveGuard { client, namespace, url, ca_pem, running, index, .. } = guard;
    let checks = std::panic::AssertUnwindSafe(async {
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"helm-guard-e2e": namespace}}}));
        common::cluster::register_webhooks(&client, &namespace, &url, &ca_pem).await;
        let crd =
            git_show("HELM_CONTROLLER_GIT", "HEAD:pkg/crds/yaml/generated/helm.cattle.io_helmcharts.yaml");
        let crd: Value = serde_saphyr::from_str(&crd).unwrap();
        kubectl_apply(&crd);
        must(Command::new("kubectl").args([
            "wait",
            "--for=condition=Established",
            "crd/helmcharts.helm.cattle.io",
            "--timeout=30s",
        ]));
        let dir = tempfile::tempdir().unwrap();
        must(Command::new("helm").args(["create", &dir.path().join("demo").display().to_string()]));
        must(Command::new("helm").arg("package").arg(dir.path().join("demo")).arg("-d").arg(dir.path()));
        let bench = Bench {
            namespace: namespace.clone(),
            chart: dir.path().join("demo-0.1.0.tgz"),
            old: script(dir.path(), "v0.9.8", "971f9fd^:entry", "rancher/klipper-helm:v0.9.8-build20250709"),
            head: script(dir.path(), "head", "HEAD:entry", "rancher/klipper-helm:v0.13.3-build20260727"),
            dir,
            index,
            jobs: Default::default(),
        };
        cases(&bench).await;
    })
    .catch_unwind()
    .await;
    common::cluster::cleanup(&client, &namespace, false).await;
    running.shutdown().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}

async fn cases(b: &Bench) {
    let statuses = |release: &str| b.history(release).into_iter().map(|(_, s)| s).collect::<Vec<_>>();

    // Install, then an upgrade with a new configuration and server-side apply (HEAD).
    b.chart("web", false);
    let run = b.run_job(&b.head, "web", "install", &[("CONFIG_HASH", "H1")]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "install");
    assert_eq!(b.record("web", 1)["metadata"]["labels"][HASH_LABEL], "H1");
    let run = b.run_job(&b.head, "web", "install", &[("CONFIG_HASH", "H2"), ("SERVER_SIDE", "true")]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "upgrade, with --server-side=true");
    assert_eq!(statuses("web"), ["superseded", "deployed"]);
    assert_eq!(b.record("web", 2)["metadata"]["labels"][HASH_LABEL], "H2");

    // The forged configHash is refused, on the record and on its HelmChart.
    let forged = output(Command::new("kubectl").args([
        "label",
        "secret",
        "sh.helm.release.v1.web.v2",
        "-n",
        &b.namespace,
        &format!("{HASH_LABEL}=FORGED"),
        "--overwrite",
    ]));
    assert!(
        !forged.status.success()
            && text(&forged).contains(
                "changes the label `helmcharts.helm.cattle.io/configHash` from \"H2\" to \"FORGED\""
            ),
        "{}",
        text(&forged)
    );
    assert_eq!(b.record("web", 2)["metadata"]["labels"][HASH_LABEL], "H2");
    assert!(!b.chart_events("web", "ProtectedLabelChange").await.is_empty(), "an Event on helmchart/web");

    // A revision other than the expected one: the script exits without acting.
    let run = b.run_job(&b.head, "web", "install", &[("EXPECTED_RELEASE_REVISION", "1")]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "skip: revision 2 is not the expected 1");
    assert_eq!(statuses("web"), ["superseded", "deployed"]);

    // HEAD's flag bug (issue 59): `serverSide: false` with `forceConflicts: true` would run Helm
    // with both flags, which Helm 4 refuses every time; the pod is healed and the upgrade runs.
    let run =
        b.run_job(&b.head, "web", "install", &[("SERVER_SIDE", "false"), ("FORCE_CONFLICTS", "true")]).await;
    assert_eq!(run.env("FORCE_CONFLICTS"), Some("false"), "{}", run.said);
    assert_eq!(
        run.annotation("helm-guard.io/action"),
        "upgrade, with --server-side=false --force-conflicts=false"
    );
    assert!(run.annotation("helm-guard.io/force-conflicts-from").contains("never matches"), "{:?}", run.pod);
    assert!(run.succeeded, "{}", run.said);
    assert_eq!(statuses("web"), ["superseded", "superseded", "deployed"]);
    assert!(!b.chart_events("web", "HelmInstallPodRewritten").await.is_empty(), "an Event names the rewrite");

    // Orphaned-superseded: v0.9.8 needs the rewrite, HEAD resets and upgrades by itself.
    b.chart("old-orphan", false);
    b.install("old-orphan", "H1");
    b.upgrade("old-orphan");
    b.orphan("old-orphan");
    let run = b.run_job(&b.old, "old-orphan", "install", &[]).await;
    assert_eq!(run.pod["spec"]["containers"][0]["args"][0], "upgrade");
    assert_eq!(run.annotation("helm-guard.io/rewritten-from"), "install");
    assert_eq!(statuses("old-orphan"), ["superseded", "deployed"]);
    assert!(!b.chart_events("old-orphan", "HelmInstallPodRewritten").await.is_empty());

    b.install("head-orphan", "H1");
    b.upgrade("head-orphan");
    b.orphan("head-orphan");
    let run = b.run_job(&b.head, "head-orphan", "install", &[]).await;
    assert_eq!(run.pod["spec"]["containers"][0]["args"][0], "install", "HEAD handles superseded itself");
    assert_eq!(run.annotation("helm-guard.io/action"), "reset-and-upgrade");
    assert_eq!(
        statuses("head-orphan"),
        ["superseded", "deployed"],
        "the upgrade supersedes the reset latest"
    );

    // A killed upgrade.
    b.install("killed", "H1");
    b.kill_upgrade("killed").await;
    let run = b.run_job(&b.head, "killed", "install", &[]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "reset-and-upgrade");
    assert_eq!(statuses("killed"), ["superseded", "failed", "deployed"]);

    // A failed release under each failure policy, then the delete job after the reinstall.
    b.install("failing", "H1");
    b.fail("failing");
    let before = b.history("failing");
    let run = b.run_job(&b.head, "failing", "install", &[("FAILURE_POLICY", "abort")]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "wait-for-operator");
    assert_eq!(b.history("failing"), before);
    let run = b.run_job(&b.old, "failing", "install", &[("FAILURE_POLICY", "retry")]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "wait-for-operator", "v0.9.8 has no retry");
    let run = b.run_job(&b.head, "failing", "install", &[("FAILURE_POLICY", "retry")]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "upgrade (failure policy retry)");
    assert_eq!(statuses("failing"), ["superseded", "failed", "deployed"]);
    b.fail("failing");
    let run = b.run_job(&b.head, "failing", "install", &[("FAILURE_POLICY", "reinstall")]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "reinstall (uninstalls first)");
    assert_eq!(statuses("failing"), ["deployed"], "uninstalled, then installed afresh");
    b.upgrade("failing");
    let run = b.run_job(&b.head, "failing", "delete", &[]).await;
    assert_eq!(run.annotation("helm-guard.io/action"), "uninstall");
    assert!(b.history("failing").is_empty(), "the delete job purged every record");

    // A protected chart keeps its failed release, whatever the job's policy.
    b.chart("kept", true);
    b.install("kept", "H1");
    b.fail("kept");
    let run = b.run_job(&b.old, "kept", "install", &[]).await;
    assert_eq!(
        (run.env("FAILURE_POLICY"), run.annotation("helm-guard.io/action")),
        (Some("abort"), "wait-for-operator")
    );
    assert_eq!(statuses("kept"), ["deployed", "failed"]);
    let run = b.run_job(&b.head, "kept", "install", &[]).await;
    assert_eq!(run.env("FAILURE_POLICY"), Some("retry"));
    assert_eq!(
        run.annotation("helm-guard.io/failure-policy-from"),
        "reinstall (helm-guard.io/protect on helmchart {}/kept)".replace("{}", &b.namespace)
    );
    assert_eq!(statuses("kept"), ["superseded", "failed", "deployed"], "upgraded, never uninstalled");
    assert!(!b.chart_events("kept", "HelmInstallPodRewritten").await.is_empty());

    // Issue 59: a protected release that failed on a server-side-apply field conflict (Helm 4
    // applies server-side; `kubectl scale` took `.spec.replicas`): a retry as it is fails on the
    // same conflict, a reinstall takes it down; its pod gets FORCE_CONFLICTS=true and the
    // script's upgrade takes the field back.
    b.chart("conflicted", true);
    b.install("conflicted", "H1");
    must(Command::new("kubectl").args([
        "scale",
        "deploy",
        "conflicted-demo",
        "--replicas=2",
        "-n",
        &b.namespace,
    ]));
    let chart = b.chart.display().to_string();
    let retried = b.helm(&["upgrade", "conflicted", &chart, "--set", "replicaCount=3"]);
    assert!(
        !retried.status.success() && text(&retried).contains("conflict with \"kubectl\""),
        "{}",
        text(&retried)
    );
    assert_eq!(statuses("conflicted"), ["deployed", "failed"]);
    let run = b.run_job(&b.head, "conflicted", "install", &[("SERVER_SIDE", "auto")]).await;
    assert_eq!(
        (run.env("FAILURE_POLICY"), run.env("FORCE_CONFLICTS")),
        (Some("retry"), Some("true")),
        "{}",
        run.said
    );
    assert_eq!(
        run.annotation("helm-guard.io/action"),
        "upgrade (failure policy retry), with --server-side=auto --force-conflicts=true"
    );
    assert!(run.annotation("helm-guard.io/force-conflicts-from").contains("field conflict"), "{:?}", run.pod);
    assert!(run.said.contains("--force-conflicts=true"), "the script passed the flag: {}", run.said);
    assert_eq!(statuses("conflicted"), ["superseded", "failed", "deployed"], "upgraded, never uninstalled");
    let events = b.chart_events("conflicted", "HelmInstallPodRewritten").await;
    assert!(
        events
            .iter()
            .any(|e| e["note"].as_str().is_some_and(|n| n.contains("FORCE_CONFLICTS unset -> true"))),
        "{events:?}"
    );
}
