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
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::{Notify, watch};

use crate::release::Driver;

/// The fence objects' label: not `owner=helm`, so Helm never lists them as records.
pub(crate) const FENCE_LABEL: (&str, &str) = ("owner", "helm-guard-fence");
/// The record watchers' selector: Helm's records and the fences.
pub(crate) const WATCHED_LABELS: &str = "owner in (helm,helm-guard-fence)";
/// The fence objects' name (a Secret for the secret driver, a ConfigMap for the configmap one).
pub(crate) const FENCE_NAME: &str = "helm-guard-fence";

/// How far each driver's record watch has been applied to the index: the highest resourceVersion
/// of an event the index holds (a (re-)list counts once swapped in whole).
#[derive(Debug, Default)]
pub(crate) struct WatchProgress {
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
    pub(crate) fn applied(&self, driver: Driver, resource_version: u64) {
        raise(self.applied.of(driver), resource_version);
    }

    /// The highest resourceVersion of `driver`'s events the index holds.
    #[cfg(test)]
    pub(crate) fn through(&self, driver: Driver) -> u64 {
        *self.applied.of(driver).borrow()
    }

    /// Waits until the index holds `driver`'s events up to `resource_version`.
    async fn reached(&self, driver: Driver, resource_version: u64) {
        let mut seen = self.applied.of(driver).subscribe();
        let _ = seen.wait_for(|seen| *seen >= resource_version).await;
    }
}

/// Raises a high-water mark to `to` (never lowers it), waking its waiters when it moved.
pub(crate) fn raise(mark: &watch::Sender<u64>, to: u64) {
    mark.send_if_modified(|now| {
        let newer = to > *now;
        *now = (*now).max(to);
        newer
    });
}

/// A resourceVersion as a number: etcd's revision, as every supported API server spells it. One
/// that is not (another storage) makes no fence: verdicts then list.
pub(crate) fn revision(resource_version: Option<&str>) -> Option<u64> {
    resource_version?.parse().ok()
}

/// Rounds of one writer that many waiters share (a group commit): a waiter joins the next round
/// that begins after it arrived; the writer begins a round when one is wanted and marks it done.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    /// Rounds begun so far, and the latest round a waiter waits for.
    rounds: Mutex<(u64, u64)>,
    /// The latest round done.
    done: watch::Sender<u64>,
    /// The latest round that failed (its waiters need not wait for it).
    failed: watch::Sender<u64>,
    wake: Notify,
}

impl GroupCommit {
    /// The round a waiter arriving now needs: the next one to begin (one already begun may have
    /// read before it arrived). Wakes the writer.
    pub(crate) fn join(&self) -> u64 {
        let need = {
            let mut rounds = self.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let need = rounds.0 + 1;
            rounds.1 = rounds.1.max(need);
            need
        };
        self.wake.notify_one();
        need
    }

    /// Whether round `need` (or a later one) is done by `deadline`; false as soon as it failed.
    pub(crate) async fn done_by(&self, need: u64, deadline: tokio::time::Instant) -> bool {
        let (mut done, mut failed) = (self.done.subscribe(), self.failed.subscribe());
        let outcome = async {
            tokio::select! {
                biased;
                done = done.wait_for(|done| *done >= need) => done.is_ok(),
                _ = failed.wait_for(|failed| *failed >= need) => false,
            }
        };
        tokio::time::timeout_at(deadline, outcome).await.unwrap_or(false)
    }

    /// For the writer: waits until a round is wanted, and begins it.
    pub(crate) async fn begin(&self) -> u64 {
        loop {
            let notified = self.wake.notified();
            {
                let mut rounds = self.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if rounds.1 > rounds.0 {
                    rounds.0 += 1;
                    return rounds.0;
                }
            }
            notified.await;
        }
    }

    /// For the writer: round `round` is done.
    pub(crate) fn finish(&self, round: u64) {
        raise(&self.done, round);
    }

