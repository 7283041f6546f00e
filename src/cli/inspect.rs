//! `helm-guard inspect`: decode records and print what Helm would read.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;

use super::ClusterArgs;
use super::{
    ClusterUnavailable, DecodeArgs, Exit, NoInput, Output, count, exit_code_of, input_name, input_path,
    print_data, read_input,
};
use crate::cluster::connect::connect;
use crate::cluster::listing::list_records;
use crate::release::objects::{InputObject, ReviewSide, parse_inputs};
use crate::release::record::{LABEL_OWNER, describe};
use crate::release::scan::collect_records;
use crate::release::{DecodedRecord, Summary};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  helm-guard inspect -n demo web                 every revision of release web, from the cluster\n  helm-guard inspect -n demo web --revision 3    one revision\n  kubectl get secret -n demo sh.helm.release.v1.web.v3 -o yaml | helm-guard inspect\n  helm-guard inspect review.json                 the old and the new object of a captured AdmissionReview\n\nExit status: 0 every record read as Helm reads it, 2 bad input (a missing file, input that is no record, a record Helm cannot read), 3 the cluster could not be read."
)]
pub(crate) struct InspectArgs {
    /// A file of records: a Secret or ConfigMap, a List, a dump, or a captured AdmissionReview
    /// (its old and new objects are both shown), as JSON or YAML; `-` for standard input, which
    /// is also read when piped and nothing is named. With -n: the name of a release to read
    /// from the cluster.
    #[arg(value_name = "FILE | RELEASE")]
    pub target: Option<String>,
    /// Read the release named by the argument from this namespace of the cluster.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Only this revision.
    #[arg(long)]
    pub revision: Option<u32>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format: a summary per record, or a JSON or YAML array.
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
    /// `old` or `new` for the objects of a captured AdmissionReview.
    #[serde(skip_serializing_if = "Option::is_none")]
    side: Option<&'static str>,
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

const USAGE: &str = "helm-guard inspect [OPTIONS] <FILE>  |  helm-guard inspect -n <NAMESPACE> <RELEASE>";

pub(super) async fn run(args: &InspectArgs) -> anyhow::Result<Exit> {
    let (source, inputs) = match read_inputs(args).await {
        Ok(read) => read,
        Err(error) => {
            eprintln!("error: {error:#}");
            return Ok(exit_code_of(&error));
        }
    };
    let mut records = Vec::new();
    let mut problems = Vec::new();
    for input in &inputs {
        let (found, trouble) = collect_records(std::slice::from_ref(&input.object), args.decode.limits());
        records.extend(found.into_iter().map(|record| (input.side, record)));
        problems.extend(trouble);
    }
    if let Some(revision) = args.revision {
        records.retain(|(_, r)| r.record.id.revision == revision);
    }
    for problem in &problems {
        eprintln!("error: {}: {}", problem.object, problem.error);
    }
    if records.is_empty() && problems.is_empty() {
        eprintln!("error: {source}: {}", nothing_found(args, &inputs));
        return Ok(Exit::BadInput);
    }
    let wanted = args.manifest || args.values;
    let decoded: Vec<Inspected> = records
        .iter()
        .filter_map(|(side, r)| {
            let payload = r.payload.as_ref().ok()?;
            let content = if wanted { content(r, args.decode.limits()) } else { Content::default() };
            Some(Inspected {
                summary: Summary::new(&r.record, payload),
                object: r.record.describe(),
                side: side.map(|side| match side {
                    ReviewSide::Old => "old",
                    ReviewSide::New => "new",
                }),
                manifest: content.manifest.filter(|_| args.manifest),
                values: content.config.filter(|_| args.values),
            })
        })
        .collect();
    if !print_data(&decoded, args.output)? {
        for item in decoded {
            outln!("{}", render(&item).trim_end_matches('\n'))?;
            if args.values {
                let values = item.values.unwrap_or(serde_json::Value::Null);
                outln!("--- values\n{}", serde_saphyr::to_string(&values)?.trim_end())?;
            }
            if args.manifest {
                outln!("--- manifest\n{}", item.manifest.as_deref().unwrap_or("").trim_end())?;
            }
        }
    }
    Ok(if problems.is_empty() { Exit::Ok } else { Exit::BadInput })
}

/// The objects to inspect, from the file (or stdin) or, with `-n`, from the cluster; and where
/// they came from, for messages.
async fn read_inputs(args: &InspectArgs) -> anyhow::Result<(String, Vec<InputObject>)> {
    let Some(namespace) = &args.namespace else {
        anyhow::ensure!(
            args.cluster.kubeconfig.is_none() && args.cluster.context.is_none(),
            "--kubeconfig and --context read a release from the cluster: name its namespace with -n\n\nUsage: {USAGE}"
        );
        let missing = NoInput { what: "FILE", usage: USAGE };
        let path = input_path(args.target.as_deref().map(Path::new), missing)?;
        if path != Path::new("-") && !path.exists() {
            anyhow::bail!(
                "{}: no such file (to read a release from the cluster, name its namespace: helm-guard inspect -n NAMESPACE {})",
                path.display(),
                path.display()
            );
        }
        let inputs = parse_inputs(&read_input(path)?).with_context(|| input_name(path))?;
        return Ok((input_name(path), inputs));
    };
    let Some(release) = &args.target else {
        anyhow::bail!("name the release to read from namespace {namespace}\n\nUsage: {USAGE}");
    };
    let objects = async {
        let client = connect(&args.cluster.access()).await?;
        anyhow::Ok(list_records(&client, Some(namespace), Some(release)).await?)
    }
    .await
    .map_err(|error| ClusterUnavailable(error.context("reading the cluster")))?;
    let source = format!("release {release} in namespace {namespace}");
    Ok((source, objects.into_iter().map(|object| InputObject { object, side: None }).collect()))
}

/// Why there is nothing to show: what was read instead, and why it is not a record.
fn nothing_found(args: &InspectArgs, inputs: &[InputObject]) -> String {
    // The records exist, only not that revision: say which each release has.
    if let (Some(revision), false) = (args.revision, inputs.is_empty()) {
        let mut releases: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
        for input in inputs {
            let text = |pointer: &str| input.object.pointer(pointer).and_then(Value::as_str);
            let (Some(release), Some(version)) =
                (text("/metadata/labels/name"), text("/metadata/labels/version"))
            else {
                continue;
            };
            let Ok(version) = version.parse() else { continue };
            let name = match text("/metadata/namespace") {
                Some(namespace) => format!("{namespace}/{release}"),
                None => release.to_owned(),
            };
            releases.entry(name).or_default().push(version);
        }
        if releases.is_empty() {
            return format!("no record of revision {revision}");
        }
        let known: Vec<String> = releases
            .iter_mut()
            .map(|(release, revisions)| {
                revisions.sort_unstable();
                revisions.dedup();
                let list = revisions.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
                format!(
                    "{release} has {} {list}",
                    if revisions.len() == 1 { "revision" } else { "revisions" }
                )
            })
            .collect();
        return format!("no record of revision {revision} ({})", known.join("; "));
    }
    if args.namespace.is_some() {
        return "not found (no Secret or ConfigMap there is labelled owner=helm with this name)".to_owned();
    }
    const SHOWN: usize = 5;
    let mut found: Vec<String> = inputs.iter().take(SHOWN).map(|i| why_not_a_record(&i.object)).collect();
    if inputs.len() > SHOWN {
        found.push(format!("and {} more", inputs.len() - SHOWN));
    }
    format!(
        "no Helm release records (Secrets or ConfigMaps labelled owner=helm and name=<release>); found {}{}",
        count(inputs.len(), "object"),
        if found.is_empty() { String::new() } else { format!(": {}", found.join("; ")) }
    )
}

fn why_not_a_record(object: &Value) -> String {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    let label = |key: &str| object.pointer(&format!("/metadata/labels/{key}")).and_then(Value::as_str);
    let why = if !matches!(kind, "Secret" | "ConfigMap") {
        "not a Secret or ConfigMap".to_owned()
    } else if label(LABEL_OWNER) != Some("helm") {
        match label(LABEL_OWNER) {
            Some(owner) => format!("labelled owner={owner}, not owner=helm"),
            None => "no owner=helm label".to_owned(),
        }
    } else {
        "no `name` label".to_owned()
    };
    let secret_type = object.get("type").and_then(Value::as_str).map(|t| format!(" of type {t}"));
    format!("{}{} ({why})", describe(object), secret_type.unwrap_or_default())
}

fn render(item: &Inspected) -> String {
    let s = &item.summary;
    let mut out = match item.side {
        Some(side) => format!("{} ({side} object)\n", item.object),
        None => format!("{}\n", item.object),
    };
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
