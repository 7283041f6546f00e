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

pub mod api;
pub mod copy;
pub mod restore;
