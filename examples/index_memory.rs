//! Memory of the release index at scale.
//!
//!     cargo run --release --example index_memory [REVISIONS]
//!
//! Loads REVISIONS (default 100,000) revisions, 10 per release as Helm's default --history-max
//! keeps them, through the same path the watchers use, and reports the resident set size.
//! Results: BENCHMARKS.md.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use std::time::Duration;

use helm_guard::cluster::{IndexedRecord, ReleaseIndex, SourceKind};
use helm_guard::release::history::{PayloadStatus, RevisionFacts};
use helm_guard::release::{Driver, ReleaseKey, Status};

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn main() {
    let revisions: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let before = rss_bytes();
    let index = ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(30) });
    let per_release = 10;
    for n in 0..revisions {
        let release = n / per_release;
        let revision = n % per_release + 1;
        let key = ReleaseKey {
            driver: if release % 5 == 0 { Driver::ConfigMap } else { Driver::Secret },
            namespace: format!("team-{:04}", release % 2_000),
            release: format!("service-{release:06}"),
        };
        let status = if revision == per_release { Status::Deployed } else { Status::Superseded };
        let facts = RevisionFacts {
            revision,
            payload: PayloadStatus::NotLoaded,
            label: Some(status),
            stored_at: Some(1_795_968_000 + i64::from(n)),
            field_conflict: false,
            namespace_apart: false,
        };
        let object = format!("sh.helm.release.v1.{}.v{revision}", key.release);
        index.upsert(IndexedRecord {
            key,
            object,
            // The API server's uids are UUIDs: 36 characters each.
            uid: Some(format!("{n:08x}-0000-4000-8000-{n:012x}")),
            facts,
            resource_version: Some(format!("{}", 4_000_000 + n)),
        });
    }
    index.set_ready(true);
    let after = rss_bytes();
    let started = std::time::Instant::now();
    let census = helm_guard::cluster::census::census(&index, 1_795_968_000, 900, &|_, _| {
        helm_guard::release::writer::Liveness::Unknown
    });
    let census_took = started.elapsed();
    println!("revisions indexed:        {}", census.revisions);
    println!("releases:                 {}", census.states.values().sum::<usize>());
    println!("census (metrics scrape):  {census_took:?} under the index lock");
    println!("process RSS before:       {:.1} MiB", before as f64 / 1048576.0);
    println!("process RSS after:        {:.1} MiB", after as f64 / 1048576.0);
    println!("index bytes per revision: {:.0}", (after.saturating_sub(before)) as f64 / f64::from(revisions));
}
