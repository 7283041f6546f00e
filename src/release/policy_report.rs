//! Release health as PolicyReports (`wgpolicyk8s.io/v1alpha2`), where platform teams already read
//! their policy findings (Policy Reporter, Kyverno's tooling, `kubectl get polr -A`): one report
//! per namespace, one result per release, the rule its state (or its worst anomaly), the message
//! `scan`'s hint with the exact command. Pure: the reports are built from `scan`'s release
//! reports and written by the caller.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::history::{Anomaly, ReleaseState};
use super::scan::ReleaseReport;
use super::{Driver, Status};

/// The reports' `policy`, `source` and name.
pub const POLICY: &str = "helm-guard";
/// The results' `category`.
pub const CATEGORY: &str = "Helm release health";

/// A result's outcome, as the PolicyReport API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Outcome {
    /// Nothing to do.
    Pass,
    /// Works, but needs a look.
    Warn,
    /// Broken: Helm refuses the next operation, or it is stuck.
    Fail,
    /// The guard cannot tell: records Helm cannot read.
    Error,
}

/// A result's severity, as the PolicyReport API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Severity {
    /// The crash loop of PROBLEM.md: nothing deployed and Helm refuses to install.
    Critical,
    /// Broken until an operator acts.
    High,
    /// Degraded: works, but the next operation may fail.
    Medium,
    /// Informational.
    Info,
}

/// One release's finding: the rule that speaks for it, its outcome and severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    /// The state (`orphaned-superseded`) or anomaly (`undecodable-record`) it rests on.
    pub rule: &'static str,
    /// Its outcome.
    pub outcome: Outcome,
    /// Its severity.
    pub severity: Severity,
}

/// What a release's report amounts to (README, "Release health as PolicyReports", has the table).
pub fn finding(release: &ReleaseReport) -> Finding {
    let of = |rule, outcome, severity| Finding { rule, outcome, severity };
    let state = release.state.as_str();
    let earlier_deployed = release.deployed_revisions.iter().any(|r| Some(*r) != release.revision);
    let by_state = match release.state {
        ReleaseState::OrphanedSuperseded => of(state, Outcome::Fail, Severity::Critical),
        ReleaseState::Absent => of(state, Outcome::Error, Severity::High),
        ReleaseState::Failed if earlier_deployed => of(state, Outcome::Warn, Severity::Medium),
        ReleaseState::Failed => of(state, Outcome::Fail, Severity::High),
        ReleaseState::PendingInstall
        | ReleaseState::PendingUpgrade
        | ReleaseState::PendingRollback
        | ReleaseState::Uninstalling
            if release.stuck =>
        {
            of(state, Outcome::Fail, Severity::High)
        }
        // An operation under way: nothing to do yet.
        ReleaseState::PendingInstall | ReleaseState::PendingUpgrade | ReleaseState::PendingRollback => {
            of(state, Outcome::Pass, Severity::Info)
        }
        ReleaseState::Uninstalling | ReleaseState::Unknown => of(state, Outcome::Warn, Severity::Medium),
        ReleaseState::Healthy | ReleaseState::Uninstalled => of(state, Outcome::Pass, Severity::Info),
    };
    // A state that passes still warns of an anomaly; an unreadable record is an error.
    if by_state.outcome == Outcome::Pass {
        let has = |anomaly: Anomaly| release.anomalies.iter().any(|a| a == anomaly.as_str());
        if has(Anomaly::UndecodableRecord) {
            return of(Anomaly::UndecodableRecord.as_str(), Outcome::Error, Severity::High);
        }
        if let Some(anomaly) =
            [Anomaly::MultipleDeployed, Anomaly::StatusLabelMismatch].into_iter().find(|a| has(*a))
        {
            return of(anomaly.as_str(), Outcome::Warn, Severity::Medium);
        }
    }
    by_state
}

/// The PolicyReports of `releases`, one per namespace (sorted), at `now` (Unix seconds).
pub fn reports(releases: &[ReleaseReport], now: i64) -> Vec<Value> {
    let mut by_namespace: BTreeMap<&str, Vec<&ReleaseReport>> = BTreeMap::new();
    for release in releases {
        by_namespace.entry(release.namespace.as_str()).or_default().push(release);
    }
    by_namespace.into_iter().map(|(namespace, releases)| report(namespace, &releases, now)).collect()
}

fn report(namespace: &str, releases: &[&ReleaseReport], now: i64) -> Value {
    let mut summary: BTreeMap<&str, u64> = ["pass", "fail", "warn", "error", "skip"].map(|k| (k, 0)).into();
    let results: Vec<Value> = releases
        .iter()
        .map(|release| {
            let finding = finding(release);
            let outcome: &'static str = finding.outcome.into();
            let severity: &'static str = finding.severity.into();
            *summary.entry(outcome).or_default() += 1;
            let mut result = json!({
                "policy": POLICY,
                "rule": finding.rule,
                "result": outcome,
                "severity": severity,
                "category": CATEGORY,
                "source": POLICY,
                "message": format!("release {}: {}", release.release, release.hint),
                "timestamp": {"seconds": now, "nanos": 0},
                "properties": properties(release),
            });
            if let (Some(fields), Some(resource)) = (result.as_object_mut(), latest_record(release)) {
                fields.insert("resources".into(), json!([resource]));
            }
            result
        })
        .collect();
    json!({
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {
            "name": POLICY,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": POLICY},
        },
        "summary": summary,
        "results": results,
    })
}

/// The release, its latest revision and status, as strings (the API's `properties` are a
/// string map).
fn properties(release: &ReleaseReport) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("release".into(), json!(release.release));
    properties.insert("state".into(), json!(release.state.as_str()));
    if let Some(revision) = release.revision {
        properties.insert("revision".into(), json!(revision.to_string()));
    }
    if let Some(status) = release.status {
        properties.insert("status".into(), json!(Status::as_str(status)));
    }
    Value::Object(properties)
}

