//! Reading what the index holds only by its metadata: a record's payload with a GET (once per
//! resourceVersion), a release's records with a consistent listing, all within a verdict's
//! deadline; and every payload read ahead of the verdicts, at the lowest CPU priority.
//!
//! Objects are read from the API server's text by the reader of the review path
//! ([`crate::object`]), their payloads kept as slices of the text, not through k8s-openapi's
//! types: a Secret's data would be base64-decoded into them only to be encoded again.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource as _;
use kube::api::{Api, GetParams, ListParams};

use super::RECORD_LABELS;
use super::index::{IndexedRecord, ReleaseIndex};
use super::{Fetched, Listing, PayloadFetcher, Payloads, ReadRecord};
use crate::object::ReviewObject;
use crate::release::decode::fields::borrowing_from;
use crate::release::history::PayloadStatus;
use crate::release::record::DecodedRecord;
use crate::release::{DecodeLimits, Driver, Record, ReleaseKey};
use bytes::Bytes;

/// Reads records with GETs, a few at a time, all within the verdict's deadline.
#[derive(Clone)]
pub(crate) struct ApiPayloadFetcher {
    /// The cluster.
    pub client: kube::Client,
    /// Bounds on reading payloads.
    pub limits: DecodeLimits,
    /// The watch's fence, where the guard has a namespace to write it in.
    pub fence: Option<std::sync::Arc<super::fence::Fence>>,
    /// Verdicts waiting on the API server: the read-ahead waits while there are any, and for a
    /// moment after the last.
    pub waiting: Arc<Verdicts>,
}

/// The verdicts waiting on the API server: how many now, and when the last one stopped.
#[derive(Debug, Default)]
pub(crate) struct Verdicts {
    now: AtomicUsize,
    last_ended: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Verdicts {
    /// Whether a verdict waits now or stopped within [`QUIET`]: verdicts are coming in.
    fn coming_in(&self) -> bool {
        let last_ended = *self.last_ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.now.load(Ordering::Relaxed) > 0 || last_ended.is_some_and(|ended| ended.elapsed() < QUIET)
    }
}

/// One verdict waiting on the API server, counted while it lives.
struct Waiting(Arc<Verdicts>);

impl Waiting {
    fn on(verdicts: &Arc<Verdicts>) -> Waiting {
        verdicts.now.fetch_add(1, Ordering::Relaxed);
        Waiting(verdicts.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        *self.0.last_ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(tokio::time::Instant::now());
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many GETs one verdict keeps in flight.
const PARALLEL_GETS: usize = 8;

impl std::fmt::Debug for ApiPayloadFetcher {
    // kube::Client has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiPayloadFetcher").field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// Records read per page of a listing (the read-ahead's, a release's): a page is held whole while
/// it is read (records are at most 1 MiB each).
const PAGE: u32 = 16;
/// How often the read-ahead looks for records changed since it read them.
const READ_AHEAD_EVERY: Duration = Duration::from_secs(2);
/// The longest the read-ahead waits for verdicts to stop waiting on the API server before it asks
/// for its next page anyway (so that it ends, slowly, under a load that never stops).
const MAX_YIELD: Duration = Duration::from_secs(1);
/// How long after the last verdict waiting on the API server the read-ahead still waits: a page
/// asked for between two verdicts of a steady load takes the CPU the next one needs (the API
/// server's and etcd's, on the same cores).
const QUIET: Duration = Duration::from_millis(100);
/// How often a yielding read-ahead looks again.
const YIELD_POLL: Duration = Duration::from_millis(10);

/// Work for the read-ahead's thread.
type Job = Box<dyn FnOnce() + Send>;

/// The thread the read-ahead's CPU work runs on (parsing its pages, decoding their payloads): one
/// of its own at the lowest priority (nice 19), so that the read-ahead takes the CPU verdicts
/// leave and none they want. A guard just started, still reading 100,000 payloads, then answers
/// as one that has read them all does (BENCHMARKS.md, "A restarted guard").
struct IdleThread {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl IdleThread {
    fn start() -> std::io::Result<IdleThread> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new().name("read-ahead".into()).spawn(move || {
            lower_priority();
            for job in queue {
                job();
            }
        })?;
        Ok(IdleThread { jobs })
    }

    /// Runs `work` on the thread; `None` if the thread is gone.
    async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = done.send(work());
            }))
            .ok()?;
        answer.await.ok()
    }
}

/// Makes the calling thread the last the kernel runs (nice 19: a fiftieth of a verdict's share).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
        tracing::warn!(%error, "could not lower the read-ahead's priority: it competes with verdicts for the CPU");
    }
}

