//! `helm-guard check`: does the guard in this cluster work? In the habit of `linkerd check`: each
//! part the API server needs, from the webhook configurations to a real verdict, checked from the
//! user's kubeconfig and reported with a hint when it fails. Changes nothing: the one request
//! that reaches the guard is a server-side dry run.

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use serde_json::{Value, json};

use super::{ClusterArgs, Exit, Output, print_data};
use crate::cluster::registration::{self, Reach, Registration};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Checks, in order: the webhook configurations (present, every shipped webhook, calling the guard's Service, failing as shipped), their CA (it signed the serving certificate, which is current), the Service's ready endpoints, the Deployment (ready replicas, image, version), a real verdict (a server-side dry-run deletion of a deployed release record outside the guard's namespace: refused in enforce mode, warned about in warn and audit mode; nothing is deleted), the guard's RBAC (each permission it needs, asked of the API server for its service account), and the mode and opt-outs in force.\n\nExamples:\n  helm-guard check                                  # the chart's release helm-guard in namespace helm-guard\n  helm-guard check --guard-namespace platform --name hg-helm-guard\n  helm-guard check -o json | jq '.[] | select(.result == \"fail\")'\n\nExit status: 0 every check passed (a check that could not run, such as the verdict in a cluster with no release yet, says why and does not fail), 1 a check failed, 2 bad input, 3 the cluster could not be reached."
)]
pub(crate) struct CheckArgs {
    /// The guard's namespace.
    #[arg(long, env = "HELM_GUARD_NAMESPACE", default_value = "helm-guard")]
    pub guard_namespace: String,
    /// The name of its Deployment, Service, service account and webhook configurations: the
    /// chart's `helm-guard` for a release named helm-guard, else RELEASE-helm-guard.
    #[arg(long, default_value = "helm-guard")]
    pub name: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format: lines for people, or the checks as JSON or YAML.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Result_ {
    Pass,
    Fail,
    /// Could not be tried (and says why); not a failure.
    Skip,
}

#[derive(Debug, serde::Serialize)]
struct Check {
    check: &'static str,
    result: Result_,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<String>,
}

impl Check {
    fn pass(check: &'static str, detail: impl Into<String>) -> Check {
        Check { check, result: Result_::Pass, detail: detail.into(), hint: None }
    }
    fn fail(check: &'static str, detail: impl Into<String>, hint: impl Into<String>) -> Check {
        Check { check, result: Result_::Fail, detail: detail.into(), hint: Some(hint.into()) }
    }
    fn skip(check: &'static str, detail: impl Into<String>) -> Check {
        Check { check, result: Result_::Skip, detail: detail.into(), hint: None }
    }
}

/// Runs `helm-guard check`.
pub(super) async fn run(args: &CheckArgs) -> anyhow::Result<Exit> {
    let (client, _) = match args.cluster.connect_in(None).await {
        Ok(connected) => connected,
        Err(code) => return Ok(code),
    };
    let target = Target { client, namespace: args.guard_namespace.clone(), name: args.name.clone() };
    let deployment = target.deployment().await;
    let in_force = target.in_force(deployment.as_ref()).await;
    let reach = registration::probe(&target.client, &target.namespace).await;
    let (configurations, bundles) = target.configurations(&in_force, &reach).await;
    let checks = vec![
        configurations,
        target.ca(&bundles, deployment.as_ref()).await,
        target.endpoints().await,
        target.reached(&reach),
        target.replicas(deployment.as_ref()),
        target.verdict(&in_force).await,
        target.rbac(&in_force).await,
        mode(deployment.is_some(), &in_force),
    ];
    if !print_data(&checks, args.output)? {
        outln!("helm-guard check: {} in namespace {}", args.name, args.guard_namespace)?;
        for check in &checks {
            let mark = match check.result {
                Result_::Pass => "[ok]  ",
                Result_::Fail => "[FAIL]",
                Result_::Skip => "[skip]",
            };
            outln!("{mark} {}: {}", check.check, check.detail)?;
            if let Some(hint) = &check.hint {
                outln!("       hint: {hint}")?;
            }
        }
        let failed = checks.iter().filter(|c| c.result == Result_::Fail).count();
        if failed == 0 {
            outln!("every check passed")?;
        } else {
            outln!("{failed} of {} checks failed", checks.len())?;
        }
    }
    Ok(if checks.iter().any(|c| c.result == Result_::Fail) { Exit::Findings } else { Exit::Ok })
}

/// A permission asked of the API server: API group, resource, verb, namespace, name.
type Permission<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>);

