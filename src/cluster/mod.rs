//! The guard's view of the cluster: the [`index::ReleaseIndex`] every verdict reads, and the
//! sources that fill it: [`snapshot`] from a dump file, [`watch`] from kube-rs watchers (through
//! [`feed`], which turns watcher events into index updates). [`connect`] reaches the cluster,
//! [`fetch`] reads what a verdict needs beyond the index, [`freshness`] shows the index current
//! before a verdict rests on it (a [`fence`] round, proof that the watch has caught up, or a
//! listing; then the payloads), [`listing`] lists whole records for the CLI; [`coordination`]
//! (how replicas agree; [`claim_books`], their claims read from a watch), [`events`] (Kubernetes
//! Events) and [`helmcharts`] (K3s's HelmCharts) are the rest of what the guard keeps of the
//! cluster; [`break_glass`] asks the API server's authorizer who may break glass.

pub(crate) mod break_glass;
pub mod census;
pub(crate) mod changes;
pub(crate) mod claim_books;
pub(crate) mod connect;
pub mod coordination;
pub(crate) mod events;
pub(crate) mod feed;
pub(crate) mod fence;
pub(crate) mod fetch;
pub(crate) mod freshness;
pub(crate) mod helmcharts;
pub(crate) mod index;
pub(crate) mod listing;
pub(crate) mod namespaces;
pub(crate) mod registration;
pub(crate) mod rounds;
pub mod snapshot;
pub(crate) mod unlock;
pub(crate) mod watch;
pub(crate) mod writers;

pub use break_glass::{Asker, BreakGlassAuthority};
pub(crate) use coordination::DeleteCoordinator;

/// Helm selects its records by label alone (any Secret type, any name): so does the guard.
pub(crate) const RECORD_LABELS: &str = "owner=helm";
pub(crate) use index::ReleaseView;
pub use index::{IndexChange, IndexedRecord, ReleaseIndex, SourceKind};
pub use namespaces::NamespaceInfo;

use std::time::Instant;

use futures::future::BoxFuture;

use crate::release::ReleaseKey;
use crate::release::history::RevisionFacts;

/// One record as a GET read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    /// The uid of the object read (a name can be reused by a new object).
    pub uid: Option<String>,
    /// The resourceVersion the record was read at.
    pub resource_version: Option<String>,
    /// What it says, as Helm reads it.
    pub facts: RevisionFacts,
}

/// What reading one record's payload found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The payload as Helm reads it.
    Read(ReadRecord),
    /// No record of the release has that name any more (its deletion not yet seen by the watch).
    Gone,
}

/// What a listing of a release carries: its records' metadata alone (the index reads what it
/// has not read with GETs), or their payloads too (a release mostly unread: one call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payloads {
    /// Metadata only: a small answer.
    Left,
    /// The whole records, as Helm reads them.
    Listed,
}

/// A consistent listing of one release's records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The release's records as the listing found them.
    pub records: Vec<IndexedRecord>,
    /// The moment the listing shows (its resourceVersion): the index's view may be newer than
    /// it (the watch went on while the listing was read). `None`: what is stored now.
    pub resource_version: Option<String>,
}

/// Reads the payloads of records the index knows only by their metadata, when a verdict needs
/// what Helm sees; every read shares one deadline. A record left out of the answer could not be
/// read in time. Async: a verdict waiting on a read holds no thread.
pub trait PayloadFetcher: Send + Sync + std::fmt::Debug {
    /// Reads `objects` of the release `key`, giving up at `deadline`.
    fn fetch<'a>(
        &'a self,
        key: &'a ReleaseKey,
        objects: &'a [String],
        deadline: Instant,
    ) -> BoxFuture<'a, Vec<(String, Fetched)>>;

    /// Lists the release's records as they are stored now (a consistent read), for a verdict that
    /// must not rest on a watch that may lag: each with what Helm reads of its payload where the
    /// listing carries it (the API server's does), else known by its labels alone; `None` when
    /// the API did not answer by `deadline`.
    fn list<'a>(
        &'a self,
        key: &'a ReleaseKey,
        payloads: Payloads,
        deadline: Instant,
    ) -> BoxFuture<'a, Option<Listing>>;

    /// Whether the index holds every write to `driver`'s records completed before the call (a
    /// fence round, [`fence`]), so that no listing is needed; false when that cannot be shown
    /// by `deadline` (or there is no fence).
    fn caught_up(&self, _driver: crate::release::Driver, _deadline: Instant) -> BoxFuture<'_, bool> {
        Box::pin(std::future::ready(false))
    }
}

/// The record stored as `driver`'s object `namespace/name`, read as a review's object is (the
/// same reader, so that the two compare): `Ok(None)` when there is none. What the recycle bin
/// copies, and so the only content a copy may have.
pub(crate) async fn stored_record(
    client: &kube::Client,
    driver: crate::release::Driver,
    namespace: &str,
    name: &str,
) -> Result<Option<crate::release::Record>, kube::Error> {
    let Some(text) = fetch::record_text(client, driver, namespace, name).await? else { return Ok(None) };
    let object: crate::object::ReviewObject =
        crate::release::decode::fields::borrowing_from(&text, || serde_json::from_slice(&text))
            .map_err(kube::Error::SerdeError)?;
    Ok(Some(object.into_record(driver).0))
}

/// The uid and resourceVersion of the object stored as `kind` `namespace/name` (`Secret`, `ConfigMap`, or a
/// cluster-scoped `Namespace`), read with a metadata-only GET: `Ok(None)` when there is none (or
/// the kind is none of those). What tells an object the API server holds from one a review only
/// names: the recycle bin and the Event writer act on the first alone.
pub(crate) async fn stored_identity(
    client: &kube::Client,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<(Option<String>, Option<String>)>, kube::Error> {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
    use kube::Api;
    let client = client.clone();
    let meta = match kind {
        "Secret" => {
            Api::<Secret>::namespaced(client, namespace).get_metadata_opt(name).await?.map(|m| m.metadata)
        }
        "ConfigMap" => {
            Api::<ConfigMap>::namespaced(client, namespace).get_metadata_opt(name).await?.map(|m| m.metadata)
        }
        "Namespace" => Api::<Namespace>::all(client).get_metadata_opt(name).await?.map(|m| m.metadata),
        _ => None,
    };
    Ok(meta.map(|meta| (meta.uid, meta.resource_version)))
}
