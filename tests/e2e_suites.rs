//! Every suite that needs a real API server (and real Helm), in one test binary; all `#[ignore]`d,
//! so `cargo test` only builds them. `HELM_GUARD_E2E=1 cargo test --test e2e_suites -- --ignored`
//! runs them all, `cargo test --test e2e_suites e2e_helm:: -- --ignored` one suite
//! (CONTRIBUTING.md, "End-to-end tests"). `e2e_deployed` installs a cluster-wide guard and runs
//! alone, a binary of its own.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

#[path = "chart.rs"]
mod chart;
#[path = "e2e.rs"]
mod e2e;
#[path = "e2e_flows.rs"]
mod e2e_flows;
#[path = "e2e_helm.rs"]
mod e2e_helm;
#[path = "e2e_k3s.rs"]
mod e2e_k3s;
#[path = "e2e_opt_out.rs"]
mod e2e_opt_out;
#[path = "e2e_outage.rs"]
mod e2e_outage;
#[path = "e2e_policy_reports.rs"]
mod e2e_policy_reports;
#[path = "e2e_records.rs"]
mod e2e_records;
#[path = "e2e_recycle.rs"]
mod e2e_recycle;
#[path = "e2e_replicas.rs"]
mod e2e_replicas;
#[path = "e2e_stuck.rs"]
mod e2e_stuck;
#[path = "e2e_tenant.rs"]
mod e2e_tenant;
#[path = "e2e_writers.rs"]
mod e2e_writers;
