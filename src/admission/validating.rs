//! The validating webhook: release records (DELETE: D1–D9, UPDATE: U1–U8, CREATE: logged) and the
//! opt-out labels of namespaces (N1–N4).
//!
//! A DELETE goes through up to four steps, each its own function: decided on the index
//! (`Deletion::decide`), confirmed against what is stored (`Admission::confirm_history`), a
//! copy kept in the recycle bin (`keep_copy`), agreed with the other replicas (`coordinate`).
//! The first is pure and synchronous, under the index's lock; the others await the API server
//! with no lock held.

use std::time::Instant;

use super::object::ReviewObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{Admission, LedgerEntry, Reviewed, Webhook};
use crate::cluster::coordination::{Claimed, ClaimedRecord, local_instant, now_ms};
use crate::cluster::{DeleteCoordinator, IndexChange};
use crate::policy::delete::{DeleteFacts, decide_delete, keeps_copy, needs_agreement};
use crate::policy::mode::{apply_mode, tell_dry_run};
use crate::policy::update::{PayloadSide, RecordSide, UpdateFacts, decide_update};
use crate::policy::{Mode, Outcome, Reason, Requester, Verdict, break_glass_reason};
use crate::recycle_bin::api::RecycleBin;
use crate::recycle_bin::copy::{Keeping, copy_name};
use crate::release::record::DecodedRecord;
use crate::release::{Driver, History, Record, ReleaseKey, ReleasePayload, Status};

/// Decides a request about a Secret or ConfigMap. The objects are taken out of the request:
/// their payloads move into the records rather than being copied.
pub(crate) async fn validate(
    admission: &Admission,
    mut request: AdmissionRequest<ReviewObject>,
    deadline: Instant,
) -> Reviewed {
    let mut entry = LedgerEntry::new(Webhook::Validate, &request);
    if (request.kind.group.as_str(), request.kind.kind.as_str()) == ("", "Namespace") {
        return respond(&request, namespace(admission, &request, &mut entry), entry);
    }
    let driver = Driver::of_kind(&request.kind.group, &request.kind.kind);
    let Some(driver) = driver else { return respond(&request, not_a_record(), entry) };
    // Each side read as a record of this driver, and whether Helm's labels make it one.
    let read = |object: Option<ReviewObject>| {
        object.map(|object| {
            Record::from_parts(
                object.metadata,
                object.secret_type,
                object.release_data,
                object.other_data,
                driver,
            )
        })
    };
    let old = read(request.old_object.take());
    let new = read(request.object.take());

    let decided = match (&request.operation, old, new) {
        (Operation::Delete, Some((record, true)), _) => {
            let record = admission.read_record(record).await;
            delete(admission, &request, record, deadline, &mut entry).await
        }
        // Every supported API server sends the object being deleted; without it nothing can be
        // shown harmless.
        (Operation::Delete, None, _) => no_old_object(admission, &request),
        // The new side may no longer look like a record (a label removed): still read as one.
        (Operation::Update, Some((old, true)), Some((new, new_is_record))) => {
            let (old, new) = (admission.read_record(old).await, admission.read_record(new).await);
            update(admission, &request, old, new, new_is_record, &mut entry)
        }
        // An update that turns an object into a record (a label added), or a creation: Helm's
        // business, logged.
        (Operation::Update | Operation::Create, _, Some((record, true))) => {
            let record = admission.read_record(record).await;
            create(admission, &request, record, &mut entry)
        }
        _ => not_a_record(),
    };
    respond(&request, decided, entry)
}

/// A rule's verdict and what the mode made of it.
#[derive(Debug)]
struct Decided {
    /// What the rule said.
    verdict: Verdict,
    /// What the mode made of it: what the API server is told.
    outcome: Outcome,
    /// An approval that must first be agreed with the other replicas
    /// ([`crate::policy::delete::needs_agreement`]).
    agree: bool,
}

/// A verdict that no mode changes: allowances.
fn allowed(verdict: Verdict) -> Decided {
    let outcome = apply_mode(&verdict, crate::policy::Mode::Enforce);
    Decided { verdict, outcome, agree: false }
}

