//! `helm-guard scan`: classify every release and report the broken ones.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

use super::{ClusterArgs, table};
use super::{
    ClusterUnavailable, DecodeArgs, Exit, Output, count, exit_code_of, input_name, now_secs, read_input,
};
use crate::cluster::connect::connect;
use crate::cluster::listing::{list_namespaces, list_records};
use crate::cluster::writers::pending_writers;
use crate::policy::namespace::OptedOut;
use crate::policy_reports::build::{ReportApi, cluster_results};
use crate::recycle_bin::api::list_bin;
use crate::release::DecodedRecord;
use crate::release::objects::parse_objects;
use crate::release::record::describe;
use crate::release::repair::{RepairPlan, plan};
use crate::release::scan::{LatestWriters, ReleaseReport, by_release, collect_records, report_with_writers};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  helm-guard scan                                   every release in the cluster, the broken ones first\n  helm-guard scan -n shop --release web -o json     one release, for a script\n  kubectl get secrets,configmaps -A -l owner=helm -o json > dump.json && helm-guard scan --from-file dump.json\n\nExit status: 0 no release needs attention, 1 one does, 2 bad input (a dump that does not parse, a missing file, a --release that is not there), 3 the cluster could not be read: a CI step tells a broken release from an unreachable cluster."
)]
pub(crate) struct ScanArgs {
    /// Read a dump instead of the cluster: the output of `kubectl get secrets,configmaps -A -l
    /// owner=helm -o json` (JSON or YAML; `-` for stdin). -n, -A and --release filter it as
    /// they filter the cluster.
    #[arg(long, value_name = "DUMP", conflicts_with_all = ["kubeconfig", "context"])]
    pub from_file: Option<PathBuf>,
    /// Every namespace (the default).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Only this namespace.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Only this release (by name).
    #[arg(long)]
    pub release: Option<String>,
    /// Only the releases that need attention.
    #[arg(long)]
    pub broken: bool,
    /// Only the namespaces whose labels switch the guard off or weaken it (`helm-guard.io/ignore`,
    /// a `helm-guard.io/mode` other than enforce), and since when.
    #[arg(long, conflicts_with_all = ["broken", "repair_plan", "release"])]
    pub opted_out: bool,
    /// Only the copies of records in the guard's recycle bin (`helm-guard restore` brings them
    /// back): release, revision, when, why and by whom.
    #[arg(long, conflicts_with_all = ["broken", "repair_plan", "opted_out", "from_file"])]
    pub recycle_bin: bool,
    #[command(flatten)]
    pub bin: super::BinArgs,
    /// For each release that needs attention, the `helm-guard repair` command that fixes it
    /// (and what it would change), or what only an operator can do.
    #[arg(long)]
    pub repair_plan: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format: a table with a summary line, a JSON or YAML array (`[]` when nothing
    /// matched), or `policyreport`: a PolicyReport per namespace, one result per release, and the
    /// cluster's (opted-out namespaces, the recycle bin), as YAML documents, the reports the guard
    /// writes live (written nowhere here: for GitOps audits; `--report-api`).
    #[arg(short, long, value_enum, default_value_t)]
    pub output: ScanOutput,
    /// With `-o policyreport`: the report API, `wgpolicyk8s` (PolicyReport, ClusterPolicyReport)
    /// or `openreports` (Report, ClusterReport).
    #[arg(long, value_enum, default_value_t = ReportApiArg::Wgpolicyk8s)]
    pub report_api: ReportApiArg,
    /// A pending revision unchanged for longer than this is stuck.
    #[arg(long, env = "HELM_GUARD_STUCK_AFTER", default_value = "15m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    /// Judge ages as of this time (RFC 3339) instead of now, for reproducible reports.
    #[arg(long, hide = true)]
    pub now: Option<jiff::Timestamp>,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// The report API `scan -o policyreport` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReportApiArg {
    /// `wgpolicyk8s.io/v1alpha2`.
    Wgpolicyk8s,
    /// `openreports.io/v1alpha1`.
    Openreports,
}

impl From<ReportApiArg> for ReportApi {
    fn from(api: ReportApiArg) -> ReportApi {
        match api {
            ReportApiArg::Wgpolicyk8s => ReportApi::WgPolicy,
            ReportApiArg::Openreports => ReportApi::OpenReports,
        }
    }
}

/// `scan`'s output formats: the common ones and PolicyReports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum ScanOutput {
    /// For people: a table and a summary.
    #[default]
    Text,
    /// A JSON array.
    Json,
    /// A YAML array.
    Yaml,
    /// PolicyReports, one per namespace and the cluster's, as YAML documents.
    Policyreport,
}