/// One page of a listing as the API server sends it: the items and the next page's token.
#[derive(serde::Deserialize)]
struct Page {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default)]
    items: Vec<ReviewObject>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PageMeta {
    #[serde(default, rename = "continue")]
    next: Option<String>,
    /// The moment the listing shows (every page of one listing shows the first page's).
    #[serde(default)]
    resource_version: Option<String>,
}

impl ApiPayloadFetcher {
    /// Reads ahead of the verdicts: once the index is ready, every record's payload, a namespace
    /// and a page at a time (the namespaces with records unread then; one made later is read by
    /// what follows); then, every few seconds, the records the watch has brought a new version of. A
    /// verdict then rarely waits on a GET (it still reads what is unread when it needs it). A read
    /// counts only where the index holds the very version read. The pages' parsing and decoding
    /// run on an [`IdleThread`]; the runtime only waits for the API server.
    pub(crate) async fn read_ahead(&self, index: Arc<ReleaseIndex>, reads: crate::tally::Tally) {
        let idle = match IdleThread::start() {
            Ok(idle) => idle,
            Err(error) => {
                tracing::warn!(%error, "no thread for the read-ahead: verdicts read what they need");
                return;
            }
        };
        while !index.is_ready() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let started = std::time::Instant::now();
        'drivers: for driver in [Driver::Secret, Driver::ConfigMap] {
            for namespace in namespaces_unread(&index, driver) {
                let mut params = ListParams::default().labels(RECORD_LABELS).limit(PAGE);
                loop {
                    self.yield_to_verdicts().await;
                    let page = match self.list_page(driver, &namespace, &params).await {
                        Ok(page) => page,
                        Err(error) => {
                            tracing::warn!(?driver, %namespace, %error, "reading payloads ahead: a page failed; verdicts read what they need");
                            continue 'drivers;
                        }
                    };
                    let (index, reads, limits) = (index.clone(), reads.clone(), self.limits);
                    let next = idle.run(move || read_page(page, driver, limits, &index, &reads)).await;
                    match next {
                        Some(Ok(Some(token))) => params = params.continue_token(&token),
                        Some(Ok(None)) => break,
                        Some(Err(error)) => {
                            tracing::warn!(?driver, %namespace, %error, "reading payloads ahead: a page did not parse; verdicts read what they need");
                            continue 'drivers;
                        }
                        None => {
                            tracing::warn!("the read-ahead's thread ended: verdicts read what they need");
                            return;
                        }
                    }
                }
            }
        }
        tracing::info!(seconds = started.elapsed().as_secs(), "payloads read ahead");
        loop {
            tokio::time::sleep(READ_AHEAD_EVERY).await;
            let unread = unread(&index, 256);
            let (idle, index, reads) = (&idle, &index, &reads);
            futures::stream::iter(unread)
                .map(|(key, object, version)| async move {
                    self.yield_to_verdicts().await;
                    let Ok(Some(text)) = record_text(&self.client, key.driver, &key.namespace, &object).await
                    else {
                        return;
                    };
                    let (index, reads, limits) = (index.clone(), reads.clone(), self.limits);
                    idle.run(move || {
                        if let Ok(Fetched::Read(read)) = read_object(text, &key, limits) {
                            index.verified(&key, &object, version.as_deref(), read);
                            reads.inc();
                        }
                    })
                    .await;
                })
                .buffer_unordered(4)
                .count()
                .await;
        }
    }

    /// Waits while verdicts are coming in (at most [`MAX_YIELD`]): the read-ahead's listing
    /// loads the API server and etcd, and a verdict must not queue behind it.
    async fn yield_to_verdicts(&self) {
        let since = tokio::time::Instant::now();
        while self.waiting.coming_in() && since.elapsed() < MAX_YIELD {
            tokio::time::sleep(YIELD_POLL).await;
        }
    }

    /// One page of `driver`'s records in `namespace` (all of them, or those `params` select), as
    /// the API server's text. The read-ahead lists a namespace at a time, not all of them: the API server serves a page from etcd, which counts every key
    /// after the page in the listed range, so a page of a cluster-wide listing costs as much as
    /// the records left in the cluster (2 ms of etcd's CPU per record at 100,000 records, 0.3 ms
    /// a namespace at a time: BENCHMARKS.md, "A restarted guard").
    async fn list_page(
        &self,
        driver: Driver,
        namespace: &str,
        params: &ListParams,
    ) -> Result<Bytes, kube::Error> {
        let request = kube::core::Request::new(records_path(driver, Some(namespace)))
            .list(params)
            .map_err(kube::Error::BuildRequest)?;
        self.client.request_text(request).await.map(Bytes::from)
    }

    /// Reads one record for a verdict: what Helm reads of it, decoded apart from the runtime when
    /// large.
    async fn get(&self, key: &ReleaseKey, object: &str) -> Result<Fetched, kube::Error> {
        let Some(text) = record_text(&self.client, key.driver, &key.namespace, object).await? else {
            return Ok(Fetched::Gone);
        };
        if text.len() <= crate::release::decode::LARGE_PAYLOAD_BYTES {
            return read_object(text, key, self.limits).map_err(kube::Error::SerdeError);
        }
        let (key, limits) = (key.clone(), self.limits);
        tokio::task::spawn_blocking(move || read_object(text, &key, limits))
            .await
            .map_err(|error| kube::Error::Service(error.into()))?
            .map_err(kube::Error::SerdeError)
    }
}

