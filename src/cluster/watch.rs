//! The live source: kube-rs metadata watchers on release Secrets, release ConfigMaps and
//! Namespaces (and a watcher on K3s's HelmCharts, where the CRD exists) keep the index current
//! without holding a single payload; [`super::fetch`] reads a payload when a verdict needs what
//! Helm sees (labels can lie).

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

use crate::tally::Tally;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::PayloadFetcher;
use super::feed::{ChartFeed, NamespaceFeed, RecordFeed};
use super::fence::{Fence, WATCHED_LABELS};
use super::fetch::ApiPayloadFetcher;
use super::index::ReleaseIndex;
use crate::release::{DecodeLimits, Driver};

/// Starts the watchers on a new live index (with `fence`, its rounds; with `read_ahead`, the
/// payloads read ahead, counted there); returns the index and
/// the fetcher verdicts use for a payload the index does not hold and for the freshness of the
/// watch. Its tasks are spawned into `tasks`. Must be called within a Tokio runtime.
pub(crate) fn watch(
    client: kube::Client,
    tombstone_ttl: Duration,
    limits: DecodeLimits,
    watch_restarts: Tally,
    fence: Option<Fence>,
    read_ahead: Option<Tally>,
    tasks: &crate::tasks::Tasks,
) -> (Arc<ReleaseIndex>, Arc<dyn PayloadFetcher>) {
    let index = Arc::new(ReleaseIndex::new(super::SourceKind::Live { tombstone_ttl }));
    tasks.spawn(run(client.clone(), index.clone(), watch_restarts));
    let fence = fence.map(Arc::new);
    if let Some(fence) = &fence {
        for driver in [Driver::Secret, Driver::ConfigMap] {
            let (fence, index) = (fence.clone(), index.clone());
            tasks.spawn(async move { fence.run(driver, index.progress()).await });
        }
    }
    let fetcher = ApiPayloadFetcher { client, limits, fence, waiting: Arc::default() };
    if let Some(reads) = read_ahead {
        let (fetcher, index) = (fetcher.clone(), index.clone());
        tasks.spawn(async move { fetcher.read_ahead(index, reads).await });
    }
    (index, Arc::new(fetcher))
}

/// Runs the three watchers until the process ends. Errors are retried with backoff while the
/// index keeps serving its last good state. The index is ready once each watcher has completed
/// its first list.
pub(crate) async fn run(client: kube::Client, index: Arc<ReleaseIndex>, watch_restarts: Tally) {
    // Records and the fences (their events tell how far the watch has come).
    let secrets = watcher::Config::default().labels(WATCHED_LABELS).any_semantic();
    let configmaps = watcher::Config::default().labels(WATCHED_LABELS).any_semantic();
    let namespaces = watcher::Config::default().any_semantic();
    let (secrets_listed, secrets_ready) = oneshot::channel();
    let (configmaps_listed, configmaps_ready) = oneshot::channel();
    let (namespaces_listed, namespaces_ready) = oneshot::channel();
    let ready = async {
        // A watcher's sender is dropped unsent only when its stream ends, which it does not.
        if let (Ok(()), Ok(()), Ok(())) = tokio::join!(secrets_ready, configmaps_ready, namespaces_ready) {
            index.set_ready(true);
            tracing::info!(revisions = index.revision_count(), "initial lists complete: ready");
        }
    };

    let mut secret_feed = RecordFeed::new(Driver::Secret);
    let mut configmap_feed = RecordFeed::new(Driver::ConfigMap);
    let mut namespace_feed = NamespaceFeed::default();
    tokio::join!(
        ready,
        watch_charts(client.clone(), &index),
        drive(
            "secrets",
            watcher::watcher(Api::<PartialObjectMeta<Secret>>::all(client.clone()), secrets),
            |event| secret_feed.apply(&index, event),
            secrets_listed,
            &watch_restarts,
        ),
        drive(
            "configmaps",
            watcher::watcher(Api::<PartialObjectMeta<ConfigMap>>::all(client.clone()), configmaps),
            |event| configmap_feed.apply(&index, event),
            configmaps_listed,
            &watch_restarts,
        ),
        drive(
            "namespaces",
            watcher::watcher(Api::<PartialObjectMeta<Namespace>>::all(client), namespaces),
            |event| namespace_feed.apply(&index, event),
            namespaces_listed,
            &watch_restarts,
        ),
    );
}

/// Keeps the index's HelmCharts current. Not part of readiness, and quiet when the CRD is not
/// installed (a cluster without K3s's helm-controller): it is looked for again with backoff.
async fn watch_charts(client: kube::Client, index: &ReleaseIndex) {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("helm.cattle.io", "v1", super::helmcharts::KIND),
        "helmcharts",
    );
    let api = Api::<DynamicObject>::all_with(client, &resource);
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut feed = ChartFeed::default();
    let mut failing = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                // Each retry begins with `Init` before its list fails: only what follows a list
                // that worked ends the failure (else the line below repeats at every retry).
                failing &= matches!(event, Event::Init);
                feed.apply(index, event);
            }
            Err(error) if !failing => {
                failing = true;
                tracing::info!(%error, "no HelmCharts to watch (is K3s's helm-controller CRD installed?): Events on HelmCharts and helm-guard.io/protect on charts wait for it; namespace labels still apply");
            }
            Err(error) => tracing::debug!(%error, "HelmChart watch still failing"),
        }
    }
}

/// Applies one watcher's events; `listed` hears of its first completed list.
async fn drive<K>(
    what: &'static str,
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    mut apply: impl FnMut(Event<K>) -> bool,
    listed: oneshot::Sender<()>,
    watch_restarts: &Tally,
) {
    let mut stream = std::pin::pin!(stream.default_backoff());
    let mut listed = Some(listed);
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                if apply(event)
                    && let Some(listed) = listed.take()
                {
                    let _ = listed.send(());
                }
            }
            Err(error) => {
                watch_restarts.inc();
                tracing::warn!(watch = what, %error, "watch failed; retrying with backoff, serving the last good state");
            }
        }
    }
}
