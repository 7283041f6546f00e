//! The deployment files agree with the binary: the routes exist, the flags parse, the webhooks
//! select what POLICY.md is about.

use base64::Engine as _;
use serde_json::Value;

fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{}/manifests/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    serde_saphyr::from_multiple::<Value>(&text).unwrap().into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn the_deployment_args_are_flags_serve_accepts() {
    let deployment = documents("deployment.yaml").into_iter().find(|d| d["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut argv = vec!["helm-guard".to_owned()];
    argv.extend(container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()));
    let parsed = helm_guard::command().try_get_matches_from(&argv);
    assert!(parsed.is_ok(), "{:?}", parsed.err().map(|e| e.to_string()));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(grace > 5 + 20, "longer than the default shutdown delay and grace");
}

#[test]
fn the_webhooks_point_at_the_routes_and_select_release_records_and_install_pods() {
    let hooks = documents("webhooks.yaml");
    let validating = hooks.iter().find(|d| d["kind"] == "ValidatingWebhookConfiguration").unwrap();
    let mutating = hooks.iter().find(|d| d["kind"] == "MutatingWebhookConfiguration").unwrap();
    let mut operations = Vec::new();
    // The reachability probe (a ConfigMap labelled helm-guard.io/probe, in the guard's namespace
    // alone) is no record webhook: it never fails closed.
    let (probe_hooks, hooks): (Vec<&Value>, Vec<&Value>) = validating["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .partition(|hook| hook["name"] == "probe.helm-guard.io");
    let [probe] = probe_hooks[..] else { panic!("one probe webhook") };
    assert_eq!(
        (probe["failurePolicy"].as_str(), probe["sideEffects"].as_str()),
        (Some("Ignore"), Some("None"))
    );
    assert_eq!(probe["objectSelector"]["matchExpressions"][0]["key"], "helm-guard.io/probe");
    let (namespace_hooks, hooks): (Vec<&Value>, Vec<&Value>) =
        hooks.into_iter().partition(|hook| hook["rules"][0]["resources"][0] == "namespaces");
    // Helm's record names taken by objects that are not records: only CREATEs of objects without
    // Helm's owner label, named as Helm names records, so no other Secret reaches the guard.
    let (name_hooks, record_hooks): (Vec<&Value>, Vec<&Value>) =
        hooks.into_iter().partition(|hook| hook["name"] == "record-names.helm-guard.io");
    let [names] = name_hooks[..] else { panic!("one record-names webhook") };
    assert_eq!(names["rules"][0]["operations"], serde_json::json!(["CREATE"]));
    assert_eq!(names["rules"][0]["resources"], serde_json::json!(["secrets", "configmaps"]));
    assert_eq!(
        names["objectSelector"]["matchExpressions"][0],
        serde_json::json!({"key": "owner", "operator": "NotIn", "values": ["helm"]})
    );
    let named = names["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "named-as-helm-names-records");
    assert_eq!(named.unwrap()["expression"], "object.metadata.name.startsWith('sh.helm.release.v1.')");
    assert_eq!(
        (names["failurePolicy"].as_str(), names["sideEffects"].as_str()),
        (Some("Fail"), Some("NoneOnDryRun"))
    );
    // The opt-out labels, through each way an update reaches a Namespace: the API server keeps the
    // labels of an update through `status` and `finalize` too.
    for hook in &namespace_hooks {
        let resources = &hook["rules"][0]["resources"];
        assert_eq!(*resources, serde_json::json!(["namespaces", "namespaces/status", "namespaces/finalize"]));
    }
    for hook in &record_hooks {
        assert_eq!(hook["clientConfig"]["service"]["path"], "/validate");
        assert_eq!(hook["objectSelector"]["matchLabels"]["owner"], "helm");
        assert_eq!(hook["sideEffects"], "NoneOnDryRun", "dry-run requests must reach the guard");
        assert_eq!(hook["rules"][0]["resources"], serde_json::json!(["secrets", "configmaps"]));
        operations.extend(
            hook["rules"][0]["operations"].as_array().unwrap().iter().map(|o| o.as_str().unwrap().to_owned()),
        );
    }
    operations.sort();
    assert_eq!(operations, vec!["CREATE", "CREATE", "DELETE", "DELETE", "UPDATE", "UPDATE"]);
    // One fails closed for every record, creations included (an outage refuses Helm at its first
    // write); the other fails open, only for kube-system's releases that the guard's pods need,
    // and the two split the records between them by the same list.
    let [closed, open] = record_hooks[..] else { panic!("two record webhooks") };
    assert_eq!(
        (closed["failurePolicy"].as_str(), open["failurePolicy"].as_str()),
        (Some("Fail"), Some("Ignore"))
    );
    let condition = |hook: &Value, name: &str| {
        let conditions = hook["matchConditions"].as_array().unwrap();
        conditions.iter().find(|c| c["name"] == name).unwrap()["expression"].as_str().unwrap().to_owned()
    };
    let needed = condition(open, "a-release-the-guard-needs");
    let not_needed = condition(closed, "not-a-release-the-guard-needs");
    let normalise = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        normalise(&not_needed).ends_with(&format!("{})", normalise(&needed))),
        "the same list: {not_needed} / {needed}"
    );
    assert_eq!(condition(open, "not-break-glass"), condition(closed, "not-break-glass"));
    assert_eq!(
        open["namespaceSelector"]["matchExpressions"][0],
        serde_json::json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["kube-system"]})
    );

    let pod_hook = &mutating["webhooks"][0];
    assert_eq!(pod_hook["clientConfig"]["service"]["path"], "/mutate");
    assert_eq!(pod_hook["objectSelector"]["matchExpressions"][0]["key"], "helmcharts.helm.cattle.io/chart");
    assert_eq!(pod_hook["failurePolicy"], "Ignore", "a pod is never held up by the guard");
    let guard_namespace = documents("namespace.yaml")[0]["metadata"]["name"].clone();
    let by_name = serde_json::json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [guard_namespace]});
    let ignore = serde_json::json!({"key": "helm-guard.io/ignore", "operator": "NotIn", "values": ["true"]});
    for hook in [closed, pod_hook] {
        let selector = hook["namespaceSelector"]["matchExpressions"].as_array().unwrap();
        assert!(selector.contains(&by_name), "the guard's own namespace is out by name: {}", hook["name"]);
        assert!(selector.contains(&ignore), "{}", hook["name"]);
    }

    // The opt-out labels' webhook: every namespace but the guard's (an ignored one too), only the
    // requests that touch the labels, fail closed.
    let [namespace_hook] = namespace_hooks[..] else { panic!("one namespace webhook") };
    assert_eq!(namespace_hook["clientConfig"]["service"]["path"], "/validate");
    assert_eq!(namespace_hook["rules"][0]["operations"], serde_json::json!(["CREATE", "UPDATE"]));
    assert_eq!(namespace_hook["namespaceSelector"]["matchExpressions"], serde_json::json!([by_name]));
    assert_eq!(namespace_hook["failurePolicy"], "Fail");
    let condition = namespace_hook["matchConditions"][0]["expression"].as_str().unwrap();
    for label in [
        "helm-guard.io/ignore",
        "helm-guard.io/mode",
        "helm-guard.io/owner-lock",
        "helm-guard.io/max-revisions-per-hour",
    ] {
        assert!(condition.contains(label), "{label}: {condition}");
    }
}

