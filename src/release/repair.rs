//! What `helm-guard repair` would change to put a broken release back into a state Helm can work
//! with, using only edits Helm itself makes (and the guard therefore allows): a revision's status
//! rewritten in its payload and its `status` label together, as Helm's storage `Update` and the
//! `helm set-status` recovery tools do. Pure: the plan and the edited payload, no I/O.

use serde::Serialize;

use super::DecodeLimits;
use super::decode::codec::{encode_helm_payload, encode_secret_payload};
use super::history::{Anomaly, Classification, classify};
use super::record::{DecodedRecord, LABEL_STATUS};
use super::writer::{Liveness, Writer};
use super::{Driver, ReleaseKey, ReleaseState, Status};

/// One edit of one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepairStep {
    /// The record's object name.
    pub object: String,
    /// The revision to mark.
    pub revision: u32,
    /// The payload's status now and after (equal when only the label changes).
    pub from: Status,
    /// The status to give it.
    pub to: Status,
    /// Only the `status` label changes (it disagreed with the payload).
    pub label_only: bool,
    /// Why, in a sentence.
    pub why: String,
}

/// What repair would do for one release.
#[derive(Debug, Clone, Serialize)]
pub struct RepairPlan {
    /// The release's namespace.
    pub namespace: String,
    /// The release's name.
    pub release: String,
    /// The release's state before the repair.
    pub state: ReleaseState,
    /// What to write, in order.
    pub steps: Vec<RepairStep>,
    /// Why nothing may be changed now, when so (Helm may still be running).
    pub refused: Option<String>,
    /// What only an operator can do (it needs the chart), or what to run after the steps.
    pub advice: Vec<String>,
}

/// Plans the repair of one release from its records. `now` and `stuck_after_secs` as for
/// [`classify`]; `writer`, the latest revision's writer and whether it runs, when known
/// ([`Classification::with_writer`]).
pub fn plan(
    key: &ReleaseKey,
    records: &[&DecodedRecord],
    now: i64,
    stuck_after_secs: i64,
    writer: Option<&(Writer, Liveness)>,
) -> RepairPlan {
    let facts: Vec<_> = records.iter().map(|r| r.facts()).collect();
    let mut c = classify(&facts, now, stuck_after_secs);
    if let Some((_, liveness)) = writer {
        c = c.with_writer(*liveness);
    }
    let (release, namespace) = (key.release.as_str(), key.namespace.as_str());
    let mut plan = RepairPlan {
        namespace: key.namespace.clone(),
        release: key.release.clone(),
        state: c.state,
        steps: Vec::new(),
        refused: None,
        advice: Vec::new(),
    };
    // The readable records, newest first: what Helm reads.
    let mut readable: Vec<(&DecodedRecord, Status)> =
        records.iter().filter_map(|r| Some((*r, r.payload.as_ref().ok()?.info.status))).collect();
    readable.sort_by_key(|(r, _)| std::cmp::Reverse(r.record.id.revision));

    if let (Some(status), Some(latest)) = (c.status.filter(|s| s.is_pending()), c.revision) {
        let running = writer.filter(|(_, liveness)| *liveness == Liveness::Alive);
        if let Some((running, _)) = running {
            plan.refused = Some(format!(
                "revision {latest} is {status} and its writer, {}, still runs: Helm is still working on it; wait, or pass --force if you know it is not",
                running.describe()
            ));
            return plan;
        }
        if !c.stuck {
            plan.refused = Some(match c.age_secs {
                Some(age) => format!(
                    "revision {latest} has been {status} for {} only, not longer than --stuck-after ({}): Helm may still be running; wait, or pass a smaller --stuck-after if you know it is not",
                    span(age),
                    span(stuck_after_secs)
                ),
                None => format!(
                    "revision {latest} is {status} and its records say nothing of when it was written, so helm-guard cannot tell that Helm is no longer running; check with `helm status {release} -n {namespace}`"
                ),
            });
            return plan;
        }
        for (record, _) in readable.iter().filter(|(r, s)| r.record.id.revision == latest && *s == status) {
            plan.steps.push(RepairStep {
                object: record.record.object_name.clone(),
                revision: latest,
                from: status,
                to: Status::Failed,
                label_only: false,
                why: match writer.filter(|(_, liveness)| *liveness == Liveness::Gone) {
                    Some((gone, _)) => format!(
                        "{status}, and its writer {} is gone: mark it failed (as `helm set-status` does) so that the next `helm upgrade` or `helm rollback` runs",
                        gone.describe()
                    ),
                    None => format!(
                        "{status} for {}, past --stuck-after: mark it failed (as `helm set-status` does) so that the next `helm upgrade` or `helm rollback` runs",
                        span(c.age_secs.unwrap_or_default())
                    ),
                },
            });
        }
    }
    if c.anomalies.contains(&Anomaly::MultipleDeployed) {
        let newest = c.deployed.iter().copied().max();
        for (record, _) in
            readable.iter().filter(|(r, s)| *s == Status::Deployed && Some(r.record.id.revision) != newest)
        {
            plan.steps.push(RepairStep {
                object: record.record.object_name.clone(),
                revision: record.record.id.revision,
                from: Status::Deployed,
                to: Status::Superseded,
                label_only: false,
                why: format!(
                    "revision {} is deployed too: mark it superseded, as Helm does on upgrade",
                    newest.unwrap_or_default()
                ),
            });
        }
    }
    for (record, status) in &readable {
        let planned = plan.steps.iter().any(|s| s.object == record.record.object_name);
        let label = record.record.labels.get(LABEL_STATUS).map(String::as_str);
        if !planned && label != Some(status.as_str()) {
            plan.steps.push(RepairStep {
                object: record.record.object_name.clone(),
                revision: record.record.id.revision,
                from: *status,
                to: *status,
                label_only: true,
                why: format!(
                    "its status label says {} but Helm reads {status}: set the label from the payload",
                    label.unwrap_or("nothing")
                ),
            });
        }
    }
    plan.steps.sort_by_key(|s| s.revision);
    advise(&mut plan, &c);
    plan
}

