//! What the index's records add up to, computed through [`ReleaseIndex::each_release`]: the
//! census the metrics show, the releases the PolicyReport writer classifies, the operations
//! still pending that the unlocker looks at.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use super::index::ReleaseIndex;
use crate::release::ReleaseKey;
use crate::release::history::{RevisionFacts, classify};

/// The index's releases counted by state, stuck revisions and anomalies; records held (hidden
/// ones included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Releases by state.
    pub states: BTreeMap<crate::release::ReleaseState, usize>,
    /// Releases whose latest revision is stuck pending, by why.
    pub stuck: BTreeMap<crate::release::writer::StuckBecause, usize>,
    /// Releases by anomaly.
    pub anomalies: BTreeMap<crate::release::history::Anomaly, usize>,
    /// Records held.
    pub revisions: usize,
}

/// How the releases classify, counted (for metrics). Classified in place under the index's lock,
/// one release at a time in a reused buffer: no history is copied and nothing is allocated per
/// release but what classifying takes, so a scrape holds verdicts up only briefly
/// (BENCHMARKS.md, "Metrics").
///
/// A pending latest revision is judged by its writer as `writer` says
/// ([`crate::release::Classification::with_writer`]).
pub fn census(
    index: &ReleaseIndex,
    now_unix: i64,
    stuck_after_secs: i64,
    writer: &dyn Fn(&ReleaseKey, u32) -> crate::release::writer::Liveness,
) -> Census {
    let mut census = Census::default();
    let mut history = Vec::new();
    index.each_release(|key, records| {
        census.revisions += records.len();
        history.clear();
        history.extend(records.filter(|record| record.visible).map(|record| record.facts));
        let classification =
            classify(&history, now_unix, stuck_after_secs).judged_by(|revision| writer(key, revision));
        *census.states.entry(classification.state).or_default() += 1;
        if let Some(because) = classification.stuck_because {
            *census.stuck.entry(because).or_default() += 1;
        }
        for anomaly in classification.anomalies {
            *census.anomalies.entry(anomaly).or_default() += 1;
        }
        ControlFlow::Continue(())
    });
    census
}

/// Every release of the namespaces in `namespaces` (of every namespace when `None`) with the
/// records verdicts see, by namespace: what the PolicyReport writer classifies, outside the lock.
pub(crate) fn releases_in(
    index: &ReleaseIndex,
    namespaces: Option<&BTreeSet<String>>,
) -> BTreeMap<String, Vec<(ReleaseKey, Vec<RevisionFacts>)>> {
    let mut found: BTreeMap<String, Vec<(ReleaseKey, Vec<RevisionFacts>)>> = BTreeMap::new();
    index.each_release(|key, records| {
        if namespaces.is_none_or(|wanted| wanted.contains(&key.namespace)) {
            let facts = records.filter(|record| record.visible).map(|record| record.facts).collect();
            found.entry(key.namespace.clone()).or_default().push((key.clone(), facts));
        }
        ControlFlow::Continue(())
    });
    found
}

/// The releases whose latest revision is pending, with that revision: the operations under way,
/// or abandoned.
pub(crate) fn pending_latest(index: &ReleaseIndex) -> Vec<(ReleaseKey, u32)> {
    let mut pending = Vec::new();
    index.each_release(|key, records| {
        let latest = records
            .filter(|record| record.visible)
            .map(|record| record.facts)
            .max_by_key(|facts| facts.revision);
        if let Some(facts) =
            latest.filter(|facts| facts.status().is_some_and(crate::release::Status::is_pending))
        {
            pending.push((key.clone(), facts.revision));
        }
        ControlFlow::Continue(())
    });
    pending
}
