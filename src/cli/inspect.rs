//! `helm-guard inspect`: decode records and print what Helm would read.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use super::{DecodeArgs, EXIT_BAD_INPUT, EXIT_OK, Output, read_input};
use crate::release::objects::parse_objects;
use crate::release::scan::collect_records;
use crate::release::{DecodedRecord, Summary};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A file holding the record(s) as JSON or YAML; `-` for standard input.
    #[arg(default_value = "-")]
    pub file: PathBuf,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// Print the rendered manifest of each record.
    #[arg(long)]
    pub manifest: bool,
    /// Print the user-supplied values of each record.
    #[arg(long)]
    pub values: bool,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

#[derive(Serialize)]
struct Inspected {
    #[serde(flatten)]
    summary: Summary,
    object: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<serde_json::Value>,
}

/// The large parts of a release, read only when asked for (verdicts never hold them).
#[derive(Default, serde::Deserialize)]
struct Content {
    #[serde(default)]
    manifest: Option<String>,
    #[serde(default)]
    config: Option<serde_json::Value>,
}

fn content(record: &DecodedRecord, limits: crate::release::DecodeLimits) -> Content {
    record
        .record
        .decode_json(limits)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .unwrap_or_default()
}

pub fn run(args: &InspectArgs) -> anyhow::Result<u8> {
    let text = read_input(&args.file)?;
    let objects = match parse_objects(&text) {
        Ok(objects) => objects,
        Err(error) => {
            eprintln!("error: {}: {error}", args.file.display());
            return Ok(EXIT_BAD_INPUT);
        }
    };
    let (records, problems) = collect_records(&objects, args.decode.limits());
    for problem in &problems {
        eprintln!("error: {}: {}", problem.object, problem.error);
    }
    if records.is_empty() && problems.is_empty() {
        eprintln!(
            "error: {}: no Helm release records (Secrets of type helm.sh/release.v1, or ConfigMaps labelled owner=helm)",
            args.file.display()
        );
        return Ok(EXIT_BAD_INPUT);
    }
    let wanted = args.manifest || args.values;
    let decoded: Vec<(String, Summary, Content)> = records
        .iter()
        .filter_map(|r| {
            let payload = r.payload.as_ref().ok()?;
            let content = if wanted { content(r, args.decode.limits()) } else { Content::default() };
            Some((r.record.describe(), Summary::new(&r.record, payload), content))
        })
        .collect();
    match args.output {
        Output::Json => {
            let items: Vec<Inspected> = decoded
                .into_iter()
                .map(|(object, summary, content)| Inspected {
                    summary,
                    object,
                    manifest: content.manifest.filter(|_| args.manifest),
                    values: content.config.filter(|_| args.values),
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&items)?)?;
        }
        Output::Text => {
            for (object, summary, content) in decoded {
                outln!("{}", render(&object, &summary).trim_end_matches('\n'))?;
                if args.values {
                    let values = content.config.unwrap_or(serde_json::Value::Null);
                    outln!("--- values\n{}", serde_saphyr::to_string(&values)?.trim_end())?;
                }
                if args.manifest {
                    outln!("--- manifest\n{}", content.manifest.as_deref().unwrap_or("").trim_end())?;
                }
            }
        }
    }
    Ok(if problems.is_empty() { EXIT_OK } else { EXIT_BAD_INPUT })
}

fn render(object: &str, s: &Summary) -> String {
    let mut out = format!("{object}\n");
    let mut line = |key: &str, value: &str| {
        let _ = writeln!(out, "  {key:<15} {value}");
    };
    line("release:", &format!("{}/{} ({})", s.namespace, s.release, s.driver));
    line("revision:", &s.revision.to_string());
    match &s.status_label {
        Some(label) => line("status:", &format!("{} (label says {label})", s.status)),
        None => line("status:", s.status.as_str()),
    }
    let chart = s.chart_ref().unwrap_or_else(|| "-".into());
    match &s.app_version {
        Some(app) => line("chart:", &format!("{chart} (app {app})")),
        None => line("chart:", &chart),
    }
    line("first deployed:", s.first_deployed.as_deref().unwrap_or("-"));
    line("last deployed:", s.last_deployed.as_deref().unwrap_or("-"));
    line("description:", s.description.as_deref().unwrap_or("-"));
    if !s.identity_agrees {
        line("identity:", "the name/version labels disagree with the object name (a hand edit?)");
    }
    out
}