/// The guard checked: its namespace and the name its objects share.
struct Target {
    client: kube::Client,
    namespace: String,
    name: String,
}

/// What an API error says, for a detail line.
fn said(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

impl Target {
    /// The two configurations as the guard registers them: present, every shipped webhook,
    /// calling this guard, failing as shipped (every one `Ignore` outside enforce mode; in
    /// enforce mode, `Ignore` too while the API server does not reach the guard). Returns the CA
    /// bundles they carry.
    async fn configurations(&self, in_force: &InForce, reach: &Reach) -> (Check, Vec<Vec<u8>>) {
        const CHECK: &str = "webhook configurations";
        let registration = Registration {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            ca_file: Default::default(),
            timeout_seconds: 10,
            fail_closed: in_force.mode == "enforce",
        };
        // In enforce mode a guard the API server has not reached registers `Ignore`, and one
        // reached before keeps the shipped policies when a later probe fails (never switched off
        // by a cut path): either is its doing until the probe comes back.
        let either = in_force.mode == "enforce" && *reach != Reach::Reached;
        let shipped = match registration::desired(&registration) {
            Ok(shipped) => shipped,
            Err(error) => {
                return (
                    Check::fail(CHECK, format!("{error:#}"), "a build of helm-guard without its webhooks"),
                    vec![],
                );
            }
        };
        let mut bundles = Vec::new();
        let mut found = Vec::new();
        for wanted in &shipped {
            let live = match registration::api(&self.client, &wanted.kind).get_opt(&self.name).await {
                Ok(Some(live)) => live,
                Ok(None) => {
                    let detail = format!("{} {} is absent", wanted.kind, self.name);
                    let hint = "`helm upgrade` of the chart puts it back, and a ready guard fills it in; with \
                                another release name, pass --name RELEASE-helm-guard";
                    return (Check::fail(CHECK, detail, hint), bundles);
                }
                Err(error) => {
                    return (
                        Check::fail(CHECK, said(&error), "can this kubeconfig read webhook configurations?"),
                        bundles,
                    );
                }
            };
            let webhooks = live.data.get("webhooks").and_then(Value::as_array).cloned().unwrap_or_default();
            if webhooks.is_empty() {
                let detail = format!(
                    "{} {} has no webhooks: the guard has not been ready yet",
                    wanted.kind, self.name
                );
                let hint = format!(
                    "the guard registers them once a replica is ready and its Service has a ready endpoint; see `kubectl -n {} get pods` and `kubectl -n {} logs deploy/{}`",
                    self.namespace, self.namespace, self.name
                );
                return (Check::fail(CHECK, detail, hint), bundles);
            }
            for shipped_webhook in wanted.webhooks.as_array().into_iter().flatten() {
                let name = shipped_webhook.get("name").cloned().unwrap_or_default();
                let Some(live_webhook) = webhooks.iter().find(|w| w.get("name") == Some(&name)) else {
                    let detail = format!("{} {} lacks the webhook {name}", wanted.kind, self.name);
                    return (
                        Check::fail(
                            CHECK,
                            detail,
                            "a guard of this version puts it back within 10s; is it running?",
                        ),
                        bundles,
                    );
                };
                let service = live_webhook.pointer("/clientConfig/service");
                let calls = (
                    service.and_then(|s| s.get("namespace")).and_then(Value::as_str),
                    service.and_then(|s| s.get("name")).and_then(Value::as_str),
                );
                if calls != (Some(self.namespace.as_str()), Some(self.name.as_str())) {
                    let detail = format!(
                        "webhook {name} calls {calls:?}, not the Service {}/{}",
                        self.namespace, self.name
                    );
                    return (
                        Check::fail(
                            CHECK,
                            detail,
                            "another guard's configuration, or --name/--guard-namespace are not this guard's",
                        ),
                        bundles,
                    );
                }
                let registered = live_webhook.get("failurePolicy");
                if registered != shipped_webhook.get("failurePolicy")
                    && !(either && registered.and_then(Value::as_str) == Some("Ignore"))
                {
                    let detail = format!(
                        "webhook {name} has failurePolicy {}, shipped {}",
                        live_webhook.get("failurePolicy").unwrap_or(&Value::Null),
                        shipped_webhook.get("failurePolicy").unwrap_or(&Value::Null)
                    );
                    return (
                        Check::fail(CHECK, detail, "edited by hand? a running guard puts it back within 10s"),
                        bundles,
                    );
                }
                let bundle = live_webhook
                    .pointer("/clientConfig/caBundle")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                bundles.push(base64::engine::general_purpose::STANDARD.decode(bundle).unwrap_or_default());
            }
            found.push(format!("{} ({} webhooks)", wanted.kind, webhooks.len()));
        }
        let detail = format!("{}, calling Service {}/{}", found.join(", "), self.namespace, self.name);
        (Check::pass(CHECK, detail), bundles)
    }

    async fn deployment(&self) -> Option<Deployment> {
        Api::<Deployment>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(&self.name)
            .await
            .ok()
            .flatten()
    }

    /// Every caBundle holds the CA that signed the serving certificate, which is current.
    async fn ca(&self, bundles: &[Vec<u8>], deployment: Option<&Deployment>) -> Check {
        const CHECK: &str = "certificate authority";
        if bundles.is_empty() {
            return Check::skip(CHECK, "no registered webhook to compare");
        }
        let secret_name = deployment
            .and_then(|d| d.spec.as_ref()?.template.spec.as_ref()?.volumes.as_ref())
            .and_then(|volumes| volumes.iter().find(|v| v.name == "tls"))
            .and_then(|v| v.secret.as_ref()?.secret_name.clone())
            .unwrap_or_else(|| format!("{}-tls", self.name));
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let secret = match secrets.get(&secret_name).await {
            Ok(secret) => secret,
            Err(error) => {
                return Check::fail(
                    CHECK,
                    format!("Secret {secret_name}: {}", said(&error)),
                    "the serving certificate's Secret (certificates.* values)",
                );
            }
        };
        let Some(leaf_pem) = secret.data.as_ref().and_then(|d| d.get("tls.crt")) else {
            return Check::fail(
                CHECK,
                format!("Secret {secret_name} has no tls.crt"),
                "a kubernetes.io/tls Secret",
            );
        };
        match crate::certs::signed_by(&leaf_pem.0, bundles) {
            Ok(summary) => Check::pass(
                CHECK,
                format!("every webhook trusts the CA that signed {secret_name}'s certificate ({summary})"),
            ),
            Err(problem) => Check::fail(
                CHECK,
                problem,
                "the API server refuses the guard's answers with an x509 error; a running guard registers the CA of its mounted ca.crt within 10s of the kubelet updating it",
            ),
        }
    }

    /// The Service has at least one ready endpoint.
    async fn endpoints(&self) -> Check {
        const CHECK: &str = "ready endpoints";
        let (ready, endpoints) =
            match registration::ready_endpoints(&self.client, &self.namespace, &self.name).await {
                Ok(found) => found,
                Err(error) => {
                    return Check::fail(CHECK, said(&error), "can this kubeconfig list EndpointSlices?");
                }
            };
        if ready.is_empty() {
            let detail =
                format!("Service {}/{}: {} endpoints, none ready", self.namespace, self.name, endpoints);
            let hint = format!(
                "every Helm write the webhooks judge is refused now; `kubectl -n {} describe pods -l app.kubernetes.io/name=helm-guard`, and the outage runbook (docs/operate/outage.md)",
                self.namespace
            );
            return Check::fail(CHECK, detail, hint);
        }
        Check::pass(CHECK, format!("{} ready: {}", ready.len(), ready.join(", ")))
    }

    /// Whether the API server reaches the guard through its Service, as the guard itself proves
    /// it before its webhooks may fail closed: a dry-run probe that a replica refuses.
    fn reached(&self, reach: &Reach) -> Check {
        const CHECK: &str = "reached from the API server";
        match reach {
            Reach::Reached => Check::pass(
                CHECK,
                format!(
                    "the API server called the guard through Service {}/{} (a dry-run probe came back refused by a replica)",
                    self.namespace, self.name
                ),
            ),
            Reach::NotReached => Check::fail(
                CHECK,
                format!(
                    "the API server does not reach the guard through Service {}/{}: its webhooks stay failurePolicy Ignore and nothing is guarded",
                    self.namespace, self.name
                ),
                "the control plane must reach the pods on the webhook port: a firewall (GKE private clusters allow 443 and 10250: set ports.https), a CNI the control plane is not on (EKS: hostNetwork), a NetworkPolicy without the API server; docs/install/platforms.md",
            ),
            Reach::Unknown(error) => Check::fail(
                CHECK,
                format!("could not send the probe: {error}"),
                format!(
                    "the probe is a dry-run CREATE of a ConfigMap in {}: can this kubeconfig create ConfigMaps there?",
                    self.namespace
                ),
            ),
        }
    }

    /// The Deployment: replicas ready, the image and the version against this command's.
    fn replicas(&self, deployment: Option<&Deployment>) -> Check {
        const CHECK: &str = "deployment";
        let Some(deployment) = deployment else {
            return Check::fail(
                CHECK,
                format!("no Deployment {}/{}", self.namespace, self.name),
                "pass --guard-namespace and --name of the guard's release",
            );
        };
        let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let status = deployment.status.as_ref();
        let ready = status.and_then(|s| s.ready_replicas).unwrap_or(0);
        let updated = status.and_then(|s| s.updated_replicas).unwrap_or(0);
        let image = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref()?.containers.first()?.image.clone())
            .unwrap_or_default();
        let version = deployment
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/version"))
            .cloned()
            .unwrap_or_else(|| "unknown".into());
        let detail = format!(
            "{ready}/{wanted} ready, {updated} updated; image {image}, version {version} (this command: {})",
            env!("CARGO_PKG_VERSION")
        );
        if ready == 0 {
            return Check::fail(
                CHECK,
                detail,
                format!(
                    "`kubectl -n {} describe deploy/{}`: an image the nodes cannot pull?",
                    self.namespace, self.name
                ),
            );
        }
        Check::pass(CHECK, detail)
    }

    /// A real verdict: a server-side dry-run deletion of a deployed release record.
    async fn verdict(&self, in_force: &InForce) -> Check {
        const CHECK: &str = "a real verdict";
        let Some((kind, namespace, name)) = self.a_deployed_record(in_force).await else {
            return Check::skip(
                CHECK,
                format!(
                    "no deployed Helm release outside {} to try; install one and run again",
                    self.namespace
                ),
            );
        };
        let plural = if kind == "Secret" { "secrets" } else { "configmaps" };
        let url = format!("/api/v1/namespaces/{namespace}/{plural}/{name}?dryRun=All");
        let body = json!({"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": ["All"]});
        let request = http::Request::delete(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(body.to_string().into_bytes()));
        let request = match request {
            Ok(request) => request,
            Err(error) => return Check::fail(CHECK, error.to_string(), "a bug in helm-guard check"),
        };
        let response = match self.client.send(request).await {
            Ok(response) => response,
            Err(error) => return Check::fail(CHECK, said(&error), "the API server could not be asked"),
        };
        let status = response.status();
        let warnings: Vec<String> = response
            .headers()
            .get_all(http::header::WARNING)
            .iter()
            .flat_map(|value| warning_texts(value.as_bytes()))
            .filter(|text| text.contains("helm-guard"))
            .collect();
        let text =
            response.into_body().collect_bytes().await.map(|b| String::from_utf8_lossy(&b).into_owned());
        let message = text
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let what = format!("deleting {kind} {namespace}/{name} (dry run)");
        if status.is_success() {
            return match warnings.first() {
                Some(warning) => Check::pass(
                    CHECK,
                    format!(
                        "{what}: allowed with the guard's warning (warn or audit mode: nothing is refused yet): {warning}"
                    ),
                ),
                None => Check::fail(
                    CHECK,
                    format!("{what}: allowed without a word from the guard"),
                    format!(
                        "is namespace {namespace} opted out or exempt (see mode), or the records webhook missing?"
                    ),
                ),
            };
        }
        if message.contains("helm-guard") && message.contains("denied the request") {
            return Check::pass(CHECK, format!("{what}: refused: {message}"));
        }
        let hint = if message.contains("x509") || message.contains("certificate") {
            "the API server does not trust the guard's certificate: see certificate authority"
        } else if message.contains("no endpoints")
            || message.contains("connection refused")
            || message.contains("deadline")
        {
            "the API server cannot reach a ready guard: see ready endpoints"
        } else {
            "not the guard's refusal: can this kubeconfig delete that record?"
        };
        Check::fail(CHECK, format!("{what}: {} {message}", status.as_u16()), hint)
    }

    /// The latest record of a release, deployed and the release's only deployed one (so that
    /// deleting it is refused in every mode's verdict), in a namespace the guard judges (not its
    /// own, not opted out, not exempt).
    async fn a_deployed_record(&self, in_force: &InForce) -> Option<(&'static str, String, String)> {
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        let judged = |namespace: &str| {
            namespace != self.namespace
                && !in_force.ignored.iter().chain(&in_force.exempt_namespaces).any(|n| n == namespace)
        };
        let label = |meta: &ObjectMeta, key: &str| {
            meta.labels.as_ref().and_then(|l| l.get(key)).cloned().unwrap_or_default()
        };
        // A record's metadata by its labels, as a Secret or as a ConfigMap: no payload is read.
        let list = |kind: &str, namespace: Option<&str>, selector: &str| {
            let (client, params) = (self.client.clone(), ListParams::default().labels(selector).limit(50));
            let secrets = kind == "Secret";
            let namespace = namespace.map(str::to_owned);
            async move {
                let metas = match (secrets, namespace) {
                    (true, Some(ns)) => list_meta(Api::<Secret>::namespaced(client, &ns), params).await,
                    (true, None) => list_meta(Api::<Secret>::all(client), params).await,
                    (false, Some(ns)) => list_meta(Api::<ConfigMap>::namespaced(client, &ns), params).await,
                    (false, None) => list_meta(Api::<ConfigMap>::all(client), params).await,
                };
                metas.unwrap_or_default()
            }
        };
        for kind in ["Secret", "ConfigMap"] {
            for candidate in list(kind, None, "owner=helm,status=deployed").await.into_iter().take(10) {
                let (Some(namespace), Some(name)) = (candidate.namespace.clone(), candidate.name.clone())
                else {
                    continue;
                };
                if !judged(&namespace) {
                    continue;
                }
                let release = format!("owner=helm,name={}", label(&candidate, "name"));
                let records = list(kind, Some(&namespace), &release).await;
                let version = |meta: &ObjectMeta| label(meta, "version").parse::<u64>().unwrap_or(0);
                let latest = records.iter().map(version).max();
                let deployed = records.iter().filter(|r| label(r, "status") == "deployed").count();
                if latest == Some(version(&candidate)) && deployed == 1 {
                    return Some((kind, namespace, name));
                }
            }
        }
        None
    }

    /// Each permission the guard needs, asked of the API server for its service account.
    async fn rbac(&self, in_force: &InForce) -> Check {
        const CHECK: &str = "rbac";
        let user = format!("system:serviceaccount:{}:{}", self.namespace, self.name);
        let ns = Some(self.namespace.as_str());
        let bin = Some(in_force.recycle_bin_namespace.as_deref().unwrap_or(&self.namespace));
        // (API group, resource, verb, namespace, name)
        let needed: [Permission; 14] = [
            ("", "secrets", "watch", None, None),
            ("", "configmaps", "watch", None, None),
            ("", "secrets", "get", None, None),
            ("", "namespaces", "watch", None, None),
            (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                "patch",
                None,
                Some(&self.name),
            ),
            (
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "patch",
                None,
                Some(&self.name),
            ),
            ("discovery.k8s.io", "endpointslices", "list", ns, None),
            // The reachability probe (a dry run) and the fence.
            ("", "configmaps", "create", ns, None),
            ("coordination.k8s.io", "leases", "patch", ns, None),
            ("coordination.k8s.io", "leases", "watch", ns, None),
            ("", "secrets", "create", bin, None),
            ("events.k8s.io", "events", "create", None, None),
            ("", "pods", "get", None, None),
            // Who may break glass: the API server's authorizer, asked for annotated records.
            ("authorization.k8s.io", "subjectaccessreviews", "create", None, None),
        ];
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let mut missing = Vec::new();
        for (group, resource, verb, namespace, name) in &needed {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.clone()),
                    groups: Some(vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{}", self.namespace),
                    ]),
                    resource_attributes: Some(ResourceAttributes {
                        group: Some((*group).to_owned()),
                        resource: Some((*resource).to_owned()),
                        verb: Some((*verb).to_owned()),
                        namespace: namespace.map(str::to_owned),
                        name: name.map(str::to_owned),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let scope = namespace.map_or_else(|| "cluster-wide".to_owned(), |n| format!("in {n}"));
            let what =
                format!("{verb} {resource}{} {scope}", name.map(|n| format!(" {n}")).unwrap_or_default());
            match reviews.create(&PostParams::default(), &review).await {
                Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
                Ok(_) => missing.push(what),
                Err(error) => {
                    return Check::fail(
                        CHECK,
                        format!("asking the API server: {}", said(&error)),
                        "checking another account's permissions needs create subjectaccessreviews",
                    );
                }
            }
        }
        if missing.is_empty() {
            return Check::pass(CHECK, format!("{user} has the {} permissions the guard uses", needed.len()));
        }
        Check::fail(
            CHECK,
            format!("{user} may not: {}", missing.join("; ")),
            "the chart's templates/rbac.yaml grants each; was a role edited or left out?",
        )
    }

    /// The mode and the opt-outs in force: the Deployment's flags and the namespaces' labels.
    async fn in_force(&self, deployment: Option<&Deployment>) -> InForce {
        let args: Vec<String> = deployment
            .and_then(|d| d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.args.clone())
            .unwrap_or_default();
        let flag = |name: &str| -> Vec<String> {
            args.iter().filter_map(|a| a.strip_prefix(name)?.strip_prefix('=')).map(str::to_owned).collect()
        };
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let labelled =
            |selector: &'static str| list_meta(namespaces.clone(), ListParams::default().labels(selector));
        let ignored = labelled("helm-guard.io/ignore=true").await.unwrap_or_default();
        let moded = labelled("helm-guard.io/mode").await.unwrap_or_default();
        InForce {
            mode: flag("--mode").pop().unwrap_or_else(|| "enforce".into()),
            ignored: ignored.into_iter().filter_map(|n| n.name).collect(),
            namespace_modes: moded
                .into_iter()
                .filter_map(|n| {
                    let mode = n.labels.as_ref()?.get("helm-guard.io/mode")?.clone();
                    Some(format!("{}={mode}", n.name?))
                })
                .collect(),
            exempt_namespaces: flag("--exempt-namespace"),
            exempt_identities: [flag("--exempt-user"), flag("--exempt-group")].concat(),
            break_glass_groups: flag("--break-glass-group"),
            recycle_bin_namespace: flag("--recycle-bin-namespace").pop(),
            // Without the flag, the guard's default list.
            protected_charts: match flag("--protected-chart") {
                given if given.is_empty() => crate::policy::config::DEFAULT_PROTECTED_CHARTS
                    .iter()
                    .map(|chart| (*chart).to_owned())
                    .collect(),
                given => given.into_iter().filter(|chart| !chart.is_empty()).collect(),
            },
        }
    }
}

