//! The helm-install pod mutation of POLICY.md "Mutating".

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use crate::release::{Classification, Driver, ReleaseState};

/// The label the helm-controller puts on the pods of its jobs.
pub const CHART_LABEL: &str = "helmcharts.helm.cattle.io/chart";
/// The release's state, as the guard saw it.
pub const STATE_ANNOTATION: &str = "helm-guard.io/release-state";
/// The release's latest revision.
pub const REVISION_ANNOTATION: &str = "helm-guard.io/release-revision";
/// What the pod's `klipper-helm` will do.
pub const ACTION_ANNOTATION: &str = "helm-guard.io/action";
/// What the guard rewrote (`install`), when it rewrote the pod's command.
pub const REWRITTEN_ANNOTATION: &str = "helm-guard.io/rewritten-from";

/// The first argument the helm-controller gives the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodCommand {
    /// `install`: install or upgrade the chart.
    Install,
    /// `delete`: uninstall the chart.
    Delete,
}

/// A pod the K3s/RKE2 helm-controller made to install or delete a chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmInstallPod {
    /// Index of the container that runs klipper-helm.
    pub container: usize,
    /// The release (env `NAME`).
    pub release: String,
    /// The release's namespace (env `TARGET_NAMESPACE`, else the pod's).
    pub namespace: String,
    /// Helm's driver (env `HELM_DRIVER`).
    pub driver: Driver,
    /// What the pod was asked to do.
    pub command: PodCommand,
}

/// What the rules read of a pod: its metadata, and of its spec the containers' arguments and
/// environment.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Pod {
    #[serde(default)]
    /// The pod's metadata.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// The pod's spec, as far as it is read.
    pub spec: PodSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
/// The containers of a pod's spec.
pub struct PodSpec {
    #[serde(default)]
    /// The pod's containers.
    pub containers: Vec<Container>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
/// The arguments and environment of a container.
pub struct Container {
    #[serde(default)]
    /// The container's arguments.
    pub args: Vec<String>,
    #[serde(default)]
    /// The container's environment.
    pub env: Vec<EnvVar>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
/// One environment variable.
pub struct EnvVar {
    /// Its name.
    pub name: String,
    /// Absent for a variable set with `valueFrom`.
    #[serde(default)]
    pub value: Option<String>,
}

impl HelmInstallPod {
    /// Recognises a helm-install pod: the chart label, a container with env `NAME` and first
    /// argument `install` or `delete`. `None` for any other pod, or a driver Helm would refuse.
    pub fn from_pod(pod: &Pod, request_namespace: &str) -> Option<HelmInstallPod> {
        pod.metadata.labels.as_ref()?.get(CHART_LABEL)?;
        pod.spec.containers.iter().enumerate().find_map(|(index, container)| {
            let command = match container.args.first()?.as_str() {
                "install" => PodCommand::Install,
                "delete" => PodCommand::Delete,
                _ => return None,
            };
            let env = |name: &str| -> Option<&str> {
                container.env.iter().find(|e| e.name == name)?.value.as_deref()
            };
            let release = env("NAME").filter(|n| !n.is_empty())?;
            let namespace = env("TARGET_NAMESPACE")
                .filter(|n| !n.is_empty())
                .or(pod.metadata.namespace.as_deref())
                .unwrap_or(request_namespace);
            Some(HelmInstallPod {
                container: index,
                release: release.to_owned(),
                namespace: namespace.to_owned(),
                driver: Driver::from_helm_driver(env("HELM_DRIVER").unwrap_or_default())?,
                command,
            })
        })
    }
}

/// Whether helm-guard already annotated this pod (a reinvocation, or a pod made from a mutated
/// template): it is not patched twice.
pub fn already_annotated(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(STATE_ANNOTATION))
}

/// What to do to the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    /// Annotations to add.
    pub annotations: BTreeMap<String, String>,
    /// Replace the first argument `install` with `upgrade`.
    pub rewrite_to_upgrade: bool,
    /// What the pod will do, as the action annotation says it.
    pub action: &'static str,
}

