//! The mutating webhook on the real helm-install pod the job controller created (fixture 17).

use crate::common;

use base64::Engine as _;
use common::guard::{Guard, Options};
use common::*;
use serde_json::{Value, json};

const POD: &str = "admission/17-helm-install-pod-create/001-mutate-create-pod-helm-install-web-.json";

/// `records` with the HelmChart the fixture's pod was made for: `kube-system/web`, deploying to
/// `demo` (helm-controller runs the Job in the chart's namespace).
fn charted(mut records: Vec<Value>) -> Vec<Value> {
    records.push(json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"namespace": "kube-system", "name": "web", "uid": "chart-web"},
        "spec": {"chart": "demo", "targetNamespace": "demo"}}));
    records
}

async fn mutate(guard: &Guard, review: &Value) -> (Value, Option<Value>) {
    let response = guard.review("/mutate?timeout=5s", review).await;
    assert_eq!(response["allowed"], true, "a pod is never denied");
    let patched = response.get("patch").map(|patch| {
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch.as_str().expect("patch is a base64 string"))
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let mut pod = review["request"]["object"].clone();
        json_patch::patch(&mut pod, &patch).unwrap();
        pod
    });
    (response, patched)
}

#[tokio::test]
async fn an_orphaned_superseded_release_gets_upgrade_instead_of_install() {
    let guard = Guard::start(Options {
        snapshot: charted(web(&[(1, "superseded"), (2, "superseded")])),
        ..Options::default()
    })
    .await;
    let (response, pod) = mutate(&guard, &review(POD)).await;
    let pod = pod.expect("patched");
    let args = &pod["spec"]["containers"][0]["args"];
    assert_eq!(
        args,
        &json!([
            "upgrade",
            "--namespace",
            "demo",
            "--set-string",
            "controller.metrics.serviceMonitor.additionalLabels.foo=bar2"
        ])
    );
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["helm-guard.io/release-state"], "orphaned-superseded");
    assert_eq!(annotations["helm-guard.io/release-revision"], "2");
    assert_eq!(annotations["helm-guard.io/action"], "upgrade");
    assert_eq!(annotations["helm-guard.io/rewritten-from"], "install");
    assert_eq!(
        annotations["helmcharts.helm.cattle.io/configHash"], "SHA256=6B0E1D2F",
        "existing annotations kept"
    );
    assert_eq!(response["auditAnnotations"]["release"], "demo/web");
    assert_eq!(response["auditAnnotations"]["release-state"], "orphaned-superseded");

    // Idempotent: the mutated pod, sent again, is left alone.
    let mut again = review(POD);
    again["request"]["object"] = pod;
    let (response, repatched) = mutate(&guard, &again).await;
    assert!(repatched.is_none(), "{response}");
    assert_eq!(response["auditAnnotations"]["reason"], "already-annotated");
}

#[tokio::test]
async fn other_states_are_annotated_and_keep_install() {
    type Row = (&'static [(u32, &'static str)], &'static str, &'static str);
    let table: [Row; 4] = [
        (&[(2, "superseded"), (3, "deployed")], "healthy", "upgrade"),
        (&[(3, "deployed"), (4, "failed")], "failed", "reinstall (uninstalls first)"),
        (&[(1, "pending-install")], "pending-install", "reset-to-failed, then reinstall (uninstalls first)"),
        (&[], "absent", "install"),
    ];
    for (revisions, state, action) in table {
        let guard = Guard::start(Options { snapshot: charted(web(revisions)), ..Options::default() }).await;
        let (_, pod) = mutate(&guard, &review(POD)).await;
        let pod = pod.expect("annotated");
        assert_eq!(pod["spec"]["containers"][0]["args"][0], "install", "{state}");
        assert_eq!(pod["metadata"]["annotations"]["helm-guard.io/release-state"], state);
        assert_eq!(pod["metadata"]["annotations"]["helm-guard.io/action"], action);
        assert!(pod["metadata"]["annotations"].get("helm-guard.io/rewritten-from").is_none());
    }
}

