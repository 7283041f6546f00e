//! Helpers of the opt-in end-to-end suites against a real API server.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

/// A guard in this process watching the cluster in KUBECONFIG, ready, and a fresh namespace name.
pub struct LiveGuard {
    pub client: Client,
    pub namespace: String,
    /// Where the API server reaches the guard.
    pub url: String,
    pub ca_pem: String,
    pub index: std::sync::Arc<helm_guard::cluster::ReleaseIndex>,
    pub running: helm_guard::server::Running,
    pub dir: tempfile::TempDir,
}

/// Starts the guard on `$HELM_GUARD_E2E_PORT + port_offset` (default 9443) for the API server to
/// reach at `$HELM_GUARD_E2E_HOST` (default 127.0.0.1); the namespace is `PREFIX-<millis>`.
pub async fn start_guard(prefix: &str, port_offset: u16) -> LiveGuard {
    start_guard_with(prefix, port_offset, helm_guard::policy::PolicyConfig::default()).await
}

/// [`start_guard`] under `config`.
pub async fn start_guard_with(
    prefix: &str,
    port_offset: u16,
    config: helm_guard::policy::PolicyConfig,
) -> LiveGuard {
    // Deletions agreed through Leases in the test's namespace, as two replicas would.
    start_guard_live(prefix, port_offset, config, |namespace| {
        live_options(Some(namespace), Default::default())
    })
    .await
}

/// What [`start_guard`] runs: Leases (and the recycle bin, bounded by `bounds`) in
/// `guard_namespace` when given, Events on.
pub fn live_options(
    guard_namespace: Option<&str>,
    bounds: helm_guard::live::BinBounds,
) -> helm_guard::live::LiveOptions {
    helm_guard::live::LiveOptions {
        tombstone_ttl: std::time::Duration::from_secs(30),
        claims_namespace: guard_namespace.map(str::to_owned),
        claim_keep_after_deletion: std::time::Duration::from_secs(7),
        fence_namespace: guard_namespace.map(str::to_owned),
        read_ahead: true,
        identity: "e2e".to_owned(),
        emit_events: true,
        recycle_bin: guard_namespace
            .map(|namespace| helm_guard::live::RecycleOptions { namespace: namespace.to_owned(), bounds }),
        unlock_abandoned: false,
        policy_reports: None,
    }
}

