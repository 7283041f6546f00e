//! The validating webhook: release records (DELETE: D1–D10, UPDATE: U1–U8, CREATE: C1–C8; the owner lock O1 before them) and
//! the opt-out labels of namespaces (N1–N4).
//!
//! A DELETE of a record is decided in [`super::delete`], its steps in order; everything else here.
//! Each decision returns what it was about and its verdict; [`respond`] builds the answer and the
//! ledger entry from them, once.

use std::time::Instant;

use crate::object::ReviewObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::decided::{Decided, glass_counts_on, on_what_may_be_stored, requester, requester_of_records};
use super::ledger::{About, Asked, Judged};
use super::{Admission, LedgerEntry, Reviewed, Webhook};
use crate::cluster::IndexChange;
use crate::cluster::registration::{PROBE_LABEL, probe_reply};
use crate::policy::create::{CreateFacts, RESTORED_FROM_ANNOTATION, decide_create};
use crate::policy::mode::{apply_mode, tell_dry_run};
use crate::policy::update::{PayloadSide, RecordSide, UpdateFacts, decide_update, rests_on_history};
use crate::policy::{Reason, Requester, Verdict, break_glass_reason};
use crate::release::decode::Fingerprinting;
use crate::release::history::PayloadStatus;
use crate::release::history::revisions_within;
use crate::release::record::{DecodedRecord, NAME_PREFIX, Record};
use crate::release::writer::Writer;
use crate::release::{Driver, History, ReleasePayload, RevisionFacts, Status};

/// Decides a request about a Secret or ConfigMap. The objects are taken out of the request:
/// their payloads move into the records rather than being copied.
pub(crate) async fn validate(
    admission: &Admission,
    mut request: AdmissionRequest<ReviewObject>,
    deadline: Instant,
) -> Reviewed {
    let asked = Asked::of(Webhook::Validate, &request);
    if (request.kind.group.as_str(), request.kind.kind.as_str()) == ("", "Namespace") {
        let (about, decided) = namespace(admission, &request);
        return respond(&request, asked, about, decided);
    }
    if let Some(nonce) = probe_nonce(&request) {
        return respond(&request, asked, About::default(), probe(nonce));
    }
    let driver = Driver::of_kind(&request.kind.group, &request.kind.kind);
    let Some(driver) = driver else { return respond(&request, asked, About::default(), not_a_record()) };
    // Each side read as a record of this driver, and whether Helm's labels make it one.
    let read = |object: Option<ReviewObject>| object.map(|object| object.into_record(driver));
    let old = read(request.old_object.take());
    let new = read(request.object.take());

    let (about, decided) = match (&request.operation, old, new) {
        (Operation::Delete, Some((record, true)), _) => {
            let record = admission.read_record(record, Fingerprinting::Skip).await;
            let who = requester_of_records(admission, &request, &[&record.record], deadline).await;
            let about = about_record(&record, format!("{} -> (deleted)", status_text(record.status())));
            let refused = past_decode_bound(admission, &request, who, &[&record])
                .or_else(|| owner_locked(admission, &request, who, &record));
            if let Some(refused) = refused {
                return respond(&request, asked, about, refused);
            }
            (about, super::delete::delete(admission, &request, who, &record, deadline).await)
        }
        // Every supported API server sends the object being deleted; without it nothing can be
        // shown harmless.
        (Operation::Delete, None, _) => (About::default(), no_old_object(admission, &request)),
        // The new side may no longer look like a record (a label removed): still read as one.
        (Operation::Update, Some((old, true)), Some((new, new_is_record))) => {
            let (old, new) = (
                admission.read_record(old, Fingerprinting::Take).await,
                admission.read_record(new, Fingerprinting::Take).await,
            );
            let who = requester_of_records(admission, &request, &[&new.record, &old.record], deadline).await;
            match past_decode_bound(admission, &request, who, &[&old, &new]) {
                Some(refused) => (about_record(&new, "(past the decode bound)".into()), refused),
                None if let Some(refused) = owner_locked(admission, &request, who, &new) => (
                    about_record(
                        &new,
                        format!("{} -> {}", status_text(old.status()), status_text(new.status())),
                    ),
                    refused,
                ),
                None => update(admission, &request, who, old, new, new_is_record, deadline).await,
            }
        }
        // An update that turns an object into a record (a label added) makes a record as a
        // creation does: judged as one.
        (Operation::Update | Operation::Create, _, Some((record, true))) => {
            let record = admission.read_record(record, Fingerprinting::Take).await;
            let who = requester_of_records(admission, &request, &[&record.record], deadline).await;
            match past_decode_bound(admission, &request, who, &[&record]) {
                Some(refused) => (about_record(&record, "(new, past the decode bound)".into()), refused),
                None if let Some(refused) = owner_locked(admission, &request, who, &record) => {
                    (about_record(&record, format!("(new) -> {}", status_text(record.status()))), refused)
                }
                None => create(admission, &request, who, record, deadline).await,
            }
        }
        // C2b: an object that is not a record, taking a name Helm stores a revision under.
        (Operation::Create, _, Some((object, false))) if object.object_name.starts_with(NAME_PREFIX) => {
            (About::default(), squat(admission, &request, &object))
        }
        _ => (About::default(), not_a_record()),
    };
    respond(&request, asked, about, decided)
}

