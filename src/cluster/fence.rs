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
//! ([`super::fetch`]). The rounds are [`super::rounds`], as the claim books' are: here they
//! overlap (up to four under way), paced to gather the verdicts of a round's time.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;

use super::rounds::{self, GroupCommit, Mark, Pacing, RoundFailed, RoundWriter, apply};
use crate::release::Driver;

/// The fence objects' label: not `owner=helm`, so Helm never lists them as records.
pub(crate) const FENCE_LABEL: (&str, &str) = ("owner", "helm-guard-fence");
/// The record watchers' selector: Helm's records and the fences.
pub(crate) const WATCHED_LABELS: &str = "owner in (helm,helm-guard-fence)";
/// The fence objects' name (a Secret for the secret driver, a ConfigMap for the configmap one).
pub(crate) const FENCE_NAME: &str = "helm-guard-fence";

/// Rounds overlap (a round in flight does not hold back the next), but begin no closer together
/// than a quarter more than the last round took (at most 50 ms): each then answers for the
/// verdicts of that time, so a verdict waits some half a round for its round to begin and one
/// round for it to complete, and the writes stay under one per round's time. Verdicts one at a
/// time wait for none of that: a round wanted when none is under way begins at once.
const PACING: Pacing = Pacing { in_flight: 4, max_gather: Duration::from_millis(50) };

/// How far each driver's record watch has been applied to the index: the highest resourceVersion
/// of an event the index holds (a (re-)list counts once swapped in whole).
#[derive(Debug, Default)]
pub(crate) struct WatchProgress {
    applied: PerDriver<Mark>,
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
    pub(crate) fn applied(&self, driver: Driver, resource_version: u64) {
        self.applied.of(driver).raise(resource_version);
    }

    /// How far `driver`'s events are held.
    pub(crate) fn of(&self, driver: Driver) -> &Mark {
        self.applied.of(driver)
    }

    /// The highest resourceVersion of `driver`'s events the index holds.
    #[cfg(test)]
    pub(crate) fn through(&self, driver: Driver) -> u64 {
        self.applied.of(driver).through()
    }
}

/// Group-committed fence rounds for both drivers, written by this replica as `identity`.
pub(crate) struct Fence {
    client: kube::Client,
    namespace: String,
    identity: String,
    drivers: PerDriver<GroupCommit>,
    rounds_total: crate::tally::Tally,
}

impl std::fmt::Debug for Fence {
    // kube::Client has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

/// One driver's fence, as a round writer.
struct FenceWriter<'a> {
    fence: &'a Fence,
    driver: Driver,
}

impl RoundWriter for FenceWriter<'_> {
    type Written = ();

    async fn write(&self, round: u64) -> Result<(u64, ()), kube::Error> {
        self.fence.rounds_total.inc();
        Ok((self.fence.write_fence(self.driver, round).await?, ()))
    }

    fn failed(&self, failure: &RoundFailed) {
        let driver = self.driver;
        match failure {
            RoundFailed::Write(error) => {
                tracing::warn!(?driver, %error, "could not write the watch fence; verdicts list instead");
            }
            RoundFailed::NotBack => {
                tracing::warn!(?driver, "the record watch did not bring the fence back in time");
            }
        }
    }
}

impl Fence {
    /// Fences in `namespace`; `rounds_total` counts the rounds written.
    pub(crate) fn new(
        client: kube::Client,
        namespace: String,
        identity: String,
        rounds_total: crate::tally::Tally,
    ) -> Fence {
        Fence { client, namespace, identity, drivers: PerDriver::default(), rounds_total }
    }

    /// Runs `driver`'s rounds until the task is stopped, each begun when a verdict waits for one
    /// and brought back by the record watch (`progress`).
    pub(crate) async fn run(&self, driver: Driver, progress: &WatchProgress) {
        let writer = FenceWriter { fence: self, driver };
        rounds::run(self.drivers.of(driver), &writer, progress.of(driver), PACING).await;
    }

    /// Whether the index holds every write to `driver`'s records completed before this call: true
    /// once the next round completes, false when none does by `deadline`.
    pub(crate) async fn caught_up(&self, driver: Driver, deadline: tokio::time::Instant) -> bool {
        let fence = self.drivers.of(driver);
        let need = fence.join();
        fence.done_by(need, deadline).await
    }

    /// Writes the fence of `driver` (creating it the first time); its new resourceVersion.
    async fn write_fence(&self, driver: Driver, round: u64) -> Result<u64, kube::Error> {
        let token = format!("{}/{round}/{}", self.identity, jiff::Timestamp::now().as_nanosecond());
        let object = serde_json::json!({
            "apiVersion": "v1",
            "kind": driver.kind(),
            "metadata": {
                "name": FENCE_NAME,
                "labels": {FENCE_LABEL.0: FENCE_LABEL.1},
                "annotations": {"helm-guard.io/fence": token},
            },
        });
        match driver {
            Driver::Secret => {
                apply(&Api::<Secret>::namespaced(self.client.clone(), &self.namespace), FENCE_NAME, &object)
                    .await
            }
            Driver::ConfigMap => {
                apply(
                    &Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace),
                    FENCE_NAME,
                    &object,
                )
                .await
            }
        }
    }
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
            async move { progress.of(Driver::Secret).reached(12).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "10 is not 12");
        progress.applied(Driver::ConfigMap, 50);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the other driver's watch says nothing of this one");
        progress.applied(Driver::Secret, 12);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
    }
}