/// [`start_guard`] under `config`, its live parts as `options` makes them for the test's
/// namespace.
pub async fn start_guard_live(
    prefix: &str,
    port_offset: u16,
    config: helm_guard::policy::PolicyConfig,
    options: impl FnOnce(&str) -> helm_guard::live::LiveOptions,
) -> LiveGuard {
    use std::time::Duration;
    let client = Client::try_default().await.expect("a cluster in KUBECONFIG");
    let suffix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 1_000_000;
    let host = std::env::var("HELM_GUARD_E2E_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port: u16 =
        std::env::var("HELM_GUARD_E2E_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(9443) + port_offset;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("0.0.0.0:{port}").parse().unwrap();
    let names = [host.clone(), "localhost".to_owned()];
    let namespace = format!("{prefix}-{suffix}");
    let (running, index, ca_pem) = super::guard::start_live_with(
        client.clone(),
        config,
        listen,
        &names,
        dir.path(),
        options(&namespace),
    )
    .await;
    let ready = super::eventually(Duration::from_secs(30), || async { index.is_ready() }).await;
    assert!(ready, "the watchers listed the cluster within 30 s");
    LiveGuard { client, namespace, url: format!("https://{host}:{port}"), ca_pem, index, running, dir }
}

/// Webhook configurations first (so nothing stays guarded by a guard that is gone), then the
/// namespace.
pub async fn cleanup(client: &Client, namespace: &str, namespace_checked: bool) {
    let name = format!("helm-guard-e2e-{namespace}");
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    if !namespace_checked {
        let _ = Api::<Namespace>::all(client.clone()).delete(namespace, &DeleteParams::default()).await;
    }
}

/// The shipped manifests/webhooks.yaml, scoped to `namespace` (label `helm-guard-e2e`) and
/// pointed at `urls`: with one URL each webhook goes there; with two each webhook is split in two,
/// one per URL, by `matchConditions` (consecutive revisions, and an object's update and its
/// deletion, go to different ones: CEL has no request uid to split on).
pub fn webhook_configurations(namespace: &str, urls: &[String], ca_pem: &str) -> Vec<Value> {
    use base64::Engine as _;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/webhooks.yaml")).unwrap();
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    documents
        .into_iter()
        .filter(|d| !d.is_null())
        .map(|mut configuration| {
            configuration["metadata"] = json!({"name": format!("helm-guard-e2e-{namespace}")});
            let mut webhooks = Vec::new();
            for webhook in configuration["webhooks"].as_array().unwrap() {
                for (i, url) in urls.iter().enumerate() {
                    let mut webhook = webhook.clone();
                    let path = webhook["clientConfig"]["service"]["path"].as_str().unwrap().to_owned();
                    webhook["clientConfig"] = json!({"url": format!("{url}{path}"), "caBundle": ca_bundle});
                    webhook["namespaceSelector"] = json!({"matchLabels": {"helm-guard-e2e": namespace}});
                    if urls.len() == 2 {
                        webhook["name"] = json!(format!("r{i}.{}", webhook["name"].as_str().unwrap()));
                        let mine = if i == 0 { "==" } else { "!=" };
                        let expression = format!(
                            "request.name.matches('[02468]$') {mine} (request.operation == 'DELETE')"
                        );
                        let mut conditions =
                            webhook["matchConditions"].as_array().cloned().unwrap_or_default();
                        conditions.push(json!({"name": "replica", "expression": expression}));
                        webhook["matchConditions"] = Value::Array(conditions);
                    }
                    webhooks.push(webhook);
                }
            }
            configuration["webhooks"] = Value::Array(webhooks);
            configuration
        })
        .collect()
}

/// Registers the shipped manifests/webhooks.yaml, pointed at the guard in this process and scoped
/// to the test namespace, so the real configurations are what the API server uses.
pub async fn register_webhooks(client: &Client, namespace: &str, url: &str, ca_pem: &str) {
    for configuration in webhook_configurations(namespace, &[url.to_owned()], ca_pem) {
        match configuration["kind"].as_str() {
            Some("ValidatingWebhookConfiguration") => {
                Api::<ValidatingWebhookConfiguration>::all(client.clone())
                    .create(&PostParams::default(), &serde_json::from_value(configuration).unwrap())
                    .await
                    .unwrap();
            }
            Some("MutatingWebhookConfiguration") => {
                Api::<MutatingWebhookConfiguration>::all(client.clone())
                    .create(&PostParams::default(), &serde_json::from_value(configuration).unwrap())
                    .await
                    .unwrap();
            }
            other => panic!("unexpected kind {other:?} in manifests/webhooks.yaml"),
        }
    }
}

/// Waits for a child process: inside a multi-threaded Tokio runtime (where the guard under test
/// is served) the wait leaves the other workers running.
fn waiting<T>(wait: impl FnOnce() -> T) -> T {
    let in_runtime = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if in_runtime { tokio::task::block_in_place(wait) } else { wait() }
}

/// Runs a command-line tool (`kubectl`, `helm`, `git`) to its end.
pub fn output(command: &mut std::process::Command) -> std::process::Output {
    waiting(|| command.output().unwrap())
}

/// [`output`] of `args[0]` with the rest as its arguments.
pub fn run(args: &[&str]) -> std::process::Output {
    output(std::process::Command::new(args[0]).args(&args[1..]))
}

/// What a command printed, stdout then stderr, for assertion messages.
pub fn said(output: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `kubectl apply` of one object; fails the test with kubectl's words when it is refused.
pub fn kubectl_apply(object: &Value) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("kubectl")
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(object.to_string().as_bytes()).unwrap();
    let done = waiting(|| child.wait_with_output().unwrap());
    assert!(done.status.success(), "kubectl apply of a {}: {}", object["kind"], said(&done));
}

/// `kubectl ARGS -o json`, which must succeed.
pub fn kubectl_json(args: &[&str]) -> Value {
    let mut all = vec!["kubectl"];
    all.extend(args);
    all.extend(["-o", "json"]);
    let done = run(&all);
    assert!(done.status.success(), "{all:?}: {}", said(&done));
    serde_json::from_slice(&done.stdout).unwrap()
}

/// The guard's `/metrics`, as Prometheus scrapes it.
pub fn metrics_of(running: &helm_guard::server::Running) -> String {
    let done = run(&["curl", "-sf", &format!("http://{}/metrics", running.metrics_addr)]);
    assert!(done.status.success(), "{}", said(&done));
    String::from_utf8(done.stdout).unwrap()
}
