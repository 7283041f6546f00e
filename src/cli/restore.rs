//! `helm-guard restore`: bring back records from the guard's recycle bin. Prints what the bin
//! holds for the release and the history Helm would show afterwards; changes nothing without
//! `--apply`. Runs as the user (their kubeconfig): the creates go through the API server and
//! the guard's own webhook like anyone's, a server-side dry run of every one first, and never
//! over an object that exists.

use std::time::Duration;

use super::{
    Applied, ClusterArgs, DecodeArgs, Exit, Output, Writes, count, dry_run_then_write, now_secs, print_data,
    table,
};
use crate::cluster::listing::list_records;
use crate::recycle_bin::api::read_bin;
use crate::recycle_bin::restore::{RestorePlan, RestoreStep, StepAction, plan};
use crate::release::scan::collect_records;
use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The bin holds a copy of each record whose deletion only an override let through (the break-glass annotation, an exemption, warn or audit mode, a record Helm cannot read), for --recycle-ttl (7 days by default). Restore recreates each record as it was (name, labels, type, data; not the break-glass annotation), the newest copy of each, never over an object that exists now, each carrying helm-guard.io/restored-from, which the guard lets in only for a break-glass holder (cluster-admin, or the ClusterRole helm-guard-break-glass bound). The copies stay in the bin until they expire.\n\nExamples:\n  helm-guard restore web -n shop                     what would come back, and `helm history` after\n  helm-guard restore web -n shop --revision 3 --apply\n  helm-guard scan --recycle-bin                      what the bin holds\n\nExit status: 0 planned or restored, 1 nothing to restore (every copy's object exists, or none is readable), 2 bad input or no copy of the release in the bin, 3 the cluster could not be read."
)]
pub(crate) struct RestoreArgs {
    /// The release to restore.
    pub release: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Only this revision (repeatable; default: every revision the bin holds).
    #[arg(long = "revision", value_name = "N")]
    pub revisions: Vec<u32>,
    /// Create the records. Without it the plan is printed and nothing changes.
    #[arg(long)]
    pub apply: bool,
    #[command(flatten)]
    pub bin: super::BinArgs,
    /// A pending revision unchanged for longer than this is stuck (for the state shown).
    #[arg(long, env = "HELM_GUARD_STUCK_AFTER", default_value = "15m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format: the plan for people, or as JSON or YAML.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Runs `helm-guard restore`.
pub(super) async fn run(args: &RestoreArgs) -> anyhow::Result<Exit> {
    let (client, namespace) = match args.cluster.connect_in(args.namespace.as_deref()).await {
        Ok(connected) => connected,
        Err(code) => return Ok(code),
    };
    let bin =
        read_bin(&client, args.bin.namespace(), &namespace, &args.release).await.with_context(|| {
            format!(
                "reading the recycle bin in namespace {} (the guard's namespace: --guard-namespace)",
                args.bin.namespace()
            )
        })?;
    let mut copies = Vec::new();
    for copy in bin {
        match copy {
            Ok(copy) => copies.push(copy),
            Err(problem) => eprintln!("warning: {problem} (skipped)"),
        }
    }
    if copies.is_empty() {
        eprintln!(
            "error: the recycle bin in namespace {} holds no copy of release {namespace}/{}",
            args.bin.namespace(),
            args.release
        );
        return Ok(Exit::BadInput);
    }
    let objects = list_records(&client, Some(&namespace), Some(&args.release)).await?;
    let (live, _) = collect_records(&objects, args.decode.limits());
    let stuck_after = i64::try_from(args.stuck_after.as_secs()).unwrap_or(i64::MAX);
    let plans = plan(&copies, &live, &args.revisions, args.decode.limits(), now_secs(None), stuck_after);
    if plans.is_empty() {
        eprintln!(
            "error: the recycle bin holds no copy of revision {} of release {namespace}/{}",
            args.revisions.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            args.release
        );
        return Ok(Exit::BadInput);
    }
    let steps: Vec<RestoreStep> = plans.iter().flat_map(RestorePlan::to_restore).cloned().collect();
    let mut applied = false;
    if args.apply && !steps.is_empty() {
        let name = |step: &RestoreStep| format!("{} {namespace}/{}", step.kind, step.name);
        let write =
            async |step: &RestoreStep, dry_run: bool| create(&client, &namespace, step, dry_run).await;
        dry_run_then_write(&steps, Writes { doing: "creating", done: "created" }, name, write).await?;
        applied = true;
    }
    let outcomes: Vec<Applied<RestorePlan>> = plans
        .into_iter()
        .map(|plan| Applied { applied: applied && plan.to_restore().next().is_some(), plan })
        .collect();
    if !print_data(&outcomes, args.output)? {
        for outcome in &outcomes {
            print_plan(&outcome.plan)?;
        }
        if steps.is_empty() {
            outln!("Nothing to restore.")?;
        } else if applied {
            outln!("Restored {}.", count(steps.len(), "record"))?;
        } else {
            outln!(
                "Nothing changed: run again with --apply to restore {}.",
                if steps.len() == 1 { "this record" } else { "these records" }
            )?;
        }
    }
    Ok(if steps.is_empty() { Exit::Findings } else { Exit::Ok })
}

/// Creates one record as it was; a dry run only asks whether the API server (and the guard)
/// would take it.
async fn create(
    client: &kube::Client,
    namespace: &str,
    step: &RestoreStep,
    dry_run: bool,
) -> anyhow::Result<()> {
    let object = step.object.clone().context("no object to create")?;
    let params = PostParams { dry_run, field_manager: Some("helm-guard-restore".into()) };
    match step.kind.as_str() {
        "Secret" => {
            let secret: Secret = serde_json::from_value(object)?;
            Api::<Secret>::namespaced(client.clone(), namespace).create(&params, &secret).await?;
        }
        _ => {
            let configmap: ConfigMap = serde_json::from_value(object)?;
            Api::<ConfigMap>::namespaced(client.clone(), namespace).create(&params, &configmap).await?;
        }
    }
    Ok(())
}

fn print_plan(plan: &RestorePlan) -> anyhow::Result<()> {
    outln!("Release {}/{} ({}): copies in the recycle bin", plan.namespace, plan.release, plan.driver)?;
    for step in &plan.steps {
        let kept =
            jiff::Timestamp::from_second(step.kept_at).map_or_else(|_| "?".to_owned(), |t| t.to_string());
        let status = step.status.map_or("undecodable", |s| s.as_str());
        let what = match step.action {
            StepAction::Restore => "restore".to_owned(),
            StepAction::Exists => "skip: an object of that name exists now".to_owned(),
            StepAction::Older => "skip: a newer copy of it is restored".to_owned(),
            StepAction::Unreadable => format!("skip: {}", step.problem.as_deref().unwrap_or("unreadable")),
        };
        outln!(
            "  revision {} ({status}) {} {}, deleted {kept} by {} ({}): {what}",
            step.revision,
            step.kind,
            step.name,
            step.requester,
            step.reason
        )?;
    }
    outln!("`helm history {} -n {}` after the restore:", plan.release, plan.namespace)?;
    let rows: Vec<Vec<String>> = plan
        .history
        .iter()
        .map(|row| {
            vec![
                format!("{}{}", row.revision, if row.restored { "*" } else { "" }),
                row.status.to_string(),
                row.chart.clone().unwrap_or_default(),
                row.app_version.clone().unwrap_or_default(),
                row.description.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["REVISION", "STATUS", "CHART", "APP VERSION", "DESCRIPTION"], &rows)?;
    outln!("(* restored; the release is then {})", plan.state_after.as_deref().unwrap_or("unknown"))?;
    Ok(())
}
