//! The recycle bin's copies of records the guard let go (POLICY.md, "The recycle bin"): how a
//! copy is written (a Secret in the guard's namespace), read back, and which copies the bounds
//! evict. No I/O: [`super::api`] writes, sweeps and lists, [`super::restore`] plans.
//!
//! A copy holds the record as the DELETE review carried it: its `data` keys under `data.<key>`
//! (a Secret's values as the API's base64, unchanged; a ConfigMap's as text), so that a record
//! at the 1 MiB Kubernetes allows still fits; and in the annotation `helm-guard.io/object` the
//! rest of what recreating it takes (kind, namespace, name, type, labels, annotations) and what
//! identified it (uid, resourceVersion). Labels say whose copy it is, so that the bin is listed
//! and bounded without reading a payload; the size is an annotation.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::release::record::{Driver, Record};

/// Every copy carries these labels (the bin is listed by them).
pub(crate) const BIN_SELECTOR: &str =
    "app.kubernetes.io/managed-by=helm-guard,helm-guard.io/recycle-bin=copy";
/// The label with the release's namespace.
pub(crate) const LABEL_NAMESPACE: &str = "helm-guard.io/release-namespace";
/// The label with the release's name.
pub(crate) const LABEL_RELEASE: &str = "helm-guard.io/release";
/// The label with the revision.
pub(crate) const LABEL_REVISION: &str = "helm-guard.io/revision";
/// The label with the driver (`secret`, `configmap`).
pub(crate) const LABEL_DRIVER: &str = "helm-guard.io/driver";
/// The label with the reason code of the verdict that let the record go.
pub(crate) const LABEL_REASON: &str = "helm-guard.io/reason";
/// The label that says whether Helm can read the copied record (`true`/`false`): copies of
/// records it cannot read are bounded apart, whatever let them go.
pub(crate) const LABEL_READABLE: &str = "helm-guard.io/readable";
/// The label with when the copy was made (Unix seconds): the bounds evict the oldest first.
pub(crate) const LABEL_KEPT_AT: &str = "helm-guard.io/kept-at";
/// The annotation naming who deleted the record (user names are no label values).
pub(crate) const ANNOTATION_REQUESTER: &str = "helm-guard.io/requester";
/// The annotation with the copy's size in bytes (what the byte bounds count).
pub(crate) const ANNOTATION_BYTES: &str = "helm-guard.io/bytes";
/// The annotation naming the original, for people reading the bin.
pub(crate) const ANNOTATION_ORIGINAL: &str = "helm-guard.io/original";
/// The copies' Secret type.
pub(crate) const COPY_TYPE: &str = "helm-guard.io/recycled-record";
/// The annotation holding [`KeptObject`], as JSON.
pub(crate) const ANNOTATION_OBJECT: &str = "helm-guard.io/object";
/// The prefix of the data keys holding the original's data.
/// SHA-256 of the copy as it was kept (its `helm-guard.io/object` and data): `restore` refuses a
/// copy that no longer matches it.
pub(crate) const ANNOTATION_DIGEST: &str = "helm-guard.io/sha256";
const DATA_PREFIX: &str = "data.";

/// The digest of a copy: its object annotation and each data value as the record held it (a
/// Secret's as the API's base64, a ConfigMap's as text), by key.
fn copy_digest<'a>(object: &str, data: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut hash = sha2::Sha256::new();
    hash.update(b"helm-guard recycle-bin copy v1\n");
    hash.update(object.len().to_le_bytes());
    hash.update(object.as_bytes());
    let sorted: BTreeMap<&str, &[u8]> = data.into_iter().collect();
    for (key, value) in sorted {
        for part in [key.as_bytes(), value] {
            hash.update(part.len().to_le_bytes());
            hash.update(part);
        }
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Why and by whom a record was let go, as the copy records it.
#[derive(Debug, Clone, Copy)]
pub struct Keeping<'a> {
    /// The reason code of the verdict (`break-glass`, `exempt`, or the refusal a mode let pass).
    pub reason: &'a str,
    /// Who deleted it.
    pub requester: &'a str,
    /// When (Unix seconds).
    pub at: i64,
    /// Whether Helm can read the record's payload: copies of records it cannot are bounded apart.
    pub readable: bool,
}

