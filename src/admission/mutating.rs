//! The mutating webhook on helm-install pods: annotate the release state, and turn `install`
//! into `upgrade` when the release is orphaned-superseded. Never denies.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{Admission, LedgerEntry, Reviewed, Webhook};
use crate::policy::pod::{self, CHART_LABEL, HelmInstallPod};
use crate::policy::{Decision, Reason};
use crate::release::{ReleaseKey, classify};

pub fn mutate(admission: &Admission, request: &AdmissionRequest<DynamicObject>) -> Reviewed {
    let mut entry = LedgerEntry::new(Webhook::Mutate, request);
    entry.decision = Decision::Allowed.as_str();
    let mut response = AdmissionResponse::from(request);
    let pod = request
        .object
        .as_ref()
        .filter(|_| request.kind.group.is_empty() && request.kind.kind == "Pod")
        .filter(|_| matches!(request.operation, Operation::Create))
        .and_then(|object| serde_json::to_value(object).ok())
        .filter(|pod| pod.pointer("/metadata/labels").and_then(|l| l.get(CHART_LABEL)).is_some());
    let request_namespace = request.namespace.as_deref().unwrap_or_default();
    let target = pod.as_ref().and_then(|pod| HelmInstallPod::from_pod(pod, request_namespace));
    entry.reason = match (&pod, &target) {
        (Some(pod), _) if pod::already_annotated(pod) => Reason::AlreadyAnnotated,
        (Some(pod), Some(target)) => {
            entry.release = Some(format!("{}/{}", target.namespace, target.release));
            if admission.index.is_ready() {
                let key = ReleaseKey {
                    driver: target.driver,
                    namespace: target.namespace.clone(),
                    release: target.release.clone(),
                };
                admission.fill_missing_statuses(&key);
                let now = jiff::Timestamp::now().as_second();
                let state =
                    classify(&admission.index.history(&key), now, admission.config.stuck_after_secs());
                let plan = pod::plan(target, &state);
                let patch = json_patch::diff(pod, &pod::apply(pod, target, &plan));
                entry.revision = state.revision;
                entry.status = state.status;
                entry.release_state = Some(state.state.as_str().to_owned());
                entry.action = Some(plan.action.to_owned());
                if plan.rewrite_to_upgrade {
                    entry.transition = Some("install -> upgrade".to_owned());
                }
                match response.clone().with_patch(patch) {
                    Ok(patched) => {
                        response = patched;
                        Reason::ReleaseStateAnnotated
                    }
                    Err(error) => {
                        entry.message = Some(format!("could not serialise the patch: {error}"));
                        Reason::ReleaseStateUnavailable
                    }
                }
            } else {
                entry.message = Some("the release index is not ready: pod admitted unchanged".to_owned());
                Reason::ReleaseStateUnavailable
            }
        }
        _ => Reason::NotAHelmInstallPod,
    };
    response.audit_annotations = entry.audit_annotations();
    Reviewed { response, entry }
}