/// The mode and the opt-outs in force.
struct InForce {
    mode: String,
    /// Namespaces labelled `helm-guard.io/ignore=true`.
    ignored: Vec<String>,
    /// `namespace=mode` of those labelled `helm-guard.io/mode`.
    namespace_modes: Vec<String>,
    exempt_namespaces: Vec<String>,
    exempt_identities: Vec<String>,
    break_glass_groups: Vec<String>,
    /// The recycle bin's namespace, when not the guard's.
    recycle_bin_namespace: Option<String>,
    /// HelmCharts protected by name (`--protected-chart`): never reinstalled on failure.
    protected_charts: Vec<String>,
}

/// The mode and the opt-outs in force (never fails: what a reader should know).
fn mode(deployment_found: bool, in_force: &InForce) -> Check {
    const CHECK: &str = "mode";
    if !deployment_found {
        return Check::skip(CHECK, "no Deployment to read the flags of");
    }
    let list = |items: &[String]| if items.is_empty() { "none".to_owned() } else { items.join(", ") };
    Check::pass(
        CHECK,
        format!(
            "{}; opted out (helm-guard.io/ignore): {}; namespace modes: {}; exempt namespaces: {}; exempt users and groups: {}; break-glass groups: {}; HelmCharts never reinstalled on failure (--protected-chart): {}",
            in_force.mode,
            list(&in_force.ignored),
            list(&in_force.namespace_modes),
            list(&in_force.exempt_namespaces),
            list(&in_force.exempt_identities),
            list(&in_force.break_glass_groups),
            list(&in_force.protected_charts),
        ),
    )
}

