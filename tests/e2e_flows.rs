//! Random flows, differential, on a real API server: one random, seeded sequence of real Helm 3
//! or Helm 4 operations (tests/common/flows.rs) is applied to two namespaces, one behind two
//! `helm-guard serve` replicas agreeing through Leases (each review goes to one of them, chosen by
//! the record's revision and the operation), one without any webhook. The test fails on the first operation whose exit
//! status or following `helm history` differs between the two; a hand deletion must be refused
//! exactly when the rules refuse it on what is stored.
//!
//! Needs `helm3`, `helm`, `kubectl` on PATH and the cluster in KUBECONFIG (as
//! `../shared/tools/kube-local up` provides them):
//! `cargo test --test e2e_flows -- --ignored`; `HELM_FLOWS_SEED=N` reruns one seed,
//! `HELM_FLOWS_STEPS` sets the length, `HELM_DRIVER` the storage driver (default: by seed).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cluster::kubectl_apply;
use common::flows::{HelmOp, deletion_allowed, random_op, seeds};
use helm_guard::release::Status;
use serde_json::{Value, json};

const RELEASES: [&str; 2] = ["app", "web"];
/// The first port the replicas listen on; each `Twins` takes the next two (the tests of this file
/// run at once).
static NEXT_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(9471);

/// A `helm-guard serve` replica; killed when dropped.
struct Replica(Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_replica(
    name: &str,
    port: u16,
    certs: &std::path::Path,
    lease_namespace: &str,
    coordination: &str,
) -> Replica {
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--metrics-listen", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(certs.join("tls.crt"))
        .arg("--tls-key")
        .arg(certs.join("tls.key"))
        .args(["--lease-namespace", lease_namespace, "--replica-id", name, "--shutdown-delay", "0s"])
        .args(["--coordination", coordination])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    let mut said = Vec::new();
    let serving = lines.by_ref().any(|line| {
        let serving = serde_json::from_str::<Value>(&line).is_ok_and(|event| event["message"] == "serving");
        said.push(line);
        serving
    });
    assert!(serving, "replica {name} on port {port} did not start:\n{}", said.join("\n"));
    std::thread::spawn(move || lines.for_each(drop));
    Replica(child)
}

fn run(program: &str, args: &[&str], namespace: &str, driver: &str) -> Output {
    Command::new(program).args(args).args(["-n", namespace]).env("HELM_DRIVER", driver).output().unwrap()
}

/// The shipped validating webhooks, split between the replicas on `ports` (with one, not split),
/// scoped to the guarded namespace.
fn register(guarded: &str, ca_pem: &str, ports: &[u16]) {
    let urls: Vec<String> = ports.iter().map(|port| format!("https://127.0.0.1:{port}")).collect();
    for configuration in common::cluster::webhook_configurations(guarded, &urls, ca_pem)
        .into_iter()
        .filter(|c| c["kind"] == "ValidatingWebhookConfiguration")
    {
        kubectl_apply(&configuration);
    }
}

/// One namespace's view: what `helm history` lists, as (revision, status).
fn history(helm: &str, release: &str, namespace: &str, driver: &str) -> Vec<(u32, Status)> {
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

/// What every test here starts from: a chart (`helm create`) and a serving certificate for the
/// replicas, in a directory removed when dropped.
struct Bench {
    _dir: tempfile::TempDir,
    chart: String,
    certs: std::path::PathBuf,
    ca_pem: String,
}

impl Bench {
    fn new() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let chart = dir.path().join("demo").to_str().unwrap().to_owned();
        assert!(Command::new("helm").args(["create", &chart]).output().unwrap().status.success());
        let certs = dir.path().join("certs");
        let names = ["127.0.0.1".to_owned(), "localhost".to_owned()];
        let bundle = helm_guard::server::certs::generate(&names, 1).unwrap();
        helm_guard::server::certs::write(&bundle, &certs).unwrap();
        Bench { _dir: dir, chart, certs, ca_pem: bundle.ca_pem }
    }

    fn twins(&self, coordination: &str) -> Twins {
        Twins::new(&self.certs, &self.ca_pem, &self.chart, coordination)
    }
}

/// Two namespaces: the first behind the guard (two replicas agreeing through Leases, or one with
/// `--coordination none`), the second a twin without any webhook. Dropped, it removes the webhook
/// configuration, the replicas and both namespaces.
struct Twins {
    namespaces: [String; 2],
    replicas: Vec<Replica>,
}

impl Twins {
    fn new(certs: &std::path::Path, ca_pem: &str, chart: &str, coordination: &str) -> Twins {
        let suffix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            % 1_000_000;
        let namespaces = [format!("flows-guarded-{suffix}"), format!("flows-twin-{suffix}")];
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespaces[0], "labels": {"helm-guard-e2e": namespaces[0]}}}));
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespaces[1]}}));
        let names: &[&str] = if coordination == "none" { &["a"] } else { &["a", "b"] };
        let first = NEXT_PORT.fetch_add(2, std::sync::atomic::Ordering::SeqCst);
        let ports = [first, first + 1];
        let replicas = names
            .iter()
            .zip(ports)
            .map(|(name, port)| start_replica(name, port, certs, &namespaces[0], coordination))
            .collect();
        std::thread::sleep(Duration::from_secs(2)); // the replicas' first lists
        register(&namespaces[0], ca_pem, &ports[..names.len()]);
        probe(&namespaces[0], chart);
        Twins { namespaces, replicas }
    }
}

