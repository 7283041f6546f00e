//! The mutating webhook on helm-install pods: annotate the release state and what the pod's entry
//! script will do with it; turn `install` into `upgrade` where the script would install over a
//! release, and keep a protected chart's release from being reinstalled. Never denies.

use super::object::ReviewObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{Admission, LedgerEntry, Reviewed, Webhook};
use crate::policy::Reason;
use crate::policy::pod::{self, CHART_LABEL, HelmInstallPod, Pod};
use crate::release::{ReleaseKey, classify};

/// Decides a pod CREATE: annotates a helm-install pod with its release's state and what its
/// script will do, changed as POLICY.md "Mutating" says. Never denies.
pub(crate) async fn mutate(
    admission: &Admission,
    mut request: AdmissionRequest<ReviewObject>,
    deadline: std::time::Instant,
) -> Reviewed {
    let mut entry = LedgerEntry::new(Webhook::Mutate, &request);
    let mut response = AdmissionResponse::from(&request);
    let pod = chart_pod(&mut request);
    let namespace = request.namespace.as_deref().unwrap_or_default();
    entry.reason = match pod {
        None => Reason::NotAHelmInstallPod,
        Some(pod) if pod::already_annotated(&pod) => Reason::AlreadyAnnotated,
        Some(pod) => match HelmInstallPod::from_pod(&pod, namespace) {
            None => Reason::NotAHelmInstallPod,
            Some(target) => {
                entry.release = Some(format!("{}/{}", target.namespace, target.release));
                match patch(admission, &pod, &target, deadline, &mut entry).await {
                    Ok(patch) => match response.clone().with_patch(patch) {
                        Ok(patched) => {
                            response = patched;
                            Reason::ReleaseStateAnnotated
                        }
                        Err(error) => {
                            entry.message = Some(format!("could not serialise the patch: {error}"));
                            Reason::ReleaseStateUnavailable
                        }
                    },
                    Err(reason) => reason,
                }
            }
        },
    };
    response.audit_annotations = entry.audit_annotations();
    Reviewed { response, entry }
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

/// Classifies the pod's release and plans the patch; without a complete view of the cluster the
/// pod is left as it is (`Err`).
async fn patch(
    admission: &Admission,
    pod: &Pod,
    target: &HelmInstallPod,
    deadline: std::time::Instant,
    entry: &mut LedgerEntry,
) -> Result<json_patch::Patch, Reason> {
    if !admission.index().is_ready() {
        entry.message = Some("the release index is not ready: pod admitted unchanged".to_owned());
        return Err(Reason::ReleaseStateUnavailable);
    }
    let key = ReleaseKey {
        driver: target.driver,
        namespace: target.namespace.clone(),
        release: target.release.clone(),
    };
    admission.read_history(&key, None, deadline).await;
    let history = admission.index().history(&key);
    if history.iter().any(|f| f.payload == crate::release::history::PayloadStatus::NotLoaded) {
        entry.message =
            Some("a record of the release could not be read in time: pod admitted unchanged".to_owned());
        return Err(Reason::ReleaseStateUnavailable);
    }
    let now = jiff::Timestamp::now().as_second();
    let state = classify(&history, now, admission.settings().policy.stuck_after_secs());
    let (chart_namespace, chart_name) = &target.chart;
    let protected = match admission.index().charts.get(chart_namespace, chart_name) {
        Some(chart) if chart.protect => Some(chart.describe()),
        _ if admission.index().namespace(chart_namespace).protect => {
            Some(format!("namespace {chart_namespace}"))
        }
        _ => None,
    };
    let plan = pod::plan(target, &state, protected.as_deref());
    entry.revision = state.revision;
    entry.status = state.status;
    entry.release_state = Some(state.state.as_str().to_owned());
    entry.action = Some(plan.action.describe());
    entry.helm_chart = Some(target.chart.clone());
    let changes: Vec<String> = [
        plan.rewrite_to_upgrade.then(|| "install -> upgrade".to_owned()),
        plan.failure_policy.map(|to| {
            format!("FAILURE_POLICY {} -> {to}", target.env.failure_policy.as_deref().unwrap_or("reinstall"))
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !changes.is_empty() {
        entry.transition = Some(changes.join(", "));
    }
    Ok(pod::patch(pod, target, &plan))
}
