//! Reading what the index holds only by its metadata: a record's payload with a GET (once per
//! resourceVersion), a release's records with a consistent listing, all within a verdict's
//! deadline.

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};

use super::RECORD_LABELS;
use super::feed::record_from_meta;
use super::index::IndexedRecord;
use super::{Fetched, PayloadFetcher, ReadRecord};
use crate::release::record::DecodedRecord;
use crate::release::{DecodeLimits, Driver, Record, ReleaseKey};

/// Reads records with GETs, a few at a time, all within the verdict's deadline.
#[derive(Clone)]
pub(crate) struct ApiPayloadFetcher {
    /// The cluster.
    pub client: kube::Client,
    /// Bounds on reading payloads.
    pub limits: DecodeLimits,
    /// The watch's fence, where the guard has a namespace to write it in.
    pub fence: Option<std::sync::Arc<super::fence::Fence>>,
}

/// How many GETs one verdict keeps in flight.
const PARALLEL_GETS: usize = 8;

impl std::fmt::Debug for ApiPayloadFetcher {
    // kube::Client has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiPayloadFetcher").field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// Records read per page of the read-ahead's listing: a page is held whole while it is read
/// (records are at most 1 MiB each).
const READ_AHEAD_PAGE: u32 = 16;
/// How often the read-ahead looks for records changed since it read them.
const READ_AHEAD_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

impl ApiPayloadFetcher {
    /// Reads ahead of the verdicts: once the index is ready, every record's payload, a page at a
    /// time; then, every few seconds, the records the watch has brought a new version of. A
    /// verdict then rarely waits on a GET (it still reads what is unread when it needs it). A read
    /// counts only where the index holds the very version read.
    pub async fn read_ahead(&self, index: &super::ReleaseIndex, reads: crate::tally::Tally) {
        while !index.is_ready() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let started = std::time::Instant::now();
        for driver in [Driver::Secret, Driver::ConfigMap] {
            let mut params = ListParams::default().labels(RECORD_LABELS).limit(READ_AHEAD_PAGE);
            loop {
                let page = match self.list_page(driver, &params).await {
                    Ok(page) => page,
                    Err(error) => {
                        tracing::warn!(?driver, %error, "reading payloads ahead: a page failed; verdicts read what they need");
                        break;
                    }
                };
                for (value, kind) in &page.0 {
                    if let Ok(Some(record)) = Record::from_object(value, Some(kind)) {
                        let (key, object) = (record.id.key.clone(), record.object_name.clone());
                        let read = self.read(record);
                        let version = read.resource_version.clone();
                        index.verified(&key, &object, version.as_deref(), read);
                        reads.inc();
                    }
                }
                match page.1 {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
        }
        tracing::info!(seconds = started.elapsed().as_secs(), "payloads read ahead");
        loop {
            tokio::time::sleep(READ_AHEAD_EVERY).await;
            let unread = index.unread(256);
            let reads = &reads;
            futures::stream::iter(unread)
                .map(|(key, object, version)| async move {
                    if let Ok(Fetched::Read(read)) = self.get(&key, &object).await {
                        index.verified(&key, &object, version.as_deref(), read);
                        reads.inc();
                    }
                })
                .buffer_unordered(4)
                .count()
                .await;
        }
    }

    /// What Helm reads of `record`, at the version it was read at.
    fn read(&self, record: Record) -> ReadRecord {
        ReadRecord {
            uid: record.uid.clone(),
            resource_version: record.resource_version.clone(),
            facts: DecodedRecord::new(record, self.limits).facts(),
        }
    }

    /// One page of `driver`'s records as whole objects, and the token of the next.
    async fn list_page(
        &self,
        driver: Driver,
        params: &ListParams,
    ) -> Result<(Vec<(serde_json::Value, &'static str)>, Option<String>), kube::Error> {
        fn page<K: serde::Serialize + Clone>(
            list: kube::core::ObjectList<K>,
            kind: &'static str,
        ) -> (Vec<(serde_json::Value, &'static str)>, Option<String>) {
            let next = list.metadata.continue_.filter(|token| !token.is_empty());
            let items =
                list.items.iter().filter_map(|item| serde_json::to_value(item).ok()).map(|v| (v, kind));
            (items.collect(), next)
        }
        Ok(match driver {
            Driver::Secret => page(Api::<Secret>::all(self.client.clone()).list(params).await?, "Secret"),
            Driver::ConfigMap => {
                page(Api::<ConfigMap>::all(self.client.clone()).list(params).await?, "ConfigMap")
            }
        })
    }

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
            Ok(Some(record)) if record.id.key == *key => Ok(Fetched::Read(self.read(record))),
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
    fn caught_up(&self, driver: crate::release::Driver, deadline: std::time::Instant) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let Some(fence) = &self.fence else { return false };
            fence.caught_up(driver, tokio::time::Instant::from_std(deadline)).await
        })
    }

    fn list<'a>(
        &'a self,
        key: &'a ReleaseKey,
        deadline: std::time::Instant,
    ) -> BoxFuture<'a, Option<Vec<IndexedRecord>>> {
        Box::pin(self.list_by(key, deadline))
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ReleaseKey,
        objects: &'a [String],
        deadline: std::time::Instant,
    ) -> BoxFuture<'a, Vec<(String, Fetched)>> {
        Box::pin(self.fetch_by(key, objects, deadline))
    }
}

impl ApiPayloadFetcher {
    async fn list_by(&self, key: &ReleaseKey, deadline: std::time::Instant) -> Option<Vec<IndexedRecord>> {
        let deadline = tokio::time::Instant::from_std(deadline);
        match tokio::time::timeout_at(deadline, self.list_release(key)).await {
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

    async fn fetch_by(
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
    }
}
