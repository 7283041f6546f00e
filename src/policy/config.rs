//! The guard's configuration, and who is asking.

use std::time::Duration;

use super::mode::Mode;

/// Who the API server says sent the request.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// The requester's user name.
    pub username: &'a str,
    /// The requester's groups.
    pub groups: &'a [String],
    /// Whether the API server's authorizer allows the requester `breakglass` on the release
    /// (`releases.helm-guard.io`; asked only for a record that carries a break-glass or restore
    /// annotation).
    pub break_glass_authorized: bool,
}

impl<'a> Requester<'a> {
    /// A requester the authorizer has not been asked about.
    pub const fn new(username: &'a str, groups: &'a [String]) -> Requester<'a> {
        Requester { username, groups, break_glass_authorized: false }
    }
}

/// The group whose members every authorizer allows everything (the API server's superuser
/// group): its break-glass annotation counts without asking.
pub(crate) const SYSTEM_MASTERS: &str = "system:masters";

/// The namespace controller's identity with per-controller service accounts. Without them every
/// controller is `system:kube-controller-manager`, which then proves nothing: the namespace must
/// be terminating.
const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";

#[derive(Debug, Clone)]
/// The guard's configuration, as far as verdicts read it.
pub struct PolicyConfig {
    /// The mode where a namespace does not set its own.
    pub default_mode: Mode,
    /// Users whose requests are let through (D2, U1), by exact name.
    pub exempt_users: Vec<String>,
    /// Groups whose members' requests are let through (D2, U1).
    pub exempt_groups: Vec<String>,
    /// A pending revision unchanged for longer than this is stuck.
    pub stuck_after: Duration,
    /// Labels of records that Helm copies unchanged in every update and that controllers read
    /// (U2b): an update may not add, change or remove them.
    pub protected_labels: Vec<String>,
    /// Users who may opt a namespace out (N3), by exact name.
    pub opt_out_users: Vec<String>,
    /// Groups whose members may opt a namespace out (N3).
    pub opt_out_groups: Vec<String>,
    /// Namespaces anyone may opt out (N2).
    pub exempt_namespaces: Vec<String>,
    /// Groups whose members' break-glass and restore annotations count (D2, U1, C1, O1), beside
    /// `system:masters` and whoever the API server's authorizer allows `breakglass` on the
    /// release.
    pub break_glass_groups: Vec<String>,
    /// Users who forget releases (D10): their deletions that D3–D9 refuse are let through, a copy
    /// kept. By exact name.
    pub forgetter_users: Vec<String>,
    /// Groups whose members forget releases (D10). Default: `DEFAULT_FORGETTER_GROUPS`.
    pub forgetter_groups: Vec<String>,
    /// HelmCharts (`NAMESPACE/NAME`) protected as if labelled `helm-guard.io/protect`: their
    /// helm-install pods never uninstall the release to reinstall it. Default:
    /// `DEFAULT_PROTECTED_CHARTS`.
    pub protected_charts: Vec<String>,
    /// C8 where a namespace has no `helm-guard.io/max-revisions-per-hour` label; `None`: no cap.
    pub max_revisions_per_hour: Option<u32>,
    /// O1 where a namespace has no `helm-guard.io/owner-lock` label.
    pub owner_lock: bool,
}

/// The default of `--forgetter-group`: the service accounts of Rancher Fleet's agent namespaces,
/// downstream (`cattle-fleet-system`) and on Rancher's own cluster (`cattle-fleet-local-system`).
/// Fleet's agent forgets releases by deleting their records (`internal/helmdeployer/delete.go`
/// `deleteHistory`) as its own account `fleet-agent` or one it impersonates, which
/// `impersonate.go` always takes from the agent's namespace (`fleet-default`, or the bundle's
/// `serviceAccount`): every one of them is in its namespace's group.
pub(crate) const DEFAULT_FORGETTER_GROUPS: &[&str] =
    &["system:serviceaccounts:cattle-fleet-system", "system:serviceaccounts:cattle-fleet-local-system"];

