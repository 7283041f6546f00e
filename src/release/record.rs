//! Recognising a release record among Kubernetes objects, and its identity.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decode::codec;
use super::decode::fields::{ReleaseData, Text, lean_meta};
use super::decode::{Fingerprinting, Storage};
use super::history::{PayloadStatus, RevisionFacts};
use super::status::Status;
use super::{DecodeError, DecodeLimits, ReleasePayload};

/// How Helm names its records: `sh.helm.release.v1.<release>.v<revision>`.
pub(crate) const NAME_PREFIX: &str = "sh.helm.release.v1.";
/// The `type` of Helm's Secrets.
#[cfg(test)]
pub(crate) const SECRET_TYPE: &str = "helm.sh/release.v1";
/// The labels Helm reserves on its records.
pub(crate) const LABEL_OWNER: &str = "owner";
/// The label Helm's next storage sets on a ConfigMap holding a release v2 record (`v2`; helm/helm
/// #32667, main only): what a v2-aware Helm may read the record by, so an identity label (U2).
pub(crate) const LABEL_RELEASE_VERSION: &str = "helm.sh/release-version";
/// The label with the release's name.
pub(crate) const LABEL_NAME: &str = "name";
/// The label with the revision.
pub(crate) const LABEL_VERSION: &str = "version";
/// The label with the revision's status (Helm writes it; anyone may change it).
pub(crate) const LABEL_STATUS: &str = "status";

/// Where Helm keeps its records (`HELM_DRIVER`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Driver {
    /// Helm's `secret` driver (its default).
    Secret,
    /// Helm's `configmap` driver.
    ConfigMap,
}

impl Driver {
    /// The driver whose records are objects of this API group and kind (`""`, `Secret`).
    pub(crate) fn of_kind(group: &str, kind: &str) -> Option<Driver> {
        match (group, kind) {
            ("", "Secret") => Some(Driver::Secret),
            ("", "ConfigMap") => Some(Driver::ConfigMap),
            _ => None,
        }
    }

    /// The driver as `scan` and JSON spell it.
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }

    /// The Kubernetes kind the driver stores records as.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Driver::Secret => "Secret",
            Driver::ConfigMap => "ConfigMap",
        }
    }

    /// Reads `HELM_DRIVER` as Helm does: empty means the default, `secret`.
    pub(crate) fn from_helm_driver(value: &str) -> Option<Driver> {
        match value {
            "" | "secret" | "secrets" => Some(Driver::Secret),
            "configmap" | "configmaps" => Some(Driver::ConfigMap),
            _ => None,
        }
    }
}

/// One release of one driver in one namespace: the unit a history belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReleaseKey {
    /// Where the records are kept.
    pub driver: Driver,
    /// The release's namespace.
    pub namespace: String,
    /// The release's name.
    pub release: String,
}

impl fmt::Display for ReleaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.release)
    }
}

/// The identity of one stored revision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId {
    /// The release.
    pub key: ReleaseKey,
    /// The revision.
    pub revision: u32,
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} revision {}", self.key, self.revision)
    }
}

/// Splits `sh.helm.release.v1.<release>.v<revision>`, the name Helm gives a record's object.
pub(crate) fn parse_object_name(name: &str) -> Option<(&str, u32)> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let (release, revision) = rest.rsplit_once(".v")?;
    if release.is_empty() || revision.is_empty() || !revision.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((release, revision.parse().ok()?))
}

