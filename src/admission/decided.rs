//! What a rule decided about a request and what the mode made of it: what the DELETE steps
//! (`delete.rs`) and the other validations (`validating.rs`) both hand back.

use kube::core::admission::AdmissionRequest;

use crate::object::ReviewObject;
use crate::policy::{Outcome, Requester, Verdict};

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
    Requester {
        username: request.user_info.username.as_deref().unwrap_or_default(),
        groups: request.user_info.groups.as_deref().unwrap_or_default(),
    }
}
