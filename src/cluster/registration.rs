//! The webhook configurations, filled in by the guard once it can answer.
//!
//! Why the guard and not the chart: fail-closed webhooks rendered beside the Deployment refuse
//! every Helm write in the cluster until a replica is ready, and forever if its image cannot be
//! pulled. So the chart installs the two configurations without webhooks, and each replica, once
//! its index is ready and its Service has a ready endpoint, patches in the webhooks of
//! `manifests/webhooks.yaml` (the one source), pointed at its Service and carrying the CA of the
//! certificate it serves. From then on they fail closed as before: a guard that was ready once
//! and is down refuses Helm, and the outage runbook holds.
//!
//! Reached before it may block: until the API server has called the guard through its Service, and
//! in warn and audit mode always, every webhook is registered `Ignore`. The proof is a probe the
//! guard sends itself: a dry-run CREATE of a ConfigMap labelled [`PROBE_LABEL`] in its namespace,
//! which only the `probe.helm-guard.io` webhook selects; the replica that the API server reaches
//! refuses it with [`probe_reply`] and its nonce, and only the API server can carry that refusal
//! back. Once a probe has come back that way, an enforce-mode guard registers the shipped
//! failure policies; it keeps probing every [`RECHECK_EVERY`] (the `helm_guard_apiserver_reachable`
//! gauge, and `helm-guard check`), but never goes back to `Ignore` on a failed probe, nor does a
//! replica not yet reached (one just started in a rollout) open a webhook another has closed:
//! whoever can cut the path from the API server to the guard would otherwise switch it off.
//!
//! It only patches, never creates (its role cannot create): a configuration deleted by a person
//! (the outage runbook) stays deleted until the chart puts it back, and an uninstall that
//! removed it is never undone by a replica still shutting down. It checks again every
//! [`RECHECK_EVERY`], so a rotated CA reaches the API server and an edit by hand is put back.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The shipped webhooks: the rules, selectors and failure policies the guard registers.
pub(crate) const SHIPPED: &str = include_str!("../../manifests/webhooks.yaml");

/// The field manager of the guard's patches (`kubectl get ... --show-managed-fields`).
const FIELD_MANAGER: &str = "helm-guard";

/// How often a registered guard compares the configurations with what it would write.
pub(crate) const RECHECK_EVERY: Duration = Duration::from_secs(10);

/// How often a guard not yet registered asks whether its Service has a ready endpoint.
const ENDPOINT_POLL: Duration = Duration::from_secs(2);

/// The label of the reachability probe's ConfigMap (never stored: the probe is a dry run, and
/// the guard refuses it).
pub(crate) const PROBE_LABEL: &str = "helm-guard.io/probe";

/// The name of the webhook that carries the probe.
const PROBE_WEBHOOK: &str = "probe.helm-guard.io";

/// The guard's refusal of a probe carrying `nonce`: what the prober looks for in the API server's
/// answer.
pub(crate) fn probe_reply(nonce: &str) -> String {
    format!("helm-guard probe {nonce}: the API server reached helm-guard through its Service")
}

/// What a probe found out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The API server called a replica through the Service and carried its answer back.
    Reached,
    /// The API server let the probe through without a replica's answer: the Service, its port or
    /// the network between them fails (or the probe webhook is not registered).
    NotReached,
    /// The probe could not be sent (the API server's answer says why).
    Unknown(String),
}

