//! End-to-end with real Helm 3 and Helm 4 (`helm3` and `helm` on PATH, as
//! `../shared/tools/kube-local` provides them) against a real API server, through the guard.
//! Ignored unless asked for, like tests/e2e.rs: `cargo test --test e2e_suites e2e_helm:: -- --ignored`.
//!
//! It proves two things the guard promises:
//! - Helm's own flows pass through untouched: install, upgrade, an upgrade that fails, rollback,
//!   uninstall with and without --keep-history, with both Helm versions;
//! - for the guard a release is exactly what `helm history` shows: records crafted with kubectl
//!   next to real ones (a payload Helm cannot read, Go-style keys, base64 line breaks, a
//!   duplicated key, a second object holding a revision) are read as Helm reads them, by `scan`
//!   and by the verdicts; and hand edits Helm never makes are refused.

use crate::common;

use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::*;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server (the cluster in KUBECONFIG): cargo test --test e2e_suites e2e_helm:: -- --ignored"]
async fn real_helm_flows_and_crafted_records() {
    let guard = common::cluster::start_guard("helm-guard-e2e-helm", 1).await;
    let common::cluster::LiveGuard { client, namespace, url, ca_pem, running, index, dir } = guard;
    let chart = dir.path().join("demo");
    helm("helm", &["create", chart.to_str().unwrap()]).expect("helm create");
    let run = Run {
        client: client.clone(),
        ns: namespace.clone(),
        chart: chart.to_str().unwrap().to_owned(),
        index: index.clone(),
    };
    let checks = std::panic::AssertUnwindSafe(checks(run, url, ca_pem)).catch_unwind().await;
    common::cluster::cleanup(&client, &namespace, false).await;
    running.shutdown().await;
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}

use futures::FutureExt;

/// helm-guard's Helm plugin, installed for one Helm binary in its own plugin directory.
struct Plugin {
    helm: String,
    plugins: std::path::PathBuf,
}

impl Plugin {
    fn install(helm_bin: &str, plugins: &std::path::Path) -> Plugin {
        std::fs::create_dir_all(plugins).unwrap();
        let plugin = Plugin { helm: helm_bin.to_owned(), plugins: plugins.to_owned() };
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/plugin");
        let output = plugin.command().args(["plugin", "install", source]).output().unwrap();
        assert!(
            output.status.success(),
            "{helm_bin} plugin install: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        plugin
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.helm);
        // helm-guard on PATH, as a user installs it.
        let binary_dir = std::path::Path::new(env!("CARGO_BIN_EXE_helm-guard")).parent().unwrap().to_owned();
        let path = std::env::join_paths(
            std::iter::once(binary_dir)
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .unwrap();
        // HELM_DATA_HOME, not HELM_PLUGINS: Helm 4.1 installs into the data home whatever
        // HELM_PLUGINS says.
        command.env("HELM_DATA_HOME", &self.plugins).env("PATH", path);
        command
    }

    /// `helm guard ARGS -n NAMESPACE`: (exit code, stdout and stderr).
    fn run(&self, args: &[&str], namespace: &str) -> (Option<i32>, String) {
        let output = self.command().arg("guard").args(args).args(["-n", namespace]).output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.code(), text)
    }
}

struct Run {
    client: Client,
    ns: String,
    chart: String,
    index: std::sync::Arc<helm_guard::cluster::ReleaseIndex>,
}

/// Runs a Helm binary; `Err` carries its output when it fails.
fn helm(bin: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin} not found ({e}): run `eval \"$(../shared/tools/kube-local up)\"`"));
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    if output.status.success() { Ok(text) } else { Err(text) }
}

impl Run {
    /// A Helm command that must pass through the guard.
    fn helm_ok(&self, bin: &str, args: &[&str]) {
        let mut all = args.to_vec();
        all.extend(["-n", &self.ns]);
        if let Err(output) = helm(bin, &all) {
            panic!("`{bin} {}` failed:\n{output}", args.join(" "));
        }
        self.agrees(bin, args.get(1).copied().unwrap_or_default());
    }

