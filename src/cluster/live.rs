//! The live source: kube-rs metadata watchers on release Secrets, release ConfigMaps and
//! Namespaces (and a watcher on K3s's HelmCharts, where the CRD exists) keep the index current
//! without holding a single payload. A payload is read with a
//! GET when a verdict needs what Helm sees (labels can lie), once per resourceVersion.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

use crate::tally::Tally;
use anyhow::Context;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams, PartialObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::feed::{ChartFeed, NamespaceFeed, RecordFeed, record_from_meta};
use super::index::IndexedRecord;
use super::index::ReleaseIndex;
use super::{Fetched, PayloadFetcher, ReadRecord};
use crate::release::record::DecodedRecord;
use crate::release::{DecodeLimits, Driver, Record, ReleaseKey};

/// Helm selects its records by label alone (any Secret type, any name): so does the guard.
pub const RECORD_LABELS: &str = "owner=helm";

/// Where to find the cluster: the usual inference (KUBECONFIG, ~/.kube/config, in-cluster)
/// unless a file or context is named.
#[derive(Debug, Clone, Default)]
pub struct ClusterAccess {
    /// The kubeconfig file; else `$KUBECONFIG`, `~/.kube/config`, or the in-cluster account.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context; else the current one.
    pub context: Option<String>,
}

/// The client configuration, found as kubectl finds it: --kubeconfig, else $KUBECONFIG (a
/// list, merged), else ~/.kube/config, else the in-cluster service account. The files are read
/// here rather than by kube, whose errors repeat the path and the cause.
async fn config(args: &ClusterAccess) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let paths: Vec<std::path::PathBuf> = match (&args.kubeconfig, std::env::var_os("KUBECONFIG")) {
        (Some(path), _) => vec![path.clone()],
        (None, Some(list)) if !list.is_empty() => std::env::split_paths(&list).collect(),
        (None, _) => std::env::var_os("HOME")
            .map(|home| std::path::Path::new(&home).join(".kube/config"))
            .filter(|path| path.exists())
            .into_iter()
            .collect(),
    };
    let mut merged: Option<Kubeconfig> = None;
    for path in &paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
        let kubeconfig = Kubeconfig::from_yaml(&text)
            .with_context(|| format!("the kubeconfig {} is not valid", path.display()))?;
        merged = Some(match merged {
            None => kubeconfig,
            Some(first) => first.merge(kubeconfig)?,
        });
    }
    match merged {
        Some(kubeconfig) => Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?),
        None if args.context.is_some() => {
            anyhow::bail!("--context needs a kubeconfig, and there is none ($KUBECONFIG is unset and ~/.kube/config does not exist)")
        }
        None => kube::Config::incluster().map_err(|error| {
            anyhow::anyhow!(
                "no kubeconfig ($KUBECONFIG is unset and ~/.kube/config does not exist) and not in a cluster ({error}); pass --kubeconfig FILE"
            )
        }),
    }
}

/// Connects and checks that the API server answers.
pub async fn connect(args: &ClusterAccess) -> anyhow::Result<kube::Client> {
    let config = config(args).await?;
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)?;
    tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))
        .and_then(|answer| answer.map_err(anyhow::Error::from))
        .with_context(|| format!("cannot reach the Kubernetes API server at {server}"))?;
    Ok(client)
}

/// Starts the watchers on a new live index; returns the index and the fetcher verdicts use for a
/// payload the index does not hold. Must be called within a Tokio runtime.
pub fn watch(
    client: kube::Client,
    tombstone_ttl: Duration,
    limits: DecodeLimits,
    watch_restarts: Tally,
) -> (Arc<ReleaseIndex>, Arc<dyn PayloadFetcher>) {
    let index = Arc::new(ReleaseIndex::new(super::SourceKind::Live { tombstone_ttl }));
    tokio::spawn(run(client.clone(), index.clone(), watch_restarts));
    let fetcher = ApiPayloadFetcher { client, runtime: tokio::runtime::Handle::current(), limits };
    (index, Arc::new(fetcher))
}

