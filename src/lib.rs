//! helm-guard keeps Helm releases from being broken by the deletion of their release records, and
//! repairs the K3s/RKE2 helm-install jobs that such a deletion sends into a crash loop.
//!
//! # Where to start
//! One admission request, from TLS accept to verdict:
//! - [`release`]: the record model and payload codec, and the history classifier. Pure.
//! - [`cli`]: the subcommands, and [`release::scan`] for `scan`'s report.

pub mod admission;
pub mod cli;
pub mod cluster;
pub mod policy;
pub mod release;
pub mod server;
