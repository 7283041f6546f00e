//! Helm's other writers on a real API server, as the end-to-end suites replay them: the storage
//! calls of Rancher Fleet's agent, Flux's helm-controller and helm-mapkubeapis (read from their
//! source; each function names where), made with kubectl as those writers' own identities.

use std::process::Output;

use serde_json::{Value, json};

use super::cluster::{kubectl_apply, run, said};

/// Fleet's agent downstream, Flux's helm-controller, klipper-helm's job: (user, group).
pub const FLEET_AGENT: (&str, &str) =
    ("system:serviceaccount:cattle-fleet-system:fleet-agent", "system:serviceaccounts:cattle-fleet-system");
/// An account Fleet's agent impersonates on Rancher's own cluster (`impersonate.go`: always one
/// of its own namespace's).
pub const FLEET_IMPERSONATED: (&str, &str) = (
    "system:serviceaccount:cattle-fleet-local-system:fleet-default",
    "system:serviceaccounts:cattle-fleet-local-system",
);
pub const FLUX: (&str, &str) =
    ("system:serviceaccount:flux-system:helm-controller", "system:serviceaccounts:flux-system");
/// klipper-helm's job runs as helm-controller's `helm-<chart>` account in kube-system.
pub const KLIPPER: (&str, &str) =
    ("system:serviceaccount:kube-system:helm-web", "system:serviceaccounts:kube-system");

const WRITERS: [(&str, &str); 4] = [FLEET_AGENT, FLEET_IMPERSONATED, FLUX, KLIPPER];

/// Lets the writers' accounts write records (Fleet's and Flux's are cluster admins): the
/// ClusterRoleBindings `helm-guard-e2e-writer-N`, shared by every suite that runs at once and
/// left in place (a test cluster's).
pub fn bind() {
    for (i, (_, group)) in WRITERS.into_iter().enumerate() {
        kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("helm-guard-e2e-writer-{i}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}));
    }
}

/// `kubectl` as `who` (user, group).
pub fn kubectl_as(who: (&str, &str), args: &[&str]) -> Output {
    let (user, group) = who;
    let mut all = vec!["kubectl", "--as", user, "--as-group", group, "--as-group", "system:serviceaccounts"];
    all.extend(args);
    run(&all)
}

/// `secret` or `configmap`: the kind of records of `HELM_DRIVER`.
pub fn records_kind(driver: &str) -> &'static str {
    if driver.starts_with("configmap") { "configmap" } else { "secret" }
}

/// The release's record objects, in the order the API lists them.
pub fn records(kind: &str, release: &str, namespace: &str) -> Vec<Value> {
    let selector = format!("owner=helm,name={release}");
    let done = run(&["kubectl", "get", kind, "-n", namespace, "-l", &selector, "-o", "json"]);
    assert!(done.status.success(), "{}", said(&done));
    let list: Value = serde_json::from_slice(&done.stdout).unwrap();
    let kind = if kind == "configmap" { "ConfigMap" } else { "Secret" };
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let mut object = item.clone();
            object["kind"] = json!(kind);
            object["apiVersion"] = json!("v1");
            object
        })
        .collect()
}

/// The release's latest record.
pub fn latest_record(kind: &str, release: &str, namespace: &str) -> Option<Value> {
    let mut all = records(kind, release, namespace);
    all.sort_by_key(|r| super::release_json(r)["version"].as_u64().unwrap());
    all.pop()
}

/// The object Helm's drivers write for `release` (`newSecretsObject`, `newConfigMapsObject`):
/// labels and data; no resourceVersion (their `Update` is unconditional), no annotations.
pub fn helm_object(record: &Value, release: &Value, labels: Value) -> Value {
    let mut object = json!({
        "apiVersion": "v1",
        "kind": record["kind"],
        "metadata": {"name": record["metadata"]["name"], "namespace": record["metadata"]["namespace"], "labels": labels},
        "data": {"release": ""},
    });
    if record["kind"] == "Secret" {
        object["type"] = record["type"].clone();
    }
    super::with_release_json(object, release)
}

pub fn now() -> String {
    jiff::Timestamp::now().as_second().to_string()
}

/// `kubectl replace` (an UPDATE) or `kubectl create` of `object` as `who` (else as the admin).
pub fn write(who: Option<(&str, &str)>, verb: &str, object: &Value) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("record.json");
    std::fs::write(&path, object.to_string()).unwrap();
    let args = [verb, "-f", path.to_str().unwrap()];
    match who {
        Some(who) => kubectl_as(who, &args),
        None => run(&[&["kubectl"], &args[..]].concat()),
    }
}

/// Storage `Update` of `record` to `status` (and `description`, when given), as Helm's drivers
/// write it: the payload status and the `status` label together, `modifiedAt` the time.
pub fn set_status(who: (&str, &str), record: &Value, status: &str, description: Option<&str>) -> Output {
    let mut payload = super::release_json(record);
    payload["info"]["status"] = json!(status);
    if let Some(description) = description {
        payload["info"]["description"] = json!(description);
    }
    let mut labels = record["metadata"]["labels"].clone();
    labels["status"] = json!(status);
    labels["modifiedAt"] = json!(now());
    write(Some(who), "replace", &helm_object(record, &payload, labels))
}

