//! The `inspect` and `scan` commands as a user runs them.

use crate::common;

use std::process::{Command, Output};

use common::*;
use serde_json::{Value, json};

fn helm_guard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_helm-guard")).args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const SNAPSHOT: &str = "tests/fixtures/snapshot/cluster-snapshot.json";
const NOW: &str = "2026-11-29T16:10:00Z";

/// The fixture snapshot's releases as a user reads them in `scan`: (namespace, release, state,
/// revision, status, what the hint tells them to run or know). The revisions and statuses are
/// what real Helm listed for the same cluster (`helm-ls-all.json` beside the snapshot; checked
/// below); the states and hints are the guard's reading of each release's history.
const SNAPSHOT_RELEASES: [(&str, &str, &str, u64, &str, &str); 6] = [
    ("demo", "web", "failed", 4, "failed", "`helm rollback web 3 -n demo`"),
    ("orphan", "app", "orphaned-superseded", 1, "superseded", "`helm rollback app 1 -n orphan`"),
    ("pending", "first", "pending-install", 1, "pending-install", "an operation is in progress"),
    ("pending", "gone", "uninstalled", 1, "uninstalled", "uninstalled with --keep-history"),
    ("pending", "rb", "healthy", 3, "deployed", "ok"),
    ("stuck", "job", "healthy", 4, "deployed", "ok"),
];

#[test]
fn scan_json_has_the_documented_keys_and_exit_1_for_broken_releases() {
    let output = helm_guard(&["scan", "--from-file", SNAPSHOT, "-o", "json", "--now", NOW]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let releases: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    for release in &releases {
        for key in ["namespace", "release", "driver", "state", "revision", "status", "anomalies"] {
            assert!(release.get(key).is_some(), "{key} missing in {release}");
        }
        assert_eq!(release["driver"], "secret");
        assert_eq!(release["anomalies"], serde_json::json!([]), "{release}");
    }
    let read: Vec<(&str, &str, &str, u64, &str)> = releases
        .iter()
        .map(|r| {
            let text = |key: &str| r[key].as_str().unwrap();
            (
                text("namespace"),
                text("release"),
                text("state"),
                r["revision"].as_u64().unwrap(),
                text("status"),
            )
        })
        .collect();
    let expected: Vec<_> =
        SNAPSHOT_RELEASES.iter().map(|&(n, r, st, rev, status, _)| (n, r, st, rev, status)).collect();
    assert_eq!(read, expected);
}

#[test]
fn scan_text_prints_one_line_per_release_and_a_summary() {
    let output = helm_guard(&["scan", "--from-file", SNAPSHOT, "--now", NOW]);
    let text = stdout(&output);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("NAMESPACE  RELEASE  DRIVER  STATE"), "{text}");
    for (namespace, release, state, revision, status, hint) in SNAPSHOT_RELEASES {
        let line = lines.next().unwrap();
        let columns: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            columns[..6],
            [namespace, release, "secret", state, &revision.to_string(), status],
            "{line}"
        );
        assert!(line.ends_with(hint), "{line} should end with {hint}");
    }
    assert_eq!(lines.next(), Some(""));
    assert_eq!(lines.next(), Some("6 releases, 3 healthy or uninstalled, 3 need attention"), "{text}");
}

