//! The reports, pure: a release's result (the rule its state or its worst anomaly, the message
//! `scan`'s hint with the exact command), a namespace's report with its summary, the
//! cluster-scoped report's results, in either API's kinds.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::policy::MODE_LABEL;
use crate::policy::namespace::{IGNORE_LABEL, OptedOut};
use crate::recycle_bin::copy::BinEntry;
use crate::release::history::{Anomaly, ReleaseState};
use crate::release::scan::ReleaseReport;
use crate::release::{Driver, Status};

/// The reports' `policy`, `source` and name.
pub(crate) const POLICY: &str = "helm-guard";
/// The results' `category`.
pub(crate) const CATEGORY: &str = "Helm release health";

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
pub(crate) enum Severity {
    /// The crash loop of PROBLEM.md: nothing deployed and Helm refuses to install.
    Critical,
    /// Broken until an operator acts.
    High,
    /// Degraded: works, but the next operation may fail.
    Medium,
    /// Weaker protection than the rest of the cluster has.
    Low,
    /// Informational.
    Info,
}

/// One release's finding: the rule that speaks for it, its outcome and severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Finding {
    /// The state (`orphaned-superseded`) or anomaly (`undecodable-record`) it rests on.
    pub rule: &'static str,
    /// Its outcome.
    pub outcome: Outcome,
    /// Its severity.
    pub severity: Severity,
}

/// What a release's report amounts to (`docs/operate/policy-reports.md`, has the table).
pub(crate) fn finding(release: &ReleaseReport) -> Finding {
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
        if let Some(anomaly) = [Anomaly::MultipleDeployed, Anomaly::StatusLabelMismatch, Anomaly::Churn]
            .into_iter()
            .find(|a| has(*a))
        {
            return of(anomaly.as_str(), Outcome::Warn, Severity::Medium);
        }
    }
    by_state
}

/// The two report APIs platform teams read: the Policy WG's `wgpolicyk8s.io/v1alpha2` (what
/// Kyverno writes by default) and its successor `openreports.io/v1alpha1` (Policy Reporter 3.9
/// reads it). Their results are the same; the kinds differ, and only OpenReports names its
/// `source` at the top.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ReportApi {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport and ClusterPolicyReport.
    WgPolicy,
    /// `openreports.io/v1alpha1` Report and ClusterReport.
    OpenReports,
}

impl ReportApi {
    /// Both, in the order they are tried.
    pub(crate) const ALL: [ReportApi; 2] = [ReportApi::WgPolicy, ReportApi::OpenReports];

    /// The API group.
    pub(crate) fn group(self) -> &'static str {
        match self {
            ReportApi::WgPolicy => "wgpolicyk8s.io",
            ReportApi::OpenReports => "openreports.io",
        }
    }

    /// The version of the group the guard writes.
    pub(crate) fn version(self) -> &'static str {
        match self {
            ReportApi::WgPolicy => "v1alpha2",
            ReportApi::OpenReports => "v1alpha1",
        }
    }

    /// The kind of a namespace's report (`cluster`: of the cluster-scoped one).
    pub(crate) fn kind(self, cluster: bool) -> &'static str {
        match (self, cluster) {
            (ReportApi::WgPolicy, false) => "PolicyReport",
            (ReportApi::WgPolicy, true) => "ClusterPolicyReport",
            (ReportApi::OpenReports, false) => "Report",
            (ReportApi::OpenReports, true) => "ClusterReport",
        }
    }

    /// The resource's plural name (`cluster`: the cluster-scoped one's).
    pub(crate) fn plural(self, cluster: bool) -> &'static str {
        match (self, cluster) {
            (ReportApi::WgPolicy, false) => "policyreports",
            (ReportApi::WgPolicy, true) => "clusterpolicyreports",
            (ReportApi::OpenReports, false) => "reports",
            (ReportApi::OpenReports, true) => "clusterreports",
        }
    }

    /// How logs, metrics and flags name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReportApi::WgPolicy => "wgpolicyk8s",
            ReportApi::OpenReports => "openreports",
        }
    }
}

