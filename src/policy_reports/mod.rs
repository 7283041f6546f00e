//! Release health as PolicyReports, where platform teams already read their policy findings
//! (Policy Reporter, Kyverno's tooling, `kubectl get polr -A`): one report per namespace, one
//! result per release; a cluster-scoped one for the namespaces opted out of the guard and the
//! recycle bin's copies (`docs/operate/policy-reports.md`, has the table of states).
//!
//! - [`build`]: the reports, pure, in either API's kinds (`wgpolicyk8s.io/v1alpha2`,
//!   `openreports.io/v1alpha1`): what `scan -o policyreport` prints and the writer writes.
//! - [`writer`]: the live writer: one replica at a time (a Lease), from the index, only what
//!   changed, bounded; finds the APIs the cluster serves, and one installed later.

pub(crate) mod build;
pub mod writer;
