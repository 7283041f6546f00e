use super::*;
use crate::cluster::Listing;
use crate::release::{Driver, Status};

fn key() -> ReleaseKey {
    ReleaseKey { driver: Driver::Secret, namespace: "demo".into(), release: "web".into() }
}

fn facts(revision: u32, status: Status) -> RevisionFacts {
    RevisionFacts {
        revision,
        payload: PayloadStatus::NotLoaded,
        label: Some(status),
        stored_at: None,
        field_conflict: false,
        namespace_apart: false,
    }
}

fn object(revision: u32) -> String {
    format!("sh.helm.release.v1.web.v{revision}")
}

fn record(revision: u32, status: Status, resource_version: &str) -> IndexedRecord {
    IndexedRecord {
        key: key(),
        object: object(revision),
        uid: Some(format!("uid-{revision}")),
        facts: facts(revision, status),
        resource_version: Some(resource_version.to_owned()),
    }
}

fn index(source: SourceKind) -> ReleaseIndex {
    let index = ReleaseIndex::new(source);
    for (revision, status) in [(1, Status::Superseded), (2, Status::Deployed)] {
        index.upsert(record(revision, status, "1"));
    }
    index
}

fn delete(revision: u32) -> Option<IndexChange> {
    Some(IndexChange::Delete { object: object(revision), uid: Some(format!("uid-{revision}")) })
}

/// The release's last good revision is the newest record the guard saw deployed, whatever it
/// was moved to since; a newer record that was never deployed does not take its place, one
/// deployed later does, and a new object under the name starts afresh.
#[test]
fn the_record_last_seen_deployed_is_remembered_through_its_downgrades() {
    let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(30) });
    let last =
        |revision: u32| index.is_last_deployed(&key(), &object(revision), Some(&format!("uid-{revision}")));
    assert_eq!((last(1), last(2)), (Some(false), Some(true)));
    // v2 superseded, then failed, under a forged v3 that never ran.
    index.upsert(record(2, Status::Superseded, "2"));
    index.upsert(record(3, Status::PendingUpgrade, "3"));
    index.upsert(record(2, Status::Failed, "4"));
    assert_eq!((last(2), last(3)), (Some(true), Some(false)));
    // v3 deployed: it is the last good one now.
    index.upsert(record(3, Status::Deployed, "5"));
    assert_eq!((last(2), last(3)), (Some(false), Some(true)));
    // Another object under v3's name (a reinstall) was never seen deployed.
    index.upsert(IndexedRecord { uid: Some("uid-other".into()), ..record(3, Status::PendingInstall, "6") });
    assert_eq!(index.is_last_deployed(&key(), &object(2), Some("uid-2")), Some(true));
    let fresh = ReleaseIndex::new(SourceKind::Snapshot);
    fresh.upsert(record(1, Status::Superseded, "1"));
    assert_eq!(fresh.is_last_deployed(&key(), &object(1), Some("uid-1")), None, "never seen deployed");
}

#[test]
fn a_snapshot_applies_approved_changes_at_once() {
    let index = index(SourceKind::Snapshot);
    index.decide(&key(), None, |_| ((), delete(1)));
    let upsert = IndexChange::Upsert { object: object(3), facts: facts(3, Status::PendingUpgrade) };
    index.decide(&key(), None, |_| ((), Some(upsert)));
    let revisions: Vec<u32> = index.history(&key()).iter().map(|f| f.revision).collect();
    assert_eq!(revisions, vec![2, 3]);
}

#[test]
fn live_hides_an_approved_deletion_until_confirmed_or_expired() {
    let waiting = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    waiting.decide(&key(), None, |_| ((), delete(2)));
    assert_eq!(waiting.history(&key()).len(), 1, "hidden from the next verdict");
    waiting.upsert(record(2, Status::Deployed, "2"));
    assert_eq!(waiting.history(&key()).len(), 1, "a watch update does not unhide it");
    waiting.remove(&key(), &object(2), Some("uid-2"));
    assert_eq!(waiting.revision_count(), 1, "the watch confirmed it");

    let expired = index(SourceKind::Live { tombstone_ttl: Duration::ZERO });
    expired.decide(&key(), None, |_| ((), delete(2)));
    assert_eq!(expired.history(&key()).len(), 2, "restored once the timeout passed");

    let live = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    let upsert = IndexChange::Upsert { object: object(3), facts: facts(3, Status::Deployed) };
    live.decide(&key(), None, |_| ((), Some(upsert)));
    assert_eq!(live.history(&key()).len(), 2, "live writes come from the watch only");
}