/// The release an object is a record of, as Helm's storage drivers select records: by the labels
/// `owner=helm` and `name=<release>` in the namespace, whatever the object's name or Secret type.
pub(crate) fn release_key(
    driver: Driver,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Option<ReleaseKey> {
    if labels.get(LABEL_OWNER).map(String::as_str) != Some("helm") {
        return None;
    }
    let release = labels.get(LABEL_NAME).filter(|name| !name.is_empty())?;
    Some(ReleaseKey { driver, namespace: namespace.to_owned(), release: release.clone() })
}

/// Whether two sightings of an object under one name, each with its uid when known, are of the
/// same object: they are unless both uids are known and differ. Helm reuses names (a release
/// installed again writes `sh.helm.release.v1.<release>.v1` anew), the API server never reuses a
/// uid; where one is unknown (a dump without uids, a Lease claim of an older guard) the name
/// stands in.
pub(crate) fn same_object(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The revision a record claims before its payload is read: the `version` label, else the object
/// name's. Helm reads the payload's `version`; this is only what a metadata view can show.
pub(crate) fn version_hint(name: &str, labels: &BTreeMap<String, String>) -> u32 {
    labels
        .get(LABEL_VERSION)
        .and_then(|v| v.parse().ok())
        .or_else(|| parse_object_name(name).map(|(_, revision)| revision))
        .unwrap_or(0)
}

/// The name Helm's storage gives the record of `revision` of `release` (`makeKey` in
/// `pkg/storage/storage.go`: `%s.%s.v%d`): one name a revision, its number in decimal without
/// leading zeros.
pub(crate) fn helm_record_name(release: &str, revision: u32) -> String {
    format!("{NAME_PREFIX}{release}.v{revision}")
}

/// Whether the object is named and labelled exactly as Helm names and labels a revision: the
/// name [`helm_record_name`] of its `name` and `version` labels, the version in Helm's decimal
/// (`v04` and `+4` parse as 4 and are not Helm's).
fn helm_named(name: &str, labels: &BTreeMap<String, String>) -> bool {
    let (Some(release), Some(version)) = (labels.get(LABEL_NAME), labels.get(LABEL_VERSION)) else {
        return false;
    };
    let Ok(revision) = version.parse::<u32>() else { return false };
    revision.to_string() == *version && name == helm_record_name(release, revision)
}

/// The `type` Helm's secret driver gives its records, and the one Helm's next storage gives a
/// release v2 record (helm/helm#32667).
pub(crate) const HELM_SECRET_TYPES: [&str; 2] = ["helm.sh/release.v1", "helm.sh/release.v2"];

/// The highest revision Helm can write and still read the next one on every platform it runs
/// on: Helm's revision is a Go `int`, 32 bits on the ARM nodes K3s runs on, and Helm stores
/// `Last().Version + 1`; a record past it makes the release's next revision one a 32-bit Helm
/// (and the guard, which reads revisions as Helm 3 and 4 on 64 bits do, to 4294967295) cannot read.
pub(crate) const HIGHEST_REVISION: u32 = i32::MAX as u32 - 1;

/// Where a record differs from the one Helm's storage writes for its payload (`Create` in
/// `pkg/storage/driver/secrets.go` and `cfgmaps.go`: `newSecretsObject`, `newConfigMapsObject`):
/// the first difference found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UnlikeHelms {
    /// The object's name is not `sh.helm.release.v1.<payload name>.v<payload version>`.
    Name {
        /// The name Helm gives it.
        helm_names_it: String,
    },
    /// A label Helm sets from the payload (`name`, `version`, `status`) says something else.
    Label {
        /// The label.
        label: &'static str,
        /// The value Helm gives it.
        helm_writes: String,
    },
    /// A Secret whose `type` is not one Helm's secret driver writes.
    SecretType {
        /// The type given.
        given: String,
    },
}

impl fmt::Display for UnlikeHelms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnlikeHelms::Name { helm_names_it } => {
                write!(f, "Helm names the record of this payload {helm_names_it}")
            }
            UnlikeHelms::Label { label, helm_writes } => {
                write!(f, "Helm labels the record of this payload {label}={helm_writes}")
            }
            UnlikeHelms::SecretType { given } => write!(
                f,
                "Helm's secret driver writes a Secret of type {}, not {given:?}",
                HELM_SECRET_TYPES.join(" or ")
            ),
        }
    }
}

/// The `status` label, when it is one of Helm's statuses.
pub(crate) fn status_label(labels: &BTreeMap<String, String>) -> Option<Status> {
    labels.get(LABEL_STATUS)?.parse().ok()
}

