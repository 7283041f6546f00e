//! The pending revisions judged by their writers, every [`EVERY`]: whether each pending latest
//! revision's writer still runs, kept in [`Writers`] for the metrics, the pod mutation and the
//! reports. And `serve --unlock-abandoned`: a pending revision whose writer's pod is gone is one
//! no one will finish, and it blocks every later `helm upgrade` and `rollback` ("another operation is in
//! progress"). The guard marks it failed as `helm set-status` and Flux's unlock do (payload and
//! `status` label together, `repair`'s edit), never while the writer's pod runs and never a
//! revision whose writer it does not know. Each replica asks the API server about the pod itself;
//! the edit carries the record's resourceVersion, so of replicas that agree one writes and the
//! others' writes conflict and are dropped.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};

use super::events::{EventQueue, Notice};
use super::index::ReleaseIndex;
use super::writers::Writers;
use crate::recycle_bin::api::RecycleBin;
use crate::recycle_bin::copy::Keeping;
use crate::release::writer::{Liveness, Writer};
use crate::release::{DecodeLimits, Driver, ReleaseKey, Status};

/// How often pending revisions are looked at.
const EVERY: Duration = Duration::from_secs(5);

/// Judges the pending revisions by their writers and, with `unlock`, marks the abandoned ones
/// failed, every [`EVERY`], until the process ends.
pub(crate) async fn run(
    client: kube::Client,
    writers: Arc<Writers>,
    index: Arc<ReleaseIndex>,
    limits: DecodeLimits,
    events: Option<EventQueue>,
    recycle_bin: Option<Arc<dyn RecycleBin>>,
    unlock_abandoned: bool,
) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let mut judged = std::collections::HashMap::new();
        for (key, revision) in super::census::pending_latest(&index) {
            let writer = writers.writer_of(&key.namespace, &key.release, revision);
            let liveness = writers.liveness(writer.as_ref()).await;
            judged.insert(key.clone(), (revision, liveness));
            let Some(writer) = writer.filter(|_| unlock_abandoned && liveness == Liveness::Gone) else {
                continue;
            };
            match unlock(&client, &key, revision, &writer, limits, recycle_bin.as_deref()).await {
                Ok(Some(notice)) => {
                    tracing::warn!(
                        target: "helm_guard::unlock",
                        release = %key, revision, writer = %writer.describe(),
                        "an abandoned pending revision marked failed: its writer's pod is gone"
                    );
                    if let Some(events) = &events {
                        events.offer(notice);
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(release = %key, revision, %error, "an abandoned pending revision could not be marked failed")
                }
            }
        }
        writers.set_judged(judged);
    }
}

/// Marks `revision` of `key` failed if it is still the pending latest: the Event's notice, or
/// `None` when there was nothing to do (moved on, or another replica did it).
async fn unlock(
    client: &kube::Client,
    key: &ReleaseKey,
    revision: u32,
    writer: &Writer,
    limits: DecodeLimits,
    recycle_bin: Option<&dyn RecycleBin>,
) -> anyhow::Result<Option<Notice>> {
    let objects = super::listing::list_records(client, Some(&key.namespace), Some(&key.release)).await?;
    let (records, _) = crate::release::scan::collect_records(&objects, limits);
    let records: Vec<_> = records.iter().filter(|r| r.record.id.key == *key).collect();
    let now = jiff::Timestamp::now().as_second();
    let gone = (writer.clone(), Liveness::Gone);
    let plan = crate::release::repair::plan(key, &records, now, i64::MAX, Some(&gone));
    let Some(step) =
        plan.steps.iter().find(|s| s.revision == revision && s.to == Status::Failed && s.from.is_pending())
    else {
        return Ok(None);
    };
    let (Some(record), Some(object)) = (
        records.iter().find(|r| r.record.object_name == step.object),
        objects.iter().find(|o| {
            o.pointer("/metadata/name").and_then(serde_json::Value::as_str) == Some(step.object.as_str())
                && o.get("kind").and_then(serde_json::Value::as_str) == Some(key.driver.kind())
        }),
    ) else {
        return Ok(None);
    };
    // The record as it was goes to the recycle bin first: no edit the guard makes itself is
    // without its copy (`helm-guard restore` brings it back).
    if let Some(bin) = recycle_bin {
        let keeping =
            Keeping { reason: "unlock-abandoned", requester: "helm-guard", at: now, readable: true };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        bin.keep(&record.record, &keeping, deadline).await.map_err(|error| {
            anyhow::anyhow!("no copy of {} could be kept, so it was not edited: {error}", step.object)
        })?;
    }
    let edited = crate::release::repair::edited_object(object.clone(), record, step, limits, now)
        .map_err(|error| anyhow::anyhow!("{}: {error}", step.object))?;
    let resource = match key.driver {
        Driver::Secret => ApiResource::erase::<Secret>(&()),
        Driver::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
    };
    let dynamic: DynamicObject = serde_json::from_value(edited)?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &key.namespace, &resource);
    let params = PostParams { field_manager: Some("helm-guard".to_owned()), ..PostParams::default() };
    match api.replace(&step.object, &params, &dynamic).await {
        Ok(_) => {}
        // Changed meanwhile: Helm finished after all, or another replica unlocked it first.
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
        Err(error) => return Err(error.into()),
    }
    Ok(Some(Notice {
        namespace: key.namespace.clone(),
        api_version: "v1".to_owned(),
        kind: key.driver.kind().to_owned(),
        name: step.object.clone(),
        uid: object.pointer("/metadata/uid").and_then(serde_json::Value::as_str).map(str::to_owned),
        action: "Update".to_owned(),
        reason: "UnlockedAbandoned".to_owned(),
        note: format!(
            "helm-guard marked revision {revision} of {key} failed ({} -> failed): its writer {} is gone, so no one would finish it; `helm upgrade` and `helm rollback` run again",
            step.from,
            writer.describe()
        ),
        type_: "Warning",
        watched: false,
    }))
}