#[tokio::test]
async fn the_driver_and_namespace_come_from_the_pod_env() {
    // The same release name under the configmap driver is a different release.
    let guard =
        Guard::start(Options { snapshot: charted(web(&[(1, "superseded")])), ..Options::default() }).await;
    let mut configmap_pod = review(POD);
    let env = configmap_pod["request"]["object"]["spec"]["containers"][0]["env"].as_array_mut().unwrap();
    for var in env.iter_mut() {
        if var["name"] == "HELM_DRIVER" {
            var["value"] = json!("configmap");
        }
    }
    let (_, pod) = mutate(&guard, &configmap_pod).await;
    assert_eq!(pod.unwrap()["metadata"]["annotations"]["helm-guard.io/release-state"], "absent");
}

#[tokio::test]
async fn without_a_view_of_the_release_the_pod_is_admitted_unchanged() {
    let guard = Guard::start(Options {
        snapshot: charted(web(&[(1, "superseded")])),
        ready: false,
        ..Options::default()
    })
    .await;
    let (response, pod) = mutate(&guard, &review(POD)).await;
    assert!(pod.is_none());
    assert_eq!(response["auditAnnotations"]["reason"], "release-state-unavailable");
}

#[tokio::test]
async fn other_pods_pass_untouched() {
    let guard =
        Guard::start(Options { snapshot: charted(web(&[(1, "superseded")])), ..Options::default() }).await;
    let mut plain = review(POD);
    plain["request"]["object"]["metadata"]["labels"] = json!({"app": "nginx"});
    let (response, pod) = mutate(&guard, &plain).await;
    assert!(pod.is_none());
    assert_eq!(response["auditAnnotations"]["reason"], "not-a-helm-install-pod");

    let mut delete_job = review(POD);
    delete_job["request"]["object"]["spec"]["containers"][0]["args"] = json!(["delete"]);
    let (_, pod) = mutate(&guard, &delete_job).await;
    let pod = pod.expect("a delete pod is annotated");
    assert_eq!(pod["spec"]["containers"][0]["args"], json!(["delete"]));
    assert_eq!(pod["metadata"]["annotations"]["helm-guard.io/action"], "uninstall");
}

/// The fixture's pod with another image and failure policy, as helm-controller sets them.
fn pod_with(image: &str, failure_policy: &str) -> Value {
    let mut review = review(POD);
    let container = &mut review["request"]["object"]["spec"]["containers"][0];
    container["image"] = json!(image);
    for var in container["env"].as_array_mut().unwrap() {
        if var["name"] == "FAILURE_POLICY" {
            var["value"] = json!(failure_policy);
        }
    }
    review
}

const HEAD_IMAGE: &str = "rancher/klipper-helm:v0.13.3-build20260727";

#[tokio::test]
async fn the_current_script_is_left_to_handle_superseded_itself_and_its_policy_is_read() {
    let guard = Guard::start(Options {
        snapshot: charted(web(&[(1, "superseded"), (2, "superseded")])),
        ..Options::default()
    })
    .await;
    let (_, pod) = mutate(&guard, &pod_with(HEAD_IMAGE, "reinstall")).await;
    let pod = pod.unwrap();
    assert_eq!(pod["spec"]["containers"][0]["args"][0], "install", "v0.9.9+ resets superseded itself");
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["helm-guard.io/action"], "reset-and-upgrade");
    assert_eq!(annotations["helm-guard.io/script"], "klipper-helm v0.13.3");
    assert!(annotations.get("helm-guard.io/rewritten-from").is_none());

    let failed = Guard::start(Options {
        snapshot: charted(web(&[(3, "deployed"), (4, "failed")])),
        ..Options::default()
    })
    .await;
    for (policy, action) in [
        ("retry", "upgrade (failure policy retry)"),
        ("abort", "wait-for-operator"),
        ("reinstall", "reinstall (uninstalls first)"),
    ] {
        let (_, pod) = mutate(&failed, &pod_with(HEAD_IMAGE, policy)).await;
        assert_eq!(pod.unwrap()["metadata"]["annotations"]["helm-guard.io/action"], action, "{policy}");
    }
    // v0.9.8 has no retry policy: anything but reinstall waits for an operator.
    let (_, pod) = mutate(&failed, &pod_with("rancher/klipper-helm:v0.9.8-build20250709", "retry")).await;
    assert_eq!(pod.unwrap()["metadata"]["annotations"]["helm-guard.io/action"], "wait-for-operator");
}

