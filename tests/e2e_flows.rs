//! Random flows, differential, on a real API server: one random, seeded sequence of real Helm 3
//! or Helm 4 operations (tests/common/flows.rs) is applied to two namespaces, one behind two
//! `helm-guard serve` replicas agreeing through Leases (each review goes to one of them, chosen by
//! the record's revision and the operation), one without any webhook. The test fails on the first operation whose exit
//! status or following `helm history` differs between the two; a hand deletion must be refused
//! exactly when the rules refuse it on what is stored.
//!
//! Needs `helm3`, `helm`, `kubectl` on PATH and the cluster in KUBECONFIG (as
//! `../shared/tools/kube-local up` provides them):
//! `cargo test --test e2e_suites e2e_flows:: -- --ignored`; `HELM_FLOWS_SEED=N` reruns one seed,
//! `HELM_FLOWS_STEPS` sets the length, `HELM_DRIVER` the storage driver (default: by seed).

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::kubectl_apply;
use common::flows::{random_op, seeds};
use common::helm_twins::{Flow, RELEASES, run};
use serde_json::{Value, json};
/// The first port the replicas listen on; each `Twins` takes the next two (the tests of this file
/// run at once).
static NEXT_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(9471);

/// A `helm-guard serve` replica (and where it serves `/metrics`); killed when dropped.
struct Replica(Child, Option<String>);

impl Replica {
    /// A counter of the replica's `/metrics` (`helm_guard_<name>_total`).
    fn counter(&self, name: &str) -> u64 {
        let Some(addr) = &self.1 else { return 0 };
        let done = Command::new("curl").args(["-sf", &format!("http://{addr}/metrics")]).output().unwrap();
        let text = String::from_utf8(done.stdout).unwrap();
        let name = format!("helm_guard_{name}_total ");
        text.lines().find_map(|line| line.strip_prefix(&name)?.trim().parse().ok()).unwrap_or(0)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_replica(name: &str, port: u16, certs: &std::path::Path, lease_namespace: &str) -> Replica {
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--metrics-listen", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(certs.join("tls.crt"))
        .arg("--tls-key")
        .arg(certs.join("tls.key"))
        .args(["--guard-namespace", lease_namespace, "--replica-id", name, "--shutdown-delay", "0s"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    let mut said = Vec::new();
    let serving = lines.by_ref().find_map(|line| {
        let event = serde_json::from_str::<Value>(&line).ok();
        said.push(line);
        let event = event.filter(|event| event["message"] == "serving")?;
        Some(event["metrics_addr"].as_str().map(str::to_owned))
    });
    let Some(metrics) = serving else {
        panic!("replica {name} on port {port} did not start:\n{}", said.join("\n"))
    };
    std::thread::spawn(move || lines.for_each(drop));
    Replica(child, metrics)
}

/// `examples/floor.rs` (a webhook that only parses the review and allows) on `port`: the cost of
/// any webhook at all, for the uninstall measurement's third column. Built with the tests' own
/// profile (`cargo build --release --example floor` first).
fn start_floor(port: u16, certs: &std::path::Path) -> Replica {
    let guard = std::path::Path::new(env!("CARGO_BIN_EXE_helm-guard"));
    let floor = guard.with_file_name("examples").join("floor");
    let mut child = Command::new(&floor)
        .arg(certs.join("tls.crt"))
        .arg(certs.join("tls.key"))
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} (cargo build --release --example floor): {e}", floor.display()));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    assert!(lines.any(|line| line.contains("allow-all floor")), "the floor did not start");
    Replica(child, None)
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
        let bundle = helm_guard::certs::generate(&names, 1).unwrap();
        helm_guard::certs::write(&bundle, &certs).unwrap();
        Bench { _dir: dir, chart, certs, ca_pem: bundle.ca_pem }
    }

    /// `guard`: `one` or `two` replicas, or `floor` (the allow-all webhook).
    fn twins(&self, guard: &str) -> Twins {
        Twins::new(&self.certs, &self.ca_pem, &self.chart, guard)
    }
}

/// Two namespaces: the first behind the guard (two replicas agreeing through their claim books, or
/// one), the second a twin without any webhook. Dropped, it removes the webhook
/// configuration, the replicas and both namespaces.
struct Twins {
    namespaces: [String; 2],
    replicas: Vec<Replica>,
}

impl Twins {
    fn new(certs: &std::path::Path, ca_pem: &str, chart: &str, coordination: &str) -> Twins {
        // The tests of this file run at once: the port counter keeps their namespaces apart.
        let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
        let first = NEXT_PORT.fetch_add(2, std::sync::atomic::Ordering::SeqCst);
        let suffix = format!("{}-{first}", millis % 1_000_000);
        let namespaces = [format!("flows-guarded-{suffix}"), format!("flows-twin-{suffix}")];
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespaces[0], "labels": {"helm-guard-e2e": namespaces[0]}}}));
        kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespaces[1]}}));
        common::writers::bind();
        let names: &[&str] = if matches!(coordination, "one" | "floor") { &["a"] } else { &["a", "b"] };
        let ports = [first, first + 1];
        if coordination == "floor" {
            let floor = start_floor(first, certs);
            register(&namespaces[0], ca_pem, &ports[..1]);
            // The floor refuses nothing to probe with: the configuration's propagation, waited out.
            std::thread::sleep(Duration::from_secs(5));
            return Twins { namespaces, replicas: vec![floor] };
        }
        let replicas = names
            .iter()
            .zip(ports)
            .map(|(name, port)| start_replica(name, port, certs, &namespaces[0]))
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
    let installed = run("helm", &["install", "probe", chart], namespace, "secret");
    assert!(installed.status.success(), "{}", String::from_utf8_lossy(&installed.stderr));
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