/// Runs the three watchers until the process ends. Errors are retried with backoff while the
/// index keeps serving its last good state. The index is ready once each watcher has completed
/// its first list.
pub async fn run(client: kube::Client, index: Arc<ReleaseIndex>, watch_restarts: Tally) {
    let secrets = watcher::Config::default().labels(RECORD_LABELS).any_semantic();
    let configmaps = watcher::Config::default().labels(RECORD_LABELS).any_semantic();
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
                feed.apply(index, event);
                failing = false;
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

/// Reads records with GETs, a few at a time, all within the verdict's deadline.
#[derive(Clone)]
pub struct ApiPayloadFetcher {
    /// The cluster.
    pub client: kube::Client,
    /// Where the reads run (verdicts wait on them from a blocking thread).
    pub runtime: tokio::runtime::Handle,
    /// Bounds on reading payloads.
    pub limits: DecodeLimits,
}

/// How many GETs one verdict keeps in flight.
const PARALLEL_GETS: usize = 8;

impl std::fmt::Debug for ApiPayloadFetcher {
    // kube::Client has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiPayloadFetcher").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl ApiPayloadFetcher {
    async fn get(&self, key: &ReleaseKey, object: &str) -> Result<Fetched, kube::Error> {
        let found = match key.driver {
            Driver::Secret => Api::<Secret>::namespaced(self.client.clone(), &key.namespace)
                .get_opt(object)
                .await?
                .map(serde_json::to_value),
            Driver::ConfigMap => Api::<ConfigMap>::namespaced(self.client.clone(), &key.namespace)
                .get_opt(object)
                .await?
                .map(serde_json::to_value),
        };
        let Some(Ok(value)) = found else { return Ok(Fetched::Gone) };
        match Record::from_object(&value, Some(key.driver.kind())) {
            // Still a record of this release: what Helm reads of it.
            Ok(Some(record)) if record.id.key == *key => Ok(Fetched::Read(ReadRecord {
                uid: record.uid.clone(),
                resource_version: record.resource_version.clone(),
                facts: DecodedRecord::new(record, self.limits).facts(),
            })),
            // Relabelled since: no longer part of this release.
            _ => Ok(Fetched::Gone),
        }
    }
}

impl ApiPayloadFetcher {
    async fn list_metadata<K>(
        &self,
        namespace: &str,
        params: &ListParams,
    ) -> Result<Vec<kube::core::ObjectMeta>, kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let listed = Api::<K>::namespaced(self.client.clone(), namespace).list_metadata(params).await?;
        Ok(listed.items.into_iter().map(|item| item.metadata).collect())
    }

    async fn list_release(&self, key: &ReleaseKey) -> Result<Vec<IndexedRecord>, kube::Error> {
        let params = ListParams::default().labels(&format!("{RECORD_LABELS},name={}", key.release));
        let metas = match key.driver {
            Driver::Secret => self.list_metadata::<Secret>(&key.namespace, &params).await?,
            Driver::ConfigMap => self.list_metadata::<ConfigMap>(&key.namespace, &params).await?,
        };
        Ok(metas
            .iter()
            .filter_map(|meta| record_from_meta(key.driver, meta))
            .filter(|record| record.key == *key)
            .collect())
    }
}

impl PayloadFetcher for ApiPayloadFetcher {
    fn list(&self, key: &ReleaseKey, deadline: std::time::Instant) -> Option<Vec<IndexedRecord>> {
        let deadline = tokio::time::Instant::from_std(deadline);
        match self.runtime.block_on(async { tokio::time::timeout_at(deadline, self.list_release(key)).await })
        {
            Ok(Ok(records)) => Some(records),
            Ok(Err(error)) => {
                tracing::warn!(namespace = %key.namespace, release = %key.release, %error, "could not list a release's records");
                None
            }
            Err(_) => {
                tracing::warn!(namespace = %key.namespace, release = %key.release, "listing a release's records ran out of the verdict's deadline");
                None
            }
        }
    }

    fn fetch(
        &self,
        key: &ReleaseKey,
        objects: &[String],
        deadline: std::time::Instant,
    ) -> Vec<(String, Fetched)> {
        let reads = futures::stream::iter(objects.iter().cloned())
            .map(|object| async move {
                let result = self.get(key, &object).await;
                (object, result)
            })
            .buffer_unordered(PARALLEL_GETS);
        let deadline = tokio::time::Instant::from_std(deadline);
        self.runtime.block_on(async {
            let mut reads = std::pin::pin!(reads);
            let mut done = Vec::new();
            loop {
                match tokio::time::timeout_at(deadline, reads.next()).await {
                    Ok(Some((object, Ok(fetched)))) => done.push((object, fetched)),
                    Ok(Some((object, Err(error)))) => {
                        tracing::warn!(namespace = %key.namespace, %object, %error, "could not read a record's payload");
                    }
                    Ok(None) => break,
                    Err(_) => {
                        tracing::warn!(namespace = %key.namespace, release = %key.release, "reading payloads ran out of the verdict's deadline");
                        break;
                    }
                }
            }
            done
        })
    }
}

/// Lists the namespaces' metadata for `scan` (labels and managedFields): all, or the one named.
pub async fn list_namespaces(
    client: &kube::Client,
    only: Option<&str>,
) -> Result<Vec<kube::core::ObjectMeta>, kube::Error> {
    let params = match only {
        Some(name) => ListParams::default().fields(&format!("metadata.name={name}")),
        None => ListParams::default(),
    };
    let listed = Api::<Namespace>::all(client.clone()).list_metadata(&params).await?;
    Ok(listed.items.into_iter().map(|item| item.metadata).collect())
}

/// Lists full records (payloads included) for `scan`: all namespaces or one, all releases or one.
pub async fn list_records(
    client: &kube::Client,
    namespace: Option<&str>,
    release: Option<&str>,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let labels = match release {
        Some(release) => format!("{RECORD_LABELS},name={release}"),
        None => RECORD_LABELS.to_owned(),
    };
    let secrets: Api<Secret> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let configmaps: Api<ConfigMap> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = ListParams::default().labels(&labels);
    let mut objects = Vec::new();
    for secret in secrets.list(&params).await.context("listing Secrets")? {
        objects.push(with_kind(serde_json::to_value(secret)?, "Secret"));
    }
    for configmap in configmaps.list(&params).await.context("listing ConfigMaps")? {
        objects.push(with_kind(serde_json::to_value(configmap)?, "ConfigMap"));
    }
    Ok(objects)
}

/// Items of a typed list carry no `kind` or `apiVersion`; put them back so records are
/// recognised (and can be written back) as in a dump.
fn with_kind(mut object: serde_json::Value, kind: &str) -> serde_json::Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("kind".to_owned(), serde_json::Value::String(kind.to_owned()));
        map.insert("apiVersion".to_owned(), serde_json::Value::String("v1".to_owned()));
    }
    object
}
