//! The chart as deployed, on a real node (`kube-local node`: kubelet, containerd, scheduler,
//! EndpointSlices): real Helm installs `charts/helm-guard` with the image `image/build.sh` makes,
//! its pods run and become ready, and the guard registers its own webhooks. Then real Helm 3 and 4
//! run random flows beside an unguarded twin namespace while a pod is killed, the Deployment is
//! rolled, the CA is rotated in the Secret (the kubelet swaps the mounted files), the chart is
//! upgraded from the previous version of helm-guard and with the K3s example's values;
//! `helm-guard check` says the guard works, and says why not with its webhooks deleted or its CA
//! wrong, and passes after README's install word for word (audit, then enforce); `helm uninstall`
//! leaves no webhook; with its Service on a port the pod does not serve, it blocks nothing and
//! `check` says why. And Helm itself in a pod on the node (an image of the Helm binary and a
//! chart, built with podman and loaded with `$HELM_GUARD_E2E_KUBE_LOCAL load`), killed mid
//! upgrade, beside an in-process guard: stuck by its writer's pod (issue 58). And K3s's
//! helm-install Jobs as real pods (`e2e_jobs.rs`): unguarded the seed's crash loop, guarded a
//! first pod that upgrades.
//!
//! Needs the real API server with a node (`kube-local up`, `kube-local node`), the images loaded
//! into it (`image/build.sh && kube-local load helm-guard:0.1.0`; for the upgrade, the previous
//! version's image as `helm-guard:prev`, built by `image/build.sh helm-guard:prev` in a checkout
//! of HELM_GUARD_E2E_PREVIOUS, default the commit before the guard registered its own webhooks):
//! `cargo test --test e2e_deployed -- --ignored --test-threads 1`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;
#[path = "e2e_jobs.rs"]
mod jobs;

use std::process::Output;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::cluster::{kubectl_apply, kubectl_json, run, said};
use common::flows::{random_op, seeds};
use common::helm_twins::{Flow, RELEASES};
use serde_json::{Value, json};

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/helm-guard");
/// The commit of the previous version: the last one whose chart rendered the webhooks itself.
const PREVIOUS: &str = "bed8d7c";

/// `helm-guard check` of the guard `name` in `namespace`.
fn check(namespace: &str, name: &str) -> Output {
    let bin = env!("CARGO_BIN_EXE_helm-guard");
    run(&[bin, "check", "--guard-namespace", namespace, "--name", name])
}

/// Waits until `helm-guard check` passes (the webhooks registered, a refusal refused).
fn until_checked(namespace: &str, name: &str) -> String {
    until_passes(&["check", "--guard-namespace", namespace, "--name", name])
}

