//! The recycle bin as the validating webhook uses it: which deletions of real Helm records keep
//! a copy first, what the copy gives back, and what a copy that cannot be stored does to the
//! deletion. The bin here is an in-memory stand-in that keeps the create bodies the guard would
//! send; tests/e2e_recycle.rs stores them in a real API server and restores them with Helm.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;

use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings, Webhook, review as admission_review};
use helm_guard::policy::{Mode, PolicyConfig};
use helm_guard::recycle_bin::api::{BinError, RecycleBin};
use helm_guard::recycle_bin::copy::{Keeping, copy_body};
use helm_guard::release::Record;
use serde_json::{Value, json};

/// Keeps the bodies the guard would create, or refuses them as a quota would.
#[derive(Debug, Default)]
struct MemoryBin {
    bodies: Mutex<Vec<Value>>,
    refuse: bool,
    /// The API has not answered yet.
    hold: std::sync::atomic::AtomicBool,
}

impl RecycleBin for MemoryBin {
    fn keep<'a>(
        &'a self,
        record: &'a Record,
        keeping: &'a Keeping<'a>,
        _deadline: Instant,
    ) -> BoxFuture<'a, Result<(), BinError>> {
        // While held, the API has not answered yet: the decision's future stays pending.
        Box::pin(std::future::poll_fn(move |_| {
            if self.hold.load(std::sync::atomic::Ordering::SeqCst) {
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(self.store(record, keeping))
        }))
    }

    fn namespace(&self) -> &str {
        "helm-guard"
    }
}

impl MemoryBin {
    fn store(&self, record: &Record, keeping: &Keeping<'_>) -> Result<(), BinError> {
        if self.refuse {
            return Err(BinError::Api(
                "secrets \"x\" is forbidden: exceeded quota: bin, requested: count/secrets=1".into(),
            ));
        }
        let body = copy_body(record, keeping, "helm-guard")?;
        self.bodies.lock().unwrap().push(serde_json::from_slice(&body).unwrap());
        Ok(())
    }
}

struct Guard {
    admission: Admission,
    bin: Arc<MemoryBin>,
}

fn guard(records: &[Value], config: PolicyConfig, bin: MemoryBin, best_effort: bool) -> Guard {
    let bin = Arc::new(bin);
    let settings = Settings { recycle_best_effort: best_effort, ..Settings::new(config) };
    // alice and ops-bot hold helm-guard-break-glass.
    let live = LiveParts {
        recycle_bin: Some(bin.clone() as Arc<dyn RecycleBin>),
        break_glass: Some(common::BreakGlassHolders::of(&["alice", "ops-bot"])),
        ..LiveParts::default()
    };
    let admission = common::guard::snapshot_admission_with(records, settings, live);
    Guard { admission, bin }
}

/// The response to a review.
fn decide(guard: &Guard, review: &Value) -> Value {
    let body = serde_json::to_vec(review).unwrap();
    let request = admission_review::parse(&body).unwrap();
    let reviewed = guard.admission.review_now(Webhook::Validate, request);
    serde_json::to_value(&reviewed.response).unwrap()
}

fn annotated(mut record: Value) -> Value {
    record["metadata"]["annotations"] = json!({"helm-guard.io/allow-delete": "INC-42 restore from backup"});
    record
}

/// The copy as the API server would store the body and `restore` read it back.
fn stored(body: &Value) -> helm_guard::recycle_bin::copy::RecycledCopy {
    use base64::Engine as _;
    let meta = serde_json::from_value(body["metadata"].clone()).unwrap();
    let mut data = std::collections::BTreeMap::new();
    for (key, value) in body["data"].as_object().unwrap() {
        data.insert(
            key.clone(),
            base64::engine::general_purpose::STANDARD.decode(value.as_str().unwrap()).unwrap(),
        );
    }
    for (key, value) in body["stringData"].as_object().unwrap() {
        data.insert(key.clone(), value.as_str().unwrap().as_bytes().to_vec());
    }
    helm_guard::recycle_bin::copy::RecycledCopy::read(&meta, &data).unwrap()
}