/// Why an object that looks like a record cannot be read as one.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{object}: not a Kubernetes object: {detail}")]
    /// The object does not have the shape of a Secret or ConfigMap.
    Malformed {
        /// `Kind namespace/name`, as far as it can be told.
        object: String,
        /// What is wrong.
        detail: String,
    },
}

/// The shape shared by Secrets and ConfigMaps as far as helm-guard cares. Secret data stays base64
/// text here so that a bad value is an error about the payload, not about the whole object.
#[derive(Deserialize)]
struct RawObject {
    #[serde(default)]
    kind: Text,
    #[serde(default, deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    #[serde(default, rename = "type")]
    type_: Text,
    #[serde(default)]
    data: ReleaseData,
    #[serde(default)]
    immutable: Option<bool>,
}

impl RawObject {
    fn read(object: &Value) -> Result<RawObject, RecordError> {
        RawObject::deserialize(object)
            .map_err(|e| RecordError::Malformed { object: describe(object), detail: e.to_string() })
    }

    /// Whether Helm's labels make the object a record (see [`release_key`]).
    fn is_record(&self, driver: Driver) -> bool {
        self.metadata.labels.as_ref().and_then(|labels| release_key(driver, "", labels)).is_some()
    }

    /// The record, read as `driver`'s whether or not the labels make it one (the new side of an
    /// UPDATE may have lost them).
    fn into_record(self, driver: Driver) -> Record {
        let labels = self.metadata.labels.unwrap_or_default();
        let name = self.metadata.name.unwrap_or_default();
        let namespace = self.metadata.namespace.unwrap_or_default();
        let key = release_key(driver, &namespace, &labels).unwrap_or(ReleaseKey {
            driver,
            namespace,
            release: labels.get(LABEL_NAME).cloned().unwrap_or_default(),
        });
        Record {
            id: RecordId { key, revision: version_hint(&name, &labels) },
            identity_agrees: helm_named(&name, &labels),
            object_name: name,
            uid: self.metadata.uid,
            resource_version: self.metadata.resource_version,
            created_at: self.metadata.creation_timestamp.map(|time| time.0.as_second()),
            labels,
            annotations: self.metadata.annotations.unwrap_or_default(),
            owner_references: self
                .metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .map(|owner| owner.uid)
                .collect(),
            finalizers: self.metadata.finalizers.unwrap_or_default(),
            immutable: self.immutable.unwrap_or_default(),
            secret_type: self.type_.0,
            payload: self.data.release,
            other_data: self.data.other,
        }
    }
}

/// One stored release revision, as read from its Kubernetes object.
#[derive(Debug, Clone)]
pub struct Record {
    /// The release (from the labels) and the revision: the `version` label until the payload is
    /// read ([`DecodedRecord`] puts the payload's there, as Helm shows it).
    pub id: RecordId,
    /// The object's name.
    pub object_name: String,
    /// The object's uid: Helm reuses names, the API server never reuses a uid.
    pub uid: Option<String>,
    /// The object's resourceVersion.
    pub resource_version: Option<String>,
    /// When the object was created (Unix seconds): when Helm stored this revision.
    pub created_at: Option<i64>,
    /// The object's labels.
    pub labels: BTreeMap<String, String>,
    /// The object's annotations (the break-glass annotation among them).
    pub annotations: BTreeMap<String, String>,
    /// The uids of the objects in `ownerReferences`.
    pub owner_references: Vec<String>,
    /// The object's finalizers.
    pub finalizers: Vec<String>,
    /// The object's `immutable` (Helm never sets it: an immutable record can never be updated).
    pub immutable: bool,
    /// The Secret `type` (None for ConfigMaps).
    pub secret_type: Option<String>,
    /// Whether the object is named `sh.helm.release.v1.<name label>.v<version label>`, as Helm
    /// names its records (Helm does not need it to be).
    pub identity_agrees: bool,
    /// `data.release` exactly as stored in the object (for a Secret: the API's base64); from a
    /// review, a slice of its body.
    pub payload: Option<bytes::Bytes>,
    /// The other string keys of `data`, as stored (Helm writes none).
    pub other_data: BTreeMap<String, String>,
}

