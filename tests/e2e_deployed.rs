//! The chart as deployed: real Helm installs `charts/helm-guard` into the real API server (which
//! creates the Deployment's pods but runs none), and this test plays the node: the kubelet starts
//! each pod as a container of the image (`image/build.sh`) with exactly the pod's args, env
//! (downward-API values filled from the pod), `securityContext` and volumes (the TLS Secret and the
//! service-account token, laid out as the kubelet lays them out, read-only), polls its probes as
//! the kubelet does and restarts it when it dies; kube-proxy forwards the Service's ClusterIP,
//! which the API server calls for the rendered webhooks, to the ready containers only. Then real
//! Helm 3 and 4 run random flows through it beside an unguarded twin namespace, a container is
//! killed in the middle (the other answers, the kubelet restarts it), both are replaced by a
//! rolling restart (SIGTERM, the shutdown delay, the drain) while the flow goes on, the serving certificate is
//! rotated by replacing the mounted files, and `helm uninstall` of the chart completes and leaves
//! no webhook.
//!
//! Needs the real API server (`kube-local up`), podman (`kube-local containers`), the image
//! (`image/build.sh`), root (the ClusterIP is added to `lo`): `cargo test --test e2e_deployed --
//! --ignored --test-threads 1`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::cluster::{kubectl_apply, run, said};
use common::flows::{random_op, seeds};
use common::helm_twins::{Flow, RELEASES};
use serde_json::{Value, json};

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/helm-guard");
const IMAGE: &str = "helm-guard:0.1.0";
/// The address under which a container without host networking reaches this machine's loopback
/// (slirp4netns with `allow_host_loopback`), where the API server listens.
const HOST_LOOPBACK: &str = "10.0.2.2";

fn kubectl_json(args: &[&str]) -> Value {
    let done = run(&[&["kubectl"], args, &["-o", "json"]].concat());
    assert!(done.status.success(), "kubectl {args:?}: {}", said(&done));
    serde_json::from_slice(&done.stdout).unwrap()
}

fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman").args(args).output().unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One pod of the Deployment, run as a container: its name, where its ports are reached from
/// here, and whether its readiness probe passes.
struct Replica {
    pod: String,
    container: String,
    https: SocketAddr,
    metrics: SocketAddr,
    ready: AtomicBool,
    /// Being terminated (a rolling restart): out of the Service's endpoints whatever its probes
    /// say, as the endpoints controller drops a terminating pod; cleared when it starts again.
    terminating: AtomicBool,
    /// The pod's volumes as the kubelet lays them out, by mount path.
    volumes: Vec<(String, PathBuf)>,
}

impl Replica {
    fn running(&self) -> bool {
        let done = podman(&["inspect", "--format", "{{.State.Running}}", &self.container]);
        String::from_utf8_lossy(&done.stdout).trim() == "true"
    }

    fn restarts(&self) -> String {
        let done = podman(&["inspect", "--format", "{{.State.StartedAt}}", &self.container]);
        String::from_utf8_lossy(&done.stdout).trim().to_owned()
    }
}

/// A probe as the kubelet sends it: HTTP GET, 1 s timeout, success on 200 to 399.
fn probe(address: SocketAddr, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(1)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: kube-probe/1.36\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = [0u8; 12];
    std::io::Read::read_exact(&mut stream, &mut answer).is_ok()
        && std::str::from_utf8(&answer[9..12])
            .ok()
            .and_then(|c| c.parse::<u16>().ok())
            .is_some_and(|c| (200..400).contains(&c))
}

/// Writes a volume's files the way the kubelet does: a timestamped directory, `..data` pointing at
/// it, each key a link through `..data`; a new content swaps `..data` atomically.
fn write_volume(dir: &Path, files: &[(String, Vec<u8>)]) {
    std::fs::create_dir_all(dir).unwrap();
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    );
    let content = dir.join(&stamp);
    std::fs::create_dir(&content).unwrap();
    for (name, bytes) in files {
        std::fs::write(content.join(name), bytes).unwrap();
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link).unwrap();
        }
    }
    let next = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&next);
    std::os::unix::fs::symlink(&stamp, &next).unwrap();
    std::fs::rename(&next, dir.join("..data")).unwrap();
}

