//! Verdicts from (request facts, history, configuration): POLICY.md as code. Pure: no I/O.
//!
//! - [`delete`]: rules D1–D10 for the DELETE of a record.
//! - [`update`]: rules U1–U8 for the UPDATE of a record.
//! - [`pod`]: the helm-install pod mutation, from [`klipper`]: what the entry script does.
//! - [`namespace`]: rules N1–N4 for the labels that opt a namespace out.
//! - [`mode`]: enforce/warn/audit, applied to a verdict.

pub(crate) mod config;
pub(crate) mod create;
pub(crate) mod delete;
pub mod klipper;
pub(crate) mod mode;
pub(crate) mod namespace;
pub(crate) mod owner;
pub(crate) mod pod;
pub(crate) mod update;
pub(crate) mod verdict;

#[cfg(test)]
mod lagging_view_tests;

pub use config::{PolicyConfig, Requester};
pub use delete::{DeleteFacts, decide_delete};
pub use mode::{Decision, Mode, Outcome};
pub use verdict::{Reason, Verdict};

/// The annotation on a record that lets a deletion or edit through, with a reason.
pub(crate) const BREAK_GLASS_ANNOTATION: &str = "helm-guard.io/allow-delete";
/// The namespace label that overrides the global mode.
pub(crate) const MODE_LABEL: &str = "helm-guard.io/mode";

/// The longest text taken from a request into an audit annotation, a log field or an admission
/// warning: anyone who may write an annotation would otherwise choose the size of the API
/// server's audit log lines.
pub const MAX_ECHOED_CHARS: usize = 256;

/// `text` cut to at most [`MAX_ECHOED_CHARS`] characters, the last an ellipsis when cut.
pub(crate) fn echoed(text: &str) -> std::borrow::Cow<'_, str> {
    if text.char_indices().nth(MAX_ECHOED_CHARS).is_none() {
        return std::borrow::Cow::Borrowed(text);
    }
    let at = text.char_indices().nth(MAX_ECHOED_CHARS - 1).map_or(text.len(), |(at, _)| at);
    std::borrow::Cow::Owned(format!("{}…", text.get(..at).unwrap_or_default()))
}

/// The break-glass reason on an object, when present and non-empty, cut to
/// [`MAX_ECHOED_CHARS`].
pub(crate) fn break_glass_reason(
    annotations: &std::collections::BTreeMap<String, String>,
) -> Option<std::borrow::Cow<'_, str>> {
    annotations
        .get(BREAK_GLASS_ANNOTATION)
        .map(|reason| reason.trim())
        .filter(|reason| !reason.is_empty())
        .map(echoed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn echoed_text_is_cut_at_a_character_boundary() {
        assert_eq!(super::echoed("short"), "short");
        let long = "é".repeat(10_000);
        let cut = super::echoed(&long);
        assert_eq!(cut.chars().count(), super::MAX_ECHOED_CHARS);
        let exact = "é".repeat(super::MAX_ECHOED_CHARS);
        assert_eq!(super::echoed(&exact), exact, "a text of the limit is kept whole");
        assert!(cut.ends_with('…'));
    }

    /// `helm-guard.io/allow-delete` counts only with a reason: what the audit trail records.
    #[test]
    fn a_break_glass_annotation_counts_with_a_reason_trimmed() {
        let with = |value: &str| {
            std::collections::BTreeMap::from([(super::BREAK_GLASS_ANNOTATION.to_owned(), value.to_owned())])
        };
        assert_eq!(super::break_glass_reason(&with("  INC-7 restore  ")).as_deref(), Some("INC-7 restore"));
        assert_eq!(super::break_glass_reason(&with("   ")), None, "a blank reason is none");
        assert_eq!(super::break_glass_reason(&Default::default()), None);
    }
}