/// Waits until `helm-guard ARGS` passes (at most 90 s).
fn until_passes(args: &[&str]) -> String {
    let started = Instant::now();
    loop {
        let done = run(&[&[env!("CARGO_BIN_EXE_helm-guard")][..], args].concat());
        if done.status.success() {
            return said(&done);
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "helm-guard check never passed: {}",
            said(&done)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The chart installed by real Helm, its pods running on the node.
struct Deployed {
    helm: &'static str,
    release: String,
    namespace: String,
    name: String,
}

impl Deployed {
    /// `helm install --wait` of `chart` with `args` (`--set`, `-f`).
    fn install(helm: &'static str, release: &str, chart: &str, args: &[&str]) -> Deployed {
        let namespace = format!("{release}-{}", std::process::id());
        let mut command = vec![helm, "install", release, chart, "-n", &namespace, "--create-namespace"];
        command.extend(["--wait", "--timeout", "3m"]);
        command.extend(args);
        let done = run(&command);
        let deployed =
            Deployed { helm, release: release.to_owned(), name: format!("{release}-helm-guard"), namespace };
        assert!(
            done.status.success(),
            "{helm} install (is the image loaded? image/build.sh && kube-local load helm-guard:0.1.0): {}\n{}",
            said(&done),
            said(&run(&["kubectl", "get", "pods", "-n", &deployed.namespace, "-o", "wide"]))
        );
        deployed
    }

    /// `helm upgrade --wait` to `chart` with `args`.
    fn upgrade(&self, chart: &str, args: &[&str]) -> Output {
        let mut command = vec![self.helm, "upgrade", &self.release, chart, "-n", &self.namespace];
        command.extend(["--wait", "--timeout", "3m"]);
        command.extend(args);
        run(&command)
    }

    fn pods(&self) -> Vec<String> {
        let selector = format!("app.kubernetes.io/instance={}", self.release);
        let pods = kubectl_json(&["get", "pods", "-n", &self.namespace, "-l", &selector]);
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// `helm uninstall` of the chart: it completes and leaves no webhook.
    fn uninstall(&self) {
        let done = run(&[
            self.helm,
            "uninstall",
            &self.release,
            "-n",
            &self.namespace,
            "--wait",
            "--timeout",
            "120s",
        ]);
        assert!(done.status.success(), "{} uninstall: {}", self.helm, said(&done));
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(self.webhooks_left(), "", "uninstall leaves no webhook");
    }

    fn webhooks_left(&self) -> String {
        let configurations = [
            format!("validatingwebhookconfiguration/{}", self.name),
            format!("mutatingwebhookconfiguration/{}", self.name),
        ];
        said(&run(&[
            "kubectl",
            "get",
            &configurations[0],
            &configurations[1],
            "--ignore-not-found",
            "-o",
            "name",
        ]))
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Fail-closed webhooks of a failed test would refuse every later test's Helm writes.
            let _ = run(&[self.helm, "uninstall", &self.release, "-n", &self.namespace]);
        }
        let _ = run(&["kubectl", "delete", "namespace", &self.namespace, "--wait=false"]);
    }
}

/// The guarded namespace and its unguarded twin (`helm-guard.io/ignore=true`), a chart for the
/// flows.
fn twins(prefix: &str) -> ([String; 2], tempfile::TempDir, String) {
    let namespaces =
        [format!("{prefix}-guarded-{}", std::process::id()), format!("{prefix}-twin-{}", std::process::id())];
    kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespaces[0]}}));
    kubectl_apply(&json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespaces[1], "labels": {"helm-guard.io/ignore": "true"}}}));
    common::writers::bind();
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("demo").to_str().unwrap().to_owned();
    assert!(run(&["helm", "create", &chart]).status.success());
    (namespaces, dir, chart)
}

