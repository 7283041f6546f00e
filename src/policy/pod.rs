//! The helm-install pod mutation of POLICY.md "Mutating": say what the pod's entry script will
//! do with its release (as [`super::klipper`] predicts it), and change the pod only where the
//! script would otherwise do the wrong thing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::klipper::{self, Asked, EntryScript, ScriptAction, ScriptEnv};
use crate::release::{Classification, Driver, Status};

/// The label the helm-controller puts on the pods of its jobs: the HelmChart's name.
pub(crate) const CHART_LABEL: &str = "helmcharts.helm.cattle.io/chart";
/// The release's state, as the guard saw it.
pub(crate) const STATE_ANNOTATION: &str = "helm-guard.io/release-state";
/// The release's latest revision.
pub(crate) const REVISION_ANNOTATION: &str = "helm-guard.io/release-revision";
/// What the pod's entry script will do.
pub(crate) const ACTION_ANNOTATION: &str = "helm-guard.io/action";
/// The entry script the prediction follows (`klipper-helm v0.13.3`).
pub(crate) const SCRIPT_ANNOTATION: &str = "helm-guard.io/script";
/// What the guard rewrote (`install`), when it rewrote the pod's command.
pub(crate) const REWRITTEN_ANNOTATION: &str = "helm-guard.io/rewritten-from";
/// `FORCE_CONFLICTS` the guard changed, and why: turned off where klipper-helm v0.13.3's flag bug
/// would pass it without SSA; turned on for a protected release that failed on a field conflict.
pub(crate) const FORCE_CONFLICTS_REWRITTEN_ANNOTATION: &str = "helm-guard.io/force-conflicts-from";
/// The failure policy the guard replaced on a protected chart, and why.
pub(crate) const POLICY_REWRITTEN_ANNOTATION: &str = "helm-guard.io/failure-policy-from";
/// On a HelmChart or its namespace: never let the entry script uninstall the release to
/// reinstall it.
pub(crate) const PROTECT_LABEL: &str = "helm-guard.io/protect";

/// A pod the K3s/RKE2 helm-controller made to install or delete a chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HelmInstallPod {
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
    /// The HelmChart that made the pod: the chart label, in env `CHART_NAMESPACE` (else the pod's
    /// namespace, where the helm-controller runs a chart's jobs).
    pub chart: (String, String),
    /// The entry script of the container's image.
    pub script: EntryScript,
    /// What the environment tells the script.
    pub env: ScriptEnv,
}

/// The first argument the helm-controller gives the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodCommand {
    /// `install`: install or upgrade the chart.
    Install,
    /// `delete`: uninstall the chart.
    Delete,
}

/// What the rules read of a pod: its metadata, and of its spec the containers' arguments and
/// environment.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct Pod {
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
    /// The container's image: the entry script's version is its tag.
    pub image: Option<String>,
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
    pub(crate) fn from_pod(pod: &Pod, request_namespace: &str) -> Option<HelmInstallPod> {
        let chart = pod.metadata.labels.as_ref()?.get(CHART_LABEL)?;
        let pod_namespace = pod.metadata.namespace.as_deref().unwrap_or(request_namespace);
        pod.spec.containers.iter().enumerate().find_map(|(index, container)| {
            let command = match container.args.first()?.as_str() {
                "install" => PodCommand::Install,
                "delete" => PodCommand::Delete,
                _ => return None,
            };
            let env = |name: &str| -> Option<&str> {
                container.env.iter().find(|e| e.name == name)?.value.as_deref()
            };
            // The container sees the last of several entries of a name.
            let last = |name: &str| -> Option<String> {
                container.env.iter().rev().find(|e| e.name == name)?.value.clone()
            };
            let release = env("NAME").filter(|n| !n.is_empty())?;
            let namespace = env("TARGET_NAMESPACE").filter(|n| !n.is_empty()).unwrap_or(pod_namespace);
            let chart_namespace = env("CHART_NAMESPACE").filter(|n| !n.is_empty()).unwrap_or(pod_namespace);
            Some(HelmInstallPod {
                container: index,
                release: release.to_owned(),
                namespace: namespace.to_owned(),
                driver: Driver::from_helm_driver(env("HELM_DRIVER").unwrap_or_default())?,
                command,
                chart: (chart_namespace.to_owned(), chart.clone()),
                script: EntryScript::from_image(container.image.as_deref().unwrap_or_default()),
                env: ScriptEnv {
                    failure_policy: env("FAILURE_POLICY").map(str::to_owned),
                    expected_revision: env("EXPECTED_RELEASE_REVISION").map(str::to_owned),
                    server_side: last("SERVER_SIDE"),
                    force_conflicts: last("FORCE_CONFLICTS"),
                },
            })
        })
    }
}