#[test]
fn a_relist_keeps_pending_deletions_hidden_and_drops_vanished_releases() {
    let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    index.decide(&key(), None, |_| ((), delete(2)));
    let other = ReleaseKey { release: "other".into(), ..key() };
    index.upsert(IndexedRecord { key: other.clone(), ..record(1, Status::Deployed, "1") });
    index.replace_records(
        &[Driver::Secret],
        [1, 2].map(|revision| record(revision, Status::Deployed, "1")),
        0,
    );
    assert_eq!(index.history(&key()).len(), 1);
    assert!(index.history(&other).is_empty());
}

#[test]
fn two_objects_of_one_revision_are_both_kept() {
    let index = index(SourceKind::Snapshot);
    index.upsert(IndexedRecord { object: "rb-copy".into(), ..record(2, Status::Superseded, "1") });
    assert_eq!(index.history(&key()).len(), 3);
    let others = index.decide(&key(), Some("rb-copy"), |others| (others.len(), None));
    assert_eq!(others, 2, "the object a request is about is left out, its twin is not");
}

fn read(resource_version: &str, facts: RevisionFacts) -> crate::cluster::ReadRecord {
    let uid = Some(format!("uid-{}", facts.revision));
    crate::cluster::ReadRecord { uid, resource_version: Some(resource_version.to_owned()), facts }
}

/// A reinstall brings back the names of the first incarnation's records: what the index
/// remembered of the old objects (their approved deletions, their payload readings) must not
/// stand for the new ones.
#[test]
fn a_name_reused_by_a_new_object_starts_afresh() {
    let first = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    first.decide(&key(), None, |_| ((), delete(2)));
    assert_eq!(first.history(&key()).len(), 1);
    // The watch missed the deletion (a relist brings the new object): not hidden.
    let reinstalled = IndexedRecord { uid: Some("uid-2-again".into()), ..record(2, Status::Deployed, "9") };
    first.replace_records(&[Driver::Secret], [record(1, Status::Superseded, "1"), reinstalled.clone()], 0);
    assert_eq!(first.history(&key()).len(), 2, "the new object is not the deleted one");
    // The old object's deletion event arriving late does not remove the new one.
    first.remove(&key(), &object(2), Some("uid-2"));
    assert_eq!(first.history(&key()).len(), 2);
    // Nor does a claim or a tombstone on the old object hide it.
    first.hide(&key(), &object(2), Some("uid-2"), Instant::now() + Duration::from_secs(3600));
    first.decide(&key(), None, |_| ((), delete(2)));
    assert_eq!(first.history(&key()).len(), 2);
    // A claim from an older guard, by name only, still hides whatever has the name.
    first.hide(&key(), &object(2), None, Instant::now() + Duration::from_secs(3600));
    assert_eq!(first.history(&key()).len(), 1);

    // By a watch event, the same: a new uid under the name replaces what was known.
    let live = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    let decoded =
        RevisionFacts { payload: PayloadStatus::Decoded(Status::Deployed), ..facts(2, Status::Deployed) };
    live.verified(&key(), &object(2), Some("1"), read("1", decoded));
    live.decide(&key(), None, |_| ((), delete(2)));
    live.upsert(IndexedRecord { resource_version: Some("1".into()), ..reinstalled });
    assert_eq!(live.history(&key()).len(), 2, "not hidden");
    assert_eq!(
        live.unverified(&key(), None).len(),
        2,
        "the old object's payload reading is not the new one's"
    );
}

#[test]
fn payload_facts_last_while_the_object_is_unchanged() {
    let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    assert_eq!(index.unverified(&key(), None).len(), 2);
    let facts2 =
        RevisionFacts { payload: PayloadStatus::Decoded(Status::Deployed), ..facts(2, Status::Deployed) };
    index.verified(&key(), &object(2), Some("1"), read("1", facts2));
    assert_eq!(index.unverified(&key(), None), vec![(object(1), Some("1".to_owned()))]);
    index.upsert(record(2, Status::Deployed, "1"));
    assert_eq!(index.unverified(&key(), None).len(), 1, "a relist at the same resourceVersion keeps it");
    index.upsert(record(2, Status::Deployed, "7"));
    assert_eq!(index.unverified(&key(), None).len(), 2, "a new resourceVersion must be read again");
    index.verified(&key(), &object(2), Some("5"), read("6", facts2));
    assert_eq!(
        index.unverified(&key(), None).len(),
        2,
        "a read older than what the watch brought is dropped"
    );
    index.verified(&key(), &object(2), Some("7"), read("8", facts2));
    assert_eq!(index.unverified(&key(), None).len(), 1, "a read newer than a lagging watch is taken");
    index.upsert(record(2, Status::Deployed, "8"));
    assert_eq!(index.unverified(&key(), None).len(), 1, "and kept when the watch catches up");
}