/// The default of `--protected-chart`: the K3s and RKE2 charts a cluster cannot lose to a
/// reinstall (issue 59): the CNIs (rancher/rancher#50921: rke2-cilium uninstalled by its
/// job's failure policy), multus (harvester#10366: recreating its CRD loses every VM's network),
/// the CRD charts (a reinstall deletes every custom resource of their CRDs) and the cloud
/// providers' CSI and CPI charts.
pub(crate) const DEFAULT_PROTECTED_CHARTS: &[&str] = &[
    "kube-system/rke2-cilium",
    "kube-system/rke2-canal",
    "kube-system/rke2-calico",
    "kube-system/rke2-calico-crd",
    "kube-system/rke2-flannel",
    "kube-system/rke2-multus",
    "kube-system/rke2-snapshot-controller-crd",
    "kube-system/rke2-traefik-crd",
    "kube-system/traefik-crd",
    "kube-system/rancher-vsphere-csi",
    "kube-system/rancher-vsphere-cpi",
    "kube-system/harvester-csi-driver",
    "kube-system/harvester-cloud-provider",
];

/// The default of `--protected-label`: the label K3s/RKE2's helm-controller decides by.
pub(crate) const DEFAULT_PROTECTED_LABELS: &[&str] = &["helmcharts.helm.cattle.io/configHash"];

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            default_mode: Mode::Enforce,
            exempt_users: Vec::new(),
            exempt_groups: Vec::new(),
            stuck_after: Duration::from_secs(crate::release::history::DEFAULT_STUCK_AFTER_SECS as u64),
            protected_labels: DEFAULT_PROTECTED_LABELS.iter().map(|l| (*l).to_owned()).collect(),
            opt_out_users: Vec::new(),
            opt_out_groups: Vec::new(),
            exempt_namespaces: Vec::new(),
            break_glass_groups: Vec::new(),
            forgetter_users: Vec::new(),
            forgetter_groups: DEFAULT_FORGETTER_GROUPS.iter().map(|g| (*g).to_owned()).collect(),
            protected_charts: DEFAULT_PROTECTED_CHARTS.iter().map(|c| (*c).to_owned()).collect(),
            max_revisions_per_hour: None,
            owner_lock: false,
        }
    }
}

/// The user or group of `users`/`groups` that `requester` matches, as `user:NAME` or `group:NAME`.
fn matching(users: &[String], groups: &[String], requester: Requester<'_>) -> Option<String> {
    if users.iter().any(|user| user == requester.username) {
        return Some(format!("user:{}", requester.username));
    }
    requester.groups.iter().find(|group| groups.contains(group)).map(|group| format!("group:{group}"))
}

impl PolicyConfig {
    /// The exempt user or group the requester matches, as `user:NAME` or `group:NAME`.
    pub(crate) fn exemption(&self, requester: Requester<'_>) -> Option<String> {
        matching(&self.exempt_users, &self.exempt_groups, requester)
    }

    /// The forgetter user or group the requester matches (D10), as `user:NAME` or `group:NAME`.
    pub(crate) fn forgetter(&self, requester: Requester<'_>) -> Option<String> {
        matching(&self.forgetter_users, &self.forgetter_groups, requester)
    }

    /// The opt-out user or group the requester matches (N3).
    pub(crate) fn opt_out_privilege(&self, requester: Requester<'_>) -> Option<String> {
        matching(&self.opt_out_users, &self.opt_out_groups, requester)
    }

    /// Whether `requester`'s break-glass and restore annotations count (D2, U1, C1, O1): the
    /// authorizer allows it `breakglass` on the release, or it is in `system:masters` or a
    /// `--break-glass-group`.
    pub(crate) fn may_break_glass(&self, requester: Requester<'_>) -> bool {
        requester.break_glass_authorized || self.break_glass_granted_by_groups(requester)
    }

    /// Whether `requester`'s groups alone let it break glass (no authorizer asked).
    pub(crate) fn break_glass_granted_by_groups(&self, requester: Requester<'_>) -> bool {
        requester.groups.iter().any(|g| g == SYSTEM_MASTERS || self.break_glass_groups.contains(g))
    }

