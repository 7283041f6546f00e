//! The live guard's decision context, assembled once for `serve` and the tests: the index fed
//! by the watchers, payload reads, agreement between replicas through claim books, Events,
//! the recycle bin, the PolicyReport writer.

/// The recycle bin's bounds ([`RecycleOptions::bounds`]).
pub use crate::recycle_bin::copy::BinBounds;
use std::sync::Arc;
use std::time::Duration;

use crate::admission::{Admission, LiveParts, Settings};
use crate::cluster::claim_books::{self, BookCoordinator};
use crate::cluster::coordination;
use crate::cluster::events::{self, EventQueue};
use crate::cluster::{DeleteCoordinator, watch};
use crate::recycle_bin::api::{self as recycle_bin, ApiRecycleBin, RecycleBin};
use crate::server::Metrics;

/// Notices waiting to become Events; more are dropped (and counted) rather than waited for.
pub(crate) const EVENT_QUEUE: usize = 256;

/// How the live parts run.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// How long an approved deletion stays hidden (and its claim holds).
    pub tombstone_ttl: Duration,
    /// Where the replicas' claim books live (`cluster::claim_books`: the one way replicas agree,
    /// a single replica as several); `None` only for tests with no API server to write them.
    pub claims_namespace: Option<String>,
    /// How long a claim stays in a book after its deletion is seen: longer than any replica's
    /// decision deadline.
    pub claim_keep_after_deletion: Duration,
    /// Where the watch's fence is written (`cluster::fence`); `None`: every verdict that rests on
    /// a history lists its release.
    pub fence_namespace: Option<String>,
    /// Read every record's payload ahead of the verdicts that need it (`cluster::fetch`).
    pub read_ahead: bool,
    /// This replica, in Leases and Events.
    pub identity: String,
    /// Whether refusals and warnings are also written as Kubernetes Events.
    pub emit_events: bool,
    /// The recycle bin; `None`: no copies kept.
    pub recycle_bin: Option<RecycleOptions>,
    /// Mark a pending revision failed once its writer's pod is gone (`cluster::unlock`).
    pub unlock_abandoned: bool,
    /// The PolicyReport writer; `None`: no reports written.
    pub policy_reports: Option<crate::policy_reports::writer::WriterOptions>,
}

/// Where the recycle bin is and what it holds.
#[derive(Debug, Clone)]
pub struct RecycleOptions {
    /// The guard's namespace.
    pub namespace: String,
    /// What it holds at most.
    pub bounds: BinBounds,
}

/// How often the bin is swept besides after each copy (for the TTL).
const RECYCLE_SWEEP_EVERY: Duration = Duration::from_secs(300);

/// Starts the watchers (the index is ready once their first lists are done), the Event writer
/// and the Lease sweep, and returns the decision context they feed, deciding as `settings` say.
/// Must be called within a Tokio runtime.
pub fn admission(
    client: kube::Client,
    settings: Settings,
    options: LiveOptions,
    metrics: &Metrics,
) -> Admission {
    let tasks = Arc::new(crate::tasks::Tasks::default());
    let events = options.emit_events.then(|| {
        let (queue, notices) = EventQueue::new(EVENT_QUEUE, metrics.events_dropped("queue-full"));
        let failed = metrics.events_dropped("api-error");
        tasks.spawn(events::write_events(client.clone(), notices, options.identity.clone(), failed));
        queue
    });
    let recycle_bin = options.recycle_bin.map(|bin| {
        tracing::info!(namespace = %bin.namespace, ?bin.bounds, "copies of let-go records kept in the recycle bin");
        let stored = Arc::new(tokio::sync::Notify::new());
        let stats = metrics.recycle_bin.clone();
        let sweep = recycle_bin::sweep(
            client.clone(),
            bin.namespace.clone(),
            bin.bounds,
            stats.clone(),
            stored.clone(),
            RECYCLE_SWEEP_EVERY,
        );
        tasks.spawn(sweep);
        let bin = ApiRecycleBin {
            client: client.clone(),
            namespace: bin.namespace,
            stats,
            stored,
        };
        Arc::new(bin) as Arc<dyn RecycleBin>
    });
    let fence = options.fence_namespace.as_ref().map(|namespace| {
        crate::cluster::fence::Fence::new(
            client.clone(),
            namespace.clone(),
            options.identity.clone(),
            metrics.fence_rounds.clone(),
        )
    });
    let read_ahead = options.read_ahead.then(|| metrics.payloads_read_ahead.clone());
    let (index, fetcher) = watch::watch(
        client.clone(),
        options.tombstone_ttl,
        settings.limits,
        metrics.watch_restarts.clone(),
        fence,
        read_ahead,
        &tasks,
    );
    let coordinator = options.claims_namespace.as_deref().map(|namespace| {
        let leases = kube::Api::namespaced(client.clone(), namespace);
        // Claims expire after the TTL; sweeping at twice that finds most books idle.
        let every = (options.tombstone_ttl * 2).max(Duration::from_secs(10));
        tracing::info!(%namespace, identity = %options.identity, "deletions agreed through claim books read from a watch");
        tasks.spawn(coordination::sweep(leases.clone(), claim_books::BOOK_LABELS, every));
        let books = BookCoordinator::start(
            leases,
            options.identity.clone(),
            options.tombstone_ttl,
            index.clone(),
            options.claim_keep_after_deletion,
            &tasks,
        );
        Arc::new(books) as Arc<dyn DeleteCoordinator>
    });
    // Writers are kept beside the claim books, in the guard's namespace.
    let writers = options.claims_namespace.as_deref().map(|namespace| {
        let writers = Arc::new(crate::cluster::writers::Writers::new(client.clone(), namespace));
        tasks.spawn(crate::cluster::writers::run(writers.clone(), index.clone(), events.clone()));
        if options.unlock_abandoned {
            tracing::info!(
                "pending revisions whose writer's pod is gone are marked failed (--unlock-abandoned)"
            );
        }
        let judge = crate::cluster::unlock::run(
            client.clone(),
            writers.clone(),
            index.clone(),
            settings.limits,
            events.clone(),
            recycle_bin.clone(),
            options.unlock_abandoned,
        );
        tasks.spawn(judge);
        writers
    });
    if let Some(reports) = options.policy_reports {
        let writer = crate::policy_reports::writer::run(
            client.clone(),
            index.clone(),
            writers.clone(),
            reports,
            metrics.policy_reports.clone(),
        );
        tasks.spawn(writer);
    }
    let break_glass = Arc::new(crate::cluster::break_glass::AccessReviews::new(client.clone()));
    let live = LiveParts {
        fetcher: Some(fetcher),
        coordinator,
        events,
        recycle_bin,
        break_glass: Some(break_glass as Arc<dyn crate::cluster::BreakGlassAuthority>),
    };
    Admission::new(index, settings, live, metrics.decision_counts.clone())
        .with_writers(writers)
        .with_tasks(tasks)
}