/// The most results one report carries: a report is one object (etcd keeps objects under
/// 1.5 MiB; a result is under 1 KiB). Past it the worst results are kept and the summary still
/// counts every release.
pub(crate) const MAX_RESULTS: usize = 1000;

/// The reports of `releases` in `api`'s kinds, one per namespace (sorted), at `now` (Unix
/// seconds): what `scan -o policyreport` prints.
pub(crate) fn reports(api: ReportApi, releases: &[ReleaseReport], now: i64) -> Vec<Value> {
    let mut by_namespace: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for release in releases {
        let mut result = release_result(release);
        stamp(&mut result, now);
        by_namespace.entry(release.namespace.as_str()).or_default().push(result);
    }
    by_namespace.into_iter().map(|(namespace, results)| report(api, Some(namespace), results)).collect()
}

/// One release's result, without its `timestamp` (the writer keeps the time a result was first
/// seen, so that an unchanged result is not rewritten; see [`stamp`]).
pub(crate) fn release_result(release: &ReleaseReport) -> Value {
    let mut result = result(finding(release), format!("release {}: {}", release.release, release.hint));
    set(&mut result, "properties", properties(release));
    if let Some(resource) = latest_record(release) {
        set(&mut result, "resources", json!([resource]));
    }
    result
}

/// Adds `resource` (a reference: apiVersion, kind, namespace, name) to a result's `resources`,
/// after the record: on K3s/RKE2 the HelmChart that manages the release.
pub(crate) fn add_resource(result: &mut Value, resource: Value) {
    match result.get_mut("resources").and_then(Value::as_array_mut) {
        Some(resources) => resources.push(resource),
        None => set(result, "resources", json!([resource])),
    }
}

/// A result's common fields.
fn result(finding: Finding, message: String) -> Value {
    let outcome: &'static str = finding.outcome.into();
    let severity: &'static str = finding.severity.into();
    json!({
        "policy": POLICY,
        "rule": finding.rule,
        "result": outcome,
        "severity": severity,
        "category": CATEGORY,
        "source": POLICY,
        "message": message,
    })
}

/// Sets `field` of the object `value` (nothing when it is not one).
fn set(value: &mut Value, field: &str, to: Value) {
    if let Some(fields) = value.as_object_mut() {
        fields.insert(field.to_owned(), to);
    }
}

/// Sets a result's `timestamp` to `seconds` (Unix).
pub(crate) fn stamp(result: &mut Value, seconds: i64) {
    if let Some(fields) = result.as_object_mut() {
        fields.insert("timestamp".into(), json!({"seconds": seconds, "nanos": 0}));
    }
}

/// A report of `results`, of `namespace` (`None`: the cluster-scoped one) in `api`'s kinds, with
/// its summary. Past `MAX_RESULTS` the worst are kept (error, fail, warn, then pass).
pub(crate) fn report(api: ReportApi, namespace: Option<&str>, mut results: Vec<Value>) -> Value {
    let mut summary: BTreeMap<&str, u64> = ["pass", "fail", "warn", "error", "skip"].map(|k| (k, 0)).into();
    for result in &results {
        if let Some(outcome) = result["result"].as_str().and_then(|r| summary.get_mut(r)) {
            *outcome += 1;
        }
    }
    if results.len() > MAX_RESULTS {
        let rank = |result: &Value| match result["result"].as_str() {
            Some("error") => 0,
            Some("fail") => 1,
            Some("warn") => 2,
            _ => 3,
        };
        results.sort_by_key(rank);
        results.truncate(MAX_RESULTS);
    }
    let mut metadata = json!({"name": POLICY, "labels": {"app.kubernetes.io/managed-by": POLICY}});
    if let Some(namespace) = namespace {
        set(&mut metadata, "namespace", json!(namespace));
    }
    let mut report = json!({
        "apiVersion": format!("{}/{}", api.group(), api.version()),
        "kind": api.kind(namespace.is_none()),
        "metadata": metadata,
        "summary": summary,
        "results": results,
    });
    if api == ReportApi::OpenReports {
        set(&mut report, "source", json!(POLICY));
    }
    report
}