/// Plans the mutation from the release's classification.
pub fn plan(pod: &HelmInstallPod, release: &Classification) -> PodPlan {
    let rewrite_to_upgrade =
        release.state == ReleaseState::OrphanedSuperseded && pod.command == PodCommand::Install;
    // What klipper-helm's entry script does with each state (PROBLEM.md), after the rewrite.
    let action = match (pod.command, release.state) {
        (PodCommand::Delete, _) => "delete",
        (PodCommand::Install, _) if rewrite_to_upgrade => "upgrade",
        (PodCommand::Install, ReleaseState::Healthy) => "upgrade",
        (
            PodCommand::Install,
            ReleaseState::PendingInstall | ReleaseState::PendingUpgrade | ReleaseState::PendingRollback,
        ) => "reset-pending-and-retry",
        (PodCommand::Install, ReleaseState::Failed) => "reinstall",
        (PodCommand::Install, _) => "install",
    };
    let mut annotations = BTreeMap::from([
        (STATE_ANNOTATION.to_owned(), release.state.as_str().to_owned()),
        (ACTION_ANNOTATION.to_owned(), action.to_owned()),
    ]);
    if let Some(revision) = release.revision {
        annotations.insert(REVISION_ANNOTATION.to_owned(), revision.to_string());
    }
    if rewrite_to_upgrade {
        annotations.insert(REWRITTEN_ANNOTATION.to_owned(), "install".to_owned());
    }
    PodPlan { annotations, rewrite_to_upgrade, action }
}

