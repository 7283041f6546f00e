//! The red team: a tenant with ordinary rights (create, update and delete of Secrets in its own
//! namespace) who means it. Seeded, random sequences of its writes (records created at any
//! revision in any status, any record's status moved anywhere, any record deleted, in any order)
//! go to the same two replicas with lagging watches as Helm's flows do (`helm_flows`), from
//! healthy releases of random shape that real Helm flows made. Each write is shaped as Helm
//! shapes its own (payload and labels agree, Helm's object name): what tells them apart is only
//! where in the release it is made.
//!
//! The promise, checked after every write the guard approves: no release is left without its
//! last good revision. A release either has a `deployed` record, or still stores one of the
//! records that were last deployed, or the guard kept a copy of one in its recycle bin; or it is
//! gone as Helm's uninstall ends one (its `uninstalling` latest deleted last: at the records'
//! level that is exactly Helm's uninstall, which the guard cannot tell from a tenant's; SECURITY.md
//! says so). Beside it, `helm_flows` runs the same replicas through every flow of Helm and its
//! other writers, all approved.
//!
//! A quarter of the writes are forgeries of Helm's shape (issue 80): Helm's next record changed in
//! one place (a name, a label, a payload, a namespace, a Secret type, metadata Helm never sets, a
//! number at the edge, a restore annotation). Any such write approved fails the run. After the
//! tenant's writes, the owner runs Helm again on each release: none of its writes may be refused.
//!
//! A failure prints its seed: `RED_TEAM_SEED=<seed> cargo test --lib tests::red_team::`.

use helm_guard::release::Status;
use serde_json::{Value, json};

use super::helm_flows::{RELEASES, World};
use crate::common::flows::HelmOp;

/// The tenant: a person with the rights of its namespace, no break-glass, no exemption.
const TENANT: (&str, &[&str]) = ("tenant", &["system:authenticated", "tenants"]);

/// Every status a tenant may write.
const STATUSES: [Status; 9] = [
    Status::Unknown,
    Status::Deployed,
    Status::Uninstalled,
    Status::Superseded,
    Status::Failed,
    Status::Uninstalling,
    Status::PendingInstall,
    Status::PendingUpgrade,
    Status::PendingRollback,
];

/// What the promise is kept against, per release: the uids of the records last deployed, and
/// whether the release went the way Helm's uninstall ends one.
#[derive(Debug, Default, Clone)]
struct Watched {
    last_good: Vec<String>,
    uninstalled: bool,
}

fn uid(object: &Value) -> String {
    object["metadata"]["uid"].as_str().unwrap_or_default().to_owned()
}

/// Helm makes each release healthy, of a random shape: installed, upgraded a few times, some
/// upgrades failed, some history pruned.
fn healthy(world: &mut World) {
    for release in 0..RELEASES.len() {
        world.step(&HelmOp::Install { release, replace: false, fail: false });
        for _ in 0..world.rng.usize(..6) {
            let fail = world.rng.u8(..4) == 0;
            let history_max = [None, Some(3), Some(10)][world.rng.usize(..3)];
            world.step(&HelmOp::Upgrade { release, install: false, fail, atomic: false, history_max });
        }
    }
}

/// The reason [`tenant_write`] gives a forgery's write.
const FORGED: &str = "forged";

/// How many shapes [`forged`] knows.
const FORGERIES: usize = 13;

