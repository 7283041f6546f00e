//! Lenient readers of the fields of a Kubernetes object that helm-guard reads, shared by the
//! records of dumps and snapshots ([`crate::release::record`]) and the objects of admission reviews
//! (`crate::object`, which the fetch path reads too): one list of the metadata read, one reading of `data.release`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

/// The metadata helm-guard reads: what a record, a verdict, the ledger or a pod's patch needs.
/// Nothing else (not `managedFields`, half of a pod's size) is built.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Meta {
    pub(crate) name: Option<String>,
    pub(crate) generate_name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
    /// Read as text: a creation time that is not RFC 3339 counts as none rather than making the
    /// object unreadable (only the API server writes it).
    pub(crate) creation_timestamp: Text,
    pub(crate) labels: Option<BTreeMap<String, String>>,
    pub(crate) annotations: Option<BTreeMap<String, String>>,
    pub(crate) owner_references: Option<Vec<Owner>>,
    pub(crate) finalizers: Option<Vec<String>>,
}

/// An owner reference, by the owner's uid (what tells two references apart).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Owner {
    #[serde(default)]
    pub(crate) uid: String,
}

impl From<Meta> for ObjectMeta {
    fn from(meta: Meta) -> ObjectMeta {
        ObjectMeta {
            name: meta.name,
            generate_name: meta.generate_name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            creation_timestamp: meta
                .creation_timestamp
                .0
                .and_then(|text| text.parse().ok())
                .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
            labels: meta.labels,
            annotations: meta.annotations,
            owner_references: meta.owner_references.map(|owners| {
                owners
                    .into_iter()
                    .map(|owner| OwnerReference { uid: owner.uid, ..OwnerReference::default() })
                    .collect()
            }),
            finalizers: meta.finalizers,
            ..ObjectMeta::default()
        }
    }
}

/// Reads an object's metadata as [`Meta`] does, into kube's type.
pub(crate) fn lean_meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    Meta::deserialize(deserializer).map(ObjectMeta::from)
}

/// A visitor's answer to the JSON shapes it does not read: `None`, the value skipped.
macro_rules! none_for_other_shapes {
    ($value:ty) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$value, E> {
            Ok(None)
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$value, E> {
            Ok(None)
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$value, E> {
            Ok(None)
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<$value, E> {
            Ok(None)
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<$value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    };
}

/// Reads a string field leniently: a value of another shape is `None`, not an error (as when the
/// object was a JSON tree), so a verdict is not refused over a field it does not read.
#[derive(Debug, Default)]
pub(crate) struct Text(pub(crate) Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text, D::Error> {
        deserializer.deserialize_any(TextVisitor).map(Text)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Option<String>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Option<String>, E> {
        Ok(Some(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Option<String>, E> {
        Ok(Some(value))
    }

    none_for_other_shapes!(Option<String>);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// Reads `data`: its `release` key (Helm reads nothing else) keeping that string's bytes as
/// they stand in the JSON: Helm only ever base64-decodes them, which refuses anything but base64
/// text, so they are neither checked as UTF-8 nor scanned for control characters here (serde_json
/// then finds the string's end with a vectorised search: most of a review's bytes are this string).
/// `data` of another shape, a `null` or an array `release` is no payload; a `release` that is a
/// number, a boolean or an object is a malformed object (the API server stores none of these).
/// Any other string key is kept as it stands (Helm writes none; the recycle bin keeps what
/// someone added); a value of another shape there is left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ReleaseData {
    pub(crate) release: Option<Bytes>,
    pub(crate) other: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for ReleaseData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ReleaseData, D::Error> {
        deserializer.deserialize_any(DataVisitor).map(Option::unwrap_or_default)
    }
}

struct DataVisitor;

impl<'de> Visitor<'de> for DataVisitor {
    type Value = Option<ReleaseData>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an object's data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<ReleaseData>, A::Error> {
        let mut data = ReleaseData::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "release" {
                data.release = map.next_value::<Option<ReleaseBytes>>()?.and_then(|bytes| bytes.0);
            } else if let Text(Some(value)) = map.next_value::<Text>()? {
                data.other.insert(key.into_owned(), value);
            }
        }
        Ok(Some(data))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<ReleaseData>, E> {
        Ok(None)
    }

    none_for_other_shapes!(Option<ReleaseData>);
}

/// The `release` string's bytes ([`ReleaseData`]); an array is skipped.
struct ReleaseBytes(Option<Bytes>);

impl<'de> Deserialize<'de> for ReleaseBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ReleaseBytes, D::Error> {
        deserializer.deserialize_bytes(BytesVisitor).map(ReleaseBytes)
    }
}

thread_local! {
    /// The body being read by [`borrowing_from`] on this thread.
    static SOURCE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Runs `read`, a deserialisation of `source`, so that a payload read as it is written (no
/// escapes: Go's encoder writes none in base64) is kept as a slice of `source` rather than
/// copied: an UPDATE review's two payloads then take no memory beyond its body's.
pub(crate) fn borrowing_from<T>(source: &Bytes, read: impl FnOnce() -> T) -> T {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            SOURCE.with(|source| source.borrow_mut().take());
        }
    }
    SOURCE.with(|slot| *slot.borrow_mut() = Some(source.clone()));
    let _clear = Clear;
    read()
}

/// `value` as a slice of the body being read, when it lies in it; else a copy.
fn kept(value: &[u8]) -> Bytes {
    SOURCE
        .with(|source| {
            let source = source.borrow();
            let source = source.as_ref()?;
            let (start, at) = (source.as_ptr() as usize, value.as_ptr() as usize);
            let within = at >= start && at.checked_add(value.len())? <= start.checked_add(source.len())?;
            within.then(|| source.slice_ref(value))
        })
        .unwrap_or_else(|| Bytes::copy_from_slice(value))
}

struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Option<Bytes>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_borrowed_bytes<E: de::Error>(self, value: &'de [u8]) -> Result<Option<Bytes>, E> {
        Ok(Some(kept(value)))
    }

    fn visit_bytes<E: de::Error>(self, value: &[u8]) -> Result<Option<Bytes>, E> {
        Ok(Some(Bytes::copy_from_slice(value)))
    }

    fn visit_byte_buf<E: de::Error>(self, value: Vec<u8>) -> Result<Option<Bytes>, E> {
        Ok(Some(value.into()))
    }

    // A JSON tree (a dump's object) hands over its strings as strings.
    fn visit_str<E: de::Error>(self, value: &str) -> Result<Option<Bytes>, E> {
        Ok(Some(Bytes::copy_from_slice(value.as_bytes())))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Option<Bytes>, E> {
        Ok(Some(value.into_bytes().into()))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Bytes>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}