/// What recreating the record takes besides its data, and what identified it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeptObject {
    /// `Secret` or `ConfigMap`.
    pub kind: String,
    /// The record's namespace.
    pub namespace: String,
    /// The record's name.
    pub name: String,
    /// The uid it had.
    #[serde(default)]
    pub uid: Option<String>,
    /// The resourceVersion it was deleted at.
    #[serde(default)]
    pub resource_version: Option<String>,
    /// A Secret's type.
    #[serde(default, rename = "type")]
    pub secret_type: Option<String>,
    /// Its labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl KeptObject {
    fn of(record: &Record) -> KeptObject {
        KeptObject {
            kind: record.id.key.driver.kind().to_owned(),
            namespace: record.id.key.namespace.clone(),
            name: record.object_name.clone(),
            uid: record.uid.clone(),
            resource_version: record.resource_version.clone(),
            secret_type: record.secret_type.clone(),
            labels: record.labels.clone(),
            annotations: record.annotations.clone(),
        }
    }

    /// The driver the original was kept by.
    pub(crate) fn driver(&self) -> Option<Driver> {
        match self.kind.as_str() {
            "Secret" => Some(Driver::Secret),
            "ConfigMap" => Some(Driver::ConfigMap),
            _ => None,
        }
    }
}

/// Whether `a` and `b` make the same copy: the same object, version, labels, annotations and data.
pub(crate) fn same_copy(a: &Record, b: &Record) -> bool {
    KeptObject::of(a) == KeptObject::of(b) && a.payload == b.payload && a.other_data == b.other_data
}

/// The copy's name: fixed length, the same for the same object at the same version (a deletion
/// retried finds its copy made), never that of another.
pub(crate) fn copy_name(record: &Record) -> String {
    let identity = format!(
        "{}/{}/{}/{}/{}",
        record.id.key.driver,
        record.id.key.namespace,
        record.object_name,
        record.uid.as_deref().unwrap_or_default(),
        record.resource_version.as_deref().unwrap_or_default()
    );
    let digest = sha2::Sha256::digest(identity);
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("helm-guard-recycled-{hex}")
}

#[derive(Serialize)]
struct CopyBody<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    metadata: CopyMeta,
    #[serde(rename = "type")]
    type_: &'static str,
    data: BTreeMap<String, &'a str>,
    #[serde(rename = "stringData")]
    string_data: BTreeMap<String, &'a str>,
}

#[derive(Serialize)]
struct CopyMeta {
    name: String,
    namespace: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// Why a record cannot be copied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    /// The payload is not text (no API server sends such a record).
    #[error("its data.release is not text")]
    NotText,
}

/// The copy of `record`, kept in `bin_namespace`, as the body of a create: the payload is
/// written from the record's own bytes, not decoded or built again. With its size in bytes.
pub(crate) fn copy_body(
    record: &Record,
    keeping: &Keeping<'_>,
    bin_namespace: &str,
) -> Result<Vec<u8>, CopyError> {
    let object = serde_json::to_string(&KeptObject::of(record)).unwrap_or_default();
    let payload =
        record.payload.as_deref().map(std::str::from_utf8).transpose().map_err(|_| CopyError::NotText)?;
    let values = payload.map(|p| ("release", p)).into_iter();
    let values = values.chain(record.other_data.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let (mut data, mut string_data) = (BTreeMap::new(), BTreeMap::new());
    let mut bytes = object.len();
    for (key, value) in values {
        bytes += value.len();
        let key = format!("{DATA_PREFIX}{key}");
        // A Secret's values are base64 already, as its copy's must be; a ConfigMap's are text.
        match record.id.key.driver {
            Driver::Secret => data.insert(key, value),
            Driver::ConfigMap => string_data.insert(key, value),
        };
    }
    // Over the values as written: nothing decoded on the DELETE's path.
    let written =
        data.iter().chain(&string_data).map(|(k, v)| (k.trim_start_matches(DATA_PREFIX), v.as_bytes()));
    let digest = copy_digest(&object, written);
    let key = &record.id.key;
    let labels = [
        ("app.kubernetes.io/managed-by", "helm-guard".to_owned()),
        ("helm-guard.io/recycle-bin", "copy".to_owned()),
        (LABEL_NAMESPACE, key.namespace.clone()),
        (LABEL_RELEASE, key.release.clone()),
        (LABEL_REVISION, record.id.revision.to_string()),
        (LABEL_DRIVER, key.driver.to_string()),
        (LABEL_REASON, keeping.reason.to_owned()),
        (LABEL_READABLE, keeping.readable.to_string()),
        (LABEL_KEPT_AT, keeping.at.to_string()),
    ];
    let annotations = [
        (ANNOTATION_REQUESTER, keeping.requester.to_owned()),
        (ANNOTATION_BYTES, bytes.to_string()),
        (ANNOTATION_ORIGINAL, record.describe()),
        (ANNOTATION_OBJECT, object),
        (ANNOTATION_DIGEST, digest),
    ];
    let body = CopyBody {
        api_version: "v1",
        kind: "Secret",
        metadata: CopyMeta {
            name: copy_name(record),
            namespace: bin_namespace.to_owned(),
            labels: labels.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            annotations: annotations.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        },
        type_: COPY_TYPE,
        data,
        string_data,
    };
    Ok(serde_json::to_vec(&body).unwrap_or_default())
}

/// One copy in the bin, as its metadata tells (what the bounds and listings need).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct BinEntry {
    /// The copy's Secret name.
    pub name: String,
    /// The release's namespace.
    pub namespace: String,
    /// The release.
    pub release: String,
    /// The driver.
    pub driver: String,
    /// The revision.
    pub revision: u32,
    /// The reason code that let it go.
    pub reason: String,
    /// Whether Helm can read the copied record.
    pub readable: bool,
    /// Who deleted it.
    pub requester: String,
    /// When it was kept (Unix seconds).
    pub kept_at: i64,
    /// Its size.
    pub bytes: u64,
}