/// The chart installed and its pods running here: the node's kubelet and kube-proxy for it.
struct Deployed {
    helm: &'static str,
    release: String,
    namespace: String,
    cluster_ip: String,
    /// The containers' names, known before they start (so that a failed start is cleaned up).
    containers: Vec<String>,
    replicas: Arc<Vec<Replica>>,
    stop: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl Deployed {
    /// `helm install` of the chart with `sets`, then each pod started, probed and served.
    fn install(helm: &'static str, release: &str, sets: &[&str]) -> Deployed {
        assert!(
            podman(&["image", "exists", IMAGE]).status.success(),
            "no image {IMAGE}: build it with image/build.sh"
        );
        let namespace = format!("{release}-{}", std::process::id());
        let mut args = vec![helm, "install", release, CHART, "-n", &namespace, "--create-namespace"];
        for set in sets {
            args.extend(["--set", set]);
        }
        let install = run(&args);
        assert!(install.status.success(), "{helm} install: {}", said(&install));
        let name = format!("{release}-helm-guard");
        let service = kubectl_json(&["get", "service", &name, "-n", &namespace]);
        let cluster_ip = service["spec"]["clusterIP"].as_str().unwrap().to_owned();
        let added = run(&["ip", "addr", "add", &format!("{cluster_ip}/32"), "dev", "lo"]);
        assert!(added.status.success(), "adding the ClusterIP to lo (needs root): {}", said(&added));
        let dir = tempfile::tempdir().unwrap();
        let deployment = kubectl_json(&["get", "deployment", &name, "-n", &namespace]);
        let want = deployment["spec"]["replicas"].as_u64().unwrap() as usize;
        let started = Instant::now();
        let pods = loop {
            let selector = format!("app.kubernetes.io/instance={release}");
            let pods = kubectl_json(&["get", "pods", "-n", &namespace, "-l", &selector]);
            let items = pods["items"].as_array().unwrap().clone();
            if items.len() == want || started.elapsed() > Duration::from_secs(60) {
                break items;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let container = |pod: &Value| format!("e2e-{}", pod["metadata"]["name"].as_str().unwrap());
        let mut deployed = Deployed {
            helm,
            release: release.to_owned(),
            namespace,
            cluster_ip,
            containers: pods.iter().map(container).collect(),
            replicas: Arc::new(Vec::new()),
            stop: Arc::new(AtomicBool::new(false)),
            _dir: dir,
        };
        assert_eq!(pods.len(), want, "the ReplicaSet's pods");
        let replicas = pods.iter().map(|pod| start_pod(pod, deployed._dir.path())).collect();
        deployed.replicas = Arc::new(replicas);
        deployed.kubelet(pods.clone());
        deployed.kube_proxy(&service);
        let started = Instant::now();
        while !deployed.replicas.iter().all(|r| r.ready.load(Ordering::SeqCst)) {
            let logs: Vec<String> = deployed
                .replicas
                .iter()
                .map(|r| said(&podman(&["logs", "--tail", "5", &r.container])))
                .collect();
            assert!(started.elapsed() < Duration::from_secs(60), "replicas not ready: {logs:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
        deployed
    }

    /// The kubelet's loop for each pod: the readiness and liveness probes at their periods (three
    /// failures in a row count), a restart when the container exits or its liveness fails.
    fn kubelet(&self, pods: Vec<Value>) {
        for (i, pod) in pods.into_iter().enumerate() {
            let (replicas, stop) = (self.replicas.clone(), self.stop.clone());
            std::thread::spawn(move || {
                let container = &pod["spec"]["containers"][0];
                let period = |probe: &str| {
                    Duration::from_secs(container[probe]["periodSeconds"].as_u64().unwrap_or(10))
                };
                let (ready_every, live_every) = (period("readinessProbe"), period("livenessProbe"));
                let path = |probe: &str| container[probe]["httpGet"]["path"].as_str().unwrap().to_owned();
                let (ready_path, live_path) = (path("readinessProbe"), path("livenessProbe"));
                let replica = &replicas[i];
                let (mut ready_failures, mut live_failures) = (0, 0);
                let (mut next_ready, mut next_live) = (Instant::now(), Instant::now() + live_every);
                while !stop.load(Ordering::SeqCst) {
                    if !replica.running() {
                        replica.ready.store(false, Ordering::SeqCst);
                        let _ = podman(&["start", &replica.container]);
                        replica.terminating.store(false, Ordering::SeqCst);
                        (ready_failures, live_failures) = (0, 0);
                    }
                    let now = Instant::now();
                    if replica.terminating.load(Ordering::SeqCst) {
                        replica.ready.store(false, Ordering::SeqCst);
                    } else if now >= next_ready {
                        if probe(replica.metrics, &ready_path) {
                            ready_failures = 0;
                            replica.ready.store(true, Ordering::SeqCst);
                        } else {
                            ready_failures += 1;
                            if ready_failures >= 3 || !replica.ready.load(Ordering::SeqCst) {
                                replica.ready.store(false, Ordering::SeqCst);
                            }
                        }
                        // Until the first success the kubelet probes at the period too; sooner
                        // here only to keep the test short.
                        next_ready = now
                            + if replica.ready.load(Ordering::SeqCst) {
                                ready_every
                            } else {
                                Duration::from_millis(500)
                            };
                    }
                    if now >= next_live {
                        live_failures =
                            if probe(replica.metrics, &live_path) { 0 } else { live_failures + 1 };
                        if live_failures >= 3 {
                            replica.ready.store(false, Ordering::SeqCst);
                            let _ = podman(&["restart", &replica.container]);
                            live_failures = 0;
                        }
                        next_live = now + live_every;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    }

    /// kube-proxy for the Service's https port: the ClusterIP forwards each connection to a ready
    /// replica, in turn.
    fn kube_proxy(&self, service: &Value) {
        let port = service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "https")
            .unwrap()["port"]
            .as_u64()
            .unwrap();
        let listener = TcpListener::bind(format!("{}:{port}", self.cluster_ip)).unwrap();
        let (replicas, stop) = (self.replicas.clone(), self.stop.clone());
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let mut turn = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let ready: Vec<SocketAddr> =
                    replicas.iter().filter(|r| r.ready.load(Ordering::SeqCst)).map(|r| r.https).collect();
                if ready.is_empty() {
                    continue; // no endpoints: the connection is refused (dropped)
                }
                turn += 1;
                let Ok(upstream) = TcpStream::connect(ready[turn % ready.len()]) else { continue };
                for (mut from, mut to) in
                    [(client.try_clone().unwrap(), upstream.try_clone().unwrap()), (upstream, client)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
    }

    fn uninstall(&self) -> std::process::Output {
        run(&[self.helm, "uninstall", &self.release, "-n", &self.namespace, "--timeout", "60s"])
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let name = format!("{}-helm-guard", self.release);
        let _ = run(&[
            "kubectl",
            "delete",
            "validatingwebhookconfiguration",
            &name,
            "mutatingwebhookconfiguration",
            &name,
            "--ignore-not-found",
        ]);
        for container in &self.containers {
            let _ = podman(&["rm", "-f", "-t", "0", container]);
        }
        // Whatever the test did not get to: the release's cluster-wide objects go with it.
        let _ = run(&[self.helm, "uninstall", &self.release, "-n", &self.namespace, "--no-hooks"]);
        let _ = run(&["ip", "addr", "del", &format!("{}/32", self.cluster_ip), "dev", "lo"]);
        let _ = run(&["kubectl", "delete", "namespace", &self.namespace, "--wait=false"]);
    }
}

/// Starts one pod as a container, as the kubelet would: the pod's args, env, user, read-only
/// root, capabilities, privilege escalation, memory limit and volumes.
fn start_pod(pod: &Value, dir: &Path) -> Replica {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let namespace = pod["metadata"]["namespace"].as_str().unwrap();
    let spec = &pod["spec"];
    let container = &spec["containers"][0];
    let host_network = spec["hostNetwork"] == true;
    let port = |port_name: &str| {
        container["ports"].as_array().unwrap().iter().find(|p| p["name"] == port_name).unwrap()["containerPort"].as_u64().unwrap() as u16
    };
    let (https_port, metrics_port) = (port("https"), port("metrics"));
    let (https, metrics) = if host_network {
        (SocketAddr::from(([127, 0, 0, 1], https_port)), SocketAddr::from(([127, 0, 0, 1], metrics_port)))
    } else {
        (SocketAddr::from(([127, 0, 0, 1], free_port())), SocketAddr::from(([127, 0, 0, 1], free_port())))
    };
    let container_name = format!("e2e-{name}");
    let _ = podman(&["rm", "-f", "-t", "0", &container_name]);
    let mut args: Vec<String> = ["run", "-d", "--name", &container_name].map(String::from).to_vec();
    if host_network {
        args.extend(["--network", "host"].map(String::from));
        args.push("--add-host=kubernetes.default.svc:127.0.0.1".into());
    } else {
        args.extend(["--network", "slirp4netns:allow_host_loopback=true"].map(String::from));
        args.push(format!("--add-host=kubernetes.default.svc:{HOST_LOOPBACK}"));
        args.push(format!("--publish={https}:{https_port}"));
        args.push(format!("--publish={metrics}:{metrics_port}"));
    }
    // The kubelet's service environment; the API server is reached by a name its certificate holds.
    args.extend(
        ["--env=KUBERNETES_SERVICE_HOST=kubernetes.default.svc", "--env=KUBERNETES_SERVICE_PORT=6443"]
            .map(String::from),
    );
    for env in container["env"].as_array().into_iter().flatten() {
        let value = match (&env["value"], &env["valueFrom"]["fieldRef"]["fieldPath"]) {
            (Value::String(value), _) => value.clone(),
            (_, Value::String(path)) => {
                let (section, field) = path.split_once('.').unwrap();
                pod[section][field].as_str().unwrap_or_else(|| panic!("downward API {path}")).to_owned()
            }
            other => panic!("an env the test does not fill: {other:?}"),
        };
        args.push(format!("--env={}={value}", env["name"].as_str().unwrap()));
    }
    let user =
        container["securityContext"]["runAsUser"].as_u64().or(spec["securityContext"]["runAsUser"].as_u64());
    if let Some(user) = user {
        args.push(format!("--user={user}"));
    }
    let security = &container["securityContext"];
    if security["readOnlyRootFilesystem"] == true {
        // The kubelet mounts no tmpfs anywhere: neither does this.
        args.extend(["--read-only", "--read-only-tmpfs=false"].map(String::from));
    }
    if security["allowPrivilegeEscalation"] == false {
        args.push("--security-opt=no-new-privileges".into());
    }
    for drop in security["capabilities"]["drop"].as_array().into_iter().flatten() {
        args.push(format!("--cap-drop={}", drop.as_str().unwrap()));
    }
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "podman's default profile"
    );
    if let Some(limit) = container["resources"]["limits"]["memory"].as_str() {
        args.push(format!("--memory={}", limit.replace("Mi", "m").replace("Gi", "g")));
    }
    // Volumes as the kubelet writes them: each secret; the projected service-account volume the
    // API server added (a token bound to the pod, the cluster's CA, the namespace).
    let mut volumes = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let volume = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
        let files: Vec<(String, Vec<u8>)> = if let Some(secret_name) = volume["secret"]["secretName"].as_str()
        {
            let secret = kubectl_json(&["get", "secret", secret_name, "-n", namespace]);
            secret["data"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(key, value)| {
                    use base64::Engine as _;
                    let bytes =
                        base64::engine::general_purpose::STANDARD.decode(value.as_str().unwrap()).unwrap();
                    (key.clone(), bytes)
                })
                .collect()
        } else {
            assert!(
                volume["projected"]["sources"][0]["serviceAccountToken"].is_object(),
                "a volume the test does not fill: {volume}"
            );
            let token = run(&[
                "kubectl",
                "create",
                "token",
                spec["serviceAccountName"].as_str().unwrap(),
                "-n",
                namespace,
                "--bound-object-kind",
                "Pod",
                "--bound-object-name",
                name,
                "--bound-object-uid",
                pod["metadata"]["uid"].as_str().unwrap(),
            ]);
            assert!(token.status.success(), "{}", said(&token));
            let kubeconfig = std::env::var("KUBECONFIG").unwrap();
            let ca = std::fs::read(Path::new(&kubeconfig).with_file_name("pki/ca.crt")).unwrap();
            vec![
                ("token".into(), token.stdout),
                ("ca.crt".into(), ca),
                ("namespace".into(), namespace.as_bytes().to_vec()),
            ]
        };
        let host = dir.join(name).join(mount["name"].as_str().unwrap());
        write_volume(&host, &files);
        let path = mount["mountPath"].as_str().unwrap().to_owned();
        args.push(format!("--volume={}:{path}:ro", host.display()));
        volumes.push((path, host));
    }
    args.push(container["image"].as_str().unwrap().to_owned());
    args.extend(container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = podman(&args);
    assert!(started.status.success(), "podman {args:?}: {}", said(&started));
    Replica {
        pod: name.to_owned(),
        container: container_name,
        https,
        metrics,
        ready: AtomicBool::new(false),
        terminating: AtomicBool::new(false),
        volumes,
    }
}

/// A rolling restart (`kubectl rollout restart`, one pod unavailable at a time): each replica in
/// turn is taken out of the endpoints and sent SIGTERM, as the kubelet does; it drains and exits,
/// the kubelet loop starts it again, and the next goes once it is ready. Runs beside the caller.
fn rolling_restart(replicas: Arc<Vec<Replica>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for replica in replicas.iter() {
            let before = replica.restarts();
            replica.terminating.store(true, Ordering::SeqCst);
            replica.ready.store(false, Ordering::SeqCst);
            assert!(podman(&["kill", "--signal", "TERM", &replica.container]).status.success());
            let started = Instant::now();
            while replica.restarts() == before || !replica.ready.load(Ordering::SeqCst) {
                assert!(started.elapsed() < Duration::from_secs(90), "{} never came back ready", replica.pod);
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    })
}

/// The guarded namespace and its unguarded twin (`helm-guard.io/ignore=true`, made before any
/// webhook exists), a chart for the flows.
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
        assert!(started.elapsed() < Duration::from_secs(30), "the guard never refused: {}", said(&dry));
        std::thread::sleep(Duration::from_millis(200));
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

fn steps() -> usize {
    std::env::var("HELM_FLOWS_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(20)
}

/// The defaults (two replicas): random Helm 3 and 4 flows agree with the twin while one replica
/// is killed and restarted in the middle and, later, both are replaced by a rolling restart; the certificate rotated in the mounted files is served
/// without a restart; `helm uninstall` completes and leaves no webhook.
/// Each test installs the chart, whose webhooks are cluster-wide and fail closed: run side by
/// side (the default of `cargo test`), one's webhooks refuse the other's install before its
/// pods answer. They take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
#[ignore = "needs a real API server, podman, the image and root: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn the_chart_as_deployed_guards_helm_through_a_crash_a_rollout_and_a_certificate_rotation() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (namespaces, _dir, chart) = twins("deployed");
    let deployed = Deployed::install("helm", "deployed", &[]);
    assert_eq!(deployed.replicas.len(), 2);
    in_the_way(&namespaces[0], &chart);
    for (i, seed) in seeds(11, 2).into_iter().enumerate() {
        let helm = if i % 2 == 0 { "helm" } else { "helm3" };
        let mut flow = flow(helm, seed, &namespaces, &chart);
        let steps = steps();
        let mut rollout = None;
        for step in 0..steps {
            if step == steps / 3 {
                // A crash, not a shutdown: SIGKILL, no drain.
                let victim = &deployed.replicas[i % 2];
                assert!(podman(&["kill", "--signal", "KILL", &victim.container]).status.success());
                flow.log.push(format!("(killed {})", victim.pod));
            }
            if step == 2 * steps / 3 {
                // A rollout: both replicas replaced one after the other while Helm runs.
                rollout = Some(rolling_restart(deployed.replicas.clone()));
                flow.log.push("(rolling restart)".to_owned());
            }
            let op = random_op(&mut flow.rng, RELEASES.len());
            flow.step(&op);
        }
        if let Some(rollout) = rollout {
            rollout.join().unwrap();
        }
        eprintln!(
            "seed {seed}: {steps} steps agree ({helm}, HELM_DRIVER={}) through a crash and a rollout",
            flow.driver
        );
    }
    let started = Instant::now();
    while !deployed.replicas.iter().all(|r| r.ready.load(Ordering::SeqCst)) {
        assert!(started.elapsed() < Duration::from_secs(60), "a killed replica never came back ready");
        std::thread::sleep(Duration::from_millis(250));
    }

    // Rotation: a new CA and certificate for the Service's names; the webhooks trust both CAs
    // while the files change; each replica serves the new one without restarting.
    let host = format!("deployed-helm-guard.{}.svc", deployed.namespace);
    let bundle = helm_guard::certs::generate(&[host.clone(), format!("{host}.cluster.local")], 1).unwrap();
    let old_ca = {
        let secret = kubectl_json(&["get", "secret", "deployed-helm-guard-tls", "-n", &deployed.namespace]);
        use base64::Engine as _;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(secret["data"]["ca.crt"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let both = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("{old_ca}\n{}", bundle.ca_pem))
    };
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let configuration = kubectl_json(&["get", kind, "deployed-helm-guard"]);
        let patch: Vec<Value> = (0..configuration["webhooks"].as_array().unwrap().len())
            .map(|i| json!({"op": "replace", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": both}))
            .collect();
        let patched = run(&[
            "kubectl",
            "patch",
            kind,
            "deployed-helm-guard",
            "--type",
            "json",
            "-p",
            &Value::from(patch).to_string(),
        ]);
        assert!(patched.status.success(), "{}", said(&patched));
    }
    let before: Vec<String> = deployed.replicas.iter().map(Replica::restarts).collect();
    for replica in deployed.replicas.iter() {
        let (path, host_dir) = replica.volumes.iter().find(|(path, _)| path.ends_with("/tls")).unwrap();
        assert_eq!(path, "/etc/helm-guard/tls");
        write_volume(
            host_dir,
            &[
                ("tls.crt".into(), bundle.cert_pem.clone().into_bytes()),
                ("tls.key".into(), bundle.key_pem.clone().into_bytes()),
                ("ca.crt".into(), bundle.ca_pem.clone().into_bytes()),
            ],
        );
    }
    let new_cert = common::guard::pem_to_der(&bundle.cert_pem);
    for replica in deployed.replicas.iter() {
        let started = Instant::now();
        let served = loop {
            let served = served_certificate(replica.https, &bundle.ca_pem, &host);
            if served.as_deref() == Some(&new_cert[..]) || started.elapsed() > Duration::from_secs(30) {
                break served;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        assert_eq!(served.as_deref(), Some(&new_cert[..]), "{} serves the rotated certificate", replica.pod);
    }
    let after: Vec<String> = deployed.replicas.iter().map(Replica::restarts).collect();
    assert_eq!(before, after, "reloaded, not restarted");
    let mut flow = flow("helm", 99, &namespaces, &chart);
    for _ in 0..5 {
        let op = random_op(&mut flow.rng, RELEASES.len());
        flow.step(&op);
    }

    let uninstall = deployed.uninstall();
    assert!(uninstall.status.success(), "{}", said(&uninstall));
    let left = run(&[
        "kubectl",
        "get",
        "validatingwebhookconfiguration/deployed-helm-guard",
        "mutatingwebhookconfiguration/deployed-helm-guard",
        "--ignore-not-found",
        "-o",
        "name",
    ]);
    assert!(left.stdout.is_empty(), "left behind: {}", said(&left));
    for ns in &namespaces {
        let _ = run(&["kubectl", "delete", "namespace", ns, "--wait=false"]);
    }
}

/// Three replicas, and the guard on the node's network (one node here, so one replica: the chart's
/// ports are the node's); a short flow each, then the uninstall.
#[test]
#[ignore = "needs a real API server, podman, the image and root: cargo test --test e2e_deployed -- --ignored --test-threads 1"]
fn three_replicas_and_host_network_guard_helm_as_deployed() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for (release, sets) in [
        ("three", vec!["replicas=3", "recycleBin.bestEffort=true"]),
        ("host", vec!["replicas=1", "hostNetwork=true", "ports.https=10443", "ports.metrics=10090"]),
    ] {
        let (namespaces, _dir, chart) = twins(release);
        let deployed = Deployed::install("helm3", release, &sets);
        in_the_way(&namespaces[0], &chart);
        let mut flow = flow("helm3", 21, &namespaces, &chart);
        for _ in 0..steps() / 2 {
            let op = random_op(&mut flow.rng, RELEASES.len());
            flow.step(&op);
        }
        let uninstall = deployed.uninstall();
        assert!(uninstall.status.success(), "{release}: {}", said(&uninstall));
        drop(deployed);
        for ns in &namespaces {
            let _ = run(&["kubectl", "delete", "namespace", ns, "--wait=false"]);
        }
    }
}

/// The certificate a replica serves for `host`, verified against `ca_pem`.
fn served_certificate(address: SocketAddr, ca_pem: &str, host: &str) -> Option<Vec<u8>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let config = common::guard::client_config(ca_pem, &[b"http/1.1"]);
        let connector = tokio_rustls::TlsConnector::from(config);
        let tcp = tokio::net::TcpStream::connect(address).await.ok()?;
        let name = rustls::pki_types::ServerName::try_from(host.to_owned()).ok()?;
        let tls =
            tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await.ok()?.ok()?;
        Some(common::guard::peer_certificate(&tls))
    })
}