/// Asks the API server, through `client`, for a dry-run CREATE that only the guard's probe
/// webhook selects, and reads from its answer whether a replica answered it.
pub(crate) async fn probe(client: &kube::Client, namespace: &str) -> Reach {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
        .to_string();
    let probe = ConfigMap {
        metadata: ObjectMeta {
            generate_name: Some("helm-guard-probe-".to_owned()),
            labels: Some([(PROBE_LABEL.to_owned(), nonce.clone())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let params = kube::api::PostParams { dry_run: true, ..Default::default() };
    match Api::<ConfigMap>::namespaced(client.clone(), namespace).create(&params, &probe).await {
        Err(kube::Error::Api(status)) if status.message.contains(&probe_reply(&nonce)) => Reach::Reached,
        Ok(_) => Reach::NotReached,
        Err(error) => Reach::Unknown(error.to_string()),
    }
}

/// What the guard registers and where.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    /// The name of both configurations, and of the Service the webhooks call.
    pub(crate) name: String,
    /// The guard's namespace: the Service's, and the one namespace the webhooks leave out.
    pub(crate) namespace: String,
    /// The PEM of the CA that signed the serving certificate (read again at each check).
    pub(crate) ca_file: PathBuf,
    /// How long the API server waits for an answer.
    pub(crate) timeout_seconds: u8,
    /// Register the shipped failure policies (`Fail` for records and namespaces): enforce mode
    /// only, and once a probe has shown the API server reaching the guard. In warn and audit
    /// mode the guard refuses nothing, so it may not block anything either when the API server
    /// cannot reach it: every webhook `Ignore`.
    pub(crate) fail_closed: bool,
}

/// One configuration as the guard would write it: its kind and its `webhooks`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Desired {
    pub(crate) kind: String,
    pub(crate) webhooks: Value,
}

/// The shipped webhooks pointed at `registration`'s Service (their CA is set at each check, by
/// [`across_rotation`]). Pure.
pub(crate) fn desired(registration: &Registration) -> anyhow::Result<Vec<Desired>> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(SHIPPED).context("manifests/webhooks.yaml")?;
    let mut configurations = Vec::new();
    for mut document in documents {
        let Some(kind) = document.get("kind").and_then(Value::as_str).map(str::to_owned) else { continue };
        let mut webhooks = document.get_mut("webhooks").map(Value::take).unwrap_or_default();
        for webhook in webhooks.as_array_mut().into_iter().flatten().filter_map(Value::as_object_mut) {
            let path = webhook.get("clientConfig").and_then(|c| c.pointer("/service/path")).cloned();
            let service = json!({
                "name": registration.name,
                "namespace": registration.namespace,
                "path": path,
                "port": 443,
            });
            webhook.insert("clientConfig".into(), json!({"service": service}));
            webhook.insert("timeoutSeconds".into(), json!(registration.timeout_seconds));
            if !registration.fail_closed {
                webhook.insert("failurePolicy".into(), json!("Ignore"));
            }
            // The guard's namespace: left out of every webhook but the probe's, which selects it
            // alone.
            let probe = webhook.get("name").and_then(Value::as_str) == Some(PROBE_WEBHOOK);
            let operator = if probe { "In" } else { "NotIn" };
            let expressions = webhook
                .get_mut("namespaceSelector")
                .and_then(|selector| selector.get_mut("matchExpressions"))
                .and_then(Value::as_array_mut);
            for expression in expressions.into_iter().flatten().filter_map(Value::as_object_mut) {
                let is = |key: &str, value: &str| expression.get(key).and_then(Value::as_str) == Some(value);
                if is("key", "kubernetes.io/metadata.name") && is("operator", operator) {
                    expression.insert("values".into(), json!([registration.namespace]));
                }
            }
        }
        configurations.push(Desired { kind, webhooks });
    }
    anyhow::ensure!(configurations.len() == 2, "manifests/webhooks.yaml: two configurations expected");
    Ok(configurations)
}

/// The certificates of a PEM bundle, each as its text (whitespace aside, for comparing).
fn pem_blocks(bundle: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .filter_map(|chunk| chunk.find("-----BEGIN CERTIFICATE-----").map(|at| chunk[at..].to_owned()))
        .filter(|block| block.ends_with(END))
        .collect()
}

/// The caBundle of one webhook across a rotation of the CA: what is registered, if it already
/// trusts `ca_pem`; else `ca_pem` and the newest CA registered before it. The kubelet replaces
/// the mounted CA and certificate at once, but the guard reloads its certificate and registers
/// the CA on their own clocks: trusting both for the switch means no answer is refused between
/// them. The older CA goes at the next rotation (or by hand: a bundle that holds the current CA
/// is left as it is).
pub(crate) fn ca_bundle_across_rotation(registered_base64: Option<&str>, ca_pem: &[u8]) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let current = String::from_utf8_lossy(ca_pem).into_owned();
    let registered = registered_base64
        .and_then(|b| engine.decode(b).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let squeeze = |text: &str| text.split_whitespace().collect::<String>();
    let wanted: Vec<String> = pem_blocks(&current).iter().map(|b| squeeze(b)).collect();
    let old = pem_blocks(&registered);
    if !wanted.is_empty() && wanted.iter().all(|w| old.iter().any(|o| squeeze(o) == *w)) {
        return registered_base64.unwrap_or_default().to_owned();
    }
    let mut bundle = current.trim_end().to_owned();
    if let Some(previous) = old.first().filter(|o| !wanted.contains(&squeeze(o))) {
        bundle.push('\n');
        bundle.push_str(previous);
    }
    bundle.push('\n');
    engine.encode(bundle)
}

/// What the webhook of `webhook`'s name in `live` (the registered configuration's webhooks) has
/// at `pointer`, as text.
fn registered<'a>(live: Option<&'a Value>, webhook: &Value, pointer: &str) -> Option<&'a str> {
    live.and_then(Value::as_array)?
        .iter()
        .find(|l| l.get("name") == webhook.get("name"))?
        .pointer(pointer)?
        .as_str()
}