#[test]
#[ignore = "needs a real API server, helm3, helm and kubectl: cargo test --test e2e_suites e2e_flows:: -- --ignored"]
fn random_helm_flows_behind_the_guard_match_an_unguarded_twin() {
    let steps: usize = std::env::var("HELM_FLOWS_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let bench = Bench::new();
    for seed in seeds(1, 2) {
        let coordination = std::env::var("HELM_FLOWS_REPLICAS")
            .unwrap_or_else(|_| ["two", "one"][(seed % 2) as usize].into());
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
            "seed {seed}: {steps} steps agree ({}, HELM_DRIVER={}, {coordination} replica(s))",
            flow.helm, flow.driver
        );
    }
}

/// What the guard adds to `helm uninstall` of a release of 10 revisions (its purge: one UPDATE,
/// ten DELETEs), three ways in one run: behind two replicas agreeing through their claim books,
/// behind `examples/floor.rs` (parses, allows: the cost of any validating webhook), and with no
/// webhook; the medians of `HELM_FLOWS_ROUNDS` (default 7) rounds, the order of the three rotating.
/// Printed, not asserted (BENCHMARKS.md records the runs); run it on a release build. The chart
/// deploys no pods: on a cluster with a node (`kube-local node`), 30 pods started and torn down
/// around each uninstall load the machine the API server shares and hide the records' cost.
#[test]
#[ignore = "a measurement on a real API server: cargo test --release --test e2e_suites e2e_flows::uninstall -- --ignored --nocapture"]
fn uninstall_of_ten_revisions_behind_the_guard_the_floor_and_nothing() {
    let rounds: usize = std::env::var("HELM_FLOWS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let bench = Bench::new();
    let chart = bench.chart.as_str();
    for pods in ["deployment.yaml", "hpa.yaml", "tests/test-connection.yaml"] {
        std::fs::remove_file(format!("{chart}/templates/{pods}")).unwrap();
    }
    // Each upgrade's `replicaCount` still changes what the release holds.
    std::fs::write(
        format!("{chart}/templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n\
         data:\n  replicas: {{ .Values.replicaCount | quote }}\n",
    )
    .unwrap();
    let (guard, floor) = (bench.twins("two"), bench.twins("floor"));
    let ways = [
        ("helm-guard (two replicas)", &guard.namespaces[0]),
        ("the floor", &floor.namespaces[0]),
        ("no webhook", &guard.namespaces[1]),
    ];
    let mut took: [Vec<Duration>; 3] = Default::default();
    // What the guarded uninstalls waited on: fence rounds and listings (setting up writes no
    // DELETE, so none of them is set up's).
    let confirmations =
        |counter: &str| guard.replicas.iter().map(|replica| replica.counter(counter)).sum::<u64>();
    let before = (confirmations("fence_rounds"), confirmations("confirmed_by_listing"));
    for round in 0..rounds {
        let release = format!("u{round}");
        for (_, ns) in &ways {
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
        for i in (0..3).map(|i| (i + round) % 3) {
            let started = Instant::now();
            let output = run("helm", &["uninstall", &release], ways[i].1, "secret");
            took[i].push(started.elapsed());
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        }
    }
    let medians: Vec<Duration> = took
        .iter()
        .map(|times| {
            let mut times = times.clone();
            times.sort();
            times[times.len() / 2]
        })
        .collect();
    let ratio = |a: usize, b: usize| medians[a].as_secs_f64() / medians[b].as_secs_f64();
    for (i, (way, _)) in ways.iter().enumerate() {
        eprintln!("helm uninstall of 10 revisions behind {way}: median {:?} of {:?}", medians[i], took[i]);
    }
    eprintln!(
        "{rounds} rounds: the guard {:.3}x of no webhook, the floor {:.3}x, the guard {:.3}x of the floor",
        ratio(0, 2),
        ratio(1, 2),
        ratio(0, 1)
    );
    let (rounds_written, listings) =
        (confirmations("fence_rounds") - before.0, confirmations("confirmed_by_listing") - before.1);
    eprintln!(
        "the guarded uninstalls (one UPDATE, ten DELETEs each) waited on {:.1} fence rounds and {:.1} listings each",
        rounds_written as f64 / rounds as f64,
        listings as f64 / rounds as f64
    );
}

/// A fleet upgrading at once: `BURST_RELEASES` (default 200) releases of three revisions each,
/// then every one upgraded with `--history-max 2` at the same time (`BURST_PARALLEL` Helm
/// processes at once, default 20), so that each upgrade prunes its oldest record through the
/// guard (two replicas), beside the unguarded twin doing the same: every
/// upgrade that passes unguarded passes guarded, `BURST_RUNS` times (default 1). The upgrades'
/// durations are printed (BENCHMARKS.md). Run it on a release build.
#[test]
#[ignore = "a burst on a real API server: cargo test --release --test e2e_suites e2e_flows::a_burst -- --ignored --nocapture"]
fn a_burst_of_pruning_upgrades_passes_as_it_does_unguarded() {
    let var =
        |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (releases, parallel, runs) =
        (var("BURST_RELEASES", 200), var("BURST_PARALLEL", 20), var("BURST_RUNS", 1));
    let bench = Bench::new();
    let chart = bench.chart.clone();
    // Without its Service: a fleet of 200 twice over needs 400 ClusterIPs, more than a /24
    // service range (kube-local's) holds, and pruning does not care what the chart deploys.
    std::fs::remove_file(format!("{chart}/templates/service.yaml")).unwrap();
    // `helm` in `namespace` for each release at once, `parallel` at a time: (succeeded, seconds).
    let fleet = |namespace: &str, args: &[&str]| -> Vec<(bool, f64)> {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..parallel {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if i >= releases {
                            break;
                        }
                        let release = format!("b{i:03}");
                        let started = Instant::now();
                        let mut argv: Vec<&str> = args.to_vec();
                        argv.insert(1, &release);
                        let output = run("helm", &argv, namespace, "secret");
                        if !output.status.success() {
                            eprintln!(
                                "{namespace}/{release}: {}",
                                String::from_utf8_lossy(&output.stderr).trim()
                            );
                        }
                        done.lock().unwrap().push((output.status.success(), started.elapsed().as_secs_f64()));
                    }
                });
            }
        });
        done.into_inner().unwrap()
    };
    for round in 0..runs {
        let twins = bench.twins("two");
        for ns in &twins.namespaces {
            assert!(fleet(ns, &["install", &chart]).iter().all(|(ok, _)| *ok), "installs in {ns}");
            for n in 2..=3 {
                let value = format!("replicaCount={n}");
                assert!(
                    fleet(ns, &["upgrade", &chart, "--set", &value]).iter().all(|(ok, _)| *ok),
                    "upgrades in {ns}"
                );
            }
        }
        let mut outcomes = Vec::new();
        for ns in &twins.namespaces {
            outcomes.push(fleet(ns, &["upgrade", &chart, "--set", "replicaCount=4", "--history-max", "2"]));
        }
        let summary = |outcome: &Vec<(bool, f64)>| {
            let mut took: Vec<f64> = outcome.iter().map(|(_, s)| *s).collect();
            took.sort_by(f64::total_cmp);
            let failed = outcome.iter().filter(|(ok, _)| !ok).count();
            (failed, took[took.len() / 2], took[took.len() * 99 / 100])
        };
        let (guarded, twin) = (summary(&outcomes[0]), summary(&outcomes[1]));
        eprintln!(
            "burst {round}: {releases} pruning upgrades, {parallel} at once: behind the guard {} failed, p50 {:.2} s, p99 {:.2} s; \
             without it {} failed, p50 {:.2} s, p99 {:.2} s",
            guarded.0, guarded.1, guarded.2, twin.0, twin.1, twin.2
        );
        assert_eq!(guarded.0, twin.0, "every upgrade that passes unguarded passes behind the guard");
        for ns in &twins.namespaces {
            let left = run("kubectl", &["get", "secrets", "-l", "owner=helm", "-o", "name"], ns, "secret");
            let records = String::from_utf8_lossy(&left.stdout).lines().count();
            assert_eq!(records, releases * 2, "{ns}: two revisions of each release left");
        }
    }
}