/// The record of the latest revision, as Helm names it.
fn latest_record(release: &ReleaseReport) -> Option<Value> {
    let revision = release.revision?;
    let kind = match release.driver {
        Driver::Secret => "Secret",
        Driver::ConfigMap => "ConfigMap",
    };
    Some(json!({
        "apiVersion": "v1",
        "kind": kind,
        "namespace": release.namespace,
        "name": format!("sh.helm.release.v1.{}.v{revision}", release.release),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(
        state: ReleaseState,
        revision: u32,
        deployed: &[u32],
        stuck: bool,
        anomalies: &[Anomaly],
    ) -> ReleaseReport {
        ReleaseReport {
            namespace: "demo".into(),
            release: "web".into(),
            driver: Driver::Secret,
            state,
            revision: Some(revision),
            status: None,
            stuck,
            deployed_revisions: deployed.to_vec(),
            chart: None,
            app_version: None,
            anomalies: anomalies.iter().map(|a| a.as_str().to_owned()).collect(),
            history: Vec::new(),
            broken: false,
            hint: "the hint".into(),
            records: 1,
        }
    }

    /// README's table, row by row: a release's state (and anomalies) to the rule, outcome and
    /// severity its PolicyReport result carries.
    #[test]
    fn each_state_has_its_outcome_and_severity() {
        use Outcome::*;
        use ReleaseState as S;
        use Severity::*;
        let rows: &[(ReleaseReport, &str, Outcome, Severity)] = &[
            (release(S::Healthy, 3, &[3], false, &[]), "healthy", Pass, Info),
            (release(S::Uninstalled, 3, &[], false, &[]), "uninstalled", Pass, Info),
            (release(S::OrphanedSuperseded, 3, &[], false, &[]), "orphaned-superseded", Fail, Critical),
            (release(S::Failed, 4, &[3], false, &[]), "failed", Warn, Medium),
            (release(S::Failed, 1, &[], false, &[]), "failed", Fail, High),
            (release(S::PendingUpgrade, 4, &[3], false, &[]), "pending-upgrade", Pass, Info),
            (release(S::PendingUpgrade, 4, &[3], true, &[]), "pending-upgrade", Fail, High),
            (release(S::PendingInstall, 1, &[], true, &[]), "pending-install", Fail, High),
            (release(S::PendingRollback, 5, &[3], true, &[]), "pending-rollback", Fail, High),
            (release(S::Uninstalling, 3, &[], false, &[]), "uninstalling", Warn, Medium),
            (release(S::Uninstalling, 3, &[], true, &[]), "uninstalling", Fail, High),
            (release(S::Unknown, 3, &[2], false, &[]), "unknown", Warn, Medium),
            (release(S::Absent, 3, &[], false, &[]), "absent", Error, High),
            (
                release(S::Healthy, 3, &[3], false, &[Anomaly::UndecodableRecord]),
                "undecodable-record",
                Error,
                High,
            ),
            (
                release(S::Healthy, 3, &[2, 3], false, &[Anomaly::MultipleDeployed]),
                "multiple-deployed",
                Warn,
                Medium,
            ),
            (
                release(S::Healthy, 3, &[3], false, &[Anomaly::StatusLabelMismatch]),
                "status-label-mismatch",
                Warn,
                Medium,
            ),
            // A broken state speaks for the release before any anomaly.
            (
                release(S::OrphanedSuperseded, 3, &[], false, &[Anomaly::UndecodableRecord]),
                "orphaned-superseded",
                Fail,
                Critical,
            ),
        ];
        for (report, rule, outcome, severity) in rows {
            let found = finding(report);
            assert_eq!(
                (found.rule, found.outcome, found.severity),
                (*rule, *outcome, *severity),
                "{:?} stuck={} deployed={:?} anomalies={:?}",
                report.state,
                report.stuck,
                report.deployed_revisions,
                report.anomalies
            );
        }
    }

    #[test]
    fn a_report_per_namespace_counts_its_results_and_names_the_latest_record() {
        let mut orphan = release(ReleaseState::OrphanedSuperseded, 2, &[], false, &[]);
        orphan.namespace = "a".into();
        let mut config_map = release(ReleaseState::Healthy, 7, &[7], false, &[]);
        config_map.driver = Driver::ConfigMap;
        config_map.release = "db".into();
        let healthy = release(ReleaseState::Healthy, 3, &[3], false, &[]);
        let reports = reports(&[healthy, orphan, config_map], 1_800_000_000);
        let namespaces: Vec<&str> =
            reports.iter().map(|r| r["metadata"]["namespace"].as_str().unwrap()).collect();
        assert_eq!(namespaces, ["a", "demo"]);
        assert_eq!(reports[0]["summary"], json!({"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}));
        assert_eq!(reports[1]["summary"], json!({"pass": 2, "fail": 0, "warn": 0, "error": 0, "skip": 0}));
        let result = &reports[0]["results"][0];
        assert_eq!(result["message"], "release web: the hint");
        assert_eq!((result["policy"].as_str(), result["source"].as_str()), (Some(POLICY), Some(POLICY)));
        assert_eq!(result["resources"][0]["name"], "sh.helm.release.v1.web.v2");
        assert_eq!(result["resources"][0]["kind"], "Secret");
        assert_eq!(result["timestamp"]["seconds"], 1_800_000_000);
        let db = &reports[1]["results"][1];
        assert_eq!(
            (db["resources"][0]["kind"].as_str(), db["properties"]["revision"].as_str()),
            (Some("ConfigMap"), Some("7"))
        );
    }
}