/// Helm's next record of `release` forged in one place (issue 80's classes): what it is, and the
/// object. None of them is a record Helm writes.
fn forged(world: &World, release: usize, shape: usize) -> (&'static str, Value) {
    let next = world.latest(release).map_or(1, |(r, ..)| r + 1);
    let name = RELEASES[release];
    let mut record = world.record(release, next, Status::PendingUpgrade);
    let what = match shape {
        0 => {
            record["metadata"]["name"] = json!(format!("sh.helm.release.v1.{name}.v0{next}"));
            "a zero-padded revision in the name"
        }
        1 => {
            record = world.record((release + 1) % RELEASES.len(), next, Status::PendingUpgrade);
            record["metadata"]["name"] = json!(format!("sh.helm.release.v1.{name}.v{next}"));
            record["metadata"]["labels"]["name"] = json!(name);
            "another release's payload under this release's name"
        }
        2 => {
            record["metadata"]["labels"]["version"] = json!(format!("+{next}"));
            "a version label Helm never writes"
        }
        3 => {
            record["metadata"]["labels"]["status"] = json!("deployed");
            "a status label that is not the payload's"
        }
        4 => {
            let mut payload = crate::common::release_json(&record);
            payload["namespace"] = json!("kube-system");
            record = crate::common::with_release_json(record, &payload);
            "a payload in another namespace"
        }
        5 => {
            record["immutable"] = json!(true);
            "immutable"
        }
        6 => {
            record["metadata"]["finalizers"] = json!(["tenant.example/hold"]);
            "a finalizer"
        }
        7 => {
            record["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "00000000-0000-4000-8000-000000000001"}]);
            "an owner reference"
        }
        8 => {
            record["data"]["release"] = json!("bm90IGEgcmVsZWFzZQ==");
            "an unreadable record under the next revision's name"
        }
        9 => {
            record["metadata"]["labels"] = json!({"app": "squat"});
            "an object without Helm's labels under the next revision's name"
        }
        10 => {
            record = world.record(release, u32::MAX, Status::PendingRollback);
            "the last revision a uint32 holds"
        }
        11 => {
            record = world.record(release, next.saturating_add(1 << 30), Status::PendingUpgrade);
            "a jump past the gap ceiling"
        }
        _ => {
            record["type"] = json!("Opaque");
            "a Secret type Helm never writes"
        }
    };
    (what, record)
}

/// One write of the tenant's: what it did and whether the guard approved it.
fn tenant_write(world: &mut World, release: usize) -> (String, bool, String) {
    let history = world.history(release);
    let pick = |world: &mut World| history.get(world.rng.usize(..history.len().max(1))).cloned();
    match world.rng.u8(..4) {
        3 => {
            let shape = world.rng.usize(..FORGERIES);
            let (what, record) = forged(world, release, shape);
            let approved = world.create_object(record).is_ok();
            (format!("CREATE forged: {what}"), approved, FORGED.to_owned())
        }
        0 => {
            let latest = history.last().map_or(0, |(r, ..)| *r);
            let revision = (latest + world.rng.u32(..4)).saturating_sub(1).max(1);
            let status = STATUSES[world.rng.usize(..STATUSES.len())];
            if history.iter().any(|(r, ..)| *r == revision) {
                // The object exists: the API server refuses the creation (409) whatever the guard says.
                return (format!("CREATE v{revision} (exists)"), false, String::new());
            }
            let outcome = world.create(release, revision, status);
            (format!("CREATE v{revision} {status}"), outcome.is_ok(), String::new())
        }
        1 => {
            let Some((revision, from, name)) = pick(world) else {
                return ("nothing".into(), false, String::new());
            };
            let status = STATUSES[world.rng.usize(..STATUSES.len())];
            let outcome = world.update(&name, status);
            (format!("UPDATE v{revision} {from} -> {status}"), outcome.is_ok(), String::new())
        }
        _ => {
            let Some((revision, status, name)) = pick(world) else {
                return ("nothing".into(), false, String::new());
            };
            let (allowed, reason, _) = world.delete(&name);
            (format!("DELETE v{revision} {status}"), allowed, reason)
        }
    }
}

/// Whether `release` keeps its promise, with what it last had deployed updated.
fn keeps_promise(world: &World, release: usize, watched: &mut Watched) -> bool {
    let history = world.history(release);
    let objects: Vec<Value> = history.iter().map(|(.., name)| world.stored(name)).collect();
    let deployed: Vec<String> = history
        .iter()
        .zip(&objects)
        .filter(|((_, s, _), _)| *s == Status::Deployed)
        .map(|(_, o)| uid(o))
        .collect();
    if !deployed.is_empty() {
        *watched = Watched { last_good: deployed, uninstalled: false };
        return true;
    }
    if history.is_empty() && watched.uninstalled {
        watched.last_good.clear();
        return true;
    }
    let stored = |u: &String| objects.iter().any(|o| uid(o) == *u);
    watched.last_good.is_empty() || watched.last_good.iter().any(|u| stored(u) || world.bin.holds(u))
}

fn run(seed: u64, writes: usize) {
    let mut world = World::new(seed);
    healthy(&mut world);
    let mut watched = vec![Watched::default(); RELEASES.len()];
    for (release, watched) in watched.iter_mut().enumerate() {
        assert!(
            keeps_promise(&world, release, watched),
            "seed {seed}: Helm left {} broken",
            RELEASES[release]
        );
    }
    let mut log = Vec::new();
    for _ in 0..writes {
        let release = world.rng.usize(..RELEASES.len());
        let before: Vec<String> =
            world.history(release).iter().map(|(r, s, _)| format!("v{r} {s}")).collect();
        world.writer = Some(TENANT);
        let (write, approved, reason) = tenant_write(&mut world, release);
        world.writer = None;
        log.push(format!(
            "{} [{}] {write}: {}",
            RELEASES[release],
            before.join(", "),
            if approved { "approved" } else { "refused" }
        ));
        if approved && reason == FORGED {
            let tail = log.iter().rev().take(30).rev().cloned().collect::<Vec<_>>().join("\n");
            panic!(
                "seed {seed} (RED_TEAM_SEED={seed} cargo test --lib tests::red_team::): a forged record was let in\n{tail}"
            );
        }
        if approved && reason == "uninstall" {
            watched[release].uninstalled = true;
        }
        if !keeps_promise(&world, release, &mut watched[release]) {
            let tail = log.iter().rev().take(30).rev().cloned().collect::<Vec<_>>().join("\n");
            panic!(
                "seed {seed} (RED_TEAM_SEED={seed} cargo test --lib tests::red_team::): the tenant's approved writes left \
                 release {} without its last good revision and without a copy\n{tail}",
                RELEASES[release]
            );
        }
    }
    // The owner's next Helm operation on each release, once its watches caught up: a repair of
    // a revision left pending, then an upgrade (`--install`); the guard refuses none of its
    // writes (`World::step` fails the run on one).
    world.deliver_all();
    for release in 0..RELEASES.len() {
        if world.latest(release).is_some_and(|(_, status, _)| status.is_pending()) {
            world.step(&HelmOp::Repair { release, delete: false });
        }
        world.step(&HelmOp::Upgrade {
            release,
            install: true,
            fail: false,
            atomic: false,
            history_max: Some(10),
        });
    }
}

/// The seeds to run: `RED_TEAM_SEED` alone when set, else 200.
fn seeds() -> Vec<u64> {
    match std::env::var("RED_TEAM_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (0..200).collect(),
    }
}

#[test]
fn no_sequence_of_a_tenants_writes_takes_a_release_s_last_good_revision() {
    for seed in seeds() {
        run(seed, 60);
    }
}

/// The chains of issue 57, each as fixed writes, the tenant's steps arriving once the watches
/// have caught up with Helm's (a person's commands come seconds after Helm's): each is refused
/// at some step. (Within a watch's lag an approval stands on what the replica has seen; the
/// random sequences above show that what it lets through loses nothing without a copy.)
#[test]
fn the_chains_that_broke_releases_in_two_steps_are_refused() {
    use Status::*;
    for seed in 0..16 {
        // v1 superseded, v2 superseded, v3 deployed: marked uninstalling, then its latest deleted.
        let mut world = World::new(seed);
        for op in [
            HelmOp::Install { release: 0, replace: false, fail: false },
            HelmOp::Upgrade { release: 0, install: false, fail: false, atomic: false, history_max: None },
            HelmOp::Upgrade { release: 0, install: false, fail: false, atomic: false, history_max: None },
        ] {
            world.step(&op);
        }
        world.deliver_all();
        world.writer = Some(TENANT);
        let v3 = "sh.helm.release.v1.app.v3";
        assert!(
            world.update(v3, Uninstalling).is_ok(),
            "seed {seed}: marking the latest is Helm's uninstall"
        );
        let (allowed, reason, _) = world.delete(v3);
        assert!(!allowed, "seed {seed}: the uninstalling latest deleted first ({reason})");
        assert_eq!(reason, "uninstall-order");

        // The only deployed revision under a failed latest, superseded, then deleted.
        let mut world = World::new(seed);
        for op in [
            HelmOp::Install { release: 1, replace: false, fail: false },
            HelmOp::Upgrade { release: 1, install: false, fail: true, atomic: false, history_max: None },
        ] {
            world.step(&op);
        }
        world.deliver_all();
        world.writer = Some(TENANT);
        let refused = world.update("sh.helm.release.v1.web.v1", Superseded).unwrap_err();
        assert!(refused.contains("history-transition"), "seed {seed}: {refused}");

        // A forged deployed revision over a failed latest.
        let refused = world.create(1, 3, Deployed).unwrap_err();
        assert!(refused.contains("implausible-record"), "seed {seed}: {refused}");

        // A single deployed revision superseded, failed, then deleted: the deletion refused.
        let mut world = World::new(seed);
        world.step(&HelmOp::Install { release: 2, replace: false, fail: false });
        world.deliver_all();
        world.writer = Some(TENANT);
        let v1 = "sh.helm.release.v1.db.v1";
        assert!(world.update(v1, Superseded).is_ok(), "seed {seed}: helm-mapkubeapis' first step");
        assert!(world.update(v1, Failed).is_ok(), "seed {seed}: klipper-helm's reset");
        let (allowed, reason, _) = world.delete(v1);
        assert!(!allowed, "seed {seed}: the release forgotten ({reason})");
    }
}

/// A revision forged in Helm's shape (the next one, pending, then marked deployed) passes the
/// rules: who may write a release is the owner lock's business. But the real deployed revision
/// it pushes down is not pruned without a copy.
#[test]
fn a_forged_revision_marked_deployed_does_not_take_the_real_one_without_a_copy() {
    use Status::*;
    let mut world = World::new(3);
    world.step(&HelmOp::Install { release: 0, replace: false, fail: false });
    world.deliver_all();
    let real = uid(&world.stored("sh.helm.release.v1.app.v1"));
    world.writer = Some(TENANT);
    assert!(world.create(0, 2, PendingUpgrade).is_ok(), "an upgrade's shape");
    assert!(world.update("sh.helm.release.v1.app.v2", Deployed).is_ok(), "its completion's");
    world.deliver_all();
    let (allowed, reason, _) = world.delete("sh.helm.release.v1.app.v1");
    assert!(allowed, "{reason}");
    assert!(world.bin.holds(&real), "the real deployed revision is kept in the bin");
}

/// A review the API server never sent (anyone on the pod network can POST one): a deletion the
/// rules approve only once agreed (a stuck revision above a deployed one) is refused when the
/// object stored under the name is not the one it is about, so it claims nothing.
#[test]
fn a_forged_review_claims_nothing() {
    let mut world = World::new(7);
    world.step(&HelmOp::Install { release: 0, replace: false, fail: false });
    world.step(&HelmOp::KilledUpgrade { release: 0 });
    let stuck = world.stored("sh.helm.release.v1.app.v2");
    let mut forged = stuck.clone();
    forged["metadata"]["uid"] = serde_json::json!("made-up");
    let (allowed, reason, message) = world.review(&crate::common::delete_review(&forged));
    assert!(!allowed && reason == "unread-history", "{reason}: {message}");
    assert!(message.contains("is not the one this review of its deletion is about"), "{message}");
    // The real deletion, as the API server sends it, goes through.
    let (allowed, reason, _) = world.delete("sh.helm.release.v1.app.v2");
    assert!(allowed, "{reason}");
}

/// Release `app` installed and upgraded once by Helm (v1 superseded, v2 deployed), every watch
/// caught up.
fn upgraded_once(seed: u64) -> World {
    let mut world = World::new(seed);
    world.step(&HelmOp::Install { release: 0, replace: false, fail: false });
    world.step(&HelmOp::Upgrade {
        release: 0,
        install: false,
        fail: false,
        atomic: false,
        history_max: None,
    });
    world.deliver_all();
    world
}

/// A review the API server never sent, of a record exactly as it is stored (the tenant can read
/// its uid and resourceVersion), is approved like the real one would be; but the approval hides
/// nothing a later verdict rests on: with the deployed latest marked `uninstalling`, forged
/// purges of the revisions below it do not make its own deletion the last one, so it is still
/// refused while they are stored (D6b), on every replica the forgeries reached.
#[test]
fn a_forged_review_of_a_stored_record_hides_nothing_a_later_verdict_rests_on() {
    let mut world = upgraded_once(13);
    world.writer = Some(TENANT);
    assert!(world.update("sh.helm.release.v1.app.v2", Status::Uninstalling).is_ok(), "uninstall's mark");
    world.deliver_all();
    let below = world.stored("sh.helm.release.v1.app.v1");
    for _ in 0..8 {
        let (allowed, reason, _) = world.review(&crate::common::delete_review(&below));
        assert!(allowed && reason == "uninstall-purge", "{reason}: what the real purge would get");
    }
    for _ in 0..8 {
        let (allowed, reason, message) = world.delete("sh.helm.release.v1.app.v2");
        assert!(!allowed && reason == "uninstall-order", "{reason}: {message}");
    }
    assert_eq!(world.history(0).len(), 2, "both revisions stored");
}

/// A record Helm cannot read is let in with any labels under a name Helm does not write (C2);
/// labelled `deployed` above the rest,
/// it must not pass for the release's last good revision. Otherwise, the real deployed revision
/// superseded and a failed one written above it (each as Helm writes them), the deletion of the
/// real one would be pruning of a revision that is not the last good one, and keep no copy.
#[test]
fn an_unreadable_record_labelled_deployed_is_not_the_last_good_revision() {
    let mut world = upgraded_once(17);
    let real = uid(&world.stored("sh.helm.release.v1.app.v2"));
    world.writer = Some(TENANT);
    let mut junk = world.stored("sh.helm.release.v1.app.v2");
    junk["metadata"]["name"] = Value::String("sh.helm.release.v1.app.v99".into());
    junk["metadata"]["labels"]["version"] = Value::String("99".into());
    junk["data"]["release"] = Value::String("bm90IGEgcmVsZWFzZQ==".into());
    assert!(world.create_object(junk.clone()).is_err(), "C2: not under a name Helm writes a revision under");
    junk["metadata"]["name"] = Value::String("app-notes".into());
    assert!(world.create_object(junk).is_ok(), "C2: Helm ignores it");
    world.deliver_all();
    assert!(world.update("sh.helm.release.v1.app.v2", Status::Superseded).is_ok(), "the latest superseded");
    assert!(world.create(0, 3, Status::PendingUpgrade).is_ok(), "an upgrade's shape");
    assert!(world.update("sh.helm.release.v1.app.v3", Status::Failed).is_ok(), "it failed");
    world.deliver_all();
    let (allowed, reason, _) = world.delete("sh.helm.release.v1.app.v2");
    assert!(allowed, "{reason}: pruning of a superseded revision below a failed one");
    assert!(world.bin.holds(&real), "the release's last good revision is kept in the bin");
}