/// The answer: verdict with mode applied, warnings and audit annotations.
fn respond(request: &AdmissionRequest<ReviewObject>, decided: Decided, mut entry: LedgerEntry) -> Reviewed {
    let Decided { verdict, mut outcome, .. } = decided;
    if request.dry_run {
        tell_dry_run(&mut outcome, &verdict);
    }
    entry.reason = verdict.reason;
    entry.detail = verdict.detail;
    // The full message goes to the ledger in every mode: in audit mode it is the only record of
    // what would have been denied.
    entry.message = verdict.message;
    entry.decision = outcome.decision;
    entry.mode = outcome.mode;
    let mut response = AdmissionResponse::from(request);
    if let Some(message) = outcome.denial {
        response.allowed = false;
        response.result = kube::core::Status::failure(&message, "Forbidden").with_code(403);
    }
    if !outcome.warnings.is_empty() {
        response.warnings = Some(outcome.warnings);
    }
    response.audit_annotations = entry.audit_annotations();
    Reviewed { response, entry }
}

/// A Namespace CREATE or UPDATE: the opt-out labels (N1–N4), in the global mode (a namespace's
/// own mode label is what is judged).
fn namespace(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    entry: &mut LedgerEntry,
) -> Decided {
    use crate::policy::namespace::{NamespaceFacts, Protection, decide_namespace};
    let empty = std::collections::BTreeMap::new();
    fn labels<'a>(
        object: &'a ReviewObject,
        empty: &'a std::collections::BTreeMap<String, String>,
    ) -> &'a std::collections::BTreeMap<String, String> {
        object.metadata.labels.as_ref().unwrap_or(empty)
    }
    let (Some(new), Operation::Create | Operation::Update) = (request.object.as_ref(), &request.operation)
    else {
        return allowed(Verdict::allow(Reason::NotAnOptOut));
    };
    let facts = NamespaceFacts {
        name: &request.name,
        old_labels: request.old_object.as_ref().map(|old| labels(old, &empty)),
        new_labels: labels(new, &empty),
        requester: requester(request),
    };
    let default = admission.settings().policy.default_mode;
    let (before, after) = (
        Protection::of(facts.old_labels.unwrap_or(&empty), default),
        Protection::of(facts.new_labels, default),
    );
    if before != after {
        entry.transition = Some(format!("{} -> {}", before.describe(), after.describe()));
    }
    let verdict = decide_namespace(&facts, &admission.settings().policy);
    let outcome = apply_mode(&verdict, default);
    Decided { verdict, outcome, agree: false }
}

fn not_a_record() -> Decided {
    allowed(Verdict::allow(Reason::NotAReleaseRecord))
}

fn no_old_object(admission: &Admission, request: &AdmissionRequest<ReviewObject>) -> Decided {
    let verdict = Verdict::deny(
        Reason::NoOldObject,
        format!(
            "helm-guard: the review of this DELETE of {}/{} carries no oldObject, so helm-guard cannot tell what \
             is deleted; every supported API server sends it",
            request.namespace.as_deref().unwrap_or_default(),
            request.name
        ),
    );
    let (_, mode) = admission.namespace(request.namespace.as_deref().unwrap_or_default());
    let outcome = apply_mode(&verdict, mode);
    Decided { verdict, outcome, agree: false }
}

fn requester(request: &AdmissionRequest<ReviewObject>) -> Requester<'_> {
    Requester {
        username: request.user_info.username.as_deref().unwrap_or_default(),
        groups: request.user_info.groups.as_deref().unwrap_or_default(),
    }
}

/// Fills the ledger entry with what the record says.
fn describe_record(entry: &mut LedgerEntry, record: &DecodedRecord) {
    entry.release = Some(record.record.id.key.to_string());
    entry.revision = Some(record.record.id.revision);
    entry.status = record.status();
    entry.chart = record
        .payload
        .as_ref()
        .ok()
        .and_then(ReleasePayload::chart_metadata)
        .map(|chart| format!("{}-{}", chart.name, chart.version));
}

fn status_text(status: Option<Status>) -> &'static str {
    status.map_or("undecodable", Status::as_str)
}