impl BinEntry {
    /// Reads a copy's metadata; `None` for a Secret that is not one.
    pub(crate) fn from_meta(meta: &ObjectMeta) -> Option<BinEntry> {
        let labels = meta.labels.as_ref()?;
        let label = |key: &str| labels.get(key).cloned();
        let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).cloned();
        Some(BinEntry {
            name: meta.name.clone()?,
            namespace: label(LABEL_NAMESPACE)?,
            release: label(LABEL_RELEASE)?,
            driver: label(LABEL_DRIVER).unwrap_or_default(),
            revision: label(LABEL_REVISION)?.parse().ok()?,
            reason: label(LABEL_REASON).unwrap_or_default(),
            // Copies kept before the label: only those let go as unreadable (D3) are known to be.
            readable: label(LABEL_READABLE).map_or_else(
                || label(LABEL_REASON).as_deref() != Some(crate::policy::Reason::UndecodableRecord.as_str()),
                |readable| readable != "false",
            ),
            requester: annotation(ANNOTATION_REQUESTER).unwrap_or_default(),
            // A copy whose time does not read is the oldest: it goes first.
            kept_at: label(LABEL_KEPT_AT).and_then(|t| t.parse().ok()).unwrap_or(0),
            bytes: annotation(ANNOTATION_BYTES).and_then(|b| b.parse().ok()).unwrap_or(0),
        })
    }

    /// The release the copy is of, and whether it is a copy of a record Helm cannot read: those
    /// are bounded apart from the release's readable copies and go first, so that junk labelled
    /// with a release's name, created and deleted, cannot evict its last good revision's copy.
    fn release_of(&self) -> (&str, &str, &str, bool) {
        (&self.namespace, &self.release, &self.driver, self.is_unreadable())
    }

    /// Whether the copy is of a record Helm cannot read, whatever let it go (a break-glass
    /// deletion of junk too).
    fn is_unreadable(&self) -> bool {
        !self.readable
    }
}

/// What the bin holds at most; the oldest copies go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinBounds {
    /// Copies in all.
    pub copies: usize,
    /// Bytes in all.
    pub bytes: u64,
    /// Copies of one release.
    pub release_copies: usize,
    /// Bytes of one release.
    pub release_bytes: u64,
    /// How long a copy is kept (seconds).
    pub ttl_secs: i64,
}

impl Default for BinBounds {
    fn default() -> Self {
        BinBounds {
            copies: 1000,
            bytes: 256 << 20,
            release_copies: 20,
            release_bytes: 32 << 20,
            ttl_secs: 7 * 24 * 3600,
        }
    }
}

/// The largest copy a record makes, counted as the bounds count it: a Secret's 1 MiB of data as
/// base64 text, and its labels and annotations (at most 256 KiB).
pub(crate) const LARGEST_COPY: u64 = 2 << 20;

impl BinBounds {
    /// Refuses bounds under which a copy just stored could be evicted at once: the client would
    /// be told it is kept while it is gone.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.release_copies == 0 {
            return Err("--recycle-max-release-copies must be at least 1".into());
        }
        if self.copies < self.release_copies {
            return Err("--recycle-max-copies must be at least --recycle-max-release-copies".into());
        }
        if self.release_bytes < LARGEST_COPY {
            return Err(format!(
                "--recycle-max-release-bytes must be at least {} MiB, the largest copy a record makes",
                LARGEST_COPY >> 20
            ));
        }
        if self.bytes < self.release_bytes {
            return Err("--recycle-max-bytes must be at least --recycle-max-release-bytes".into());
        }
        if self.ttl_secs < 60 {
            return Err("--recycle-ttl must be at least 1m".into());
        }
        Ok(())
    }
}