/// The object `object` of `driver`'s kind in `namespace` as the API server's text; `None` when
/// there is no such object.
pub(super) async fn record_text(
    client: &kube::Client,
    driver: Driver,
    namespace: &str,
    object: &str,
) -> Result<Option<Bytes>, kube::Error> {
    let request = kube::core::Request::new(records_path(driver, Some(namespace)))
        .get(object, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    match client.request_text(request).await {
        Ok(text) => Ok(Some(Bytes::from(text))),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(error),
    }
}

/// Where `driver`'s records are, in `namespace` or in all of them.
fn records_path(driver: Driver, namespace: Option<&str>) -> String {
    match driver {
        Driver::Secret => Secret::url_path(&(), namespace),
        Driver::ConfigMap => ConfigMap::url_path(&(), namespace),
    }
}

/// What Helm reads of `record`, at the version it was read at.
fn read_record(record: Record, limits: DecodeLimits) -> ReadRecord {
    ReadRecord {
        uid: record.uid.clone(),
        resource_version: record.resource_version.clone(),
        facts: DecodedRecord::new(record, limits).facts(),
    }
}

/// One object of `key`'s driver, as the API server's text: what Helm reads of it, or gone when it
/// is no longer a record of `key` (relabelled since). Text that is not JSON, or not an object of
/// that shape, is an error: the record is then not read, never taken for gone.
fn read_object(text: Bytes, key: &ReleaseKey, limits: DecodeLimits) -> Result<Fetched, serde_json::Error> {
    let object: ReviewObject = borrowing_from(&text, || serde_json::from_slice(&text))?;
    Ok(match object.into_record(key.driver) {
        (record, true) if record.id.key == *key => Fetched::Read(read_record(record, limits)),
        _ => Fetched::Gone,
    })
}

/// One page of a listing of `driver`'s records: each record's payload as Helm reads it, and the
/// next page's token. Objects that are not records (labels changed since) are left out.
fn read_listing_page(
    text: Bytes,
    driver: Driver,
    limits: DecodeLimits,
) -> Result<(Vec<IndexedRecord>, PageMeta), serde_json::Error> {
    let page: Page = borrowing_from(&text, || serde_json::from_slice(&text))?;
    let records = page
        .items
        .into_iter()
        .map(|object| object.into_record(driver))
        .filter(|(_, is_record)| *is_record)
        .map(|(record, _)| {
            let (key, object) = (record.id.key.clone(), record.object_name.clone());
            let read = read_record(record, limits);
            IndexedRecord {
                key,
                object,
                uid: read.uid,
                facts: read.facts,
                resource_version: read.resource_version,
            }
        })
        .collect();
    let mut meta = page.metadata;
    meta.next = meta.next.filter(|token| !token.is_empty());
    Ok((records, meta))
}

/// Reads a page of the read-ahead's listing into `index`; the next page's token.
fn read_page(
    text: Bytes,
    driver: Driver,
    limits: DecodeLimits,
    index: &ReleaseIndex,
    reads: &crate::tally::Tally,
) -> Result<Option<String>, serde_json::Error> {
    let (records, meta) = read_listing_page(text, driver, limits)?;
    for record in records {
        let version = record.resource_version.clone();
        let read =
            ReadRecord { uid: record.uid, resource_version: record.resource_version, facts: record.facts };
        index.verified(&record.key, &record.object, version.as_deref(), read);
        reads.inc();
    }
    Ok(meta.next)
}

impl ApiPayloadFetcher {
    /// The release's records as stored now, metadata only (a consistent read).
    async fn list_release_metadata(&self, key: &ReleaseKey) -> Result<Listing, kube::Error> {
        let params = ListParams::default().labels(&format!("{RECORD_LABELS},name={}", key.release));
        let client = self.client.clone();
        let (metas, resource_version): (Vec<kube::core::ObjectMeta>, _) = match key.driver {
            Driver::Secret => {
                let listed = Api::<Secret>::namespaced(client, &key.namespace).list_metadata(&params).await?;
                (
                    listed.items.into_iter().map(|item| item.metadata).collect(),
                    listed.metadata.resource_version,
                )
            }
            Driver::ConfigMap => {
                let listed =
                    Api::<ConfigMap>::namespaced(client, &key.namespace).list_metadata(&params).await?;
                (
                    listed.items.into_iter().map(|item| item.metadata).collect(),
                    listed.metadata.resource_version,
                )
            }
        };
        let records = metas
            .iter()
            .filter_map(|meta| IndexedRecord::from_meta(key.driver, meta))
            .filter(|record| record.key == *key)
            .collect();
        Ok(Listing { records, resource_version })
    }

    /// The release's records as stored now, payloads read: a consistent listing (the API server's
    /// watch cache brought up to etcd's revision), a page of [`PAGE`] records at a time so that a
    /// long history is never held whole. The query Helm itself makes of a release's history.
    async fn list_release(&self, key: &ReleaseKey) -> Result<Listing, kube::Error> {
        let selector = format!("{RECORD_LABELS},name={}", key.release);
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        let mut listed = Listing::default();
        loop {
            let text = self.list_page(key.driver, &key.namespace, &params).await?;
            // Decoded apart from the runtime when large, as a GET's record is.
            let (records, meta) = if text.len() <= crate::release::decode::LARGE_PAYLOAD_BYTES {
                read_listing_page(text, key.driver, self.limits)
            } else {
                let (driver, limits) = (key.driver, self.limits);
                let page = move || read_listing_page(text, driver, limits);
                tokio::task::spawn_blocking(page).await.map_err(|error| kube::Error::Service(error.into()))?
            }
            .map_err(kube::Error::SerdeError)?;
            listed.records.extend(records.into_iter().filter(|record| record.key == *key));
            if listed.resource_version.is_none() {
                listed.resource_version = meta.resource_version;
            }
            match meta.next {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(listed),
            }
        }
    }
}

impl PayloadFetcher for ApiPayloadFetcher {
    fn caught_up(&self, driver: crate::release::Driver, deadline: std::time::Instant) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let Some(fence) = &self.fence else { return false };
            let _waiting = Waiting::on(&self.waiting);
            fence.caught_up(driver, tokio::time::Instant::from_std(deadline)).await
        })
    }

    fn list<'a>(
        &'a self,
        key: &'a ReleaseKey,
        payloads: Payloads,
        deadline: std::time::Instant,
    ) -> BoxFuture<'a, Option<Listing>> {
        Box::pin(self.list_by(key, payloads, deadline))
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
    async fn list_by(
        &self,
        key: &ReleaseKey,
        payloads: Payloads,
        deadline: std::time::Instant,
    ) -> Option<Listing> {
        let _waiting = Waiting::on(&self.waiting);
        let deadline = tokio::time::Instant::from_std(deadline);
        let listing = async {
            match payloads {
                Payloads::Listed => self.list_release(key).await,
                Payloads::Left => self.list_release_metadata(key).await,
            }
        };
        match tokio::time::timeout_at(deadline, listing).await {
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
        let _waiting = Waiting::on(&self.waiting);
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

/// Up to `limit` records anywhere whose payload the index has not read at their current
/// resourceVersion: what the read-ahead reads next.
fn unread(index: &ReleaseIndex, limit: usize) -> Vec<(ReleaseKey, String, Option<String>)> {
    let mut unread = Vec::new();
    index.each_release(|key, records| {
        for record in
            records.filter(|record| record.visible && record.facts.payload == PayloadStatus::NotLoaded)
        {
            if unread.len() >= limit {
                return ControlFlow::Break(());
            }
            unread.push((key.clone(), record.object.to_owned(), record.resource_version.map(str::to_owned)));
        }
        ControlFlow::Continue(())
    });
    unread
}

/// The namespaces holding a record of `driver` whose payload is unread, in order: what the
/// read-ahead lists first.
fn namespaces_unread(index: &ReleaseIndex, driver: Driver) -> Vec<String> {
    let mut namespaces = std::collections::BTreeSet::new();
    index.each_release(|key, mut records| {
        if key.driver == driver && records.any(|record| record.facts.payload == PayloadStatus::NotLoaded) {
            namespaces.insert(key.namespace.clone());
        }
        ControlFlow::Continue(())
    });
    namespaces.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::Status;
    use crate::release::history::PayloadStatus;
    use serde_json::{Value, json};

    /// A record as the real API server stored it (Helm 4's revision 3 of demo/web, deployed).
    fn stored() -> Value {
        let review: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/admission/01-helm4-install-upgrade/006-validate-update-secret-sh.helm.release.v1.web.v3.json"
        ))
        .unwrap();
        review["request"]["object"].clone()
    }

    fn key() -> ReleaseKey {
        ReleaseKey { driver: Driver::Secret, namespace: "demo".into(), release: "web".into() }
    }

    /// A live index that knows the record by its metadata alone, as the watch brings it.
    fn watched(object: &Value) -> ReleaseIndex {
        let index = ReleaseIndex::new(super::super::SourceKind::Live {
            tombstone_ttl: std::time::Duration::from_secs(60),
        });
        let meta = serde_json::from_value(object["metadata"].clone()).unwrap();
        index.upsert(IndexedRecord::from_meta(Driver::Secret, &meta).unwrap());
        index
    }

    /// What the read-ahead reads next: visible records not read yet, up to its limit; the
    /// namespaces it lists first: those of the driver holding one unread.
    #[test]
    fn the_read_ahead_queues_are_the_unread_records_and_their_namespaces() {
        use crate::release::history::RevisionFacts;
        let index = ReleaseIndex::new(super::super::SourceKind::Live {
            tombstone_ttl: std::time::Duration::from_secs(60),
        });
        let facts = |revision, payload| RevisionFacts {
            revision,
            payload,
            label: Some(Status::Deployed),
            stored_at: None,
            field_conflict: false,
            namespace_apart: false,
        };
        let record = |driver, namespace: &str, revision, payload| IndexedRecord {
            key: ReleaseKey { driver, namespace: namespace.into(), release: "web".into() },
            object: format!("sh.helm.release.v1.web.v{revision}"),
            uid: None,
            facts: facts(revision, payload),
            resource_version: Some(revision.to_string()),
        };
        index.upsert(record(Driver::Secret, "a", 1, PayloadStatus::NotLoaded));
        index.upsert(record(Driver::Secret, "a", 2, PayloadStatus::NotLoaded));
        index.upsert(record(Driver::Secret, "b", 1, PayloadStatus::Decoded(Status::Deployed)));
        index.upsert(record(Driver::ConfigMap, "c", 1, PayloadStatus::NotLoaded));
        let hidden =
            super::super::IndexChange::Delete { object: "sh.helm.release.v1.web.v2".into(), uid: None };
        index.apply(&record(Driver::Secret, "a", 2, PayloadStatus::NotLoaded).key, hidden);
        let mut queued: Vec<(String, String)> =
            unread(&index, 10).into_iter().map(|(key, object, _)| (key.namespace, object)).collect();
        queued.sort();
        assert_eq!(
            queued,
            [
                ("a".to_owned(), "sh.helm.release.v1.web.v1".to_owned()),
                ("c".to_owned(), "sh.helm.release.v1.web.v1".to_owned())
            ],
            "read, and hidden by an approved deletion, are not queued"
        );
        assert_eq!(unread(&index, 1).len(), 1, "no more than the limit");
        assert_eq!(namespaces_unread(&index, Driver::Secret), ["a"]);
        assert_eq!(namespaces_unread(&index, Driver::ConfigMap), ["c"]);
    }

    #[test]
    fn a_page_read_ahead_leaves_the_payloads_read_in_the_index_and_names_the_next() {
        let object = stored();
        let index = watched(&object);
        assert_eq!(index.history(&key())[0].payload, PayloadStatus::NotLoaded);
        let reads = crate::tally::Tally::default();
        // As the API server lists: items without their kind.
        let mut item = object.clone();
        item.as_object_mut().unwrap().remove("kind");
        let page = json!({"kind": "SecretList", "metadata": {"continue": "next-page"}, "items": [item]});
        let next =
            read_page(Bytes::from(page.to_string()), Driver::Secret, DecodeLimits::default(), &index, &reads);
        assert_eq!(next.unwrap().as_deref(), Some("next-page"));
        assert_eq!(index.history(&key())[0].payload, PayloadStatus::Decoded(Status::Deployed));
        assert_eq!(reads.get(), 1);

        let last = json!({"metadata": {"continue": ""}, "items": []}).to_string();
        assert_eq!(
            read_page(Bytes::from(last), Driver::Secret, DecodeLimits::default(), &index, &reads).unwrap(),
            None
        );
        assert!(
            read_page(Bytes::from_static(b"<html>"), Driver::Secret, DecodeLimits::default(), &index, &reads)
                .is_err()
        );
    }

    #[test]
    fn an_object_read_for_a_verdict_is_read_gone_or_an_error_never_a_guess() {
        let object = stored();
        let limits = DecodeLimits::default();
        match read_object(Bytes::from(object.to_string()), &key(), limits).unwrap() {
            Fetched::Read(read) => {
                assert_eq!(read.facts.payload, PayloadStatus::Decoded(Status::Deployed));
                assert_eq!(read.resource_version.as_deref(), Some("228"));
            }
            Fetched::Gone => panic!("the record is there"),
        }
        let mut relabelled = object.clone();
        relabelled["metadata"]["labels"]["name"] = json!("other");
        assert_eq!(read_object(Bytes::from(relabelled.to_string()), &key(), limits).unwrap(), Fetched::Gone);
        assert!(
            read_object(Bytes::from_static(b"{truncated"), &key(), limits).is_err(),
            "not JSON: not read, not gone"
        );
    }

    #[tokio::test]
    async fn the_read_ahead_decodes_on_a_thread_of_the_lowest_priority() {
        let idle = IdleThread::start().unwrap();
        let nice = || rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let (theirs, name) =
            idle.run(move || (nice(), std::thread::current().name().map(str::to_owned))).await.unwrap();
        assert_eq!(theirs, 19);
        assert_eq!(name.as_deref(), Some("read-ahead"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_read_ahead_waits_while_verdicts_come_in_but_not_for_ever() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let fetcher = Arc::new(ApiPayloadFetcher {
            client: kube::Client::try_from(config).unwrap(),
            limits: DecodeLimits::default(),
            fence: None,
            waiting: Arc::default(),
        });
        let started = tokio::time::Instant::now();
        fetcher.yield_to_verdicts().await;
        assert_eq!(started.elapsed(), Duration::ZERO, "no verdict waits: no wait");

        let verdict = Waiting::on(&fetcher.waiting);
        let yielding = tokio::spawn({
            let fetcher = fetcher.clone();
            async move {
                fetcher.yield_to_verdicts().await;
                tokio::time::Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!yielding.is_finished(), "a verdict waits: the read-ahead waits");
        drop(verdict);
        let answered = tokio::time::Instant::now();
        let resumed = yielding.await.unwrap();
        assert!(resumed - answered >= QUIET, "a moment after it is answered, in case another comes");
        assert!(resumed - answered <= QUIET + YIELD_POLL, "and then goes on");

        let _verdicts_for_ever = Waiting::on(&fetcher.waiting);
        let started = tokio::time::Instant::now();
        fetcher.yield_to_verdicts().await;
        assert!(started.elapsed() >= MAX_YIELD && started.elapsed() <= MAX_YIELD + YIELD_POLL);
    }
}
