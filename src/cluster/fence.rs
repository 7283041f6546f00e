//! A proof that the watch has caught up, shared by every verdict that waits on it: the live
//! index without a quorum read per verdict.
//!
//! A verdict that rests on a release's history must not rest on a watch that lags a record just
//! written. The watch of one resource type delivers its events in resourceVersion order (the API
//! server's watch cache follows etcd's revisions), so once the index has applied an event at
//! resourceVersion R, it holds every write to that type's release records made before R was
//! assigned. A fence round writes one small object the record watch also sees
//! (`helm-guard-fence` in the guard's namespace, labelled [`FENCE_LABEL`], which Helm never
//! selects) and waits for the watch to bring it back: every write completed before the round
//! began is then in the index. Rounds are group commits: a verdict waits for the next round that
//! starts after it arrived, and one round answers for every verdict that arrived before it, so a
//! burst costs one write per round per driver instead of one listing per verdict. When no round
//! completes within its budget, the verdict falls back to listing the release
//! ([`super::fetch`]).

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::{Notify, watch};

use crate::release::Driver;

/// The fence objects' label: not `owner=helm`, so Helm never lists them as records.
pub const FENCE_LABEL: (&str, &str) = ("owner", "helm-guard-fence");
/// The record watchers' selector: Helm's records and the fences.
pub const WATCHED_LABELS: &str = "owner in (helm,helm-guard-fence)";
/// The fence objects' name (a Secret for the secret driver, a ConfigMap for the configmap one).
pub const FENCE_NAME: &str = "helm-guard-fence";

/// How far each driver's record watch has been applied to the index: the highest resourceVersion
/// of an event the index holds (a (re-)list counts once swapped in whole).
#[derive(Debug, Default)]
pub struct WatchProgress {
    applied: PerDriver<watch::Sender<u64>>,
}

/// One `T` for each driver's records (each its own watch).
#[derive(Debug, Default)]
struct PerDriver<T> {
    secret: T,
    configmap: T,
}

impl<T> PerDriver<T> {
    fn of(&self, driver: Driver) -> &T {
        match driver {
            Driver::Secret => &self.secret,
            Driver::ConfigMap => &self.configmap,
        }
    }
}

impl WatchProgress {
    /// The index now holds `driver`'s events up to `resource_version`.
    pub fn applied(&self, driver: Driver, resource_version: u64) {
        self.applied.of(driver).send_if_modified(|seen| {
            let newer = resource_version > *seen;
            *seen = (*seen).max(resource_version);
            newer
        });
    }

    /// The highest resourceVersion of `driver`'s events the index holds.
    pub fn through(&self, driver: Driver) -> u64 {
        *self.applied.of(driver).borrow()
    }

    /// Waits until the index holds `driver`'s events up to `resource_version`.
    async fn reached(&self, driver: Driver, resource_version: u64) {
        let mut seen = self.applied.of(driver).subscribe();
        let _ = seen.wait_for(|seen| *seen >= resource_version).await;
    }
}

/// A resourceVersion as a number: etcd's revision, as every supported API server spells it. One
/// that is not (another storage) makes no fence: verdicts then list.
pub fn revision(resource_version: Option<&str>) -> Option<u64> {
    resource_version?.parse().ok()
}

#[derive(Debug, Default)]
struct Rounds {
    /// Rounds begun so far.
    begun: u64,
    /// The latest round a verdict waits for.
    wanted: u64,
}

#[derive(Debug, Default)]
struct DriverFence {
    rounds: Mutex<Rounds>,
    /// The latest round whose write the index holds.
    done: watch::Sender<u64>,
    wake: Notify,
}

/// Group-committed fence rounds for both drivers, written by this replica as `identity`.
pub struct Fence {
    client: kube::Client,
    namespace: String,
    identity: String,
    drivers: PerDriver<DriverFence>,
    rounds_total: crate::tally::Tally,
}

impl std::fmt::Debug for Fence {
    // kube::Client has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

/// How long one round may wait for the watch to bring its write back before it is given up (its
/// verdicts have fallen back to listing by then).
const ROUND_TIMEOUT: Duration = Duration::from_secs(5);

impl Fence {
    /// Fences in `namespace`; `rounds_total` counts the rounds written.
    pub fn new(
        client: kube::Client,
        namespace: String,
        identity: String,
        rounds_total: crate::tally::Tally,
    ) -> Fence {
        Fence { client, namespace, identity, drivers: PerDriver::default(), rounds_total }
    }