/// Sets each webhook's caBundle in `wanted` as [`ca_bundle_across_rotation`] says, from the
/// webhook of the same name in `live`.
fn across_rotation(wanted: &mut Value, live: Option<&Value>, ca_pem: &[u8]) {
    for webhook in wanted.as_array_mut().into_iter().flatten() {
        let bundle = ca_bundle_across_rotation(registered(live, webhook, "/clientConfig/caBundle"), ca_pem);
        if let Some(client) = webhook.get_mut("clientConfig").and_then(Value::as_object_mut) {
            client.insert("caBundle".into(), Value::String(bundle));
        }
    }
}

/// In enforce mode, a webhook registered `Fail` stays `Fail`: a replica the API server has not
/// reached yet (one just started in a rollout, or cut off) never opens what another, reached,
/// closed. Only `Ignore` ones wait for this replica's probe.
fn keep_failing_closed(wanted: &mut Value, live: Option<&Value>) {
    for webhook in wanted.as_array_mut().into_iter().flatten() {
        let closed = registered(live, webhook, "/failurePolicy") == Some("Fail");
        if closed && let Some(webhook) = webhook.as_object_mut() {
            webhook.insert("failurePolicy".into(), json!("Fail"));
        }
    }
}

/// Whether `live` already says everything `wanted` says: the API server's defaults (fields the
/// shipped webhooks leave out) are no difference, a changed or missing value is.
pub(crate) fn says(live: &Value, wanted: &Value) -> bool {
    match (live, wanted) {
        (Value::Object(live), Value::Object(wanted)) => {
            wanted.iter().all(|(key, value)| live.get(key).is_some_and(|l| says(l, value)))
        }
        (Value::Array(live), Value::Array(wanted)) => {
            live.len() == wanted.len() && live.iter().zip(wanted).all(|(l, w)| says(l, w))
        }
        (live, wanted) => live == wanted,
    }
}

/// The webhook configurations' API, by kind.
pub(crate) fn api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// The Service `name` in `namespace`: the endpoints ready to answer (by their pod's name, else
/// their addresses), and how many it has in all.
pub(crate) async fn ready_endpoints(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> kube::Result<(Vec<String>, usize)> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let selector = format!("kubernetes.io/service-name={name}");
    let list = slices.list(&ListParams::default().labels(&selector)).await?;
    let endpoints: Vec<_> = list.items.iter().flat_map(|slice| &slice.endpoints).collect();
    // An endpoint whose readiness is unknown counts as ready (the field's documented meaning).
    let ready = endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .map(|e| e.target_ref.as_ref().and_then(|t| t.name.clone()).unwrap_or_else(|| e.addresses.join(",")))
        .collect();
    Ok((ready, endpoints.len()))
}

