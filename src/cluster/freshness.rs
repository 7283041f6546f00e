//! A verdict made fresh: the one place that decides how a live guard shows its index current
//! for one release before a verdict rests on it.
//!
//! The index is filled by watches, which may lag a record just written, and knows most records
//! by their labels alone, which anyone may set. A verdict that rests on the rest of a release's
//! history first makes that view as new as the request and reads what Helm would read:
//!
//! 1. the watch shown caught up by a fence round ([`super::fence`]: one group-committed write
//!    for every verdict waiting), when a round completes within half the time left;
//! 2. else a consistent listing of the release, its records brought into the index (what the
//!    watch brought after the listing's moment stays: [`ReleaseIndex::sync_release`]), with
//!    their payloads;
//! 3. then the payload of every record not yet read at its current resourceVersion.
//!
//! A DELETE may first take step 3 alone ([`Freshness::read_alone`]): a payload read at the version
//! the watch brought keeps a view one its watch brought, on which Helm's purge holds without a
//! round (POLICY.md, "A view that lags").
//!
//! A release of which two or more records are unread (a guard just started, its read-ahead under
//! way) skips step 1: its listing shows it current and reads it in one call, where a round and
//! then a GET per record would take two waits and many calls (BENCHMARKS.md, "A restarted
//! guard").
//!
//! The mechanisms are behind [`PayloadFetcher`] (the API server's in `fetch`, a test's stub);
//! the order, the deadlines and what a failure means are here.

use std::sync::Arc;
use std::time::Instant;

use super::{Fetched, PayloadFetcher, Payloads, ReleaseIndex};
use crate::release::ReleaseKey;
use crate::tally::Tally;

/// How many unread records of a release make its listing cheaper than a fence round and their
/// GETs.
const LIST_WHEN_UNREAD: usize = 2;

/// Shows the index current for one release within a decision's deadline.
#[derive(Debug, Clone)]
pub(crate) struct Freshness {
    fetcher: Arc<dyn PayloadFetcher>,
    index: Arc<ReleaseIndex>,
    /// Decisions that could not read every record they needed: a listing or a GET failed, or
    /// the deadline ran out (the metric keeps its first name; the log says which).
    deadline_exceeded: Tally,
    /// Decisions that listed their release because the watch could not be shown caught up.
    confirmed_by_listing: Tally,
}

impl Freshness {
    pub(crate) fn new(
        fetcher: Arc<dyn PayloadFetcher>,
        index: Arc<ReleaseIndex>,
        deadline_exceeded: Tally,
        confirmed_by_listing: Tally,
    ) -> Freshness {
        Freshness { fetcher, index, deadline_exceeded, confirmed_by_listing }
    }

    /// Makes the index's view of `key` at least as new as the request, then reads what is still
    /// unread (steps 1 to 3). By `deadline`; when the view was shown current, the count of
    /// relists it holds within ([`ReleaseIndex::relists`]: a verdict decided after another
    /// relist was swapped in rests on nothing this showed); `None` when not (the index stays as
    /// it was, and an approval cannot stand on it). `except`: the record the request is about
    /// (its payload is in the request).
    pub(crate) async fn confirm(
        &self,
        key: &ReleaseKey,
        except: Option<&str>,
        deadline: Instant,
    ) -> Option<u64> {
        let relists = self.index.relists(key.driver);
        let halfway = deadline - deadline.saturating_duration_since(Instant::now()) / 2;
        let mostly_unread = self.index.unverified(key, except).len() >= LIST_WHEN_UNREAD;
        if mostly_unread || !self.fetcher.caught_up(key.driver, halfway).await {
            if !mostly_unread {
                self.confirmed_by_listing.inc();
            }
            let Some(listed) = self
                .fetcher
                .list(key, if mostly_unread { Payloads::Listed } else { Payloads::Left }, deadline)
                .await
            else {
                // Nothing more is asked of an API server that did not list in time: the
                // approval cannot stand, and a refusal stands as it is.
                self.deadline_exceeded.inc();
                return None;
            };
            self.index.sync_release(key, listed);
        }
        self.read(key, except, deadline).await;
        Some(relists)
    }

    /// Step 3 alone, when it is cheap (one record unread, `except` aside): reads it and says
    /// so; else reads nothing (false). A view its watch brought stays one when the payload
    /// read is the version the watch brought (POLICY.md, "A view that lags"), so a verdict that
    /// lacked only that payload may then hold without steps 1 and 2.
    pub(crate) async fn read_alone(&self, key: &ReleaseKey, except: Option<&str>, deadline: Instant) -> bool {
        let unread = self.index.unverified(key, except).len();
        if unread == 0 || unread >= LIST_WHEN_UNREAD {
            return false;
        }
        self.read(key, except, deadline).await;
        true
    }

    /// Step 3 alone: the payload of every record of `key` not yet read at its current
    /// resourceVersion, all within `deadline`. A record still unread afterwards counts as unread
    /// in the history (and refuses what it must).
    pub(crate) async fn read(&self, key: &ReleaseKey, except: Option<&str>, deadline: Instant) {
        let unread = self.index.unverified(key, except);
        if unread.is_empty() {
            return;
        }
        let objects: Vec<String> = unread.iter().map(|(object, _)| object.clone()).collect();
        let answers = self.fetcher.fetch(key, &objects, deadline).await;
        if answers.len() < objects.len() {
            self.deadline_exceeded.inc();
        }
        for (object, fetched) in answers {
            let seen = unread.iter().find(|(o, _)| *o == object).and_then(|(_, rv)| rv.as_deref());
            match fetched {
                Fetched::Read(read) => self.index.verified(key, &object, seen, read),
                // The version read is gone (not a later object of its name the watch brought).
                Fetched::Gone => self.index.gone(key, &object, seen),
            }
        }
    }
}