/// A DELETE of a release record, in four steps: decided on the index as it is; confirmed against
/// what is stored when the verdict rests on the rest of the history; a copy kept in the recycle
/// bin when the approval is not one of Helm's own deletions; agreed with the other replicas when
/// another's approval could turn it. Each step past the first may await the API server.
async fn delete(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    record: DecodedRecord,
    deadline: Instant,
    entry: &mut LedgerEntry,
) -> Decided {
    let id = &record.record.id;
    let object = record.record.object_name.as_str();
    describe_record(entry, &record);
    let status = record.status();
    entry.transition = Some(format!("{} -> (deleted)", status_text(status)));
    let (namespace, mode) = admission.namespace(&id.key.namespace);
    let glass = break_glass_reason(&record.record.annotations);
    let dry_run = request.dry_run;
    let deletion = Deletion {
        admission,
        facts: DeleteFacts {
            namespace: &id.key.namespace,
            release: &id.key.release,
            revision: id.revision,
            status,
            namespace_terminating: namespace.terminating,
            requester: requester(request),
            break_glass: glass.as_deref(),
        },
        key: &id.key,
        claimed: ClaimedRecord { object, uid: record.record.uid.as_deref() },
        mode,
        dry_run,
        confirms: admission.live.fetcher.is_some(),
        bin: admission.live.recycle_bin.as_deref().filter(|_| !dry_run),
        coordinator: admission.live.coordinator.as_deref().filter(|_| !dry_run),
    };

    let (mut decided, mut keep) = deletion.decide(Stage::First);
    if deletion.needs_confirmation(decided.verdict.reason) {
        // Decided again on what is stored now: the watch shown caught up (or the release listed),
        // and every record known only by its labels read as Helm reads it.
        let listed = admission.confirm_history(&id.key, Some(object), deadline).await;
        (decided, keep) = deletion.decide(if listed { Stage::Confirmed } else { Stage::First });
        if !listed && decided.verdict.allowed {
            // Without the confirmation a refusal still stands (it fails closed); an approval cannot.
            return unconfirmed(&id.key, object, mode);
        }
    }
    if let Some(bin) = deletion.bin.filter(|_| keep) {
        // No approval that needs the replicas' agreement keeps a copy: those are Helm's own.
        debug_assert!(!decided.agree);
        return keep_copy(admission, bin, request, &record.record, decided, deadline, entry).await;
    }
    let Some(coordinator) = deletion.coordinator else { return decided };
    if !decided.agree {
        // Refusals, and approvals that hold whatever else is deleted, need no agreement.
        return decided;
    }
    coordinate(admission, coordinator, &id.key, &deletion.claimed, deadline, mode, || {
        deletion.decide(Stage::Agreed).0
    })
    .await
}

/// One DELETE as its steps see it: what the rules are told, and which of the live guard's checks
/// apply (none in a dry run but the confirmation: a dry run gets the real verdict).
struct Deletion<'a> {
    admission: &'a Admission,
    facts: DeleteFacts<'a>,
    key: &'a ReleaseKey,
    claimed: ClaimedRecord<'a>,
    mode: Mode,
    dry_run: bool,
    /// A live guard: verdicts that rest on the history are confirmed against what is stored.
    confirms: bool,
    bin: Option<&'a dyn RecycleBin>,
    coordinator: Option<&'a dyn DeleteCoordinator>,
}

impl Deletion<'_> {
    /// The rules on the release as the index holds it now, the mode applied, and whether an
    /// approval keeps a copy. Decided under the index lock, with the one change it makes: an
    /// approval that stands at `stage` hides the record at once (a tombstone, until the watch
    /// brings the deletion), so the next request about the release is decided without it.
    fn decide(&self, stage: Stage) -> (Decided, bool) {
        let policy = &self.admission.settings().policy;
        let facts = &self.facts;
        self.admission.index().decide(self.key, Some(self.claimed.object), |others| {
            let history = History::new(others);
            let verdict = decide_delete(facts, &history, policy);
            let outcome = apply_mode(&verdict, self.mode);
            let keep = self.bin.is_some() && outcome.allowed && keeps_copy(facts, &history, policy);
            let agree = outcome.allowed && needs_agreement(facts, &history, verdict.reason);
            let decided = Decided { verdict, outcome, agree };
            let hide = decided.outcome.allowed && !keep && !self.dry_run && self.stands(&decided, stage);
            let change = hide.then(|| IndexChange::Delete {
                object: self.claimed.object.to_owned(),
                uid: self.claimed.uid.map(str::to_owned),
            });
            ((decided, keep), change)
        })
    }

    /// Whether a verdict is confirmed against what is stored before it is answered: on a live
    /// guard, one read off the rest of the history (the watch may not have brought the latest
    /// records yet), and one that could not read the rest (the confirmation reads it).
    fn needs_confirmation(&self, reason: Reason) -> bool {
        self.confirms && (reason == Reason::UnreadHistory || reason.rests_on_history())
    }

    /// Whether an approval stands at `stage`: no check is left for it. One that keeps a copy
    /// stands once the copy is stored (`keep_copy`).
    fn stands(&self, decided: &Decided, stage: Stage) -> bool {
        let agreeing = self.coordinator.is_some() && decided.agree;
        match stage {
            Stage::First => !(agreeing || self.needs_confirmation(decided.verdict.reason)),
            Stage::Confirmed => !agreeing,
            Stage::Agreed => true,
        }
    }
}

