//! The mutating webhook on helm-install pods: annotate the release state and what the pod's entry
//! script will do with it; turn `install` into `upgrade` where the script would install over a
//! release, and keep a protected chart's release from being reinstalled. Never denies.

use crate::object::ReviewObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::ledger::{About, Asked, Judged};
use super::{Admission, LedgerEntry, Reviewed, Webhook};
use crate::policy::pod::{self, CHART_LABEL, HelmInstallPod, Pod};
use crate::policy::{Decision, Mode, Reason};
use crate::release::{ReleaseKey, classify};

/// Decides a pod CREATE: annotates a helm-install pod with its release's state and what its
/// script will do, changed as POLICY.md "Mutating" says. Never denies.
pub(crate) async fn mutate(
    admission: &Admission,
    mut request: AdmissionRequest<ReviewObject>,
    deadline: std::time::Instant,
) -> Reviewed {
    let asked = Asked::of(Webhook::Mutate, &request);
    let mut response = AdmissionResponse::from(&request);
    let pod = chart_pod(&mut request);
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let mut about = About::default();
    let (reason, message) = match pod {
        None => (Reason::NotAHelmInstallPod, None),
        Some(pod) if pod::already_annotated(&pod) => (Reason::AlreadyAnnotated, None),
        Some(pod) => match HelmInstallPod::from_pod(&pod, namespace) {
            None => (Reason::NotAHelmInstallPod, None),
            Some(target) if let Some(why) = not_helm_controllers(admission, &target, namespace) => {
                (Reason::ReleaseStateUnavailable, Some(why))
            }
            Some(target) => {
                about.release = Some(format!("{}/{}", target.namespace, target.release));
                match patch(admission, &pod, &target, deadline).await {
                    Ok((patch, found)) => {
                        about = About { release: about.release, ..found };
                        match response.clone().with_patch(patch) {
                            Ok(patched) => {
                                response = patched;
                                (Reason::ReleaseStateAnnotated, None)
                            }
                            Err(error) => (
                                Reason::ReleaseStateUnavailable,
                                Some(format!("could not serialise the patch: {error}")),
                            ),
                        }
                    }
                    Err(unchanged) => (Reason::ReleaseStateUnavailable, Some(unchanged.to_owned())),
                }
            }
        },
    };
    let judged = Judged { decision: Decision::Allowed, reason, mode: Mode::Enforce, message, detail: None };
    let entry = LedgerEntry::new(asked, about, judged);
    response.audit_annotations = entry.audit_annotations();
    Reviewed { response, entry }
}

/// Why the pod may not be told about its release, when it names another namespace's as only
/// helm-controller's pods may: helm-controller runs a chart's Job in the HelmChart's namespace,
/// with `CHART_NAMESPACE` that namespace and `TARGET_NAMESPACE` the chart's `targetNamespace`
/// (`chart.go` `job()`). Anyone who may create a pod could name another namespace there and learn
/// its release's state (or have an Event written on another namespace's HelmChart), so another
/// namespace is honoured only when the pod's own namespace holds that HelmChart, targeting it.
fn not_helm_controllers(
    admission: &Admission,
    target: &HelmInstallPod,
    pod_namespace: &str,
) -> Option<String> {
    let (chart_namespace, chart) = &target.chart;
    if chart_namespace != pod_namespace {
        return Some(format!(
            "CHART_NAMESPACE {chart_namespace} is not the pod's namespace {pod_namespace}, as helm-controller sets it: pod \
             admitted unchanged"
        ));
    }
    let charted = |c: crate::cluster::helmcharts::HelmChart| c.target_namespace == target.namespace;
    if target.namespace != pod_namespace
        && !admission.index().charts().get(pod_namespace, chart).is_some_and(charted)
    {
        return Some(format!(
            "TARGET_NAMESPACE {} is another namespace, and no HelmChart {pod_namespace}/{chart} deploys there: pod \
             admitted unchanged",
            target.namespace
        ));
    }
    None
}

/// The pod of a CREATE, when it carries the helm-controller's chart label, taken out of the
/// request (nothing is copied).
fn chart_pod(request: &mut AdmissionRequest<ReviewObject>) -> Option<Pod> {
    if !request.kind.group.is_empty() || request.kind.kind != "Pod" || request.operation != Operation::Create
    {
        return None;
    }
    request.object.as_ref()?.metadata.labels.as_ref()?.get(CHART_LABEL)?;
    let object = request.object.take()?;
    Some(Pod { metadata: object.metadata, spec: object.spec.unwrap_or_default() })
}

/// Classifies the pod's release and plans the patch, with what it found of the release; without
/// a complete view of the cluster the pod is left as it is (`Err`, why).
async fn patch(
    admission: &Admission,
    pod: &Pod,
    target: &HelmInstallPod,
    deadline: std::time::Instant,
) -> Result<(json_patch::Patch, About), &'static str> {
    if !admission.index().is_ready() {
        return Err("the release index is not ready: pod admitted unchanged");
    }
    let key = ReleaseKey {
        driver: target.driver,
        namespace: target.namespace.clone(),
        release: target.release.clone(),
    };
    if let Some(freshness) = &admission.freshness {
        freshness.read(&key, None, deadline).await;
    }
    let history = admission.index().history(&key);
    if history.iter().any(|f| f.payload == crate::release::history::PayloadStatus::NotLoaded) {
        return Err("a record of the release could not be read in time: pod admitted unchanged");
    }
    let now = jiff::Timestamp::now().as_second();
    let state = classify(&history, now, admission.settings().policy.stuck_after_secs())
        .judged_by(|revision| admission.writer_liveness(&key, revision));
    let (chart_namespace, chart_name) = &target.chart;
    let namespace_protects = admission.index().namespaces().get(chart_namespace).protect;
    let protected_charts = &admission.settings().policy.protected_charts;
    let labelled =
        admission.index().charts().get(chart_namespace, chart_name).is_some_and(|chart| chart.protect);
    let protected = crate::cluster::helmcharts::protection(
        chart_namespace,
        chart_name,
        labelled,
        namespace_protects,
        protected_charts,
    );
    let plan = pod::plan(target, &state, protected.as_deref());
    let changes: Vec<String> = [
        plan.rewrite_to_upgrade.then(|| "install -> upgrade".to_owned()),
        plan.failure_policy.map(|to| {
            format!("FAILURE_POLICY {} -> {to}", target.env.failure_policy.as_deref().unwrap_or("reinstall"))
        }),
        plan.force_conflicts.map(|to| match to {
            "false" => format!("FORCE_CONFLICTS {}", pod::FORCE_CONFLICTS_BUG.replacen("true", "true -> false", 1)),
            _ => format!(
                "FORCE_CONFLICTS {} -> true (revision {} failed on a server-side-apply field conflict: upgraded again with --force-conflicts, not reinstalled)",
                target.env.force_conflicts.as_deref().unwrap_or("unset"),
                state.revision.unwrap_or_default()
            ),
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    let about = About {
        revision: state.revision,
        status: state.status,
        release_state: Some(state.state.as_str().to_owned()),
        action: Some(plan.action.describe()),
        helm_chart: Some(target.chart.clone()),
        transition: (!changes.is_empty()).then(|| changes.join(", ")),
        ..About::default()
    };
    Ok((pod::patch(pod, target, &plan), about))
}
