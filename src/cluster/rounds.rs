//! Write-then-watch rounds: the one protocol the [fence](super::fence) and the
//! [claim books](super::claim_books) share. A round writes one object of the guard's (a merge patch,
//! or a create the first time) and waits until a watch that delivers events in
//! resourceVersion order has brought the write back: everything written before it is then known
//! to that watch's reader. Rounds are group commits ([`GroupCommit`]): a waiter joins the next
//! round that begins after it arrived, and one round answers for every waiter that arrived
//! before it. A round whose write fails or does not come back within [`ROUND_TIMEOUT`] fails,
//! and its waiters stop waiting at once (they take another way, or are refused "retry").

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::{Notify, watch};

/// How long one round may wait for the watch to bring its write back before it is given up.
pub(crate) const ROUND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the rounds pause after a failed write (the API server refusing or away).
pub(crate) const WRITE_RETRY: Duration = Duration::from_millis(100);

/// How a writer's rounds follow each other.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacing {
    /// Rounds under way at once, at most.
    pub(crate) in_flight: usize,
    /// A round begins no sooner than a quarter more than the last round took after the one
    /// before (gathering the waiters of that time), and never later than this; but one waiter
    /// at a time (rounds answering no more than one and a half, a moving mean) gathers nothing:
    /// a round wanted when none is under way begins at once.
    pub(crate) max_gather: Duration,
}

/// A high-water mark: the highest resourceVersion a watch's reader has applied. Waiters wake as
/// it passes theirs.
#[derive(Debug)]
pub(crate) struct Mark(watch::Sender<u64>);

impl Default for Mark {
    fn default() -> Mark {
        Mark(watch::Sender::new(0))
    }
}

impl Mark {
    /// Raises the mark to `to` (never lowers it), waking its waiters when it moved.
    pub(crate) fn raise(&self, to: u64) {
        self.0.send_if_modified(|now| {
            let newer = to > *now;
            *now = (*now).max(to);
            newer
        });
    }

    /// The mark now.
    #[cfg(test)]
    pub(crate) fn through(&self) -> u64 {
        *self.0.borrow()
    }

    /// Waits until the mark is at `version` or past it.
    pub(crate) async fn reached(&self, version: u64) {
        let mut seen = self.0.subscribe();
        let _ = seen.wait_for(|seen| *seen >= version).await;
    }
}

/// A resourceVersion as a number: etcd's revision, as every supported API server spells it. One
/// that is not (another storage) makes no round: verdicts then list.
pub(crate) fn revision(resource_version: Option<&str>) -> Option<u64> {
    resource_version?.parse().ok()
}

/// Rounds of one writer that many waiters share (a group commit): a waiter joins the next round
/// that begins after it arrived; the writer begins a round when one is wanted and marks it done.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    rounds: Mutex<Rounds>,
    /// The latest round done.
    done: Mark,
    /// The latest round that failed (its waiters need not wait for it).
    failed: Mark,
    wake: Notify,
}

/// Where a writer's rounds stand.
#[derive(Debug, Default)]
struct Rounds {
    /// Rounds begun so far.
    begun: u64,
    /// The latest round a waiter waits for.
    wanted: u64,
    /// Waiters that joined since the last round began: those the next one answers for.
    joined: usize,
}

impl GroupCommit {
    /// The round a waiter arriving now needs: the next one to begin (one already begun may have
    /// read before it arrived). Wakes the writer.
    pub(crate) fn join(&self) -> u64 {
        let need = {
            let mut rounds = self.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let need = rounds.begun + 1;
            rounds.wanted = rounds.wanted.max(need);
            rounds.joined += 1;
            need
        };
        self.wake.notify_one();
        need
    }

    /// Whether round `need` (or a later one) is done by `deadline`; false as soon as it failed.
    pub(crate) async fn done_by(&self, need: u64, deadline: tokio::time::Instant) -> bool {
        let outcome = async {
            tokio::select! {
                biased;
                () = self.done.reached(need) => true,
                () = self.failed.reached(need) => false,
            }
        };
        tokio::time::timeout_at(deadline, outcome).await.unwrap_or(false)
    }

    /// For the writer: waits until a round is wanted, and begins it; the round, and how many
    /// waiters it answers for.
    pub(crate) async fn begin(&self) -> (u64, usize) {
        loop {
            let notified = self.wake.notified();
            {
                let mut rounds = self.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if rounds.wanted > rounds.begun {
                    rounds.begun += 1;
                    return (rounds.begun, std::mem::take(&mut rounds.joined));
                }
            }
            notified.await;
        }
    }

    /// For the writer: round `round` is done.
    pub(crate) fn finish(&self, round: u64) {
        self.done.raise(round);
    }

