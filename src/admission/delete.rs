//! A DELETE of a release record, its four steps in order, each a method that returns the next
//! step ([`Next`]: answer, confirm, keep a copy, agree):
//!
//! 1. [`Deletion::decide`]: the rules (POLICY.md D1–D10) on the release as the index holds it,
//!    pure and synchronous under the index's lock;
//! 2. [`Deletion::confirm`]: a verdict that rests on the rest of the history, decided again on
//!    what is stored now ([`Freshness`]: a fence round or a listing, then the payloads), but for
//!    Helm's purge in the shape it leaves a release, on a view its watch brought (POLICY.md, "A
//!    view that lags");
//! 3. [`Deletion::keep_copy`]: an approval that is not one of Helm's own deletions keeps a copy
//!    in the recycle bin first;
//! 4. [`Deletion::agree`]: an approval another replica's approval could turn, agreed with the
//!    other replicas ([`crate::cluster::coordination`]).
//!
//! Steps 2 to 4 await the API server with no lock held; a snapshot's DELETE (no freshness, no
//! bin, no peers) is step 1 alone. An approval hides the record in the index once it stands (a
//! tombstone until the watch brings the deletion), so the next request about the release is
//! decided without it, and approved only if it would be with it too
//! ([`on_what_may_be_stored`]: the deletion may never come).

use std::time::Instant;

use kube::core::admission::AdmissionRequest;

use super::Admission;
use super::decided::{Decided, on_what_may_be_stored};
use crate::cluster::coordination::{Claimed, ClaimedRecord, local_instant, now_ms};
use crate::cluster::freshness::Freshness;
use crate::cluster::{DeleteCoordinator, Fetched, IndexChange, ReleaseView};
use crate::object::ReviewObject;
use crate::policy::Requester;
use crate::policy::delete::{
    DeleteFacts, copy_is_best_effort, decide_delete, holds_on_a_lagging_view, keeps_copy, needs_agreement,
};
use crate::policy::mode::apply_mode;
use crate::policy::{Mode, Reason, Verdict, break_glass_reason};
use crate::recycle_bin::api::RecycleBin;
use crate::recycle_bin::copy::{Keeping, copy_name};
use crate::release::record::DecodedRecord;
use crate::release::{History, Record, ReleaseKey};

/// Decides the DELETE of `record`: its four steps, each past the first taken only when the one
/// before leaves an approval that needs it ([`Next`]). The API calls end by `deadline`.
pub(super) async fn delete(
    admission: &Admission,
    request: &AdmissionRequest<ReviewObject>,
    who: Requester<'_>,
    record: &DecodedRecord,
    deadline: Instant,
) -> Decided {
    let glass = break_glass_reason(&record.record.annotations);
    let mut deletion = Deletion::new(admission, request, who, record, glass.as_deref());
    let mut next = deletion.next(deletion.decide(Stage::First), Stage::First);
    loop {
        next = match next {
            Next::Answer(decided) => return decided,
            Next::Confirm(ruled) => deletion.confirm(ruled, deadline).await,
            Next::KeepCopy(decided) => deletion.keep_copy(decided, deadline).await,
            Next::Agree(decided) => Next::Answer(deletion.agree(decided, deadline).await),
        };
    }
}

/// What the rules said at a stage, and whether the approval keeps a copy in the recycle bin.
struct Ruled {
    decided: Decided,
    keeps_copy: bool,
    confirms: bool,
}

/// A DELETE's next step.
enum Next {
    /// Answer the API server with this: a refusal, or an approval no check is left for.
    Answer(Decided),
    /// Decide again on what is stored now (step 2).
    Confirm(Ruled),
    /// Store a copy in the recycle bin first (step 3).
    KeepCopy(Decided),
    /// Agree the approval with the other replicas (step 4).
    Agree(Decided),
}

/// One DELETE as its steps see it: what the rules are told, and which of the live guard's checks
/// apply (none in a dry run but the confirmation: a dry run gets the real verdict).
struct Deletion<'a> {
    admission: &'a Admission,
    request: &'a AdmissionRequest<ReviewObject>,
    record: &'a Record,
    facts: DeleteFacts<'a>,
    claimed: ClaimedRecord<'a>,
    mode: Mode,
    /// A live guard: verdicts that rest on the history are confirmed against what is stored.
    freshness: Option<&'a Freshness>,
    bin: Option<&'a dyn RecycleBin>,
    coordinator: Option<&'a dyn DeleteCoordinator>,
    /// The relists the confirmation counted ([`Freshness::confirm`]), once it has run.
    confirmed_within: Option<u64>,
}