/// Whether helm-guard already annotated this pod (a reinvocation, or a pod made from a mutated
/// template): it is not patched twice.
pub(crate) fn already_annotated(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(STATE_ANNOTATION))
}

/// What to do to the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodPlan {
    /// Annotations to add.
    pub annotations: BTreeMap<String, String>,
    /// Replace the first argument `install` with `upgrade`.
    pub rewrite_to_upgrade: bool,
    /// The `FAILURE_POLICY` to set, on a protected chart whose script would reinstall.
    pub failure_policy: Option<&'static str>,
    /// The `FORCE_CONFLICTS` to set: `false` where SSA is off and the script would pass
    /// `--force-conflicts=true` anyway ([`EntryScript::forces_conflicts_without_ssa`]); `true`
    /// where a protected release failed on a field conflict and the script retries it
    /// ([`EntryScript::passes_force_conflicts`]).
    pub force_conflicts: Option<&'static str>,
    /// What the script will do, after the changes.
    pub action: ScriptAction,
}

/// Why `FORCE_CONFLICTS` is turned off, as the annotation and the Event say.
pub(crate) const FORCE_CONFLICTS_BUG: &str = "true (SERVER_SIDE=false: klipper-helm v0.13.3's get_ssa_args tests it with the glob `== ^false$`, which never matches, and would run Helm with --server-side=false --force-conflicts=true: Helm 4 refuses the upgrade, and the next run uninstalls and reinstalls the release)";