/// The record a copy gives back.
fn restored(body: &Value) -> Record {
    Record::from_object(&stored(body).original().unwrap(), None).unwrap().unwrap()
}

/// A deletion that keeps a copy waits for it: until the copy is stored nothing is approved or
/// hidden; once it is, the deletion is approved and the record gone from the view.
#[test]
fn a_copy_is_stored_before_the_deletion_is_approved() {
    use std::future::Future as _;
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let latest = annotated(records[1].clone());
    let guard =
        guard(&[records[0].clone(), latest.clone()], PolicyConfig::default(), MemoryBin::default(), false);
    let body = serde_json::to_vec(&as_user(delete_review(&latest), "alice", &["ops"])).unwrap();
    let request = admission_review::parse(&body).unwrap();
    guard.bin.hold.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut decision = std::pin::pin!(guard.admission.review(Webhook::Validate, request));
    let waker = futures::task::noop_waker();
    let mut context = std::task::Context::from_waker(&waker);
    assert!(decision.as_mut().poll(&mut context).is_pending(), "waits on the copy");
    assert!(guard.bin.bodies.lock().unwrap().is_empty(), "no copy yet");
    assert_eq!(guard.admission.index().history(&web_key()).len(), 2, "nothing hidden while it waits");
    guard.bin.hold.store(false, std::sync::atomic::Ordering::SeqCst);
    let std::task::Poll::Ready(reviewed) = decision.as_mut().poll(&mut context) else { panic!("decided") };
    assert!(reviewed.response.allowed);
    assert_eq!(guard.bin.bodies.lock().unwrap().len(), 1, "kept before the approval");
    assert_eq!(guard.admission.index().history(&web_key()).len(), 1, "then hidden");
}

#[test]
fn a_break_glass_deletion_of_the_deployed_latest_keeps_a_copy_that_gives_the_record_back() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let latest = annotated(records[1].clone());
    let guard =
        guard(&[records[0].clone(), latest.clone()], PolicyConfig::default(), MemoryBin::default(), false);
    let response = decide(&guard, &as_user(delete_review(&latest), "alice", &["ops"]));
    assert_eq!(response["allowed"], true);
    let bodies = guard.bin.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "one copy");
    let labels = &bodies[0]["metadata"]["labels"];
    assert_eq!(
        (
            &labels["helm-guard.io/release"],
            &labels["helm-guard.io/revision"],
            &labels["helm-guard.io/reason"]
        ),
        (&json!("web"), &json!("2"), &json!("break-glass"))
    );
    assert_eq!(bodies[0]["metadata"]["annotations"]["helm-guard.io/requester"], "alice");
    let name = bodies[0]["metadata"]["name"].as_str().unwrap();
    let warnings = response["warnings"].to_string();
    assert!(warnings.contains(&format!("Secret helm-guard/{name}")), "{warnings}");
    assert!(warnings.contains("helm-guard restore web -n demo --revision 2"), "{warnings}");
    assert_eq!(response["auditAnnotations"]["recycle-bin-copy"], format!("helm-guard/{name}"));

    // The copy gives back the record: its payload, labels, type and name, byte for byte.
    let original = Record::from_object(&latest, None).unwrap().unwrap();
    let back = restored(&bodies[0]);
    assert_eq!(back.payload, original.payload);
    assert_eq!(
        (&back.labels, &back.secret_type, &back.object_name),
        (&original.labels, &original.secret_type, &original.object_name)
    );
    assert!(
        !back.annotations.contains_key("helm-guard.io/allow-delete"),
        "restored without the license to delete it again"
    );
}