#[test]
fn scan_shows_the_namespaces_that_are_opted_out_and_since_when() {
    let dir = tempfile::tempdir().unwrap();
    let set_at = |label: &str| {
        json!([{"manager": "kubectl-label", "operation": "Update", "time": "2026-11-20T08:30:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {format!("f:{label}"): {}}}}}])
    };
    let mut objects = web(&[(1, "superseded"), (2, "deployed")]);
    objects.extend([
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo",
            "labels": {"helm-guard.io/mode": "audit"}, "managedFields": set_at("helm-guard.io/mode")}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox", "labels": {"helm-guard.io/ignore": "true"}}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "strict", "labels": {"helm-guard.io/mode": "enforce"}}}),
    ]);
    let path = write_temp(&dir, "dump.json", &list(objects));
    let only = helm_guard(&["scan", "--from-file", path.to_str().unwrap(), "--opted-out", "-o", "json"]);
    assert_eq!(only.status.code(), Some(1), "opted-out namespaces are findings: {}", stderr(&only));
    let reported: Value = serde_json::from_slice(&only.stdout).unwrap();
    assert_eq!(
        reported,
        json!([{"namespace": "demo", "protection": "audit", "since": 1_795_163_400_i64},
               {"namespace": "sandbox", "protection": "ignored", "since": null}])
    );
    // The release report says so too, below its table, and keeps its exit status.
    let text = helm_guard(&["scan", "--from-file", path.to_str().unwrap()]);
    assert_eq!(text.status.code(), Some(0));
    let text = stdout(&text);
    assert!(text.contains("Not (fully) guarded by their namespace's labels"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("demo") && l.contains("audit") && l.contains("2026-11-20T08:30:00Z")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("sandbox") && l.contains("ignored") && l.ends_with('-')),
        "{text}"
    );
    assert!(!text.contains("strict"), "{text}");
    let none = helm_guard(&["scan", "--from-file", path.to_str().unwrap(), "--opted-out", "-n", "strict"]);
    assert_eq!(none.status.code(), Some(0));
    assert_eq!(
        stdout(&none).trim(),
        format!("No namespace in {}, namespace strict is opted out of helm-guard.", path.display())
    );
}

#[test]
fn inspect_of_a_missing_revision_says_which_revisions_each_release_has() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_temp(&dir, "web.json", &list(web(&[(1, "superseded"), (2, "deployed")])));
    let output = helm_guard(&["inspect", path.to_str().unwrap(), "--revision", "9"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no record of revision 9 (demo/web has revisions 1, 2)"),
        "{}",
        stderr(&output)
    );
    // A dump of several releases names each.
    let output = helm_guard(&["inspect", SNAPSHOT, "--revision", "99"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("(demo/web has revisions 2, 3, 4; orphan/app has revision 1; "), "{err}");
}

/// docs/reference/commands.md's exit status: a cluster that cannot be reached is a failure at run time (1) for
/// every command that reads one, never bad input (2), whether no kubeconfig is found or the one
/// found points at an address that does not answer.
#[test]
fn a_cluster_that_cannot_be_reached_exits_1_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: dead\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: dead\n  context:\n    cluster: dead\n    user: nobody\nusers:\n- name: nobody\n  user:\n    token: none\n"
        ),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let commands: [&[&str]; 8] = [
        &["scan"],
        &["scan", "--recycle-bin"],
        &["scan", "--opted-out"],
        &["inspect", "-n", "demo", "web"],
        &["repair", "web", "-n", "demo"],
        &["restore", "web", "-n", "demo"],
        &["forget", "web", "-n", "demo"],
        &["forget", "web", "-n", "demo", "--apply"],
    ];
    for args in commands {
        for (how, config) in [("a dead address", Some(&kubeconfig)), ("no kubeconfig", None)] {
            let mut command = Command::new(env!("CARGO_BIN_EXE_helm-guard"));
            command.args(args).env("HOME", home.path()).env_remove("KUBERNETES_SERVICE_HOST");
            match config {
                Some(path) => command.env("KUBECONFIG", path),
                None => command.env_remove("KUBECONFIG"),
            };
            let output = command.output().unwrap();
            let err = stderr(&output);
            assert_eq!(output.status.code(), Some(3), "{args:?} with {how}: {err}");
            assert!(err.starts_with("error: "), "{args:?} with {how}: {err}");
        }
    }
}

#[test]
fn scan_exits_0_when_every_release_is_healthy_and_reads_yaml_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = list(web(&[(1, "superseded"), (2, "deployed")]));
    let yaml = serde_saphyr::to_string(&healthy).unwrap();
    let path = dir.path().join("dump.yaml");
    std::fs::write(&path, yaml).unwrap();
    let output = helm_guard(&["scan", "--from-file", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    assert!(stdout(&output).contains("healthy"));
}

#[test]
fn scan_exits_2_on_unusable_input_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{ this is not json").unwrap();
    let output = helm_guard(&["scan", "--from-file", garbage.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("neither JSON nor YAML"), "{}", stderr(&output));

    // Kubernetes objects, but not a dump of Secrets and ConfigMaps (a dump without records in
    // it is an empty answer: see empty_results_are_empty_arrays_and_exit_0).
    let not_a_dump = write_temp(
        &dir,
        "deployments.json",
        &list(vec![json!({"kind": "Deployment", "metadata": {"name": "x", "namespace": "y"}})]),
    );
    let output = helm_guard(&["scan", "--from-file", not_a_dump.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("holds no Secrets or ConfigMaps"), "{}", stderr(&output));
    assert!(stderr(&output).contains("Deployment y/x"), "{}", stderr(&output));

    let missing = helm_guard(&["scan", "--from-file", "/nonexistent/dump.json"]);
    assert_eq!(missing.status.code(), Some(2));
    // Named once, with the cause once.
    assert_eq!(stderr(&missing).matches("/nonexistent/dump.json").count(), 1, "{}", stderr(&missing));
    assert_eq!(stderr(&missing).matches("No such file").count(), 1, "{}", stderr(&missing));
    for broken in [&garbage, &not_a_dump] {
        let name = broken.to_str().unwrap();
        assert_eq!(stderr(&helm_guard(&["scan", "--from-file", name])).matches(name).count(), 1, "{name}");
    }
}

#[test]
fn scan_names_an_undecodable_record_and_still_reports() {
    let dir = tempfile::tempdir().unwrap();
    let mut items = web(&[(1, "superseded"), (2, "deployed")]);
    items[1]["data"]["release"] = json!("!!!");
    let path = write_temp(&dir, "dump.json", &list(items));
    let output = helm_guard(&["scan", "--from-file", path.to_str().unwrap(), "-o", "json"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("Secret demo/sh.helm.release.v1.web.v2"), "{}", stderr(&output));
    let releases: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(releases[0]["anomalies"], json!(["undecodable-record"]));
}

#[test]
fn inspect_prints_a_summary_the_values_and_the_manifest() {
    let path = "tests/fixtures/admission/06-helm3-uninstall-purge/012-validate-update-secret-sh.helm.release.v1.cache.v2.json";
    let output = helm_guard(&["inspect", path, "--manifest"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "Secret cache/sh.helm.release.v1.cache.v2 (old object)\n  release:        cache/cache (secret)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("uninstalling") && text.contains("deployed"),
        "old and new object both shown: {text}"
    );
    assert!(text.contains("Secret cache/sh.helm.release.v1.cache.v2 (new object)\n"), "{text}");
    assert!(text.contains("--- manifest") && text.contains("kind: Deployment"), "{text}");

    let json = helm_guard(&["inspect", path, "-o", "json", "--values"]);
    let items: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1]["status"], "uninstalling");
    assert_eq!((items[0]["side"].as_str(), items[1]["side"].as_str()), (Some("old"), Some("new")));
    assert_eq!(items[1]["revision"], 2);
    // The values the release was upgraded with (`helm upgrade --set replicaCount=2`).
    assert_eq!(items[1]["values"], json!({"replicaCount": 2}));
}

#[test]
fn inspect_reads_stdin_and_refuses_a_gzip_bomb_by_name() {
    use std::io::Write;
    let mut bomb = helm4_secret();
    let zeros = vec![b' '; 8 * 1024 * 1024];
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&zeros).unwrap();
    let helm_b64 = base64_encode(&encoder.finish().unwrap());
    bomb["data"]["release"] = json!(base64_encode(helm_b64.as_bytes()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["inspect", "-", "--max-decoded-bytes", "1048576"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&serde_json::to_vec(&bomb).unwrap()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("sh.helm.release.v1.web.v3") && err.contains("more than 1048576 bytes"), "{err}");
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn audit_lists_the_webhook_decisions_of_a_real_audit_log() {
    let log = "tests/fixtures/audit/kube-apiserver-audit.jsonl";
    let output = helm_guard(&["audit", log, "-o", "json"]);
    assert_eq!(output.status.code(), Some(1), "denials found: {}", stderr(&output));
    let decisions: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(decisions.len(), 6, "the authorizer's own decisions are not the webhook's");
    let denied: Vec<(&str, &str, u64)> = decisions
        .iter()
        .filter(|d| d["decision"] == "denied")
        .map(|d| (d["verb"].as_str().unwrap(), d["name"].as_str().unwrap(), d["code"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        denied,
        vec![("create", "sh.helm.release.v1.job.v5", 403), ("delete", "sh.helm.release.v1.job.v4", 403)]
    );
    assert!(decisions.iter().all(|d| d["webhook"] == "validate.capture.local"));
    assert_eq!(decisions[0]["annotations"]["record"], "sh.helm.release.v1.job.v4");

    let text = stdout(&helm_guard(&["audit", log, "--denied"]));
    assert!(text.contains("2 decisions: 0 allowed, 2 denied, 0 warned"), "{text}");
    let none = helm_guard(&["audit", log, "--webhook", "records.helm-guard.io"]);
    assert_eq!(none.status.code(), Some(0));
    assert!(stdout(&none).contains("0 decisions"));

    // A log with one line that is not an audit event says so in good English.
    let dir = tempfile::tempdir().unwrap();
    let mut text = std::fs::read_to_string(log).unwrap();
    text.push_str("not an event\n");
    let torn = dir.path().join("torn.jsonl");
    std::fs::write(&torn, text).unwrap();
    let output = helm_guard(&["audit", torn.to_str().unwrap()]);
    assert!(stderr(&output).contains("1 line of"), "{}", stderr(&output));
    assert!(stderr(&output).contains("torn.jsonl is not an audit event"), "{}", stderr(&output));
}

#[test]
fn certs_writes_a_ca_and_a_serving_pair_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let args = ["certs", "--out", out.to_str().unwrap(), "--service", "helm-guard", "--namespace", "guard"];
    let output = helm_guard(&args);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).contains("helm-guard.guard.svc"));
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(out.join(file).exists(), "{file}");
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(out.join("tls.key")).unwrap().permissions().mode() & 0o777, 0o600);
    let again = helm_guard(&args);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("--force"));
}

#[test]
fn inspect_decodes_every_record_in_the_fixtures() {
    let mut records = 0;
    for path in admission_fixtures().into_iter().chain([fixture_path("snapshot/cluster-snapshot.json")]) {
        if path.to_string_lossy().contains("mutate-create-pod") {
            continue;
        }
        let output = helm_guard(&["inspect", path.to_str().unwrap(), "-o", "json"]);
        assert_eq!(output.status.code(), Some(0), "{}: {}", path.display(), stderr(&output));
        let items: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
        assert!(!items.is_empty());
        for item in &items {
            assert!(
                item["status"].is_string() && item["revision"].is_u64() && item["chart"] == "demo",
                "{item}"
            );
        }
        records += items.len();
    }
    assert!(records >= 50, "{records}");
}

/// `serve` on the snapshot with `--shutdown-delay delay`, its log lines, and its `serving` line.
fn serve_snapshot(
    dir: &std::path::Path,
    delay: &str,
) -> (std::process::Child, std::io::Lines<std::io::BufReader<std::process::ChildStderr>>, Value) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["serve", "--snapshot", SNAPSHOT, "--dev-certs"])
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--shutdown-delay", delay])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let serving: Value = lines
        .by_ref()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .find(|event| event["message"] == "serving")
        .expect("a JSON `serving` log line");
    (child, lines, serving)
}

#[test]
fn serve_starts_answers_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines, serving) = serve_snapshot(dir.path(), "0s");
    let metrics_addr = serving["metrics_addr"].as_str().unwrap().to_owned();
    let mut stream = std::net::TcpStream::connect(&metrics_addr).unwrap();
    use std::io::{Read, Write};
    write!(stream, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ready"), "{answer}");

    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("\"stopped\"")), "{rest:?}");
}

