//! Helpers shared by the integration tests: real fixtures, and real records re-encoded with
//! another status or revision.
#![allow(dead_code)] // each test binary uses its own subset of these helpers

pub mod cluster;
pub mod crafted;
pub mod flows;
pub mod guard;
pub mod helm_twins;
pub mod stub_apiserver;
pub mod writers;

/// The helm-guard binary, as Cargo names it to the integration suites. The library's own suites
/// (src/tests, which share these helpers) have none to run: a stale build would be taken for this
/// one.
pub fn guard_binary() -> &'static str {
    match option_env!("CARGO_BIN_EXE_helm-guard") {
        Some(path) => path,
        None => panic!("only the integration suites run the helm-guard binary"),
    }
}

use std::path::{Path, PathBuf};

use helm_guard::release::DecodeLimits;
use helm_guard::release::decode::codec::{
    decode_helm_payload, decode_secret_payload, encode_helm_payload, encode_secret_payload,
};
use serde_json::{Value, json};

pub fn fixture_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(relative)
}

pub fn fixture(relative: &str) -> Value {
    let text = std::fs::read(fixture_path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every AdmissionReview fixture, in the order the API server sent them within each scenario.
pub fn admission_fixtures() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for scenario in std::fs::read_dir(fixture_path("admission")).unwrap() {
        let scenario = scenario.unwrap().path();
        if scenario.is_dir() {
            for file in std::fs::read_dir(&scenario).unwrap() {
                files.push(file.unwrap().path());
            }
        }
    }
    files.sort();
    files
}

/// The release record inside a review: `object` for CREATE/UPDATE, `oldObject` for DELETE.
pub fn record_from_review(relative: &str, side: &str) -> Value {
    let review = fixture(relative);
    let object = review["request"][side].clone();
    assert!(object.is_object(), "{relative} has no {side}");
    strip_server_fields(object)
}

fn strip_server_fields(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    object
}

/// The record's release JSON.
pub fn release_json(record: &Value) -> Value {
    let stored = record["data"]["release"].as_str().unwrap().as_bytes();
    let bytes = if record["kind"] == "Secret" {
        decode_secret_payload(stored, DecodeLimits::default()).unwrap()
    } else {
        decode_helm_payload(stored, DecodeLimits::default()).unwrap()
    };
    serde_json::from_slice(&bytes).unwrap()
}

/// Replaces the record's payload with `release` encoded as Helm does.
pub fn with_release_json(mut record: Value, release: &Value) -> Value {
    let json = serde_json::to_vec(release).unwrap();
    let encoded =
        if record["kind"] == "Secret" { encode_secret_payload(&json) } else { encode_helm_payload(&json) };
    record["data"]["release"] = Value::String(String::from_utf8(encoded).unwrap());
    record
}

/// A real record re-encoded as another revision with another status (payload and label agree).
pub fn rewrite(record: &Value, revision: u32, status: &str) -> Value {
    let mut release = release_json(record);
    release["version"] = json!(revision);
    release["info"]["status"] = json!(status);
    let name = release["name"].as_str().unwrap().to_owned();
    let mut out = with_release_json(record.clone(), &release);
    out["metadata"]["name"] = json!(format!("sh.helm.release.v1.{name}.v{revision}"));
    out["metadata"]["labels"]["version"] = json!(revision.to_string());
    out["metadata"]["labels"]["status"] = json!(status);
    if let Some(meta) = out["metadata"].as_object_mut() {
        meta.remove("uid");
        meta.remove("resourceVersion");
    }
    out
}

/// A real record re-encoded as a record of another release (payload, object name and label).
pub fn as_release(record: &Value, release: &str) -> Value {
    let mut payload = release_json(record);
    payload["name"] = json!(release);
    let revision = payload["version"].as_u64().unwrap();
    let mut out = with_release_json(record.clone(), &payload);
    out["metadata"]["name"] = json!(format!("sh.helm.release.v1.{release}.v{revision}"));
    out["metadata"]["labels"]["name"] = json!(release);
    out
}

/// Polls `check` until it holds or `within` has passed; whether it held (a result to assert:
/// ignored, a check that never held would pass).
#[must_use = "assert that it held"]
pub async fn eventually<F, Fut>(within: std::time::Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// A `kubectl get -o json` style List.
pub fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}

/// A real Helm 4 Secret record of release `web` in namespace `demo` (revision 3, deployed).
pub fn helm4_secret() -> Value {
    record_from_review(
        "admission/01-helm4-install-upgrade/006-validate-update-secret-sh.helm.release.v1.web.v3.json",
        "object",
    )
}

/// A real Helm 3 ConfigMap record of release `api` in namespace `cm` (revision 2, deployed).
pub fn helm3_configmap() -> Value {
    record_from_review(
        "admission/07-configmap-driver-install-upgrade/019-validate-update-configmap-sh.helm.release.v1.api.v2.json",
        "object",
    )
}

/// A history of `web` in `demo` built from a real record: one record per (revision, status).
pub fn history(base: &Value, revisions: &[(u32, &str)]) -> Vec<Value> {
    revisions.iter().map(|(revision, status)| rewrite(base, *revision, status)).collect()
}

/// Release `web` in `demo` with these (revision, status) records, from a real Helm 4 record.
pub fn web(revisions: &[(u32, &str)]) -> Vec<Value> {
    history(&helm4_secret(), revisions)
}

/// The key of release `web` in `demo` (Secret driver), as [`web`] builds it.
pub fn web_key() -> helm_guard::release::ReleaseKey {
    helm_guard::release::ReleaseKey {
        driver: helm_guard::release::Driver::Secret,
        namespace: "demo".into(),
        release: "web".into(),
    }
}

pub fn write_temp(dir: &tempfile::TempDir, name: &str, value: &Value) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path
}

