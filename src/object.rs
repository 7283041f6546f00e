//! The Kubernetes objects helm-guard reads, read only as far as a verdict looks at them: the
//! objects of an AdmissionReview, and the records a live verdict or the read-ahead GETs or lists
//! (`cluster::fetch`). One reader, so that a record means the same from either.
//!
//! kube's `DynamicObject` keeps every field of an object as a JSON tree, and serde's `flatten`
//! first buffers each of them (a release payload included) in an intermediate form: that was the
//! largest cost of a verdict after the TLS stack's own. The guard's webhooks receive Secrets,
//! ConfigMaps and Pods, and read of them some metadata (not `managedFields`, half of a pod's
//! size), a Secret's `type`, `data.release`, and the arguments and environment of a pod's
//! containers; everything else is skipped without being built. A field of an unexpected shape
//! that no verdict reads is left out rather than refused; a duplicate key at the top or in `data`
//! keeps the last value, as Go's `encoding/json` does (the API server never sends one).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, Resource, TypeMeta};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::policy::pod::PodSpec;
use crate::release::decode::fields::{Meta, ReleaseData, Text};

/// An object of a review: the fields of a Secret, ConfigMap or Pod that helm-guard reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReviewObject {
    /// `apiVersion` and `kind`, when both are given.
    pub types: Option<TypeMeta>,
    /// `name`, `generateName`, `namespace`, `uid`, `resourceVersion`, labels, annotations, owner
    /// references (by uid) and finalizers; nothing else of the metadata is read.
    pub metadata: ObjectMeta,
    /// A Secret's `type`.
    pub secret_type: Option<String>,
    /// `data.release` when it is a string: the payload Helm reads (for a Secret, the API's
    /// base64); a slice of the review's body when read by [`crate::admission::review::parse_body`] (or a GET's text, by `cluster::fetch`).
    pub release_data: Option<bytes::Bytes>,
    /// The other string keys of `data` (Helm writes none; kept for the recycle bin).
    pub other_data: std::collections::BTreeMap<String, String>,
    /// A pod's `spec`, as far as the helm-install pod rules read it.
    pub spec: Option<PodSpec>,
    /// A Secret's or ConfigMap's `immutable` (Helm never sets it).
    pub immutable: bool,
}

impl ReviewObject {
    /// The object read as a record of `driver` (taken, so the payload moves rather than being
    /// copied), and whether Helm's labels make it one.
    pub(crate) fn into_record(self, driver: crate::release::Driver) -> (crate::release::Record, bool) {
        crate::release::Record::from_parts(
            self.metadata,
            self.secret_type,
            self.release_data,
            self.other_data,
            self.immutable,
            driver,
        )
    }
}

impl<'de> Deserialize<'de> for ReviewObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ReviewObject, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = ReviewObject;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReviewObject, A::Error> {
        let mut object = ReviewObject::default();
        let (mut api_version, mut kind) = (None, None);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "apiVersion" => api_version = map.next_value::<Text>()?.0,
                "kind" => kind = map.next_value::<Text>()?.0,
                "metadata" => object.metadata = map.next_value::<Option<Meta>>()?.unwrap_or_default().into(),
                "type" => object.secret_type = map.next_value::<Text>()?.0,
                "data" => {
                    let data = map.next_value::<ReleaseData>()?;
                    (object.release_data, object.other_data) = (data.release, data.other);
                }
                "spec" => object.spec = map.next_value::<Option<PodSpec>>()?,
                "immutable" => object.immutable = map.next_value::<Option<bool>>()?.unwrap_or_default(),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        object.types = api_version.zip(kind).map(|(api_version, kind)| TypeMeta { api_version, kind });
        Ok(object)
    }
}

/// Lets kube's `AdmissionRequest` carry the object; the type is resolved at run time, as for
/// kube's `DynamicObject`.
impl Resource for ReviewObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> ReviewObject {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_secret_keeps_its_payload_type_and_metadata() {
        let object = read(
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"sh.helm.release.v1.web.v1","labels":{"owner":"helm"}},
                "type":"helm.sh/release.v1","data":{"other":"eA==","release":"SDRzSQ=="},"immutable":false}"#,
        );
        assert_eq!(object.types.as_ref().map(|t| t.kind.as_str()), Some("Secret"));
        assert_eq!(object.metadata.name.as_deref(), Some("sh.helm.release.v1.web.v1"));
        assert_eq!(object.secret_type.as_deref(), Some("helm.sh/release.v1"));
        assert_eq!(object.release_data.as_deref(), Some(&b"SDRzSQ=="[..]));
        assert_eq!(object.other_data, [("other".to_owned(), "eA==".to_owned())].into());
        assert_eq!(object.spec, None);
    }

    #[test]
    fn fields_of_another_shape_are_left_out_not_refused() {
        for data in [r#"{"release":null}"#, r#"{"release":["x"]}"#, "null", "[1]", "1"] {
            let object = read(&format!(
                r#"{{"metadata":{{}},"data":{data},"type":{data},"apiVersion":"v1","kind":{data}}}"#
            ));
            assert_eq!(object.release_data, None, "{data}");
            assert_eq!(object.secret_type, None, "{data}");
            assert_eq!(object.types, None, "{data}");
        }
        assert_eq!(read(r#"{"data":"release"}"#).release_data, None);
    }

    #[test]
    fn a_release_that_is_no_string_is_a_malformed_object() {
        // The API server stores a Secret's or ConfigMap's data values as strings only.
        for release in ["1", "true", r#"{"a":"b"}"#] {
            let json = format!(r#"{{"data":{{"release":{release}}}}}"#);
            let error = serde_json::from_str::<ReviewObject>(&json).unwrap_err();
            assert!(error.to_string().contains("expected a string"), "{release}: {error}");
        }
    }

    #[test]
    fn the_payload_is_read_as_written_escapes_and_all() {
        // Go's encoder escapes no base64 character, but JSON allows any to be; an escaped one is
        // the character, and what is no base64 is left for the payload's decoder to refuse.
        let object = read(r#"{"data":{"release":"SDR\/zSQ==\u0041\u00e9"}}"#);
        assert_eq!(object.release_data.as_deref(), Some("SDR/zSQ==A\u{e9}".as_bytes()));
    }

    #[test]
    fn a_pod_keeps_its_spec_and_nothing_else_is_built() {
        let object = read(
            r#"{"kind":"Pod","metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"args":["install"]}]},"status":{"phase":"Pending"}}"#,
        );
        assert_eq!(object.types, None, "kind without apiVersion");
        assert_eq!(object.spec.unwrap().containers[0].args, ["install"]);
    }

    #[test]
    fn a_duplicate_key_keeps_the_last_value() {
        let object = read(r#"{"data":{"release":"first","release":"last"},"type":"a","type":"b"}"#);
        assert_eq!(object.release_data.as_deref(), Some(&b"last"[..]));
        assert_eq!(object.secret_type.as_deref(), Some("b"));
    }

    #[test]
    fn malformed_fields_are_errors() {
        assert!(serde_json::from_str::<ReviewObject>(r#"{"metadata":{"name":1}}"#).is_err());
        assert!(serde_json::from_str::<ReviewObject>(r#"{"metadata":"x"}"#).is_err());
        assert!(serde_json::from_str::<ReviewObject>(r#"[]"#).is_err());
    }
}