/// Plans the mutation from the release's classification. `protected` names what asks for
/// protection (`helmchart kube-system/traefik`), when the chart or its namespace does.
pub(crate) fn plan(pod: &HelmInstallPod, release: &Classification, protected: Option<&str>) -> PodPlan {
    let latest = release.revision.zip(release.status);
    let status = latest.map(|(_, status)| status);
    // `install` over a release Helm would refuse to install over, where `upgrade` is what the
    // script meant: a superseded latest in scripts before v0.9.9 (PROBLEM.md), any kept release
    // in v0.13.0, which reads no state.
    let rewrite_to_upgrade = pod.command == PodCommand::Install
        && match status {
            Some(Status::Superseded) => !pod.script.resets_superseded() || pod.script.reads_no_state(),
            Some(Status::Deployed | Status::Failed) => pod.script.reads_no_state(),
            _ => false,
        };
    let asked = match pod.command {
        PodCommand::Delete => Asked::Delete,
        PodCommand::Install if rewrite_to_upgrade => Asked::Upgrade,
        PodCommand::Install => Asked::Install,
    };
    let mut action = klipper::predict(pod.script, asked, latest, &pod.env);
    let mut failure_policy = None;
    let mut annotations = BTreeMap::new();
    if let Some(why) = protected
        && action.reinstalls()
    {
        let keeping = pod.script.keeping_policy();
        let env = ScriptEnv { failure_policy: Some(keeping.to_owned()), ..pod.env.clone() };
        action = klipper::predict(pod.script, asked, latest, &env);
        failure_policy = Some(keeping);
        let was = pod.env.failure_policy.as_deref().unwrap_or("reinstall");
        annotations
            .insert(POLICY_REWRITTEN_ANNOTATION.to_owned(), format!("{was} ({PROTECT_LABEL} on {why})"));
    }
    annotations.insert(STATE_ANNOTATION.to_owned(), release.state.as_str().to_owned());
    annotations.insert(SCRIPT_ANNOTATION.to_owned(), pod.script.describe());
    if let Some(revision) = release.revision {
        annotations.insert(REVISION_ANNOTATION.to_owned(), revision.to_string());
    }
    if rewrite_to_upgrade {
        annotations.insert(REWRITTEN_ANNOTATION.to_owned(), "install".to_owned());
    }
    let mut force_conflicts = None;
    if pod.script.forces_conflicts_without_ssa(&pod.env) {
        force_conflicts = Some("false");
        annotations.insert(FORCE_CONFLICTS_REWRITTEN_ANNOTATION.to_owned(), FORCE_CONFLICTS_BUG.to_owned());
    } else if let Some(why) = protected
        && release.field_conflict
        && matches!(action, ScriptAction::RetryUpgrade { .. })
        && pod.script.passes_force_conflicts()
        && pod.env.server_side.as_deref() != Some("false")
        && pod.env.force_conflicts.as_deref() != Some("true")
    {
        // The retry would fail on the same conflict forever: it takes the fields instead.
        force_conflicts = Some("true");
        let was = pod.env.force_conflicts.as_deref().unwrap_or("unset");
        let revision = release.revision.unwrap_or_default();
        annotations.insert(
            FORCE_CONFLICTS_REWRITTEN_ANNOTATION.to_owned(),
            format!(
                "{was} (revision {revision} failed on a server-side-apply field conflict; {PROTECT_LABEL} on {why}: upgraded again with --force-conflicts, not reinstalled)"
            ),
        );
    }
    let env = ScriptEnv {
        failure_policy: failure_policy.map(str::to_owned).or_else(|| pod.env.failure_policy.clone()),
        force_conflicts: force_conflicts.map(str::to_owned).or_else(|| pod.env.force_conflicts.clone()),
        ..pod.env.clone()
    };
    // A release failed on a field conflict was applied server-side; otherwise the record's
    // apply method is not kept, and the prediction says what the flags depend on.
    let applied_server_side = release.field_conflict.then_some(true);
    annotations.insert(
        ACTION_ANNOTATION.to_owned(),
        action.describe_with_flags(pod.script, &env, release.revision, applied_server_side),
    );
    PodPlan { annotations, rewrite_to_upgrade, failure_policy, force_conflicts, action }
}