/// The JSONPatch that carries out a plan on the pod: written directly (a handful of operations)
/// rather than diffed from a mutated copy of the whole pod.
pub fn patch(pod: &Pod, target: &HelmInstallPod, plan: &PodPlan) -> json_patch::Patch {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
    let mut operations = Vec::new();
    let existing = pod.metadata.annotations.is_some();
    if existing {
        for (key, value) in &plan.annotations {
            let path = PointerBuf::from_tokens(["metadata", "annotations", key.as_str()]);
            operations.push(PatchOperation::Add(AddOperation { path, value: Value::String(value.clone()) }));
        }
    } else if !plan.annotations.is_empty() {
        let all: serde_json::Map<String, Value> =
            plan.annotations.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        let path = PointerBuf::from_tokens(["metadata", "annotations"]);
        operations.push(PatchOperation::Add(AddOperation { path, value: Value::Object(all) }));
    }
    let container = target.container.to_string();
    let has_args = pod.spec.containers.get(target.container).is_some_and(|c| !c.args.is_empty());
    if plan.rewrite_to_upgrade && has_args {
        let path = PointerBuf::from_tokens(["spec", "containers", container.as_str(), "args", "0"]);
        operations.push(PatchOperation::Replace(ReplaceOperation {
            path,
            value: Value::String("upgrade".to_owned()),
        }));
    }
    json_patch::Patch(operations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::Status;
    use crate::release::history::{PayloadStatus, RevisionFacts, classify};
    use serde_json::json;

    /// A pod as the API server sends it, and as the rules read it.
    fn typed(pod: &Value) -> Pod {
        serde_json::from_value(pod.clone()).unwrap()
    }

    fn pod(first_arg: &str, env: Value) -> Value {
        json!({
            "metadata": {"namespace": "kube-system", "labels": {CHART_LABEL: "web"}},
            "spec": {"containers": [
                {"name": "sidecar", "args": ["serve"]},
                {"name": "helm", "args": [first_arg, "--namespace", "demo"], "env": env}
            ]}
        })
    }

    fn state(revisions: &[(u32, Status)]) -> Classification {
        let facts: Vec<RevisionFacts> = revisions
            .iter()
            .map(|&(revision, s)| RevisionFacts {
                revision,
                payload: PayloadStatus::Decoded(s),
                label: Some(s),
                stored_at: None,
            })
            .collect();
        classify(&facts, 0, 900)
    }

    #[test]
    fn recognises_release_namespace_and_driver_from_env() {
        let env = json!([{"name": "NAME", "value": "web"}, {"name": "TARGET_NAMESPACE", "value": "demo"}, {"name": "HELM_DRIVER", "value": "configmaps"}]);
        let found = HelmInstallPod::from_pod(&typed(&pod("install", env)), "kube-system").unwrap();
        assert_eq!((found.container, found.release.as_str(), found.namespace.as_str()), (1, "web", "demo"));
        assert_eq!((found.driver, found.command), (Driver::ConfigMap, PodCommand::Install));

        let defaults =
            HelmInstallPod::from_pod(&typed(&pod("delete", json!([{"name": "NAME", "value": "web"}]))), "x")
                .unwrap();
        assert_eq!(
            (defaults.namespace.as_str(), defaults.driver, defaults.command),
            ("kube-system", Driver::Secret, PodCommand::Delete)
        );
    }

    #[test]
    fn other_pods_are_not_helm_install_pods() {
        let env = json!([{"name": "NAME", "value": "web"}]);
        assert!(HelmInstallPod::from_pod(&typed(&pod("upgrade", env.clone())), "x").is_none());
        assert!(HelmInstallPod::from_pod(&typed(&pod("install", json!([]))), "x").is_none());
        let mut unlabelled = pod("install", env.clone());
        unlabelled["metadata"]["labels"] = json!({});
        assert!(HelmInstallPod::from_pod(&typed(&unlabelled), "x").is_none());
        let weird_driver = json!([{"name": "NAME", "value": "web"}, {"name": "HELM_DRIVER", "value": "sql"}]);
        assert!(HelmInstallPod::from_pod(&typed(&pod("install", weird_driver)), "x").is_none());
    }

    #[test]
    fn only_an_orphaned_superseded_install_is_rewritten() {
        let target = HelmInstallPod::from_pod(
            &typed(&pod("install", json!([{"name": "NAME", "value": "web"}]))),
            "demo",
        )
        .unwrap();
        type Row = (&'static [(u32, Status)], bool, &'static str);
        let table: [Row; 5] = [
            (&[(1, Status::Superseded), (2, Status::Superseded)], true, "upgrade"),
            (&[(2, Status::Deployed)], false, "upgrade"),
            (&[(2, Status::Deployed), (3, Status::Failed)], false, "reinstall"),
            (&[(1, Status::PendingInstall)], false, "reset-pending-and-retry"),
            (&[], false, "install"),
        ];
        for (revisions, rewrite, action) in table {
            let plan = plan(&target, &state(revisions));
            assert_eq!((plan.rewrite_to_upgrade, plan.action), (rewrite, action), "{revisions:?}");
            assert_eq!(plan.annotations.contains_key(REWRITTEN_ANNOTATION), rewrite);
        }
        let delete = HelmInstallPod { command: PodCommand::Delete, ..target };
        assert!(!plan(&delete, &state(&[(1, Status::Superseded)])).rewrite_to_upgrade);
    }

    #[test]
    fn applying_the_plan_rewrites_only_the_helm_container() {
        let original = pod("install", json!([{"name": "NAME", "value": "web"}]));
        let target = HelmInstallPod::from_pod(&typed(&original), "demo").unwrap();
        let plan = plan(&target, &state(&[(1, Status::Superseded)]));
        let mut mutated = original.clone();
        json_patch::patch(&mut mutated, &patch(&typed(&original), &target, &plan)).unwrap();
        assert_eq!(mutated["spec"]["containers"][1]["args"], json!(["upgrade", "--namespace", "demo"]));
        assert_eq!(mutated["spec"]["containers"][0]["args"], json!(["serve"]));
        assert_eq!(mutated["metadata"]["annotations"][STATE_ANNOTATION], "orphaned-superseded");
        assert_eq!(mutated["metadata"]["annotations"][REVISION_ANNOTATION], "1");
        assert!(already_annotated(&typed(&mutated)) && !already_annotated(&typed(&original)));
    }

    #[test]
    fn the_patch_adds_to_annotations_already_there_and_escapes_their_keys() {
        let mut original = pod("install", json!([{"name": "NAME", "value": "web"}]));
        original["metadata"]["annotations"] = json!({"team/owner": "platform", STATE_ANNOTATION: "stale"});
        let target = HelmInstallPod::from_pod(&typed(&original), "demo").unwrap();
        let plan = plan(&target, &state(&[(1, Status::Deployed)]));
        let mut mutated = original.clone();
        json_patch::patch(&mut mutated, &patch(&typed(&original), &target, &plan)).unwrap();
        assert_eq!(mutated["metadata"]["annotations"]["team/owner"], "platform");
        assert_eq!(mutated["metadata"]["annotations"][STATE_ANNOTATION], "healthy");
        assert_eq!(mutated["spec"]["containers"][1]["args"][0], "install");
    }
}
