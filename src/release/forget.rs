//! What `helm-guard forget` deletes, and in which order. Pure: the command lists the release's
//! records and deletes them in this order.
//!
//! Forgetting a release deletes its whole history and keeps its resources (moving it to Argo
//! CD, which never writes records; Fleet's `keepResources`). The order is Helm's own purge
//! order (`uninstall.go` `purgeReleases`: from the oldest up, the latest last), records Helm
//! cannot read first: every record deleted before the last is not the latest, so a forget
//! stopped half way leaves the release as Helm showed it at its latest revision, only with a
//! shorter history.

use serde::Serialize;

use super::record::DecodedRecord;
use super::{ReleaseKey, Status};

/// One record to delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ForgetStep {
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    /// The object's name.
    pub name: String,
    /// Its uid (the deletion is made on that object only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The revision Helm reads in it (the label's when it does not decode).
    pub revision: u32,
    /// Its status as Helm reads it; `None` when Helm cannot read it.
    pub status: Option<Status>,
}

/// The deletions that forget one release of one driver, in order.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ForgetPlan {
    /// The release's namespace.
    pub namespace: String,
    /// The release.
    pub release: String,
    /// `secret` or `configmap`.
    pub driver: &'static str,
    /// The records, in the order they are deleted.
    pub steps: Vec<ForgetStep>,
}

/// The plan for each release (and driver) among `records`, in release order.
pub(crate) fn plan(records: &[DecodedRecord]) -> Vec<ForgetPlan> {
    let mut plans: Vec<(ReleaseKey, Vec<(bool, ForgetStep)>)> = Vec::new();
    for record in records {
        let step = ForgetStep {
            kind: record.record.id.key.driver.kind(),
            name: record.record.object_name.clone(),
            uid: record.record.uid.clone(),
            revision: record.record.id.revision,
            status: record.status(),
        };
        let readable = record.payload.is_ok();
        match plans.iter_mut().find(|(key, _)| *key == record.record.id.key) {
            Some((_, steps)) => steps.push((readable, step)),
            None => plans.push((record.record.id.key.clone(), vec![(readable, step)])),
        }
    }
    plans.sort_by(|a, b| a.0.cmp(&b.0));
    plans
        .into_iter()
        .map(|(key, mut steps)| {
            // Unreadable first (Helm ignores them), then by revision; of two records of one
            // revision the deployed one last, as Helm counts that revision deployed.
            steps.sort_by_key(|(readable, step)| {
                (*readable, step.revision, step.status == Some(Status::Deployed), step.name.clone())
            });
            ForgetPlan {
                namespace: key.namespace,
                release: key.release,
                driver: key.driver.as_str(),
                steps: steps.into_iter().map(|(_, step)| step).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::DecodeLimits;
    use crate::release::history::{PayloadStatus, RevisionFacts};
    use crate::release::record::Record;
    use crate::release::{History, ReleaseState, classify};

    fn record(revision: u32, status: &str, readable: bool) -> DecodedRecord {
        let payload = format!(
            r#"{{"name":"web","namespace":"demo","version":{revision},"info":{{"status":"{status}"}}}}"#
        );
        let data = if readable {
            String::from_utf8(crate::release::decode::codec::encode_secret_payload(payload.as_bytes()))
                .unwrap()
        } else {
            "bm90IGhlbG0=".to_owned()
        };
        let object = serde_json::json!({
            "kind": "Secret",
            "metadata": {
                "name": format!("sh.helm.release.v1.web.v{revision}"),
                "namespace": "demo",
                "uid": format!("uid-{revision}"),
                "labels": {"owner": "helm", "name": "web", "version": revision.to_string(), "status": status},
            },
            "data": {"release": data},
        });
        DecodedRecord::new(Record::from_object(&object, None).unwrap().unwrap(), DecodeLimits::default())
    }

    /// Generatively (seeded): whatever order the API lists the records in, the plan deletes the
    /// unreadable ones first and then from the oldest up, so that after every deletion but the
    /// last the release Helm sees has the same latest revision, in the same state, as before.
    #[test]
    fn a_forget_stopped_anywhere_leaves_the_release_at_its_latest() {
        let statuses = ["deployed", "superseded", "failed", "pending-upgrade", "uninstalling"];
        for seed in 0..300_u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let latest = rng.u32(1..=8);
            let mut records: Vec<DecodedRecord> = (rng.u32(1..=latest)..=latest)
                .map(|revision| {
                    let status =
                        if revision == latest { statuses[rng.usize(..statuses.len())] } else { "superseded" };
                    record(revision, status, rng.u8(..10) > 0)
                })
                .collect();
            rng.shuffle(&mut records);
            let plans = plan(&records);
            assert_eq!(plans.len(), 1, "seed {seed}");
            let steps = &plans[0].steps;
            assert_eq!(steps.len(), records.len(), "seed {seed}: every record");
            let state = |left: &[&ForgetStep]| {
                let facts: Vec<RevisionFacts> = left
                    .iter()
                    .filter_map(|step| {
                        let status = step.status?;
                        let payload = PayloadStatus::Decoded(status);
                        Some(RevisionFacts {
                            revision: step.revision,
                            payload,
                            label: Some(status),
                            stored_at: None,
                            field_conflict: false,
                            namespace_apart: false,
                        })
                    })
                    .collect();
                let history = History::new(&facts);
                (history.latest(), classify(&facts, 0, 900).state)
            };
            let all: Vec<&ForgetStep> = steps.iter().collect();
            let before = state(&all);
            if before.1 == ReleaseState::Absent {
                continue; // no record Helm reads: nothing it shows can change
            }
            for done in 1..steps.len() {
                let left: Vec<&ForgetStep> = steps.iter().skip(done).collect();
                assert_eq!(state(&left), before, "seed {seed}: after {done} of {}", steps.len());
            }
        }
    }

    #[test]
    fn unreadable_records_go_first_and_releases_apart() {
        let records =
            [record(2, "deployed", true), record(1, "superseded", false), record(3, "failed", true)];
        let plans = plan(&records);
        let names: Vec<&str> = plans[0].steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["sh.helm.release.v1.web.v1", "sh.helm.release.v1.web.v2", "sh.helm.release.v1.web.v3"]
        );
        assert_eq!(plan(&records)[0].steps[0].status, None, "Helm cannot read it");
    }
}