/// Why a copy was evicted (the metric's `reason`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::Display, strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
pub(crate) enum Eviction {
    /// Older than the TTL.
    Expired,
    /// Its release holds more copies than it may.
    ReleaseCopies,
    /// Its release holds more bytes than it may.
    ReleaseBytes,
    /// The bin holds more copies than it may.
    Copies,
    /// The bin holds more bytes than it may.
    Bytes,
}

/// The copies `bounds` evict from `entries` at `now`, oldest first: the expired, then per
/// release (copies of unreadable records bounded apart), then overall, from the namespace that
/// holds the most, its copies of unreadable records first.
pub(crate) fn evictions(entries: &[BinEntry], bounds: &BinBounds, now: i64) -> Vec<(String, Eviction)> {
    let mut kept: Vec<&BinEntry> = entries.iter().collect();
    kept.sort_by(|a, b| {
        (!a.is_unreadable(), a.kept_at, &a.name).cmp(&(!b.is_unreadable(), b.kept_at, &b.name))
    });
    let mut evicted = Vec::new();
    kept.retain(|entry| {
        let expired = entry.kept_at.saturating_add(bounds.ttl_secs) <= now;
        if expired {
            evicted.push((entry.name.clone(), Eviction::Expired));
        }
        !expired
    });
    let mut per_release: BTreeMap<(&str, &str, &str, bool), (usize, u64)> = BTreeMap::new();
    for entry in &kept {
        let held = per_release.entry(entry.release_of()).or_default();
        *held = (held.0 + 1, held.1 + entry.bytes);
    }
    kept.retain(|entry| {
        let Some(held) = per_release.get_mut(&entry.release_of()) else { return true };
        let why = if held.0 > bounds.release_copies {
            Eviction::ReleaseCopies
        } else if held.1 > bounds.release_bytes {
            Eviction::ReleaseBytes
        } else {
            return true;
        };
        *held = (held.0 - 1, held.1.saturating_sub(entry.bytes));
        evicted.push((entry.name.clone(), why));
        false
    });
    // Over the bin's own bounds, the namespace that holds the most (copies, or bytes) gives up
    // its oldest copy first: one namespace's deletions cannot evict another's copies while it
    // holds more than they do (each namespace's queue is oldest first).
    let (mut copies, mut bytes) = (kept.len(), kept.iter().map(|e| e.bytes).sum::<u64>());
    let mut by_namespace: BTreeMap<&str, (std::collections::VecDeque<&BinEntry>, u64)> = BTreeMap::new();
    for entry in kept {
        let held = by_namespace.entry(entry.namespace.as_str()).or_default();
        held.0.push_back(entry);
        held.1 += entry.bytes;
    }
    loop {
        let why = if copies > bounds.copies {
            Eviction::Copies
        } else if bytes > bounds.bytes {
            Eviction::Bytes
        } else {
            break;
        };
        let largest =
            by_namespace.values_mut().filter(|(queue, _)| !queue.is_empty()).max_by_key(|(queue, held)| {
                let oldest = queue.front().map_or(i64::MAX, |e| e.kept_at);
                match why {
                    Eviction::Copies => (queue.len() as u64, std::cmp::Reverse(oldest)),
                    _ => (*held, std::cmp::Reverse(oldest)),
                }
            });
        let Some((queue, held)) = largest else { break };
        let Some(entry) = queue.pop_front() else { break };
        *held = held.saturating_sub(entry.bytes);
        (copies, bytes) = (copies - 1, bytes.saturating_sub(entry.bytes));
        evicted.push((entry.name.clone(), why));
    }
    evicted
}

/// A copy read back from the bin: what it is, and the object to recreate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecycledCopy {
    /// Its metadata.
    pub entry: BinEntry,
    /// The original's identity and metadata.
    pub object: KeptObject,
    /// The original's data, as bytes.
    pub data: BTreeMap<String, Vec<u8>>,
}

/// Why a Secret of the bin is no copy that can be restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RestoreError {
    /// The labels are not a copy's.
    #[error("not a helm-guard copy (labels missing)")]
    NotACopy,
    /// The `helm-guard.io/object` annotation is missing or does not parse.
    #[error("its helm-guard.io/object annotation does not describe the original: {0}")]
    Object(String),
    /// The copy changed after it was kept: its digest no longer matches.
    #[error("it changed after it was kept (its helm-guard.io/sha256 does not match its content)")]
    Edited,
    /// A ConfigMap's value is not text.
    #[error("the value of {0} is not text, as a ConfigMap's must be")]
    NotText(String),
}