#[test]
fn install_sh_fills_the_ca_bundle_of_every_webhook() {
    let text =
        std::fs::read_to_string(format!("{}/manifests/webhooks.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let hooks: usize =
        documents("webhooks.yaml").iter().map(|d| d["webhooks"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(text.matches("caBundle: \"\"").count(), hooks, "certs/install.sh replaces `caBundle: \"\"`");
}

/// `certs/install.sh` for another namespace and service, with `kubectl` a stub that keeps what
/// it is asked to apply: every webhook points at that service, leaves that namespace out, carries
/// the CA, and nothing still names the default `helm-guard/helm-guard`.
#[test]
fn install_sh_registers_the_webhooks_for_the_namespace_and_service_it_is_given() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let applied = dir.path().join("applied");
    std::fs::create_dir(&applied).unwrap();
    let stub = format!(
        "#!/bin/sh\nif [ \"$1 $2 $3\" = \"apply -f -\" ]; then cat > \"{}/$(date +%s%N).yaml\"; fi\nexit 0\n",
        applied.display()
    );
    std::fs::write(bin.join("kubectl"), stub).unwrap();
    std::fs::set_permissions(bin.join("kubectl"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/certs/install.sh");
    let done = std::process::Command::new("bash")
        .args([script, "guard-system", "guard-webhook"])
        .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()))
        .env("HELM_GUARD", env!("CARGO_BIN_EXE_helm-guard"))
        .env("HELM_GUARD_CERTS_OUT", dir.path().join("out"))
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let mut webhooks = Vec::new();
    for entry in std::fs::read_dir(&applied).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_default();
        for document in documents
            .into_iter()
            .filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("WebhookConfiguration")))
        {
            assert_eq!(
                document["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                "guard-system/helm-guard"
            );
            webhooks.extend(document["webhooks"].as_array().unwrap().clone());
        }
        assert!(
            !text.contains("helm-guard, namespace: helm-guard") && !text.contains("[\"helm-guard\"]"),
            "{text}"
        );
    }
    assert_eq!(
        webhooks.len(),
        documents("webhooks.yaml")
            .iter()
            .map(|d| d["webhooks"].as_array().map_or(0, Vec::len))
            .sum::<usize>()
    );
    for hook in &webhooks {
        let service = &hook["clientConfig"]["service"];
        assert_eq!(
            (service["name"].as_str(), service["namespace"].as_str()),
            (Some("guard-webhook"), Some("guard-system"))
        );
        assert!(!hook["clientConfig"]["caBundle"].as_str().unwrap().is_empty());
        let selector = hook["namespaceSelector"]["matchExpressions"].as_array().unwrap();
        let own =
            selector.iter().find(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn");
        if let Some(own) = own {
            assert_eq!(own["values"], serde_json::json!(["guard-system"]), "{}", hook["name"]);
        }
    }
}

/// A second run of `certs/install.sh` rotates the certificate without an outage: the webhooks
/// trust the new CA beside the one registered before (and no older one) before the Secret the
/// guard serves from is replaced, and again after.
#[test]
fn install_sh_rotates_under_both_cas_registered_before_the_secret_changes() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("applied.log");
    let names = ["helm-guard.helm-guard.svc".to_owned()];
    let [older, old] = [(); 2].map(|()| helm_guard::certs::generate(&names, 1).unwrap().ca_pem);
    let registered = base64::engine::general_purpose::STANDARD.encode(format!("{old}{older}"));
    // `kubectl get` answers with what is registered now, `create` makes the Secret, `apply`
    // appends what it is given.
    let stub = format!(
        "#!/bin/sh\ncase \"$*\" in\n  get*) printf %s '{registered}' ;;\n  *'create secret tls'*) echo 'kind: Secret' ;;\n  apply*) {{ echo '--- applied'; cat; }} >> '{}' ;;\nesac\nexit 0\n",
        log.display()
    );
    std::fs::write(bin.join("kubectl"), stub).unwrap();
    std::fs::set_permissions(bin.join("kubectl"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("out");
    let done = std::process::Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/certs/install.sh"))
        .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()))
        .env("HELM_GUARD", env!("CARGO_BIN_EXE_helm-guard"))
        .env("HELM_GUARD_CERTS_OUT", &out)
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let new = std::fs::read_to_string(out.join("ca.crt")).unwrap();
    let applied = std::fs::read_to_string(&log).unwrap();
    let steps: Vec<&str> = applied.split("--- applied\n").filter(|s| !s.is_empty()).collect();
    let is_secret = |step: &str| step.contains("kind: Secret");
    assert_eq!(
        steps.iter().map(|s| is_secret(s)).collect::<Vec<_>>(),
        [false, true, false],
        "webhooks, Secret, webhooks"
    );
    for step in [steps[0], steps[2]] {
        let documents: Vec<Value> = serde_saphyr::from_multiple(step).unwrap();
        for hook in documents.iter().flat_map(|d| d["webhooks"].as_array().unwrap()) {
            let bundle = base64::engine::general_purpose::STANDARD
                .decode(hook["clientConfig"]["caBundle"].as_str().unwrap())
                .unwrap();
            let bundle = String::from_utf8(bundle).unwrap();
            assert!(
                bundle.starts_with(new.trim_end()) && bundle.contains(old.trim_end()),
                "{}",
                hook["name"]
            );
            assert!(!bundle.contains(older.trim_end()), "the CA before the last goes: {}", hook["name"]);
        }
    }
}

#[test]
fn the_cluster_role_is_read_only() {
    let rbac = documents("rbac.yaml");
    // The role bound to the guard for records and namespaces (the Events one is checked below),
    // by name: not whichever ClusterRole comes first in the file.
    let role =
        rbac.iter().find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "helm-guard").unwrap();
    let bound = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == "helm-guard")
        .unwrap();
    assert_eq!(bound["subjects"][0]["name"], "helm-guard", "bound to the guard's service account");
    let resources: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()))
        .collect();
    for needed in ["secrets", "configmaps", "namespaces"] {
        assert!(resources.contains(&needed), "the guard watches {needed}: {resources:?}");
    }
    for rule in role["rules"].as_array().unwrap() {
        for verb in rule["verbs"].as_array().unwrap() {
            assert!(["get", "list", "watch"].contains(&verb.as_str().unwrap()), "{verb}");
        }
    }
}