    /// Runs `driver`'s rounds until the process ends: one at a time, each begun when a verdict
    /// waits for one.
    pub async fn run(&self, driver: Driver, progress: &WatchProgress) {
        let fence = self.drivers.of(driver);
        loop {
            let round = loop {
                let notified = fence.wake.notified();
                {
                    let mut rounds = fence.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if rounds.wanted > rounds.begun {
                        rounds.begun += 1;
                        break rounds.begun;
                    }
                }
                notified.await;
            };
            self.rounds_total.inc();
            let written = match self.write(driver, round).await {
                Ok(written) => written,
                Err(error) => {
                    tracing::warn!(?driver, %error, "could not write the watch fence; verdicts list instead");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match tokio::time::timeout(ROUND_TIMEOUT, progress.reached(driver, written)).await {
                Ok(()) => {
                    fence.done.send_if_modified(|done| {
                        let newer = round > *done;
                        *done = (*done).max(round);
                        newer
                    });
                }
                Err(_) => tracing::warn!(?driver, "the record watch did not bring the fence back in time"),
            }
        }
    }

    /// Whether the index holds every write to `driver`'s records completed before this call: true
    /// once the next round completes, false when none does by `deadline`.
    pub async fn caught_up(&self, driver: Driver, deadline: tokio::time::Instant) -> bool {
        let fence = self.drivers.of(driver);
        let mut done = fence.done.subscribe();
        let need = {
            let mut rounds = fence.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // A round already begun may have read the store before this verdict arrived.
            let need = rounds.begun + 1;
            rounds.wanted = rounds.wanted.max(need);
            need
        };
        fence.wake.notify_one();
        tokio::time::timeout_at(deadline, done.wait_for(|done| *done >= need)).await.is_ok_and(|r| r.is_ok())
    }

    /// Writes the fence of `driver` (creating it the first time); its new resourceVersion.
    async fn write(&self, driver: Driver, round: u64) -> Result<u64, kube::Error> {
        let token = format!("{}/{round}/{}", self.identity, jiff::Timestamp::now().as_nanosecond());
        let patch = serde_json::json!({"metadata": {"annotations": {"helm-guard.io/fence": token}}});
        let object = serde_json::json!({
            "metadata": {
                "name": FENCE_NAME,
                "labels": {FENCE_LABEL.0: FENCE_LABEL.1},
                "annotations": {"helm-guard.io/fence": token},
            },
        });
        let resource_version = match driver {
            Driver::Secret => {
                patch_or_create::<Secret>(&self.client, &self.namespace, &patch, object).await?
            }
            Driver::ConfigMap => {
                patch_or_create::<ConfigMap>(&self.client, &self.namespace, &patch, object).await?
            }
        };
        revision(resource_version.as_deref()).ok_or_else(|| {
            kube::Error::Service(
                format!("the fence's resourceVersion {resource_version:?} is not a number").into(),
            )
        })
    }
}

/// Patches the fence object of kind `K`, or creates it (`object`) the first time; its new
/// resourceVersion.
async fn patch_or_create<K>(
    client: &kube::Client,
    namespace: &str,
    patch: &serde_json::Value,
    object: serde_json::Value,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api = Api::<K>::namespaced(client.clone(), namespace);
    let written = match api.patch(FENCE_NAME, &PatchParams::default(), &Patch::Merge(patch)).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            let object: K = serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &object).await?
        }
        other => other?,
    };
    Ok(written.meta().resource_version.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn progress_is_the_highest_version_applied_and_waiters_wake_at_theirs() {
        let progress = std::sync::Arc::new(WatchProgress::default());
        progress.applied(Driver::Secret, 10);
        progress.applied(Driver::Secret, 7);
        let waiting = tokio::spawn({
            let progress = progress.clone();
            async move { progress.reached(Driver::Secret, 12).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "10 is not 12");
        progress.applied(Driver::ConfigMap, 50);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the other driver's watch says nothing of this one");
        progress.applied(Driver::Secret, 12);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
    }

    #[test]
    fn only_numeric_versions_make_a_fence() {
        assert_eq!(revision(Some("12345")), Some(12345));
        assert_eq!(revision(Some("opaque-v1")), None);
        assert_eq!(revision(None), None);
    }
}