/// The metadata of the objects `api` lists with `params`: no data is read.
async fn list_meta<K>(api: Api<K>, params: ListParams) -> kube::Result<Vec<ObjectMeta>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.list_metadata(&params).await?.items.into_iter().map(|o| o.metadata).collect())
}

/// The warn-texts of one `Warning` header value as the API server writes it (RFC 7234: `299 -
/// "text"`, several joined by commas, `"` and `\` escaped). The text is any UTF-8, and a long
/// admission warning arrives cut with `…`: a header value that is not visible ASCII, which
/// `HeaderValue::to_str` refuses. A value that does not parse is kept whole.
fn warning_texts(value: &[u8]) -> Vec<String> {
    let value = String::from_utf8_lossy(value);
    let mut texts = Vec::new();
    let mut rest = value.trim_start();
    while !rest.is_empty() {
        // warn-code SP warn-agent SP
        let mut fields = rest.splitn(3, ' ');
        let (Some(code), Some(_agent), Some(after)) = (fields.next(), fields.next(), fields.next()) else {
            break;
        };
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) || !after.starts_with('"') {
            break;
        }
        let mut text = String::new();
        let mut chars = after[1..].char_indices();
        let mut end = None;
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => text.extend(chars.next().map(|(_, escaped)| escaped)),
                '"' => {
                    end = Some(1 + at + 1);
                    break;
                }
                c => text.push(c),
            }
        }
        let Some(end) = end else { break };
        texts.push(text);
        // An optional quoted warn-date, then a comma before the next warning.
        rest = after[end..].trim_start();
        if let Some(date) = rest.strip_prefix('"') {
            rest = date.split_once('"').map_or("", |(_, after_date)| after_date).trim_start();
        }
        match rest.strip_prefix(',') {
            Some(next) => rest = next.trim_start(),
            None => break,
        }
    }
    if texts.is_empty() {
        texts.push(value.into_owned());
    }
    texts
}

