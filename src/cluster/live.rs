//! The live source: kube-rs metadata watchers on release Secrets, release ConfigMaps and
//! Namespaces keep the index current without holding a single payload. A payload is fetched with
//! one GET only when a verdict needs a status its label does not give.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use anyhow::Context;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams, PartialObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use prometheus_client::metrics::counter::Counter;

use super::PayloadFetcher;
use super::feed::{NamespaceFeed, RecordFeed};
use super::index::ReleaseIndex;
use crate::release::history::RevisionFacts;
use crate::release::record::DecodedRecord;
use crate::release::record::SECRET_TYPE;
use crate::release::{DecodeLimits, Driver, Record, RecordId};

pub const SECRET_LABELS: &str = "owner=helm";
pub const SECRET_FIELDS: &str = "type=helm.sh/release.v1";
pub const CONFIGMAP_LABELS: &str = "owner=helm";

/// Where to find the cluster: the usual inference (in-cluster, KUBECONFIG, ~/.kube/config) unless
/// a file or context is named.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Path to a kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "HELM_GUARD_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, env = "HELM_GUARD_CONTEXT")]
    pub context: Option<String>,
}

/// Connects and checks that the API server answers.
pub async fn connect(args: &ClusterArgs) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kubeconfig =
                Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options).await?,
        (None, None) => {
            kube::Config::infer().await.context("no in-cluster service account and no kubeconfig")?
        }
    };
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
    watch_restarts: Counter,
) -> (Arc<ReleaseIndex>, Arc<dyn PayloadFetcher>) {
    let index = Arc::new(ReleaseIndex::new(super::SourceKind::Live { tombstone_ttl }));
    tokio::spawn(run(client.clone(), index.clone(), watch_restarts));
    let fetcher = ApiPayloadFetcher {
        client,
        runtime: tokio::runtime::Handle::current(),
        limits,
        timeout: Duration::from_secs(3),
    };
    (index, Arc::new(fetcher))
}

/// Counts initial lists; the index is ready once every watcher has completed one.
#[derive(Debug)]
struct InitialLists {
    remaining: AtomicU8,
}

impl InitialLists {
    fn done(&self, index: &ReleaseIndex) {
        let before = self.remaining.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if before == Ok(1) {
            index.set_ready(true);
            tracing::info!(revisions = index.revision_count(), "initial lists complete: ready");
        }
    }
}

/// Runs the three watchers until the process ends. Errors are retried with backoff while the
/// index keeps serving its last good state.
pub async fn run(client: kube::Client, index: Arc<ReleaseIndex>, watch_restarts: Counter) {
    let lists = Arc::new(InitialLists { remaining: AtomicU8::new(3) });
    let secrets = watcher::Config::default().labels(SECRET_LABELS).fields(SECRET_FIELDS).any_semantic();
    let configmaps = watcher::Config::default().labels(CONFIGMAP_LABELS).any_semantic();
    let namespaces = watcher::Config::default().any_semantic();

    let mut secret_feed = RecordFeed::new(Driver::Secret);
    let mut configmap_feed = RecordFeed::new(Driver::ConfigMap);
    let mut namespace_feed = NamespaceFeed::default();
    tokio::join!(
        drive(
            "secrets",
            watcher::watcher(Api::<PartialObjectMeta<Secret>>::all(client.clone()), secrets),
            |event| secret_feed.apply(&index, event),
            &index,
            &lists,
            &watch_restarts,
        ),
        drive(
            "configmaps",
            watcher::watcher(Api::<PartialObjectMeta<ConfigMap>>::all(client.clone()), configmaps),
            |event| configmap_feed.apply(&index, event),
            &index,
            &lists,
            &watch_restarts,
        ),
        drive(
            "namespaces",
            watcher::watcher(Api::<PartialObjectMeta<Namespace>>::all(client), namespaces),
            |event| namespace_feed.apply(&index, event),
            &index,
            &lists,
            &watch_restarts,
        ),
    );
}

async fn drive<K>(
    what: &'static str,
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    mut apply: impl FnMut(Event<K>) -> bool,
    index: &ReleaseIndex,
    lists: &InitialLists,
    watch_restarts: &Counter,
) {
    let mut stream = std::pin::pin!(stream.default_backoff());
    let mut listed_once = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                if apply(event) && !listed_once {
                    listed_once = true;
                    lists.done(index);
                }
            }
            Err(error) => {
                watch_restarts.inc();
                tracing::warn!(watch = what, %error, "watch failed; retrying with backoff, serving the last good state");
            }
        }
    }
}

/// Fetches one record with a GET and decodes its status.
#[derive(Clone)]
pub struct ApiPayloadFetcher {
    pub client: kube::Client,
    pub runtime: tokio::runtime::Handle,
    pub limits: DecodeLimits,
    pub timeout: Duration,
}

impl std::fmt::Debug for ApiPayloadFetcher {
    // kube::Client has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiPayloadFetcher").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl PayloadFetcher for ApiPayloadFetcher {
    fn fetch(&self, id: &RecordId) -> Option<RevisionFacts> {
        let name = id.object_name();
        let namespace = &id.key.namespace;
        let object = self.runtime.block_on(async {
            let get = async {
                match id.key.driver {
                    Driver::Secret => Api::<Secret>::namespaced(self.client.clone(), namespace)
                        .get_opt(&name)
                        .await
                        .map(|o| o.and_then(|o| serde_json::to_value(o).ok())),
                    Driver::ConfigMap => Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                        .get_opt(&name)
                        .await
                        .map(|o| o.and_then(|o| serde_json::to_value(o).ok())),
                }
            };
            tokio::time::timeout(self.timeout, get).await
        });
        let object = match object {
            Ok(Ok(object)) => object?,
            Ok(Err(error)) => {
                tracing::warn!(%namespace, %name, %error, "could not fetch a record's payload");
                return None;
            }
            Err(_) => {
                tracing::warn!(%namespace, %name, "fetching a record's payload timed out");
                return None;
            }
        };
        let kind = id.key.driver.kind();
        let record = Record::from_object(&object, Some(kind)).ok()??;
        Some(DecodedRecord::new(record, self.limits).facts())
    }
}

/// Lists full records (payloads included) for `scan`: all namespaces or one, all releases or one.
pub async fn list_records(
    client: &kube::Client,
    namespace: Option<&str>,
    release: Option<&str>,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let labels = match release {
        Some(release) => format!("{SECRET_LABELS},name={release}"),
        None => SECRET_LABELS.to_owned(),
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
    for secret in secrets
        .list(&params.clone().fields(&format!("type={SECRET_TYPE}")))
        .await
        .context("listing Secrets")?
    {
        objects.push(with_kind(serde_json::to_value(secret)?, "Secret"));
    }
    for configmap in configmaps.list(&params).await.context("listing ConfigMaps")? {
        objects.push(with_kind(serde_json::to_value(configmap)?, "ConfigMap"));
    }
    Ok(objects)
}

/// Items of a typed list carry no `kind`; put it back so records are recognised as in a dump.
fn with_kind(mut object: serde_json::Value, kind: &str) -> serde_json::Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("kind".to_owned(), serde_json::Value::String(kind.to_owned()));
    }
    object
}
