//! What a rule decided about a request and what the mode made of it: what the DELETE steps
//! (`delete.rs`) and the other validations (`validating.rs`) both hand back.

use kube::core::admission::AdmissionRequest;

use crate::cluster::ReleaseView;
use crate::object::ReviewObject;
use crate::policy::{Outcome, Requester, Verdict};
use crate::release::history::RevisionFacts;

/// A rule's verdict and what the mode made of it.
#[derive(Debug)]
pub(super) struct Decided {
    /// What the rule said.
    pub(super) verdict: Verdict,
    /// What the mode made of it: what the API server is told.
    pub(super) outcome: Outcome,
    /// An approval that must first be agreed with the other replicas
    /// ([`crate::policy::delete::needs_agreement`]).
    pub(super) agree: bool,
    /// A deletion let go: its copy in the recycle bin, `namespace/name`.
    pub(super) recycled: Option<String>,
}

pub(super) fn requester(request: &AdmissionRequest<ReviewObject>) -> Requester<'_> {
    Requester::new(
        request.user_info.username.as_deref().unwrap_or_default(),
        request.user_info.groups.as_deref().unwrap_or_default(),
    )
}

/// Who sent `request`, the API server's authorizer asked whether it may break glass on the
/// release of `records` (the sides of one request) when one of them carries a break-glass or
/// restore annotation and the requester's groups do not already grant it (POLICY.md, "Who may
/// break glass").
pub(super) async fn requester_of_records<'r>(
    admission: &super::Admission,
    request: &'r AdmissionRequest<ReviewObject>,
    records: &[&crate::release::Record],
    deadline: std::time::Instant,
) -> Requester<'r> {
    let who = requester(request);
    let annotated = |record: &&&crate::release::Record| {
        crate::policy::break_glass_reason(&record.annotations).is_some()
            || record
                .annotations
                .get(crate::policy::create::RESTORED_FROM_ANNOTATION)
                .is_some_and(|v| !v.is_empty())
    };
    let Some(record) = records.iter().find(annotated) else { return who };
    let authority = admission.live.break_glass.as_deref();
    let Some(authority) =
        authority.filter(|_| !admission.settings().policy.break_glass_granted_by_groups(who))
    else {
        return who;
    };
    let user = &request.user_info;
    let asker = crate::cluster::Asker {
        username: who.username,
        uid: user.uid.as_deref(),
        groups: who.groups,
        extra: user.extra.as_ref(),
    };
    let key = &record.id.key;
    let authorized = authority.allows(asker, &key.namespace, &key.release, deadline).await;
    Requester { break_glass_authorized: authorized, ..who }
}

/// `rule` on the rest of a release as `view` shows it, where an approval must also hold on what
/// may still be stored: records the view hides for approved deletions the watch has not brought
/// (in flight, refused further down, or approved on a review the API server never sent, which
/// anyone on the pod network can POST) are shown again, and a refusal there is the answer. So an
/// approval that only hiding them made (the marked latest as if it were the last record) waits
/// until the deletions are stored.
pub(super) fn on_what_may_be_stored(
    view: &ReleaseView<'_>,
    rule: impl Fn(&[RevisionFacts]) -> Verdict,
) -> Verdict {
    let verdict = rule(view);
    match view.with_hidden() {
        Some(held) if verdict.allowed => {
            let again = rule(&held);
            if again.allowed { verdict } else { again }
        }
        _ => verdict,
    }
}
