//! The snapshot source: a dump file (the format of `scan --from-file`, optionally with Namespace
//! and HelmChart objects) loaded into the index, for running the guard without a cluster.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::index::ReleaseIndex;
use super::namespaces::NamespaceInfo;
use crate::release::objects::parse_objects;
use crate::release::scan::{Problem, collect_records};
use crate::release::{DecodeLimits, Driver};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Summary of a loaded snapshot.
#[derive(Debug)]
pub struct Loaded {
    /// Records loaded.
    pub records: usize,
    /// Namespaces loaded.
    pub namespaces: usize,
    /// HelmCharts loaded.
    pub charts: usize,
    /// What could not be read (it is not in the index).
    pub problems: Vec<Problem>,
}

/// Loads a dump into the index and marks it ready.
pub fn load(index: &ReleaseIndex, path: &Path, limits: DecodeLimits) -> anyhow::Result<Loaded> {
    let text = std::fs::read(path).with_context(|| format!("reading snapshot {}", path.display()))?;
    let objects = parse_objects(&text).with_context(|| format!("snapshot {}", path.display()))?;
    let (records, problems) = collect_records(&objects, limits);
    let namespaces: Vec<(String, NamespaceInfo)> = objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .filter_map(|o| {
            let meta: ObjectMeta = serde_json::from_value(o.get("metadata")?.clone()).ok()?;
            let mut info = NamespaceInfo::from_meta(&meta);
            info.terminating |= o.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating");
            Some((meta.name?, info))
        })
        .collect();
    let charts: Vec<super::helmcharts::HelmChart> = objects
        .iter()
        .filter(|o| o["kind"] == super::helmcharts::KIND && o["apiVersion"] == super::helmcharts::API_VERSION)
        .filter_map(|o| super::helmcharts::HelmChart::from_object(&serde_json::from_value(o.clone()).ok()?))
        .collect();
    let loaded =
        Loaded { records: records.len(), namespaces: namespaces.len(), charts: charts.len(), problems };
    index.charts().replace(charts);
    // A dump shows the cluster as of its newest record.
    let newest =
        records.iter().filter_map(|r| super::rounds::revision(r.record.resource_version.as_deref())).max();
    index.replace_records(
        &[Driver::Secret, Driver::ConfigMap],
        records.iter().map(|r| super::index::IndexedRecord {
            key: r.record.id.key.clone(),
            object: r.record.object_name.clone(),
            uid: r.record.uid.clone(),
            facts: r.facts(),
            resource_version: r.record.resource_version.clone(),
        }),
        newest.unwrap_or(0),
    );
    index.namespaces().replace(namespaces);
    index.set_ready(true);
    Ok(loaded)
}
