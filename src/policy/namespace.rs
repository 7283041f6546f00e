//! CREATE and UPDATE of a Namespace: rules N1–N4 of POLICY.md. The labels that switch the guard
//! off for a namespace (`helm-guard.io/ignore=true`, a weaker `helm-guard.io/mode`) or loosen it
//! (`helm-guard.io/owner-lock` off, `helm-guard.io/max-revisions-per-hour` lifted or raised) are a
//! privilege: only the requesters `--opt-out-user` / `--opt-out-group` name may set them, or any
//! requester on a namespace `--exempt-namespace` names. Anyone may make protection stronger.

use std::collections::BTreeMap;

use super::config::{PolicyConfig, Requester};
use super::verdict::{Reason, Verdict};
use super::{MODE_LABEL, Mode};

/// The namespace label that takes a namespace out of the webhooks' `namespaceSelector`.
pub(crate) const IGNORE_LABEL: &str = "helm-guard.io/ignore";

/// How much of the guard a namespace's labels leave in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Protection {
    /// `helm-guard.io/ignore=true`: the webhooks do not see the namespace at all.
    pub ignored: bool,
    /// The mode its denials get: the label's, else the global default.
    pub mode: Mode,
}

impl Protection {
    /// What `labels` leave in force under the global `default` mode. A mode label that names no
    /// mode counts as absent, as the verdicts read it.
    pub(crate) fn of(labels: &BTreeMap<String, String>, default: Mode) -> Protection {
        Protection {
            ignored: labels.get(IGNORE_LABEL).map(String::as_str) == Some("true"),
            mode: labels.get(MODE_LABEL).and_then(|m| m.parse().ok()).unwrap_or(default),
        }
    }

    /// Less than `before`: ignored where it was not, or a mode that lets more through.
    pub(crate) fn is_weaker_than(self, before: Protection) -> bool {
        let strength = |mode: Mode| match mode {
            Mode::Enforce => 2,
            Mode::Warn => 1,
            Mode::Audit => 0,
        };
        (self.ignored && !before.ignored) || strength(self.mode) < strength(before.mode)
    }

    /// As a ledger transition spells it: `enforce`, `audit`, `ignored`.
    pub(crate) fn describe(self) -> String {
        if self.ignored { "ignored".to_owned() } else { self.mode.as_str().to_owned() }
    }
}

/// A namespace the guard does not fully protect, as `scan` and the metric show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct OptedOut {
    /// The namespace.
    pub namespace: String,
    /// `ignored`, `warn` or `audit`.
    pub protection: String,
    /// When the opt-out labels were last set (the time of the managedFields entry that owns
    /// them), in Unix seconds; `None` when the API server kept no such entry.
    pub since: Option<i64>,
}

impl OptedOut {
    /// The namespace of `meta`, when its labels leave it less protected than the global
    /// `default` mode would (a global mode of `warn` is not every namespace's opt-out).
    pub(crate) fn of(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        default: Mode,
    ) -> Option<OptedOut> {
        let empty = BTreeMap::new();
        let protection = Protection::of(meta.labels.as_ref().unwrap_or(&empty), default);
        OptedOut::when_weaker(meta.name.clone().unwrap_or_default(), protection, default, labels_set_at(meta))
    }

    /// `protection` reported as an opt-out when it is weaker than the global `default`.
    pub(crate) fn when_weaker(
        namespace: String,
        protection: Protection,
        default: Mode,
        since: Option<i64>,
    ) -> Option<OptedOut> {
        let unlabelled = Protection { ignored: false, mode: default };
        protection.is_weaker_than(unlabelled).then(|| OptedOut {
            namespace,
            protection: protection.describe(),
            since,
        })
    }
}

/// When the opt-out labels were last written: the latest time among the managedFields entries
/// that own one of them (the API server records which manager owns which field, and when it last
/// changed any of its fields).
pub(crate) fn labels_set_at(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<i64> {
    let owns = |fields: &serde_json::Value| {
        [IGNORE_LABEL, MODE_LABEL].iter().any(|label| {
            fields
                .pointer("/f:metadata/f:labels")
                .is_some_and(|labels| labels.get(format!("f:{label}")).is_some())
        })
    };
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.fields_v1.as_ref().is_some_and(|fields| owns(&fields.0)))
        .filter_map(|entry| entry.time.as_ref().map(|time| time.0.as_second()))
        .max()
}