/// Waits until the guard is in the way of the guarded namespace: the latest deployed record of a
/// release cannot be deleted by hand.
fn in_the_way(namespace: &str, chart: &str) {
    assert!(run(&["helm", "install", "probe", chart, "-n", namespace]).status.success());
    let started = Instant::now();
    loop {
        let dry = run(&[
            "kubectl",
            "delete",
            "secret",
            "sh.helm.release.v1.probe.v1",
            "-n",
            namespace,
            "--dry-run=server",
        ]);
        if !dry.status.success() && said(&dry).contains("is the latest, deployed revision") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the guard never refused: {}", said(&dry));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(run(&["helm", "uninstall", "probe", "-n", namespace]).status.success());
}

fn flow(helm: &'static str, seed: u64, namespaces: &[String; 2], chart: &str) -> Flow {
    let driver = if seed.is_multiple_of(2) { "configmap" } else { "secret" };
    Flow {
        helm,
        driver: driver.into(),
        chart: chart.to_owned(),
        namespaces: namespaces.clone(),
        rng: fastrand::Rng::with_seed(seed),
        log: Vec::new(),
        seed,
    }
}

/// `kubectl rollout status` of the guard's Deployment, to its end.
fn rollout_status(namespace: &str, name: &str) -> Output {
    let deployment = format!("deployment/{name}");
    run(&["kubectl", "rollout", "status", &deployment, "-n", namespace, "--timeout=180s"])
}

/// The twin namespaces go (without waiting).
fn delete_namespaces(namespaces: &[String; 2]) {
    for ns in namespaces {
        let _ = run(&["kubectl", "delete", "namespace", ns, "--wait=false"]);
    }
}

/// One random step of `flow`, agreeing with the twin.
fn random_step(flow: &mut Flow) {
    let op = random_op(&mut flow.rng, RELEASES.len());
    flow.step(&op);
}

fn steps() -> usize {
    std::env::var("HELM_FLOWS_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(20)
}

/// Runs random steps of `flow` until `done` says the operation beside it is over (and at least
/// `at_least` steps), each agreeing with the twin.
fn steps_while(flow: &mut Flow, at_least: usize, done: impl Fn() -> bool) {
    let mut taken = 0;
    while taken < at_least || !done() {
        random_step(flow);
        taken += 1;
        assert!(taken < 500, "the operation beside the flow never ended");
    }
}

/// Each test installs a guard, whose webhooks are cluster-wide and fail closed once it is ready:
/// the tests take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The defaults (two replicas, Helm 4): random Helm 3 and 4 flows agree with the twin while a
/// pod is killed and while the Deployment rolls; the CA rotated in the Secret reaches the
/// webhooks with nothing refused; `helm-guard check` fails naming the cause with the webhooks
/// deleted (the guard does not bring them back; `helm upgrade` does) and with a foreign CA
/// registered (the guard puts its own back); `helm uninstall` leaves no webhook.
#[test]
#[ignore = "needs a real API server with a node and the image: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn the_chart_on_a_node_guards_helm_through_a_crash_a_rollout_and_a_ca_rotation() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (namespaces, _dir, chart) = twins("deployed");
    let deployed = Deployed::install("helm", "deployed", CHART, &[]);
    // With a release to try a verdict on, check's dry-run deletion is refused.
    assert!(run(&["helm", "install", "tried", &chart, "-n", &namespaces[0]]).status.success());
    let checked = until_checked(&deployed.namespace, &deployed.name);
    assert!(checked.contains("every check passed") && checked.contains("refused"), "{checked}");
    assert!(
        checked.contains(&format!("deleting Secret {}/sh.helm.release.v1.tried.v1", namespaces[0])),
        "{checked}"
    );
    assert!(run(&["helm", "uninstall", "tried", "-n", &namespaces[0]]).status.success());
    in_the_way(&namespaces[0], &chart);
    for (i, seed) in seeds(11, 2).into_iter().enumerate() {
        let helm = if i % 2 == 0 { "helm" } else { "helm3" };
        let mut flow = flow(helm, seed, &namespaces, &chart);
        let steps = steps();
        for _ in 0..steps / 3 {
            random_step(&mut flow);
        }
        // A crash: the pod goes at once, no drain; the other answers, the ReplicaSet replaces it.
        let victim = deployed.pods()[i % 2].clone();
        let killed = run(&[
            "kubectl",
            "delete",
            "pod",
            &victim,
            "-n",
            &deployed.namespace,
            "--grace-period=0",
            "--force",
        ]);
        assert!(killed.status.success(), "{}", said(&killed));
        flow.log.push(format!("(killed {victim})"));
        for _ in 0..steps / 3 {
            random_step(&mut flow);
        }
        // A rollout: both replicas replaced one after the other while Helm runs.
        let deployment = format!("deployment/{}", deployed.name);
        let restart = run(&["kubectl", "rollout", "restart", &deployment, "-n", &deployed.namespace]);
        assert!(restart.status.success(), "{}", said(&restart));
        flow.log.push("(rolling restart)".to_owned());
        let (namespace, name) = (deployed.namespace.clone(), deployed.name.clone());
        let rolled = std::thread::spawn(move || rollout_status(&namespace, &name));
        steps_while(&mut flow, steps / 3, || rolled.is_finished());
        let rolled = rolled.join().unwrap();
        assert!(rolled.status.success(), "{}", said(&rolled));
        eprintln!("seed {seed}: agrees ({helm}, HELM_DRIVER={}) through a crash and a rollout", flow.driver);
    }

    // The CA rotated: a new CA and certificate in the Secret. The kubelet swaps the mounted files;
    // the guard serves the new certificate and registers the new CA beside the old one.
    let host = format!("{}.{}.svc", deployed.name, deployed.namespace);
    let bundle = helm_guard::certs::generate(&[host.clone(), format!("{host}.cluster.local")], 1).unwrap();
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let secret = format!("{}-tls", deployed.name);
    let data = json!({"data": {"tls.crt": encode(&bundle.cert_pem), "tls.key": encode(&bundle.key_pem), "ca.crt": encode(&bundle.ca_pem)}});
    let rotated =
        run(&["kubectl", "patch", "secret", &secret, "-n", &deployed.namespace, "-p", &data.to_string()]);
    assert!(rotated.status.success(), "{}", said(&rotated));
    let new_ca: String = bundle.ca_pem.split_whitespace().collect();
    let registered_new_ca = || {
        let configuration = kubectl_json(&["get", "validatingwebhookconfiguration", &deployed.name]);
        configuration["webhooks"].as_array().unwrap().iter().all(|w| {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(w["clientConfig"]["caBundle"].as_str().unwrap_or_default())
                .unwrap_or_default();
            String::from_utf8_lossy(&pem).split_whitespace().collect::<String>().contains(&new_ca)
        })
    };
    let mut flow = flow("helm", 99, &namespaces, &chart);
    flow.log.push("(CA rotated in the Secret)".to_owned());
    let started = Instant::now();
    steps_while(&mut flow, 3, || registered_new_ca() || started.elapsed() > Duration::from_secs(180));
    assert!(registered_new_ca(), "the rotated CA was never registered");
    // The kubelet may swap the files a little after the CA is registered: a few more steps.
    for _ in 0..5 {
        random_step(&mut flow);
    }
    let checked = until_checked(&deployed.namespace, &deployed.name);
    assert!(checked.contains("every check passed"), "{checked}");

    // A foreign CA registered by hand: check names the cause, and the guard puts its own back.
    let foreign = helm_guard::certs::generate(std::slice::from_ref(&host), 1).unwrap();
    let configuration = kubectl_json(&["get", "validatingwebhookconfiguration", &deployed.name]);
    let patch: Vec<Value> = (0..configuration["webhooks"].as_array().unwrap().len())
        .map(|i| json!({"op": "replace", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encode(&foreign.ca_pem)}))
        .collect();
    let configuration = format!("validatingwebhookconfiguration/{}", deployed.name);
    let patched =
        run(&["kubectl", "patch", &configuration, "--type", "json", "-p", &Value::from(patch).to_string()]);
    assert!(patched.status.success(), "{}", said(&patched));
    let wrong = check(&deployed.namespace, &deployed.name);
    assert!(!wrong.status.success(), "check passed with a foreign CA: {}", said(&wrong));
    assert!(said(&wrong).contains("[FAIL] certificate authority"), "{}", said(&wrong));
    until_checked(&deployed.namespace, &deployed.name);

    // The webhooks deleted (the outage runbook): check says so, the guard leaves them deleted,
    // `helm upgrade` of the chart puts them back and the guard fills them in.
    let deleted = run(&["kubectl", "delete", &configuration]);
    assert!(deleted.status.success(), "{}", said(&deleted));
    let gone = check(&deployed.namespace, &deployed.name);
    assert!(!gone.status.success() && said(&gone).contains("is absent"), "{}", said(&gone));
    std::thread::sleep(helm_guard_recheck());
    assert!(run(&["kubectl", "get", &configuration]).status.code() != Some(0), "the guard created it again");
    let upgraded = deployed.upgrade(CHART, &[]);
    assert!(upgraded.status.success(), "{}", said(&upgraded));
    until_checked(&deployed.namespace, &deployed.name);

    deployed.uninstall();
    delete_namespaces(&namespaces);
}

/// A little more than the guard's registration period.
fn helm_guard_recheck() -> Duration {
    Duration::from_secs(12)
}

/// The K3s example's chart values as values files: its HelmChart's valuesContent (audit mode),
/// then its second step's HelmChartConfig (enforce), as K3s merges them.
fn k3s_example_values(dir: &std::path::Path) -> [String; 2] {
    let read = |file: &str, kind: &str, name: &str| {
        let path = format!("{}/examples/k3s/{file}", env!("CARGO_MANIFEST_DIR"));
        let documents: Vec<Value> =
            serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
        let found = documents.iter().find(|d| d["kind"] == kind).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, found["spec"]["valuesContent"].as_str().unwrap()).unwrap();
        path.to_str().unwrap().to_owned()
    };
    [
        read("helm-guard.yaml", "HelmChart", "k3s-values.yaml"),
        read("helm-guard-enforce.yaml", "HelmChartConfig", "k3s-enforce.yaml"),
    ]
}