fn env_value(pod: &Value, name: &str) -> Vec<Value> {
    let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
    env.iter().filter(|var| var["name"] == name).map(|var| var["value"].clone()).collect()
}

#[tokio::test]
async fn a_protected_chart_or_namespace_keeps_a_failed_release_instead_of_reinstalling_it() {
    let chart = |labels: Value| {
        json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
               "metadata": {"namespace": "kube-system", "name": "web", "uid": "chart-uid", "labels": labels},
               "spec": {"targetNamespace": "demo"}})
    };
    let failed = || web(&[(3, "deployed"), (4, "failed")]);
    let protected_chart = [failed(), vec![chart(json!({"helm-guard.io/protect": "true"}))]].concat();
    let protected_namespace = [
        failed(),
        vec![
            chart(json!({})),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "labels": {"helm-guard.io/protect": "true"}}}),
        ],
    ]
    .concat();
    type Row = (Vec<Value>, &'static str, &'static str, &'static str, &'static str);
    let table: [Row; 3] = [
        (
            protected_chart.clone(),
            HEAD_IMAGE,
            "retry",
            "upgrade (failure policy retry)",
            "reinstall (helm-guard.io/protect on helmchart kube-system/web)",
        ),
        (
            protected_chart,
            "rancher/klipper-helm:v0.9.8-build20250709",
            "abort",
            "wait-for-operator",
            "reinstall (helm-guard.io/protect on helmchart kube-system/web)",
        ),
        (
            protected_namespace,
            HEAD_IMAGE,
            "retry",
            "upgrade (failure policy retry)",
            "reinstall (helm-guard.io/protect on namespace kube-system)",
        ),
    ];
    for (snapshot, image, policy, action, why) in table {
        let guard = Guard::start(Options { snapshot, ..Options::default() }).await;
        let (response, pod) = mutate(&guard, &pod_with(image, "reinstall")).await;
        let pod = pod.unwrap();
        assert_eq!(env_value(&pod, "FAILURE_POLICY"), vec![json!(policy)], "{image}");
        assert_eq!(pod["metadata"]["annotations"]["helm-guard.io/action"], action);
        assert_eq!(pod["metadata"]["annotations"]["helm-guard.io/failure-policy-from"], why);
        assert_eq!(response["auditAnnotations"]["action"], action);
    }
    // Unprotected, the same pod reinstalls as it asks.
    let guard =
        Guard::start(Options { snapshot: [failed(), vec![chart(json!({}))]].concat(), ..Options::default() })
            .await;
    let (_, pod) = mutate(&guard, &pod_with(HEAD_IMAGE, "reinstall")).await;
    let pod = pod.unwrap();
    assert_eq!(env_value(&pod, "FAILURE_POLICY"), vec![json!("reinstall")]);
    assert_eq!(pod["metadata"]["annotations"]["helm-guard.io/action"], "reinstall (uninstalls first)");
}

/// Issue 59: the charts a cluster cannot lose are protected by name, by default (rke2-cilium
/// uninstalled by its job's failure policy, rancher/rancher#50921), with no label on anything.
#[tokio::test]
async fn the_charts_a_cluster_cannot_lose_are_protected_by_default() {
    let mut records = charted(web(&[(3, "deployed"), (4, "failed")]));
    records.last_mut().unwrap()["metadata"]["name"] = json!("rke2-cilium");
    let guard = Guard::start(Options { snapshot: records, ..Options::default() }).await;
    let mut review = pod_with(HEAD_IMAGE, "reinstall");
    review["request"]["object"]["metadata"]["labels"]["helmcharts.helm.cattle.io/chart"] =
        json!("rke2-cilium");
    let (_, pod) = mutate(&guard, &review).await;
    let pod = pod.unwrap();
    assert_eq!(env_value(&pod, "FAILURE_POLICY"), vec![json!("retry")]);
    let why = pod["metadata"]["annotations"]["helm-guard.io/failure-policy-from"].as_str().unwrap();
    assert!(why.contains("kube-system/rke2-cilium, a chart the cluster cannot lose"), "{why}");
}