    /// For the writer: round `round` failed; its waiters, and those of rounds before it not yet
    /// done, stop waiting (and take another way).
    pub(crate) fn fail(&self, round: u64) {
        self.failed.raise(round);
    }
}

/// Why a round did not complete.
#[derive(Debug)]
pub(crate) enum RoundFailed {
    /// The write failed.
    Write(kube::Error),
    /// The watch did not bring the write back within [`ROUND_TIMEOUT`].
    NotBack,
}

/// One writer's side of its rounds.
pub(crate) trait RoundWriter: Sync {
    /// What a write remembers until the watch brings it back.
    type Written: Send;

    /// Writes round `round`: the resourceVersion written at, and what [`RoundWriter::back`] needs.
    fn write(&self, round: u64) -> impl Future<Output = Result<(u64, Self::Written), kube::Error>> + Send;

    /// The watch brought a write back at `version`; called before the round's waiters are told.
    fn back(&self, _written: Self::Written, _version: u64) {}

    /// A round failed: says so (its waiters are told it failed).
    fn failed(&self, failure: &RoundFailed);
}

/// Runs `writer`'s rounds for the waiters of `commit` until the task is stopped, each begun when a
/// waiter joins, brought back when `mark` (the watch's progress) reaches the write.
pub(crate) async fn run<W: RoundWriter>(commit: &GroupCommit, writer: &W, mark: &Mark, pacing: Pacing) {
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut pace = Duration::ZERO;
    // A moving mean of the waiters a round answered: rounds gather only under load (a burst),
    // not for one waiter at a time, nor for a straggler among a burst's rounds. Rounds that
    // overlap are paced whatever they answered, so writes stay under about one per round's time.
    let mut answered = 0.0_f32;
    let mut last_began = tokio::time::Instant::now();
    // After a failed write, no round before this.
    let mut not_before = last_began;
    loop {
        let alone = in_flight.is_empty() && answered <= 1.5;
        let next_begin = if alone { last_began } else { last_began + pace }.max(not_before);
        tokio::select! {
            (round, waiters) = async {
                // Tokio's timer rounds a deadline up to its next millisecond: a time already come
                // is not waited for.
                if next_begin > tokio::time::Instant::now() {
                    tokio::time::sleep_until(next_begin).await;
                }
                commit.begin().await
            }, if in_flight.len() < pacing.in_flight => {
                let began = tokio::time::Instant::now();
                last_began = began;
                in_flight.push(async move { (round, waiters, began, complete(writer, round, mark).await) });
            }
            Some((round, waiters, began, completed)) = futures::StreamExt::next(&mut in_flight) => match completed {
                Ok(()) => {
                    commit.finish(round);
                    answered = answered * 0.75 + waiters as f32 * 0.25;
                    pace = (began.elapsed() * 5 / 4).min(pacing.max_gather);
                }
                Err(failure) => {
                    writer.failed(&failure);
                    commit.fail(round);
                    if matches!(failure, RoundFailed::Write(_)) {
                        not_before = tokio::time::Instant::now() + WRITE_RETRY;
                    }
                }
            },
        }
    }
}

/// One round: the write, brought back by the watch within [`ROUND_TIMEOUT`].
async fn complete<W: RoundWriter>(writer: &W, round: u64, mark: &Mark) -> Result<(), RoundFailed> {
    let (version, written) = writer.write(round).await.map_err(RoundFailed::Write)?;
    tokio::time::timeout(ROUND_TIMEOUT, mark.reached(version)).await.map_err(|_| RoundFailed::NotBack)?;
    writer.back(written, version);
    Ok(())
}

/// The field manager of the guard's own objects (fences, claim books).
const FIELD_MANAGER: &str = "helm-guard";