/// The most data Kubernetes stores in one Secret or ConfigMap (its validation counts the data's
/// bytes, a Secret's as decoded): Helm cannot store a revision past it, and will not split one.
pub(crate) const OBJECT_DATA_LIMIT: usize = 1 << 20;

/// From this share of [`OBJECT_DATA_LIMIT`] a write of a record is told it nears the limit.
const NEAR_THE_LIMIT_PERCENT: usize = 80;

impl Record {
    /// The bytes of its data as the API server counts them against [`OBJECT_DATA_LIMIT`].
    pub(crate) fn stored_bytes(&self) -> usize {
        let decoded = |text: &[u8]| match self.secret_type {
            // A Secret's data arrives as base64: 3 bytes per 4 characters, less the padding.
            Some(_) => {
                let padding = text.iter().rev().take_while(|&&b| b == b'=').count();
                (text.len() / 4 * 3).saturating_sub(padding)
            }
            None => text.len(),
        };
        self.payload.as_deref().map_or(0, decoded)
            + self.other_data.iter().map(|(key, value)| key.len() + decoded(value.as_bytes())).sum::<usize>()
    }

    /// A warning for a write of this record when it is past 80% of what Kubernetes stores in one
    /// object: the next revisions, which Helm stores whole, will not fit (issue 58, "the 1 MiB
    /// wall"; Helm prints admission warnings).
    pub(crate) fn size_warning(&self) -> Option<String> {
        let bytes = self.stored_bytes();
        (bytes * 100 >= OBJECT_DATA_LIMIT * NEAR_THE_LIMIT_PERCENT).then(|| {
            format!(
                "helm-guard: {} holds {bytes} bytes, {}% of the {OBJECT_DATA_LIMIT} Kubernetes stores in one {}; Helm \
                 stores every revision whole (the chart's files, values and manifest, gzipped) and cannot write one \
                 past the limit: the upgrade that would fails. Trim the chart (.helmignore, large files) or its values",
                self.describe(),
                bytes * 100 / OBJECT_DATA_LIMIT,
                if self.secret_type.is_some() { "Secret" } else { "ConfigMap" }
            )
        })
    }

    /// Reads a record from a Kubernetes object. `Ok(None)`: not a record Helm would read (not a
    /// Secret or ConfigMap, or without the `owner=helm` and `name` labels).
    pub fn from_object(object: &Value, fallback_kind: Option<&str>) -> Result<Option<Record>, RecordError> {
        let raw = RawObject::read(object)?;
        let kind = raw.kind.0.as_deref().or(fallback_kind).unwrap_or_default();
        let driver = match kind {
            "Secret" => Driver::Secret,
            "ConfigMap" => Driver::ConfigMap,
            _ => return Ok(None),
        };
        Ok(raw.is_record(driver).then(|| raw.into_record(driver)))
    }

    /// Reads an object's parts (taken, so the payload moves rather than being copied) as a record
    /// of `driver`, and says whether Helm's labels make it one. The new side of an UPDATE that
    /// removed those labels is still read, so that the removal can be judged.
    pub(crate) fn from_parts(
        metadata: ObjectMeta,
        secret_type: Option<String>,
        payload: Option<bytes::Bytes>,
        other_data: BTreeMap<String, String>,
        immutable: bool,
        driver: Driver,
    ) -> (Record, bool) {
        let data = ReleaseData { release: payload, other: other_data };
        let raw = RawObject {
            kind: Text(None),
            metadata,
            type_: Text(secret_type),
            data,
            immutable: Some(immutable),
        };
        let is_record = raw.is_record(driver);
        (raw.into_record(driver), is_record)
    }

    /// The `status` label, when it is one of Helm's statuses.
    pub fn status_label(&self) -> Option<Status> {
        status_label(&self.labels)
    }