/// A verdict that no mode changes: allowances.
fn allowed(verdict: Verdict) -> Decided {
    let outcome = apply_mode(&verdict, crate::policy::Mode::Enforce);
    Decided { verdict, outcome, agree: false, recycled: None }
}

/// The answer: verdict with mode applied, warnings and audit annotations; and the ledger entry,
/// built here once from what was `asked`, what it was `about` and what was decided.
fn respond(
    request: &AdmissionRequest<ReviewObject>,
    asked: Asked,
    about: About,
    decided: Decided,
) -> Reviewed {
    let Decided { verdict, mut outcome, recycled, .. } = decided;
    if request.dry_run {
        tell_dry_run(&mut outcome, &verdict);
    }
    let mut response = AdmissionResponse::from(request);
    if let Some(message) = &outcome.denial {
        response.allowed = false;
        response.result = kube::core::Status::failure(message, "Forbidden").with_code(403);
    }
    if !outcome.warnings.is_empty() {
        response.warnings = Some(outcome.warnings);
    }
    let judged = Judged {
        decision: outcome.decision,
        reason: verdict.reason,
        mode: outcome.mode,
        // The full message goes to the ledger in every mode: in audit mode it is the only record
        // of what would have been denied.
        message: verdict.message,
        detail: verdict.detail,
    };
    let entry = LedgerEntry::new(asked, About { recycled, ..about }, judged);
    response.audit_annotations = entry.audit_annotations();
    Reviewed { response, entry }
}

/// A Namespace CREATE or UPDATE: the opt-out labels (N1–N4), in the global mode (a namespace's
/// own mode label is what is judged).
fn namespace(admission: &Admission, request: &AdmissionRequest<ReviewObject>) -> (About, Decided) {
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
        return (About::default(), allowed(Verdict::allow(Reason::NotAnOptOut)));
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
    let transition = (before != after).then(|| format!("{} -> {}", before.describe(), after.describe()));
    let verdict = decide_namespace(&facts, &admission.settings().policy);
    let outcome = apply_mode(&verdict, default);
    (About { transition, ..About::default() }, Decided { verdict, outcome, agree: false, recycled: None })
}

/// D3a, U4a, C2a: a payload that decodes past `--max-decoded-bytes` is one Helm reads and the
/// guard cannot, so no write of it can be shown harmless (it used to count as unreadable, and
/// pass). Refused, unless the break-glass annotation (on the record) or an exemption counts.
fn past_decode_bound(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    who: Requester<'_>,
    records: &[&DecodedRecord],
) -> Option<Decided> {
    use crate::release::DecodeError;
    let policy = &admission.settings().policy;
    let (record, limit) = records.iter().find_map(|record| match &record.payload {
        Err(DecodeError::TooLarge { limit }) => Some((*record, *limit)),
        _ => None,
    })?;
    let glass = records.iter().any(|r| glass_counts_on(request, &r.record));
    if (glass && policy.may_break_glass(who)) || policy.exemption(who).is_some() {
        return None;
    }
    let verdict = Verdict::deny(
        Reason::PayloadTooLarge,
        format!(
            "helm-guard: the payload of {} decodes to more than {limit} bytes (--max-decoded-bytes), so helm-guard \
             cannot read what Helm reads and cannot show this {} harmless. Raise --max-decoded-bytes, or annotate the \
             record with {}=<reason> to force it",
            record.record.describe(),
            match request.operation {
                Operation::Delete => "deletion",
                Operation::Update => "update",
                _ => "creation",
            },
            crate::policy::BREAK_GLASS_ANNOTATION
        ),
    );
    let (_, mode) = admission.namespace(&record.record.id.key.namespace);
    let outcome = apply_mode(&verdict, mode);
    Some(Decided { verdict, outcome, agree: false, recycled: None })
}