/// Storage `Create` of `record` as revision `revision` with `status` and `description`.
pub fn create_revision(
    who: (&str, &str),
    record: &Value,
    revision: u64,
    status: &str,
    description: &str,
) -> Output {
    let mut payload = super::release_json(record);
    payload["version"] = json!(revision);
    payload["info"]["status"] = json!(status);
    payload["info"]["description"] = json!(description);
    let mut labels = record["metadata"]["labels"].clone();
    labels["status"] = json!(status);
    labels["version"] = json!(revision.to_string());
    labels["createdAt"] = json!(now());
    labels.as_object_mut().unwrap().remove("modifiedAt");
    let mut object = helm_object(record, &payload, labels);
    let release = payload["name"].as_str().unwrap();
    object["metadata"]["name"] = json!(format!("sh.helm.release.v1.{release}.v{revision}"));
    write(Some(who), "create", &object)
}

/// What a writer's calls said, and whether each succeeded.
#[derive(Default)]
struct Calls {
    said: String,
}

impl Calls {
    /// Notes a call; whether it succeeded.
    fn ok(&mut self, done: &Output) -> bool {
        self.said += &said(done);
        done.status.success()
    }

    fn failed(self) -> (bool, String) {
        (false, self.said)
    }

    fn done(self) -> (bool, String) {
        (true, self.said)
    }
}

/// Fleet's `deleteHistory` (`internal/helmdeployer/delete.go`): `cfg.Releases.Delete` of each
/// record in the order the API lists them.
pub fn fleet_forget(who: (&str, &str), kind: &str, release: &str, namespace: &str) -> (bool, String) {
    let mut calls = Calls::default();
    for record in records(kind, release, namespace) {
        let name = record["metadata"]["name"].as_str().unwrap();
        if !calls.ok(&kubectl_as(who, &["delete", kind, name, "-n", namespace])) {
            return calls.failed();
        }
    }
    calls.done()
}

/// One record by name.
fn record(kind: &str, namespace: &str, name: &str) -> Value {
    let done = run(&["kubectl", "get", kind, name, "-n", namespace, "-o", "json"]);
    assert!(done.status.success(), "{}", said(&done));
    let mut object: Value = serde_json::from_slice(&done.stdout).unwrap();
    object["kind"] = json!(if kind == "configmap" { "ConfigMap" } else { "Secret" });
    object
}

/// Fleet's drift correction of a deployed release whose rollback fails applying its manifest,
/// as storage calls (Helm 4.1 `rollback.go` 227-241 through Fleet's SDK: the pending-rollback
/// revision stored, the revision it started from superseded, the new one failed with a
/// description that starts "Rollback"), then Fleet's `removeFailedRollback` (`rollback.go`):
/// the failed revision deleted, the one it started from written back as read before.
pub fn fleet_failed_rollback(kind: &str, release: &str, namespace: &str) -> (bool, String) {
    let Some(current) = latest_record(kind, release, namespace) else { return (true, String::new()) };
    let payload = super::release_json(&current);
    if payload["info"]["status"] != "deployed" {
        return (true, String::new());
    }
    let (current_name, revision) =
        (current["metadata"]["name"].as_str().unwrap(), payload["version"].as_u64().unwrap() + 1);
    let failed_name = format!("sh.helm.release.v1.{release}.v{revision}");
    let mut calls = Calls::default();
    if !calls.ok(&create_revision(FLEET_AGENT, &current, revision, "pending-rollback", "Rollback to e2e"))
        || !calls.ok(&set_status(FLEET_AGENT, &record(kind, namespace, current_name), "superseded", None))
    {
        return calls.failed();
    }
    let failed = record(kind, namespace, &failed_name);
    let description = format!("Rollback \"{release}\" failed: e2e");
    if !calls.ok(&set_status(FLEET_AGENT, &failed, "failed", Some(&description)))
        || !calls.ok(&kubectl_as(FLEET_AGENT, &["delete", kind, &failed_name, "-n", namespace]))
    {
        return calls.failed();
    }
    let mut labels = current["metadata"]["labels"].clone();
    labels["modifiedAt"] = json!(now());
    if !calls.ok(&write(Some(FLEET_AGENT), "replace", &helm_object(&current, &payload, labels))) {
        return calls.failed();
    }
    calls.done()
}

/// Flux's unlock (`internal/reconcile/unlock.go`): a pending latest marked failed.
pub fn flux_unlock(kind: &str, release: &str, namespace: &str) -> (bool, String) {
    let Some(latest) = latest_record(kind, release, namespace) else { return (true, String::new()) };
    let status = super::release_json(&latest)["info"]["status"].as_str().unwrap().to_owned();
    if !status.starts_with("pending-") {
        return (true, String::new());
    }
    let mut calls = Calls::default();
    let description = format!("Release unlocked from stale '{status}' state");
    if !calls.ok(&set_status(FLUX, &latest, "failed", Some(&description))) {
        return calls.failed();
    }
    calls.done()
}

/// helm-mapkubeapis (`pkg/v3/release.go` `updateRelease`, which klipper-helm runs before every
/// upgrade): the latest, whatever its status, superseded, then the mapped revision stored
/// deployed.
pub fn map_kube_apis(kind: &str, release: &str, namespace: &str) -> (bool, String) {
    let Some(latest) = latest_record(kind, release, namespace) else { return (true, String::new()) };
    let payload = super::release_json(&latest);
    let revision = payload["version"].as_u64().unwrap() + 1;
    let mut calls = Calls::default();
    let mapped = "Kubernetes deprecated API upgrade - DO NOT rollback from this version";
    if !calls.ok(&set_status(KLIPPER, &latest, "superseded", None))
        || !calls.ok(&create_revision(KLIPPER, &latest, revision, "deployed", mapped))
    {
        return calls.failed();
    }
    calls.done()
}
