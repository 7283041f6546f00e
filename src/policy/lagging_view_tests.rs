//! A view that lags: an approval a live guard answers on its index as the watch left it, with no
//! fence round first ([`holds_on_a_lagging_view`]), must be one the rules give on what is stored
//! when the request comes. Generative: random histories (revisions shared, every status), then
//! random writes each admitted by the rules on what is stored then (creates, status changes,
//! deletions: what Helm, its other writers and a tenant may send); every earlier state is a view
//! the watch may still show, less any records whose approved deletions it hides (tombstones).
//! Seeded: `HELM_GUARD_SEED` reruns one.

use std::collections::BTreeMap;

use super::config::{PolicyConfig, Requester};
use super::create::{CreateFacts, decide_create};
use super::delete::{DeleteFacts, decide_delete, holds_on_a_lagging_view, needs_agreement};
use super::update::{PayloadSide, RecordSide, UpdateFacts, decide_update};
use super::verdict::Verdict;
use crate::release::{History, Status};

const ADMIN: Requester<'static> = Requester::new("admin", &[]);

/// One stored object: which one, and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    id: usize,
    revision: u32,
    status: Status,
    /// Counts its updates, as its resourceVersion would.
    version: u32,
}

fn history<'a>(records: impl IntoIterator<Item = &'a Record>) -> History {
    let revisions: Vec<(u32, Status)> = records.into_iter().map(|r| (r.revision, r.status)).collect();
    History::of(&revisions)
}

fn delete_facts(record: &Record) -> DeleteFacts<'static> {
    DeleteFacts {
        namespace: "demo",
        release: "web",
        revision: record.revision,
        status: Some(record.status),
        namespace_terminating: false,
        requester: ADMIN,
        break_glass: None,
        last_deployed: None,
    }
}

/// The rules on the deletion of `record` with `others` the rest of the release.
fn deletion(record: &Record, others: &History) -> Verdict {
    decide_delete(&delete_facts(record), others, &PolicyConfig::default())
}

fn labels(revision: u32, status: Status) -> BTreeMap<String, String> {
    let revision = revision.to_string();
    [("owner", "helm"), ("name", "web"), ("version", revision.as_str()), ("status", status.as_str())]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Whether the rules admit moving `record`'s status to `to` (its labels following, as Helm's).
fn update_admitted(records: &[Record], record: &Record, to: Status) -> bool {
    let others = history(records.iter().filter(|r| r.id != record.id));
    let (old_labels, new_labels) = (labels(record.revision, record.status), labels(record.revision, to));
    let side = |labels, status| RecordSide {
        labels,
        secret_type: Some("helm.sh/release.v1"),
        payload: Some(PayloadSide { status, content: Some([7; 32]) }),
        owner_references: &[],
        finalizers: &[],
        immutable: false,
    };
    let object = format!("sh.helm.release.v1.web.v{}", record.revision);
    let facts = UpdateFacts {
        namespace: "demo",
        object_name: &object,
        revision: record.revision,
        others: &others,
        old: side(&old_labels, record.status),
        new: side(&new_labels, to),
        requester: ADMIN,
        break_glass: None,
    };
    decide_update(&facts, &PolicyConfig::default()).allowed
}

/// Whether the rules admit creating a record of `revision` in `status`, named as Helm names it.
fn create_admitted(records: &[Record], revision: u32, status: Status) -> bool {
    let others = history(records);
    let object = format!("sh.helm.release.v1.web.v{revision}");
    let facts = CreateFacts {
        namespace: "demo",
        release: "web",
        object_name: &object,
        payload: Some((revision, status)),
        unlike_helms: None,
        namespace_apart: false,
        foreign_metadata: None,
        others: &others,
        others_apart: None,
        requester: ADMIN,
        may_break_glass: true,
        restored_from: None,
        revisions_last_hour: 0,
        max_per_hour: None,
    };
    decide_create(&facts, &PolicyConfig::default()).allowed
}

