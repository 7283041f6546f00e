//! Verdicts from (request facts, history, configuration): POLICY.md as code. Pure: no I/O.
//!
//! - [`delete`]: rules D1–D9 for the DELETE of a record.
//! - [`update`]: rules U1–U5 for the UPDATE of a record.
//! - [`pod`]: the helm-install pod mutation.
//! - [`mode`]: enforce/warn/audit, applied to a verdict.

pub mod config;
pub mod delete;
pub mod mode;
pub mod pod;
pub mod update;
pub mod verdict;

pub use config::{PolicyConfig, Requester};
pub use mode::{Decision, Mode, Outcome};
pub use verdict::{Reason, Verdict};

/// The annotation on a record that lets a deletion or edit through, with a reason.
pub const BREAK_GLASS_ANNOTATION: &str = "helm-guard.io/allow-delete";
/// The namespace label that overrides the global mode.
pub const MODE_LABEL: &str = "helm-guard.io/mode";

/// The break-glass reason on an object, when present and non-empty.
pub fn break_glass_reason(annotations: &std::collections::BTreeMap<String, String>) -> Option<&str> {
    annotations.get(BREAK_GLASS_ANNOTATION).map(|reason| reason.trim()).filter(|reason| !reason.is_empty())
}