/// Upgrading the guard as a user does: the previous version's chart and image installed by Helm 3,
/// `helm upgrade` to this version with the K3s example's values while random Helm flows run
/// beside the twin (nothing of Helm's refused that the twin runs, nothing let through that the
/// twin's rules refuse), then an upgrade of this version that rolls its pods on the one node
/// (the surge pod beside them), and `helm-guard check` passes after each.
#[test]
#[ignore = "needs a real API server with a node, the image and helm-guard:prev: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn upgrading_the_guard_from_the_previous_version_with_the_k3s_values_refuses_nothing_of_helms() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let previous = std::env::var("HELM_GUARD_E2E_PREVIOUS").unwrap_or_else(|_| PREVIOUS.to_owned());
    let old = tempfile::tempdir().unwrap();
    let archive = old.path().join("previous.tar");
    let git_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/.git");
    let archived = run(&[
        "git",
        "--git-dir",
        git_dir,
        "archive",
        "-o",
        archive.to_str().unwrap(),
        &previous,
        "charts",
        "manifests",
    ]);
    assert!(archived.status.success(), "git archive {previous}: {}", said(&archived));
    let extracted = run(&["tar", "-xf", archive.to_str().unwrap(), "-C", old.path().to_str().unwrap()]);
    assert!(extracted.status.success(), "{}", said(&extracted));
    let old_chart = old.path().join("charts/helm-guard");

    let (namespaces, _dir, chart) = twins("upgraded");
    let deployed =
        Deployed::install("helm3", "upgraded", old_chart.to_str().unwrap(), &["--set", "image.tag=prev"]);
    in_the_way(&namespaces[0], &chart);
    let [values, enforce] = k3s_example_values(old.path());
    for (i, (seed, sets)) in [
        (31, vec!["-f", &values, "-f", &enforce]),
        (32, vec!["-f", &values, "-f", &enforce, "--set", "podAnnotations.rolled=again"]),
    ]
    .into_iter()
    .enumerate()
    {
        let helm = if i == 0 { "helm" } else { "helm3" };
        let mut flow = flow(helm, seed, &namespaces, &chart);
        let steps = steps();
        for _ in 0..steps / 3 {
            random_step(&mut flow);
        }
        flow.log.push(format!("(helm upgrade of the guard {sets:?})"));
        let args: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
        let (release, namespace) = (deployed.release.clone(), deployed.namespace.clone());
        let upgrading = std::thread::spawn(move || {
            let mut command =
                vec!["helm3", "upgrade", &release, CHART, "-n", &namespace, "--wait", "--timeout", "3m"];
            command.extend(args.iter().map(String::as_str));
            run(&command)
        });
        steps_while(&mut flow, steps / 3, || upgrading.is_finished());
        let upgraded = upgrading.join().unwrap();
        assert!(upgraded.status.success(), "helm3 upgrade of the guard: {}", said(&upgraded));
        let rolled = rollout_status(&deployed.namespace, &deployed.name);
        assert!(rolled.status.success(), "{}", said(&rolled));
        for _ in 0..steps / 3 {
            random_step(&mut flow);
        }
        let checked = until_checked(&deployed.namespace, &deployed.name);
        assert!(checked.contains("every check passed"), "{checked}");
        eprintln!("seed {seed}: agrees ({helm}) through an upgrade of the guard ({sets:?})");
    }
    deployed.uninstall();
    delete_namespaces(&namespaces);
}