/// A real AdmissionReview used as a template, with its uid replaced so each request is distinct.
fn template(relative: &str) -> Value {
    let mut review = fixture(relative);
    review["request"]["uid"] = json!(format!("test-{}", next_uid()));
    review
}

fn next_uid() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

const DELETE_TEMPLATE: &str =
    "admission/02-delete-oldest-and-dryrun-latest/001-validate-delete-secret-sh.helm.release.v1.web.v1.json";
const CREATE_TEMPLATE: &str =
    "admission/01-helm4-install-upgrade/001-validate-create-secret-sh.helm.release.v1.web.v2.json";
const UPDATE_TEMPLATE: &str =
    "admission/01-helm4-install-upgrade/002-validate-update-secret-sh.helm.release.v1.web.v1.json";
const CONFIGMAP_UPDATE_TEMPLATE: &str = "admission/07-configmap-driver-install-upgrade/016-validate-update-configmap-sh.helm.release.v1.api.v1.json";

fn point_at(review: &mut Value, object: &Value) {
    review["request"]["name"] = object["metadata"]["name"].clone();
    review["request"]["namespace"] = object["metadata"]["namespace"].clone();
}

/// The real DELETE request the API server sent, carrying another record.
pub fn delete_review(old_object: &Value) -> Value {
    let mut review = template(DELETE_TEMPLATE);
    point_at(&mut review, old_object);
    review["request"]["oldObject"] = old_object.clone();
    review
}

/// The real CREATE request the API server sent for a Helm 4 Secret, carrying another record.
pub fn create_review(object: &Value) -> Value {
    let mut review = template(CREATE_TEMPLATE);
    point_at(&mut review, object);
    review["request"]["object"] = object.clone();
    review
}

/// The real UPDATE request the API server sent (Secret or ConfigMap), carrying other objects.
pub fn update_review(old_object: &Value, new_object: &Value) -> Value {
    let mut review =
        template(if old_object["kind"] == "ConfigMap" { CONFIGMAP_UPDATE_TEMPLATE } else { UPDATE_TEMPLATE });
    point_at(&mut review, old_object);
    review["request"]["oldObject"] = old_object.clone();
    review["request"]["object"] = new_object.clone();
    review
}

/// A fixture request, as sent (fresh uid).
pub fn review(relative: &str) -> Value {
    template(relative)
}

pub fn as_user(mut review: Value, username: &str, groups: &[&str]) -> Value {
    review["request"]["userInfo"] = json!({"username": username, "groups": groups});
    review
}

pub fn dry_run(mut review: Value) -> Value {
    review["request"]["dryRun"] = json!(true);
    review
}

/// The release `namespace/release` stored in Secrets (Helm's default driver).
pub fn secret_release(namespace: &str, release: &str) -> helm_guard::release::ReleaseKey {
    helm_guard::release::ReleaseKey {
        driver: helm_guard::release::Driver::Secret,
        namespace: namespace.into(),
        release: release.into(),
    }
}