impl RecycledCopy {
    /// Reads a copy Secret's metadata and (decoded) data.
    pub(crate) fn read(
        meta: &ObjectMeta,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<RecycledCopy, RestoreError> {
        let entry = BinEntry::from_meta(meta).ok_or(RestoreError::NotACopy)?;
        let object = meta.annotations.as_ref().and_then(|a| a.get(ANNOTATION_OBJECT));
        let object = object.ok_or_else(|| RestoreError::Object("missing".into()))?;
        let object: KeptObject =
            serde_json::from_str(object).map_err(|e| RestoreError::Object(e.to_string()))?;
        if object.driver().is_none() {
            return Err(RestoreError::Object(format!("kind {} is no record's", object.kind)));
        }
        let data: BTreeMap<String, Vec<u8>> = data
            .iter()
            .filter_map(|(key, value)| Some((key.strip_prefix(DATA_PREFIX)?.to_owned(), value.clone())))
            .collect();
        // Copies kept before digests were written carry none; any other must match.
        let kept_digest = meta.annotations.as_ref().and_then(|a| a.get(ANNOTATION_DIGEST));
        let annotation =
            meta.annotations.as_ref().and_then(|a| a.get(ANNOTATION_OBJECT)).map_or("", String::as_str);
        // The API hands the values back decoded: a Secret record's are base64 again, as kept.
        let as_kept: Vec<(&str, std::borrow::Cow<'_, [u8]>)> = data
            .iter()
            .map(|(k, v)| match object.driver() {
                Some(Driver::Secret) => {
                    (k.as_str(), base64::engine::general_purpose::STANDARD.encode(v).into_bytes().into())
                }
                _ => (k.as_str(), v.as_slice().into()),
            })
            .collect();
        if let Some(kept) = kept_digest
            && *kept != copy_digest(annotation, as_kept.iter().map(|(k, v)| (*k, v.as_ref())))
        {
            return Err(RestoreError::Edited);
        }
        Ok(RecycledCopy { entry, object, data })
    }

    /// The record as it was, to be created again: name, namespace, labels, type and data as
    /// they were; its annotations but the break-glass one (which would let the next deletion
    /// through unasked), and `helm-guard.io/restored-from` naming the copy, by which the guard
    /// lets a revision Helm would not create now (an old one, a deployed one) be created again
    /// (POLICY.md, C1).
    pub(crate) fn original(&self) -> Result<serde_json::Value, RestoreError> {
        use serde_json::{Map, Value};
        let mut annotations = self.object.annotations.clone();
        annotations.remove(crate::policy::BREAK_GLASS_ANNOTATION);
        annotations
            .insert(crate::policy::create::RESTORED_FROM_ANNOTATION.to_owned(), self.entry.name.clone());
        let mut metadata = Map::new();
        metadata.insert("name".into(), self.object.name.clone().into());
        metadata.insert("namespace".into(), self.object.namespace.clone().into());
        metadata.insert("labels".into(), serde_json::json!(self.object.labels));
        if !annotations.is_empty() {
            metadata.insert("annotations".into(), serde_json::json!(annotations));
        }
        let data: Map<String, Value> = match self.object.driver() {
            Some(Driver::Secret) => self
                .data
                .iter()
                .map(|(k, v)| (k.clone(), base64::engine::general_purpose::STANDARD.encode(v).into()))
                .collect(),
            _ => self
                .data
                .iter()
                .map(|(k, v)| {
                    let text = String::from_utf8(v.clone()).map_err(|_| RestoreError::NotText(k.clone()))?;
                    Ok((k.clone(), text.into()))
                })
                .collect::<Result<_, RestoreError>>()?,
        };
        let mut original = Map::new();
        original.insert("apiVersion".into(), "v1".into());
        original.insert("kind".into(), self.object.kind.clone().into());
        original.insert("metadata".into(), metadata.into());
        if let Some(secret_type) = &self.object.secret_type {
            original.insert("type".into(), secret_type.clone().into());
        }
        original.insert("data".into(), data.into());
        Ok(original.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::record::{RecordId, ReleaseKey};

    fn record(driver: Driver, payload: &str) -> Record {
        let key = ReleaseKey { driver, namespace: "demo".into(), release: "web".into() };
        Record {
            id: RecordId { key, revision: 3 },
            object_name: "sh.helm.release.v1.web.v3".into(),
            uid: Some("u-3".into()),
            resource_version: Some("42".into()),
            created_at: None,
            labels: [("owner", "helm"), ("name", "web"), ("version", "3"), ("status", "deployed")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            annotations: [(crate::policy::BREAK_GLASS_ANNOTATION.to_owned(), "INC-1".to_owned())].into(),
            owner_references: Vec::new(),
            finalizers: Vec::new(),
            immutable: false,
            secret_type: (driver == Driver::Secret).then(|| "helm.sh/release.v1".to_owned()),
            identity_agrees: true,
            payload: Some(bytes::Bytes::copy_from_slice(payload.as_bytes())),
            other_data: [("note".to_owned(), "aGk=".to_owned())].into(),
        }
    }

    const KEEPING: Keeping<'static> =
        Keeping { reason: "break-glass", requester: "alice", at: 1_700_000_000, readable: true };

    /// What the API server makes of a create body: `stringData` becomes `data`, every value bytes.
    fn stored(body: &[u8]) -> (ObjectMeta, BTreeMap<String, Vec<u8>>) {
        let body: serde_json::Value = serde_json::from_slice(body).unwrap();
        let meta: ObjectMeta = serde_json::from_value(body["metadata"].clone()).unwrap();
        let mut data = BTreeMap::new();
        for (key, value) in body["data"].as_object().unwrap() {
            let bytes = base64::engine::general_purpose::STANDARD.decode(value.as_str().unwrap()).unwrap();
            data.insert(key.clone(), bytes);
        }
        for (key, value) in body["stringData"].as_object().unwrap() {
            data.insert(key.clone(), value.as_str().unwrap().as_bytes().to_vec());
        }
        (meta, data)
    }

    #[test]
    fn a_copy_changed_after_it_was_kept_is_not_restored() {
        for (driver, payload) in [(Driver::Secret, "SDRzSUFBQUE="), (Driver::ConfigMap, "H4sIAAAA")] {
            let body = copy_body(&record(driver, payload), &KEEPING, "helm-guard").unwrap();
            let (meta, data) = stored(&body);
            assert!(RecycledCopy::read(&meta, &data).is_ok(), "{driver}: as kept");
            // A payload byte changed.
            let mut edited = data.clone();
            edited.get_mut("data.release").unwrap()[0] ^= 1;
            assert_eq!(RecycledCopy::read(&meta, &edited).unwrap_err(), RestoreError::Edited, "{driver}");
            // A value added.
            let mut added = data.clone();
            added.insert("data.extra".into(), b"x".to_vec());
            assert_eq!(RecycledCopy::read(&meta, &added).unwrap_err(), RestoreError::Edited, "{driver}");
            // The original's labels changed (in the object annotation).
            let mut relabelled = meta.clone();
            let object = relabelled.annotations.as_mut().unwrap().get_mut(ANNOTATION_OBJECT).unwrap();
            *object = object.replace("\"status\":\"deployed\"", "\"status\":\"superseded\"");
            assert_ne!(relabelled, meta, "the fixture's record is deployed");
            assert_eq!(RecycledCopy::read(&relabelled, &data).unwrap_err(), RestoreError::Edited, "{driver}");
            // A copy kept before digests were written: read as it is.
            let mut older = meta.clone();
            older.annotations.as_mut().unwrap().remove(ANNOTATION_DIGEST);
            assert!(RecycledCopy::read(&older, &data).is_ok(), "{driver}");
        }
    }

    #[test]
    fn a_copy_gives_back_the_record_as_it_was_for_either_driver() {
        for (driver, payload) in [(Driver::Secret, "SDRzSUFBQUE="), (Driver::ConfigMap, "H4sIAAAA")] {
            let record = record(driver, payload);
            let body = copy_body(&record, &KEEPING, "helm-guard").unwrap();
            let (meta, data) = stored(&body);
            assert_eq!(meta.namespace.as_deref(), Some("helm-guard"));
            // The copy's data is the original's, key for key: a record Kubernetes took (at most
            // 1 MiB of data) fits as a copy.
            let original_bytes: Vec<usize> = match driver {
                Driver::Secret => [payload, "aGk="]
                    .iter()
                    .map(|v| base64::engine::general_purpose::STANDARD.decode(v).unwrap().len())
                    .collect(),
                Driver::ConfigMap => vec![payload.len(), 4],
            };
            assert_eq!(data.values().map(Vec::len).sum::<usize>(), original_bytes.iter().sum::<usize>());
            let copy = RecycledCopy::read(&meta, &data).unwrap();
            assert_eq!(
                (copy.entry.namespace.as_str(), copy.entry.release.as_str(), copy.entry.revision),
                ("demo", "web", 3)
            );
            assert_eq!((copy.entry.reason.as_str(), copy.entry.requester.as_str()), ("break-glass", "alice"));
            assert_eq!(copy.entry.kept_at, 1_700_000_000);
            assert_eq!(copy.object.uid.as_deref(), Some("u-3"));
            assert_eq!(copy.object.resource_version.as_deref(), Some("42"));
            let original = copy.original().unwrap();
            // Read back as a record: the same payload bytes, labels, type and name.
            let back = Record::from_object(&original, None).unwrap().unwrap();
            assert_eq!(back.payload, record.payload, "{driver}");
            assert_eq!(back.other_data, record.other_data, "{driver}");
            assert_eq!(
                (back.labels, back.secret_type, back.object_name),
                (record.labels.clone(), record.secret_type.clone(), record.object_name.clone())
            );
            assert_eq!(original["kind"], driver.kind());
            assert_eq!(
                back.annotations.keys().collect::<Vec<_>>(),
                ["helm-guard.io/restored-from"],
                "the break-glass annotation is not restored; the copy it came from is named"
            );
            assert_eq!(back.annotations["helm-guard.io/restored-from"], copy.entry.name);
        }
    }

    #[test]
    fn a_copy_is_named_for_the_object_and_version_it_keeps() {
        let a = record(Driver::Secret, "eA==");
        assert_eq!(copy_name(&a), copy_name(&a.clone()));
        let later = Record { resource_version: Some("43".into()), ..a.clone() };
        let reinstalled = Record { uid: Some("u-other".into()), ..a.clone() };
        assert_ne!(copy_name(&a), copy_name(&later));
        assert_ne!(copy_name(&a), copy_name(&reinstalled));
        assert!(copy_name(&a).len() <= 63);
    }

    #[test]
    fn a_payload_that_is_not_text_is_not_copied() {
        let mut bad = record(Driver::Secret, "");
        bad.payload = Some(bytes::Bytes::from_static(&[0xff, 0xfe]));
        assert_eq!(copy_body(&bad, &KEEPING, "helm-guard"), Err(CopyError::NotText));
    }

    #[test]
    fn a_secret_of_the_bin_that_is_no_copy_is_said_so() {
        let meta = ObjectMeta { name: Some("x".into()), ..ObjectMeta::default() };
        assert_eq!(RecycledCopy::read(&meta, &BTreeMap::new()), Err(RestoreError::NotACopy));
        let (mut meta, data) = stored(&copy_body(&record(Driver::Secret, "eA=="), &KEEPING, "b").unwrap());
        meta.annotations.as_mut().unwrap().insert(ANNOTATION_OBJECT.into(), "{".into());
        assert!(matches!(RecycledCopy::read(&meta, &data), Err(RestoreError::Object(_))));
    }

    fn entry(name: &str, release: &str, kept_at: i64, bytes: u64) -> BinEntry {
        BinEntry {
            name: name.into(),
            namespace: "demo".into(),
            release: release.into(),
            driver: "secret".into(),
            revision: 1,
            reason: "break-glass".into(),
            readable: true,
            requester: "alice".into(),
            kept_at,
            bytes,
        }
    }

    #[test]
    fn bounds_that_would_evict_a_copy_just_stored_are_refused() {
        assert_eq!(BinBounds::default().check(), Ok(()));
        let defaults = BinBounds::default();
        for (bounds, flag) in [
            (BinBounds { release_copies: 0, ..defaults }, "--recycle-max-release-copies"),
            (BinBounds { copies: 5, release_copies: 6, ..defaults }, "--recycle-max-copies"),
            (BinBounds { release_bytes: 1 << 20, ..defaults }, "--recycle-max-release-bytes"),
            (BinBounds { bytes: 16 << 20, release_bytes: 32 << 20, ..defaults }, "--recycle-max-bytes"),
            (BinBounds { ttl_secs: 1, ..defaults }, "--recycle-ttl"),
        ] {
            assert!(bounds.check().unwrap_err().starts_with(flag), "{flag}");
        }
        // At the smallest bounds allowed, the newest copy of a release, at the largest size,
        // stays.
        let tight = BinBounds {
            copies: 1,
            bytes: LARGEST_COPY,
            release_copies: 1,
            release_bytes: LARGEST_COPY,
            ttl_secs: 60,
        };
        assert_eq!(tight.check(), Ok(()));
        let entries = [entry("old", "a", 10, LARGEST_COPY), entry("new", "b", 20, LARGEST_COPY)];
        let evicted = evictions(&entries, &tight, 30);
        assert_eq!(evicted, vec![("old".to_owned(), Eviction::Copies)]);
    }

    #[test]
    fn the_bounds_evict_the_oldest_first() {
        let bounds =
            BinBounds { copies: 3, bytes: 1000, release_copies: 2, release_bytes: 500, ttl_secs: 100 };
        let entries = [
            entry("expired", "a", 0, 10),
            entry("a1", "a", 10, 10),
            entry("a2", "a", 20, 10),
            entry("a3", "a", 30, 10),
            entry("b1", "b", 15, 10),
            entry("c1", "c", 40, 10),
            entry("c2", "c", 50, 10),
        ];
        let evicted = evictions(&entries, &bounds, 105);
        assert_eq!(
            evicted,
            vec![
                ("expired".to_owned(), Eviction::Expired),
                ("a1".to_owned(), Eviction::ReleaseCopies),
                // a2, a3, b1, c1, c2 left: two too many for the bin, the oldest go.
                ("b1".to_owned(), Eviction::Copies),
                ("a2".to_owned(), Eviction::Copies),
            ]
        );
        assert!(evictions(&entries[1..3], &bounds, 105).is_empty(), "within every bound");
        let big = [entry("old", "a", 10, 400), entry("new", "a", 20, 400), entry("b", "b", 30, 400)];
        assert_eq!(
            evictions(&big, &bounds, 50),
            vec![("old".to_owned(), Eviction::ReleaseBytes)],
            "the newest copy of a release stays; 800 bytes left fit the bin"
        );
        let bounds = BinBounds { bytes: 500, ..bounds };
        assert_eq!(
            evictions(&big, &bounds, 50),
            vec![("old".to_owned(), Eviction::ReleaseBytes), ("new".to_owned(), Eviction::Bytes)]
        );
    }

    /// A tenant who fills the bin with its own deletions evicts its own copies, not another
    /// namespace's older ones.
    #[test]
    fn over_the_bins_bounds_the_namespace_that_holds_the_most_gives_up_first() {
        let bounds = BinBounds {
            copies: 4,
            bytes: 1 << 30,
            release_copies: 10,
            release_bytes: 1 << 30,
            ttl_secs: 1000,
        };
        let in_ns = |name: &str, namespace: &str, release: &str, at: i64| BinEntry {
            namespace: namespace.to_owned(),
            ..entry(name, release, at, 10)
        };
        let entries = [
            in_ns("theirs-1", "payments", "db", 1),
            in_ns("theirs-2", "payments", "db", 2),
            in_ns("flood-1", "tenant", "junk", 10),
            in_ns("flood-2", "tenant", "junk", 11),
            in_ns("flood-3", "tenant", "junk", 12),
            in_ns("flood-4", "tenant", "junk", 13),
        ];
        let evicted: Vec<String> =
            evictions(&entries, &bounds, 20).into_iter().map(|(name, _)| name).collect();
        assert_eq!(evicted, ["flood-1", "flood-2"], "payments' older copies stay");
    }

    /// Junk labelled with a release's name, created and deleted (each a copy of a record Helm
    /// cannot read, D3), cannot flush the release's last good copy (issue 80, class 7): those
    /// copies are bounded apart per release and go first over the bin's bounds.
    #[test]
    fn copies_of_unreadable_records_cannot_evict_a_releases_last_good_copy() {
        let bounds = BinBounds {
            copies: 25,
            bytes: 1 << 30,
            release_copies: 20,
            release_bytes: 1 << 30,
            ttl_secs: 1000,
        };
        // Let go by D3, or by a break-glass annotation on the junk: unreadable either way.
        let junk = |i: i64| BinEntry {
            reason: if i % 2 == 0 { "undecodable-record" } else { "break-glass" }.to_owned(),
            readable: false,
            ..entry(&format!("junk-{i}"), "web", 10 + i, 10)
        };
        let mut entries = vec![entry("web-v3", "web", 1, 10)];
        entries.extend((0..30).map(junk));
        let evicted: Vec<String> =
            evictions(&entries, &bounds, 50).into_iter().map(|(name, _)| name).collect();
        assert!(!evicted.contains(&"web-v3".to_owned()), "{evicted:?}");
        assert_eq!(evicted.len(), 10, "junk beyond its own bound of 20 goes, oldest first: {evicted:?}");
        assert_eq!(evicted[0], "junk-0");
        let tight = BinBounds { copies: 5, ..bounds };
        let evicted: Vec<String> =
            evictions(&entries, &tight, 50).into_iter().map(|(name, _)| name).collect();
        assert!(
            !evicted.contains(&"web-v3".to_owned()),
            "over the bin's bounds junk goes first: {evicted:?}"
        );
    }
}