#[test]
fn what_an_exemption_or_a_weaker_mode_lets_go_keeps_a_copy_and_helms_own_deletions_keep_none() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let exempt = PolicyConfig { exempt_users: vec!["ops-bot".into()], ..PolicyConfig::default() };
    let g = guard(&records, exempt, MemoryBin::default(), false);
    assert_eq!(decide(&g, &as_user(delete_review(&records[1]), "ops-bot", &[]))["allowed"], true);
    assert_eq!(g.bin.bodies.lock().unwrap()[0]["metadata"]["labels"]["helm-guard.io/reason"], "exempt");

    let warn = PolicyConfig { default_mode: Mode::Warn, ..PolicyConfig::default() };
    let g = guard(&records, warn, MemoryBin::default(), false);
    assert_eq!(decide(&g, &delete_review(&records[1]))["allowed"], true);
    assert_eq!(
        g.bin.bodies.lock().unwrap()[0]["metadata"]["labels"]["helm-guard.io/reason"],
        "latest-deployed-revision",
        "the refusal the mode softened"
    );

    // Helm's own: pruning an old revision, an uninstall's purge and its last record; a refusal;
    // a dry run. None keeps a copy.
    let g = guard(&records, PolicyConfig::default(), MemoryBin::default(), false);
    assert_eq!(decide(&g, &delete_review(&records[0]))["allowed"], true, "pruning");
    assert_eq!(decide(&g, &delete_review(&records[1]))["allowed"], false, "refused");
    // `helm uninstall` of a release the guard saw deployed: its latest marked, then purged.
    let deployed = web(&[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    let g2 = guard(&deployed, PolicyConfig::default(), MemoryBin::default(), false);
    let uninstalling = web(&[(1, "superseded"), (2, "superseded"), (3, "uninstalling")]);
    assert_eq!(decide(&g2, &update_review(&deployed[2], &uninstalling[2]))["allowed"], true, "marked");
    for record in &uninstalling {
        assert_eq!(decide(&g2, &delete_review(record))["allowed"], true, "uninstall");
    }
    let glass = annotated(records[1].clone());
    let g3 =
        guard(&[records[0].clone(), glass.clone()], PolicyConfig::default(), MemoryBin::default(), false);
    assert_eq!(decide(&g3, &dry_run(delete_review(&glass)))["allowed"], true, "dry run");
    for g in [&g, &g2, &g3] {
        assert!(g.bin.bodies.lock().unwrap().is_empty());
    }
}

#[test]
fn a_copy_that_cannot_be_stored_refuses_the_deletion_with_retry_unless_best_effort() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let latest = annotated(records[1].clone());
    let history = [records[0].clone(), latest.clone()];
    let refusing = || MemoryBin { refuse: true, ..MemoryBin::default() };
    // Warn mode too: the mode softens the rules, not the loss of the record.
    for mode in [Mode::Enforce, Mode::Warn] {
        let config = PolicyConfig { default_mode: mode, ..PolicyConfig::default() };
        let g = guard(&history, config, refusing(), false);
        let response = decide(&g, &delete_review(&latest));
        assert_eq!(response["allowed"], false, "{mode}");
        assert_eq!(response["auditAnnotations"]["reason"], "recycle-bin-unavailable");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("exceeded quota") && message.contains("retry"), "{message}");
        // Nothing was hidden: the record still counts, so deleting the old one is still pruning
        // of a release whose latest is deployed, not the loss of the last deployed revision.
        let old = decide(&g, &delete_review(&records[0]));
        assert_eq!(old["auditAnnotations"]["reason"], "history-pruning");
    }
    let g = guard(&history, PolicyConfig::default(), refusing(), true);
    let response = decide(&g, &delete_review(&latest));
    assert_eq!(response["allowed"], true);
    let warnings = response["warnings"].to_string();
    assert!(warnings.contains("no copy") && warnings.contains("--recycle-best-effort"), "{warnings}");
}

fn decoded(records: &[Value]) -> Vec<helm_guard::release::DecodedRecord> {
    helm_guard::release::scan::collect_records(records, Default::default()).0
}