#[test]
fn the_namespaces_whose_records_changed_are_told_once_and_only_when_asked() {
    let index = index(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    assert!(index.changes().take().is_empty(), "nothing kept before anyone asks");
    index.changes().track();
    index.upsert(record(3, Status::Deployed, "3"));
    let mut other = record(1, Status::Deployed, "1");
    other.key.namespace = "other".into();
    index.upsert(other);
    assert_eq!(index.changes().take().into_iter().collect::<Vec<_>>(), ["demo", "other"]);
    assert!(index.changes().take().is_empty(), "told once");
    index.decide(&key(), None, |_| ((), delete(1)));
    assert_eq!(index.changes().take().len(), 1, "an approved deletion hides a record: the history changed");
    index.decide(&key(), None, |_| ((), None));
    assert!(index.changes().take().is_empty(), "a verdict that changes nothing");
    let by_namespace = crate::cluster::census::releases_in(&index, None);
    assert_eq!(by_namespace.keys().collect::<Vec<_>>(), ["demo", "other"]);
    let demo: Vec<u32> = by_namespace["demo"][0].1.iter().map(|f| f.revision).collect();
    assert_eq!(demo.len(), 2, "the hidden revision 1 is not seen: {demo:?}");
    index.namespaces().set("demo", crate::cluster::NamespaceInfo::default());
    assert_eq!(
        index.changes().take().into_iter().collect::<Vec<_>>(),
        [crate::cluster::changes::NAMESPACES_CHANGED],
        "a namespace's labels"
    );
    index.namespaces().set("demo", crate::cluster::NamespaceInfo::default());
    assert!(index.changes().take().is_empty(), "the same labels again");
    let only: std::collections::BTreeSet<String> = ["other".to_owned()].into();
    assert_eq!(
        crate::cluster::census::releases_in(&index, Some(&only)).keys().collect::<Vec<_>>(),
        ["other"]
    );
}

/// A record event as the record watch's feed applies it: the record, then the watch's mark.
fn brought(index: &ReleaseIndex, record: IndexedRecord) {
    let version = crate::cluster::rounds::revision(record.resource_version.as_deref()).unwrap();
    index.upsert(record);
    index.applied(Driver::Secret, version);
}

/// A deletion event of revision `revision`'s object at `version`, as the feed applies it.
fn brought_deletion(index: &ReleaseIndex, revision: u32, version: u64) {
    index.remove(&key(), &object(revision), Some(&format!("uid-{revision}")));
    index.applied(Driver::Secret, version);
}

/// A release is as its watch brought it (one earlier state of what is stored) while every record
/// is at a resourceVersion the watch applied and none was removed ahead of it; each kind of read
/// that moves part of it ahead (a payload read newer than the watch, a record a read found gone,
/// a listing of the release) makes it not so, until the watch catches up.
#[test]
fn a_release_is_as_watched_until_a_read_moves_part_of_it_ahead() {
    let index = ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    let as_watched = || index.decide(&key(), None, |view| (view.is_as_watched(), None));
    brought(&index, record(1, Status::Superseded, "1"));
    brought(&index, record(2, Status::Superseded, "2"));
    brought(&index, record(3, Status::Uninstalling, "3"));
    assert!(as_watched(), "the watch's events alone");
    index.decide(&key(), None, |_| ((), delete(1)));
    assert!(as_watched(), "an approved deletion hides a record, it moves nothing ahead");

    let superseded =
        RevisionFacts { payload: PayloadStatus::Decoded(Status::Superseded), ..facts(2, Status::Superseded) };
    index.verified(&key(), &object(2), Some("2"), read("2", superseded));
    assert!(as_watched(), "a payload read at the version the watch brought");
    index.verified(&key(), &object(2), Some("2"), read("7", superseded));
    assert!(!as_watched(), "a payload read newer than the watch");
    brought(&index, record(2, Status::Superseded, "7"));
    assert!(as_watched(), "the watch brought it");

    index.gone(&key(), &object(2), Some("2"));
    assert!(
        as_watched() && index.holds(&key(), &object(2), Some("uid-2")),
        "a read of a version since replaced"
    );
    index.gone(&key(), &object(2), Some("7"));
    assert!(!as_watched(), "a record a read found gone before the watch");
    let old_listing = vec![
        record(1, Status::Superseded, "1"),
        record(2, Status::Superseded, "8"),
        record(3, Status::Uninstalling, "3"),
    ];
    // Listed at 8: after a change the watch has not brought, before the deletion the read saw.
    index.sync_release(&key(), Listing { records: old_listing, resource_version: Some("8".into()) });
    assert!(
        !index.holds(&key(), &object(2), Some("uid-2")),
        "a listing that still shows it is older than the read"
    );
    brought_deletion(&index, 2, 8);
    assert!(as_watched(), "the watch brought its deletion");

    let records = vec![record(1, Status::Superseded, "1"), record(4, Status::PendingInstall, "9")];
    index.sync_release(&key(), Listing { records, resource_version: Some("9".into()) });
    assert!(!as_watched(), "a listing: a record the watch has not brought, another gone ahead of it");
    brought(&index, record(4, Status::PendingInstall, "9"));
    assert!(!as_watched(), "the new record brought, the one the listing dropped not yet");
    brought_deletion(&index, 3, 10);
    assert!(as_watched(), "both brought");

    index.gone(&key(), &object(4), Some("9"));
    index.replace_records(&[Driver::Secret], [record(1, Status::Superseded, "1")], 11);
    assert!(as_watched(), "a relist is one state");
    let old_list = [record(1, Status::Superseded, "1"), record(5, Status::Deployed, "5")];
    index.replace_records(&[Driver::Secret], old_list, 5);
    index.verified(&key(), &object(5), Some("5"), read("9", facts(5, Status::Superseded)));
    assert!(!as_watched(), "a list older than what the watch brought before counts from its own version");
}

/// A listing is read while the watch goes on: by the time it is applied the index may be newer.
/// What the watch brought after the listing's moment stays: a record it saw deleted is not put
/// back, a record it saw change is not taken back to the listed version, and a record made after
/// the listing is kept; what the listing shows newer than the watch is taken.
#[test]
fn a_listing_older_than_the_watch_takes_nothing_back() {
    let index = ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) });
    brought(&index, record(1, Status::Superseded, "1"));
    brought(&index, record(2, Status::Deployed, "2"));
    brought(&index, record(3, Status::Uninstalling, "3"));
    // Listed at 3; then the watch brings the deletion of v3, v2 superseded and a new v4.
    let listed = vec![
        record(1, Status::Superseded, "1"),
        record(2, Status::Deployed, "2"),
        record(3, Status::Uninstalling, "3"),
    ];
    brought_deletion(&index, 3, 5);
    brought(&index, record(2, Status::Superseded, "6"));
    brought(&index, record(4, Status::PendingInstall, "7"));
    index.sync_release(&key(), Listing { records: listed, resource_version: Some("3".into()) });
    let held: Vec<(u32, Option<Status>)> =
        index.history(&key()).iter().map(|facts| (facts.revision, facts.status())).collect();
    assert_eq!(
        held,
        [(1, Some(Status::Superseded)), (2, Some(Status::Superseded)), (4, Some(Status::PendingInstall))],
        "the index as the watch left it"
    );
    let as_watched = || index.decide(&key(), None, |view| (view.is_as_watched(), None));
    assert!(as_watched(), "nothing of it moved ahead");

    // Listed at 9, ahead of the watch: v2 changed again, v4 deleted, v5 made.
    let listed = vec![
        record(1, Status::Superseded, "1"),
        record(2, Status::Failed, "8"),
        record(5, Status::Deployed, "9"),
    ];
    index.sync_release(&key(), Listing { records: listed, resource_version: Some("9".into()) });
    let held: Vec<(u32, Option<Status>)> =
        index.history(&key()).iter().map(|facts| (facts.revision, facts.status())).collect();
    assert_eq!(held, [(1, Some(Status::Superseded)), (2, Some(Status::Failed)), (5, Some(Status::Deployed))]);
    assert!(!as_watched(), "ahead of the watch");
}