/// Three replicas on one node, and the guard installed while its image cannot be pulled: nothing
/// of Helm's waits on it until it can run.
#[test]
#[ignore = "needs a real API server with a node and the image: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn three_replicas_on_one_node_guard_helm_and_a_pod_that_never_runs_refuses_nothing() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (namespaces, _dir, chart) = twins("three");
    let namespace = format!("three-{}", std::process::id());
    // The image cannot be pulled: Helm 4 installs the chart without waiting, and every Helm write
    // elsewhere goes through.
    let install = run(&[
        "helm",
        "install",
        "three",
        CHART,
        "-n",
        &namespace,
        "--create-namespace",
        "--set",
        "replicas=3",
        "--set",
        "image.tag=not-on-the-node",
    ]);
    assert!(install.status.success(), "{}", said(&install));
    let deployed =
        Deployed { helm: "helm", release: "three".into(), name: "three-helm-guard".into(), namespace };
    let mut flow = flow("helm3", 21, &namespaces, &chart);
    for _ in 0..steps() / 2 {
        random_step(&mut flow);
    }
    let unready = check(&deployed.namespace, &deployed.name);
    assert!(!unready.status.success(), "{}", said(&unready));
    assert!(
        said(&unready).contains("has no webhooks: the guard has not been ready yet"),
        "{}",
        said(&unready)
    );
    // The image fixed: the guard runs, registers and is in the way.
    let fixed = deployed.upgrade(CHART, &["--set", "replicas=3", "--set", "recycleBin.bestEffort=true"]);
    assert!(fixed.status.success(), "{}", said(&fixed));
    until_checked(&deployed.namespace, &deployed.name);
    in_the_way(&namespaces[0], &chart);
    for _ in 0..steps() / 2 {
        random_step(&mut flow);
    }
    deployed.uninstall();
    delete_namespaces(&namespaces);
}