/// The cluster-scoped report's results: each namespace whose labels leave its releases less
/// protected than the guard's default (warn: ignored is medium, a weaker mode low), each
/// release with copies in the recycle bin (pass: nothing is broken; the message says how to
/// bring them back), and each HelmChart whose job would uninstall its release to install it
/// afresh on failure, nothing protecting it (warn, low). Without timestamps, as
/// [`release_result`].
pub(crate) fn cluster_results(
    opted_out: &[OptedOut],
    bin: &[BinEntry],
    reinstalling: &[crate::cluster::helmcharts::HelmChart],
    guard_namespace: &str,
) -> Vec<Value> {
    let mut results = Vec::new();
    for chart in reinstalling {
        let finding = Finding {
            rule: "helmchart-reinstalls-on-failure",
            outcome: Outcome::Warn,
            severity: Severity::Low,
        };
        let message = format!(
            "HelmChart {}/{} would reinstall on failure: its helm-install job uninstalls release {} in {} (every \
             resource it made) and installs it afresh; `{}=true` on it or its namespace, or `--protected-chart {}/{}`, \
             makes the job retry or wait instead",
            chart.namespace,
            chart.name,
            chart.name,
            chart.target_namespace,
            crate::policy::pod::PROTECT_LABEL,
            chart.namespace,
            chart.name
        );
        let mut result = result(finding, message);
        set(
            &mut result,
            "resources",
            json!([{"apiVersion": crate::cluster::helmcharts::API_VERSION, "kind": crate::cluster::helmcharts::KIND,
                    "namespace": chart.namespace, "name": chart.name}]),
        );
        set(
            &mut result,
            "properties",
            json!({"namespace": chart.namespace, "helmchart": chart.name,
                   "failurePolicy": chart.failure_policy.as_deref().unwrap_or("reinstall")}),
        );
        results.push(result);
    }
    for namespace in opted_out {
        let severity = if namespace.protection == "ignored" { Severity::Medium } else { Severity::Low };
        let finding = Finding { rule: "namespace-opted-out", outcome: Outcome::Warn, severity };
        let message = format!(
            "namespace {}: its release records are {} by helm-guard (the `{IGNORE_LABEL}` or `{MODE_LABEL}` label); \
             remove the label to protect them",
            namespace.namespace,
            match namespace.protection.as_str() {
                "ignored" => "not guarded".to_owned(),
                mode => format!("only in {mode} mode"),
            }
        );
        let mut result = result(finding, message);
        set(
            &mut result,
            "resources",
            json!([{"apiVersion": "v1", "kind": "Namespace", "name": namespace.namespace}]),
        );
        set(
            &mut result,
            "properties",
            json!({"namespace": namespace.namespace, "protection": namespace.protection}),
        );
        results.push(result);
    }
    let mut releases: BTreeMap<(&str, &str), Vec<&BinEntry>> = BTreeMap::new();
    for entry in bin {
        releases.entry((entry.namespace.as_str(), entry.release.as_str())).or_default().push(entry);
    }
    for ((namespace, release), copies) in releases {
        let finding = Finding { rule: "recycle-bin-copy", outcome: Outcome::Pass, severity: Severity::Info };
        let mut revisions: Vec<u32> = copies.iter().map(|c| c.revision).collect();
        revisions.sort_unstable();
        revisions.dedup();
        let listed = revisions.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        let message = format!(
            "release {release} in {namespace}: {} deleted record(s) kept in the recycle bin (revisions {listed}); \
             `helm-guard restore {release} -n {namespace} --guard-namespace {guard_namespace}` shows how to bring them back",
            copies.len()
        );
        let mut result = result(finding, message);
        set(&mut result, "resources", json!(
            copies
                .iter()
                .map(|c| json!({"apiVersion": "v1", "kind": "Secret", "namespace": guard_namespace, "name": c.name}))
                .take(16)
                .collect::<Vec<_>>()
        ));
        set(
            &mut result,
            "properties",
            json!({"namespace": namespace, "release": release, "revisions": listed, "copies": copies.len().to_string()}),
        );
        results.push(result);
    }
    results
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
            stuck_because: None,
            writer: None,
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

    /// `docs/operate/policy-reports.md`'s table, row by row: a release's state (and anomalies) to the rule, outcome and
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
            (release(S::Healthy, 3, &[3], false, &[Anomaly::Churn]), "churn", Warn, Medium),
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
        let reports = reports(ReportApi::WgPolicy, &[healthy, orphan, config_map], 1_800_000_000);
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

    #[test]
    fn openreports_reports_carry_their_kinds_and_source_and_policyreports_do_not() {
        let healthy = release(ReleaseState::Healthy, 3, &[3], false, &[]);
        let result = release_result(&healthy);
        let wg = report(ReportApi::WgPolicy, Some("demo"), vec![result.clone()]);
        let open = report(ReportApi::OpenReports, Some("demo"), vec![result.clone()]);
        let cluster = report(ReportApi::OpenReports, None, vec![result]);
        assert_eq!(
            (wg["apiVersion"].as_str(), wg["kind"].as_str()),
            (Some("wgpolicyk8s.io/v1alpha2"), Some("PolicyReport"))
        );
        assert_eq!(
            (open["apiVersion"].as_str(), open["kind"].as_str()),
            (Some("openreports.io/v1alpha1"), Some("Report"))
        );
        assert_eq!(cluster["kind"], "ClusterReport");
        assert!(cluster["metadata"].get("namespace").is_none(), "a cluster report has no namespace");
        assert_eq!(open["source"], POLICY, "OpenReports names its source at the top");
        assert!(
            wg.get("source").is_none(),
            "the v1alpha2 schema has no top-level source (strict validation refuses it)"
        );
        assert!(wg["results"][0].get("timestamp").is_none(), "the writer stamps results, not the builder");
    }

    #[test]
    fn a_report_past_its_bound_keeps_the_worst_results_and_counts_them_all() {
        let mut results: Vec<Value> = (0..MAX_RESULTS + 5)
            .map(|_| release_result(&release(ReleaseState::Healthy, 3, &[3], false, &[])))
            .collect();
        results.push(release_result(&release(ReleaseState::OrphanedSuperseded, 3, &[], false, &[])));
        results.push(release_result(&release(ReleaseState::Absent, 3, &[], false, &[])));
        let report = report(ReportApi::WgPolicy, Some("demo"), results);
        let kept = report["results"].as_array().unwrap();
        assert_eq!(kept.len(), MAX_RESULTS);
        assert_eq!((kept[0]["result"].as_str(), kept[1]["result"].as_str()), (Some("error"), Some("fail")));
        let pass = u64::try_from(MAX_RESULTS + 5).unwrap();
        assert_eq!(report["summary"], json!({"pass": pass, "fail": 1, "warn": 0, "error": 1, "skip": 0}));
    }

    #[test]
    fn the_cluster_report_names_opted_out_namespaces_and_the_copies_to_restore() {
        let opted_out = [
            OptedOut { namespace: "lab".into(), protection: "ignored".into(), since: None },
            OptedOut { namespace: "staging".into(), protection: "audit".into(), since: Some(1) },
        ];
        let copy = |name: &str, revision: u32| BinEntry {
            name: name.into(),
            namespace: "demo".into(),
            release: "web".into(),
            driver: "secret".into(),
            revision,
            reason: "break-glass".into(),
            readable: true,
            requester: "admin".into(),
            kept_at: 1,
            bytes: 10,
        };
        let results = cluster_results(&opted_out, &[copy("c2", 2), copy("c1", 1)], &[], "helm-guard");
        assert_eq!(results.len(), 3, "one per namespace, one per release with copies");
        let (lab, staging, web) = (&results[0], &results[1], &results[2]);
        assert_eq!(
            (lab["rule"].as_str(), lab["result"].as_str(), lab["severity"].as_str()),
            (Some("namespace-opted-out"), Some("warn"), Some("medium"))
        );
        assert_eq!(staging["severity"], "low", "a weaker mode is less than no guard at all");
        assert!(
            staging["message"].as_str().unwrap().contains("only in audit mode"),
            "{}",
            staging["message"]
        );
        assert_eq!(lab["resources"][0], json!({"apiVersion": "v1", "kind": "Namespace", "name": "lab"}));
        assert_eq!((web["rule"].as_str(), web["result"].as_str()), (Some("recycle-bin-copy"), Some("pass")));
        let message = web["message"].as_str().unwrap();
        assert!(message.contains("2 deleted record(s)") && message.contains("revisions 1, 2"), "{message}");
        assert!(message.contains("helm-guard restore web -n demo --guard-namespace helm-guard"), "{message}");
        assert_eq!(web["resources"][1]["name"], "c1");
    }

    /// Issue 59: a HelmChart whose job would uninstall its release to reinstall it is reported
    /// (warn, low), with what protects it instead.
    #[test]
    fn a_helmchart_that_would_reinstall_on_failure_is_reported_with_what_protects_it() {
        use crate::cluster::helmcharts::HelmChart;
        let cilium = HelmChart {
            namespace: "kube-system".into(),
            name: "rke2-cilium".into(),
            uid: None,
            target_namespace: "kube-system".into(),
            protect: false,
            failure_policy: None,
        };
        let results = cluster_results(&[], &[], std::slice::from_ref(&cilium), "helm-guard");
        let [result] = &results[..] else { panic!("one result: {results:?}") };
        assert_eq!(
            (result["rule"].as_str(), result["result"].as_str(), result["severity"].as_str()),
            (Some("helmchart-reinstalls-on-failure"), Some("warn"), Some("low"))
        );
        let message = result["message"].as_str().unwrap();
        assert!(
            message.starts_with("HelmChart kube-system/rke2-cilium would reinstall on failure"),
            "{message}"
        );
        assert!(message.contains("--protected-chart kube-system/rke2-cilium"), "{message}");
        assert_eq!(result["resources"][0]["kind"], "HelmChart");
        assert_eq!(result["properties"]["failurePolicy"], "reinstall");
        // Which charts reinstall: the default policy, unprotected; not a protected one, not by
        // name, not in a protecting namespace, not with a policy that keeps the release.
        let defaults = crate::policy::PolicyConfig::default().protected_charts;
        assert!(!cilium.reinstalls_on_failure(false, &defaults), "on the default list");
        assert!(cilium.reinstalls_on_failure(false, &[]), "the list overridden to none");
        assert!(!cilium.reinstalls_on_failure(true, &[]), "its namespace protects it");
        let labelled = HelmChart { protect: true, ..cilium.clone() };
        assert!(!labelled.reinstalls_on_failure(false, &[]));
        let retry = HelmChart { failure_policy: Some("retry".into()), ..cilium.clone() };
        assert!(!retry.reinstalls_on_failure(false, &[]));
        let explicit = HelmChart { failure_policy: Some("reinstall".into()), ..cilium };
        assert!(explicit.reinstalls_on_failure(false, &[]));
    }

    #[test]
    fn the_helmchart_that_manages_a_release_is_named_after_its_record() {
        let mut result = release_result(&release(ReleaseState::OrphanedSuperseded, 2, &[], false, &[]));
        let chart = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "namespace": "kube-system", "name": "web"});
        add_resource(&mut result, chart.clone());
        assert_eq!(result["resources"][0]["name"], "sh.helm.release.v1.web.v2", "the record first");
        assert_eq!(result["resources"][1], chart);
        let mut without_record = result.clone();
        without_record.as_object_mut().unwrap().remove("resources");
        add_resource(&mut without_record, chart.clone());
        assert_eq!(without_record["resources"], json!([chart]));
    }
}
