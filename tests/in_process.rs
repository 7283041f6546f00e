//! Every suite that needs no cluster, in one test binary (each file below was a binary of its own:
//! one link instead of two dozen). `cargo test --lib tests::helm_flows::` runs one suite.
//! `config_bomb` (its own global allocator) and `live_decisions` (it measures the process's threads
//! and memory) stay binaries of their own.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a failed unwrap is a failed test"
)]

mod common;

#[path = "abuse.rs"]
mod abuse;
#[path = "cli.rs"]
mod cli;
#[path = "code_shape.rs"]
mod code_shape;
#[path = "docs.rs"]
mod docs;
#[path = "forged_records.rs"]
mod forged_records;
#[path = "fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "helm_view.rs"]
mod helm_view;
#[path = "manifests.rs"]
mod manifests;
#[path = "monitoring.rs"]
mod monitoring;
#[path = "no_panic.rs"]
mod no_panic;
#[path = "plugin.rs"]
mod plugin;
#[path = "release_records.rs"]
mod release_records;
#[path = "repair.rs"]
mod repair;
#[path = "webhook_helm_view.rs"]
mod webhook_helm_view;
#[path = "webhook_mutate.rs"]
mod webhook_mutate;
#[path = "webhook_replay.rs"]
mod webhook_replay;
#[path = "webhook_rules.rs"]
mod webhook_rules;
#[path = "webhook_server.rs"]
mod webhook_server;