/// README's install, word for word (issue 63): the chart as release `helm-guard` in namespace
/// `helm-guard` in audit mode, then `helm-guard check` with no flag passes, showing the guard's
/// warning (the API server cuts it and ends it in `…`, which `check` once dropped); then enforce,
/// and `check` passes, showing the refusal.
#[test]
#[ignore = "needs a real API server with a node and the image: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn readmes_install_word_for_word_is_checked_in_audit_mode_then_in_enforce() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (namespaces, _dir, chart) = twins("readme");
    assert!(run(&["helm", "install", "tried", &chart, "-n", &namespaces[0]]).status.success());
    // 1. Audit mode.
    let step1 = [
        "install",
        "helm-guard",
        CHART,
        "-n",
        "helm-guard",
        "--create-namespace",
        "--set",
        "mode=audit",
        "--wait",
    ];
    let installed = run(&[&["helm"][..], &step1[..]].concat());
    assert!(installed.status.success(), "{}", said(&installed));
    let deployed = Deployed {
        helm: "helm",
        release: "helm-guard".into(),
        name: "helm-guard".into(),
        namespace: "helm-guard".into(),
    };
    // 2. `helm-guard check`, as README gives it (it passes once the guard has registered).
    let audited = until_passes(&["check"]);
    assert!(audited.contains("every check passed"), "{audited}");
    assert!(audited.contains("allowed with the guard's warning"), "{audited}");
    assert!(audited.contains("helm-guard (audit mode"), "{audited}");
    // The charts never reinstalled on failure, by default (issue 59).
    assert!(audited.contains("(--protected-chart): kube-system/rke2-cilium"), "{audited}");
    // 4. Enforce.
    let step4 =
        ["upgrade", "helm-guard", CHART, "-n", "helm-guard", "--reuse-values", "--set", "mode=enforce"];
    let enforced = run(&[&["helm"][..], &step4[..], &["--wait"][..]].concat());
    assert!(enforced.status.success(), "{}", said(&enforced));
    let started = Instant::now();
    let refused = loop {
        let checked = until_passes(&["check"]);
        // The rollout replaces the audit-mode pods one by one: until it is done a pod may warn.
        if checked.contains(": refused: ") || started.elapsed() > Duration::from_secs(90) {
            break checked;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(refused.contains("every check passed") && refused.contains(": refused: "), "{refused}");
    assert!(
        refused.contains(&format!("deleting Secret {}/sh.helm.release.v1.tried.v1", namespaces[0])),
        "{refused}"
    );
    assert!(run(&["helm", "uninstall", "tried", "-n", &namespaces[0]]).status.success());
    deployed.uninstall();
    delete_namespaces(&namespaces);
}

/// Issue 60: the chart in enforce mode, its Service pointing at a port the pod does not serve (as
/// a firewall between the control plane and the nodes leaves it, a GKE private cluster's on any
/// port but 443 and 10250): the guard is ready, yet the API server never reaches it, so its own
/// probe never comes back and every webhook stays `Ignore`: Helm installs, upgrades and uninstalls
/// in another namespace, and a record's deletion by hand passes, unguarded but unblocked;
/// `helm-guard check` says why. The Service mended, the probe comes back, the webhooks fail
/// closed and the deletion is refused.
#[test]
#[ignore = "needs a real API server with a node and the image: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn a_guard_the_api_server_cannot_reach_blocks_nothing_and_check_says_why() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (namespaces, _dir, chart) = twins("unreached");
    let deployed = Deployed {
        helm: "helm",
        release: "unreached".into(),
        name: "unreached-helm-guard".into(),
        namespace: format!("unreached-{}", std::process::id()),
    };
    // Installed without --wait, the Service broken at once: long before a pod is ready.
    let installed = run(&[
        "helm",
        "install",
        "unreached",
        CHART,
        "-n",
        &deployed.namespace,
        "--create-namespace",
        "--set",
        "mode=enforce",
    ]);
    assert!(installed.status.success(), "{}", said(&installed));
    let port = |target: Value| {
        let patch =
            json!([{"op": "replace", "path": "/spec/ports/0/targetPort", "value": target}]).to_string();
        let done = run(&[
            "kubectl",
            "patch",
            "service",
            &deployed.name,
            "-n",
            &deployed.namespace,
            "--type",
            "json",
            "-p",
            &patch,
        ]);
        assert!(done.status.success(), "{}", said(&done));
    };
    port(json!(9));
    // The guard registers its webhooks once ready, and with no probe back, every one Ignore.
    let policies = || -> Vec<String> {
        let configuration = kubectl_json(&["get", "validatingwebhookconfiguration", &deployed.name]);
        configuration["webhooks"]
            .as_array()
            .map(|w| w.iter().map(|w| w["failurePolicy"].as_str().unwrap_or_default().to_owned()).collect())
            .unwrap_or_default()
    };
    until(Duration::from_secs(180), "the webhooks registered", || !policies().is_empty());
    std::thread::sleep(Duration::from_secs(25)); // two probes at least
    assert!(policies().iter().all(|p| p == "Ignore"), "{:?}", policies());
    // Helm in another namespace: nothing blocks it.
    let helm = |args: &[&str]| {
        let done = run(&[&["helm"][..], args, &["-n", &namespaces[0]][..]].concat());
        assert!(done.status.success(), "helm {args:?}: {}", said(&done));
    };
    helm(&["install", "web", &chart]);
    helm(&["upgrade", "web", &chart]);
    let record = "sh.helm.release.v1.web.v2";
    let deleted = run(&["kubectl", "delete", "secret", record, "-n", &namespaces[0], "--dry-run=server"]);
    assert!(deleted.status.success(), "unguarded, not blocked: {}", said(&deleted));
    // check says why.
    let checked = check(&deployed.namespace, &deployed.name);
    let text = said(&checked);
    assert!(!checked.status.success(), "{text}");
    assert!(
        text.contains(
            "[FAIL] reached from the API server: the API server does not reach the guard through Service"
        ),
        "{text}"
    );
    assert!(text.contains("docs/install/platforms.md"), "{text}");
    // Mended: reached, failing closed, refusing.
    port(json!("https"));
    let passed = until_passes(&["check", "--guard-namespace", &deployed.namespace, "--name", &deployed.name]);
    assert!(passed.contains("[ok]   reached from the API server"), "{passed}");
    assert!(policies().contains(&"Fail".to_owned()), "{:?}", policies());
    let refused = run(&["kubectl", "delete", "secret", record, "-n", &namespaces[0], "--dry-run=server"]);
    assert!(!refused.status.success() && said(&refused).contains("helm-guard"), "{}", said(&refused));
    helm(&["uninstall", "web"]);
    deployed.uninstall();
    delete_namespaces(&namespaces);
}