impl ScanOutput {
    /// The common format (PolicyReports are printed as YAML data).
    fn common(self) -> Output {
        match self {
            ScanOutput::Text => Output::Text,
            ScanOutput::Json => Output::Json,
            ScanOutput::Yaml | ScanOutput::Policyreport => Output::Yaml,
        }
    }
}

pub(super) async fn run(args: &ScanArgs) -> anyhow::Result<Exit> {
    if args.output == ScanOutput::Policyreport && (args.opted_out || args.repair_plan || args.recycle_bin) {
        eprintln!(
            "error: -o policyreport reports releases; it does not go with --opted-out, --repair-plan or --recycle-bin"
        );
        return Ok(Exit::BadInput);
    }
    if args.recycle_bin {
        return scan_bin(args).await;
    }
    let (source, objects) = match &args.from_file {
        Some(path) => (input_name(path), read_dump(path, args)),
        None => ("the cluster".to_owned(), list_cluster(args).await),
    };
    let Listed { records: objects, namespaces, bin, writers } = match objects {
        Ok(listed) => listed,
        Err(error) => {
            eprintln!("error: {error:#}");
            return Ok(exit_code_of(&error));
        }
    };
    // Relative to enforce: scan does not know the guard's global --mode.
    let opted_out: Vec<OptedOut> =
        namespaces.iter().filter_map(|meta| OptedOut::of(meta, crate::policy::Mode::Enforce)).collect();
    if args.opted_out {
        if opted_out.is_empty() && args.output.common() == Output::Text {
            outln!("No namespace in {source}{} is opted out of helm-guard.", scope(args))?;
        } else {
            print_opted_out(&opted_out, args.output.common())?;
        }
        return Ok(if opted_out.is_empty() { Exit::Ok } else { Exit::Findings });
    }
    let (records, problems) = collect_records(&objects, args.decode.limits());
    for problem in &problems {
        eprintln!("warning: {}: {} (Helm skips this record)", problem.object, problem.error);
    }
    let stuck_after = i64::try_from(args.stuck_after.as_secs()).unwrap_or(i64::MAX);
    let mut releases = report_with_writers(&records, now_secs(args.now.as_ref()), stuck_after, &writers);
    // A named release that is not there is not a healthy one: a CI step gating on it must fail.
    if let (Some(release), true) = (&args.release, releases.is_empty()) {
        let namespace = args.namespace.as_ref().map(|ns| format!(", namespace {ns}")).unwrap_or_default();
        eprintln!(
            "error: release {release} not found in {source}{namespace} (no Secret or ConfigMap labelled owner=helm,name={release})"
        );
        return Ok(Exit::BadInput);
    }
    if args.broken || args.repair_plan {
        releases.retain(|r| r.broken);
    }
    if args.repair_plan {
        print_repair_plans(
            &records,
            &releases,
            now_secs(args.now.as_ref()),
            stuck_after,
            &writers,
            args.output.common(),
        )?;
        return Ok(if releases.is_empty() { Exit::Ok } else { Exit::Findings });
    }
    if args.output == ScanOutput::Policyreport {
        // scan reads release records, not HelmCharts: the charts that would reinstall on failure
        // are reported by the guard's writer, which watches them.
        let cluster = cluster_results(&opted_out, &bin, &[], args.bin.namespace());
        print_policy_reports(args.report_api.into(), &releases, cluster, now_secs(args.now.as_ref()))?;
        return Ok(if releases.iter().any(|r| r.broken) { Exit::Findings } else { Exit::Ok });
    }
    if releases.is_empty() && args.output.common() == Output::Text {
        outln!("No {}releases found in {source}{}.", if args.broken { "broken " } else { "" }, scope(args))?;
    } else {
        print_reports(&releases, args.output.common())?;
    }
    if !opted_out.is_empty() && args.output.common() == Output::Text {
        outln!("\nNot (fully) guarded by their namespace's labels (`helm-guard scan --opted-out`):")?;
        print_opted_out(&opted_out, Output::Text)?;
    }
    if args.output.common() == Output::Text {
        print_bin_summary(&bin)?;
    }
    Ok(if releases.iter().any(|r| r.broken) { Exit::Findings } else { Exit::Ok })
}

