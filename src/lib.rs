//! helm-guard keeps Helm releases from being broken by the deletion of their release records, and
//! repairs the K3s/RKE2 helm-install jobs that such a deletion sends into a crash loop.
//!
//! # Where to start
//!
//! Follow one admission request from TLS accept to verdict:
//!
//! 1. [`server`] accepts the connection (rustls, certificate reload in [`server::tls`]; the
//!    connection cap and idle timeout in [`server::limits`]) and [`server::routes`] reads the
//!    body within its size limit, deadline and permit, and awaits its decision: one async path
//!    for every request, live or snapshot; a decision that waits on the API server holds no
//!    thread, and only the CPU work of a large body or payload goes to the blocking pool.
//! 2. [`admission::review`] parses the AdmissionReview, its objects only as far as a verdict
//!    reads them ([`object`]); [`admission::validating`] or
//!    [`admission::mutating`] gathers the facts: the record in the request, decoded by
//!    [`release`] (or recalled by [`release::decode::memo`]), and the release's history from the
//!    [`cluster`] index. A DELETE's four steps are in order in [`admission::delete`]: decided on
//!    the index, confirmed against what is stored ([`cluster::freshness`]), a copy kept, agreed
//!    with the other replicas.
//! 3. [`policy`] decides, purely: [`policy::delete`] (rules D1–D10), [`policy::update`] (U1–U8),
//!    [`policy::pod`] (the helm-install pod mutation, from [`policy::klipper`]: what each
//!    klipper-helm entry script does), [`policy::mode`] (enforce/warn/audit).
//! 4. [`admission::ledger`] writes the audit annotations and the ledger log line (as JSON by
//!    [`server::log_format`], written out by a tracing-appender thread; and, for a
//!    refusal, the notice [`cluster::events`] turns into an Event), and the answer goes back. A
//!    verdict that rests on a release's history first waits for a fence round showing the watch
//!    has caught up ([`cluster::fence`]); an approved deletion of history is agreed with the
//!    other replicas ([`cluster::coordination`], [`cluster::claim_books`]); one that only an
//!    override lets through first keeps a copy of
//!    the record in the recycle bin ([`recycle_bin`]: its format, its API calls, restoring).
//!
//! The [`cluster::index::ReleaseIndex`] is filled by [`cluster::snapshot`] (a dump file) or by
//! [`cluster::watch`] (kube-rs metadata watchers, and K3s's HelmCharts in
//! [`cluster::helmcharts`]; what a verdict reads beyond them, [`cluster::fetch`]); [`live`]
//! starts them and the rest of the live guard (Events, agreement, the recycle bin, the
//! [`policy_reports`] writer, which keeps release health as PolicyReports) once, for `serve` and
//! the tests, each a task of one [`tasks::Tasks`] that the server stops after it has drained.
//! The command line is in [`cli`], private: its one runtime, its commands and their exit codes
//! are the binary's interface (reached through [`main`]); the webhook's certificates are in
//! [`certs`].
//!
//! The pure core ([`release`], [`policy`]) does no I/O and can be used on its own:
//!
//! ```
//! use helm_guard::policy::{DeleteFacts, PolicyConfig, Reason, Requester, decide_delete};
//! use helm_guard::release::history::{PayloadStatus, RevisionFacts, classify};
//! use helm_guard::release::{History, ReleaseState, Status};
//!
//! let revision = |revision, status| RevisionFacts {
//!     revision,
//!     payload: PayloadStatus::Decoded(status),
//!     label: Some(status),
//!     stored_at: None,
//!     field_conflict: false,
//!     namespace_apart: false,
//! };
//! let facts = [revision(2, Status::Superseded), revision(3, Status::Deployed)];
//! assert_eq!(classify(&facts, 0, 900).state, ReleaseState::Healthy);
//!
//! // Deleting revision 3 would leave revision 2, superseded, as the latest: refused.
//! let delete = DeleteFacts {
//!     namespace: "demo",
//!     release: "web",
//!     revision: 3,
//!     status: Some(Status::Deployed),
//!     namespace_terminating: false,
//!     requester: Requester::new("admin", &[]),
//!     break_glass: None,
//!     last_deployed: None,
//! };
//! // The verdict gets the other records of the release: all but revision 3.
//! let verdict = decide_delete(&delete, &History::new(&facts[..1]), &PolicyConfig::default());
//! assert!(!verdict.allowed);
//! assert_eq!(verdict.reason, Reason::LatestDeployedRevision);
//! ```

// Every public item says what it is: the library is read by people who did not write it.
#![deny(missing_docs)]
// Public is the library's API; the rest is `pub(crate)`, so the compiler finds what nothing uses.
#![warn(unreachable_pub)]
// The crate doc maps the code for its maintainers, private modules included: their docs are built
// with `--document-private-items` (CI, CONTRIBUTING.md), where every link resolves.
#![allow(rustdoc::private_intra_doc_links)]
// The other lints are in Cargo.toml's [lints], for every target. Unit tests may unwrap: a failed
// unwrap is a failed test.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

pub mod admission;
pub mod certs;
pub(crate) mod cli;
pub mod cluster;
pub mod live;
pub mod object;
pub mod policy;
pub mod policy_reports;
pub(crate) mod recycle_bin;
#[cfg(test)]
mod reference;
// The suites of src/tests and the helpers they share with the integration suites (tests/common),
// which name this crate `helm_guard` as those do.
#[cfg(test)]
extern crate self as helm_guard;
#[cfg(test)]
#[allow(unreachable_pub, reason = "helpers shared with the integration suites, where they are public")]
#[path = "../tests/common/mod.rs"]
mod common;
pub mod release;
pub mod server;
pub(crate) mod tally;
pub mod tasks;
#[cfg(test)]
#[allow(unreachable_pub)]
mod tests;

/// The `helm-guard` command: parses the process's arguments, runs the command, and ends as
/// `helm-guard --help` says (0 done, 1 findings, 2 bad input, 3 failed). The command line is the
/// binary's interface, not this library's: this and [`command`] are all of it here.
pub fn main() -> std::process::ExitCode {
    cli::main()
}

/// The command line's definition, for whatever checks an argument list without running it (the
/// chart's and the manifests' arguments, in tests).
pub fn command() -> clap::Command {
    <cli::Cli as clap::CommandFactory>::command()
}

/// What this binary is: the crate version, the git commit it was built from and when (set by
/// `build.rs`), as `--version` and the `helm_guard_build_info` metric report them.
pub(crate) mod build {
    /// The crate's version.
    pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// The git commit built from (`unknown` outside a git checkout).
    pub(crate) const COMMIT: &str = env!("HELM_GUARD_GIT_COMMIT");
    /// When it was built (UTC, RFC 3339).
    pub(crate) const DATE: &str = env!("HELM_GUARD_BUILD_DATE");
    /// `--version`'s text.
    pub(crate) const LONG_VERSION: &str = concat!(
        env!("CARGO_PKG_VERSION"),
        " (commit ",
        env!("HELM_GUARD_GIT_COMMIT"),
        ", built ",
        env!("HELM_GUARD_BUILD_DATE"),
        ")"
    );
}
