//! `helm-guard scan`: classify every release and report the broken ones.

use std::path::PathBuf;
use std::time::Duration;

use super::{DecodeArgs, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, Output, now_secs, read_input};
use crate::release::scan::{ReleaseReport, records_from_text, report};

#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// A dump from `kubectl get secrets,configmaps -A -l owner=helm -o json` (JSON or YAML; `-` for stdin).
    #[arg(long, value_name = "DUMP")]
    pub from_file: PathBuf,
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
    let text = read_input(&args.from_file)?;
    let (records, problems) = match records_from_text(&text, args.decode.limits()) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("error: {}: {error}", args.from_file.display());
            return Ok(EXIT_BAD_INPUT);
        }
    };
    for problem in &problems {
        eprintln!(
            "warning: {}: {} (Helm skips this record)",
            problem.object, problem.error
        );
    }
    if records.is_empty() {
        eprintln!(
            "error: {}: no Helm release records found (expected the output of `kubectl get secrets,configmaps -A -l owner=helm -o json`)",
            args.from_file.display()
        );
        return Ok(EXIT_BAD_INPUT);
    }
    let stuck_after = i64::try_from(args.stuck_after.as_secs()).unwrap_or(i64::MAX);
    let releases = report(&records, now_secs(args.now.as_ref()), stuck_after);
    print_reports(&releases, args.output)?;
    Ok(if releases.iter().any(ReleaseReport::is_broken) {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    })
}

/// Prints reports as a table with a summary line, or as a JSON array.
pub fn print_reports(releases: &[ReleaseReport], output: Output) -> anyhow::Result<()> {
    if output == Output::Json {
        println!("{}", serde_json::to_string_pretty(releases)?);
        return Ok(());
    }
    let headers = [
        "NAMESPACE",
        "RELEASE",
        "DRIVER",
        "STATE",
        "REVISION",
        "STATUS",
        "CHART",
        "ANOMALIES",
        "HINT",
    ];
    let rows: Vec<[String; 9]> = releases
        .iter()
        .map(|r| {
            let state = if r.stuck {
                format!("{} (stuck)", r.state)
            } else {
                r.state.to_string()
            };
            [
                r.namespace.clone(),
                r.release.clone(),
                r.driver.to_string(),
                state,
                r.revision.map_or_else(|| "-".into(), |v| v.to_string()),
                r.status.map_or_else(|| "-".into(), |s| s.to_string()),
                r.chart.clone().unwrap_or_else(|| "-".into()),
                if r.anomalies.is_empty() {
                    "-".into()
                } else {
                    r.anomalies.join(",")
                },
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
            .map(|(i, (cell, width))| {
                if i + 1 == cells.len() {
                    cell.to_string()
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        println!("{}", padded.join("  "));
    };
    line(&headers);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
    let broken = releases.iter().filter(|r| r.is_broken()).count();
    println!(
        "\n{} releases, {} healthy or uninstalled, {broken} need attention",
        releases.len(),
        releases.len() - broken
    );
    Ok(())
}