/// How far a DELETE's checks have come: decided on the index as it is, then confirmed against
/// what is stored, then agreed with the other replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    First,
    Confirmed,
    Agreed,
}

/// Stores a copy of the record in the recycle bin before its deletion is approved; then the
/// approval stands (the record hidden in the index) and the client is told where the copy is.
/// A copy that cannot be stored in time refuses the deletion, "retry", whatever the mode (the
/// mode softens the rules, not the loss of the record), unless `--recycle-best-effort`.
async fn keep_copy(
    admission: &Admission,
    bin: &dyn RecycleBin,
    request: &AdmissionRequest<ReviewObject>,
    record: &Record,
    mut decided: Decided,
    deadline: Instant,
    entry: &mut LedgerEntry,
) -> Decided {
    let key = &record.id.key;
    let keeping = Keeping {
        reason: decided.verdict.reason.as_str(),
        requester: requester(request).username,
        at: jiff::Timestamp::now().as_second(),
    };
    let kept = bin.keep(record, &keeping, deadline).await;
    if let Err(error) = &kept
        && !admission.settings().recycle_best_effort
    {
        let verdict = Verdict::deny(
            Reason::RecycleBinUnavailable,
            format!(
                "helm-guard: deleting {} (release {key}) keeps a copy in helm-guard's recycle bin first, and the copy \
                 could not be stored ({error}), so the deletion is refused; retry in a moment",
                record.describe()
            ),
        );
        let outcome = apply_mode(&verdict, Mode::Enforce);
        return Decided { verdict, outcome, agree: false };
    }
    let gone = IndexChange::Delete { object: record.object_name.clone(), uid: record.uid.clone() };
    admission.index().apply(key, gone);
    let note = match kept {
        Ok(()) => {
            let copy = format!("{}/{}", bin.namespace(), copy_name(record));
            let restore = crate::recycle_bin::restore_command(
                &key.release,
                &key.namespace,
                Some(record.id.revision),
                bin.namespace(),
            );
            let note = format!(
                "helm-guard: a copy of {} is kept in the recycle bin as Secret {copy}; `{restore}` brings it back",
                record.describe()
            );
            entry.recycled = Some(copy);
            note
        }
        Err(error) => format!(
            "helm-guard: no copy of {} could be kept in the recycle bin ({error}); deleted without one \
             (--recycle-best-effort)",
            record.describe()
        ),
    };
    decided.outcome.warnings.push(note);
    decided
}

/// An approval that rests on the history, refused because the release could not be listed in
/// time: without the listing a record the watch has not brought yet could turn it.
fn unconfirmed(key: &ReleaseKey, object: &str, mode: Mode) -> Decided {
    let verdict = Verdict::deny(
        Reason::UnreadHistory,
        format!(
            "helm-guard: could not list the records of release {}/{} within the decision deadline, so it cannot \
             show that deleting {object} is harmless; retry in a moment",
            key.namespace, key.release
        ),
    );
    let outcome = apply_mode(&verdict, mode);
    Decided { verdict, outcome, agree: false }
}