    /// `helm history` as (revision, status), sorted; empty when Helm knows no such release.
    fn helm_history(&self, bin: &str, release: &str) -> Vec<(i64, String)> {
        self.try_helm_history(bin, release).unwrap_or_else(|text| panic!("{bin} history {release}: {text}"))
    }

    /// `Err`: Helm failed (or crashed) on the release.
    fn try_helm_history(&self, bin: &str, release: &str) -> Result<Vec<(i64, String)>, String> {
        match helm(bin, &["history", release, "-n", &self.ns, "-o", "json"]) {
            Ok(text) => {
                let start = text.find('[').unwrap_or(0);
                let rows: Vec<Value> = serde_json::from_str(text[start..].trim()).unwrap();
                let mut rows: Vec<(i64, String)> = rows
                    .iter()
                    .map(|r| (r["revision"].as_i64().unwrap(), r["status"].as_str().unwrap().to_owned()))
                    .collect();
                rows.sort();
                Ok(rows)
            }
            Err(text) if text.contains("not found") => Ok(Vec::new()),
            Err(text) => Err(text),
        }
    }

    /// `helm-guard inspect -n NS RELEASE` reads the release as `helm history` lists it.
    fn inspect_from_the_cluster(&self) {
        let inspect = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_helm-guard"))
                .args([&["inspect", "-n", &self.ns], args, &["-o", "json"]].concat())
                .output()
                .unwrap()
        };
        let all = inspect(&["rb"]);
        assert_eq!(all.status.code(), Some(0), "{}", String::from_utf8_lossy(&all.stderr));
        let items: Vec<Value> = serde_json::from_slice(&all.stdout).unwrap();
        let mut seen: Vec<(i64, String)> = items
            .iter()
            .map(|i| (i["revision"].as_i64().unwrap(), i["status"].as_str().unwrap().to_owned()))
            .collect();
        seen.sort();
        assert_eq!(seen, self.helm_history("helm", "rb"));
        let one = inspect(&["rb", "--revision", "2"]);
        let items: Vec<Value> = serde_json::from_slice(&one.stdout).unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(
            (items[0]["revision"].as_i64(), items[0]["object"].as_str()),
            (Some(2), Some(&*format!("Secret {}/sh.helm.release.v1.rb.v2", self.ns)))
        );
        let missing = inspect(&["nosuch"]);
        assert_eq!(missing.status.code(), Some(2));
        let err = String::from_utf8_lossy(&missing.stderr);
        assert!(err.contains(&format!("release nosuch in namespace {}: not found", self.ns)), "{err}");
    }

    /// Kills a `helm upgrade` while it waits, leaving its revision pending-upgrade; then
    /// `helm guard repair` (through the plugin) refuses while the revision is young, plans,
    /// applies through the guard's webhook, and the next `helm upgrade` succeeds.
    fn stuck_upgrade_is_repaired(&self, plugin: &Plugin, release: &str) {
        let bin = plugin.helm.as_str();
        self.helm_ok(bin, &["install", release, &self.chart]);
        let mut upgrade = Command::new(bin)
            .args(["upgrade", release, &self.chart, "--wait", "--timeout", "5m", "-n", &self.ns])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while self.helm_history(bin, release).last().map(|(_, s)| s.as_str()) != Some("pending-upgrade") {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{bin} upgrade never wrote its pending revision"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        upgrade.kill().unwrap();
        upgrade.wait().unwrap();
        let blocked =
            helm(bin, &["upgrade", release, &self.chart, "-n", &self.ns]).expect_err("a stuck release");
        assert!(blocked.contains("another operation (install/upgrade/rollback) is in progress"), "{blocked}");

        let young = plugin.run(&["repair", release], &self.ns);
        assert_eq!(young.0, Some(1), "refused while Helm may still be running: {}", young.1);
        assert!(young.1.contains("Helm may still be running"), "{}", young.1);
        // Pending for longer than 0 s: a second on the records' clock.
        std::thread::sleep(Duration::from_millis(1100));
        let planned = plugin.run(&["repair", release, "--stuck-after", "0s"], &self.ns);
        assert_eq!(planned.0, Some(1), "a plan not applied is a finding, as scan's: {}", planned.1);
        assert!(planned.1.contains("pending-upgrade -> failed (payload and label)"), "{}", planned.1);
        assert_eq!(
            self.helm_history(bin, release).last().unwrap().1,
            "pending-upgrade",
            "a plan changes nothing"
        );
        let applied = plugin.run(&["repair", release, "--stuck-after", "0s", "--apply"], &self.ns);
        assert_eq!(applied.0, Some(0), "{}", applied.1);
        assert!(applied.1.contains("Applied 1 edit."), "{}", applied.1);
        self.agrees(bin, release);
        assert_eq!(self.helm_history(bin, release).last().unwrap().1, "failed");
        self.helm_ok(bin, &["upgrade", release, &self.chart]);
        assert_eq!(self.helm_history(bin, release).last().unwrap().1, "deployed");

        // `helm guard scan` through Helm: the namespace is Helm's, the scan the guard's.
        let scan = plugin.run(&["scan", "--release", release, "-o", "json"], &self.ns);
        assert_eq!(scan.0, Some(0), "{}", scan.1);
        let reports: Vec<Value> = serde_json::from_str(&scan.1).unwrap();
        assert_eq!(reports.len(), 1, "{}", scan.1);
        assert_eq!(
            (reports[0]["namespace"].as_str(), reports[0]["state"].as_str()),
            (Some(&*self.ns), Some("healthy"))
        );
        self.helm_ok(bin, &["uninstall", release]);
    }

    /// `helm-guard scan` of one release, as (revision, status), sorted.
    fn guard_history(&self, release: &str) -> Vec<(i64, String)> {
        let output = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
            .args(["scan", "-n", &self.ns, "--release", release, "-o", "json"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        if text.trim().is_empty() {
            return Vec::new();
        }
        let reports: Vec<Value> = serde_json::from_str(&text).unwrap();
        let mut rows: Vec<(i64, String)> = reports
            .iter()
            .flat_map(|r| r["history"].as_array().unwrap().clone())
            .map(|r| (r["revision"].as_i64().unwrap(), r["status"].as_str().unwrap().to_owned()))
            .collect();
        rows.sort();
        rows
    }

    /// The guard reads the release as Helm 3 and Helm 4 both do.
    fn agrees(&self, bin: &str, release: &str) {
        if release.is_empty() {
            return;
        }
        let helm4 = self.helm_history("helm", release);
        let helm3 = self.helm_history("helm3", release);
        assert_eq!(helm3, helm4, "after `{bin}`: Helm 3 and Helm 4 disagree on {release}");
        assert_eq!(
            self.guard_history(release),
            helm4,
            "after `{bin}`: scan disagrees with helm history of {release}"
        );
    }

    /// Waits until the guard's index holds as many records of the release as the cluster does.
    async fn settled(&self, release: &str) {
        let key = helm_guard::release::ReleaseKey {
            driver: helm_guard::release::Driver::Secret,
            namespace: self.ns.clone(),
            release: release.to_owned(),
        };
        let selector = kube::api::ListParams::default().labels(&format!("owner=helm,name={release}"));
        let settled = eventually(Duration::from_secs(10), || async {
            self.secrets().list(&selector).await.unwrap().items.len() == self.index.history(&key).len()
        })
        .await;
        assert!(settled, "the watch caught up with {release}");
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A Secret crafted with kubectl: Helm's labels, a payload from JSON text.
    async fn craft(&self, name: &str, release: &str, labels: Value, json_text: &[u8], line_breaks: bool) {
        let mut helm_b64 =
            String::from_utf8(helm_guard::release::decode::codec::encode_helm_payload(json_text)).unwrap();
        if line_breaks {
            let chunks: Vec<String> =
                helm_b64.as_bytes().chunks(76).map(|c| String::from_utf8(c.to_vec()).unwrap()).collect();
            helm_b64 = chunks.join("\r\n") + "\n";
        }
        let mut all_labels = json!({"owner": "helm", "name": release});
        all_labels.as_object_mut().unwrap().extend(labels.as_object().unwrap().clone());
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": self.ns, "labels": all_labels},
            "data": {"release": STANDARD.encode(helm_b64)},
        });
        // Crafted, not Helm's: records as they may stand from before the guard, so created past
        // it, as the group `helm-guard.io:break-glass` is (the webhooks' matchConditions).
        let mut config = kube::Config::infer().await.unwrap();
        config.auth_info.impersonate = Some("admin".into());
        config.auth_info.impersonate_groups =
            Some(vec!["system:masters".into(), "helm-guard.io:break-glass".into()]);
        let past_the_guard: Api<Secret> = Api::namespaced(kube::Client::try_from(config).unwrap(), &self.ns);
        past_the_guard
            .create(&PostParams::default(), &serde_json::from_value(secret).unwrap())
            .await
            .unwrap();
        self.agrees("kubectl create", release);
        self.settled(release).await;
    }

    /// The release JSON of a stored record.
    async fn release_json(&self, name: &str) -> Value {
        let secret = self.secrets().get(name).await.unwrap();
        release_json(&serde_json::to_value(secret).unwrap())
    }

    /// Deletes a record and expects a refusal whose message has `needle`.
    async fn delete_refused(&self, name: &str, needle: &str) {
        match self.secrets().delete(name, &DeleteParams::default()).await {
            Ok(_) => panic!("deleting {name} was allowed"),
            Err(error) => assert!(error.to_string().contains(needle), "{name}: {error}"),
        }
    }

    async fn delete_ok(&self, name: &str, release: &str) {
        self.secrets().delete(name, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let gone = eventually(Duration::from_secs(10), || async {
            self.secrets().get_opt(name).await.unwrap().is_none()
        })
        .await;
        assert!(gone);
        self.agrees("kubectl delete", release);
        self.settled(release).await;
    }

    /// Applies a JSON merge patch and expects a refusal whose message has `needle`.
    async fn patch_refused(&self, name: &str, patch: Value, needle: &str) {
        match self.secrets().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => panic!("the edit of {name} was allowed: {patch}"),
            Err(error) => assert!(error.to_string().contains(needle), "{name}: {error}"),
        }
    }
}

fn payload_data(json: &Value) -> String {
    String::from_utf8(helm_guard::release::decode::codec::encode_secret_payload(
        &serde_json::to_vec(json).unwrap(),
    ))
    .unwrap()
}

async fn checks(run: Run, url: String, ca_pem: String) {
    let ns = run.ns.clone();
    let namespaces = Api::<Namespace>::all(run.client.clone());
    let labelled = json!({"metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(labelled).unwrap()).await.unwrap();
    // Before the webhooks: the single-record releases are then deleted without a verdict.
    crafted_table_against_real_helm(&run).await;
    common::cluster::register_webhooks(&run.client, &ns, &url, &ca_pem).await;
    let chart = run.chart.clone();

    // The guard is called once a dry-run delete of a latest deployed revision is refused.
    run.helm_ok("helm", &["install", "rb", &chart]);
    let dry_run = DeleteParams { dry_run: true, ..DeleteParams::default() };
    let guarded = eventually(Duration::from_secs(30), || async {
        run.secrets().delete("sh.helm.release.v1.rb.v1", &dry_run).await.is_err()
    })
    .await;
    assert!(guarded, "the webhook took effect within 30 s");

    // Helm's own flows pass through untouched, with both Helm versions.
    for (bin, release) in [("helm", "h4"), ("helm3", "h3")] {
        run.helm_ok(bin, &["install", release, &chart]);
        run.helm_ok(bin, &["upgrade", release, &chart, "--set", "replicaCount=2"]);
        // Pods never run here: an upgrade that waits for them fails, as a real failed upgrade does.
        let failed = helm(bin, &["upgrade", release, &chart, "--wait", "--timeout", "3s", "-n", &ns]);
        let output = failed.expect_err("an upgrade waiting for pods that never run fails");
        assert!(
            !output.contains("denied the request"),
            "the guard refused part of a failing upgrade: {output}"
        );
        run.agrees(bin, release);
        assert_eq!(run.helm_history(bin, release).last().unwrap().1, "failed");
        run.helm_ok(bin, &["rollback", release, "2"]);
        run.helm_ok(bin, &["upgrade", release, &chart]);
        run.helm_ok(bin, &["uninstall", release, "--keep-history"]);
        assert_eq!(run.helm_history(bin, release).last().unwrap().1, "uninstalled");
        run.helm_ok(bin, &["rollback", release, "5"]);
        run.helm_ok(bin, &["uninstall", release]);
        assert!(run.helm_history(bin, release).is_empty());
    }

    // A release stuck in pending-upgrade by a killed `helm upgrade` is repaired through the
    // Helm plugin, and the next upgrade runs; with both Helm versions.
    let plugins = tempfile::tempdir().unwrap();
    for (bin, release) in [("helm", "stuck4"), ("helm3", "stuck3")] {
        let plugin = Plugin::install(bin, &plugins.path().join(bin));
        run.stuck_upgrade_is_repaired(&plugin, release);
    }

    // A release with three revisions; the latest, 3, deployed.
    run.helm_ok("helm", &["upgrade", "rb", &chart]);
    run.helm_ok("helm", &["upgrade", "rb", &chart]);
    let v3 = run.release_json("sh.helm.release.v1.rb.v3").await;
    assert_eq!(v3["info"]["status"], "deployed");
    run.inspect_from_the_cluster();
    let as_v4 = |status: &str| {
        let mut release = v3.clone();
        release["version"] = json!(4);
        release["info"]["status"] = json!(status);
        release
    };
    let v4_labels = |status: &str| json!({"version": "4", "status": status});

    // Payloads Helm cannot read do not count, however they are labelled: revision 3 stays
    // Helm's latest deployed revision and cannot be deleted.
    let mut config_not_object = as_v4("deployed");
    config_not_object["config"] = json!(1);
    let mut bad_time = as_v4("deployed");
    bad_time["info"]["last_deployed"] = json!("yesterday");
    for unreadable in [config_not_object, bad_time] {
        let text = serde_json::to_vec(&unreadable).unwrap();
        run.craft("sh.helm.release.v1.rb.v4", "rb", v4_labels("deployed"), &text, false).await;
        run.delete_refused("sh.helm.release.v1.rb.v3", "latest, deployed revision").await;
        run.delete_ok("sh.helm.release.v1.rb.v4", "rb").await;
    }

    // Payloads Helm reads count, however they are written: Go-style keys (labels saying
    // otherwise), base64 with line breaks and a duplicated key (the last wins).
    let mut go_keys = as_v4("pending-upgrade");
    let object = go_keys.as_object_mut().unwrap();
    let version = object.remove("version").unwrap();
    object.insert("Version".into(), version);
    let mut info = object.remove("info").unwrap();
    let status = info.as_object_mut().unwrap().remove("status").unwrap();
    info.as_object_mut().unwrap().insert("Status".into(), status);
    object.insert("Info".into(), info);
    let go_keys = serde_json::to_vec(&go_keys).unwrap();
    let mut duplicated = serde_json::to_vec(&as_v4("failed")).unwrap();
    duplicated.pop();
    duplicated.extend_from_slice(br#","version":3,"version":4}"#);
    for (text, line_breaks) in [(go_keys, false), (duplicated, true)] {
        run.craft("rb-latest", "rb", v4_labels("superseded"), &text, line_breaks).await;
        assert_eq!(run.guard_history("rb").last().unwrap().0, 4, "Helm reads revision 4");
        // Revision 3 is no longer the latest but it is the only deployed one.
        run.delete_refused("sh.helm.release.v1.rb.v3", "only deployed revision").await;
        run.delete_ok("rb-latest", "rb").await;
    }

    // A second object holding revision 3, superseded: Helm lists both; the release is not
    // orphaned, and deleting the real one is refused while deleting the copy is not.
    let copy = serde_json::to_vec(&{
        let mut release = v3.clone();
        release["info"]["status"] = json!("superseded");
        release
    })
    .unwrap();
    run.craft("rb-copy", "rb", json!({"version": "3", "status": "superseded"}), &copy, false).await;
    run.delete_refused("sh.helm.release.v1.rb.v3", "only deployed revision").await;
    run.delete_ok("rb-copy", "rb").await;

    // Edits Helm never makes are refused.
    let record = "sh.helm.release.v1.rb.v3";
    let mut values_changed = v3.clone();
    values_changed["config"] = json!({"replicaCount": 9});
    let data = payload_data(&values_changed);
    run.patch_refused(record, json!({"data": {"release": data}}), "changes what the revision is").await;
    run.patch_refused(record, json!({"metadata": {"labels": {"status": "superseded"}}}), "`status` label")
        .await;
    let mut superseded = v3.clone();
    superseded["info"]["status"] = json!("superseded");
    let data = payload_data(&superseded);
    run.patch_refused(record, json!({"data": {"release": data}}), "`status` label").await;
    let owner = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-000000000001"});
    run.patch_refused(record, json!({"metadata": {"ownerReferences": [owner]}}), "owner reference").await;
    run.patch_refused(record, json!({"metadata": {"finalizers": ["example.com/keep"]}}), "finalizer").await;

    // The recovery tools' edit is Helm's: a stuck pending revision marked failed, payload and
    // label together (helm set-status); Helm then upgrades past it.
    let pending = serde_json::to_vec(&as_v4("pending-upgrade")).unwrap();
    run.craft("sh.helm.release.v1.rb.v4", "rb", v4_labels("pending-upgrade"), &pending, false).await;
    assert!(helm("helm", &["upgrade", "rb", &chart, "-n", &ns]).unwrap_err().contains("in progress"));
    let data = payload_data(&as_v4("failed"));
    let unlock = json!({"metadata": {"labels": {"status": "failed"}}, "data": {"release": data}});
    run.secrets()
        .patch("sh.helm.release.v1.rb.v4", &PatchParams::default(), &Patch::Merge(&unlock))
        .await
        .unwrap_or_else(|e| panic!("marking a stuck revision failed: {e}"));
    assert_eq!(run.guard_history("rb").last(), Some(&(4, "failed".to_owned())));
    run.settled("rb").await;
    run.helm_ok("helm", &["upgrade", "rb", &chart]);
    run.helm_ok("helm", &["uninstall", "rb"]);
}

/// The crafted-record table of tests/common/crafted.rs, checked against real Helm 3 and Helm 4:
/// each Helm still reads each record as recorded, and `scan` reads what both read alike.
async fn crafted_table_against_real_helm(run: &Run) {
    let cases = common::crafted::cases();
    for case in &cases {
        let mut object = case.secret(&run.ns);
        // Crafted, not Helm's: created as a restore is (POLICY.md C1).
        object["metadata"]["annotations"] = json!({"helm-guard.io/restored-from": "e2e-crafted"});
        let secret: Secret = serde_json::from_value(object).unwrap();
        run.secrets().create(&PostParams::default(), &secret).await.unwrap();
    }
    let mut wrong = Vec::new();
    for case in &cases {
        let reading = |bin| match run.try_helm_history(bin, &case.name) {
            Ok(rows) => Ok(rows.into_iter().next()),
            Err(text) if text.contains("panic") => Err(()),
            Err(text) => panic!("{bin} history {}: {text}", case.name),
        };
        let (helm3, helm4) = (reading("helm3"), reading("helm"));
        let recorded = |r: Option<(i64, &str)>| Ok(r.map(|(v, s)| (v, s.to_owned())));
        let crashed = Err(());
        if case.crashes {
            if helm3 != crashed || helm4 != crashed {
                wrong.push(format!("{}: Helm no longer crashes: {helm3:?} {helm4:?}", case.name));
            }
        } else if helm3 != recorded(case.helm3) || helm4 != recorded(case.helm4) {
            wrong.push(format!(
                "{}: Helm 3 {helm3:?}, Helm 4 {helm4:?}; recorded {:?} {:?}",
                case.name, case.helm3, case.helm4
            ));
        }
        let guard = run.guard_history(&case.name);
        let expected: Vec<(i64, String)> = case
            .expected()
            .map(|(v, s)| {
                (v, if s.parse::<helm_guard::release::Status>().is_ok() { s } else { "unknown" }.to_owned())
            })
            .into_iter()
            .collect();
        if guard != expected {
            wrong.push(format!("{}: scan {guard:?}, expected {expected:?}", case.name));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for case in &cases {
        let name = format!("sh.helm.release.v1.{}.v1", case.name);
        run.secrets().delete(&name, &DeleteParams::default()).await.unwrap();
    }
}
