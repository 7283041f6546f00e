//! The recycle bin: what the guard lets go, kept so that it can be brought back (POLICY.md, "The
//! recycle bin"; `docs/operate/restore.md`).
//!
//! Which deletions keep a copy is a rule, [`crate::policy::delete::keeps_copy`]; the admission
//! step that keeps it before approving is `keep_copy` in [`crate::admission::validating`]. The
//! rest is here:
//!
//! - [`copy`]: the copy's format, pure: a Secret in the guard's namespace that holds the record
//!   as the review carried it, how it is read back, and which copies the bounds evict.
//! - [`api`]: the API calls: storing a copy within the decision's deadline ([`api::RecycleBin`],
//!   awaited by the decision), the sweep that applies the bounds, and
//!   listing the bin for `scan --recycle-bin` and `restore`.
//! - [`restore`]: what `helm-guard restore` would bring back and the history Helm would show
//!   then, pure; `cli/restore.rs` lists and creates.

pub(crate) mod api;
pub(crate) mod copy;
pub(crate) mod restore;

/// Where `helm-guard restore` looks for the bin when told nothing: the chart's namespace.
pub(crate) const DEFAULT_NAMESPACE: &str = "helm-guard";

/// The `helm-guard restore` command that brings back `release`'s copies (one revision, or all)
/// from the bin in `bin_namespace`, naming the bin when the command would not find it unasked.
pub(crate) fn restore_command(
    release: &str,
    namespace: &str,
    revision: Option<u32>,
    bin_namespace: &str,
) -> String {
    let revision = revision.map(|r| format!(" --revision {r}")).unwrap_or_default();
    let bin = if bin_namespace == DEFAULT_NAMESPACE {
        String::new()
    } else {
        format!(" --recycle-bin-namespace {bin_namespace}")
    };
    format!("helm-guard restore {release} -n {namespace}{revision}{bin}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_restore_command_names_the_bin_only_where_restore_would_not_look() {
        assert_eq!(
            super::restore_command("web", "demo", Some(3), "helm-guard"),
            "helm-guard restore web -n demo --revision 3"
        );
        assert_eq!(
            super::restore_command("web", "demo", None, "platform"),
            "helm-guard restore web -n demo --recycle-bin-namespace platform"
        );
    }
}
