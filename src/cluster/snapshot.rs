//! The snapshot source: a dump file (the format of `scan --from-file`, optionally with Namespace
//! objects) loaded into the index, for running the guard without a cluster.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::index::{NamespaceInfo, ReleaseIndex};
use crate::policy::MODE_LABEL;
use crate::release::objects::parse_objects;
use crate::release::scan::{Problem, collect_records};
use crate::release::{DecodeLimits, Driver};

/// What a Namespace object contributes to verdicts.
pub fn namespace_info(labels: Option<&Value>, deleting: bool) -> NamespaceInfo {
    NamespaceInfo {
        mode: labels.and_then(|l| l.get(MODE_LABEL)).and_then(Value::as_str).and_then(|m| m.parse().ok()),
        terminating: deleting,
    }
}

/// Summary of a loaded snapshot.
#[derive(Debug)]
pub struct Loaded {
    pub records: usize,
    pub namespaces: usize,
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
            let name = o.pointer("/metadata/name")?.as_str()?.to_owned();
            let deleting = o.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
                || o.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating");
            Some((name, namespace_info(o.pointer("/metadata/labels"), deleting)))
        })
        .collect();
    let loaded = Loaded { records: records.len(), namespaces: namespaces.len(), problems };
    index.replace_records(
        &[Driver::Secret, Driver::ConfigMap],
        records.iter().map(|r| (r.record.id.clone(), r.facts())),
    );
    index.replace_namespaces(namespaces);
    index.set_ready(true);
    Ok(loaded)
}