/// One random write to what is stored (the last of `states`), when the guard admits it: as a
/// live guard decides them, a create or an update on its index as it is (any earlier state), a
/// deletion on what is stored (confirmed) or, when it holds there, on a lagging view.
fn write(rng: &mut fastrand::Rng, states: &[Vec<Record>], next_id: &mut usize) -> Option<Vec<Record>> {
    let statuses = <Status as strum::VariantArray>::VARIANTS;
    let status = statuses[rng.usize(..statuses.len())];
    let mut records = states.last().cloned().unwrap_or_default();
    let view = &states[rng.usize(..states.len())];
    match rng.u8(..3) {
        0 if !records.is_empty() => {
            let at = rng.usize(..records.len());
            let record = &records[at];
            let approved = if rng.bool() {
                deletion(record, &history(records.iter().filter(|r| r.id != record.id))).allowed
            } else {
                let held = history(view.iter().filter(|r| r.id != record.id));
                let verdict = deletion(record, &held);
                holds_on_a_lagging_view(&delete_facts(record), &held, &verdict, view.contains(record))
            };
            if !approved {
                return None;
            }
            records.remove(at);
        }
        1 if !records.is_empty() => {
            let at = rng.usize(..records.len());
            if !update_admitted(view, &records[at], status) {
                return None;
            }
            records[at].status = status;
            records[at].version += 1;
        }
        _ => {
            // Helm's next revision, or any other a tenant picks.
            let top = records.iter().map(|r| r.revision).max().unwrap_or(0);
            let revision = if rng.bool() { top + 1 } else { rng.u32(1..top + 3) };
            let name_taken = records.iter().any(|r| r.revision == revision);
            if revision == 0 || name_taken || !create_admitted(view, revision, status) {
                return None;
            }
            records.push(Record { id: *next_id, revision, status, version: 0 });
            *next_id += 1;
        }
    }
    Some(records)
}

#[test]
fn an_approval_answered_on_a_lagging_view_is_the_one_the_stored_release_gets() {
    let statuses = <Status as strum::VariantArray>::VARIANTS;
    let seed = std::env::var("HELM_GUARD_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(41);
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut answered, mut lagging) = (0, 0);
    for _ in 0..4_000 {
        // Half of them begin as an uninstall begins its purge (the latest marked, below it what
        // Helm's history holds; some with a second record of the latest revision, as a tenant
        // may forge), the rest anyhow.
        let purging = rng.bool();
        let count = rng.usize(1..6);
        let mut records: Vec<Record> = (0..count)
            .map(|id| {
                let status = match (purging, id + 1 == count) {
                    (true, true) => [Status::Uninstalling, Status::Uninstalled][rng.usize(..2)],
                    (true, false) => [Status::Superseded, Status::Failed][rng.usize(..2)],
                    (false, _) => statuses[rng.usize(..statuses.len())],
                };
                let revision = if purging { id as u32 + 1 } else { rng.u32(1..6) };
                Record { id, revision, status, version: 0 }
            })
            .collect();
        if purging && rng.u8(..4) == 0 {
            let status = statuses[rng.usize(..statuses.len())];
            records.push(Record { id: count, revision: count as u32, status, version: 0 });
        }
        let mut next_id = records.len();
        let mut states = vec![records];
        for _ in 0..rng.usize(1..8) {
            if let Some(next) = write(&mut rng, &states, &mut next_id) {
                states.push(next);
            }
        }
        let deleted_later =
            |from: usize, id: usize| states[from..].iter().any(|s| s.iter().all(|r| r.id != id));
        for (seen, view) in states.iter().enumerate() {
            for stored in &states[seen..] {
                for record in stored {
                    // The index without the record asked about, and maybe without records whose
                    // deletions were approved and not yet brought by the watch.
                    let shown: Vec<&Record> = view
                        .iter()
                        .filter(|r| r.id != record.id && !(deleted_later(seen, r.id) && rng.bool()))
                        .collect();
                    let shown_history = history(shown.iter().copied());
                    let verdict = deletion(record, &shown_history);
                    let facts = delete_facts(record);
                    let held = history(view.iter().filter(|r| r.id != record.id));
                    if !holds_on_a_lagging_view(&facts, &held, &verdict, view.contains(record)) {
                        continue;
                    }
                    // Nor does it wait for the other replicas.
                    assert!(!needs_agreement(&facts, &shown_history, verdict.reason), "{record:?} {shown:?}");
                    answered += 1;
                    lagging += usize::from(!std::ptr::eq(view, stored));
                    let truth = deletion(record, &history(stored.iter().filter(|r| r.id != record.id)));
                    assert!(
                        truth.allowed,
                        "seed {seed}: deleting {record:?} approved ({:?}) on the view {:?}, refused ({:?}) on what \
                         is stored: {stored:?}",
                        verdict.reason, shown, truth.reason
                    );
                }
            }
        }
    }
    assert!(
        answered > 2_000 && lagging > 1_000,
        "the generator reached too few cases: {answered}, {lagging}"
    );
}