/// What to run once the steps are done, or instead of them.
fn advise(plan: &mut RepairPlan, c: &Classification) {
    let (release, namespace) = (plan.release.clone(), plan.namespace.clone());
    if plan.state == ReleaseState::OrphanedSuperseded {
        plan.advice.push(format!(
            "the latest deployed revision was deleted; only a new release of the chart puts it back: `helm upgrade {release} CHART -n {namespace}` with the chart it was installed from (not `helm install`), or `helm rollback {release} {} -n {namespace}` to the newest superseded revision",
            c.revision.unwrap_or_default()
        ));
    }
    if plan.steps.iter().any(|s| s.to == Status::Failed) {
        let earlier = c.deployed.iter().copied().filter(|r| Some(*r) != c.revision).max();
        plan.advice.push(match earlier {
            Some(rev) => format!(
                "then `helm upgrade {release} CHART -n {namespace}` runs again (revision {rev} is still deployed; `helm rollback {release} {rev} -n {namespace}` returns to it)"
            ),
            None => format!(
                "then `helm upgrade --install {release} CHART -n {namespace}` runs again, or `helm uninstall {release} -n {namespace}`"
            ),
        });
    }
    if c.anomalies.contains(&Anomaly::UndecodableRecord) {
        plan.advice.push("a record does not decode: Helm skips it, repair leaves it alone".to_owned());
    }
}

/// A payload (release JSON) with its status rewritten: only `info.status` changes; Helm reads
/// the rest unchanged (object key order means nothing to Go's decoder, and maps stay sorted).
pub(crate) fn with_status(release_json: &[u8], status: Status) -> Result<Vec<u8>, String> {
    let mut release: serde_json::Value = serde_json::from_slice(release_json).map_err(|e| e.to_string())?;
    // Helm writes `info` and `status` in lower case; a record spelt otherwise was not written by
    // Helm, and is not rewritten by repair.
    let info = release
        .get_mut("info")
        .and_then(serde_json::Value::as_object_mut)
        .filter(|info| info.contains_key("status"))
        .ok_or("the payload has no `info.status` as Helm writes it")?;
    info.insert("status".to_owned(), serde_json::Value::String(status.as_str().to_owned()));
    serde_json::to_vec(&release).map_err(|e| e.to_string())
}

/// The record's object after a step, as Helm's storage `Update` writes it: the payload with its
/// new status (unless only the label changes), the `status` label, `modifiedAt` set to `now`
/// (Unix seconds). The resourceVersion stays, so that a record changed since fails the write.
pub fn edited_object(
    mut object: serde_json::Value,
    record: &DecodedRecord,
    step: &RepairStep,
    limits: DecodeLimits,
    now: i64,
) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if !step.label_only {
        let json = record.record.decode_json(limits).map_err(|e| e.to_string())?;
        let json = with_status(&json, step.to)?;
        let encoded = match record.record.id.key.driver {
            Driver::Secret => encode_secret_payload(&json),
            Driver::ConfigMap => encode_helm_payload(&json),
        };
        let encoded = String::from_utf8(encoded).map_err(|e| e.to_string())?;
        map(&mut object, &["data"])?.insert("release".to_owned(), Value::String(encoded));
    }
    let labels = map(&mut object, &["metadata", "labels"])?;
    labels.insert(LABEL_STATUS.to_owned(), Value::String(step.to.as_str().to_owned()));
    labels.insert("modifiedAt".to_owned(), Value::String(now.to_string()));
    map(&mut object, &["metadata"])?.remove("managedFields");
    Ok(object)
}

/// The object at `path` inside `value`, made where missing; an error where something else is.
fn map<'a>(
    value: &'a mut serde_json::Value,
    path: &[&str],
) -> Result<&'a mut serde_json::Map<String, serde_json::Value>, String> {
    let mut here = value.as_object_mut().ok_or("the record is not an object")?;
    for key in path {
        here = here
            .entry(*key)
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()))
            .as_object_mut()
            .ok_or_else(|| format!("the record's `{key}` is not an object"))?;
    }
    Ok(here)
}

/// `2h10m`, `45s`.
fn span(secs: i64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(u64::try_from(secs).unwrap_or(0))).to_string()
}
