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

/// Whether `record` carries an annotation that lifts the rules for this request: the break-glass
/// one, or on a CREATE the restore one (`helm-guard restore` writes it; a restored record keeps
/// it, so Helm's later writes of that record neither count it nor ask about it).
pub(super) fn glass_counts_on(
    request: &AdmissionRequest<ReviewObject>,
    record: &crate::release::Record,
) -> bool {
    crate::policy::break_glass_reason(&record.annotations).is_some()
        || (request.operation == kube::core::admission::Operation::Create
            && record
                .annotations
                .get(crate::policy::create::RESTORED_FROM_ANNOTATION)
                .is_some_and(|v| !v.is_empty()))
}

/// Who sent `request`, the API server's authorizer asked whether it may break glass when one of
/// `records` (the sides of one request) carries a break-glass or restore annotation and the
/// requester's groups do not already grant it (POLICY.md, "Who may break glass"). Asked for every
/// release the sides name (an update may move a record from one release to another, a creation
/// may name one release in its labels and another in its name), all of which must allow it.
pub(super) async fn requester_of_records<'r>(
    admission: &super::Admission,
    request: &'r AdmissionRequest<ReviewObject>,
    records: &[&crate::release::Record],
    deadline: std::time::Instant,
) -> Requester<'r> {
    let who = requester(request);
    let authority = admission.live.break_glass.as_deref();
    let ask = records.iter().any(|record| glass_counts_on(request, record))
        && !admission.settings().policy.break_glass_granted_by_groups(who);
    let Some(authority) = authority.filter(|_| ask) else { return who };
    let mut releases: Vec<(&str, &str)> = Vec::new();
    for record in records {
        let named =
            crate::release::record::parse_object_name(&record.object_name).map(|(release, _)| release);
        let key = &record.id.key;
        for release in std::iter::once(key.release.as_str()).chain(named) {
            if !releases.contains(&(key.namespace.as_str(), release)) {
                releases.push((&key.namespace, release));
            }
        }
    }
    let user = &request.user_info;
    let asker = crate::cluster::Asker {
        username: who.username,
        uid: user.uid.as_deref(),
        groups: who.groups,
        extra: user.extra.as_ref(),
    };
    let mut authorized = true;
    for (namespace, release) in releases {
        authorized &= authority.allows(asker, namespace, release, deadline).await;
        if !authorized {
            break;
        }
    }
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