/// Each namespace's report, then the cluster's (opted-out namespaces, the recycle bin's copies)
/// when it has results, as YAML documents (`---` between them): what the live writer writes.
fn print_policy_reports(
    api: ReportApi,
    releases: &[ReleaseReport],
    cluster: Vec<Value>,
    now: i64,
) -> anyhow::Result<()> {
    let mut reports = crate::policy_reports::build::reports(api, releases, now);
    if !cluster.is_empty() {
        let stamped = cluster
            .into_iter()
            .map(|mut result| {
                crate::policy_reports::build::stamp(&mut result, now);
                result
            })
            .collect();
        reports.push(crate::policy_reports::build::report(api, None, stamped));
    }
    for (n, report) in reports.iter().enumerate() {
        if n > 0 {
            outln!("---")?;
        }
        outln!("{}", serde_saphyr::to_string(report)?.trim_end())?;
    }
    Ok(())
}

/// The repair of each broken release: a command to paste, or why there is none.
fn print_repair_plans(
    records: &[DecodedRecord],
    releases: &[ReleaseReport],
    now: i64,
    stuck_after: i64,
    writers: &LatestWriters,
    output: Output,
) -> anyhow::Result<()> {
    let plans: Vec<RepairPlan> = by_release(records)
        .iter()
        .filter(|(key, _)| {
            releases
                .iter()
                .any(|r| r.namespace == key.namespace && r.release == key.release && r.driver == key.driver)
        })
        .map(|(key, records)| {
            plan(key, records, now, stuck_after, writers.get(&(key.namespace.clone(), key.release.clone())))
        })
        .collect();
    if super::print_data(&plans, output)? {
        return Ok(());
    }
    if plans.is_empty() {
        outln!("No release needs repair.")?;
    }
    for plan in &plans {
        let (release, namespace) = (&plan.release, &plan.namespace);
        outln!("# {namespace}/{release}: {}", plan.state)?;
        if let Some(why) = &plan.refused {
            outln!("#   not now: {why}")?;
        }
        if !plan.steps.is_empty() && plan.refused.is_none() {
            let changes: Vec<String> = plan
                .steps
                .iter()
                .map(|s| format!("revision {} {} -> {}", s.revision, s.from, s.to))
                .collect();
            outln!("helm-guard repair {release} -n {namespace} --apply   # {}", changes.join(", "))?;
        }
        for advice in &plan.advice {
            outln!("#   {advice}")?;
        }
        if plan.steps.is_empty() && plan.refused.is_none() && plan.advice.is_empty() {
            let hint = releases
                .iter()
                .find(|r| &r.release == release && &r.namespace == namespace)
                .map(|r| r.hint.as_str());
            outln!("#   nothing for repair to change: {}", hint.unwrap_or("see `helm history`"))?;
        }
    }
    Ok(())
}

/// The filters in words, for the line that says nothing matched.
fn scope(args: &ScanArgs) -> String {
    let mut scope = String::new();
    if let Some(namespace) = &args.namespace {
        scope += &format!(", namespace {namespace}");
    }
    if let Some(release) = &args.release {
        scope += &format!(", release {release}");
    }
    scope
}