/// Issue 59: klipper-helm v0.13.3 runs Helm with `--server-side=false --force-conflicts=true`
/// for `serverSide: false` with `forceConflicts: true`, which Helm 4 refuses; the pod is healed.
#[tokio::test]
async fn the_v0_13_3_flag_bug_is_healed_and_other_ssa_settings_are_left_alone() {
    let guard =
        Guard::start(Options { snapshot: charted(web(&[(1, "deployed")])), ..Options::default() }).await;
    let with_ssa = |server_side: &str, force: &str| {
        let mut review = pod_with(HEAD_IMAGE, "reinstall");
        let env = review["request"]["object"]["spec"]["containers"][0]["env"].as_array_mut().unwrap();
        env.push(json!({"name": "SERVER_SIDE", "value": server_side}));
        env.push(json!({"name": "FORCE_CONFLICTS", "value": force}));
        review
    };
    let (_, pod) = mutate(&guard, &with_ssa("false", "true")).await;
    let pod = pod.unwrap();
    assert_eq!(env_value(&pod, "FORCE_CONFLICTS"), vec![json!("false")]);
    let why = pod["metadata"]["annotations"]["helm-guard.io/force-conflicts-from"].as_str().unwrap();
    assert!(why.contains("== ^false$") && why.contains("Helm 4 refuses"), "{why}");
    for (server_side, force) in [("true", "true"), ("auto", "true"), ("false", "false")] {
        let (_, pod) = mutate(&guard, &with_ssa(server_side, force)).await;
        let pod = pod.unwrap();
        assert_eq!(env_value(&pod, "FORCE_CONFLICTS"), vec![json!(force)], "{server_side} {force}");
        assert!(pod["metadata"]["annotations"].get("helm-guard.io/force-conflicts-from").is_none());
    }
}

/// A pod that names another namespace's release is told about it only as helm-controller's pods
/// are (issue 80, class 9): its own namespace holds the HelmChart its chart label names,
/// deploying to `TARGET_NAMESPACE`, and `CHART_NAMESPACE` is its own. Any other pod is admitted
/// unchanged, and nothing of the other namespace's release is in it.
#[tokio::test]
async fn another_namespaces_release_is_told_only_to_helm_controllers_pods() {
    let with_env = |name: &str, value: &str| {
        let mut pod = review(POD);
        for var in pod["request"]["object"]["spec"]["containers"][0]["env"].as_array_mut().unwrap() {
            if var["name"] == name {
                var["value"] = json!(value);
            }
        }
        pod
    };
    // No HelmChart in kube-system deploys web to demo: a tenant's pod shaped as the job's.
    let guard = Guard::start(Options { snapshot: web(&[(1, "superseded")]), ..Options::default() }).await;
    let (response, pod) = mutate(&guard, &review(POD)).await;
    assert!(pod.is_none(), "admitted unchanged: {response}");
    assert_eq!(response["auditAnnotations"]["reason"], "release-state-unavailable");
    // The chart there, but deploying elsewhere; and a CHART_NAMESPACE not the pod's own.
    let mut elsewhere = charted(web(&[(1, "superseded")]));
    elsewhere.last_mut().unwrap()["spec"]["targetNamespace"] = json!("other");
    let guard = Guard::start(Options { snapshot: elsewhere, ..Options::default() }).await;
    assert!(
        mutate(&guard, &review(POD)).await.1.is_none(),
        "a chart deploying elsewhere vouches for nothing"
    );
    let guard =
        Guard::start(Options { snapshot: charted(web(&[(1, "superseded")])), ..Options::default() }).await;
    assert!(
        mutate(&guard, &with_env("CHART_NAMESPACE", "demo")).await.1.is_none(),
        "another namespace's chart"
    );
    // helm-controller's own pod: told.
    let (_, pod) = mutate(&guard, &review(POD)).await;
    assert_eq!(pod.unwrap()["metadata"]["annotations"]["helm-guard.io/release-state"], "orphaned-superseded");
    // A pod of its own namespace's release needs no chart.
    let mut own = with_env("TARGET_NAMESPACE", "kube-system");
    own["request"]["object"]["metadata"]["labels"]["helmcharts.helm.cattle.io/chart"] = json!("nothing-here");
    let (_, pod) = mutate(&guard, &own).await;
    assert!(pod.is_some(), "its own namespace's release");
}