/// O1: a write of a release locked to its owner by another identity is refused before any other
/// rule reads it (POLICY.md, "The owner lock").
fn owner_locked(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    who: Requester<'_>,
    record: &DecodedRecord,
) -> Option<Decided> {
    use crate::policy::owner::{OwnerFacts, decide_owner};
    let key = &record.record.id.key;
    let (namespace, mode) = admission.namespace(&key.namespace);
    let locked = namespace.owner_lock.unwrap_or(admission.settings().policy.owner_lock);
    let writers = admission.writers.as_ref().filter(|_| locked)?;
    let owner = writers.owner(&key.namespace, &key.release);
    let facts = OwnerFacts {
        namespace: &key.namespace,
        release: &key.release,
        locked,
        owner: owner.as_ref(),
        requester: who,
        break_glass: glass_counts_on(request, &record.record),
        namespace_terminating: namespace.terminating && request.operation == Operation::Delete,
        guard_namespace: writers.namespace(),
    };
    let verdict = decide_owner(&facts, &admission.settings().policy)?;
    let outcome = apply_mode(&verdict, mode);
    Some(Decided { verdict, outcome, agree: false, recycled: None })
}

/// The nonce of the guard's reachability probe, when the request is one: the CREATE of a
/// ConfigMap labelled [`PROBE_LABEL`] (only the probe webhook sends those).
fn probe_nonce(request: &AdmissionRequest<ReviewObject>) -> Option<&str> {
    if (request.kind.group.as_str(), request.kind.kind.as_str()) != ("", "ConfigMap")
        || request.operation != Operation::Create
    {
        return None;
    }
    request.object.as_ref()?.metadata.labels.as_ref()?.get(PROBE_LABEL).map(String::as_str)
}

/// The answer to a probe: refused whatever the mode (a probe's ConfigMap is never stored), with
/// the reply the prober looks for. A label value is at most 63 characters: a longer one is no
/// probe of the guard's and gets none of it back.
fn probe(nonce: &str) -> Decided {
    let reply = if nonce.len() <= 63 { probe_reply(nonce) } else { "helm-guard: not a probe".to_owned() };
    let verdict = Verdict::deny(Reason::Probe, reply);
    let outcome = apply_mode(&verdict, crate::policy::Mode::Enforce);
    Decided { verdict, outcome, agree: false, recycled: None }
}

fn not_a_record() -> Decided {
    allowed(Verdict::allow(Reason::NotAReleaseRecord))
}

/// C2b: the CREATE of an object named as Helm names its records that is not one (no `owner=helm`
/// label: only `record-names.helm-guard.io` sends these). Helm's next write of that revision
/// would fail "already exists"; Helm never writes such an object. Refused, unless an exemption
/// counts.
fn squat(admission: &Admission, request: &AdmissionRequest<ReviewObject>, object: &Record) -> Decided {
    let policy = &admission.settings().policy;
    if let Some(who) = policy.exemption(requester(request)) {
        return allowed(Verdict::allow(Reason::Exempt).with_detail(who));
    }
    let namespace = &object.id.key.namespace;
    let verdict = Verdict::deny(
        Reason::ImplausibleRecord,
        format!(
            "helm-guard: {} is named as Helm names the records of its releases but is not one (no owner=helm \
             label): Helm's next write of that revision would fail \"already exists\". Name it otherwise",
            object.describe()
        ),
    );
    let (_, mode) = admission.namespace(namespace);
    let outcome = apply_mode(&verdict, mode);
    Decided { verdict, outcome, agree: false, recycled: None }
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
    Decided { verdict, outcome, agree: false, recycled: None }
}

/// What the record says, for the ledger, and the change the request makes to it.
fn about_record(record: &DecodedRecord, transition: String) -> About {
    About {
        release: Some(record.record.id.key.to_string()),
        revision: Some(record.record.id.revision),
        status: record.status(),
        chart: record
            .payload
            .as_ref()
            .ok()
            .and_then(ReleasePayload::chart_metadata)
            .map(|chart| format!("{}-{}", chart.name, chart.version)),
        transition: Some(transition),
        ..About::default()
    }
}

fn status_text(status: Option<Status>) -> &'static str {
    status.map_or("undecodable", Status::as_str)
}

/// Metadata Helm never sets on a record, the first the object has (C3b).
fn foreign_metadata(record: &Record) -> Option<&'static str> {
    if record.immutable {
        Some("immutable")
    } else if !record.finalizers.is_empty() {
        Some("a finalizer")
    } else if !record.owner_references.is_empty() {
        Some("an owner reference")
    } else {
        None
    }
}

