//! What `helm-guard prune` deletes to cut a release's history to its newest revisions: Helm's
//! own `--history-max` pruning (`pkg/storage/storage.go` `removeLeastRecent`), done once for a
//! history a loop or an unlimited SDK writer grew, instead of by hand. Never the latest revision
//! and never the last deployed one (what `helm rollback` and the guard's rules need); never a
//! record Helm cannot read (it is not part of the history Helm sees). The oldest first, as Helm
//! deletes. Pure: the plan, no I/O.

use serde::Serialize;

use super::record::DecodedRecord;
use super::{ReleaseKey, Status};

/// One record to delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneStep {
    /// The record's object name.
    pub object: String,
    /// Its revision.
    pub revision: u32,
    /// Its status as Helm reads it.
    pub status: Status,
    /// The object's uid: a deletion that finds another object under the name fails.
    #[serde(skip)]
    pub uid: Option<String>,
}

/// What prune would delete of one release.
#[derive(Debug, Clone, Serialize)]
pub struct PrunePlan {
    /// The release's namespace.
    pub namespace: String,
    /// The release's name.
    pub release: String,
    /// How many revisions are kept.
    pub keep: usize,
    /// The revisions kept, ascending.
    pub kept: Vec<u32>,
    /// What to delete, the oldest first.
    pub steps: Vec<PruneStep>,
}

/// Plans the pruning of one release's history to its `keep` newest revisions (at least 1), the
/// latest and the last deployed kept whatever `keep` says.
pub fn plan_prune(key: &ReleaseKey, records: &[&DecodedRecord], keep: usize) -> PrunePlan {
    let mut readable: Vec<(&DecodedRecord, Status)> =
        records.iter().filter_map(|r| Some((*r, r.payload.as_ref().ok()?.info.status))).collect();
    readable.sort_by_key(|(r, _)| std::cmp::Reverse(r.record.id.revision));
    let latest = readable.first().map(|(r, _)| r.record.id.revision);
    let last_deployed =
        readable.iter().find(|(_, s)| *s == Status::Deployed).map(|(r, _)| r.record.id.revision);
    let mut newest: Vec<u32> = readable.iter().map(|(r, _)| r.record.id.revision).collect();
    newest.dedup();
    newest.truncate(keep.max(1));
    let kept_revision = |revision: u32| {
        newest.contains(&revision) || Some(revision) == latest || Some(revision) == last_deployed
    };
    let mut steps: Vec<PruneStep> = readable
        .iter()
        .filter(|(r, _)| !kept_revision(r.record.id.revision))
        .map(|(r, status)| PruneStep {
            object: r.record.object_name.clone(),
            revision: r.record.id.revision,
            status: *status,
            uid: r.record.uid.clone(),
        })
        .collect();
    steps.reverse();
    let mut kept: Vec<u32> =
        readable.iter().map(|(r, _)| r.record.id.revision).filter(|r| kept_revision(*r)).collect();
    kept.sort_unstable();
    kept.dedup();
    PrunePlan {
        namespace: key.namespace.clone(),
        release: key.release.clone(),
        keep: keep.max(1),
        kept,
        steps,
    }
}