/// How far a DELETE's checks have come: decided on the index as it is, then confirmed against
/// what is stored, then agreed with the other replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    First,
    Confirmed,
    Agreed,
}

impl<'a> Deletion<'a> {
    fn new(
        admission: &'a Admission,
        request: &'a AdmissionRequest<ReviewObject>,
        who: Requester<'a>,
        decoded: &'a DecodedRecord,
        break_glass: Option<&'a str>,
    ) -> Deletion<'a> {
        let record = &decoded.record;
        let key = &record.id.key;
        let (namespace, mode) = admission.namespace(&key.namespace);
        // A dry run changes nothing: it keeps no copy and claims nothing.
        let live = !request.dry_run;
        Deletion {
            admission,
            request,
            record,
            facts: DeleteFacts {
                namespace: &key.namespace,
                release: &key.release,
                revision: record.id.revision,
                status: decoded.status(),
                namespace_terminating: namespace.terminating,
                requester: who,
                break_glass,
                // Read at each decision, once a confirmation has read the payloads.
                last_deployed: None,
            },
            claimed: ClaimedRecord { object: &record.object_name, uid: record.uid.as_deref() },
            mode,
            freshness: admission.freshness.as_ref(),
            bin: admission.live.recycle_bin.as_deref().filter(|_| live),
            coordinator: admission.live.coordinator.as_deref().filter(|_| live),
            confirmed_within: None,
        }
    }

    fn key(&self) -> &'a ReleaseKey {
        &self.record.id.key
    }

    /// Step 1 (and the decision again at each later step): the rules on the release as the index
    /// holds it now, the mode applied, and whether an approval keeps a copy. Decided under the
    /// index lock, with the one change it makes: an approval that stands at `stage` hides the
    /// record at once.
    fn decide(&self, stage: Stage) -> Ruled {
        let policy = &self.admission.settings().policy;
        self.admission.index().decide(self.key(), Some(self.claimed.object), |view| {
            let facts = &DeleteFacts { last_deployed: view.is_last_deployed(self.claimed.uid), ..self.facts };
            let mut verdict =
                on_what_may_be_stored(view, |others| decide_delete(facts, &History::new(others), policy));
            let confirms = self.needs_confirmation(facts, &verdict, view);
            // A relist swapped in since the confirmation may have taken the index back below
            // what it showed: the approval rests on nothing.
            let lapsed = stage != Stage::First
                && confirms
                && verdict.allowed
                && Some(view.relists()) != self.confirmed_within;
            if lapsed {
                verdict =
                    self.unconfirmed("the watch re-listed the records while this deletion was confirmed");
            }
            let history = History::new(view);
            let outcome = apply_mode(&verdict, self.mode);
            let keep = self.bin.is_some() && outcome.allowed && keeps_copy(facts, &history, policy);
            let agree = outcome.allowed && needs_agreement(facts, &history, verdict.reason);
            let decided = Decided { verdict, outcome, agree, recycled: None };
            // One that keeps a copy is hidden once the copy is stored, or, when it is also
            // agreed, as the agreement's own approvals are.
            let copied = !keep || stage == Stage::Agreed;
            let hide = decided.outcome.allowed
                && copied
                && !self.request.dry_run
                && self.stands(&decided, confirms, stage);
            let change = hide.then(|| IndexChange::Delete {
                object: self.claimed.object.to_owned(),
                uid: self.claimed.uid.map(str::to_owned),
            });
            (Ruled { decided, keeps_copy: keep, confirms }, change)
        })
    }

    /// The step after the rules said `ruled` at `stage`: the confirmation (only after step 1),
    /// the copy, the agreement, each when this guard has it and the verdict needs it; else the
    /// answer.
    fn next(&self, ruled: Ruled, stage: Stage) -> Next {
        if stage == Stage::First && ruled.confirms {
            Next::Confirm(ruled)
        } else if ruled.keeps_copy {
            Next::KeepCopy(ruled.decided)
        } else {
            self.agree_or_answer(ruled.decided)
        }
    }

    /// Agreement for an approval that needs it, with other replicas to agree with; else the answer.
    fn agree_or_answer(&self, decided: Decided) -> Next {
        if decided.agree && self.coordinator.is_some() { Next::Agree(decided) } else { Next::Answer(decided) }
    }

    /// Whether a verdict is confirmed against what is stored before it is answered: on a live
    /// guard, one read off the rest of the history (the watch may not have brought the latest
    /// records yet), but for an approval that holds on a view that lags (Helm's purge, the view
    /// one state its watch brought), and one that could not read the rest (the confirmation
    /// reads it).
    fn needs_confirmation(&self, facts: &DeleteFacts<'_>, verdict: &Verdict, view: &ReleaseView<'_>) -> bool {
        let reason = verdict.reason;
        let rests = reason == Reason::UnreadHistory || reason.rests_on_history();
        self.freshness.is_some()
            && rests
            && !(reason == Reason::UninstallPurge && view.is_as_watched() && {
                let as_stored =
                    view.holds_as_stored(self.claimed.uid, self.record.resource_version.as_deref());
                holds_on_a_lagging_view(facts, &History::new(&view.held()), verdict, as_stored)
            })
    }

    /// Whether an approval stands at `stage` (`confirms`: whether it waits for its
    /// confirmation): no check is left for it. One that keeps a copy stands once the copy is
    /// stored ([`Deletion::keep_copy`]).
    fn stands(&self, decided: &Decided, confirms: bool, stage: Stage) -> bool {
        let agreeing = self.coordinator.is_some() && decided.agree;
        match stage {
            Stage::First => !(agreeing || confirms),
            Stage::Confirmed => !agreeing,
            Stage::Agreed => true,
        }
    }

    /// Step 2: a verdict that rests on the history, decided again on what is stored now (the
    /// watch shown caught up, or the release listed, and every record known only by its labels
    /// read as Helm reads it). Without the confirmation a refusal still stands (it fails
    /// closed); an approval is refused, "retry". Helm's first purge request after its UPDATE
    /// marked the latest `uninstalling` lacks only that record's new payload (the watch brings
    /// labels): read first, the view may hold as its watch brought it, with no round.
    async fn confirm(&mut self, first: Ruled, deadline: Instant) -> Next {
        let Some(freshness) = self.freshness else { return self.next(first, Stage::Confirmed) };
        let object = self.claimed.object;
        if freshness.read_alone(self.key(), Some(object), deadline).await {
            let ruled = self.decide(Stage::First);
            if !ruled.confirms {
                return self.next(ruled, Stage::First);
            }
        }
        self.confirmed_within = freshness.confirm(self.key(), Some(object), deadline).await;
        let confirmed = self.confirmed_within.is_some();
        let ruled = self.decide(if confirmed { Stage::Confirmed } else { Stage::First });
        if confirmed || !ruled.decided.verdict.allowed {
            return self.next(ruled, Stage::Confirmed);
        }
        let verdict =
            self.unconfirmed("could not list the records of the release within the decision deadline");
        Next::Answer(self.refused(verdict, self.mode))
    }

    /// The refusal of an approval that could not be confirmed against what is stored: `why`.
    fn unconfirmed(&self, why: &str) -> Verdict {
        let (key, object) = (self.key(), self.claimed.object);
        Verdict::deny(
            Reason::UnreadHistory,
            format!(
                "helm-guard: {why} (release {}/{}), so it cannot show that deleting {object} is harmless; retry in a \
                 moment",
                key.namespace, key.release
            ),
        )
    }

    /// Step 3: stores a copy of the record in the recycle bin before its deletion is approved;
    /// then the approval stands (the record hidden in the index) and the client is told where
    /// the copy is. A copy that cannot be stored in time refuses the deletion, "retry",
    /// whatever the mode (the mode softens the rules, not the loss of the record), unless
    /// `--recycle-best-effort`. An approval that also needs the replicas' agreement (history
    /// pruning of a record that shares the latest revision while nothing is deployed) is hidden
    /// once agreed, not here.
    async fn keep_copy(&self, mut decided: Decided, deadline: Instant) -> Next {
        let Some(bin) = self.bin else { return self.agree_or_answer(decided) };
        let (record, key) = (self.record, self.key());
        let keeping = Keeping {
            reason: decided.verdict.reason.as_str(),
            requester: self.facts.requester.username,
            at: jiff::Timestamp::now().as_second(),
            readable: self.facts.status.is_some(),
        };
        let kept = bin.keep(record, &keeping, deadline).await;
        // Read off the rules again only when the copy failed: the usual path decides nothing twice.
        let best_effort = || {
            let policy = &self.admission.settings().policy;
            self.admission.settings().recycle_best_effort
                || self.admission.index().decide(key, Some(&record.object_name), |others| {
                    (copy_is_best_effort(&self.facts, &History::new(others), policy), None)
                })
        };
        if let Err(error) = &kept
            && !best_effort()
        {
            let verdict = Verdict::deny(
                Reason::RecycleBinUnavailable,
                format!(
                    "helm-guard: deleting {} (release {key}) keeps a copy in helm-guard's recycle bin first, and the \
                     copy could not be stored ({error}), so the deletion is refused; retry in a moment",
                    record.describe()
                ),
            );
            return Next::Answer(self.refused(verdict, Mode::Enforce));
        }
        if !decided.agree {
            let gone = IndexChange::Delete { object: record.object_name.clone(), uid: record.uid.clone() };
            self.admission.index().apply(key, gone);
        }
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
                decided.recycled = Some(copy);
                note
            }
            Err(error) => format!(
                "helm-guard: no copy of {} could be kept in the recycle bin ({error}); deleted without one ({})",
                record.describe(),
                if self.admission.settings().recycle_best_effort {
                    "--recycle-best-effort"
                } else {
                    "one of Helm's own deletions, which never waits on the bin"
                }
            ),
        };
        decided.outcome.warnings.push(note);
        self.agree_or_answer(decided)
    }

    /// Step 4: agrees an approval of a deletion with the other replicas: reads the release's
    /// claims, hides what other replicas approved, decides again, and writes this approval's
    /// claim against the version read; a conflict starts over. Past the deadline, or when the
    /// API refuses, the deletion is refused with a message to retry: it cannot be shown
    /// harmless. Refusals, and approvals that hold whatever else is deleted, need no agreement.
    async fn agree(&self, decided: Decided, deadline: Instant) -> Decided {
        let Some(coordinator) = self.coordinator.filter(|_| decided.agree) else { return decided };
        let (key, record, index) = (self.key(), &self.claimed, self.admission.index());
        let object = record.object;
        // A claim makes every replica decide the release without this record: written only for
        // the object stored under the name, so that a review the API server never sent (anyone
        // on the pod network can POST one) claims nothing.
        if let Some(refused) = self.not_stored(deadline).await {
            return refused;
        }
        let error = loop {
            let claims = match coordinator.claims(key, deadline).await {
                Ok(claims) => claims,
                Err(error) => break error,
            };
            let now = now_ms();
            for claim in claims.claims.iter().filter(|claim| !claim.is(record)) {
                index.hide(key, &claim.object, claim.uid.as_deref(), local_instant(claim.until, now));
            }
            let decided = self.decide(Stage::Agreed).decided;
            if !decided.agree {
                return decided;
            }
            match coordinator.claim(key, record, &claims, deadline).await {
                Ok(Claimed::Yes) => return decided,
                Ok(Claimed::Conflict) => index.unhide(key, object, record.uid),
                Err(error) => {
                    index.unhide(key, object, record.uid);
                    break error;
                }
            }
        };
        self.admission.counts().coordination_refused.inc();
        tracing::warn!(namespace = %key.namespace, release = %key.release, %object, %error, "could not agree a deletion with the other replicas");
        let verdict = Verdict::deny(
            Reason::CoordinationUnavailable,
            format!(
                "helm-guard: could not agree the deletion of {object} (release {}/{}) with the other helm-guard \
                 replicas ({error}), so it cannot be shown harmless; retry in a moment",
                key.namespace, key.release
            ),
        );
        self.refused(verdict, self.mode)
    }

    /// A refusal when the object stored under the record's name is not the one the review is
    /// about (its uid and resourceVersion, read back from the API server).
    async fn not_stored(&self, deadline: Instant) -> Option<Decided> {
        let fetcher = self.admission.live.fetcher.as_deref()?;
        let (key, record) = (self.key(), self.record);
        let read = fetcher.fetch(key, std::slice::from_ref(&record.object_name), deadline).await;
        let stored = read.iter().any(|(_, fetched)| {
            matches!(fetched, Fetched::Read(read)
                if read.uid == record.uid && read.resource_version == record.resource_version)
        });
        if stored {
            return None;
        }
        let verdict = Verdict::deny(
            Reason::UnreadHistory,
            format!(
                "helm-guard: the object stored as {} is not the one this review of its deletion is about (or could \
                 not be read within the decision deadline); retry in a moment",
                record.describe()
            ),
        );
        Some(self.refused(verdict, self.mode))
    }

    /// A refusal by a step past the first, in `mode`.
    fn refused(&self, verdict: Verdict, mode: Mode) -> Decided {
        let outcome = apply_mode(&verdict, mode);
        Decided { verdict, outcome, agree: false, recycled: None }
    }
}
