//! One random Helm flow applied to two namespaces, one behind the guard and one without it: the
//! differential check of the end-to-end suites (tests/e2e_flows.rs with replicas started by the
//! test, tests/e2e_deployed.rs with the chart's pods as containers). The first step whose exit
//! status or following `helm history` differs between the two fails the test with the seed and
//! every step so far; a hand deletion must be refused exactly when the rules refuse it on what is
//! stored. Helm's other writers (tests/common/writers.rs) write among Helm's flows as their own
//! identities: the suites bind them with `writers::bind`.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::flows::{HelmOp, deletion_allowed};
use super::writers;
use helm_guard::release::Status;
use serde_json::Value;

/// The releases a flow works on.
pub const RELEASES: [&str; 2] = ["app", "web"];

/// `program args -n namespace` with `HELM_DRIVER=driver`.
pub fn run(program: &str, args: &[&str], namespace: &str, driver: &str) -> Output {
    Command::new(program).args(args).args(["-n", namespace]).env("HELM_DRIVER", driver).output().unwrap()
}

/// One namespace's view: what `helm history` lists, as (revision, status).
pub fn history(helm: &str, release: &str, namespace: &str, driver: &str) -> Vec<(u32, Status)> {
    let output = run(helm, &["history", release, "-o", "json", "--max", "1000"], namespace, driver);
    if !output.status.success() {
        return Vec::new();
    }
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap_or_default();
    rows.iter()
        .map(|row| {
            (row["revision"].as_u64().unwrap() as u32, row["status"].as_str().unwrap().parse().unwrap())
        })
        .collect()
}

/// A random flow under way: which Helm, which driver, the chart, the guarded namespace and its
/// unguarded twin, the random source and the steps so far.
pub struct Flow {
    pub helm: &'static str,
    pub driver: String,
    pub chart: String,
    pub namespaces: [String; 2],
    pub rng: fastrand::Rng,
    pub log: Vec<String>,
    pub seed: u64,
}

