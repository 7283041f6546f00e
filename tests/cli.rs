//! The `inspect` and `scan` commands as a user runs them.

mod common;

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

#[test]
fn scan_json_has_the_documented_keys_and_exit_1_for_broken_releases() {
    let output = helm_guard(&["scan", "--from-file", SNAPSHOT, "-o", "json", "--now", NOW]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let releases: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(releases.len(), 6);
    for release in &releases {
        for key in ["namespace", "release", "driver", "state", "revision", "status", "anomalies"] {
            assert!(release.get(key).is_some(), "{key} missing in {release}");
        }
        assert_eq!(release["driver"], "secret");
        assert!(release["anomalies"].is_array());
    }
    let app = releases.iter().find(|r| r["release"] == "app").unwrap();
    assert_eq!((app["state"].as_str(), app["revision"].as_u64()), (Some("orphaned-superseded"), Some(1)));
}

#[test]
fn scan_text_prints_one_line_per_release_and_a_summary() {
    let output = helm_guard(&["scan", "--from-file", SNAPSHOT, "--now", NOW]);
    let text = stdout(&output);
    assert!(text.starts_with("NAMESPACE"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("orphan")
            && l.contains("orphaned-superseded")
            && l.contains("helm upgrade"))
    );
    assert!(text.contains("6 releases, 3 healthy or uninstalled, 3 need attention"), "{text}");
}

#[test]
fn scan_exits_0_when_every_release_is_healthy_and_reads_yaml_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = list(history(&helm4_secret(), &[(1, "superseded"), (2, "deployed")]));
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

    let no_records = write_temp(
        &dir,
        "empty.json",
        &list(vec![json!({"kind": "Secret", "type": "Opaque", "metadata": {"name": "x"}})]),
    );
    let output = helm_guard(&["scan", "--from-file", no_records.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("no Helm release records"), "{}", stderr(&output));

    let missing = helm_guard(&["scan", "--from-file", "/nonexistent/dump.json"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("/nonexistent/dump.json"));
}

#[test]
fn scan_names_an_undecodable_record_and_still_reports() {
    let dir = tempfile::tempdir().unwrap();
    let mut items = history(&helm4_secret(), &[(1, "superseded"), (2, "deployed")]);
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
            "Secret cache/sh.helm.release.v1.cache.v2\n  release:        cache/cache (secret)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("uninstalling") && text.contains("deployed"),
        "old and new object both shown: {text}"
    );
    assert!(text.contains("--- manifest") && text.contains("kind: Deployment"), "{text}");

    let json = helm_guard(&["inspect", path, "-o", "json", "--values"]);
    let items: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1]["status"], "uninstalling");
    assert_eq!(items[1]["revision"], 2);
    assert!(items[1].get("values").is_some());
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

#[test]
fn serve_starts_answers_and_exits_cleanly_on_sigterm() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(["serve", "--snapshot", SNAPSHOT, "--dev-certs"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--shutdown-delay", "0s"])
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