    /// Decodes the payload to the release JSON bytes.
    pub fn decode_json(&self, limits: DecodeLimits) -> Result<Vec<u8>, DecodeError> {
        let payload = self.payload.as_deref().ok_or(DecodeError::MissingPayload)?;
        match self.id.key.driver {
            Driver::Secret => codec::decode_secret_payload(payload, limits),
            Driver::ConfigMap => codec::decode_helm_payload(payload, limits),
        }
    }

    /// Reads the payload as Helm does, keeping only what helm-guard needs.
    pub fn decode(&self, limits: DecodeLimits) -> Result<ReleasePayload, DecodeError> {
        self.read(limits, Fingerprinting::Skip, None)
    }

    fn read(
        &self,
        limits: DecodeLimits,
        fingerprinting: Fingerprinting,
        memo: Option<&super::decode::memo::PayloadMemo>,
    ) -> Result<ReleasePayload, DecodeError> {
        let payload = self.payload.as_deref().ok_or(DecodeError::MissingPayload)?;
        let storage = match self.id.key.driver {
            Driver::Secret => Storage::Secret,
            Driver::ConfigMap => Storage::ConfigMap,
        };
        let read = || codec::read_payload(payload, storage, limits, fingerprinting);
        match memo {
            Some(memo) => memo.read(payload, storage, limits, fingerprinting, read),
            None => read(),
        }
    }

    /// `Kind namespace/name`, for messages.
    pub(crate) fn describe(&self) -> String {
        format!("{} {}/{}", self.id.key.driver.kind(), self.id.key.namespace, self.object_name)
    }
}

/// A record with its payload decoded, or the reason it does not decode.
#[derive(Debug, Clone)]
pub struct DecodedRecord {
    /// The record.
    pub record: Record,
    /// Its payload as Helm reads it, or why Helm cannot.
    pub payload: Result<ReleasePayload, DecodeError>,
}

impl DecodedRecord {
    /// Reads the payload; when Helm can read it, the revision is the payload's `version`.
    pub fn new(record: Record, limits: DecodeLimits) -> DecodedRecord {
        DecodedRecord::read(record, limits, Fingerprinting::Skip, None)
    }

    /// Reads the payload, or answers from `memo` when these bytes were read before; with
    /// [`Fingerprinting::Take`], the content fingerprint too (see `ReleasePayload::content`).
    pub(crate) fn remembered(
        record: Record,
        limits: DecodeLimits,
        fingerprinting: Fingerprinting,
        memo: &super::decode::memo::PayloadMemo,
    ) -> DecodedRecord {
        DecodedRecord::read(record, limits, fingerprinting, Some(memo))
    }

    fn read(
        mut record: Record,
        limits: DecodeLimits,
        fingerprinting: Fingerprinting,
        memo: Option<&super::decode::memo::PayloadMemo>,
    ) -> DecodedRecord {
        let payload = record.read(limits, fingerprinting, memo);
        if let Ok(payload) = &payload {
            record.id.revision = payload.version;
        }
        DecodedRecord { record, payload }
    }

    /// What the index and the classifier keep of this record.
    pub fn facts(&self) -> RevisionFacts {
        let payload = match &self.payload {
            Ok(payload) => PayloadStatus::Decoded(payload.info.status),
            Err(_) => PayloadStatus::Undecodable,
        };
        let payload_time = self.payload.as_ref().ok().and_then(ReleasePayload::last_deployed_unix);
        RevisionFacts {
            revision: self.record.id.revision,
            payload,
            label: self.record.status_label(),
            stored_at: self.record.created_at.or(payload_time),
            field_conflict: self.payload.as_ref().is_ok_and(ReleasePayload::failed_on_field_conflict),
            namespace_apart: self.namespace_apart(),
        }
    }