/// What the namespace rules read of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NamespaceFacts<'a> {
    /// The namespace's name.
    pub name: &'a str,
    /// Its labels before (`None` for a CREATE).
    pub old_labels: Option<&'a BTreeMap<String, String>>,
    /// Its labels after.
    pub new_labels: &'a BTreeMap<String, String>,
    /// Who asks.
    pub requester: Requester<'a>,
}

/// The limits a namespace's labels set beside its protection: the owner lock (O1) and the cap on
/// revisions an hour (C8), each the label's where it parses, else the global flag's; a cap of 0
/// is none, as the flag reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Whether a release is written only by its owner.
    pub owner_lock: bool,
    /// The most revisions a release may get in an hour; `None`: no cap.
    pub max_per_hour: Option<u32>,
}

impl Limits {
    /// What `labels` set under the global `config`.
    pub(crate) fn of(labels: &BTreeMap<String, String>, config: &PolicyConfig) -> Limits {
        let owner_lock = labels.get(super::owner::OWNER_LOCK_LABEL).and_then(|v| v.parse().ok());
        let max = labels.get(super::create::MAX_REVISIONS_LABEL).and_then(|n| n.parse::<u32>().ok());
        Limits {
            owner_lock: owner_lock.unwrap_or(config.owner_lock),
            max_per_hour: max.or(config.max_revisions_per_hour).filter(|max| *max > 0),
        }
    }

    /// What these limits lift that `before` held: the owner lock switched off, the cap lifted or
    /// raised.
    fn lifted_from(self, before: Limits) -> Option<String> {
        if before.owner_lock && !self.owner_lock {
            return Some(format!("switch off its owner lock (`{}`)", super::owner::OWNER_LOCK_LABEL));
        }
        let cap = super::create::MAX_REVISIONS_LABEL;
        match (before.max_per_hour, self.max_per_hour) {
            (Some(was), None) => Some(format!("lift its cap of {was} revisions an hour (`{cap}`)")),
            (Some(was), Some(now)) if now > was => {
                Some(format!("raise its cap of {was} revisions an hour to {now} (`{cap}`)"))
            }
            _ => None,
        }
    }
}