/// Ctrl-C at a terminal stops the guard without `--shutdown-delay` (SIGTERM keeps it: the
/// endpoints must drop the pod first).
#[test]
fn serve_stops_on_ctrl_c_without_the_shutdown_delay() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines, _) = serve_snapshot(dir.path(), "60s");
    let sent = std::time::Instant::now();
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{rest:?}");
    // Not the 60 s delay: the stop itself is quick.
    assert!(sent.elapsed() < std::time::Duration::from_secs(30), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("\"stopped\"")), "{rest:?}");
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    // `helm-guard inspect --manifest ... | head -1`: far more output than a pipe holds.
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    // The snapshot ten times over: some 220 KB of output, more than a pipe buffers.
    let once = fixture("snapshot/cluster-snapshot.json")["items"].as_array().unwrap().clone();
    let items: Vec<Value> = (0..10).flat_map(|_| once.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let dump = write_temp(&dir, "dump.json", &list(items));
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["inspect", "--manifest", "--values", dump.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(!first.is_empty());
    // The reader is gone (dropped above); the command must end on its own, without a panic.
    let output = child.wait_with_output().unwrap();
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(!errors.contains("panicked") && !errors.contains("Broken pipe"), "{errors}");
    assert!(output.status.code() == Some(0) || output.status.code() == Some(2), "{:?}", output.status);
}

fn yaml(output: &Output) -> Value {
    serde_saphyr::from_str(&stdout(output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

#[test]
fn empty_results_are_empty_arrays_and_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let empty_list = write_temp(&dir, "empty.json", &list(vec![]));
    let opaque_only = write_temp(
        &dir,
        "opaque.json",
        &list(vec![json!({"kind": "Secret", "type": "Opaque", "metadata": {"name": "x", "namespace": "y"}})]),
    );
    // A release named and not there is bad input instead (issue 60:
    // scan_of_a_named_release_that_is_not_there_fails_and_an_unreachable_cluster_is_not_a_finding).
    for (dump, filter) in [(SNAPSHOT, vec!["-n", "nosuch"])]
        .into_iter()
        .chain([empty_list.to_str().unwrap(), opaque_only.to_str().unwrap()].map(|d| (d, vec![])))
    {
        let mut args = vec!["scan", "--from-file", dump];
        args.extend(&filter);
        let json = helm_guard(&[args.as_slice(), &["-o", "json"]].concat());
        assert_eq!(json.status.code(), Some(0), "{dump} {filter:?}: {}", stderr(&json));
        assert_eq!(serde_json::from_slice::<Value>(&json.stdout).unwrap(), json!([]), "{dump} {filter:?}");
        let as_yaml = helm_guard(&[args.as_slice(), &["-o", "yaml"]].concat());
        assert_eq!((as_yaml.status.code(), yaml(&as_yaml)), (Some(0), json!([])), "{dump} {filter:?}");
        let text = helm_guard(&args);
        assert_eq!(text.status.code(), Some(0));
        assert!(stdout(&text).starts_with("No releases found in "), "{}", stdout(&text));
    }
    let text = stdout(&helm_guard(&["scan", "--from-file", SNAPSHOT, "-n", "nosuch"]));
    assert!(text.contains("namespace nosuch"), "the line says what was looked for: {text}");
}

#[test]
fn yaml_output_carries_what_json_does() {
    let review = "tests/fixtures/admission/06-helm3-uninstall-purge/012-validate-update-secret-sh.helm.release.v1.cache.v2.json";
    for args in [
        vec!["scan", "--from-file", SNAPSHOT, "--now", NOW],
        vec!["inspect", review],
        vec!["audit", "tests/fixtures/audit/kube-apiserver-audit.jsonl"],
    ] {
        let json = helm_guard(&[args.as_slice(), &["-o", "json"]].concat());
        let as_yaml = helm_guard(&[args.as_slice(), &["-o", "yaml"]].concat());
        assert_eq!(json.status.code(), as_yaml.status.code(), "{args:?}");
        let from_json: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert!(from_json.as_array().is_some_and(|a| !a.is_empty()), "{args:?}");
        assert_eq!(yaml(&as_yaml), from_json, "{args:?}");
    }
}

#[test]
fn scan_filters_combine_on_a_dump_as_on_the_cluster() {
    let releases = |extra: &[&str]| -> Vec<(String, String)> {
        let output =
            helm_guard(&[&["scan", "--from-file", SNAPSHOT, "--now", NOW, "-o", "json"], extra].concat());
        assert!(output.status.code().is_some_and(|c| c < 2), "{extra:?}: {}", stderr(&output));
        let items: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
        items
            .iter()
            .map(|r| (r["namespace"].as_str().unwrap().into(), r["release"].as_str().unwrap().into()))
            .collect()
    };
    let all = releases(&[]);
    assert_eq!(releases(&["-A"]), all);
    let demo = releases(&["-n", "demo"]);
    assert!(!demo.is_empty() && demo.len() < all.len());
    assert!(demo.iter().all(|(ns, _)| ns == "demo"), "{demo:?}");
    let (_, name) = &demo[0];
    assert_eq!(releases(&["-n", "demo", "--release", name]), vec![("demo".to_owned(), name.clone())]);

    let broken = helm_guard(&["scan", "--from-file", SNAPSHOT, "--now", NOW, "--broken", "-o", "json"]);
    assert_eq!(broken.status.code(), Some(1));
    let items: Vec<Value> = serde_json::from_slice(&broken.stdout).unwrap();
    assert_eq!(items.len(), 3, "the three releases that need attention");
    assert!(items.iter().all(|r| r["broken"] == true));

    let help = stdout(&helm_guard(&["scan", "--help"]));
    assert!(help.lines().next().unwrap().contains("in the cluster (or in a dump)"), "{help}");
}

#[test]
fn counts_are_in_words_a_person_would_write() {
    let dir = tempfile::tempdir().unwrap();
    let one = write_temp(&dir, "one.json", &list(web(&[(1, "deployed")])));
    let text = stdout(&helm_guard(&["scan", "--from-file", one.to_str().unwrap()]));
    assert!(text.contains("\n1 release, 1 healthy or uninstalled, 0 need attention"), "{text}");
    let log = "tests/fixtures/audit/kube-apiserver-audit.jsonl";
    let denied = stdout(&helm_guard(&["audit", log, "--denied", "--webhook", "validate.capture.local"]));
    assert!(denied.contains("\n2 decisions:"), "{denied}");
}

#[test]
fn errors_say_their_cause_once() {
    let missing = helm_guard(&["scan", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(missing.status.code(), Some(3), "the cluster cannot be reached: not a broken release");
    let err = stderr(&missing);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert_eq!(err.matches("/nonexistent/kubeconfig").count(), 1, "{err}");

    let opaque = json!({"kind": "Secret", "type": "Opaque", "metadata": {"name": "x", "namespace": "y"}});
    let dir = tempfile::tempdir().unwrap();
    let path = write_temp(&dir, "opaque.json", &opaque);
    let output = helm_guard(&["inspect", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("found 1 object: Secret y/x of type Opaque (no owner=helm label)"), "{err}");

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["serve", "--snapshot", SNAPSHOT, "--dev-certs"])
        .arg(dir.path().join("certs"))
        .args(["--listen", &busy_addr, "--metrics-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "a failure at run time, not bad input");
    let err = stderr(&output);
    assert!(err.contains(&format!("binding {busy_addr}: Address already in use")), "{err}");
}

/// Runs the command with a terminal on standard input, as a user at a shell prompt would.
fn with_terminal_stdin(args: &[&str]) -> Output {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&controller).unwrap();
    unlockpt(&controller).unwrap();
    let name = ptsname(&controller, Vec::new()).unwrap();
    let terminal = std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(args)
        .stdin(terminal)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A command that waits on the terminal would never end: give it ten seconds.
    for _ in 0..100 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    panic!("`helm-guard {}` waited on the terminal", args.join(" "));
}

#[test]
fn no_file_on_a_terminal_is_a_usage_error_not_a_silent_wait() {
    for (command, what) in [("inspect", "no FILE given"), ("audit", "no audit log given")] {
        let output = with_terminal_stdin(&[command]);
        assert_eq!(output.status.code(), Some(2), "{command}");
        let err = stderr(&output);
        assert!(err.contains(what) && err.contains("Usage: helm-guard"), "{command}: {err}");
    }
    // Piped, standard input is read without `-`.
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["inspect", "-o", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&serde_json::to_vec(&helm4_secret()).unwrap()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(serde_json::from_slice::<Vec<Value>>(&output.stdout).unwrap().len(), 1);
}

#[test]
fn certs_refuses_a_certificate_that_could_not_serve() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    for (flags, says) in [
        (vec!["--days", "0"], "0 is not in 1..=3650"),
        (vec!["--service", "Bad_Name!"], "`Bad_Name!` is not a DNS label"),
        (vec!["--namespace=-ns"], "`-ns` is not a DNS label"),
        (vec!["--san", "a..example.com"], "empty label"),
        (vec!["--san", "bad name!"], "`bad name!` is neither an IP address nor a DNS name"),
    ] {
        let output = helm_guard(&[&["certs", "--out", out.to_str().unwrap()], flags.as_slice()].concat());
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        assert!(stderr(&output).contains(says), "{flags:?}: {}", stderr(&output));
        assert!(!out.exists(), "{flags:?} wrote files");
    }
    let fine =
        helm_guard(&["certs", "--out", out.to_str().unwrap(), "--san", "*.example.com", "--san", "10.0.0.1"]);
    assert_eq!(fine.status.code(), Some(0), "{}", stderr(&fine));
}

/// An expired serving pair, as a forgotten rotation leaves it.
fn expired_pair(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, i64) {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let not_after = jiff::Timestamp::now().as_second() - 86_400;
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = std::time::SystemTime::UNIX_EPOCH
        .checked_add(std::time::Duration::from_secs(not_after as u64))
        .unwrap()
        .into();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path, not_after)
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn serve_warns_of_an_expired_certificate_reports_its_build_and_takes_sizes_with_units() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, not_after) = expired_pair(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["serve", "--snapshot", SNAPSHOT, "--tls-cert", cert.to_str().unwrap()])
        .args(["--tls-key", key.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0", "--shutdown-delay", "0s"])
        .args(["--max-body-bytes", "8MiB", "--max-decoded-bytes", "64 MiB", "--log-format", "text"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    let mut seen = Vec::new();
    let metrics_addr = loop {
        let line = lines.next().expect("a `serving` line");
        if let Some(rest) = line.strip_suffix("").and_then(|l| l.split(" metrics_addr=").nth(1)) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
        seen.push(line);
    };
    let metrics = http_get(&metrics_addr, "/metrics");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    seen.extend(lines);
    assert_eq!(child.wait().unwrap().code(), Some(0), "{seen:#?}");

    assert!(seen.iter().any(|l| l.contains("WARN") && l.contains("EXPIRED")), "{seen:#?}");
    assert!(seen.iter().all(|l| !l.contains('\u{1b}')), "no colour codes when not on a terminal: {seen:#?}");
    assert!(
        metrics.contains(&format!("\nhelm_guard_tls_certificate_expiry_seconds {not_after}\n")),
        "{metrics}"
    );
    let commit = git_commit();
    assert!(
        metrics.contains(&format!("commit=\"{commit}\"")) && metrics.contains("helm_guard_build_info{"),
        "{metrics}"
    );
}

/// The commit `--version` must name: this checkout's, or "unknown" outside git.
fn git_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| "unknown".to_owned(), |o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

#[test]
fn version_names_the_commit_and_completions_are_generated() {
    let version = stdout(&helm_guard(&["--version"]));
    assert!(
        version.starts_with(&format!(
            "helm-guard {} (commit {}, built ",
            env!("CARGO_PKG_VERSION"),
            git_commit()
        )),
        "{version}"
    );
    for shell in ["bash", "zsh", "fish"] {
        let output = helm_guard(&["completion", shell]);
        assert_eq!(output.status.code(), Some(0), "{shell}");
        let script = stdout(&output);
        assert!(
            script.contains("helm-guard") && script.contains("inspect") && script.contains("--from-file"),
            "{shell}"
        );
    }
    let bash = Command::new("bash")
        .args([
            "-c",
            &format!(
                "source <({} completion bash) && complete -p helm-guard",
                env!("CARGO_BIN_EXE_helm-guard")
            ),
        ])
        .output()
        .unwrap();
    assert!(stdout(&bash).contains("-F _helm__guard helm-guard"), "bash loads it: {}", stderr(&bash));
}

#[test]
fn every_command_shows_examples_and_its_exit_status() {
    let cli = helm_guard::command();
    let commands: Vec<&str> =
        cli.get_subcommands().filter(|c| !c.is_hide_set()).map(clap::Command::get_name).collect();
    assert!(commands.len() >= 11, "{commands:?}");
    for command in commands {
        let help = stdout(&helm_guard(&[command, "--help"]));
        let examples = help.split("Examples:\n").nth(1).unwrap_or_else(|| panic!("{command}: no examples"));
        let shown = examples.lines().take_while(|l| l.starts_with("  ")).count();
        assert!((2..=4).contains(&shown), "{command}: {shown} examples");
        assert!(help.contains("Exit status: 0 "), "{command}: no exit status");
    }
}

#[test]
fn man_pages_are_written_one_per_command_and_a_directory_that_cannot_be_made_is_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let output = helm_guard(&["man", out.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let mut pages: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for page in ["helm-guard.1", "helm-guard-scan.1", "helm-guard-serve.1", "helm-guard-restore.1"] {
        assert!(pages.iter().any(|p| p == page), "{page}: {pages:?}");
    }
    let scan = std::fs::read_to_string(out.join("helm-guard-scan.1")).unwrap();
    assert!(scan.contains(".TH helm-guard-scan 1"), "{scan}");
    assert!(scan.contains("recycle\\-bin\\-namespace"), "its flags are in it: {scan}");
    assert!(stdout(&output).contains(&format!("wrote {} man pages", pages.len())));

    // Under a file, no directory can be made: said, exit 3.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let failed = helm_guard(&["man", file.join("man1").to_str().unwrap()]);
    assert_eq!(failed.status.code(), Some(3));
    assert!(stderr(&failed).contains("writing man pages into"), "{}", stderr(&failed));
}

#[test]
fn serve_without_a_certificate_names_every_way_to_give_one() {
    let output = helm_guard(&["serve", "--snapshot", SNAPSHOT]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("--tls-cert") && err.contains("--tls-key") && err.contains("--dev-certs"), "{err}");
}

#[test]
fn serve_refuses_recycle_bin_bounds_that_would_evict_a_copy_just_kept() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().to_str().unwrap();
    let output = helm_guard(&[
        "serve",
        "--snapshot",
        SNAPSHOT,
        "--dev-certs",
        certs,
        "--recycle-max-release-bytes",
        "1MiB",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output)
            .contains("--recycle-max-release-bytes must be at least 2 MiB, the largest copy a record makes"),
        "{}",
        stderr(&output)
    );
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "refused before anything was made");
}

#[test]
fn audit_names_the_webhooks_it_saw_when_the_one_asked_for_is_absent() {
    let log = "tests/fixtures/audit/kube-apiserver-audit.jsonl";
    let output = helm_guard(&["audit", log, "--webhook", "nosuch", "-o", "json"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(serde_json::from_slice::<Value>(&output.stdout).unwrap(), json!([]));
    assert!(
        stderr(&output).contains("no decisions of webhook nosuch; ")
            && stderr(&output).contains("validate.capture.local"),
        "{}",
        stderr(&output)
    );
    let help = stdout(&helm_guard(&["audit", "--help"]));
    assert!(help.contains("Exit status: 0 when every decision listed allowed its request, 1 when"), "{help}");
}

#[test]
fn scan_repair_plan_gives_a_command_for_each_release_it_can_repair() {
    let dir = tempfile::tempdir().unwrap();
    let mut stuck = web(&[(1, "deployed"), (2, "pending-upgrade")]);
    // Stored (the upgrade began) long before NOW; the labels' times do not count (Helm copies
    // the install's `modifiedAt` onto every revision).
    for record in &mut stuck {
        record["metadata"]["creationTimestamp"] = json!("2025-11-24T16:00:00Z");
    }
    let mut items = stuck;
    items.extend(
        fixture("snapshot/cluster-snapshot.json")["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["metadata"]["namespace"] == "orphan")
            .cloned(),
    );
    let dump = write_temp(&dir, "dump.json", &list(items));
    let output = helm_guard(&["scan", "--from-file", dump.to_str().unwrap(), "--repair-plan", "--now", NOW]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.lines()
            .any(|l| l == "helm-guard repair web -n demo --apply   # revision 2 pending-upgrade -> failed"),
        "{text}"
    );
    assert!(
        text.contains("# orphan/app: orphaned-superseded\n#   the latest deployed revision was deleted"),
        "{text}"
    );
    let json = helm_guard(&[
        "scan",
        "--from-file",
        dump.to_str().unwrap(),
        "--repair-plan",
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    let plans: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(plans.iter().find(|p| p["release"] == "web").unwrap()["steps"][0]["to"], "failed");
}

#[test]
fn scan_writes_a_policy_report_per_namespace_with_a_result_per_release() {
    let output = helm_guard(&["scan", "--from-file", SNAPSHOT, "--now", NOW, "-o", "policyreport"]);
    assert_eq!(output.status.code(), Some(1), "broken releases found: {}", stderr(&output));
    let text = stdout(&output);
    let reports: Vec<Value> = text
        .split("\n---\n")
        .map(|document| serde_json::to_value(serde_saphyr::from_str::<Value>(document).unwrap()).unwrap())
        .collect();
    let namespaces: Vec<&str> =
        reports.iter().map(|r| r["metadata"]["namespace"].as_str().unwrap()).collect();
    assert_eq!(namespaces, ["demo", "orphan", "pending", "stuck"]);
    for report in &reports {
        assert_eq!(
            (report["apiVersion"].as_str(), report["kind"].as_str()),
            (Some("wgpolicyk8s.io/v1alpha2"), Some("PolicyReport"))
        );
    }
    // Every release of the snapshot, with its rule, outcome and severity, and scan's hint.
    let results: Vec<(&str, &str, &str, &str)> = reports
        .iter()
        .flat_map(|r| r["results"].as_array().unwrap())
        .map(|r| {
            let text = |key: &str| r[key].as_str().unwrap();
            (r["properties"]["release"].as_str().unwrap(), text("rule"), text("result"), text("severity"))
        })
        .collect();
    assert_eq!(
        results,
        [
            ("web", "failed", "warn", "medium"),
            ("app", "orphaned-superseded", "fail", "critical"),
            ("first", "pending-install", "pass", "info"),
            ("gone", "uninstalled", "pass", "info"),
            ("rb", "healthy", "pass", "info"),
            ("job", "healthy", "pass", "info"),
        ]
    );
    let orphan = &reports[1]["results"][0];
    assert!(orphan["message"].as_str().unwrap().ends_with("`helm rollback app 1 -n orphan`"), "{orphan}");
    assert_eq!(orphan["resources"][0]["name"], "sh.helm.release.v1.app.v1");
    assert_eq!(reports[2]["summary"]["pass"], 3);

    // In OpenReports' kinds, with the cluster's report of a namespace opted out, as the live
    // writer writes them.
    let mut dump: Value = serde_json::from_slice(&std::fs::read(SNAPSHOT).unwrap()).unwrap();
    dump["items"].as_array_mut().unwrap().push(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "lab", "labels": {"helm-guard.io/ignore": "true"}}}));
    let dir = tempfile::tempdir().unwrap();
    let with_namespace = dir.path().join("dump.json");
    std::fs::write(&with_namespace, dump.to_string()).unwrap();
    let open = helm_guard(&[
        "scan",
        "--from-file",
        with_namespace.to_str().unwrap(),
        "--now",
        NOW,
        "-o",
        "policyreport",
        "--report-api",
        "openreports",
    ]);
    let reports: Vec<Value> = stdout(&open)
        .split("\n---\n")
        .map(|document| serde_json::to_value(serde_saphyr::from_str::<Value>(document).unwrap()).unwrap())
        .collect();
    let kinds: Vec<&str> = reports.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Report", "Report", "Report", "Report", "ClusterReport"], "{}", stdout(&open));
    let cluster = &reports[4];
    assert_eq!(cluster["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(cluster["source"], "helm-guard");
    assert_eq!(
        (cluster["results"][0]["rule"].as_str(), cluster["results"][0]["properties"]["namespace"].as_str()),
        (Some("namespace-opted-out"), Some("lab"))
    );
    assert_eq!(cluster["summary"]["warn"], 1);

    // It writes nothing and reports releases only.
    let mixed = helm_guard(&["scan", "--from-file", SNAPSHOT, "-o", "policyreport", "--repair-plan"]);
    assert_eq!(mixed.status.code(), Some(2));
    assert!(stderr(&mixed).contains("does not go with"), "{}", stderr(&mixed));
}

/// Replicas agree one way: `--coordination` is still accepted as `watch` (manifests of earlier
/// versions), and the ways that are gone say so and what to do.
#[test]
fn only_the_one_agreement_protocol_is_accepted() {
    let parse = |value: &str| {
        helm_guard::command().try_get_matches_from([
            "helm-guard",
            "serve",
            "--snapshot",
            "x.json",
            "--coordination",
            value,
        ])
    };
    assert!(parse("watch").is_ok());
    for gone in ["lease", "none"] {
        let error = parse(gone).unwrap_err().to_string();
        assert!(
            error.contains(&format!("`{gone}` is no longer offered"))
                && error.contains("drop --coordination"),
            "{error}"
        );
    }
    let help = helm_guard::command()
        .try_get_matches_from(["helm-guard", "serve", "--help"])
        .unwrap_err()
        .to_string();
    assert!(!help.contains("--coordination"), "not in a user's help");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// `serve` as a user runs it, with a kubeconfig naming an API server (a stub): it lists, then
/// says it is ready.
async fn serve_with_a_kubeconfig_becomes_ready() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let items = fixture("snapshot/cluster-snapshot.json")["items"].as_array().unwrap().clone();
    let (server, _watches) = common::stub_apiserver::start_stub(items).await;
    let dir = tempfile::tempdir().unwrap();
    let config = common::stub_apiserver::kubeconfig(&dir, &server);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["serve", "--kubeconfig", config.to_str().unwrap(), "--dev-certs"])
        .arg(dir.path().join("certs"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--shutdown-delay", "0s"])
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut metrics_addr = None;
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(event) = serde_json::from_str::<Value>(&line)
            && event["message"] == "serving"
        {
            metrics_addr = event["metrics_addr"].as_str().map(str::to_owned);
            break;
        }
    }
    let metrics_addr = metrics_addr.expect("a `serving` log line");
    let readyz = || async {
        let mut stream = tokio::net::TcpStream::connect(&metrics_addr).await.unwrap();
        stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    };
    let ready = eventually(std::time::Duration::from_secs(5), || async {
        readyz().await.starts_with("HTTP/1.1 200")
    })
    .await;
    assert!(ready, "{}", readyz().await);
    child.kill().await.unwrap();
}

/// A CI step gating on one release (issue 60): a release that is not there is bad input (2), not
/// an empty answer (0); a cluster that cannot be reached is a failure (3), not a broken release (1).
#[test]
fn scan_of_a_named_release_that_is_not_there_fails_and_an_unreachable_cluster_is_not_a_finding() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_temp(&dir, "dump.json", &list(web(&[(1, "superseded"), (2, "deployed")])));
    let missing =
        helm_guard(&["scan", "--from-file", path.to_str().unwrap(), "--release", "no-such", "-o", "json"]);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("release no-such not found"), "{}", stderr(&missing));
    let found =
        helm_guard(&["scan", "--from-file", path.to_str().unwrap(), "--release", "web", "-o", "json"]);
    assert_eq!(found.status.code(), Some(0), "{}", stderr(&found));
    let unreachable = helm_guard(&["scan", "--kubeconfig", "/nonexistent/kubeconfig", "--release", "web"]);
    assert_eq!(unreachable.status.code(), Some(3), "{}", stderr(&unreachable));
}