/// Writes `object` as `name`: a merge patch of the object there (the usual case: the API server
/// takes about 2 ms for one where a server-side apply takes 3 to 4, and a round waits for it),
/// created when there is none (by another replica at the same time: then patched). Its new
/// resourceVersion, as a number.
pub(crate) async fn apply<K>(api: &Api<K>, name: &str, object: &serde_json::Value) -> Result<u64, kube::Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    let written = match api.patch(name, &params, &Patch::Merge(object)).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            let new: K = serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
            let post = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
            match api.create(&post, &new).await {
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    api.patch(name, &params, &Patch::Merge(object)).await?
                }
                created => created?,
            }
        }
        patched => patched?,
    };
    let version = written.meta().resource_version.clone();
    revision(version.as_deref()).ok_or_else(|| {
        kube::Error::Service(format!("{name}'s resourceVersion {version:?} is not a number").into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_mark_only_rises_and_its_waiters_wake_at_theirs() {
        let mark = std::sync::Arc::new(Mark::default());
        mark.raise(10);
        mark.raise(7);
        assert_eq!(mark.through(), 10, "never backwards");
        let waiting = tokio::spawn({
            let mark = mark.clone();
            async move { mark.reached(12).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "10 is not 12");
        mark.raise(12);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_round_begun_before_a_waiter_arrived_does_not_answer_for_it() {
        let commit = GroupCommit::default();
        let first = commit.join();
        assert_eq!(commit.begin().await, (1, 1));
        // Two verdicts arrive while round 1 is under way: both need round 2, and share it.
        let (late, also) = (commit.join(), commit.join());
        assert_eq!((first, late, also), (1, 2, 2));
        commit.finish(1);
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        assert!(commit.done_by(first, soon).await);
        assert!(!commit.done_by(late, soon).await, "round 1 began before it arrived");
        assert_eq!(commit.begin().await, (2, 2), "one round for both");
        let idle = tokio::time::timeout(Duration::from_millis(20), commit.begin()).await;
        assert!(idle.is_err(), "nobody waits for round 3, so it does not begin");
        commit.finish(2);
        assert!(commit.done_by(also, tokio::time::Instant::now() + Duration::from_millis(50)).await);
    }

    #[tokio::test]
    async fn a_failed_round_frees_its_waiters_at_once_and_a_later_round_answers_the_rest() {
        let commit = std::sync::Arc::new(GroupCommit::default());
        let first = commit.join();
        assert_eq!(commit.begin().await, (1, 1));
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
        assert_eq!(commit.begin().await, (2, 1));
        commit.finish(2);
        assert!(waiting.await.unwrap(), "round 2 answers for the waiter that arrived during round 1");
    }

    /// A writer whose every write takes `WRITE` and is back at once; it notes when each began.
    struct TimedWriter {
        mark: std::sync::Arc<Mark>,
        began: Mutex<Vec<tokio::time::Instant>>,
    }

    const WRITE: Duration = Duration::from_millis(8);

    impl RoundWriter for TimedWriter {
        type Written = ();

        async fn write(&self, round: u64) -> Result<(u64, ()), kube::Error> {
            self.began.lock().unwrap().push(tokio::time::Instant::now());
            tokio::time::sleep(WRITE).await;
            self.mark.raise(round);
            Ok((round, ()))
        }

        fn failed(&self, _: &RoundFailed) {}
    }

    #[tokio::test(start_paused = true)]
    async fn rounds_gather_waiters_only_after_a_round_that_answered_several() {
        let commit = std::sync::Arc::new(GroupCommit::default());
        let mark = std::sync::Arc::new(Mark::default());
        let writer = std::sync::Arc::new(TimedWriter { mark: mark.clone(), began: Mutex::default() });
        let pacing = Pacing { in_flight: 4, max_gather: Duration::from_millis(50) };
        let rounds = tokio::spawn({
            let (commit, writer, mark) = (commit.clone(), writer.clone(), mark.clone());
            async move { run(&commit, &*writer, &mark, pacing).await }
        });
        let far = tokio::time::Instant::now() + Duration::from_secs(10);
        let one_by_one = async |rounds: usize| {
            for _ in 0..rounds {
                let need = commit.join();
                assert!(commit.done_by(need, far).await);
            }
        };
        // One waiter at a time (a lone `helm uninstall`): each round begins as it is wanted.
        one_by_one(3).await;
        // A waiter that joins while a round is under way does not begin another beside it: its
        // round begins when that one is done (here before the pace would let it).
        let under_way = commit.join();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let beside = commit.join();
        assert!(commit.done_by(under_way, far).await && commit.done_by(beside, far).await);
        // Eight at once (a burst): the next round begins a quarter more than that round took
        // after it began, gathering the waiters of that time; a lone straggler's round after
        // the burst does too, until the rounds have answered one at a time for a while.
        let burst: Vec<u64> = (0..8).map(|_| commit.join()).collect();
        for need in burst {
            assert!(commit.done_by(need, far).await);
        }
        one_by_one(8).await;
        let began = writer.began.lock().unwrap().clone();
        let gaps: Vec<Duration> = began.windows(2).map(|two| two[1] - two[0]).collect();
        let paced = WRITE * 5 / 4;
        assert_eq!(gaps[..5], [WRITE; 5], "one at a time: at once, one round under way");
        assert_eq!(gaps[5..9], [paced; 4], "after the burst: gathered");
        assert_eq!(gaps[9..], [WRITE; 4], "the burst over: at once again");
        rounds.abort();
    }

    #[test]
    fn only_numeric_versions_make_a_fence() {
        assert_eq!(revision(Some("12345")), Some(12345));
        assert_eq!(revision(Some("opaque-v1")), None);
        assert_eq!(revision(None), None);
    }
}