/// Decides a Namespace CREATE or UPDATE (POLICY.md, rules N1–N4).
pub(crate) fn decide_namespace(facts: &NamespaceFacts<'_>, config: &PolicyConfig) -> Verdict {
    let empty = BTreeMap::new();
    let old_labels = facts.old_labels.unwrap_or(&empty);
    let before = Protection::of(old_labels, config.default_mode);
    let after = Protection::of(facts.new_labels, config.default_mode);
    let lifted = Limits::of(facts.new_labels, config).lifted_from(Limits::of(old_labels, config));
    // N1: nothing is switched off (the labels stay, go, or make protection stronger).
    if !after.is_weaker_than(before) && lifted.is_none() {
        return Verdict::allow(Reason::NotAnOptOut);
    }
    // N2: the namespaces allowed to opt out.
    if config.exempt_namespaces.iter().any(|n| n == facts.name) {
        return Verdict::allow(Reason::OptOut).with_detail("exempt namespace");
    }
    // N3: the requesters allowed to opt a namespace out.
    if let Some(who) = config.opt_out_privilege(facts.requester) {
        return Verdict::allow(Reason::OptOut).with_detail(who);
    }
    // N4
    let who = config.opt_out_holders();
    if let Some(lifted) = lifted.filter(|_| !after.is_weaker_than(before)) {
        return Verdict::deny(
            Reason::OptOutRefused,
            format!(
                "helm-guard: this change would {lifted} in namespace {}, which loosens what holds its Helm releases; \
                 only {who} may do that, or any requester on a namespace given to --exempt-namespace. Setting the \
                 owner lock, or a lower cap, is always allowed",
                facts.name
            ),
        );
    }
    Verdict::deny(
        Reason::OptOutRefused,
        format!(
            "helm-guard: this change would leave namespace {} {} (it is {} now), which switches off the protection of \
             its Helm releases; only {who} may do that, or any requester on a namespace given to --exempt-namespace. \
             Removing `{IGNORE_LABEL}` or setting a stricter `{MODE_LABEL}` is always allowed",
            facts.name,
            match after.ignored {
                true => format!("ignored by the guard (`{IGNORE_LABEL}=true`)"),
                false => format!("in mode `{}`", after.mode),
            },
            before.describe()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A global owner lock or cap is lifted by a namespace's label as by removing its own.
    #[test]
    fn a_global_owner_lock_or_cap_is_lifted_only_by_an_opt_out_holder() {
        let config = PolicyConfig { owner_lock: true, max_revisions_per_hour: Some(30), ..config() };
        let tenant = Requester::new("tenant", &[]);
        let (lock, cap) =
            (crate::policy::owner::OWNER_LOCK_LABEL, crate::policy::create::MAX_REVISIONS_LABEL);
        for (what, new) in [("lock off", labels(&[(lock, "false")])), ("cap lifted", labels(&[(cap, "0")]))] {
            let facts = NamespaceFacts {
                name: "tn",
                old_labels: Some(&labels(&[])),
                new_labels: &new,
                requester: tenant,
            };
            let refused = decide_namespace(&facts, &config);
            assert_eq!(refused.reason, Reason::OptOutRefused, "{what}");
            assert!(refused.message.unwrap().contains("loosens what holds its Helm releases"), "{what}");
        }
        let lower = labels(&[(cap, "10")]);
        let facts = NamespaceFacts {
            name: "tn",
            old_labels: Some(&labels(&[])),
            new_labels: &lower,
            requester: tenant,
        };
        assert_eq!(decide_namespace(&facts, &config).reason, Reason::NotAnOptOut);
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn config() -> PolicyConfig {
        PolicyConfig {
            opt_out_users: vec!["platform-admin".into()],
            opt_out_groups: vec!["platform".into()],
            exempt_namespaces: vec!["sandbox".into()],
            ..PolicyConfig::default()
        }
    }

    /// POLICY.md "Validating: CREATE and UPDATE of a Namespace", row by row.
    #[test]
    fn the_rules_of_policy_md() {
        let none = labels(&[]);
        let ignored = labels(&[(IGNORE_LABEL, "true")]);
        let audit = labels(&[(MODE_LABEL, "audit")]);
        let warn = labels(&[(MODE_LABEL, "warn")]);
        let enforce = labels(&[(MODE_LABEL, "enforce")]);
        let not_ignored = labels(&[(IGNORE_LABEL, "false")]);
        let typo = labels(&[(MODE_LABEL, "audti")]);
        let (lock, cap) =
            (crate::policy::owner::OWNER_LOCK_LABEL, crate::policy::create::MAX_REVISIONS_LABEL);
        let (locked, unlocked) = (labels(&[(lock, "true")]), labels(&[(lock, "false")]));
        let (capped, lower, higher, zero) =
            (labels(&[(cap, "20")]), labels(&[(cap, "10")]), labels(&[(cap, "40")]), labels(&[(cap, "0")]));
        let tenant = Requester::new("tenant", &[]);
        let platform_group = ["platform".to_owned()];
        let member = Requester::new("bob", &platform_group);
        let admin = Requester::new("platform-admin", &[]);
        type Row<'a> = (
            &'a str,
            &'a str,
            Option<&'a BTreeMap<String, String>>,
            &'a BTreeMap<String, String>,
            Requester<'a>,
            Reason,
        );
        let table: [Row; 23] = [
            ("N1 an unrelated change", "tn", Some(&none), &none, tenant, Reason::NotAnOptOut),
            ("N1 the ignore label removed", "tn", Some(&ignored), &none, tenant, Reason::NotAnOptOut),
            ("N1 a stricter mode", "tn", Some(&audit), &warn, tenant, Reason::NotAnOptOut),
            ("N1 enforce spelled out", "tn", Some(&none), &enforce, tenant, Reason::NotAnOptOut),
            ("N1 ignore=false is no opt-out", "tn", Some(&none), &not_ignored, tenant, Reason::NotAnOptOut),
            (
                "N1 a mode that names none counts as absent",
                "tn",
                Some(&none),
                &typo,
                tenant,
                Reason::NotAnOptOut,
            ),
            ("N2 an exempt namespace", "sandbox", Some(&none), &ignored, tenant, Reason::OptOut),
            ("N3 an opt-out group", "tn", Some(&none), &audit, member, Reason::OptOut),
            ("N3 an opt-out user, at creation", "tn", None, &ignored, admin, Reason::OptOut),
            ("N4 a tenant sets audit", "tn", Some(&none), &audit, tenant, Reason::OptOutRefused),
            ("N4 a tenant sets ignore", "tn", Some(&none), &ignored, tenant, Reason::OptOutRefused),
            ("N4 a tenant creates an ignored namespace", "tn", None, &ignored, tenant, Reason::OptOutRefused),
            ("N4 warn to audit is weaker", "tn", Some(&warn), &audit, tenant, Reason::OptOutRefused),
            ("N1 the owner lock set", "tn", Some(&none), &locked, tenant, Reason::NotAnOptOut),
            ("N4 the owner lock switched off", "tn", Some(&locked), &unlocked, tenant, Reason::OptOutRefused),
            ("N4 the owner lock's label removed", "tn", Some(&locked), &none, tenant, Reason::OptOutRefused),
            (
                "N3 the owner lock switched off by an opt-out user",
                "tn",
                Some(&locked),
                &unlocked,
                admin,
                Reason::OptOut,
            ),
            ("N1 a cap set", "tn", Some(&none), &capped, tenant, Reason::NotAnOptOut),
            ("N1 a cap lowered", "tn", Some(&capped), &lower, tenant, Reason::NotAnOptOut),
            ("N4 a cap raised", "tn", Some(&capped), &higher, tenant, Reason::OptOutRefused),
            ("N4 a cap of 0 is none: lifted", "tn", Some(&capped), &zero, tenant, Reason::OptOutRefused),
            ("N4 a cap's label removed", "tn", Some(&capped), &none, tenant, Reason::OptOutRefused),
            ("N1 a cap of 0 over none", "tn", Some(&none), &zero, tenant, Reason::NotAnOptOut),
        ];
        for (rule, name, old_labels, new_labels, requester, reason) in table {
            let facts = NamespaceFacts { name, old_labels, new_labels, requester };
            let verdict = decide_namespace(&facts, &config());
            assert_eq!(verdict.reason, reason, "{rule}");
            assert_eq!(verdict.allowed, reason != Reason::OptOutRefused, "{rule}");
        }
    }

    #[test]
    fn a_refusal_says_who_may_and_the_detail_who_did() {
        let facts = NamespaceFacts {
            name: "tn-3020",
            old_labels: Some(&labels(&[])),
            new_labels: &labels(&[(MODE_LABEL, "audit")]),
            requester: Requester::new("tenant", &[]),
        };
        let refused = decide_namespace(&facts, &config());
        let message = refused.message.unwrap();
        assert!(message.contains("namespace tn-3020 in mode `audit` (it is enforce now)"), "{message}");
        assert!(
            message.contains("only user platform-admin or members of group platform may do that"),
            "{message}"
        );
        let nobody = decide_namespace(&facts, &PolicyConfig::default()).message.unwrap();
        assert!(
            nobody.contains("only the requesters named by --opt-out-user or --opt-out-group (none are) may"),
            "{nobody}"
        );
        let groups = ["platform".to_owned()];
        let allowed = decide_namespace(
            &NamespaceFacts { requester: Requester::new("bob", &groups), ..facts },
            &config(),
        );
        assert_eq!(allowed.detail.as_deref(), Some("group:platform"));
    }

    #[test]
    fn an_opted_out_namespace_is_reported_with_when_its_labels_were_set() {
        let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "tn-3020",
            "labels": {IGNORE_LABEL: "true", "team": "a"},
            "managedFields": [
                {"manager": "kubectl-create", "operation": "Update", "time": "2026-11-01T10:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
                {"manager": "kubectl-label", "operation": "Update", "time": "2026-11-20T08:30:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:helm-guard.io/ignore": {}}}}}
            ]
        }))
        .unwrap();
        let opted = OptedOut::of(&meta, Mode::Enforce).unwrap();
        assert_eq!((opted.protection.as_str(), opted.since), ("ignored", Some(1_795_163_400)));
        let plain = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("x".into()),
            ..Default::default()
        };
        assert!(OptedOut::of(&plain, Mode::Enforce).is_none());
        assert!(OptedOut::of(&plain, Mode::Warn).is_none(), "a global mode is not the namespace's opt-out");
    }

    #[test]
    fn under_a_global_audit_mode_a_namespace_label_of_audit_changes_nothing() {
        let config = PolicyConfig { default_mode: Mode::Audit, ..PolicyConfig::default() };
        let facts = NamespaceFacts {
            name: "tn",
            old_labels: Some(&labels(&[])),
            new_labels: &labels(&[(MODE_LABEL, "audit")]),
            requester: Requester::new("tenant", &[]),
        };
        assert_eq!(decide_namespace(&facts, &config).reason, Reason::NotAnOptOut);
    }
}