#[test]
fn events_and_the_guards_own_reports_are_all_it_writes_cluster_wide() {
    let rbac = documents("rbac.yaml");
    let roles: Vec<&serde_json::Value> = rbac.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    assert_eq!(
        roles.len(),
        5,
        "read-only, Events, PolicyReports, access reviews, break-glass (bound to nobody)"
    );
    let reviews = roles.iter().find(|r| r["metadata"]["name"] == "helm-guard-access-reviews").unwrap();
    assert_eq!(
        reviews["rules"],
        serde_json::json!([{"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]),
        "asking the authorizer who may break glass, nothing else"
    );
    let glass = roles.iter().find(|r| r["metadata"]["name"] == "helm-guard-break-glass").unwrap();
    assert_eq!(
        glass["rules"],
        serde_json::json!([{"apiGroups": ["helm-guard.io"], "resources": ["releases"], "verbs": ["breakglass"]}])
    );
    assert!(
        !rbac.iter().any(|d| d["roleRef"]["name"] == "helm-guard-break-glass"),
        "break-glass is bound to nobody: the cluster's admins grant it"
    );
    let reports = roles.iter().find(|r| r["metadata"]["name"] == "helm-guard-policy-reports").unwrap();
    let verbs = serde_json::json!(["get", "list", "create", "patch", "delete"]);
    assert_eq!(
        reports["rules"],
        serde_json::json!([
            {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports", "clusterpolicyreports"], "verbs": verbs},
            {"apiGroups": ["openreports.io"], "resources": ["reports", "clusterreports"], "verbs": verbs},
        ]),
        "the two report APIs' reports, nothing else (not their CRDs)"
    );
    let binding = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == "helm-guard-policy-reports")
        .unwrap();
    assert_eq!(binding["subjects"][0]["name"], "helm-guard");
    let events = roles.iter().find(|r| r["metadata"]["name"] == "helm-guard-events").unwrap();
    assert_eq!(
        events["rules"],
        serde_json::json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}])
    );
    let binding = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == "helm-guard-events")
        .unwrap();
    assert_eq!(binding["subjects"][0]["name"], "helm-guard");
}

