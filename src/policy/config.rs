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
}

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
}

/// The default of `--protected-label`: the label K3s/RKE2's helm-controller decides by.
pub const DEFAULT_PROTECTED_LABELS: &[&str] = &["helmcharts.helm.cattle.io/configHash"];

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            default_mode: Mode::Enforce,
            exempt_users: Vec::new(),
            exempt_groups: Vec::new(),
            stuck_after: Duration::from_secs(crate::release::history::DEFAULT_STUCK_AFTER_SECS as u64),
            protected_labels: DEFAULT_PROTECTED_LABELS.iter().map(|l| (*l).to_owned()).collect(),
        }
    }
}

impl PolicyConfig {
    /// The exempt user or group the requester matches, as `user:NAME` or `group:NAME`.
    pub fn exemption(&self, requester: Requester<'_>) -> Option<String> {
        if self.exempt_users.iter().any(|user| user == requester.username) {
            return Some(format!("user:{}", requester.username));
        }
        requester
            .groups
            .iter()
            .find(|group| self.exempt_groups.contains(group))
            .map(|group| format!("group:{group}"))
    }

    /// Whether `requester` is the namespace controller (D1).
    pub fn is_namespace_controller(requester: Requester<'_>) -> bool {
        requester.username == NAMESPACE_CONTROLLER
    }

    /// `stuck_after` in seconds, as the classifier takes it.
    pub fn stuck_after_secs(&self) -> i64 {
        i64::try_from(self.stuck_after.as_secs()).unwrap_or(i64::MAX)
    }
}