/// What the UPDATE rules read of one side of an update.
fn record_side(r: &DecodedRecord) -> RecordSide<'_> {
    RecordSide {
        labels: &r.record.labels,
        secret_type: r.record.secret_type.as_deref(),
        payload: r.payload.as_ref().ok().map(|p| PayloadSide { status: p.info.status, content: p.content }),
        owner_references: &r.record.owner_references,
        finalizers: &r.record.finalizers,
        immutable: r.record.immutable,
    }
}

/// Decides `rule` on the rest of the release as the index holds it (without `object`). On a live
/// guard a refusal that `rests` on that history is decided again once the index is shown current
/// (a fence round or a listing, then the payloads:
/// [`Freshness`](crate::cluster::freshness::Freshness), as for a DELETE), so that a watch that
/// lags Helm's last write never refuses its next one. An approval stands on the index: a record
/// the watch has not brought yet is one above the rest, whose name the API server refuses to
/// create twice, and what a lagging view lets through is caught by the copy a deletion of the
/// last good revision keeps. So Helm's writes wait on no API call, as before CREATEs were judged
/// (a first one on a guard just started, waiting on a fence round, was refused on the real node).
async fn on_history(
    admission: &Admission,
    record: &DecodedRecord,
    deadline: Instant,
    rests: impl Fn(&Verdict) -> bool,
    rule: impl Fn(&[RevisionFacts]) -> Verdict,
) -> Verdict {
    let (key, object) = (&record.record.id.key, record.record.object_name.as_str());
    let decide =
        || admission.index().decide(key, Some(object), |view| (on_what_may_be_stored(view, &rule), None));
    let first = decide();
    let refusal = !first.allowed && rests(&first);
    let Some(freshness) = admission.freshness.as_ref().filter(|_| refusal) else { return first };
    // A refusal stands whether or not the view was shown current; decided again on what was read.
    freshness.confirm(key, Some(object), deadline).await;
    decide()
}

async fn update(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    who: Requester<'_>,
    old: DecodedRecord,
    new: DecodedRecord,
    new_is_record: bool,
    deadline: Instant,
) -> (About, Decided) {
    let about = about_record(&new, format!("{} -> {}", status_text(old.status()), status_text(new.status())));
    let glass = break_glass_reason(&new.record.annotations);
    let policy = &admission.settings().policy;
    let statuses = old.status().zip(new.status());
    let rests = statuses.is_some_and(|(from, to)| rests_on_history(from, to));
    let rule = |others: &[RevisionFacts]| {
        let others = &History::new(others);
        let facts = UpdateFacts {
            namespace: &old.record.id.key.namespace,
            object_name: &old.record.object_name,
            revision: old.record.id.revision,
            others,
            old: record_side(&old),
            new: record_side(&new),
            requester: who,
            break_glass: glass.as_deref(),
        };
        decide_update(&facts, policy)
    };
    let (_, mode) = admission.namespace(&old.record.id.key.namespace);
    let verdict = on_history(admission, &old, deadline, |_| rests, rule).await;
    let mut outcome = apply_mode(&verdict, mode);
    let overridden = matches!(verdict.reason, Reason::BreakGlass | Reason::Exempt) && !request.dry_run;
    let mut recycled = None;
    if overridden {
        match keep_what_is_overwritten(admission, request, &old, &new, verdict.reason, deadline).await {
            Ok((copy, note)) => {
                recycled = copy;
                outcome.warnings.extend(note);
            }
            Err(refused) => return (about, refused),
        }
    }
    if outcome.allowed {
        outcome.warnings.extend(new.record.size_warning());
    }
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
    (about, Decided { verdict, outcome, agree: false, recycled })
}