#[test]
fn leases_are_written_only_in_the_guards_own_namespace() {
    let rbac = documents("rbac.yaml");
    let account = rbac.iter().find(|d| d["kind"] == "ServiceAccount").unwrap();
    let namespace = account["metadata"]["namespace"].as_str().unwrap();
    let role =
        rbac.iter().find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "helm-guard-leases").unwrap();
    assert_eq!(
        role["metadata"]["namespace"], namespace,
        "a Role in the guard's namespace, not a ClusterRole"
    );
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["apiGroups"], serde_json::json!(["coordination.k8s.io"]));
    assert_eq!(rules[0]["resources"], serde_json::json!(["leases"]));
    assert_eq!(
        rules[0]["verbs"],
        serde_json::json!(["get", "list", "watch", "create", "update", "patch", "delete"])
    );
    // The fence: created, then patched by name only; in the guard's namespace.
    let fence =
        rbac.iter().find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "helm-guard-fence").unwrap();
    assert_eq!(fence["metadata"]["namespace"], namespace);
    assert_eq!(
        fence["rules"],
        serde_json::json!([
            {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["secrets", "configmaps"], "resourceNames": ["helm-guard-fence"], "verbs": ["patch"]}
        ])
    );
    let binding = rbac
        .iter()
        .find(|d| d["kind"] == "RoleBinding" && d["roleRef"]["name"] == "helm-guard-leases")
        .unwrap();
    assert_eq!(binding["metadata"]["namespace"], namespace);
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    assert!(
        !rbac.iter().any(|d| d["kind"] == "ClusterRole"
            && d["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["resources"].as_array().unwrap().contains(&serde_json::json!("leases")))),
        "no cluster-wide lease access"
    );
    let deployment = documents("deployment.yaml").into_iter().find(|d| d["kind"] == "Deployment").unwrap();
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap();
    let lease_namespace = env.iter().find(|e| e["name"] == "HELM_GUARD_NAMESPACE").unwrap();
    assert_eq!(lease_namespace["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
}

#[test]
fn the_recycle_bin_is_written_only_in_the_guards_own_namespace() {
    let rbac = documents("rbac.yaml");
    let account = rbac.iter().find(|d| d["kind"] == "ServiceAccount").unwrap();
    let role = rbac
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "helm-guard-recycle-bin")
        .unwrap();
    assert_eq!(role["metadata"]["namespace"], account["metadata"]["namespace"]);
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "create", "delete"]}])
    );
    let binding = rbac
        .iter()
        .find(|d| d["kind"] == "RoleBinding" && d["roleRef"]["name"] == "helm-guard-recycle-bin")
        .unwrap();
    assert_eq!(binding["metadata"]["namespace"], account["metadata"]["namespace"]);
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    let cluster_writes_secrets = rbac.iter().filter(|d| d["kind"] == "ClusterRole").any(|d| {
        d["rules"].as_array().unwrap().iter().any(|r| {
            r["resources"].to_string().contains("secrets")
                && r["verbs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| !["get", "list", "watch"].contains(&v.as_str().unwrap()))
        })
    });
    assert!(!cluster_writes_secrets, "no Secret is written outside the guard's namespace");
}