impl Flow {
    pub fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {} ({}, HELM_DRIVER={}; HELM_FLOWS_SEED={} to rerun): {what}\nsteps:\n{}",
            self.seed,
            self.helm,
            self.driver,
            self.seed,
            self.log.join("\n")
        );
    }

    /// The `helm` arguments of a step (the same for both namespaces), or `None` when it is no
    /// single Helm command.
    fn helm_args(&mut self, op: &HelmOp) -> Option<Vec<String>> {
        let wait_fail = |fail: bool| {
            if fail { vec!["--wait".to_owned(), "--timeout".into(), "2s".into()] } else { vec![] }
        };
        let value = format!("replicaCount={}", self.rng.u8(1..9));
        let s = |v: &[&str]| v.iter().map(|a| (*a).to_owned()).collect::<Vec<String>>();
        Some(match *op {
            HelmOp::Install { release, replace, fail } => {
                let mut args = s(&["install", RELEASES[release], &self.chart, "--set", &value]);
                if replace {
                    args.push("--replace".into());
                }
                args.extend(wait_fail(fail));
                args
            }
            HelmOp::Upgrade { release, install, fail, atomic, history_max } => {
                let mut args = s(&["upgrade", RELEASES[release], &self.chart, "--set", &value]);
                if install {
                    args.push("--install".into());
                }
                if let Some(max) = history_max {
                    args.extend(s(&["--history-max", &max.to_string()]));
                }
                if atomic {
                    args.push(if self.helm == "helm" { "--rollback-on-failure" } else { "--atomic" }.into());
                }
                args.extend(wait_fail(fail));
                args
            }
            HelmOp::Rollback { release, pick, fail } => {
                let history = history(self.helm, RELEASES[release], &self.namespaces[1], &self.driver);
                // No history: `helm rollback R 1`, which both namespaces refuse alike.
                let revision = history.get(pick % history.len().max(1)).map_or(1, |(revision, _)| *revision);
                let mut args = s(&["rollback", RELEASES[release], &revision.to_string()]);
                args.extend(wait_fail(fail));
                args
            }
            HelmOp::Uninstall { release, keep_history } => {
                let mut args = s(&["uninstall", RELEASES[release]]);
                if keep_history {
                    args.push("--keep-history".into());
                }
                args
            }
            _ => return None,
        })
    }

    fn records_kind(&self) -> &'static str {
        if self.driver == "configmap" { "configmap" } else { "secret" }
    }

    /// Runs a step in one namespace: (succeeded, what it printed).
    fn apply(&self, op: &HelmOp, args: &Option<Vec<String>>, namespace: &str) -> (bool, String) {
        let outcome = |output: Output| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            (output.status.success(), text.trim().to_owned())
        };
        if let Some(args) = args {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            return outcome(run(self.helm, &args, namespace, &self.driver));
        }
        match *op {
            HelmOp::Reinstall { release } => {
                let (ok, text) =
                    outcome(run(self.helm, &["uninstall", RELEASES[release]], namespace, &self.driver));
                if !ok {
                    return (false, text);
                }
                outcome(run(self.helm, &["install", RELEASES[release], &self.chart], namespace, &self.driver))
            }
            HelmOp::KilledUpgrade { release } => self.killed_upgrade(RELEASES[release], namespace),
            HelmOp::FleetForget { release } => {
                writers::fleet_forget(writers::FLEET_AGENT, self.records_kind(), RELEASES[release], namespace)
            }
            HelmOp::FleetFailedRollback { release } => {
                writers::fleet_failed_rollback(self.records_kind(), RELEASES[release], namespace)
            }
            HelmOp::FluxUnlock { release } => {
                writers::flux_unlock(self.records_kind(), RELEASES[release], namespace)
            }
            HelmOp::MapKubeApis { release } => {
                writers::map_kube_apis(self.records_kind(), RELEASES[release], namespace)
            }
            HelmOp::Repair { release, delete } => {
                let history = history(self.helm, RELEASES[release], namespace, &self.driver);
                let Some(&(revision, status)) = history.last() else { return (true, String::new()) };
                if !status.is_pending() {
                    return (true, String::new());
                }
                let previous = history.iter().rev().nth(1).map(|(_, status)| *status);
                if delete && matches!(previous, None | Some(Status::Deployed)) {
                    let name = format!("sh.helm.release.v1.{}.v{revision}", RELEASES[release]);
                    return outcome(run(
                        "kubectl",
                        &["delete", self.records_kind(), &name],
                        namespace,
                        &self.driver,
                    ));
                }
                // helm-set-status's edit, as `helm-guard repair` makes it.
                let driver = self.driver.clone();
                let output = Command::new(super::guard_binary())
                    .args(["repair", RELEASES[release], "-n", namespace, "--apply", "--stuck-after", "0s"])
                    .env("HELM_DRIVER", driver)
                    .output()
                    .unwrap();
                outcome(output)
            }
            _ => unreachable!("a Helm command"),
        }
    }

    /// `helm upgrade` killed once it has stored its pending revision (an upgrade Helm refuses
    /// before that ends by itself, alike in both namespaces).
    fn killed_upgrade(&self, release: &str, namespace: &str) -> (bool, String) {
        let before = history(self.helm, release, namespace, &self.driver);
        if before.last().is_some_and(|(_, status)| status.is_pending()) {
            return (false, "another operation is in progress".into());
        }
        let mut child = Command::new(self.helm)
            .args(["upgrade", release, &self.chart, "--wait", "--timeout", "60s", "-n", namespace])
            .env("HELM_DRIVER", &self.driver)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let pending = loop {
            let now = history(self.helm, release, namespace, &self.driver);
            if now.last().is_some_and(|(_, status)| *status == Status::PendingUpgrade) {
                break true;
            }
            if started.elapsed() > Duration::from_secs(20) || child.try_wait().unwrap().is_some() {
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = child.kill();
        let _ = child.wait();
        (pending, if pending { "killed while pending-upgrade".into() } else { "never pending".into() })
    }

    /// Applies one step to both namespaces and fails the test where they differ.
    pub fn step(&mut self, op: &HelmOp) {
        let release = RELEASES[op.release()];
        if let HelmOp::HandDelete { pick, .. } = *op {
            return self.hand_delete(release, pick);
        }
        let args = self.helm_args(op);
        self.log.push(format!("{op:?} -> {}", args.as_ref().map(|a| a.join(" ")).unwrap_or_default()));
        let [guarded, twin] = [&self.namespaces[0], &self.namespaces[1]].map(|ns| self.apply(op, &args, ns));
        let [seen, expected] = [&self.namespaces[0], &self.namespaces[1]]
            .map(|ns| history(self.helm, release, ns, &self.driver));
        if guarded.0 != twin.0 || seen != expected {
            self.fail(&format!(
                "behind the guard: {} ({}) history {seen:?}; without it: {} ({}) history {expected:?}",
                guarded.0, guarded.1, twin.0, twin.1
            ));
        }
    }

    fn hand_delete(&mut self, release: &str, pick: usize) {
        let history = history(self.helm, release, &self.namespaces[0], &self.driver);
        let Some(&(revision, _)) = history.get(pick % history.len().max(1)) else { return };
        let named: Vec<(u32, Status, String)> = history.iter().map(|&(r, s)| (r, s, String::new())).collect();
        let expected = deletion_allowed(&named, revision);
        let name = format!("sh.helm.release.v1.{release}.v{revision}");
        self.log
            .push(format!("kubectl delete {name} (rules: {})", if expected { "allow" } else { "refuse" }));
        let output =
            run("kubectl", &["delete", self.records_kind(), &name], &self.namespaces[0], &self.driver);
        if output.status.success() != expected {
            self.fail(&format!(
                "deleting v{revision} of {history:?} by hand: the rules say {}, kubectl said: {}",
                if expected { "allow" } else { "refuse" },
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        if expected {
            let output =
                run("kubectl", &["delete", self.records_kind(), &name], &self.namespaces[1], &self.driver);
            assert!(output.status.success(), "the twin: {}", String::from_utf8_lossy(&output.stderr));
        }
    }
}