/// Agrees an approval of a deletion with the other replicas (see [`crate::cluster::coordination`]):
/// reads the release's claims, hides what other replicas approved, decides again, and writes
/// this approval's claim against the version read; a conflict starts over. Past the deadline,
/// or when the API refuses, the deletion is refused with a message to retry: it cannot be shown
/// harmless.
async fn coordinate(
    admission: &Admission,
    coordinator: &dyn DeleteCoordinator,
    key: &ReleaseKey,
    record: &ClaimedRecord<'_>,
    deadline: Instant,
    mode: Mode,
    decide: impl Fn() -> Decided,
) -> Decided {
    let object = record.object;
    let error = loop {
        let claims = match coordinator.claims(key, deadline).await {
            Ok(claims) => claims,
            Err(error) => break error,
        };
        let now = now_ms();
        for claim in claims.claims.iter().filter(|claim| !claim.is(record)) {
            admission.index().hide(key, &claim.object, claim.uid.as_deref(), local_instant(claim.until, now));
        }
        let decided = decide();
        if !decided.agree {
            return decided;
        }
        match coordinator.claim(key, record, &claims, deadline).await {
            Ok(Claimed::Yes) => return decided,
            Ok(Claimed::Conflict) => admission.index().unhide(key, object, record.uid),
            Err(error) => {
                admission.index().unhide(key, object, record.uid);
                break error;
            }
        }
    };
    admission.counts().coordination_refused.inc();
    tracing::warn!(namespace = %key.namespace, release = %key.release, %object, %error, "could not agree a deletion with the other replicas");
    let verdict = Verdict::deny(
        Reason::CoordinationUnavailable,
        format!(
            "helm-guard: could not agree the deletion of {object} (release {}/{}) with the other helm-guard replicas ({error}), \
             so it cannot be shown harmless; retry in a moment",
            key.namespace, key.release
        ),
    );
    let outcome = apply_mode(&verdict, mode);
    Decided { verdict, outcome, agree: false }
}

fn update(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    old: DecodedRecord,
    new: DecodedRecord,
    new_is_record: bool,
    entry: &mut LedgerEntry,
) -> Decided {
    describe_record(entry, &new);
    entry.transition = Some(format!("{} -> {}", status_text(old.status()), status_text(new.status())));
    fn side(r: &DecodedRecord) -> RecordSide<'_> {
        RecordSide {
            labels: &r.record.labels,
            secret_type: r.record.secret_type.as_deref(),
            payload: r
                .payload
                .as_ref()
                .ok()
                .map(|p| PayloadSide { status: p.info.status, content: p.content }),
            owner_references: &r.record.owner_references,
            finalizers: &r.record.finalizers,
        }
    }
    let glass = break_glass_reason(&new.record.annotations);
    let facts = UpdateFacts {
        namespace: &old.record.id.key.namespace,
        object_name: &old.record.object_name,
        old: side(&old),
        new: side(&new),
        requester: requester(request),
        break_glass: glass.as_deref(),
    };
    let (_, mode) = admission.namespace(&old.record.id.key.namespace);
    let verdict = decide_update(&facts, &admission.settings().policy);
    let outcome = apply_mode(&verdict, mode);
    if outcome.allowed && !request.dry_run {
        let object = new.record.object_name.clone();
        if !new_is_record || new.record.id.key != old.record.id.key {
            // A forced identity change: the old record is gone from the release Helm sees.
            let gone =
                IndexChange::Delete { object: old.record.object_name.clone(), uid: old.record.uid.clone() };
            admission.index().apply(&old.record.id.key, gone);
        }
        if new_is_record {
            admission.index().apply(&new.record.id.key, IndexChange::Upsert { object, facts: new.facts() });
        }
    }
    Decided { verdict, outcome, agree: false }
}

fn create(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    record: DecodedRecord,
    entry: &mut LedgerEntry,
) -> Decided {
    describe_record(entry, &record);
    entry.transition = Some(format!("(new) -> {}", status_text(record.status())));
    let verdict = match &record.payload {
        Ok(_) => Verdict::allow(Reason::HelmCreate),
        Err(error) => Verdict::warn(
            Reason::HelmCreate,
            format!(
                "helm-guard: the payload of {} does not decode ({error}); Helm will ignore this record",
                record.record.describe()
            ),
        ),
    };
    if !request.dry_run {
        let change = IndexChange::Upsert { object: record.record.object_name.clone(), facts: record.facts() };
        admission.index().apply(&record.record.id.key, change);
    }
    allowed(verdict)
}