/// The image `helm-writer:e2e`: the Helm binary on PATH (static) and a chart, from scratch, loaded
/// onto the node (`$HELM_GUARD_E2E_KUBE_LOCAL`, default `kube-local` on PATH).
fn helm_writer_image() -> &'static str {
    const IMAGE: &str = "helm-writer:e2e";
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("tmp")).unwrap();
    let helm = String::from_utf8_lossy(&run(&["sh", "-c", "readlink -f \"$(command -v helm)\""]).stdout)
        .trim()
        .to_owned();
    std::fs::copy(&helm, rootfs.join("helm")).unwrap();
    let chart = rootfs.join("chart");
    assert!(run(&["helm", "create", chart.to_str().unwrap()]).status.success());
    let containerfile = dir.path().join("Containerfile");
    std::fs::write(
        &containerfile,
        "FROM scratch\nCOPY rootfs/ /\nENV HOME=/tmp HELM_CACHE_HOME=/tmp/cache HELM_CONFIG_HOME=/tmp/config HELM_DATA_HOME=/tmp/data\nUSER 65532\nENTRYPOINT [\"/helm\"]\n",
    )
    .unwrap();
    let built = run(&[
        "podman",
        "build",
        "-q",
        "-t",
        IMAGE,
        "-f",
        containerfile.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ]);
    assert!(built.status.success(), "{}", said(&built));
    let kube_local = std::env::var("HELM_GUARD_E2E_KUBE_LOCAL").unwrap_or_else(|_| "kube-local".into());
    let loaded = run(&[&kube_local, "load", IMAGE]);
    assert!(loaded.status.success(), "{kube_local} load {IMAGE}: {}", said(&loaded));
    IMAGE
}

/// A pod of `image` running Helm with `args` as service account `deployer` (its token bound to
/// the pod, as every pod's is), never restarted.
fn helm_pod(namespace: &str, name: &str, image: &str, args: &[&str]) {
    kubectl_apply(
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"serviceAccountName": "deployer", "restartPolicy": "Never",
                 "containers": [{"name": "helm", "image": image, "imagePullPolicy": "Never", "args": args}]}}),
    );
}

fn pod_phase(namespace: &str, name: &str) -> String {
    let done = run(&["kubectl", "get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}"]);
    String::from_utf8_lossy(&done.stdout).into_owned()
}

