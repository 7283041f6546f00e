//! What `helm-guard restore` would bring back from the recycle bin, and the history Helm would
//! show afterwards. Pure: the command lists the bin and the release, and creates what the plan
//! says.

use std::collections::BTreeMap;

use serde::Serialize;

use super::copy::RecycledCopy;
use crate::release::record::{DecodedRecord, Record};
use crate::release::scan::report;
use crate::release::{DecodeLimits, ReleaseKey, Status, Summary};

/// What becomes of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::Display)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub(crate) enum StepAction {
    /// Created again.
    Restore,
    /// An object of that name is stored now: never written over.
    Exists,
    /// A newer copy of the same object is restored instead.
    Older,
    /// The copy cannot give the object back (said in `problem`).
    Unreadable,
}

/// One copy of the release in the bin.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RestoreStep {
    /// The copy's Secret.
    pub copy: String,
    /// `Secret` or `ConfigMap`.
    pub kind: String,
    /// The record's name.
    pub name: String,
    /// The revision Helm reads in it (or the label's, when it does not decode).
    pub revision: u32,
    /// Its status as Helm reads it.
    pub status: Option<Status>,
    /// When it was kept (Unix seconds).
    pub kept_at: i64,
    /// The reason code that let it go.
    pub reason: String,
    /// Who deleted it.
    pub requester: String,
    /// What restore does with it.
    pub action: StepAction,
    /// Why it cannot be restored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The object to create (`action` restore only).
    #[serde(skip)]
    pub object: Option<serde_json::Value>,
}

/// One line of `helm history` after the restore.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HistoryRow {
    /// The revision.
    pub revision: u32,
    /// Its status.
    pub status: Status,
    /// `name-version`.
    pub chart: Option<String>,
    /// The chart's app version.
    pub app_version: Option<String>,
    /// Helm's description.
    pub description: Option<String>,
    /// Whether the restore brings it back.
    pub restored: bool,
}

/// The restore of one release of one driver.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RestorePlan {
    /// The release's namespace.
    pub namespace: String,
    /// The release.
    pub release: String,
    /// Where Helm keeps it.
    pub driver: crate::release::Driver,
    /// Every copy of it the bin holds (of the revisions asked for).
    pub steps: Vec<RestoreStep>,
    /// What `helm history` would show after the restore, oldest first.
    pub history: Vec<HistoryRow>,
    /// The release's state after the restore, as `scan` would report it.
    pub state_after: Option<String>,
}

impl RestorePlan {
    /// The copies the restore creates.
    pub(crate) fn to_restore(&self) -> impl Iterator<Item = &RestoreStep> {
        self.steps.iter().filter(|s| s.action == StepAction::Restore)
    }
}

/// A copy's original, to create and as Helm reads it; or why it cannot be.
type Original = Result<(serde_json::Value, DecodedRecord), String>;

/// Plans the restore of `copies` (one release's, from the bin) beside `live`, the release's
/// records stored now: the newest copy of each object not stored now, of `revisions` (all when
/// empty). One plan per driver the copies are of.
pub(crate) fn plan(
    copies: &[RecycledCopy],
    live: &[DecodedRecord],
    revisions: &[u32],
    limits: DecodeLimits,
    now: i64,
    stuck_after_secs: i64,
) -> Vec<RestorePlan> {
    let mut read: Vec<(&RecycledCopy, Original)> = copies
        .iter()
        .map(|copy| {
            let original = copy.original().map_err(|e| e.to_string()).and_then(|object| {
                match Record::from_object(&object, None) {
                    Ok(Some(record)) => Ok((object, DecodedRecord::new(record, limits))),
                    Ok(None) => Err("its labels do not make it a Helm release record".to_owned()),
                    Err(error) => Err(error.to_string()),
                }
            });
            (copy, original)
        })
        .filter(|(copy, original)| {
            let revision = match original {
                Ok((_, record)) => record.record.id.revision,
                Err(_) => copy.entry.revision,
            };
            revisions.is_empty() || revisions.contains(&revision)
        })
        .collect();
    // The newest copy of an object first: it is the one restored.
    read.sort_by(|a, b| b.0.entry.kept_at.cmp(&a.0.entry.kept_at).then(a.0.entry.name.cmp(&b.0.entry.name)));
    let mut plans: BTreeMap<ReleaseKey, (Vec<RestoreStep>, Vec<DecodedRecord>)> = BTreeMap::new();
    for (copy, original) in read {
        let kind = copy.object.kind.clone();
        let mut step = RestoreStep {
            copy: copy.entry.name.clone(),
            kind: kind.clone(),
            name: copy.object.name.clone(),
            revision: copy.entry.revision,
            status: None,
            kept_at: copy.entry.kept_at,
            reason: copy.entry.reason.clone(),
            requester: copy.entry.requester.clone(),
            action: StepAction::Restore,
            problem: None,
            object: None,
        };
        let (object, record) = match original {
            Ok(read) => read,
            Err(problem) => {
                step.action = StepAction::Unreadable;
                step.problem = Some(problem);
                let key = ReleaseKey {
                    driver: copy.object.driver().unwrap_or(crate::release::Driver::Secret),
                    namespace: copy.entry.namespace.clone(),
                    release: copy.entry.release.clone(),
                };
                plans.entry(key).or_default().0.push(step);
                continue;
            }
        };
        step.revision = record.record.id.revision;
        step.status = record.status();
        let key = record.record.id.key.clone();
        let (steps, restored) = plans.entry(key).or_default();
        let stored = live.iter().any(|l| {
            l.record.id.key.driver == record.record.id.key.driver && l.record.object_name == step.name
        });
        if stored {
            step.action = StepAction::Exists;
        } else if steps
            .iter()
            .any(|s: &RestoreStep| s.action == StepAction::Restore && s.name == step.name && s.kind == kind)
        {
            step.action = StepAction::Older;
        } else {
            step.object = Some(object);
            restored.push(record);
        }
        steps.push(step);
    }
    plans
        .into_iter()
        .map(|(key, (mut steps, restored))| {
            steps.sort_by_key(|s| (s.revision, std::cmp::Reverse(s.kept_at)));
            let live: Vec<&DecodedRecord> = live.iter().filter(|l| l.record.id.key == key).collect();
            let mut history: Vec<HistoryRow> = live
                .iter()
                .map(|r| (*r, false))
                .chain(restored.iter().map(|r| (r, true)))
                .filter_map(|(record, restored)| {
                    let summary = Summary::of(record)?;
                    Some(HistoryRow {
                        revision: summary.revision,
                        status: summary.status,
                        chart: summary.chart_ref(),
                        app_version: summary.app_version,
                        description: summary.description,
                        restored,
                    })
                })
                .collect();
            history.sort_by_key(|row| (row.revision, row.restored));
            let after: Vec<DecodedRecord> = live.iter().copied().cloned().chain(restored).collect();
            let state_after = report(&after, now, stuck_after_secs).first().map(|r| r.state.to_string());
            RestorePlan {
                namespace: key.namespace,
                release: key.release,
                driver: key.driver,
                steps,
                history,
                state_after,
            }
        })
        .collect()
}
