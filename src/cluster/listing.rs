//! Whole listings for the CLI (`scan`, `inspect`, `repair`): records with their payloads, and
//! namespaces' metadata.

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams};

use super::RECORD_LABELS;

/// Lists the namespaces' metadata for `scan` (labels and managedFields): all, or the one named.
pub(crate) async fn list_namespaces(
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
pub(crate) async fn list_records(
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