#[test]
fn restore_plans_the_newest_copy_of_each_missing_record_and_the_history_helm_will_show() {
    use helm_guard::recycle_bin::restore::{StepAction, plan};
    let records = web(&[(1, "superseded"), (2, "superseded"), (3, "deployed")]);
    let glass: Vec<Value> = records.iter().cloned().map(annotated).collect();
    let g = guard(&glass, PolicyConfig::default(), MemoryBin::default(), false);
    // Someone forces the whole history away, newest first; each deletion keeps a copy.
    for record in glass.iter().rev() {
        assert_eq!(decide(&g, &as_user(delete_review(record), "alice", &[]))["allowed"], true);
    }
    let copies: Vec<_> = g.bin.bodies.lock().unwrap().iter().map(stored).collect();
    assert_eq!(copies.len(), 3);

    // Nothing is left: all three come back, and Helm's history is what it was.
    let plans = plan(&copies, &[], &[], Default::default(), 0, 900);
    assert_eq!(plans.len(), 1);
    let revisions: Vec<(u32, StepAction)> = plans[0].steps.iter().map(|s| (s.revision, s.action)).collect();
    assert_eq!(revisions, [(1, StepAction::Restore), (2, StepAction::Restore), (3, StepAction::Restore)]);
    let history: Vec<(u32, String, bool)> =
        plans[0].history.iter().map(|r| (r.revision, r.status.to_string(), r.restored)).collect();
    assert_eq!(
        history,
        [(1, "superseded".into(), true), (2, "superseded".into(), true), (3, "deployed".into(), true)]
    );
    assert_eq!(plans[0].state_after.as_deref(), Some("healthy"));

    // Revision 1 exists again (say, restored before): never written over; --revision 3 alone.
    let live = decoded(&records[..1]);
    let plans = plan(&copies, &live, &[], Default::default(), 0, 900);
    assert_eq!(plans[0].steps[0].action, StepAction::Exists);
    assert!(plans[0].history.iter().any(|r| r.revision == 1 && !r.restored));
    let only = plan(&copies, &[], &[3], Default::default(), 0, 900);
    assert_eq!(only[0].steps.len(), 1);
    assert_eq!(only[0].state_after.as_deref(), Some("healthy"));
    let only_old = plan(&copies, &[], &[2], Default::default(), 0, 900);
    assert_eq!(
        only_old[0].state_after.as_deref(),
        Some("orphaned-superseded"),
        "what restoring only revision 2 leaves"
    );

    // Two copies of one object (it was deleted, refused later, edited and deleted again): the
    // newer is restored.
    let mut older = copies[0].clone();
    older.entry.kept_at -= 60;
    older.entry.name = "helm-guard-recycled-older".into();
    let plans = plan(&[older, copies[0].clone()], &[], &[], Default::default(), 0, 900);
    let actions: Vec<(&str, StepAction)> =
        plans[0].steps.iter().map(|s| (s.copy.as_str(), s.action)).collect();
    assert_eq!(actions[1], ("helm-guard-recycled-older", StepAction::Older));
    assert_eq!(actions[0].1, StepAction::Restore);
}

/// An edit only the break-glass annotation lets through (a payload emptied, a status Helm never
/// writes) keeps a copy of the record as it was; one the rules allow anyway keeps none.
#[test]
fn a_break_glass_update_keeps_what_it_overwrites() {
    let records = web(&[(1, "superseded"), (2, "deployed")]);
    let g = guard(&records, PolicyConfig::default(), MemoryBin::default(), false);
    let mut emptied = annotated(records[1].clone());
    emptied["data"]["release"] = json!("");
    let answer = decide(&g, &update_review(&records[1], &emptied));
    assert_eq!(
        (answer["allowed"].as_bool(), answer["auditAnnotations"]["reason"].as_str()),
        (Some(true), Some("break-glass"))
    );
    let bodies = g.bin.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "a copy of what the edit overwrote");
    let copy = stored(&bodies[0]);
    assert_eq!((copy.entry.revision, copy.entry.reason.as_str()), (2, "break-glass"));
    assert!(answer["warnings"][0].as_str().unwrap().contains("kept in the recycle bin"));

    let g = guard(&records, PolicyConfig::default(), MemoryBin::default(), false);
    let superseded = annotated(rewrite(&records[1], 2, "superseded"));
    let answer = decide(&g, &update_review(&records[1], &superseded));
    assert_eq!(answer["allowed"], true);
    assert!(g.bin.bodies.lock().unwrap().is_empty(), "Helm's own edit: no copy");
}