    /// A refusal's message, saying that the break-glass annotation on the object did not count
    /// for this requester and who it counts for; unchanged for an allowance, or without one.
    pub(crate) fn explain_break_glass(
        &self,
        verdict: super::Verdict,
        break_glass: Option<&str>,
        requester: Requester<'_>,
    ) -> super::Verdict {
        if verdict.allowed || break_glass.is_none() || self.may_break_glass(requester) {
            return verdict;
        }
        let groups = std::iter::once(SYSTEM_MASTERS)
            .chain(self.break_glass_groups.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(", ");
        let note = format!(
            " (the helm-guard.io/allow-delete annotation on it counts only for a requester the API server allows \
             `breakglass` on releases.helm-guard.io, as the ClusterRole helm-guard-break-glass does, and for members \
             of {groups}; {} is neither)",
            requester.username
        );
        super::Verdict { message: verdict.message.map(|m| m + &note), ..verdict }
    }

    /// Who may opt a namespace out, as a refusal says it.
    pub(crate) fn opt_out_holders(&self) -> String {
        let users = self.opt_out_users.iter().map(|u| format!("user {u}"));
        let groups = self.opt_out_groups.iter().map(|g| format!("members of group {g}"));
        let holders: Vec<String> = users.chain(groups).collect();
        if holders.is_empty() {
            "the requesters named by --opt-out-user or --opt-out-group (none are)".to_owned()
        } else {
            holders.join(" or ")
        }
    }

    /// Whether `requester` is the namespace controller (D1).
    pub(crate) fn is_namespace_controller(requester: Requester<'_>) -> bool {
        requester.username == NAMESPACE_CONTROLLER
    }

    /// `stuck_after` in seconds, as the classifier takes it.
    pub(crate) fn stuck_after_secs(&self) -> i64 {
        i64::try_from(self.stuck_after.as_secs()).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Reason, Verdict};

    /// A refusal of a break-glass deletion by someone the annotation does not count for says so;
    /// nothing else is touched.
    #[test]
    fn only_a_refusal_the_annotation_did_not_unlock_says_who_it_counts_for() {
        let config = PolicyConfig { break_glass_groups: vec!["sre".into()], ..PolicyConfig::default() };
        let (sre, dev) = (["sre".to_owned()], ["dev".to_owned()]);
        let member = Requester::new("alice", &sre);
        let other = Requester::new("bob", &dev);
        let refused = || Verdict::deny(Reason::LatestDeployedRevision, "refused");
        let allowed = Verdict::warn(Reason::BreakGlass, "kept a copy");
        let explained = config.explain_break_glass(refused(), Some("INC-1"), other).message.unwrap();
        assert!(explained.starts_with("refused (the helm-guard.io/allow-delete annotation"), "{explained}");
        assert!(explained.contains("allows `breakglass` on releases.helm-guard.io"), "{explained}");
        assert!(explained.contains("members of system:masters, sre; bob is neither"), "{explained}");
        let authorized = Requester { break_glass_authorized: true, ..other };
        assert_eq!(config.explain_break_glass(refused(), Some("INC-1"), authorized), refused(), "authorized");
        assert_eq!(config.explain_break_glass(refused(), None, other), refused(), "no annotation");
        assert_eq!(config.explain_break_glass(refused(), Some("INC-1"), member), refused(), "a member");
        assert_eq!(
            config.explain_break_glass(allowed.clone(), Some("INC-1"), other),
            allowed,
            "not a refusal"
        );
    }

    /// Break-glass is a privilege by default: the authorizer's `breakglass` on the release, the
    /// API server's superusers, or a `--break-glass-group`; never everyone (issue 80, class 1).
    #[test]
    fn break_glass_counts_for_the_authorized_the_superusers_and_the_named_groups_only() {
        let config = PolicyConfig::default();
        let (masters, edit) = (["system:masters".to_owned()], ["system:authenticated".to_owned()]);
        assert!(!config.may_break_glass(Requester::new("tenant", &edit)), "no one by default");
        assert!(config.may_break_glass(Requester::new("admin", &masters)));
        let authorized = Requester { break_glass_authorized: true, ..Requester::new("oncall", &edit) };
        assert!(config.may_break_glass(authorized));
        let sre = PolicyConfig { break_glass_groups: vec!["system:authenticated".into()], ..config };
        assert!(sre.may_break_glass(Requester::new("tenant", &edit)));
    }

    #[test]
    fn stuck_after_is_given_to_the_classifier_in_seconds() {
        let config =
            PolicyConfig { stuck_after: std::time::Duration::from_secs(15 * 60), ..PolicyConfig::default() };
        assert_eq!(config.stuck_after_secs(), 900);
        let forever = PolicyConfig { stuck_after: std::time::Duration::MAX, ..PolicyConfig::default() };
        assert_eq!(forever.stuck_after_secs(), i64::MAX);
    }
}