/// The revisions and statuses an index holds for a release, and the state they classify as (a
/// live index that has read no payload yet classifies by the labels).
pub fn indexed_release(
    index: &helm_guard::cluster::ReleaseIndex,
    key: &helm_guard::release::ReleaseKey,
) -> (Vec<(u32, helm_guard::release::Status)>, helm_guard::release::ReleaseState) {
    use helm_guard::release::history::{History, classify};
    let facts = index.history(key);
    (History::new(&facts).revisions().to_vec(), classify(&facts, 0, 900).state)
}

/// Decides one request on this thread: the decision's future driven to its end (the test
/// stubs of the API answer at once, or from other threads).
pub trait ReviewNow {
    fn review_now(
        &self,
        webhook: helm_guard::admission::Webhook,
        request: kube::core::admission::AdmissionRequest<helm_guard::object::ReviewObject>,
    ) -> helm_guard::admission::Reviewed;
}

impl ReviewNow for helm_guard::admission::Admission {
    fn review_now(
        &self,
        webhook: helm_guard::admission::Webhook,
        request: kube::core::admission::AdmissionRequest<helm_guard::object::ReviewObject>,
    ) -> helm_guard::admission::Reviewed {
        futures::executor::block_on(self.review(webhook, request))
    }
}

/// Decides a validating review: (allowed, the `reason` annotation).
pub fn decide(admission: &helm_guard::admission::Admission, review: &Value) -> (bool, String) {
    use helm_guard::admission::{Webhook, review as admission_review};
    let body = serde_json::to_vec(review).unwrap();
    let request = admission_review::parse(&body).unwrap();
    let reviewed = admission.review_now(Webhook::Validate, request);
    let reason = reviewed.response.audit_annotations.get("reason").cloned().unwrap_or_default();
    (reviewed.response.allowed, reason)
}

/// `object` as the API server's GET gives it to the guard's payload reader: read as Helm reads
/// it, or gone when it is not a record of `key`.
pub fn fetched(
    object: Option<&Value>,
    key: &helm_guard::release::ReleaseKey,
) -> helm_guard::cluster::Fetched {
    use helm_guard::cluster::{Fetched, ReadRecord};
    use helm_guard::release::record::{DecodedRecord, Record};
    object
        .and_then(|object| Record::from_object(object, None).unwrap())
        .filter(|record| record.id.key == *key)
        .map_or(Fetched::Gone, |record| {
            Fetched::Read(ReadRecord {
                uid: record.uid.clone(),
                resource_version: record.resource_version.clone(),
                facts: DecodedRecord::new(record, helm_guard::release::DecodeLimits::default()).facts(),
            })
        })
}

/// An authorizer that allows `breakglass` to the users named, on every release or on one, as a
/// binding of the ClusterRole helm-guard-break-glass would (a RoleBinding with `resourceNames`
/// for one), and counts the questions it was asked.
#[derive(Debug, Default)]
pub struct BreakGlassHolders {
    /// (user, the one release it holds it on, or every one).
    users: Vec<(String, Option<String>)>,
    /// How many times it was asked.
    pub asked: std::sync::atomic::AtomicUsize,
}

impl BreakGlassHolders {
    pub fn of(users: &[&str]) -> std::sync::Arc<BreakGlassHolders> {
        std::sync::Arc::new(BreakGlassHolders {
            users: users.iter().map(|u| ((*u).to_owned(), None)).collect(),
            asked: Default::default(),
        })
    }

    /// Each user holds it on the one release named beside it.
    pub fn on_one_release(users: &[(&str, &str)]) -> std::sync::Arc<BreakGlassHolders> {
        std::sync::Arc::new(BreakGlassHolders {
            users: users.iter().map(|(u, r)| ((*u).to_owned(), Some((*r).to_owned()))).collect(),
            asked: Default::default(),
        })
    }
}

impl helm_guard::cluster::BreakGlassAuthority for BreakGlassHolders {
    fn allows<'a>(
        &'a self,
        asker: helm_guard::cluster::Asker<'a>,
        _namespace: &'a str,
        release: &'a str,
        _deadline: std::time::Instant,
    ) -> futures::future::BoxFuture<'a, bool> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let allowed = self
            .users
            .iter()
            .any(|(user, on)| user == asker.username && on.as_deref().is_none_or(|on| on == release));
        Box::pin(std::future::ready(allowed))
    }
}
