//! O1: the owner lock. In a namespace labelled `helm-guard.io/owner-lock=true`, a release's
//! records are written (created, updated, deleted) only by the identity that wrote the first
//! revision the guard attributed (the service account, not the pod: a controller's next pod is
//! the same owner). Break-glass, exempt and forgetter identities aside, and the namespace
//! controller emptying a namespace being deleted. A release whose owner the guard does not know
//! (written before the guard, or its writer's Lease deleted to hand it over) is not locked.

use super::{PolicyConfig, Reason, Requester, Verdict};
use crate::release::writer::Writer;

/// The namespace label that locks its releases to their owners.
pub(crate) const OWNER_LOCK_LABEL: &str = "helm-guard.io/owner-lock";

/// What the owner lock reads of a write of a release record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnerFacts<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) release: &'a str,
    /// The namespace's `helm-guard.io/owner-lock=true`.
    pub(crate) locked: bool,
    /// The release's owner, when the guard knows it.
    pub(crate) owner: Option<&'a Writer>,
    pub(crate) requester: Requester<'a>,
    /// The record carries the break-glass annotation.
    pub(crate) break_glass: bool,
    /// A DELETE in a namespace being deleted.
    pub(crate) namespace_terminating: bool,
    /// Where the guard keeps writers, for the message (`kubectl -n NAMESPACE ...`).
    pub(crate) guard_namespace: &'a str,
}

/// O1: `Some` refusal when another identity writes a locked release; `None` lets the other rules
/// decide.
pub(crate) fn decide_owner(facts: &OwnerFacts<'_>, config: &PolicyConfig) -> Option<Verdict> {
    let owner = facts.owner.filter(|_| facts.locked)?;
    let who = facts.requester;
    let excused = who.username == owner.user
        || facts.namespace_terminating
        || (facts.break_glass && config.may_break_glass(who))
        || config.exemption(who).is_some()
        || config.forgetter(who).is_some();
    if excused {
        return None;
    }
    let (namespace, release) = (facts.namespace, facts.release);
    Some(Verdict::deny(
        Reason::OwnerLock,
        format!(
            "helm-guard: release {namespace}/{release} is written only by its owner, {} ({OWNER_LOCK_LABEL}); \
             {} may not write its records. Let its owner do it, or hand the release over: `kubectl -n {} delete \
             lease {}` (the next writer of a revision owns it), or unlock the namespace: `kubectl label namespace \
             {namespace} {OWNER_LOCK_LABEL}=false --overwrite` (an opt-out holder's privilege)",
            owner.user,
            super::echoed(who.username),
            facts.guard_namespace,
            crate::cluster::writers::lease_name(namespace, release),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(owner: &'a Writer, username: &'a str, groups: &'a [String]) -> OwnerFacts<'a> {
        OwnerFacts {
            namespace: "shop",
            release: "web",
            locked: true,
            owner: Some(owner),
            requester: Requester::new(username, groups),
            break_glass: false,
            namespace_terminating: false,
            guard_namespace: "helm-guard",
        }
    }

    /// O1, row by row: who may write a locked release.
    #[test]
    fn o1_a_locked_release_is_written_by_its_owner_alone() {
        let flux = Writer::of_request("system:serviceaccount:flux-system:helm-controller", None);
        let config = PolicyConfig {
            exempt_users: vec!["velero".into()],
            break_glass_groups: vec!["platform".into()],
            ..PolicyConfig::default()
        };
        let none: &[String] = &[];
        let platform = ["platform".to_owned()];
        let fleet = ["system:serviceaccounts:cattle-fleet-system".to_owned()];
        let rows: &[(&str, OwnerFacts<'_>, bool)] = &[
            ("the owner", facts(&flux, &flux.user, none), true),
            ("another identity", facts(&flux, "alice", none), false),
            ("not locked", OwnerFacts { locked: false, ..facts(&flux, "alice", none) }, true),
            ("owner unknown", OwnerFacts { owner: None, ..facts(&flux, "alice", none) }, true),
            ("exempt", facts(&flux, "velero", none), true),
            (
                "a forgetter (Fleet)",
                facts(&flux, "system:serviceaccount:cattle-fleet-system:fleet-agent", &fleet),
                true,
            ),
            (
                "break-glass, allowed to",
                OwnerFacts { break_glass: true, ..facts(&flux, "bob", &platform) },
                true,
            ),
            (
                "break-glass, not allowed to",
                OwnerFacts { break_glass: true, ..facts(&flux, "alice", none) },
                false,
            ),
            (
                "the namespace being deleted",
                OwnerFacts {
                    namespace_terminating: true,
                    ..facts(&flux, "system:serviceaccount:kube-system:namespace-controller", none)
                },
                true,
            ),
        ];
        for (row, facts, allowed) in rows {
            let verdict = decide_owner(facts, &config);
            assert_eq!(verdict.is_none(), *allowed, "{row}");
            if let Some(verdict) = verdict {
                assert_eq!(verdict.reason, Reason::OwnerLock, "{row}");
                let message = verdict.message.unwrap();
                for needle in [
                    "shop/web",
                    "system:serviceaccount:flux-system:helm-controller",
                    "kubectl -n helm-guard delete lease helm-guard-writers.shop.web",
                    "kubectl label namespace shop helm-guard.io/owner-lock=false --overwrite",
                ] {
                    assert!(message.contains(needle), "{row}: {needle} in {message}");
                }
            }
        }
    }
}
