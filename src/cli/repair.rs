//! `helm-guard repair`: put a broken release back into a state Helm can work with, using only
//! edits Helm itself makes. Prints the plan; changes nothing without `--apply`. Runs as the user
//! (their kubeconfig), not as the guard: the guard checks these edits like anyone's.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::Value;

use super::ClusterArgs;
use super::{Applied, DecodeArgs, Exit, Output, Writes, count, dry_run_then_write, now_secs, print_data};
use crate::cluster::listing::list_records;
use crate::cluster::writers::pending_writers;
use crate::release::Driver;
use crate::release::record::DecodedRecord;
use crate::release::repair::{RepairPlan, RepairStep, edited_object, plan};
use crate::release::scan::{LatestWriters, by_release, collect_records};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "What it changes, only as Helm itself does (payload status and status label together):\n  - a pending-install/upgrade/rollback revision no one will finish: marked failed (as `helm set-status`), so the next upgrade or rollback runs. No one will: its writer's pod is gone (at any age), or, its writer not known to run in a pod, it is older than --stuck-after; one whose writer's pod still runs is left alone unless --force;\n  - a status label that disagrees with the payload: the label set from the payload;\n  - several deployed revisions: all but the newest marked superseded, as Helm does on upgrade.\nAn orphaned-superseded release needs its chart: repair prints the `helm upgrade`/`helm rollback` that fixes it and changes nothing.\n\nExamples:\n  helm-guard repair web -n shop              what it would change (changes nothing)\n  helm-guard repair web -n shop --apply      make the edits\n  helm-guard scan --repair-plan              the repair command for every release that needs one\n\nExit status: 0 nothing was broken or every edit was made, 1 a release still needs someone (a plan not yet applied with --apply, a refusal: Helm may still be running, or a state only an operator can fix), 2 bad input or the release not found, 3 the cluster could not be read."
)]
pub(crate) struct RepairArgs {
    /// The release to repair.
    pub release: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Make the edits. Without it the plan is printed and nothing changes.
    #[arg(long)]
    pub apply: bool,
    /// A pending revision unchanged for longer than this is stuck; a younger one is left alone.
    /// Where the guard knows the revision's writer ran in a pod, that pod decides instead: gone,
    /// the revision is stuck at any age; still running, it is not.
    #[arg(long, env = "HELM_GUARD_STUCK_AFTER", default_value = "15m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    /// Mark a pending revision failed whatever its age and whether its writer runs (you know
    /// Helm is no longer working on it).
    #[arg(long)]
    pub force: bool,
    /// The guard's namespace, where it remembers who wrote each revision.
    #[arg(long, env = "HELM_GUARD_NAMESPACE", default_value = crate::recycle_bin::DEFAULT_NAMESPACE)]
    pub guard_namespace: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format: the plan for people, or as JSON or YAML.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Runs `helm-guard repair`.
pub(super) async fn run(args: &RepairArgs) -> anyhow::Result<Exit> {
    let (client, namespace) = match args.cluster.connect_in(args.namespace.as_deref()).await {
        Ok(connected) => connected,
        Err(code) => return Ok(code),
    };
    let objects = list_records(&client, Some(&namespace), Some(&args.release)).await?;
    let (records, problems) = collect_records(&objects, args.decode.limits());
    for problem in &problems {
        eprintln!("warning: {}: {} (Helm skips this record)", problem.object, problem.error);
    }
    if records.is_empty() {
        eprintln!(
            "error: release {} not found in namespace {namespace} (no Secret or ConfigMap labelled owner=helm,name={})",
            args.release, args.release
        );
        return Ok(Exit::BadInput);
    }
    let stuck_after = i64::try_from(args.stuck_after.as_secs()).unwrap_or(i64::MAX);
    let now = now_secs(None);
    // --force: whatever its age and its writer, a pending revision is marked failed.
    let (stuck_after, writers) = match args.force {
        true => (0, LatestWriters::new()),
        false => (stuck_after, pending_writers(&client, &args.guard_namespace, &objects).await),
    };
    let plans: Vec<RepairPlan> = by_release(&records)
        .iter()
        .map(|(key, records)| {
            plan(key, records, now, stuck_after, writers.get(&(key.namespace.clone(), key.release.clone())))
        })
        .collect();
    let refused = plans.iter().any(|p| p.refused.is_some());
    let mut applied = false;
    if args.apply && !refused && plans.iter().any(|p| !p.steps.is_empty()) {
        let edits = edits(&client, &plans, &records, &objects, args)?;
        let name = |(_, object): &(Api<DynamicObject>, DynamicObject)| {
            object.metadata.name.clone().unwrap_or_default()
        };
        let replace = async |(api, object): &(Api<DynamicObject>, DynamicObject), dry_run: bool| {
            let params = PostParams { dry_run, ..PostParams::default() };
            api.replace(object.metadata.name.as_deref().unwrap_or_default(), &params, object).await?;
            anyhow::Ok(())
        };
        dry_run_then_write(&edits, Writes { doing: "updating", done: "changed" }, name, replace).await?;
        applied = true;
    }
    let outcomes: Vec<Applied<RepairPlan>> =
        plans.into_iter().map(|plan| Applied { applied: applied && !plan.steps.is_empty(), plan }).collect();
    if !print_data(&outcomes, args.output)? {
        for outcome in &outcomes {
            print_plan(&outcome.plan)?;
        }
        let steps: usize = outcomes.iter().map(|o| o.plan.steps.len()).sum();
        if refused {
            outln!("Nothing changed.")?;
        } else if steps == 0 {
            outln!("Nothing to change.")?;
        } else if applied {
            outln!("Applied {}.", count(steps, "edit"))?;
        } else {
            outln!(
                "Nothing changed: run again with --apply to make {}.",
                if steps == 1 { "this edit" } else { "these edits" }
            )?;
        }
    }
    // One contract with scan: 1 when a release still needs someone (refused, edits not made, or
    // a state only an operator can fix), 0 when nothing was broken or every edit was made.
    let left_to_do = outcomes.iter().any(|o| {
        o.plan.refused.is_some()
            || (!o.applied && !o.plan.steps.is_empty())
            || (o.plan.steps.is_empty() && !o.plan.advice.is_empty())
    });
    Ok(if left_to_do { Exit::Findings } else { Exit::Ok })
}

fn print_plan(plan: &RepairPlan) -> anyhow::Result<()> {
    outln!("release {}/{}: {}", plan.namespace, plan.release, plan.state)?;
    if let Some(why) = &plan.refused {
        outln!("  refused: {why}")?;
    }
    for step in &plan.steps {
        let change = if step.label_only {
            format!("status label -> {}", step.to)
        } else {
            format!("{} -> {} (payload and label)", step.from, step.to)
        };
        outln!("  revision {}  {}  {change}: {}", step.revision, step.object, step.why)?;
    }
    for advice in &plan.advice {
        outln!("  {advice}")?;
    }
    Ok(())
}

/// Each step as the object to write: the listed object (its resourceVersion kept, so that a
/// record changed meanwhile fails the write) with the new payload and labels, as Helm's storage
/// `Update` writes them.
fn edits(
    client: &kube::Client,
    plans: &[RepairPlan],
    records: &[DecodedRecord],
    objects: &[Value],
    args: &RepairArgs,
) -> anyhow::Result<Vec<(Api<DynamicObject>, DynamicObject)>> {
    let mut edits = Vec::new();
    for step in plans.iter().flat_map(|p| &p.steps) {
        let record = records
            .iter()
            .find(|r| r.record.object_name == step.object)
            .context("a planned record went missing")?;
        let object = objects
            .iter()
            .find(|o| {
                o.pointer("/metadata/name").and_then(Value::as_str) == Some(step.object.as_str())
                    && o.pointer("/metadata/namespace").and_then(Value::as_str)
                        == Some(record.record.id.key.namespace.as_str())
                    && o.get("kind").and_then(Value::as_str) == Some(record.record.id.key.driver.kind())
            })
            .context("a planned object went missing")?;
        edits.push(edit(client, step, record, object.clone(), args)?);
    }
    Ok(edits)
}

fn edit(
    client: &kube::Client,
    step: &RepairStep,
    record: &DecodedRecord,
    object: Value,
    args: &RepairArgs,
) -> anyhow::Result<(Api<DynamicObject>, DynamicObject)> {
    let edited = edited_object(object, record, step, args.decode.limits(), now_secs(None))
        .map_err(|e| anyhow::anyhow!("{}: {e}", step.object))?;
    let resource = match record.record.id.key.driver {
        Driver::Secret => ApiResource::erase::<Secret>(&()),
        Driver::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
    };
    let dynamic: DynamicObject = serde_json::from_value(edited)?;
    Ok((Api::namespaced_with(client.clone(), &record.record.id.key.namespace, &resource), dynamic))
}