/// The dump's objects that the filters select, as the cluster's list selects them: by namespace
/// and by the `name` label Helm queries. A file that is not a dump is bad input; a dump with no
/// records in it is an empty answer.
fn read_dump(path: &Path, args: &ScanArgs) -> anyhow::Result<Listed> {
    // read_input names the file in its errors; the rest are named here.
    let bytes = read_input(path)?;
    read_objects(&bytes, args).with_context(|| input_name(path))
}

fn read_objects(bytes: &[u8], args: &ScanArgs) -> anyhow::Result<Listed> {
    let objects = parse_objects(bytes)?;
    let namespaces = objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .filter_map(|o| serde_json::from_value::<ObjectMeta>(o.get("metadata")?.clone()).ok())
        .filter(|meta| args.namespace.as_ref().is_none_or(|ns| meta.name.as_ref() == Some(ns)))
        .collect();
    let stores = |o: &&Value| matches!(o.get("kind").and_then(Value::as_str), Some("Secret" | "ConfigMap"));
    if let Some(other) = objects.first().filter(|_| !objects.iter().any(|o| stores(&o))) {
        anyhow::bail!(
            "holds no Secrets or ConfigMaps (the first object is {}); expected the output of `kubectl get secrets,configmaps -A -l owner=helm -o json`",
            describe(other)
        );
    }
    let text =
        |object: &Value, pointer: &str| object.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
    let records = objects
        .into_iter()
        .filter(|o| {
            args.namespace.as_ref().is_none_or(|ns| text(o, "/metadata/namespace").as_ref() == Some(ns))
        })
        .filter(|o| {
            args.release.as_ref().is_none_or(|r| text(o, "/metadata/labels/name").as_ref() == Some(r))
        })
        .collect();
    Ok(Listed { records, namespaces, bin: Vec::new(), writers: LatestWriters::new() })
}

/// What a scan reads: the records, the namespaces, the recycle bin's copies.
struct Listed {
    records: Vec<Value>,
    namespaces: Vec<ObjectMeta>,
    bin: Vec<crate::recycle_bin::copy::BinEntry>,
    /// The writers of pending latest revisions, and whether they run (none from a dump).
    writers: LatestWriters,
}

/// Lists the records of the cluster (or one namespace, or one release), its namespaces (none,
/// with a warning, for a user who may not list them) and the copies in the recycle bin (none,
/// quietly, for a user who may not read the guard's namespace, as most may not).
async fn list_cluster(args: &ScanArgs) -> anyhow::Result<Listed> {
    let listed = async {
        let client = connect(&args.cluster.access()).await?;
        let (namespace, release) = (args.namespace.as_deref(), args.release.as_deref());
        let records = list_records(&client, namespace, release).await?;
        let namespaces = list_namespaces(&client, namespace).await.unwrap_or_else(|error| {
            eprintln!("warning: could not list namespaces ({error}): opted-out namespaces are not shown");
            Vec::new()
        });
        let bin = list_bin(&client, args.bin.namespace(), namespace, release).await.unwrap_or_default();
        let writers = pending_writers(&client, &args.bin.guard_namespace, &records).await;
        anyhow::Ok(Listed { records, namespaces, bin, writers })
    }
    .await;
    listed.map_err(|error| ClusterUnavailable(error.context("reading the cluster")).into())
}

/// `scan --recycle-bin`: the copies in the bin, as a table or a JSON or YAML array.
async fn scan_bin(args: &ScanArgs) -> anyhow::Result<Exit> {
    let entries = match list_bin_entries(args).await {
        Ok(entries) => entries,
        Err(error) => {
            eprintln!("error: reading the recycle bin in namespace {}: {error:#}", args.bin.namespace());
            return Ok(Exit::Failure);
        }
    };
    if super::print_data(&entries, args.output.common())? {
        return Ok(Exit::Ok);
    }
    if entries.is_empty() {
        outln!("The recycle bin in namespace {} holds no copies{}.", args.bin.namespace(), scope(args))?;
        return Ok(Exit::Ok);
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let kept = jiff::Timestamp::from_second(e.kept_at).map_or_else(|_| "-".into(), |t| t.to_string());
            vec![
                e.namespace.clone(),
                e.release.clone(),
                e.revision.to_string(),
                kept,
                e.reason.clone(),
                e.requester.clone(),
                e.name.clone(),
            ]
        })
        .collect();
    table(&["NAMESPACE", "RELEASE", "REVISION", "DELETED", "REASON", "BY", "COPY"], &rows)?;
    outln!(
        "\n{} (`helm-guard restore RELEASE -n NAMESPACE` brings them back)",
        count(entries.len(), "copy")
    )?;
    Ok(Exit::Ok)
}