#[cfg(test)]
mod tests {
    use super::warning_texts;

    #[test]
    fn a_cut_warning_is_read_whole_though_it_is_not_visible_ascii() {
        // As the API server sent it after README's audit-mode install (issue 63): cut, ending in
        // `…`, with an escaped quote.
        let value = "299 - \"helm-guard (audit mode, said to dry runs only) would deny [latest-deployed-revision]: revision 2 is the \\\"latest\\\" one; the K3s…\"";
        let header = http::HeaderValue::from_bytes(value.as_bytes()).unwrap();
        assert!(header.to_str().is_err(), "the case this reads: to_str refuses it");
        assert_eq!(
            warning_texts(header.as_bytes()),
            [
                "helm-guard (audit mode, said to dry runs only) would deny [latest-deployed-revision]: revision 2 is the \"latest\" one; the K3s…"
            ]
        );
    }

    #[test]
    fn warnings_joined_by_commas_and_dated_are_each_read() {
        let value = br#"299 - "first, with a comma", 299 kube-apiserver "second \\ one" "Sat, 05 Dec 2026 02:00:00 GMT",299 - "third""#;
        assert_eq!(warning_texts(value), ["first, with a comma", "second \\ one", "third"]);
    }

    #[test]
    fn a_value_that_is_not_a_warning_is_kept_whole() {
        assert_eq!(warning_texts(b"helm-guard said something"), ["helm-guard said something"]);
        assert_eq!(warning_texts(b"299 - \"never closed"), ["299 - \"never closed"]);
        assert_eq!(warning_texts(b"299 - \"bad \xff byte\""), ["bad \u{fffd} byte"]);
    }
}
