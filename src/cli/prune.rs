//! `helm-guard prune`: cut a release's history to its newest revisions, as Helm's
//! `--history-max` does on each upgrade, for a history a loop grew (`scan`'s `churn`). Prints the
//! plan; changes nothing without `--apply`. Runs as the user: each deletion goes through the guard
//! like Helm's own pruning, the oldest first, each first as a server-side dry run.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Preconditions};

use super::{Applied, ClusterArgs, DecodeArgs, Exit, Output, Writes, count, dry_run_then_write, print_data};
use crate::cluster::listing::list_records;
use crate::release::prune::{PrunePlan, PruneStep, plan_prune};
use crate::release::scan::{by_release, collect_records};
use crate::release::{Driver, ReleaseKey};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "What it deletes: the release's oldest revisions (Secrets or ConfigMaps labelled owner=helm,name=RELEASE), the oldest first, until --keep are left, as Helm's --history-max pruning does. Never the latest revision, never the last deployed one (both are kept beyond --keep when older), never a record Helm cannot read. Each deletion is judged by the guard as Helm's pruning is.\n\nExamples:\n  helm-guard prune traefik -n kube-system --keep 10            what it would delete (changes nothing)\n  helm-guard prune traefik -n kube-system --keep 10 --apply    delete it\n  helm-guard prune --all -n kube-system --keep 10              every release of the namespace\n\nExit status: 0 nothing to delete or every deletion made, 1 deletions planned and not made (without --apply), 2 bad input or the release not found, 3 the cluster failed (what was done is said)."
)]
pub(crate) struct PruneArgs {
    /// The release to prune (or --all).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub release: Option<String>,
    /// Every release of the namespace.
    #[arg(long)]
    pub all: bool,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// How many of the newest revisions to keep (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub keep: u32,
    /// Delete the records. Without it the plan is printed and nothing changes.
    #[arg(long)]
    pub apply: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format: the plan for people, or as JSON or YAML.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Runs `helm-guard prune`.
pub(super) async fn run(args: &PruneArgs) -> anyhow::Result<Exit> {
    let (client, namespace) = match args.cluster.connect_in(args.namespace.as_deref()).await {
        Ok(connected) => connected,
        Err(code) => return Ok(code),
    };
    let objects = list_records(&client, Some(&namespace), args.release.as_deref()).await?;
    let (records, problems) = collect_records(&objects, args.decode.limits());
    for problem in &problems {
        eprintln!("warning: {}: {} (Helm skips this record; prune leaves it)", problem.object, problem.error);
    }
    if records.is_empty() {
        match &args.release {
            Some(release) => eprintln!(
                "error: release {release} not found in namespace {namespace} (no Secret or ConfigMap labelled owner=helm,name={release})"
            ),
            None => eprintln!("error: no Helm release in namespace {namespace}"),
        }
        return Ok(Exit::BadInput);
    }
    let keep = usize::try_from(args.keep).unwrap_or(usize::MAX);
    let plans: Vec<(ReleaseKey, PrunePlan)> = by_release(&records)
        .into_iter()
        .map(|(key, records)| (key.clone(), plan_prune(key, &records, keep)))
        .collect();
    let steps: Vec<(&ReleaseKey, &PruneStep)> =
        plans.iter().flat_map(|(key, plan)| plan.steps.iter().map(move |step| (key, step))).collect();
    let applied = args.apply && !steps.is_empty();
    if applied {
        let name = |(key, step): &(&ReleaseKey, &PruneStep)| {
            format!("{} {}/{}", key.driver.kind(), key.namespace, step.object)
        };
        let delete = async |(key, step): &(&ReleaseKey, &PruneStep), dry_run: bool| {
            let params = DeleteParams {
                dry_run,
                preconditions: Some(Preconditions { uid: step.uid.clone(), resource_version: None }),
                ..DeleteParams::default()
            };
            match key.driver {
                Driver::Secret => {
                    Api::<Secret>::namespaced(client.clone(), &key.namespace)
                        .delete(&step.object, &params)
                        .await?;
                }
                Driver::ConfigMap => {
                    Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
                        .delete(&step.object, &params)
                        .await?;
                }
            }
            anyhow::Ok(())
        };
        dry_run_then_write(&steps, Writes { doing: "deleting", done: "deleted" }, name, delete).await?;
    }
    let outcomes: Vec<Applied<&PrunePlan>> =
        plans.iter().map(|(_, plan)| Applied { applied: applied && !plan.steps.is_empty(), plan }).collect();
    if !print_data(&outcomes, args.output)? {
        for (_, plan) in &plans {
            let kept: Vec<String> = plan.kept.iter().map(u32::to_string).collect();
            outln!("{}/{}: keep revisions {}", plan.namespace, plan.release, kept.join(", "))?;
            for step in &plan.steps {
                outln!("  delete {} (revision {}, {})", step.object, step.revision, step.status)?;
            }
        }
        if steps.is_empty() {
            outln!("Nothing to delete.")?;
        } else if applied {
            outln!("Deleted {}.", count(steps.len(), "record"))?;
        } else {
            outln!("Nothing changed: run again with --apply to delete {}.", count(steps.len(), "record"))?;
        }
    }
    Ok(if steps.is_empty() || applied { Exit::Ok } else { Exit::Findings })
}
