//! `helm-guard scan`: classify every release and report the broken ones.

use std::path::PathBuf;
use std::time::Duration;

use super::{DecodeArgs, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, Output, now_secs, read_input};
use crate::cluster::live::{ClusterArgs, connect, list_records};
use crate::release::DecodedRecord;
use crate::release::scan::{Problem, ReleaseReport, collect_records, records_from_text, report};

#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// A dump from `kubectl get secrets,configmaps -A -l owner=helm -o json` (JSON or YAML; `-` for
    /// stdin). Without it, the cluster is scanned.
    #[arg(long, value_name = "DUMP", conflicts_with_all = ["namespace", "kubeconfig", "context"])]
    pub from_file: Option<PathBuf>,
    /// Scan every namespace (the default).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Scan one namespace of the cluster.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Scan one release (by name).
    #[arg(long)]
    pub release: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// A pending revision unchanged for longer than this is stuck.
    #[arg(long, env = "HELM_GUARD_STUCK_AFTER", default_value = "15m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    /// Judge ages as of this time (RFC 3339) instead of now, for reproducible reports.
    #[arg(long, hide = true)]
    pub now: Option<jiff::Timestamp>,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

pub fn run(args: &ScanArgs) -> anyhow::Result<u8> {
    let limits = args.decode.limits();
    let (source, found) = match &args.from_file {
        Some(path) => {
            let text = read_input(path)?;
            (path.display().to_string(), records_from_text(&text, limits).map_err(anyhow::Error::from))
        }
        None => ("the cluster".to_owned(), scan_cluster(args)),
    };
    let (records, problems) = match found {
        Ok(found) => found,
        Err(error) => {
            eprintln!("error: {source}: {error:#}");
            return Ok(EXIT_BAD_INPUT);
        }
    };
    let records: Vec<DecodedRecord> = match &args.release {
        Some(release) => records.into_iter().filter(|r| &r.record.id.key.release == release).collect(),
        None => records,
    };
    for problem in &problems {
        eprintln!("warning: {}: {} (Helm skips this record)", problem.object, problem.error);
    }
    if records.is_empty() {
        if args.from_file.is_none() {
            // An empty cluster (or namespace) is a fine answer, not bad input.
            eprintln!("no Helm release records found in {source}");
            return Ok(EXIT_OK);
        }
        eprintln!(
            "error: {source}: no Helm release records found (expected the output of `kubectl get secrets,configmaps -A -l owner=helm -o json`)"
        );
        return Ok(EXIT_BAD_INPUT);
    }
    let stuck_after = i64::try_from(args.stuck_after.as_secs()).unwrap_or(i64::MAX);
    let releases = report(&records, now_secs(args.now.as_ref()), stuck_after);
    print_reports(&releases, args.output)?;
    Ok(if releases.iter().any(|r| r.broken) { EXIT_FINDINGS } else { EXIT_OK })
}

/// Lists the records of the cluster (or one namespace) with their payloads.
fn scan_cluster(args: &ScanArgs) -> anyhow::Result<(Vec<DecodedRecord>, Vec<Problem>)> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let objects = runtime.block_on(async {
        let client = connect(&args.cluster).await?;
        list_records(&client, args.namespace.as_deref(), args.release.as_deref()).await
    })?;
    Ok(collect_records(&objects, args.decode.limits()))
}

/// Prints reports as a table with a summary line, or as a JSON array.
pub fn print_reports(releases: &[ReleaseReport], output: Output) -> anyhow::Result<()> {
    if output == Output::Json {
        outln!("{}", serde_json::to_string_pretty(releases)?)?;
        return Ok(());
    }
    let headers =
        ["NAMESPACE", "RELEASE", "DRIVER", "STATE", "REVISION", "STATUS", "CHART", "ANOMALIES", "HINT"];
    let rows: Vec<[String; 9]> = releases
        .iter()
        .map(|r| {
            let state = if r.stuck { format!("{} (stuck)", r.state) } else { r.state.to_string() };
            [
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
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(
                |(i, (cell, width))| {
                    if i + 1 == cells.len() { cell.to_string() } else { format!("{cell:<width$}") }
                },
            )
            .collect();
        outln!("{}", padded.join("  "))
    };
    line(&headers)?;
    for row in &rows {
        line(&row.each_ref().map(String::as_str))?;
    }
    let broken = releases.iter().filter(|r| r.broken).count();
    outln!(
        "\n{} releases, {} healthy or uninstalled, {broken} need attention",
        releases.len(),
        releases.len() - broken
    )?;
    Ok(())
}