fn record_status(namespace: &str, revision: u32) -> String {
    let name = format!("sh.helm.release.v1.web.v{revision}");
    let done = run(&[
        "kubectl",
        "get",
        "secret",
        &name,
        "-n",
        namespace,
        "-o",
        "jsonpath={.metadata.labels.status}",
    ]);
    String::from_utf8_lossy(&done.stdout).into_owned()
}

fn scan_web(namespace: &str) -> Value {
    let bin = env!("CARGO_BIN_EXE_helm-guard");
    let args = [
        bin,
        "scan",
        "-n",
        namespace,
        "--release",
        "web",
        "--guard-namespace",
        namespace,
        "--stuck-after",
        "1s",
        "-o",
        "json",
    ];
    let out = said(&run(&args));
    let start = out.find('[').unwrap_or_else(|| panic!("{out}"));
    serde_json::from_str::<Value>(&out[start..]).unwrap_or_else(|e| panic!("{e}: {out}"))[0].clone()
}

fn until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every release knows its writer (issue 58), with Helm itself in a pod on the node as a
/// controller runs it: the pod's own token names it to the guard. An upgrade whose Helm is killed
/// (SIGKILL, as the OOM killer does) in its `--wait` leaves `pending-upgrade`: while the pod runs
/// it is not stuck, once its container is dead (the pod `Failed`, still there) it is, young, and
/// `repair --apply` lets the next upgrade run.
#[test]
#[ignore = "needs a real API server with a node, podman and kube-local: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn helm_in_a_pod_killed_mid_upgrade_is_stuck_once_its_container_is_dead_and_not_before() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let image = helm_writer_image();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let guard = runtime.block_on(common::cluster::start_guard_with(
        "hg-node-writer",
        47,
        helm_guard::policy::PolicyConfig::default(),
    ));
    let ns = guard.namespace.clone();
    kubectl_apply(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"helm-guard-e2e": ns}}}),
    );
    kubectl_apply(
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": ns}}),
    );
    kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "deployer-admin", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]}));
    runtime.block_on(common::cluster::register_webhooks(&guard.client, &ns, &guard.url, &guard.ca_pem));
    let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        helm_pod(&ns, "install", image, &["install", "web", "/chart", "-n", &ns]);
        until(Duration::from_secs(120), "the install pod succeeds", || {
            pod_phase(&ns, "install") == "Succeeded"
        });
        let upgrade = [
            "upgrade",
            "web",
            "/chart",
            "-n",
            &ns,
            "--set",
            "image.tag=never-ready",
            "--wait",
            "--timeout",
            "10m",
        ];
        helm_pod(&ns, "upgrade", image, &upgrade);
        until(Duration::from_secs(120), "the upgrade stores its pending revision", || {
            record_status(&ns, 2) == "pending-upgrade"
        });
        std::thread::sleep(Duration::from_secs(3));
        let report = scan_web(&ns);
        assert_eq!(
            (report["stuck"].as_bool(), report["state"].as_str()),
            (Some(false), Some("pending-upgrade")),
            "{report}"
        );
        assert_eq!(
            report["writer"]["pod"],
            format!("{ns}/upgrade"),
            "the pod's own token names it: {report}"
        );
        assert_eq!(report["writer"]["alive"], true, "{report}");
        // The container killed as the OOM killer does; the pod stays, Failed.
        let pattern = format!("helm upgrade web /chart -n {ns}");
        assert!(run(&["pkill", "-9", "-f", &pattern]).status.success(), "no Helm process to kill");
        until(Duration::from_secs(30), "the pod ends", || pod_phase(&ns, "upgrade") == "Failed");
        until(Duration::from_secs(10), "stuck once its writer's container is dead", || {
            let report = scan_web(&ns);
            report["stuck"] == true && report["stuck_because"] == "writer-gone"
        });
        assert_eq!(record_status(&ns, 2), "pending-upgrade");
        let bin = env!("CARGO_BIN_EXE_helm-guard");
        let repaired = run(&[bin, "repair", "web", "-n", &ns, "--guard-namespace", &ns, "--apply"]);
        assert!(repaired.status.success(), "{}", said(&repaired));
        helm_pod(&ns, "again", image, &["upgrade", "web", "/chart", "-n", &ns]);
        until(Duration::from_secs(120), "the next upgrade runs", || pod_phase(&ns, "again") == "Succeeded");
    }));
    runtime.block_on(common::cluster::cleanup(&guard.client, &ns, false));
    runtime.block_on(guard.running.shutdown());
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}