    /// For the writer: round `round` failed; its waiters, and those of rounds before it not yet
    /// done, stop waiting (and take another way).
    pub(crate) fn fail(&self, round: u64) {
        raise(&self.failed, round);
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

/// How long one round may wait for the watch to bring its write back before it is given up (its
/// verdicts have fallen back to listing by then).
const ROUND_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a round under load waits to gather verdicts before it begins.
const MAX_GATHER: Duration = Duration::from_millis(50);
/// Rounds under way at once, at most (each one write and one wait on the watch).
const MAX_IN_FLIGHT: usize = 4;
/// How long the rounds pause after a failed write (the API server refusing or away).
const WRITE_RETRY: Duration = Duration::from_millis(100);

/// Why a round did not complete (its verdicts fall back to listing their release).
#[derive(Debug)]
enum RoundFailed {
    Write(kube::Error),
    NotBack,
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

    /// Runs `driver`'s rounds until the process ends, each begun when a verdict waits for one.
    /// Rounds overlap (a round in flight does not hold back the next), but under load they begin
    /// no closer together than a quarter more than the last round took (at most 50 ms):
    /// each then answers for the verdicts of that time, so a verdict waits some half a round for
    /// its round to begin and one round for it to complete (before, a round waited for the one
    /// under way to end: two rounds and more), and the writes stay under one per round's time.
    pub(crate) async fn run(&self, driver: Driver, progress: &WatchProgress) {
        let fence = self.drivers.of(driver);
        let mut in_flight = futures::stream::FuturesUnordered::new();
        let mut pace = Duration::ZERO;
        let mut next_begin = tokio::time::Instant::now();
        loop {
            tokio::select! {
                round = async {
                    tokio::time::sleep_until(next_begin).await;
                    fence.begin().await
                }, if in_flight.len() < MAX_IN_FLIGHT => {
                    let began = tokio::time::Instant::now();
                    next_begin = began + pace;
                    self.rounds_total.inc();
                    in_flight.push(async move { (round, began, self.complete(driver, round, progress).await) });
                }
                Some((round, began, completed)) = futures::StreamExt::next(&mut in_flight) => match completed {
                    Ok(()) => {
                        fence.finish(round);
                        pace = (began.elapsed() * 5 / 4).min(MAX_GATHER);
                    }
                    Err(RoundFailed::Write(error)) => {
                        tracing::warn!(?driver, %error, "could not write the watch fence; verdicts list instead");
                        fence.fail(round);
                        next_begin = tokio::time::Instant::now() + WRITE_RETRY;
                    }
                    Err(RoundFailed::NotBack) => {
                        tracing::warn!(?driver, "the record watch did not bring the fence back in time");
                        fence.fail(round);
                    }
                },
            }
        }
    }

    /// One round: the fence written and brought back by the watch within [`ROUND_TIMEOUT`].
    async fn complete(
        &self,
        driver: Driver,
        round: u64,
        progress: &WatchProgress,
    ) -> Result<(), RoundFailed> {
        let written = self.write(driver, round).await.map_err(RoundFailed::Write)?;
        tokio::time::timeout(ROUND_TIMEOUT, progress.reached(driver, written))
            .await
            .map_err(|_| RoundFailed::NotBack)
    }

    /// Whether the index holds every write to `driver`'s records completed before this call: true
    /// once the next round completes, false when none does by `deadline`.
    pub(crate) async fn caught_up(&self, driver: Driver, deadline: tokio::time::Instant) -> bool {
        let fence = self.drivers.of(driver);
        let need = fence.join();
        fence.done_by(need, deadline).await
    }

    /// Writes the fence of `driver` (creating it the first time); its new resourceVersion.
    async fn write(&self, driver: Driver, round: u64) -> Result<u64, kube::Error> {
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

/// The field manager of the guard's own objects (fences, claim books).
const FIELD_MANAGER: &str = "helm-guard";

/// Writes `object` as `name` with a server-side apply: one call, whether or not it exists yet
/// (two replicas starting together both succeed); its new resourceVersion, as a number.
pub(crate) async fn apply<K>(api: &Api<K>, name: &str, object: &serde_json::Value) -> Result<u64, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api.patch(name, &params, &Patch::Apply(object)).await?;
    let version = written.meta().resource_version.clone();
    revision(version.as_deref()).ok_or_else(|| {
        kube::Error::Service(format!("{name}'s resourceVersion {version:?} is not a number").into())
    })
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

    #[tokio::test]
    async fn a_round_begun_before_a_waiter_arrived_does_not_answer_for_it() {
        let commit = GroupCommit::default();
        let first = commit.join();
        assert_eq!(commit.begin().await, 1);
        // Two verdicts arrive while round 1 is under way: both need round 2, and share it.
        let (late, also) = (commit.join(), commit.join());
        assert_eq!((first, late, also), (1, 2, 2));
        commit.finish(1);
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        assert!(commit.done_by(first, soon).await);
        assert!(!commit.done_by(late, soon).await, "round 1 began before it arrived");
        assert_eq!(commit.begin().await, 2, "one round for both");
        let idle = tokio::time::timeout(Duration::from_millis(20), commit.begin()).await;
        assert!(idle.is_err(), "nobody waits for round 3, so it does not begin");
        commit.finish(2);
        assert!(commit.done_by(also, tokio::time::Instant::now() + Duration::from_millis(50)).await);
    }

    #[tokio::test]
    async fn a_failed_round_frees_its_waiters_at_once_and_a_later_round_answers_the_rest() {
        let commit = std::sync::Arc::new(GroupCommit::default());
        let first = commit.join();
        assert_eq!(commit.begin().await, 1);
        let second = commit.join();
        commit.fail(1);
        let long = tokio::time::Instant::now() + Duration::from_secs(30);
        let asked = std::time::Instant::now();
        assert!(!commit.done_by(first, long).await, "round 1 failed");
        assert!(asked.elapsed() < Duration::from_secs(5), "without waiting for the deadline");
        let waiting = tokio::spawn({
            let commit = commit.clone();
            async move { commit.done_by(second, long).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "round 2 has neither failed nor completed");
        assert_eq!(commit.begin().await, 2);
        commit.finish(2);
        assert!(waiting.await.unwrap(), "round 2 answers for the waiter that arrived during round 1");
    }

    #[test]
    fn only_numeric_versions_make_a_fence() {
        assert_eq!(revision(Some("12345")), Some(12345));
        assert_eq!(revision(Some("opaque-v1")), None);
        assert_eq!(revision(None), None);
    }
}
