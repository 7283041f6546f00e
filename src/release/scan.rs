//! From a set of stored records to one report per release: what `scan` prints.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::DecodeLimits;
use super::history::{Classification, ReleaseState, RevisionFacts, classify};
use super::record::{DecodedRecord, Driver, Record, ReleaseKey};
use super::summary::Summary;
use super::writer::{Liveness, Writer};

/// What could not be read while collecting records; none of it stops the scan.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// `Kind namespace/name`.
    pub object: String,
    /// Why it could not be read.
    pub error: String,
}

/// Reads every release record among the objects of a dump, decoding each payload.
pub fn collect_records(objects: &[Value], limits: DecodeLimits) -> (Vec<DecodedRecord>, Vec<Problem>) {
    let mut records = Vec::new();
    let mut problems = Vec::new();
    for object in objects {
        match Record::from_object(object, None) {
            Ok(Some(record)) => {
                let decoded = DecodedRecord::new(record, limits);
                if let Err(error) = &decoded.payload {
                    problems.push(Problem { object: decoded.record.describe(), error: error.to_string() });
                }
                records.push(decoded);
            }
            Ok(None) => {}
            Err(error) => {
                problems.push(Problem { object: super::record::describe(object), error: error.to_string() })
            }
        }
    }
    (records, problems)
}

/// Records grouped by the release they belong to, in release order.
pub(crate) fn by_release(records: &[DecodedRecord]) -> BTreeMap<&ReleaseKey, Vec<&DecodedRecord>> {
    let mut releases: BTreeMap<&ReleaseKey, Vec<&DecodedRecord>> = BTreeMap::new();
    for record in records {
        releases.entry(&record.record.id.key).or_default().push(record);
    }
    releases
}

/// One line of `scan`.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseReport {
    /// The release's namespace.
    pub namespace: String,
    /// The release's name.
    pub release: String,
    /// Where its records are kept.
    pub driver: Driver,
    /// Its state, as Helm would act on it.
    pub state: ReleaseState,
    /// The latest revision Helm sees.
    pub revision: Option<u32>,
    /// Its status.
    pub status: Option<super::status::Status>,
    /// A `pending-*` latest revision no one will finish (see `stuck_because`).
    pub stuck: bool,
    /// Why it is stuck: `writer-gone` (its writer's pod is gone) or `age` (older than the
    /// threshold, its writer not known to run in a pod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck_because: Option<super::writer::StuckBecause>,
    /// Who wrote the latest revision, when the guard remembers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<WriterReport>,
    /// Revisions whose status is `deployed`.
    pub deployed_revisions: Vec<u32>,
    /// The latest revision's chart, `name-version`.
    pub chart: Option<String>,
    /// The latest revision's app version.
    pub app_version: Option<String>,
    /// Anomalies, as `scan` spells them.
    pub anomalies: Vec<String>,
    /// Every revision Helm reads, ascending, as `helm history` lists them (a revision held by two
    /// records appears twice).
    pub history: Vec<RevisionReport>,
    /// Needs an operator: any state but healthy/absent/uninstalled, or an anomaly.
    pub broken: bool,
    /// What to do about it, in a sentence.
    pub hint: String,
    /// How many records the release has.
    pub records: usize,
}

/// `scan`'s anomaly for a release whose latest record is past 80% of what Kubernetes stores in
/// one object.
pub(crate) const NEAR_SIZE_LIMIT: &str = "near-size-limit";

/// Who wrote a release's latest revision and whether it still runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriterReport {
    /// The writer's user name.
    pub user: String,
    /// Its pod, `namespace/name`, when its token was bound to one.
    pub pod: Option<String>,
    /// That pod's uid.
    pub pod_uid: Option<String>,
    /// Whether that pod still runs: `null` for a writer with no pod, or one not asked about.
    pub alive: Option<bool>,
}

