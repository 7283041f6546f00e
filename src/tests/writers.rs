//! Every release knows its writer (issue 58), as the index and the metrics judge it: a pending
//! latest revision is stuck by its writer's pod, not by its age alone.

use helm_guard::cluster::{IndexedRecord, ReleaseIndex, SourceKind};
use helm_guard::release::history::{PayloadStatus, RevisionFacts};
use helm_guard::release::writer::{Liveness, StuckBecause};
use helm_guard::release::{Driver, ReleaseKey, Status};

fn key(release: &str) -> ReleaseKey {
    ReleaseKey { driver: Driver::Secret, namespace: "demo".into(), release: release.into() }
}

/// Releases `young` and `old`, each with a deployed revision 1 and a pending revision 2 stored at
/// 1,000 and 0 (Unix seconds).
fn index() -> ReleaseIndex {
    let index = ReleaseIndex::new(SourceKind::Snapshot);
    for (release, stored_at) in [("young", 1_000), ("old", 0)] {
        for (revision, status) in [(1, Status::Deployed), (2, Status::PendingUpgrade)] {
            index.upsert(IndexedRecord {
                key: key(release),
                object: format!("sh.helm.release.v1.{release}.v{revision}"),
                uid: None,
                facts: RevisionFacts {
                    revision,
                    payload: PayloadStatus::Decoded(status),
                    label: Some(status),
                    stored_at: Some(stored_at),
                    field_conflict: false,
                    namespace_apart: false,
                },
                resource_version: None,
            });
        }
    }
    index
}

#[test]
fn the_census_counts_a_release_stuck_by_its_writer_and_not_by_age_while_its_writer_runs() {
    let index = index();
    assert_eq!(crate::cluster::census::pending_latest(&index).len(), 2);
    // Nothing known of the writers: the age rule (900 s), so only `old` is stuck.
    let unknown = crate::cluster::census::census(&index, 1_010, 900, &|_, _| Liveness::Unknown);
    assert_eq!(unknown.stuck, [(StuckBecause::Age, 1)].into());
    // `young`'s writer gone, `old`'s still running (a long --wait): `young` alone, at once.
    let judged = crate::cluster::census::census(&index, 1_010, 900, &|key, revision| {
        assert_eq!(revision, 2, "judged by the pending latest revision's writer");
        if key.release == "young" { Liveness::Gone } else { Liveness::Alive }
    });
    assert_eq!(judged.stuck, [(StuckBecause::WriterGone, 1)].into());
}