/// The copies in the bin, as the filters select them.
async fn list_bin_entries(args: &ScanArgs) -> anyhow::Result<Vec<crate::recycle_bin::copy::BinEntry>> {
    let client = connect(&args.cluster.access()).await?;
    let (namespace, release) = (args.namespace.as_deref(), args.release.as_deref());
    Ok(list_bin(&client, args.bin.namespace(), namespace, release).await?)
}

/// After the report: the releases with copies in the bin.
fn print_bin_summary(entries: &[crate::recycle_bin::copy::BinEntry]) -> anyhow::Result<()> {
    let mut releases: std::collections::BTreeMap<(&str, &str), Vec<u32>> = Default::default();
    for entry in entries {
        releases.entry((&entry.namespace, &entry.release)).or_default().push(entry.revision);
    }
    if releases.is_empty() {
        return Ok(());
    }
    outln!("\nWith copies in the recycle bin (`helm-guard scan --recycle-bin`, `helm-guard restore`):")?;
    for ((namespace, release), mut revisions) in releases {
        revisions.sort_unstable();
        revisions.dedup();
        let revisions: Vec<String> = revisions.iter().map(u32::to_string).collect();
        outln!("  {namespace}/{release}: revision {}", revisions.join(", "))?;
    }
    Ok(())
}

/// Prints opted-out namespaces as a table, or as a JSON or YAML array.
fn print_opted_out(namespaces: &[OptedOut], output: Output) -> anyhow::Result<()> {
    if super::print_data(namespaces, output)? {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = namespaces
        .iter()
        .map(|n| {
            let since = n.since.and_then(|s| jiff::Timestamp::from_second(s).ok());
            vec![
                n.namespace.clone(),
                n.protection.clone(),
                since.map_or_else(|| "-".into(), |t| t.to_string()),
            ]
        })
        .collect();
    table(&["NAMESPACE", "PROTECTION", "LABELS SET"], &rows)
}

/// Prints reports as a table with a summary line, or as a JSON or YAML array.
fn print_reports(releases: &[ReleaseReport], output: Output) -> anyhow::Result<()> {
    if super::print_data(releases, output)? {
        return Ok(());
    }
    let headers =
        ["NAMESPACE", "RELEASE", "DRIVER", "STATE", "REVISION", "STATUS", "CHART", "ANOMALIES", "HINT"];
    let rows: Vec<Vec<String>> = releases
        .iter()
        .map(|r| {
            let state = if r.stuck { format!("{} (stuck)", r.state) } else { r.state.to_string() };
            vec![
                r.namespace.clone(),
                r.release.clone(),
                r.driver.to_string(),
                state,
                r.revision.map_or_else(|| "-".into(), |v| v.to_string()),
                r.status.map_or_else(|| "-".into(), |s| s.to_string()),
                r.chart.clone().unwrap_or_else(|| "-".into()),
                if r.anomalies.is_empty() { "-".into() } else { r.anomalies.join(",") },
                r.hint.clone(),
            ]
        })
        .collect();
    table(&headers, &rows)?;
    let broken = releases.iter().filter(|r| r.broken).count();
    outln!(
        "\n{}, {} healthy or uninstalled, {broken} {} attention",
        count(releases.len(), "release"),
        releases.len() - broken,
        if broken == 1 { "needs" } else { "need" }
    )?;
    Ok(())
}
