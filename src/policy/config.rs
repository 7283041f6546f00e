//! The guard's configuration, and who is asking.

use std::time::Duration;

use super::mode::Mode;

/// Who the API server says sent the request.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub username: &'a str,
    pub groups: &'a [String],
}

/// Identities that delete a namespace's contents when the namespace goes: the namespace
/// controller and the garbage collector, with or without per-controller service accounts.
const TEARDOWN_USERS: [&str; 3] = [
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
];

#[derive(Debug, Clone)]
pub struct PolicyConfig {
    /// The mode where a namespace does not set its own.
    pub default_mode: Mode,
    pub exempt_users: Vec<String>,
    pub exempt_groups: Vec<String>,
    /// A pending revision unchanged for longer than this is stuck.
    pub stuck_after: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            default_mode: Mode::Enforce,
            exempt_users: Vec::new(),
            exempt_groups: Vec::new(),
            stuck_after: Duration::from_secs(crate::release::history::DEFAULT_STUCK_AFTER_SECS as u64),
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

    pub fn is_teardown_requester(requester: Requester<'_>) -> bool {
        TEARDOWN_USERS.contains(&requester.username)
    }

    pub fn stuck_after_secs(&self) -> i64 {
        i64::try_from(self.stuck_after.as_secs()).unwrap_or(i64::MAX)
    }
}
