//! Verdicts over a metadata-only (live) index: a missing status label is fetched once, and an
//! approved deletion stays hidden until the watch confirms it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use helm_guard::admission::{Admission, Webhook, review as admission_review};
use helm_guard::cluster::feed::RecordFeed;
use helm_guard::cluster::{PayloadFetcher, ReleaseIndex, SourceKind};
use helm_guard::policy::PolicyConfig;
use helm_guard::release::scan::DecodedRecord;
use helm_guard::release::{DecodeLimits, Driver, Record, RecordId};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

/// Serves payloads from a set of objects, as a GET would, and counts the calls.
#[derive(Debug)]
struct FakeApi {
    objects: Vec<Value>,
    calls: Mutex<Vec<u32>>,
}

impl PayloadFetcher for FakeApi {
    fn fetch(&self, id: &RecordId) -> Option<helm_guard::release::history::RevisionFacts> {
        self.calls.lock().unwrap().push(id.revision);
        let object = self.objects.iter().find(|o| o["metadata"]["name"] == id.object_name())?;
        let record = Record::from_object(object, None).ok()??;
        Some(DecodedRecord::new(record, DecodeLimits::default()).facts())
    }
}

fn feed(index: &ReleaseIndex, objects: &[Value]) {
    let mut feed = RecordFeed::new(Driver::Secret);
    feed.apply(index, Event::<PartialObjectMeta<Secret>>::Init);
    for object in objects {
        let meta: PartialObjectMeta<Secret> = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": object["metadata"]
        }))
        .unwrap();
        feed.apply(index, Event::InitApply(meta));
    }
    feed.apply(index, Event::<PartialObjectMeta<Secret>>::InitDone);
}

fn decide(admission: &Admission, review: &Value) -> (bool, String) {
    let request = admission_review::parse(&serde_json::to_vec(review).unwrap()).unwrap();
    let reviewed = admission.review(Webhook::Validate, &request);
    (reviewed.response.allowed, reviewed.entry.reason.as_str().to_owned())
}

#[test]
fn a_missing_status_label_is_fetched_and_an_approved_delete_stays_hidden() {
    // Revision 1 is deployed, but someone removed its status label; 2 is deployed; 3 failed.
    let mut records = history(&helm4_secret(), &[(1, "deployed"), (2, "deployed"), (3, "failed")]);
    records[0]["metadata"]["labels"].as_object_mut().unwrap().remove("status");
    let index = Arc::new(ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(3600) }));
    feed(&index, &records);
    let api = Arc::new(FakeApi { objects: records.clone(), calls: Mutex::default() });
    let admission = Admission {
        index: index.clone(),
        config: PolicyConfig::default(),
        limits: DecodeLimits::default(),
        fetcher: Some(api.clone()),
    };

    // Deleting revision 2 is pruning only because revision 1 is deployed too: the GET tells so.
    assert_eq!(decide(&admission, &delete_review(&records[1])), (true, "history-pruning".to_owned()));
    assert_eq!(*api.calls.lock().unwrap(), vec![1], "one GET, for the revision without a label");

    // The approved deletion is hidden before the watch confirms it: revision 1 is now the only
    // deployed revision.
    assert_eq!(decide(&admission, &delete_review(&records[0])), (false, "last-deployed-revision".to_owned()));
    assert_eq!(api.calls.lock().unwrap().len(), 1, "the fetched status stays in the index");
}
