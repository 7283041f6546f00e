//! The Helm plugin's launcher (plugin/), run as Helm runs it: Helm's namespace and kube context
//! in HELM_NAMESPACE and HELM_KUBECONTEXT, helm-guard found on PATH. Installing it into real
//! Helm 3 and Helm 4 is checked by tests/e2e_helm.rs.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const SNAPSHOT: &str = "tests/fixtures/snapshot/cluster-snapshot.json";

fn launcher(args: &[&str], env: &[(&str, &str)], with_binary: bool) -> Output {
    let plugin_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/plugin");
    let binary_dir = Path::new(env!("CARGO_BIN_EXE_helm-guard")).parent().unwrap();
    let path = if with_binary {
        format!("{}:/usr/bin:/bin", binary_dir.display())
    } else {
        "/usr/bin:/bin".to_owned()
    };
    Command::new(format!("{plugin_dir}/helm-guard.sh"))
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("HELM_PLUGIN_DIR", plugin_dir)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn namespaces(output: &Output) -> Vec<String> {
    let reports: Vec<Value> = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    reports.iter().map(|r| r["namespace"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn the_plugin_manifest_runs_the_launcher() {
    let manifest: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/plugin/plugin.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["name"], "guard", "`helm guard ...`");
    assert_eq!(manifest["command"], "$HELM_PLUGIN_DIR/helm-guard.sh");
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"), "the plugin's version is the binary's");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(concat!(env!("CARGO_MANIFEST_DIR"), "/plugin/helm-guard.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o111, 0, "the launcher is executable");
}

#[test]
fn helms_namespace_applies_unless_every_namespace_is_asked_for() {
    let scan = ["scan", "--from-file", SNAPSHOT, "-o", "json"];
    let in_demo = launcher(&scan, &[("HELM_NAMESPACE", "demo")], true);
    let seen = namespaces(&in_demo);
    assert!(!seen.is_empty() && seen.iter().all(|ns| ns == "demo"), "{seen:?}");
    let all = launcher(&[&scan[..], &["-A"]].concat(), &[("HELM_NAMESPACE", "demo")], true);
    assert!(namespaces(&all).iter().any(|ns| ns != "demo"));
}

#[test]
fn helms_kube_context_is_passed_on() {
    let output = launcher(
        &["scan"],
        &[
            ("HELM_NAMESPACE", "demo"),
            ("HELM_KUBECONTEXT", "nosuch"),
            ("KUBECONFIG", "/nonexistent/kubeconfig"),
        ],
        true,
    );
    assert_eq!(output.status.code(), Some(3), "the cluster cannot be reached: a failure at run time");
    // The context reached helm-guard: it reads the kubeconfig to find it.
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("/nonexistent/kubeconfig"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_missing_binary_or_command_is_said_clearly() {
    let output = launcher(&["scan"], &[("HELM_NAMESPACE", "demo")], false);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("helm-guard binary, and there is none on PATH"));
    let output = launcher(&["nosuch"], &[], true);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("unknown command \"nosuch\" for \"helm guard\"")
    );
    let help = launcher(&[], &[], true);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("helm guard repair RELEASE [--apply]"));
}

#[test]
fn helm_guard_restore_reaches_the_restore_command_with_helms_namespace() {
    let help = launcher(&[], &[], true);
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("helm guard restore RELEASE [--revision N] [--apply]")
    );
    // The launcher passes `restore` on to helm-guard (its help, with Helm's namespace added).
    let output = launcher(&["restore", "web", "--help"], &[("HELM_NAMESPACE", "demo")], true);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("Bring back records of a release from the guard's recycle bin"), "{text}");
    assert!(text.contains("--guard-namespace"), "{text}");
}

#[test]
fn helm_guard_forget_reaches_the_forget_command_with_helms_namespace() {
    let help = launcher(&[], &[], true);
    assert!(String::from_utf8_lossy(&help.stdout).contains("helm guard forget RELEASE [--apply]"));
    let output = launcher(&["forget", "web", "--help"], &[("HELM_NAMESPACE", "demo")], true);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("Delete a release's whole history and keep its resources"), "{text}");
    assert!(text.contains("helm-guard restore RELEASE -n NAMESPACE --apply"), "{text}");
}