impl Drop for Twins {
    fn drop(&mut self) {
        let configuration = format!("helm-guard-e2e-{}", self.namespaces[0]);
        let _ = Command::new("kubectl")
            .args(["delete", "validatingwebhookconfiguration", &configuration])
            .output();
        self.replicas.clear();
        for ns in &self.namespaces {
            let _ = Command::new("kubectl").args(["delete", "ns", ns, "--wait=false"]).output();
        }
    }
}

/// Waits until the guard is in the way: the latest deployed record of a release cannot be
/// deleted by hand (the webhook configuration takes a moment to reach the API server).
fn probe(namespace: &str, chart: &str) {
    assert!(run("helm", &["install", "probe", chart], namespace, "secret").status.success());
    let started = Instant::now();
    loop {
        let dry = run(
            "kubectl",
            &["delete", "secret", "sh.helm.release.v1.probe.v1", "--dry-run=server"],
            namespace,
            "secret",
        );
        if !dry.status.success()
            && String::from_utf8_lossy(&dry.stderr).contains("is the latest, deployed revision")
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the guard never refused: {}",
            String::from_utf8_lossy(&dry.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(run("helm", &["uninstall", "probe"], namespace, "secret").status.success());
}

struct Flow {
    helm: &'static str,
    driver: String,
    chart: String,
    namespaces: [String; 2],
    rng: fastrand::Rng,
    log: Vec<String>,
    seed: u64,
}

impl Flow {
    fn fail(&self, what: &str) -> ! {
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
                let output = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
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

    fn step(&mut self, op: &HelmOp) {
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

#[test]
#[ignore = "needs a real API server, helm3, helm and kubectl: cargo test --test e2e_flows -- --ignored"]
fn random_helm_flows_behind_the_guard_match_an_unguarded_twin() {
    let steps: usize = std::env::var("HELM_FLOWS_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let bench = Bench::new();
    for seed in seeds(1, 2) {
        let coordination = std::env::var("HELM_FLOWS_COORDINATION")
            .unwrap_or_else(|_| if (seed / 2) % 2 == 1 { "none" } else { "lease" }.into());
        let twins = bench.twins(&coordination);
        let mut rng = fastrand::Rng::with_seed(seed);
        let driver = std::env::var("HELM_DRIVER")
            .unwrap_or_else(|_| if seed % 2 == 0 { "configmap" } else { "secret" }.into());
        let helm = if rng.bool() { "helm" } else { "helm3" };
        let mut flow = Flow {
            helm,
            driver,
            chart: bench.chart.clone(),
            namespaces: twins.namespaces.clone(),
            rng,
            log: Vec::new(),
            seed,
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for _ in 0..steps {
                let op = random_op(&mut flow.rng, RELEASES.len());
                flow.step(&op);
            }
        }));
        drop(twins);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
        eprintln!(
            "seed {seed}: {steps} steps agree ({}, HELM_DRIVER={}, --coordination {coordination})",
            flow.helm, flow.driver
        );
    }
}

/// What the guard adds to `helm uninstall` of a release of 10 revisions (its purge: one UPDATE,
/// ten DELETEs), behind two replicas agreeing through Leases, against the unguarded twin: the
/// medians of `HELM_FLOWS_ROUNDS` (default 7) rounds, the order of the two alternating. Printed,
/// not asserted (BENCHMARKS.md records the runs); run it on a release build.
#[test]
#[ignore = "a measurement on a real API server: cargo test --release --test e2e_flows -- --ignored uninstall --nocapture"]
fn uninstall_of_ten_revisions_behind_the_guard_and_without() {
    let rounds: usize = std::env::var("HELM_FLOWS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let bench = Bench::new();
    let chart = bench.chart.as_str();
    let twins = bench.twins("lease");
    let mut took: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let release = format!("u{round}");
        for ns in &twins.namespaces {
            assert!(run("helm", &["install", &release, chart], ns, "secret").status.success());
            for n in 2..=10 {
                let value = format!("replicaCount={n}");
                assert!(
                    run("helm", &["upgrade", &release, chart, "--set", &value], ns, "secret")
                        .status
                        .success()
                );
            }
        }
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let started = Instant::now();
            let output = run("helm", &["uninstall", &release], &twins.namespaces[i], "secret");
            took[i].push(started.elapsed());
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        }
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (guarded, twin) = (median(&mut took[0].clone()), median(&mut took[1].clone()));
    eprintln!(
        "helm uninstall of 10 revisions, {rounds} rounds: behind the guard {took0:?}, without {took1:?}; \
         medians {guarded:?} and {twin:?}: {:.3}x",
        guarded.as_secs_f64() / twin.as_secs_f64(),
        took0 = took[0],
        took1 = took[1],
    );
}
