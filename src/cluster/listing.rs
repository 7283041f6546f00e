//! Whole listings for the CLI (`scan`, `inspect`, `repair`): records with their payloads, and
//! namespaces' metadata.

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams};

use super::RECORD_LABELS;

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

/// The recycle bin's filter: the copies of one namespace's releases, or of one release.
fn bin_selector(namespace: Option<&str>, release: Option<&str>) -> String {
    use crate::release::recycled::{BIN_SELECTOR, LABEL_NAMESPACE, LABEL_RELEASE};
    let mut selector = BIN_SELECTOR.to_owned();
    if let Some(namespace) = namespace {
        selector += &format!(",{LABEL_NAMESPACE}={namespace}");
    }
    if let Some(release) = release {
        selector += &format!(",{LABEL_RELEASE}={release}");
    }
    selector
}

/// The copies in the recycle bin in `bin_namespace` (metadata only), newest first.
pub async fn list_bin(
    client: &kube::Client,
    bin_namespace: &str,
    namespace: Option<&str>,
    release: Option<&str>,
) -> Result<Vec<crate::release::recycled::BinEntry>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), bin_namespace);
    let params = ListParams::default().labels(&bin_selector(namespace, release));
    let listed = secrets.list_metadata(&params).await?;
    let mut entries: Vec<_> = listed
        .items
        .iter()
        .filter_map(|item| crate::release::recycled::BinEntry::from_meta(&item.metadata))
        .collect();
    entries.sort_by(|a, b| b.kept_at.cmp(&a.kept_at).then(a.name.cmp(&b.name)));
    Ok(entries)
}

/// The copies of one release in the recycle bin, read whole, for `restore`; a Secret that is no
/// copy is named with why.
pub async fn read_bin(
    client: &kube::Client,
    bin_namespace: &str,
    namespace: &str,
    release: &str,
) -> Result<Vec<Result<crate::release::recycled::RecycledCopy, String>>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), bin_namespace);
    let params = ListParams::default().labels(&bin_selector(Some(namespace), Some(release)));
    let listed = secrets.list(&params).await?;
    Ok(listed
        .items
        .into_iter()
        .map(|secret| {
            let data = secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            let name = secret.metadata.name.clone().unwrap_or_default();
            crate::release::recycled::RecycledCopy::read(&secret.metadata, &data)
                .map_err(|error| format!("{bin_namespace}/{name}: {error}"))
        })
        .collect())
}