#[test]
fn the_network_policy_admits_exactly_the_ports_the_guard_serves() {
    let deployment = documents("deployment.yaml").into_iter().find(|d| d["kind"] == "Deployment").unwrap();
    let mut served: Vec<u64> = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    let policy = documents("networkpolicy.yaml").into_iter().find(|d| d["kind"] == "NetworkPolicy").unwrap();
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"], deployment["spec"]["selector"]["matchLabels"]);
    assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let mut admitted: Vec<u64> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_array().unwrap().iter().map(|p| p["port"].as_u64().unwrap()))
        .collect();
    served.sort();
    admitted.sort();
    assert_eq!(admitted, served);
    let kustomization =
        std::fs::read_to_string(format!("{}/manifests/kustomization.yaml", env!("CARGO_MANIFEST_DIR")))
            .unwrap();
    assert!(kustomization.contains("networkpolicy.yaml"));
}

/// Both image builds label the image with where it comes from (OCI annotations scanners read),
/// its version and the commit; image/build.sh passes them.
#[test]
fn the_image_says_its_source_version_and_revision() {
    let read =
        |path: &str| std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let (containerfile, dockerfile, build) =
        (read("image/Containerfile"), read("Dockerfile"), read("image/build.sh"));
    for file in [&containerfile, &dockerfile] {
        let last_stage = file.rsplit("FROM ").next().unwrap();
        for label in ["source", "version=\"$VERSION\"", "revision=\"$REVISION\"", "licenses=\"Apache-2.0\""] {
            assert!(
                last_stage.contains(&format!("org.opencontainers.image.{label}")),
                "{label} in {last_stage}"
            );
        }
    }
    assert!(build.contains("--build-arg VERSION=") && build.contains("--build-arg REVISION="), "{build}");
}