impl WriterReport {
    fn of(writer: &Writer, liveness: Liveness) -> WriterReport {
        WriterReport {
            user: writer.user.clone(),
            pod: writer.pod.as_ref().map(|pod| format!("{}/{}", pod.namespace, pod.name)),
            pod_uid: writer.pod.as_ref().map(|pod| pod.uid.clone()),
            alive: match liveness {
                Liveness::Alive => Some(true),
                Liveness::Gone => Some(false),
                Liveness::NoPod | Liveness::Unknown => None,
            },
        }
    }
}

/// The writer of each release's latest revision and whether it runs, as far as known:
/// (namespace, release) to them.
pub type LatestWriters = BTreeMap<(String, String), (Writer, Liveness)>;

/// One line of `helm history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RevisionReport {
    /// The revision.
    pub revision: u32,
    /// Its status as Helm reads it.
    pub status: super::status::Status,
}

/// Groups records by release and classifies each release. `now` is Unix seconds.
pub fn report(records: &[DecodedRecord], now: i64, stuck_after_secs: i64) -> Vec<ReleaseReport> {
    report_with_writers(records, now, stuck_after_secs, &LatestWriters::new())
}

/// [`report`], each release's stuck rule judged by its latest revision's writer where `writers`
/// knows it ([`Classification::with_writer`]).
pub fn report_with_writers(
    records: &[DecodedRecord],
    now: i64,
    stuck_after_secs: i64,
    writers: &LatestWriters,
) -> Vec<ReleaseReport> {
    by_release(records)
        .into_iter()
        .map(|(key, records)| {
            let facts: Vec<RevisionFacts> = records.iter().map(|r| r.facts()).collect();
            let writer = writers.get(&(key.namespace.clone(), key.release.clone()));
            let mut report = from_facts(key, &facts, now, stuck_after_secs, writer);
            let latest = records
                .iter()
                .filter(|r| r.payload.is_ok())
                .find(|r| Some(r.record.id.revision) == report.revision)
                .and_then(|r| Summary::of(r));
            // The 1 MiB wall: the latest record near it, the next upgrade may not fit.
            let newest = records.iter().max_by_key(|r| r.record.id.revision);
            if let Some(near) = newest.filter(|r| r.record.size_warning().is_some()) {
                report.anomalies.push(NEAR_SIZE_LIMIT.to_owned());
                report.broken = true;
                report.hint.push_str(&format!(
                    "; {} holds {} bytes, near the 1 MiB a record can be: the next upgrade may not fit (trim the chart or its values)",
                    near.record.object_name,
                    near.record.stored_bytes()
                ));
            }
            report.chart = latest.as_ref().and_then(Summary::chart_ref);
            report.app_version = latest.and_then(|s| s.app_version);
            report
        })
        .collect()
}

/// One release's report from the facts of its records (one per record), without the chart and
/// app version (they are in payloads the facts do not keep): what the live index can tell.
pub(crate) fn from_facts(
    key: &ReleaseKey,
    facts: &[RevisionFacts],
    now: i64,
    stuck_after_secs: i64,
    writer: Option<&(Writer, Liveness)>,
) -> ReleaseReport {
    let mut c: Classification = classify(facts, now, stuck_after_secs);
    if let Some((_, liveness)) = writer {
        c = c.with_writer(*liveness);
    }
    let history = super::history::History::new(facts)
        .revisions()
        .iter()
        .map(|&(revision, status)| RevisionReport { revision, status })
        .collect();
    ReleaseReport {
        namespace: key.namespace.clone(),
        release: key.release.clone(),
        driver: key.driver,
        state: c.state,
        revision: c.revision,
        status: c.status,
        stuck: c.stuck,
        stuck_because: c.stuck_because,
        writer: writer.map(|(writer, liveness)| WriterReport::of(writer, *liveness)),
        deployed_revisions: c.deployed.clone(),
        chart: None,
        app_version: None,
        anomalies: c.anomalies.iter().map(|a| a.as_str().to_owned()).collect(),
        history,
        broken: c.is_broken(),
        hint: c.hint(&key.release, &key.namespace),
        records: facts.len(),
    }
}