    /// Where the record differs from the one Helm's storage writes for its payload; `None` when
    /// it is exactly Helm's, or its payload does not decode.
    pub(crate) fn unlike_helms(&self) -> Option<UnlikeHelms> {
        let payload = self.payload.as_ref().ok()?;
        let record = &self.record;
        let helm_names_it = helm_record_name(&payload.name, payload.version);
        if record.object_name != helm_names_it {
            return Some(UnlikeHelms::Name { helm_names_it });
        }
        let labels = [
            (LABEL_NAME, payload.name.clone()),
            (LABEL_VERSION, payload.version.to_string()),
            (
                LABEL_STATUS,
                payload.info.status_text.clone().unwrap_or_else(|| payload.info.status.as_str().into()),
            ),
        ];
        for (label, helm_writes) in labels {
            if record.labels.get(label) != Some(&helm_writes) {
                return Some(UnlikeHelms::Label { label, helm_writes });
            }
        }
        match record.secret_type.as_deref() {
            Some(given) if !HELM_SECRET_TYPES.contains(&given) => {
                Some(UnlikeHelms::SecretType { given: given.to_owned() })
            }
            _ => None,
        }
    }

    /// Whether the payload's namespace is not the object's: Helm's storage keeps a release's
    /// records where its driver's namespace is (Flux's `storageNamespace` puts them apart from
    /// the release's own namespace, the payload's).
    pub(crate) fn namespace_apart(&self) -> bool {
        self.payload.as_ref().is_ok_and(|payload| payload.namespace != self.record.id.key.namespace)
    }

    /// The payload's status, `None` when it does not decode.
    pub fn status(&self) -> Option<Status> {
        self.payload.as_ref().ok().map(|payload| payload.info.status)
    }
}

/// `Kind namespace/name` of any JSON object, for messages about objects that do not parse.
pub(crate) fn describe(object: &Value) -> String {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or("?").to_owned();
    format!("{} {}/{}", text("/kind"), text("/metadata/namespace"), text("/metadata/name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn object_names_split_into_release_and_revision() {
        assert_eq!(parse_object_name("sh.helm.release.v1.web.v3"), Some(("web", 3)));
        assert_eq!(parse_object_name("sh.helm.release.v1.my.app.v12"), Some(("my.app", 12)));
        assert_eq!(parse_object_name("sh.helm.release.v1.web.v"), None);
        assert_eq!(parse_object_name("sh.helm.release.v1..v1"), None);
        assert_eq!(parse_object_name("sh.helm.release.v1.web.v-1"), None);
        assert_eq!(parse_object_name("other.web.v1"), None);
    }

    #[test]
    fn records_are_selected_by_labels_as_helm_selects_them() {
        let labels = json!({"owner": "helm", "name": "rb", "version": "4"});
        let opaque = json!({"kind": "Secret", "type": "Opaque", "metadata": {"name": "rb-latest", "namespace": "n", "labels": labels}});
        let record = Record::from_object(&opaque, None).unwrap().unwrap();
        assert_eq!((record.id.key.release.as_str(), record.id.revision), ("rb", 4));
        assert!(!record.identity_agrees, "not named as Helm names records");
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "anything", "labels": labels}});
        assert_eq!(Record::from_object(&cm, None).unwrap().unwrap().id.key.driver, Driver::ConfigMap);
        let unlabelled =
            json!({"kind": "Secret", "type": SECRET_TYPE, "metadata": {"name": "sh.helm.release.v1.a.v1"}});
        assert!(Record::from_object(&unlabelled, None).unwrap().is_none(), "Helm's queries select on labels");
        let no_name = json!({"kind": "ConfigMap", "metadata": {"name": "sh.helm.release.v1.a.v1", "labels": {"owner": "helm"}}});
        assert!(Record::from_object(&no_name, None).unwrap().is_none());
    }

    #[test]
    fn a_malformed_object_is_an_error_naming_it() {
        let secret = json!({"kind": "Secret", "metadata": {"name": "x", "namespace": "n", "labels": []}});
        let error = Record::from_object(&secret, None).unwrap_err();
        assert!(error.to_string().contains("Secret n/x"), "{error}");
    }
}
