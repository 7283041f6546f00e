//! UPDATE of a record: rules U1–U5 of POLICY.md, first match wins.

use std::collections::BTreeMap;

use super::config::{PolicyConfig, Requester};
use super::verdict::{Reason, Verdict};
use crate::release::Status;
use crate::release::record::{LABEL_NAME, LABEL_OWNER, LABEL_STATUS, LABEL_VERSION};

/// One side of the update.
#[derive(Debug, Clone, Copy)]
pub struct RecordSide<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub secret_type: Option<&'a str>,
    /// The payload's status, or `None` when the payload does not decode.
    pub payload_status: Option<Status>,
}

#[derive(Debug, Clone, Copy)]
pub struct UpdateFacts<'a> {
    pub namespace: &'a str,
    pub object_name: &'a str,
    pub old: RecordSide<'a>,
    pub new: RecordSide<'a>,
    pub requester: Requester<'a>,
    /// The break-glass annotation of the new object.
    pub break_glass: Option<&'a str>,
}

pub fn decide_update(facts: &UpdateFacts<'_>, config: &PolicyConfig) -> Verdict {
    let UpdateFacts { namespace, object_name, old, new, .. } = *facts;
    // U1
    if let Some(reason) = facts.break_glass {
        return Verdict::allow(Reason::BreakGlass).with_detail(reason);
    }
    if let Some(who) = config.exemption(facts.requester) {
        return Verdict::allow(Reason::Exempt).with_detail(who);
    }
    // U2
    for key in [LABEL_OWNER, LABEL_NAME, LABEL_VERSION] {
        let (before, after) = (old.labels.get(key), new.labels.get(key));
        if before != after {
            let change = match after {
                None => format!("removes the `{key}` label"),
                Some(value) => format!("changes the `{key}` label from {before:?} to {value:?}"),
            };
            return Verdict::deny(
                Reason::IdentityLabelChange,
                format!(
                    "helm-guard: this update of {namespace}/{object_name} {change}; that would hide the record from Helm \
                     (and from helm-guard). Helm's own updates never touch these labels"
                ),
            );
        }
    }
    if old.secret_type != new.secret_type {
        return Verdict::deny(
            Reason::IdentityLabelChange,
            format!(
                "helm-guard: this update of {namespace}/{object_name} changes the Secret type from {:?} to {:?}; \
                 that would hide the record from Helm (and from helm-guard)",
                old.secret_type.unwrap_or_default(),
                new.secret_type.unwrap_or_default()
            ),
        );
    }
    // U3: only a label change this update makes, checked against the new payload.
    let (label_before, label_after) = (old.labels.get(LABEL_STATUS), new.labels.get(LABEL_STATUS));
    if let Some(payload) = new.payload_status
        && label_before != label_after
        && label_after.map(String::as_str) != Some(payload.as_str())
    {
        let label = label_after.map_or_else(|| "(removed)".to_owned(), |l| format!("`{l}`"));
        return Verdict::deny(
            Reason::StatusLabelMismatch,
            format!(
                "helm-guard: this update sets the `status` label of {namespace}/{object_name} to {label} while its payload says `{payload}`; \
                 Helm reads the payload, so `helm ls` would still show `{payload}`. To really recover a release use \
                 `helm rollback`, `helm upgrade`, or delete a stuck pending revision"
            ),
        );
    }
    // U4
    if old.payload_status.is_some() && new.payload_status.is_none() {
        return Verdict::deny(
            Reason::PayloadCorruption,
            format!(
                "helm-guard: the new `data.release` of {namespace}/{object_name} does not decode while the old one did; \
                 Helm would silently drop this revision"
            ),
        );
    }
    // U5
    Verdict::allow(Reason::HelmUpdate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(status: &str) -> BTreeMap<String, String> {
        [("owner", "helm"), ("name", "web"), ("version", "3"), ("status", status)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    const TYPE: Option<&str> = Some("helm.sh/release.v1");

    fn decide(old: RecordSide<'_>, new: RecordSide<'_>) -> Verdict {
        let facts = UpdateFacts {
            namespace: "demo",
            object_name: "sh.helm.release.v1.web.v3",
            old,
            new,
            requester: Requester { username: "admin", groups: &[] },
            break_glass: None,
        };
        decide_update(&facts, &PolicyConfig::default())
    }

    #[test]
    fn the_rules_of_policy_md() {
        let deployed = labels("deployed");
        let superseded = labels("superseded");
        let mut no_owner = labels("deployed");
        no_owner.remove("owner");
        let mut renamed = labels("deployed");
        renamed.insert("name".into(), "other".into());
        let mut bumped = labels("deployed");
        bumped.insert("version".into(), "9".into());
        let side = |labels, secret_type, payload_status| RecordSide { labels, secret_type, payload_status };
        let d = Some(Status::Deployed);
        let s = Some(Status::Superseded);
        let table = [
            (
                "U2 owner removed",
                side(&deployed, TYPE, d),
                side(&no_owner, TYPE, d),
                false,
                Reason::IdentityLabelChange,
            ),
            (
                "U2 name changed",
                side(&deployed, TYPE, d),
                side(&renamed, TYPE, d),
                false,
                Reason::IdentityLabelChange,
            ),
            (
                "U2 version changed",
                side(&deployed, TYPE, d),
                side(&bumped, TYPE, d),
                false,
                Reason::IdentityLabelChange,
            ),
            (
                "U2 type changed",
                side(&deployed, TYPE, d),
                side(&deployed, Some("Opaque"), d),
                false,
                Reason::IdentityLabelChange,
            ),
            (
                "U3 label set against payload",
                side(&superseded, TYPE, s),
                side(&deployed, TYPE, s),
                false,
                Reason::StatusLabelMismatch,
            ),
            (
                "U3 not this update's mismatch",
                side(&deployed, TYPE, s),
                side(&deployed, TYPE, s),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U4 payload corrupted",
                side(&deployed, TYPE, d),
                side(&deployed, TYPE, None),
                false,
                Reason::PayloadCorruption,
            ),
            (
                "U4 was already corrupt",
                side(&deployed, TYPE, None),
                side(&deployed, TYPE, None),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U5 Helm supersedes",
                side(&deployed, TYPE, d),
                side(&superseded, TYPE, s),
                true,
                Reason::HelmUpdate,
            ),
        ];
        for (rule, old, new, allowed, reason) in table {
            let verdict = decide(old, new);
            assert_eq!((verdict.allowed, verdict.reason), (allowed, reason), "{rule}: {verdict:?}");
        }
    }

    #[test]
    fn u1_break_glass_wins() {
        let deployed = labels("deployed");
        let mut no_owner = labels("deployed");
        no_owner.remove("owner");
        let facts = UpdateFacts {
            namespace: "demo",
            object_name: "sh.helm.release.v1.web.v3",
            old: RecordSide { labels: &deployed, secret_type: TYPE, payload_status: Some(Status::Deployed) },
            new: RecordSide { labels: &no_owner, secret_type: TYPE, payload_status: Some(Status::Deployed) },
            requester: Requester { username: "admin", groups: &[] },
            break_glass: Some("migrating to another driver"),
        };
        let verdict = decide_update(&facts, &PolicyConfig::default());
        assert_eq!((verdict.allowed, verdict.reason), (true, Reason::BreakGlass));
    }
}
