//! `helm-guard forget`: delete a release's whole history and keep its resources (moving it to
//! Argo CD, or out of Helm's hands), every record kept in the guard's recycle bin so that
//! `restore` brings the history back. Prints the plan; changes nothing without `--apply`. Runs
//! as the user (their kubeconfig): each record is marked with the break-glass annotation, then
//! deleted through the guard like anyone's deletion, and its copy found in the bin before the
//! next one is touched.

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use super::{Applied, ClusterArgs, DecodeArgs, Exit, Output, count, print_data, table};
use crate::cluster::listing::list_records;
use crate::policy::BREAK_GLASS_ANNOTATION;
use crate::recycle_bin::api::read_bin;
use crate::release::forget::{ForgetPlan, ForgetStep, plan};
use crate::release::scan::collect_records;

/// The break-glass reason each record carries into its deletion and the guard's ledger.
const REASON: &str = "helm-guard forget: the release's history is deleted, its resources kept";

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Forgetting deletes every record of the release (Secrets or ConfigMaps labelled owner=helm,name=RELEASE) and nothing else: the release's resources stay in the cluster, and Helm no longer knows them (`helm ls` does not list the release). For moving a release to Argo CD, which never writes records, or out of Helm's hands.\n\nThe records go from the oldest up, the latest last (Helm's own purge order): stopped anywhere, the release is left at its latest revision with a shorter history. Each is first annotated helm-guard.io/allow-delete (which counts only for a break-glass holder: `kubectl auth can-i breakglass releases.helm-guard.io/RELEASE -n NAMESPACE` says whether you are one; cluster-admin is, and the ClusterRole helm-guard-break-glass grants it), deleted through the guard, and its copy found in the guard's recycle bin (--guard-namespace) before the next is touched: no record goes without a copy. `helm-guard restore RELEASE -n NAMESPACE --apply` brings the history back as it was.\n\nExamples:\n  helm-guard forget web -n shop            # what would be deleted\n  helm-guard forget web -n shop --apply    # delete it, every record kept in the bin\n  helm-guard restore web -n shop --apply   # changed your mind: the history back\n\nExit status: 0 planned or forgotten, 2 bad input or the release not found, 3 a failure (the cluster, a refusal, no copy in the bin: what was done is said)."
)]
pub(crate) struct ForgetArgs {
    /// The release to forget.
    pub release: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Delete the records. Without it the plan is printed and nothing changes.
    #[arg(long)]
    pub apply: bool,
    #[command(flatten)]
    pub bin: super::BinArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format: the plan for people, or as JSON or YAML.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Runs `helm-guard forget`.
pub(super) async fn run(args: &ForgetArgs) -> anyhow::Result<Exit> {
    let (client, namespace) = match args.cluster.connect_in(args.namespace.as_deref()).await {
        Ok(connected) => connected,
        Err(code) => return Ok(code),
    };
    let objects = list_records(&client, Some(&namespace), Some(&args.release)).await?;
    let (records, _) = collect_records(&objects, args.decode.limits());
    let plans = plan(&records);
    if plans.is_empty() {
        eprintln!(
            "error: release {} not found in namespace {namespace} (no Secret or ConfigMap labelled owner=helm,name={})",
            args.release, args.release
        );
        return Ok(Exit::BadInput);
    }
    let mut deleted = 0;
    if args.apply {
        // The bin must be readable before anything is deleted: every copy is checked there.
        read_bin(&client, args.bin.namespace(), &namespace, &args.release).await.with_context(|| {
            format!(
                "reading the recycle bin in namespace {} (the guard's namespace: --guard-namespace), where forget \
                 checks each record's copy before the next deletion; nothing deleted",
                args.bin.namespace()
            )
        })?;
        let total: usize = plans.iter().map(|plan| plan.steps.len()).sum();
        for step in plans.iter().flat_map(|plan| &plan.steps) {
            if let Err(error) =
                forget_one(&client, &namespace, args.bin.namespace(), &args.release, step).await
            {
                eprintln!(
                    "error: {error:#}\n{} of {total} records deleted (each kept in the recycle bin), the rest untouched; \
                     `{} --apply` brings the deleted ones back",
                    deleted,
                    crate::recycle_bin::restore_command(
                        &args.release,
                        &namespace,
                        None,
                        args.bin.namespace()
                    )
                );
                return Ok(Exit::Failure);
            }
            deleted += 1;
        }
    }
    let outcomes: Vec<Applied<ForgetPlan>> =
        plans.into_iter().map(|plan| Applied { applied: args.apply, plan }).collect();
    if !print_data(&outcomes, args.output)? {
        for outcome in &outcomes {
            print_plan(&outcome.plan, args.bin.namespace())?;
        }
        if args.apply {
            outln!(
                "Forgot release {namespace}/{}: deleted {}, each kept in the recycle bin; its resources stay. \
                 `{} --apply` brings the history back.",
                args.release,
                count(deleted, "record"),
                crate::recycle_bin::restore_command(&args.release, &namespace, None, args.bin.namespace())
            )?;
        } else {
            outln!("Nothing changed: run again with --apply to forget the release.")?;
        }
    }
    Ok(Exit::Ok)
}

/// Marks one record with the break-glass annotation (at the version listed: a record changed
/// since is not touched), deletes that object, and finds its copy in the bin. A deletion the
/// guard refuses leaves the mark removed again.
async fn forget_one(
    client: &kube::Client,
    namespace: &str,
    bin_namespace: &str,
    release: &str,
    step: &ForgetStep,
) -> anyhow::Result<()> {
    let what = format!("{} {namespace}/{}", step.kind, step.name);
    let params = PatchParams { field_manager: Some("helm-guard-forget".into()), ..PatchParams::default() };
    let delete = DeleteParams {
        preconditions: Some(Preconditions { uid: step.uid.clone(), resource_version: None }),
        ..DeleteParams::default()
    };
    let deleted = match step.kind {
        "Secret" => {
            mark_and_delete(
                &Api::<Secret>::namespaced(client.clone(), namespace),
                step,
                &params,
                &delete,
                &what,
            )
            .await?
        }
        _ => {
            mark_and_delete(
                &Api::<ConfigMap>::namespaced(client.clone(), namespace),
                step,
                &params,
                &delete,
                &what,
            )
            .await?
        }
    };
    deleted.with_context(|| format!("deleting {what}"))?;
    let bin = read_bin(client, bin_namespace, namespace, release).await.context("reading the recycle bin")?;
    let kept = bin.iter().flatten().any(|copy| {
        copy.object.kind == step.kind
            && copy.object.name == step.name
            && (step.uid.is_none() || copy.object.uid == step.uid)
    });
    anyhow::ensure!(
        kept,
        "deleted {what}, but the recycle bin in namespace {bin_namespace} holds no copy of it: is helm-guard running \
         with its recycle bin on (--recycle-bin), guarding namespace {namespace}, and is {bin_namespace} its recycle bin's \
         namespace (--guard-namespace, --recycle-bin-namespace)? Stopped before the next record"
    );
    Ok(())
}

/// The mark, then the deletion of that object; the mark taken off again when the deletion is
/// refused. `Err`: the mark could not be made; `Ok(Err)`: the deletion failed.
async fn mark_and_delete<K>(
    api: &Api<K>,
    step: &ForgetStep,
    params: &PatchParams,
    delete: &DeleteParams,
    what: &str,
) -> anyhow::Result<Result<(), kube::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mark = serde_json::json!({"metadata": {"annotations": {BREAK_GLASS_ANNOTATION: REASON}}});
    api.patch(&step.name, params, &Patch::Merge(&mark))
        .await
        .with_context(|| format!("annotating {what}"))?;
    let deleted = api.delete(&step.name, delete).await.map(|_| ());
    if deleted.is_err() {
        let unmark = serde_json::json!({"metadata": {"annotations": {BREAK_GLASS_ANNOTATION: null}}});
        let _ = api.patch(&step.name, params, &Patch::Merge(&unmark)).await;
    }
    Ok(deleted)
}

fn print_plan(plan: &ForgetPlan, bin_namespace: &str) -> anyhow::Result<()> {
    outln!(
        "Release {}/{} ({}): {} to delete, oldest first, each kept in the recycle bin in namespace {bin_namespace}; \
         its resources stay",
        plan.namespace,
        plan.release,
        plan.driver,
        count(plan.steps.len(), "record")
    )?;
    let rows: Vec<Vec<String>> = plan
        .steps
        .iter()
        .map(|step| {
            vec![
                step.revision.to_string(),
                step.status.map_or("unreadable", |s| s.as_str()).to_owned(),
                format!("{} {}", step.kind, step.name),
            ]
        })
        .collect();
    table(&["REVISION", "STATUS", "RECORD"], &rows)
}