/// An UPDATE only an override (break-glass, an exemption) lets through keeps a copy of the
/// record as it was, as such a deletion does: an emptied payload or stripped labels lose what Helm
/// read. The copy kept and a note for the client (none when the rules without the override
/// allow it anyway, or there is no bin); a refusal, "retry", when it cannot be stored (but with
/// `--recycle-best-effort`: no copy, a note).
async fn keep_what_is_overwritten(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    old: &DecodedRecord,
    new: &DecodedRecord,
    reason: Reason,
    deadline: Instant,
) -> Result<(Option<String>, Option<String>), Decided> {
    let Some(bin) = admission.live.recycle_bin.as_deref() else { return Ok((None, None)) };
    let policy = &admission.settings().policy;
    let plain =
        crate::policy::PolicyConfig { exempt_users: Vec::new(), exempt_groups: Vec::new(), ..policy.clone() };
    let unaided = admission.index().decide(&old.record.id.key, Some(&old.record.object_name), |others| {
        let facts = UpdateFacts {
            namespace: &old.record.id.key.namespace,
            object_name: &old.record.object_name,
            revision: old.record.id.revision,
            others: &History::new(others),
            old: record_side(old),
            new: record_side(new),
            requester: requester(request),
            break_glass: None,
        };
        (decide_update(&facts, &plain), None)
    });
    if unaided.allowed {
        return Ok((None, None));
    }
    let keeping = crate::recycle_bin::copy::Keeping {
        reason: reason.as_str(),
        requester: requester(request).username,
        at: jiff::Timestamp::now().as_second(),
        readable: old.payload.is_ok(),
    };
    match bin.keep(&old.record, &keeping, deadline).await {
        Ok(()) => {
            let copy = format!("{}/{}", bin.namespace(), crate::recycle_bin::copy::copy_name(&old.record));
            let note = format!(
                "helm-guard: a copy of {} as it was is kept in the recycle bin as Secret {copy}",
                old.record.describe()
            );
            Ok((Some(copy), Some(note)))
        }
        Err(error) if !admission.settings().recycle_best_effort => {
            let verdict = Verdict::deny(
                Reason::RecycleBinUnavailable,
                format!(
                    "helm-guard: this update of {} keeps a copy of the record as it was first, and the copy could not \
                     be stored ({error}), so it is refused; retry in a moment",
                    old.record.describe()
                ),
            );
            let outcome = apply_mode(&verdict, crate::policy::Mode::Enforce);
            Err(Decided { verdict, outcome, agree: false, recycled: None })
        }
        Err(error) => Ok((
            None,
            Some(format!(
                "helm-guard: no copy of {} could be kept ({error}); updated without one (--recycle-best-effort)",
                old.record.describe()
            )),
        )),
    }
}

async fn create(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    who: Requester<'_>,
    record: DecodedRecord,
    deadline: Instant,
) -> (About, Decided) {
    let about = about_record(&record, format!("(new) -> {}", status_text(record.status())));
    let payload = record.payload.as_ref().ok().map(|p| (p.version, p.info.status));
    let unlike_helms = record.unlike_helms();
    let restored_from = record.record.annotations.get(RESTORED_FROM_ANNOTATION).filter(|v| !v.is_empty());
    let key = &record.record.id.key;
    let (namespace, mode) = admission.namespace(&key.namespace);
    let now = jiff::Timestamp::now().as_second();
    let policy = &admission.settings().policy;
    let rule = |stored: &[RevisionFacts]| {
        let others = &History::new(stored);
        let next = payload.map(|(revision, _)| revision);
        let read = stored.iter().filter(|f| matches!(f.payload, PayloadStatus::Decoded(_)));
        let latest_readable = read.max_by_key(|f| f.revision);
        let facts = CreateFacts {
            namespace: &key.namespace,
            release: &key.release,
            object_name: &record.record.object_name,
            payload,
            unlike_helms: unlike_helms.as_ref(),
            namespace_apart: record.namespace_apart(),
            foreign_metadata: foreign_metadata(&record.record),
            others,
            others_apart: latest_readable.map(|f| f.namespace_apart),
            requester: who,
            may_break_glass: policy.may_break_glass(who),
            restored_from: restored_from.map(String::as_str),
            revisions_last_hour: revisions_within(stored, now, 3600, next),
            max_per_hour: namespace
                .max_revisions_per_hour
                .or(policy.max_revisions_per_hour)
                .filter(|max| *max > 0),
        };
        decide_create(&facts, policy)
    };
    let rests = |verdict: &Verdict| {
        payload.is_some() && (verdict.reason.rests_on_history() || verdict.reason == Reason::UnreadHistory)
    };
    let verdict = on_history(admission, &record, deadline, rests, rule).await;
    let mut outcome = apply_mode(&verdict, mode);
    if outcome.allowed {
        outcome.warnings.extend(record.record.size_warning());
    }
    if outcome.allowed && !request.dry_run {
        let change = IndexChange::Upsert { object: record.record.object_name.clone(), facts: record.facts() };
        admission.index().apply(&record.record.id.key, change);
        // Who creates this revision: remembered once the watch shows it stored (`cluster::writers`).
        if let (Some(writers), Some((revision, _))) = (admission.writers.as_ref(), payload) {
            let writer = Writer::of_request(requester(request).username, request.user_info.extra.as_ref());
            writers.offer(key, &record.record.object_name, revision, writer);
        }
    }
    (about, Decided { verdict, outcome, agree: false, recycled: None })
}