/// Compares both configurations with `template` trusting the CA read now, and patches those
/// that differ.
async fn check_once(
    client: &kube::Client,
    registration: &Registration,
    template: &[Desired],
) -> anyhow::Result<()> {
    let ca_pem = tokio::fs::read(&registration.ca_file)
        .await
        .with_context(|| format!("reading the CA {}", registration.ca_file.display()))?;
    for wanted in template {
        let api = api(client, &wanted.kind);
        let Some(live) = api.get_opt(&registration.name).await? else {
            tracing::warn!(kind = %wanted.kind, name = %registration.name, "webhook configuration absent: the guard does not create it (`helm upgrade` of the chart puts it back)");
            continue;
        };
        let mut webhooks = wanted.webhooks.clone();
        across_rotation(&mut webhooks, live.data.get("webhooks"), &ca_pem);
        if registration.fail_closed {
            keep_failing_closed(&mut webhooks, live.data.get("webhooks"));
        }
        if says(live.data.get("webhooks").unwrap_or(&Value::Null), &webhooks) {
            continue;
        }
        // A merge patch replaces the whole list: the guard's webhooks are all the configuration has.
        let patch = json!({"webhooks": webhooks});
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() };
        match api.patch(&registration.name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => tracing::info!(kind = %wanted.kind, name = %registration.name, "webhooks registered"),
            // Deleted between the read and the patch: as absent, not created.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Waits until `ready` says the guard can answer and its Service has a ready endpoint, then
/// keeps both configurations as [`desired`] says, every [`RECHECK_EVERY`], for as long as the
/// guard runs: `Ignore` until a [`probe`] comes back through the API server, then (in enforce
/// mode) the shipped failure policies. `reachable` is set after each probe (1 reached, 0 not,
/// -1 could not ask). Errors are logged and retried: the webhooks already registered stay as
/// they are.
pub(crate) async fn keep_registered(
    client: kube::Client,
    registration: Registration,
    ready: impl Fn() -> bool + Send + 'static,
    reachable: prometheus_client::metrics::gauge::Gauge,
) {
    let templates = desired(&Registration { fail_closed: false, ..registration.clone() })
        .and_then(|open| Ok((open, desired(&registration)?)));
    let (open, closed) = match templates {
        Ok(templates) => templates,
        Err(error) => {
            tracing::error!(
                error = format!("{error:#}"),
                "this build's webhooks do not read: none registered"
            );
            return;
        }
    };
    while !ready() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut waiting_said = false;
    loop {
        match ready_endpoints(&client, &registration.namespace, &registration.name).await {
            Ok((ready, _)) if !ready.is_empty() => break,
            Ok(_) if !waiting_said => {
                tracing::info!(service = %registration.name, "ready; the webhooks are registered once the Service has a ready endpoint");
                waiting_said = true;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reading the Service's endpoints"),
        }
        tokio::time::sleep(ENDPOINT_POLL).await;
    }
    let (mut reached_once, mut last) = (false, None);
    loop {
        let template = if reached_once { &closed } else { &open };
        if let Err(error) = check_once(&client, &registration, template).await {
            tracing::warn!(error = format!("{error:#}"), "registering the webhooks; retried");
        }
        let reach = probe(&client, &registration.namespace).await;
        reachable.set(match reach {
            Reach::Reached => 1,
            Reach::NotReached => 0,
            Reach::Unknown(_) => -1,
        });
        if last.as_ref() != Some(&reach) {
            match &reach {
                Reach::Reached if registration.fail_closed && !reached_once => tracing::info!(
                    service = %registration.name,
                    "the API server reaches the guard through its Service: the webhooks now fail closed"
                ),
                Reach::Reached => {
                    tracing::info!(service = %registration.name, "the API server reaches the guard through its Service")
                }
                Reach::NotReached if reached_once && registration.fail_closed => tracing::error!(
                    service = %registration.name,
                    "the API server no longer reaches the guard through its Service: Helm's writes fail until it does (docs/operate/outage.md)"
                ),
                Reach::NotReached => tracing::error!(
                    service = %registration.name,
                    "the API server does not reach the guard through its Service (its port, a NetworkPolicy, a firewall: docs/install/platforms.md); the webhooks stay Ignore and refuse nothing"
                ),
                Reach::Unknown(error) => {
                    tracing::warn!(%error, "could not probe the path from the API server")
                }
            }
        }
        let promote = reach == Reach::Reached && !reached_once;
        reached_once |= reach == Reach::Reached;
        last = Some(reach);
        // Reached for the first time: register the failure policies now, not a period later.
        if !(promote && registration.fail_closed) {
            tokio::time::sleep(RECHECK_EVERY).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration() -> Registration {
        Registration {
            name: "hg-helm-guard".into(),
            namespace: "platform".into(),
            ca_file: PathBuf::from("/unused"),
            timeout_seconds: 7,
            fail_closed: true,
        }
    }

    /// Issue 60: audit mode registered `Fail` and blocked every Helm write of a cluster whose
    /// API server could not reach the guard; outside enforce mode every webhook is `Ignore`.
    #[test]
    fn outside_enforce_mode_no_webhook_fails_closed() {
        let open = desired(&Registration { fail_closed: false, ..registration() }).unwrap();
        let policies: Vec<&Value> =
            open.iter().flat_map(|c| c.webhooks.as_array().unwrap()).map(|w| &w["failurePolicy"]).collect();
        assert!(!policies.is_empty() && policies.iter().all(|p| *p == "Ignore"), "{policies:?}");
        let closed = desired(&registration()).unwrap();
        assert_eq!(closed[0].webhooks[0]["failurePolicy"], "Fail");
    }

    /// The probe's webhook selects the guard's namespace alone, and never fails closed: it is
    /// how the guard learns whether failing closed is safe.
    #[test]
    fn the_probe_webhook_selects_the_guards_namespace_and_stays_ignore() {
        for fail_closed in [true, false] {
            let configurations = desired(&Registration { fail_closed, ..registration() }).unwrap();
            let probe = configurations[0]
                .webhooks
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["name"] == PROBE_WEBHOOK)
                .unwrap();
            assert_eq!(probe["failurePolicy"], "Ignore");
            assert_eq!(probe["sideEffects"], "None");
            assert_eq!(
                probe["namespaceSelector"]["matchExpressions"],
                json!([{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["platform"]}])
            );
            assert_eq!(probe["objectSelector"]["matchExpressions"][0]["key"], PROBE_LABEL);
            assert_eq!(probe["rules"][0]["resources"], json!(["configmaps"]));
            assert_eq!(probe["rules"][0]["operations"], json!(["CREATE"]));
        }
    }

    /// A replica not yet reached (a rollout's new pod) registers `Ignore` only where nothing is
    /// closed yet: what another, reached, replica registered `Fail` stays `Fail`.
    #[test]
    fn a_replica_not_yet_reached_never_opens_what_another_closed() {
        let open = desired(&Registration { fail_closed: false, ..registration() }).unwrap();
        let closed = desired(&registration()).unwrap();
        let policies = |webhooks: &Value| -> Vec<String> {
            webhooks
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["failurePolicy"].as_str().unwrap().to_owned())
                .collect()
        };
        let mut wanted = open[0].webhooks.clone();
        keep_failing_closed(&mut wanted, Some(&closed[0].webhooks));
        assert_eq!(
            policies(&wanted),
            policies(&closed[0].webhooks),
            "as the reached replica registered them"
        );
        let mut first = open[0].webhooks.clone();
        keep_failing_closed(&mut first, None);
        assert!(policies(&first).iter().all(|p| p == "Ignore"), "a first install waits for the probe");
    }

    #[test]
    fn the_shipped_webhooks_point_at_the_service_trust_the_ca_and_leave_the_namespace_out() {
        let mut configurations = desired(&registration()).unwrap();
        // The CA reaches every webhook at each check (nothing registered yet: it alone).
        for configuration in &mut configurations {
            across_rotation(&mut configuration.webhooks, None, b"PEM");
        }
        let kinds: Vec<&str> = configurations.iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(kinds, ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]);
        let shipped: Vec<Value> = serde_saphyr::from_multiple(SHIPPED).unwrap();
        for (configuration, shipped) in configurations.iter().zip(&shipped) {
            let webhooks = configuration.webhooks.as_array().unwrap();
            assert_eq!(webhooks.len(), shipped["webhooks"].as_array().unwrap().len());
            for (webhook, shipped) in webhooks.iter().zip(shipped["webhooks"].as_array().unwrap()) {
                let service = &webhook["clientConfig"]["service"];
                assert_eq!(service["name"], "hg-helm-guard");
                assert_eq!(service["namespace"], "platform");
                assert_eq!(service["port"], 443);
                assert_eq!(service["path"], shipped["clientConfig"]["service"]["path"]);
                assert_eq!(webhook["clientConfig"]["caBundle"], "UEVNCg==", "PEM, ended by a newline");
                assert_eq!(webhook["timeoutSeconds"], 7);
                // Everything else is the shipped webhook's.
                for key in
                    ["name", "rules", "objectSelector", "matchConditions", "failurePolicy", "sideEffects"]
                {
                    assert_eq!(webhook[key], shipped[key], "{key}");
                }
            }
        }
        let records = &configurations[0].webhooks[0];
        assert_eq!(records["name"], "records.helm-guard.io");
        assert_eq!(records["failurePolicy"], "Fail");
        assert_eq!(
            records["namespaceSelector"]["matchExpressions"][0],
            json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["platform"]})
        );
        // The webhook for kube-system's CNI releases selects by name with In: left as shipped.
        let needed = &configurations[0].webhooks[1];
        assert_eq!(needed["namespaceSelector"]["matchExpressions"][0]["values"], json!(["kube-system"]));
    }

    #[test]
    fn a_rotated_ca_is_trusted_beside_the_one_before_it_until_the_next_rotation() {
        let engine = base64::engine::general_purpose::STANDARD;
        let names = ["guard.ns.svc".to_owned()];
        let [first, second, third] = [(); 3].map(|()| crate::certs::generate(&names, 1).unwrap().ca_pem);
        let certificates =
            |bundle: &str| pem_blocks(&String::from_utf8(engine.decode(bundle).unwrap()).unwrap());
        // Nothing registered yet: the current CA alone.
        let registered = ca_bundle_across_rotation(None, first.as_bytes());
        assert_eq!(certificates(&registered), pem_blocks(&first));
        // The same CA again: the bundle as it is, byte for byte (no patch).
        assert_eq!(ca_bundle_across_rotation(Some(&registered), first.as_bytes()), registered);
        // Rotated: the new CA, and the one before it for the switch.
        let rotated = ca_bundle_across_rotation(Some(&registered), second.as_bytes());
        assert_eq!(certificates(&rotated), [pem_blocks(&second), pem_blocks(&first)].concat());
        assert_eq!(ca_bundle_across_rotation(Some(&rotated), second.as_bytes()), rotated, "stable");
        // Rotated again: the oldest goes.
        let again = ca_bundle_across_rotation(Some(&rotated), third.as_bytes());
        assert_eq!(certificates(&again), [pem_blocks(&third), pem_blocks(&second)].concat());
        // A bundle that is not PEM is replaced by the current CA.
        let garbage = engine.encode("not a certificate");
        assert_eq!(
            certificates(&ca_bundle_across_rotation(Some(&garbage), third.as_bytes())),
            pem_blocks(&third)
        );
    }

    #[test]
    fn defaults_the_api_server_adds_are_no_difference_and_a_changed_value_is() {
        let wanted = json!([{"name": "a", "failurePolicy": "Fail", "rules": [{"operations": ["DELETE"]}]}]);
        let defaulted = json!([{"name": "a", "failurePolicy": "Fail", "objectSelector": {}, "rules": [{"operations": ["DELETE"], "scope": "*"}]}]);
        assert!(says(&defaulted, &wanted));
        let opened = json!([{"name": "a", "failurePolicy": "Ignore", "rules": [{"operations": ["DELETE"]}]}]);
        assert!(!says(&opened, &wanted));
        let fewer_rules = json!([{"name": "a", "failurePolicy": "Fail", "rules": []}]);
        assert!(!says(&fewer_rules, &wanted));
        let another_webhook = json!([{"name": "a", "failurePolicy": "Fail", "rules": [{"operations": ["DELETE"]}]}, {"name": "b"}]);
        assert!(!says(&another_webhook, &wanted));
        assert!(!says(&Value::Null, &wanted), "no webhooks at all");
    }
}