/// The JSONPatch that carries out a plan on the pod: written directly (a handful of operations)
/// rather than diffed from a mutated copy of the whole pod.
pub(crate) fn patch(pod: &Pod, target: &HelmInstallPod, plan: &PodPlan) -> json_patch::Patch {
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
    let Some(spec) = pod.spec.containers.get(target.container) else { return json_patch::Patch(operations) };
    if plan.rewrite_to_upgrade && !spec.args.is_empty() {
        let path = PointerBuf::from_tokens(["spec", "containers", container.as_str(), "args", "0"]);
        operations.push(PatchOperation::Replace(ReplaceOperation {
            path,
            value: Value::String("upgrade".to_owned()),
        }));
    }
    // Whether the container has an `env` list (an `env` added below makes one).
    let mut has_env = !spec.env.is_empty();
    for (name, value) in [("FORCE_CONFLICTS", plan.force_conflicts), ("FAILURE_POLICY", plan.failure_policy)]
    {
        let Some(value) = value else { continue };
        let entry = serde_json::json!({"name": name, "value": value});
        // Every entry of the name is replaced: the container sees the last one.
        let found: Vec<usize> =
            spec.env.iter().enumerate().filter(|(_, e)| e.name == name).map(|(i, _)| i).collect();
        for index in &found {
            let index = index.to_string();
            let path =
                PointerBuf::from_tokens(["spec", "containers", container.as_str(), "env", index.as_str()]);
            operations.push(PatchOperation::Replace(ReplaceOperation { path, value: entry.clone() }));
        }
        if found.is_empty() {
            let (path, value) = if has_env {
                (PointerBuf::from_tokens(["spec", "containers", container.as_str(), "env", "-"]), entry)
            } else {
                (
                    PointerBuf::from_tokens(["spec", "containers", container.as_str(), "env"]),
                    Value::Array(vec![entry]),
                )
            };
            operations.push(PatchOperation::Add(AddOperation { path, value }));
            has_env = true;
        }
    }
    json_patch::Patch(operations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::history::{PayloadStatus, RevisionFacts, classify};
    use serde_json::json;

    /// A pod as the API server sends it, and as the rules read it.
    fn typed(pod: &Value) -> Pod {
        serde_json::from_value(pod.clone()).unwrap()
    }

    const OLD_IMAGE: &str = "rancher/klipper-helm:v0.9.8-build20250709";
    const HEAD_IMAGE: &str = "rancher/klipper-helm:v0.13.3-build20260727";

    /// Shaped as helm-controller's `job()` makes it (pkg/controllers/chart/chart.go).
    fn pod_of(image: &str, first_arg: &str, env: Value) -> Value {
        json!({
            "metadata": {"namespace": "kube-system", "labels": {CHART_LABEL: "web"}},
            "spec": {"containers": [
                {"name": "sidecar", "image": "busybox", "args": ["serve"]},
                {"name": "helm", "image": image, "args": [first_arg, "--namespace", "demo"], "env": env}
            ]}
        })
    }

    fn pod(first_arg: &str, env: Value) -> Value {
        pod_of(OLD_IMAGE, first_arg, env)
    }

    fn target(image: &str, env: Value) -> HelmInstallPod {
        let mut env = env.as_array().cloned().unwrap_or_default();
        env.push(json!({"name": "NAME", "value": "web"}));
        HelmInstallPod::from_pod(&typed(&pod_of(image, "install", Value::Array(env))), "kube-system").unwrap()
    }

    fn state(revisions: &[(u32, Status)]) -> Classification {
        let facts: Vec<RevisionFacts> = revisions
            .iter()
            .map(|&(revision, s)| RevisionFacts {
                revision,
                payload: PayloadStatus::Decoded(s),
                label: Some(s),
                stored_at: None,
                field_conflict: false,
                namespace_apart: false,
            })
            .collect();
        classify(&facts, 0, 900)
    }

    #[test]
    fn recognises_release_namespace_driver_chart_and_script_from_the_pod() {
        let env = json!([{"name": "NAME", "value": "web"}, {"name": "TARGET_NAMESPACE", "value": "demo"}, {"name": "HELM_DRIVER", "value": "configmaps"}, {"name": "FAILURE_POLICY", "value": "abort"}, {"name": "EXPECTED_RELEASE_REVISION", "value": "4"}]);
        let found =
            HelmInstallPod::from_pod(&typed(&pod_of(HEAD_IMAGE, "install", env)), "kube-system").unwrap();
        assert_eq!((found.container, found.release.as_str(), found.namespace.as_str()), (1, "web", "demo"));
        assert_eq!((found.driver, found.command), (Driver::ConfigMap, PodCommand::Install));
        assert_eq!(found.chart, ("kube-system".to_owned(), "web".to_owned()));
        assert_eq!(found.script.version, Some((0, 13, 3)));
        assert_eq!(
            (found.env.failure_policy.as_deref(), found.env.expected_revision.as_deref()),
            (Some("abort"), Some("4"))
        );

        let defaults =
            HelmInstallPod::from_pod(&typed(&pod("delete", json!([{"name": "NAME", "value": "web"}]))), "x")
                .unwrap();
        assert_eq!(
            (defaults.namespace.as_str(), defaults.driver, defaults.command),
            ("kube-system", Driver::Secret, PodCommand::Delete)
        );
        assert_eq!(defaults.env, ScriptEnv::default());
        assert_eq!(defaults.chart, ("kube-system".to_owned(), "web".to_owned()), "the pod's namespace");

        // The HelmChart lives where helm-controller says (Events and protection are read there).
        let elsewhere =
            json!([{"name": "NAME", "value": "web"}, {"name": "CHART_NAMESPACE", "value": "charts"}]);
        let found = HelmInstallPod::from_pod(&typed(&pod("install", elsewhere)), "x").unwrap();
        assert_eq!(found.chart, ("charts".to_owned(), "web".to_owned()));
        let empty = json!([{"name": "NAME", "value": "web"}, {"name": "CHART_NAMESPACE", "value": ""}]);
        let found = HelmInstallPod::from_pod(&typed(&pod("install", empty)), "x").unwrap();
        assert_eq!(found.chart.0, "kube-system", "an empty CHART_NAMESPACE is no namespace");
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

    /// POLICY.md "Mutating", step 4: the rewrite is made only where the script needs it.
    #[test]
    fn install_becomes_upgrade_only_where_the_script_would_install_over_a_release() {
        use Status::*;
        type Row = (&'static str, &'static [(u32, Status)], bool, &'static str);
        let table: [Row; 9] = [
            (OLD_IMAGE, &[(1, Superseded), (2, Superseded)], true, "upgrade"),
            (OLD_IMAGE, &[(1, Deployed), (2, Superseded)], true, "upgrade"),
            ("rancher/klipper-helm:latest", &[(1, Superseded), (2, Superseded)], true, "upgrade"),
            (HEAD_IMAGE, &[(1, Superseded), (2, Superseded)], false, "reset-and-upgrade"),
            ("rancher/klipper-helm:v0.13.0-build20260715", &[(2, Deployed)], true, "upgrade"),
            (OLD_IMAGE, &[(2, Deployed)], false, "upgrade"),
            (OLD_IMAGE, &[(2, Deployed), (3, Failed)], false, "reinstall (uninstalls first)"),
            (OLD_IMAGE, &[(1, PendingInstall)], false, "reset-to-failed, then reinstall (uninstalls first)"),
            (HEAD_IMAGE, &[], false, "install"),
        ];
        for (image, revisions, rewrite, action) in table {
            let plan = plan(&target(image, json!([])), &state(revisions), None);
            assert_eq!(
                (plan.rewrite_to_upgrade, plan.action.describe().as_str()),
                (rewrite, action),
                "{image} {revisions:?}"
            );
            assert_eq!(plan.annotations.contains_key(REWRITTEN_ANNOTATION), rewrite);
            assert_eq!(plan.annotations[ACTION_ANNOTATION], action);
        }
        let delete = HelmInstallPod { command: PodCommand::Delete, ..target(OLD_IMAGE, json!([])) };
        assert!(!plan(&delete, &state(&[(1, Superseded)]), None).rewrite_to_upgrade);
    }

    #[test]
    fn the_action_follows_the_pods_failure_policy() {
        let failed = state(&[(2, Status::Deployed), (3, Status::Failed)]);
        let policy = |image: &str, policy: &str| {
            let pod = target(image, json!([{"name": "FAILURE_POLICY", "value": policy}]));
            plan(&pod, &failed, None).action.describe()
        };
        assert_eq!(policy(HEAD_IMAGE, "retry"), "upgrade (failure policy retry)");
        assert_eq!(policy(HEAD_IMAGE, "abort"), "wait-for-operator");
        assert_eq!(policy(OLD_IMAGE, "retry"), "wait-for-operator");
        assert_eq!(policy(HEAD_IMAGE, "reinstall"), "reinstall (uninstalls first)");
    }

    #[test]
    fn a_protected_chart_keeps_its_release_instead_of_reinstalling_it() {
        let failed = state(&[(2, Status::Deployed), (3, Status::Failed)]);
        let why = Some("helmchart kube-system/web");
        let head = plan(
            &target(HEAD_IMAGE, json!([{"name": "FAILURE_POLICY", "value": "reinstall"}])),
            &failed,
            why,
        );
        assert_eq!(
            (head.failure_policy, head.action.describe().as_str()),
            (Some("retry"), "upgrade (failure policy retry)")
        );
        assert_eq!(
            head.annotations[POLICY_REWRITTEN_ANNOTATION],
            "reinstall (helm-guard.io/protect on helmchart kube-system/web)"
        );
        let old = plan(&target(OLD_IMAGE, json!([])), &failed, why);
        assert_eq!(
            (old.failure_policy, old.action.describe().as_str()),
            (Some("abort"), "wait-for-operator")
        );
        // Nothing to protect from: an upgrade, or a policy that already keeps the release.
        let healthy = plan(&target(HEAD_IMAGE, json!([])), &state(&[(2, Status::Deployed)]), why);
        assert!(!healthy.rewrite_to_upgrade && healthy.failure_policy.is_none());
        assert!(!healthy.annotations.contains_key(POLICY_REWRITTEN_ANNOTATION));
        let abort =
            plan(&target(HEAD_IMAGE, json!([{"name": "FAILURE_POLICY", "value": "abort"}])), &failed, why);
        assert_eq!(abort.failure_policy, None);
        // Unprotected: the script reinstalls, as its policy says.
        assert!(plan(&target(HEAD_IMAGE, json!([])), &failed, None).action.reinstalls());
    }

    #[test]
    fn applying_the_plan_rewrites_only_the_helm_container() {
        let original = pod("install", json!([{"name": "NAME", "value": "web"}]));
        let target = HelmInstallPod::from_pod(&typed(&original), "demo").unwrap();
        let plan = plan(&target, &state(&[(1, Status::Superseded)]), None);
        let mut mutated = original.clone();
        json_patch::patch(&mut mutated, &patch(&typed(&original), &target, &plan)).unwrap();
        assert_eq!(mutated["spec"]["containers"][1]["args"], json!(["upgrade", "--namespace", "demo"]));
        assert_eq!(mutated["spec"]["containers"][0]["args"], json!(["serve"]));
        assert_eq!(mutated["metadata"]["annotations"][STATE_ANNOTATION], "orphaned-superseded");
        assert_eq!(mutated["metadata"]["annotations"][REVISION_ANNOTATION], "1");
        assert_eq!(mutated["metadata"]["annotations"][SCRIPT_ANNOTATION], "klipper-helm v0.9.8");
        assert!(already_annotated(&typed(&mutated)) && !already_annotated(&typed(&original)));
    }

    /// The failed revision as real Helm 4.1 stored it after a server-side-apply field conflict
    /// (tests/fixtures/snapshot/record-ssa-conflict-failed.json), above a deployed revision 1.
    fn failed_on_a_conflict() -> Classification {
        let stored: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/snapshot/record-ssa-conflict-failed.json"
        ))
        .unwrap();
        let record = crate::release::Record::from_object(&stored, None).unwrap().unwrap();
        let failed = crate::release::DecodedRecord::new(record, Default::default()).facts();
        assert_eq!(
            (failed.revision, failed.status(), failed.field_conflict),
            (2, Some(Status::Failed), true)
        );
        let deployed = RevisionFacts { revision: 1, field_conflict: false, ..failed };
        let deployed = RevisionFacts { payload: PayloadStatus::Decoded(Status::Deployed), ..deployed };
        classify(&[deployed, failed], 0, 900)
    }

    /// Issue 59: a protected release that failed on a field conflict is upgraded again with
    /// `--force-conflicts` (the script of v0.13.3 passes `FORCE_CONFLICTS`), neither reinstalled
    /// nor retried into the same conflict; and only then.
    #[test]
    fn a_protected_release_failed_on_a_field_conflict_is_upgraded_again_taking_the_fields() {
        let conflict = failed_on_a_conflict();
        assert!(conflict.field_conflict);
        let why =
            Some("helmchart kube-system/rke2-cilium, a chart the cluster cannot lose: --protected-chart");
        let head =
            plan(&target(HEAD_IMAGE, json!([{"name": "SERVER_SIDE", "value": "auto"}])), &conflict, why);
        assert_eq!((head.failure_policy, head.force_conflicts), (Some("retry"), Some("true")));
        assert_eq!(
            head.annotations[ACTION_ANNOTATION],
            "upgrade (failure policy retry), with --server-side=auto --force-conflicts=true"
        );
        assert_eq!(
            head.annotations[FORCE_CONFLICTS_REWRITTEN_ANNOTATION],
            "unset (revision 2 failed on a server-side-apply field conflict; helm-guard.io/protect on \
             helmchart kube-system/rke2-cilium, a chart the cluster cannot lose: --protected-chart: upgraded \
             again with --force-conflicts, not reinstalled)"
        );
        // Not without each condition: unprotected (the script's own policy stands), a failure
        // that was no conflict, a script that passes no FORCE_CONFLICTS, SSA off, already forced.
        let unprotected = plan(&target(HEAD_IMAGE, json!([])), &conflict, None);
        assert_eq!((unprotected.force_conflicts, unprotected.action.reinstalls()), (None, true));
        let other_failure = state(&[(1, Status::Deployed), (2, Status::Failed)]);
        assert_eq!(plan(&target(HEAD_IMAGE, json!([])), &other_failure, why).force_conflicts, None);
        let v0_13_2 = "rancher/klipper-helm:v0.13.2-build20260721";
        assert_eq!(plan(&target(v0_13_2, json!([])), &conflict, why).force_conflicts, None);
        let ssa_off = json!([{"name": "SERVER_SIDE", "value": "false"}]);
        assert_eq!(plan(&target(HEAD_IMAGE, ssa_off), &conflict, why).force_conflicts, None);
        let forced = json!([{"name": "FORCE_CONFLICTS", "value": "true"}]);
        assert_eq!(plan(&target(HEAD_IMAGE, forced), &conflict, why).force_conflicts, None);
        // The pod as the container sees it: FORCE_CONFLICTS replaced where it is, added where not.
        for env in [
            json!([{"name": "NAME", "value": "web"}, {"name": "FORCE_CONFLICTS", "value": "false"}]),
            json!([{"name": "NAME", "value": "web"}]),
        ] {
            let original = pod_of(HEAD_IMAGE, "install", env);
            let target = HelmInstallPod::from_pod(&typed(&original), "kube-system").unwrap();
            let plan = plan(&target, &conflict, why);
            let mut mutated = original.clone();
            json_patch::patch(&mut mutated, &patch(&typed(&original), &target, &plan)).unwrap();
            let reread = HelmInstallPod::from_pod(&typed(&mutated), "kube-system").unwrap();
            assert_eq!(
                (reread.env.force_conflicts.as_deref(), reread.env.failure_policy.as_deref()),
                (Some("true"), Some("retry")),
                "{mutated}"
            );
        }
    }

    #[test]
    fn applying_a_protection_sets_the_failure_policy_the_container_sees() {
        let failed = state(&[(2, Status::Deployed), (3, Status::Failed)]);
        let why = Some("namespace kube-system");
        let env_after = |env: Value| {
            let original = pod_of(HEAD_IMAGE, "install", env);
            let target = HelmInstallPod::from_pod(&typed(&original), "kube-system").unwrap();
            let plan = plan(&target, &failed, why);
            let mut mutated = original.clone();
            json_patch::patch(&mut mutated, &patch(&typed(&original), &target, &plan)).unwrap();
            let reread = HelmInstallPod::from_pod(&typed(&mutated), "kube-system").unwrap();
            (mutated["spec"]["containers"][1]["env"].clone(), reread.env.failure_policy)
        };
        let name = json!({"name": "NAME", "value": "web"});
        let (env, seen) = env_after(json!([name, {"name": "FAILURE_POLICY", "value": "reinstall"}]));
        assert_eq!((env.as_array().unwrap().len(), seen.as_deref()), (2, Some("retry")));
        let (env, seen) = env_after(json!([name]));
        assert_eq!(
            (env[1].clone(), seen.as_deref()),
            (json!({"name": "FAILURE_POLICY", "value": "retry"}), Some("retry"))
        );
    }

    #[test]
    fn the_patch_adds_to_annotations_already_there_and_escapes_their_keys() {
        let mut original = pod("install", json!([{"name": "NAME", "value": "web"}]));
        original["metadata"]["annotations"] = json!({"team/owner": "platform", STATE_ANNOTATION: "stale"});
        let target = HelmInstallPod::from_pod(&typed(&original), "demo").unwrap();
        let plan = plan(&target, &state(&[(1, Status::Deployed)]), None);
        let mut mutated = original.clone();
        json_patch::patch(&mut mutated, &patch(&typed(&original), &target, &plan)).unwrap();
        assert_eq!(mutated["metadata"]["annotations"]["team/owner"], "platform");
        assert_eq!(mutated["metadata"]["annotations"][STATE_ANNOTATION], "healthy");
        assert_eq!(mutated["spec"]["containers"][1]["args"][0], "install");
    }
}
