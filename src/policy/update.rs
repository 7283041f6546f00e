//! UPDATE of a record: rules U1–U8 of POLICY.md, first match wins. An update is allowed only when
//! it is one Helm (or the ecosystem's recovery tools) makes: a status moved along Helm's own
//! transitions with its label following, timestamps, descriptions and hook runs rewritten.

use std::collections::BTreeMap;

use super::config::{PolicyConfig, Requester};
use super::verdict::{Reason, Verdict};
use crate::release::record::{LABEL_NAME, LABEL_OWNER, LABEL_RELEASE_VERSION, LABEL_STATUS, LABEL_VERSION};
use crate::release::{History, Status};

/// The label every Helm update of a record sets to the time (`secrets.go`/`cfgmaps.go` `Update`).
pub(crate) const LABEL_MODIFIED_AT: &str = "modifiedAt";

/// What Helm reads of one side's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PayloadSide {
    /// The status Helm reads.
    pub status: Status,
    /// Fingerprint of what Helm never rewrites (see `ReleasePayload::content`); `None` when not
    /// taken, which no comparison accepts.
    pub content: Option<[u8; 32]>,
}

/// One side of the update.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordSide<'a> {
    /// The object's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The Secret's `type` (`None` for a ConfigMap).
    pub secret_type: Option<&'a str>,
    /// `None` when the payload does not decode as Helm reads it.
    pub payload: Option<PayloadSide>,
    /// The uids the object's owner references point at.
    pub owner_references: &'a [String],
    /// The object's finalizers.
    pub finalizers: &'a [String],
    /// The object's `immutable`.
    pub immutable: bool,
}

#[derive(Debug, Clone, Copy)]
/// What the UPDATE rules (U1–U8) read of a request.
pub(crate) struct UpdateFacts<'a> {
    /// The record's namespace.
    pub namespace: &'a str,
    /// The record's object name.
    pub object_name: &'a str,
    /// The record's revision.
    pub revision: u32,
    /// The rest of the release as Helm sees it, without this record (U6b).
    pub others: &'a History,
    /// The object as stored.
    pub old: RecordSide<'a>,
    /// The object as it would be stored.
    pub new: RecordSide<'a>,
    /// Who asks.
    pub requester: Requester<'a>,
    /// The break-glass annotation of the new object.
    pub break_glass: Option<&'a str>,
}

/// The status changes Helm's own actions make to a stored revision, and the recovery tools'
/// (`helm set-status`, Flux's unlock, klipper-helm >= 0.9.9, RKE2). Each is a place in Helm
/// 3.17.3 and 4.1.4 (`pkg/action/`) that rewrites a stored release: POLICY.md, "The
/// transitions", has the table with the source lines.
pub(crate) fn helm_transition(from: Status, to: Status) -> bool {
    use Status::*;
    let pending = |s: Status| s.is_pending();
    from == to
        // T2: install, upgrade, rollback finish or fail their pending revision
        || (pending(from) && matches!(to, Deployed | Failed))
        // T3: superseding takes any status. Upgrade and rollback supersede what was deployed or
        // the failed or superseded latest they replace; `install --replace` (and `upgrade
        // --install` of an uninstalled release) supersede an `uninstalled` latest; a failed
        // rollback supersedes the latest it started from, whatever its status.
        || to == Superseded
        // T4: uninstall marks the latest, whatever it is, then finishes (--keep-history)
        || (from != Uninstalled && to == Uninstalling)
        || (from == Uninstalling && to == Uninstalled)
        // T5: recovery tools unlock a stuck or orphaned release
        || (matches!(from, Superseded | Uninstalling | Unknown) || pending(from)) && to == Failed
}

/// Decides an UPDATE of a release record (POLICY.md, rules U1–U8).
pub(crate) fn decide_update(facts: &UpdateFacts<'_>, config: &PolicyConfig) -> Verdict {
    let verdict = decide_update_rules(facts, config);
    config.explain_break_glass(verdict, facts.break_glass, facts.requester)
}

fn decide_update_rules(facts: &UpdateFacts<'_>, config: &PolicyConfig) -> Verdict {
    let UpdateFacts { namespace, object_name, old, new, .. } = *facts;
    let object = format!("{namespace}/{object_name}");
    // U1: as D2, the annotation counts for `--break-glass-group` members only, when it names any.
    if let Some(reason) = facts.break_glass
        && config.may_break_glass(facts.requester)
    {
        return Verdict::allow(Reason::BreakGlass).with_detail(reason);
    }
    if let Some(who) = config.exemption(facts.requester) {
        return Verdict::allow(Reason::Exempt).with_detail(who);
    }
    // U2
    for key in [LABEL_OWNER, LABEL_NAME, LABEL_VERSION, LABEL_RELEASE_VERSION] {
        let (before, after) = (old.labels.get(key), new.labels.get(key));
        if before != after {
            let change = match after {
                None => format!("removes the `{key}` label"),
                Some(value) => format!("changes the `{key}` label from {before:?} to {value:?}"),
            };
            return Verdict::deny(
                Reason::IdentityLabelChange,
                format!(
                    "helm-guard: this update of {object} {change}; that would hide the record from Helm \
                     (and from helm-guard). Helm's own updates never touch these labels"
                ),
            );
        }
    }
    // U2b: what Helm copies unchanged in every update (labels given with `--labels`, which
    // controllers read: helm-controller decides whether to run a chart's job by configHash), and
    // `modifiedAt`, which every Helm update sets to the time.
    for key in &config.protected_labels {
        let (before, after) = (old.labels.get(key), new.labels.get(key));
        if before != after {
            let change = match (before, after) {
                (None, Some(value)) => format!("adds the label `{key}={value}`"),
                (Some(_), None) => format!("removes the label `{key}`"),
                (before, after) => format!(
                    "changes the label `{key}` from {:?} to {:?}",
                    before.map_or("", String::as_str),
                    after.map_or("", String::as_str)
                ),
            };
            return Verdict::deny(
                Reason::ProtectedLabelChange,
                format!(
                    "helm-guard: this update of {object} {change}; Helm copies that label unchanged into every update of a record \
                     (it is set with `--labels` when a revision is created) and controllers decide by it. \
                     Make a new revision with `helm upgrade --labels` instead"
                ),
            );
        }
    }
    let modified_at = new.labels.get(LABEL_MODIFIED_AT);
    let unix_time =
        |value: &String| !value.is_empty() && value.len() <= 20 && value.bytes().all(|b| b.is_ascii_digit());
    if (old.labels.contains_key(LABEL_MODIFIED_AT) && modified_at.is_none())
        || modified_at.is_some_and(|v| !unix_time(v))
    {
        let change = modified_at.map_or_else(
            || "removes the `modifiedAt` label".to_owned(),
            |v| format!("sets the `modifiedAt` label to {v:?}"),
        );
        return Verdict::deny(
            Reason::ProtectedLabelChange,
            format!(
                "helm-guard: this update of {object} {change}; every Helm update sets it to the time in Unix seconds"
            ),
        );
    }
    if old.secret_type != new.secret_type {
        return Verdict::deny(
            Reason::IdentityLabelChange,
            format!(
                "helm-guard: this update of {object} changes the Secret type from {:?} to {:?}; \
                 Helm's own updates never do",
                old.secret_type.unwrap_or_default(),
                new.secret_type.unwrap_or_default()
            ),
        );
    }
    // U3: Helm never sets owner references, finalizers or `immutable`; an owner reference to an object that
    // goes away makes the garbage collector delete the record later.
    let added_finalizer = new.finalizers.iter().find(|f| !old.finalizers.contains(f));
    let added_owner = new.owner_references.iter().any(|uid| !old.owner_references.contains(uid));
    let made_immutable = new.immutable && !old.immutable;
    if added_owner || added_finalizer.is_some() || made_immutable {
        let what = match added_finalizer {
            Some(finalizer) => format!("adds the finalizer {finalizer:?}"),
            None if made_immutable => {
                "makes the record immutable (Helm could never update it again: not finish, fail or supersede it)"
                    .to_owned()
            }
            None => "adds an owner reference (the garbage collector would delete the record with its owner)"
                .to_owned(),
        };
        return Verdict::deny(
            Reason::ForeignMetadata,
            format!("helm-guard: this update of {object} {what}; Helm never sets these on its records"),
        );
    }
    // U4
    let (Some(before), Some(after)) = (old.payload, new.payload) else {
        if old.payload.is_some() {
            return Verdict::deny(
                Reason::PayloadCorruption,
                format!(
                    "helm-guard: the new `data.release` of {object} is not a release Helm can read while the old one was; \
                     Helm would silently drop this revision"
                ),
            );
        }
        // U4b: a record Helm could not read made one it reads is a revision that appears without
        // the rules a CREATE of it answers to (its name, its place in the history, its status).
        if new.payload.is_some() {
            return Verdict::deny(
                Reason::PayloadContentChange,
                format!(
                    "helm-guard: this update of {object} turns a `data.release` Helm cannot read into a release it \
                     reads; Helm never updates a record it cannot read. Delete the unreadable record, then create \
                     the revision (or let Helm make it) so that it is decided as a new revision"
                ),
            );
        }
        // Neither side is a release Helm reads: nothing Helm sees changes.
        return Verdict::allow(Reason::HelmUpdate);
    };
    // U5
    if before.content.is_none() || before.content != after.content {
        return Verdict::deny(
            Reason::PayloadContentChange,
            format!(
                "helm-guard: this update of {object} changes what the revision is (its name, namespace, version, chart, \
                 manifest, values or hooks); Helm rewrites only a revision's status, times, description and hook runs. \
                 To change a release use `helm upgrade` or `helm rollback`"
            ),
        );
    }
    // U6. T6: Fleet's agent, after a rollback that failed in applying its manifest (which
    // supersedes the revision it started from), deletes the failed revision and writes that
    // revision back as it read it before, deployed (`rollback.go` `removeFailedRollback`).
    let fleet_puts_back = before.status == Status::Superseded
        && after.status == Status::Deployed
        && config.forgetter(facts.requester).is_some();
    if !helm_transition(before.status, after.status) && !fleet_puts_back {
        return Verdict::deny(
            Reason::StatusTransition,
            format!(
                "helm-guard: this update of {object} moves its payload status from `{}` to `{}`; no Helm action or \
                 recovery tool does that (they move pending-* to deployed or failed, anything to superseded, \
                 anything but uninstalled to uninstalling, uninstalling to uninstalled, and pending-*, superseded, \
                 uninstalling or unknown to failed). To recover a release use \
                 `helm rollback`, `helm upgrade`, or mark a stuck revision failed",
                before.status, after.status
            ),
        );
    }
    // U6b: where in the history Helm makes this change.
    if let Some(refusal) = history_transition(facts, before.status, after.status, &object) {
        return refusal;
    }
    // U7: the `status` label follows the payload, as Helm writes them together.
    let (label_before, label_after) = (old.labels.get(LABEL_STATUS), new.labels.get(LABEL_STATUS));
    let changed = before.status != after.status || label_before != label_after;
    if changed && label_after.map(String::as_str) != Some(after.status.as_str()) {
        let label = label_after.map_or_else(|| "(removed)".to_owned(), |l| format!("`{l}`"));
        return Verdict::deny(
            Reason::StatusLabelMismatch,
            format!(
                "helm-guard: after this update the `status` label of {object} would be {label} while its payload says `{}`; \
                 Helm writes the two together (`helm ls` reads the payload, `helm upgrade` finds the deployed revision by the label). \
                 To really recover a release use `helm rollback`, `helm upgrade`, or delete a stuck pending revision",
                after.status
            ),
        );
    }
    // U8; T6 names the forgetter that made it, as D10 does.
    match config
        .forgetter(facts.requester)
        .filter(|_| fleet_puts_back && !helm_transition(before.status, after.status))
    {
        Some(who) => Verdict::allow(Reason::HelmUpdate).with_detail(who),
        None => Verdict::allow(Reason::HelmUpdate),
    }
}

/// Whether U6b reads the rest of the history for a change from `from` to `to`: a live guard
/// confirms such a verdict against what is stored, as it does a DELETE's.
pub(crate) fn rests_on_history(from: Status, to: Status) -> bool {
    from != to
        && (matches!(to, Status::Superseded | Status::Uninstalling)
            || (to == Status::Failed && !from.is_pending()))
}

/// U6b: a status change that takes a release's deployed state (or its latest) away is made by
/// Helm only at one place in the history, so an edit elsewhere is one step of a break in two
/// (edit, then delete what the rules now let go):
/// - `uninstalling` marks the latest only (`uninstall.go`: `rels[len(rels)-1]`), and so does
///   `failed` from a status that is not pending (the recovery tools unlock the latest);
/// - `superseded` is written to the latest (helm-mapkubeapis' first step, `install --replace`'s
///   `replaceRelease`), below an operation under way (a `pending-*` record above it: an upgrade
///   or rollback supersedes what it replaces once its own revision is stored; an `uninstalling`
///   or `uninstalled` one: Helm 4's `uninstall --keep-history`), or to a `deployed` record
///   while another stays deployed (a rollback supersedes every deployed one; `helm-guard repair`
///   the extra ones).
fn history_transition(facts: &UpdateFacts<'_>, from: Status, to: Status, object: &str) -> Option<Verdict> {
    if !rests_on_history(from, to) {
        return None;
    }
    let (revision, others) = (facts.revision, facts.others);
    if let Some(unread) = others.unread().first() {
        return Some(Verdict::deny(
            Reason::UnreadHistory,
            format!(
                "helm-guard: could not read revision {unread} of the release of {object} within the decision deadline, \
                 so it cannot show that this update is one of Helm's; retry in a moment"
            ),
        ));
    }
    let latest = others.latest().is_none_or(|(top, _)| top < revision);
    let allowed = match to {
        // T4 marks the latest; T5's recovery tools (set-status, Flux's unlock, klipper-helm's
        // reset, `repair`) mark the latest failed.
        Status::Uninstalling | Status::Failed => latest,
        _ => {
            latest
                || others.above(revision).any(|s| s.is_pending() || s.is_uninstall())
                || (from == Status::Deployed && others.deployed().next().is_some())
        }
    };
    if allowed {
        return None;
    }
    let shown = others.revisions().iter().map(|(r, s)| format!("v{r} {s}")).collect::<Vec<_>>().join(", ");
    let (what, where_helm) = match to {
        Status::Uninstalling => (
            "marks it `uninstalling` while it is not the latest revision",
            "`helm uninstall` marks only the latest revision",
        ),
        Status::Failed => (
            "marks it `failed` while it is not the latest revision",
            "the recovery tools (`helm set-status`, Flux's unlock, klipper-helm's reset, `helm-guard repair`) \
             mark only the latest revision",
        ),
        _ => (
            "supersedes it with no operation above it and no other revision deployed",
            "Helm supersedes a revision only when it is the latest, below a `pending-*` revision of an upgrade or \
             rollback under way, or below an uninstall, or while another revision stays deployed",
        ),
    };
    Some(Verdict::deny(
        Reason::HistoryTransition,
        format!(
            "helm-guard: this update of {object} (revision {revision}, `{from}`) {what}; {where_helm}. The rest of \
             the release is [{shown}]: the edit would take away what keeps the release whole, so that a deletion the \
             rules now refuse would pass. To change a release use `helm upgrade`, `helm rollback` or `helm uninstall`"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(status: &str) -> BTreeMap<String, String> {
        [("owner", "helm"), ("name", "web"), ("version", "3"), ("status", status)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    const TYPE: Option<&str> = Some("helm.sh/release.v1");
    const CONTENT: Option<[u8; 32]> = Some([7; 32]);

    fn payload(status: Status) -> Option<PayloadSide> {
        Some(PayloadSide { status, content: CONTENT })
    }

    fn side<'a>(labels: &'a BTreeMap<String, String>, payload: Option<PayloadSide>) -> RecordSide<'a> {
        RecordSide {
            labels,
            secret_type: TYPE,
            payload,
            owner_references: &[],
            finalizers: &[],
            immutable: false,
        }
    }

    fn decide(old: RecordSide<'_>, new: RecordSide<'_>) -> Verdict {
        let facts = UpdateFacts {
            namespace: "demo",
            object_name: "sh.helm.release.v1.web.v3",
            revision: 3,
            others: &History::default(),
            old,
            new,
            requester: Requester::new("admin", &[]),
            break_glass: None,
        };
        decide_update(&facts, &PolicyConfig::default())
    }

    #[test]
    fn the_rules_of_policy_md() {
        use Status::*;
        let deployed = labels("deployed");
        let superseded = labels("superseded");
        let failed = labels("failed");
        let pending = labels("pending-upgrade");
        let mut no_owner = labels("deployed");
        no_owner.remove("owner");
        let mut renamed = labels("deployed");
        renamed.insert("name".into(), "other".into());
        let mut bumped = labels("deployed");
        bumped.insert("version".into(), "9".into());
        let with = |status: &str, extra: &[(&str, &str)]| {
            let mut labels = labels(status);
            labels.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
            labels
        };
        const HASH: &str = "helmcharts.helm.cattle.io/configHash";
        let hashed = with("deployed", &[(HASH, "SHA256=AB12"), ("modifiedAt", "1764000000")]);
        let hashed_superseded = with("superseded", &[(HASH, "SHA256=AB12"), ("modifiedAt", "1764000060")]);
        let forged = with("deployed", &[(HASH, "FORGED"), ("modifiedAt", "1764000000")]);
        let unhashed = with("deployed", &[("modifiedAt", "1764000000")]);
        let stamped_later = with("deployed", &[(HASH, "SHA256=AB12"), ("modifiedAt", "1764000099")]);
        let stamped_text = with("deployed", &[(HASH, "SHA256=AB12"), ("modifiedAt", "yesterday")]);
        let unstamped = with("deployed", &[(HASH, "SHA256=AB12")]);
        let tool_label = with(
            "deployed",
            &[(HASH, "SHA256=AB12"), ("modifiedAt", "1764000000"), ("velero.io/backup-name", "nightly")],
        );
        let finalizers = ["example.com/keep".to_owned()];
        let owner = ["0000-gone".to_owned()];
        let other_owner = ["0000-other".to_owned()];
        let d = payload(Deployed);
        let edited = Some(PayloadSide { status: Deployed, content: Some([8; 32]) });
        let untaken = Some(PayloadSide { status: Deployed, content: None });
        let table: Vec<(&str, RecordSide, RecordSide, bool, Reason)> = vec![
            ("U2 owner removed", side(&deployed, d), side(&no_owner, d), false, Reason::IdentityLabelChange),
            ("U2 name changed", side(&deployed, d), side(&renamed, d), false, Reason::IdentityLabelChange),
            ("U2 version changed", side(&deployed, d), side(&bumped, d), false, Reason::IdentityLabelChange),
            (
                "U2b configHash forged",
                side(&hashed, d),
                side(&forged, d),
                false,
                Reason::ProtectedLabelChange,
            ),
            (
                "U2b configHash removed",
                side(&hashed, d),
                side(&unhashed, d),
                false,
                Reason::ProtectedLabelChange,
            ),
            (
                "U2b configHash added",
                side(&unhashed, d),
                side(&hashed, d),
                false,
                Reason::ProtectedLabelChange,
            ),
            (
                "U2b modifiedAt removed",
                side(&hashed, d),
                side(&unstamped, d),
                false,
                Reason::ProtectedLabelChange,
            ),
            (
                "U2b modifiedAt not a time",
                side(&hashed, d),
                side(&stamped_text, d),
                false,
                Reason::ProtectedLabelChange,
            ),
            (
                "U2b Helm's superseding keeps configHash, stamps modifiedAt",
                side(&hashed, d),
                side(&hashed_superseded, payload(Superseded)),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U2b Helm's rewrite of a time",
                side(&hashed, d),
                side(&stamped_later, d),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U2b another tool's label is not Helm's business",
                side(&hashed, d),
                side(&tool_label, d),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U2 type changed",
                side(&deployed, d),
                RecordSide { secret_type: Some("Opaque"), ..side(&deployed, d) },
                false,
                Reason::IdentityLabelChange,
            ),
            (
                "U3 owner reference added",
                side(&deployed, d),
                RecordSide { owner_references: &owner, ..side(&deployed, d) },
                false,
                Reason::ForeignMetadata,
            ),
            (
                "U3 an owner reference swapped for another",
                RecordSide { owner_references: &owner, ..side(&deployed, d) },
                RecordSide { owner_references: &other_owner, ..side(&deployed, d) },
                false,
                Reason::ForeignMetadata,
            ),
            (
                "U3 made immutable",
                side(&deployed, d),
                RecordSide { immutable: true, ..side(&deployed, d) },
                false,
                Reason::ForeignMetadata,
            ),
            (
                "U3 finalizer added",
                side(&deployed, d),
                RecordSide { finalizers: &finalizers, ..side(&deployed, d) },
                false,
                Reason::ForeignMetadata,
            ),
            (
                "U4 payload corrupted",
                side(&deployed, d),
                side(&deployed, None),
                false,
                Reason::PayloadCorruption,
            ),
            (
                "U4 was already unreadable",
                side(&deployed, None),
                side(&deployed, None),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U4b an unreadable record made a release Helm reads",
                side(&deployed, None),
                side(&deployed, d),
                false,
                Reason::PayloadContentChange,
            ),
            (
                "U5 content edited",
                side(&deployed, d),
                side(&deployed, edited),
                false,
                Reason::PayloadContentChange,
            ),
            (
                "U5 content not taken counts as changed",
                side(&deployed, untaken),
                side(&deployed, untaken),
                false,
                Reason::PayloadContentChange,
            ),
            (
                "U6 superseded back to deployed",
                side(&superseded, payload(Superseded)),
                side(&deployed, d),
                false,
                Reason::StatusTransition,
            ),
            (
                "U6 deployed to failed",
                side(&deployed, d),
                side(&failed, payload(Failed)),
                false,
                Reason::StatusTransition,
            ),
            (
                "U7 label set against payload",
                side(&superseded, payload(Superseded)),
                side(&deployed, payload(Superseded)),
                false,
                Reason::StatusLabelMismatch,
            ),
            (
                "U7 payload changed, label left behind",
                side(&deployed, d),
                side(&deployed, payload(Superseded)),
                false,
                Reason::StatusLabelMismatch,
            ),
            (
                "U7 not this update's mismatch",
                side(&deployed, payload(Superseded)),
                side(&deployed, payload(Superseded)),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U8 Helm supersedes",
                side(&deployed, d),
                side(&superseded, payload(Superseded)),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U8 an upgrade completes",
                side(&pending, payload(PendingUpgrade)),
                side(&deployed, d),
                true,
                Reason::HelmUpdate,
            ),
            (
                "U8 set-status unlocks a stuck upgrade",
                side(&pending, payload(PendingUpgrade)),
                side(&failed, payload(Failed)),
                true,
                Reason::HelmUpdate,
            ),
            ("U8 a hook run is recorded", side(&deployed, d), side(&deployed, d), true, Reason::HelmUpdate),
        ];
        for (rule, old, new, allowed, reason) in table {
            let verdict = decide(old, new);
            assert_eq!((verdict.allowed, verdict.reason), (allowed, reason), "{rule}: {verdict:?}");
        }
    }

    /// T6: Fleet's agent writes back the revision a failed rollback superseded, deployed
    /// (`removeFailedRollback`); anyone else doing so is refused, and Fleet moves no other status
    /// backwards.
    #[test]
    fn t6_only_fleets_agent_puts_a_superseded_revision_back_to_deployed() {
        use Status::*;
        let (superseded, deployed, pending) =
            (labels("superseded"), labels("deployed"), labels("pending-upgrade"));
        let fleet = ["system:serviceaccounts:cattle-fleet-system".to_owned()];
        let d = payload(Deployed);
        let decide_as = |requester, old, new| {
            let facts = UpdateFacts {
                namespace: "demo",
                object_name: "sh.helm.release.v1.web.v3",
                revision: 3,
                others: &History::default(),
                old,
                new,
                requester,
                break_glass: None,
            };
            decide_update(&facts, &PolicyConfig::default())
        };
        let agent = Requester::new("system:serviceaccount:cattle-fleet-system:fleet-agent", &fleet);
        let person = Requester::new("alice", &[]);
        let back =
            |requester| decide_as(requester, side(&superseded, payload(Superseded)), side(&deployed, d));
        assert_eq!((back(agent).allowed, back(agent).reason), (true, Reason::HelmUpdate));
        assert_eq!(
            back(agent).detail.as_deref(),
            Some("group:system:serviceaccounts:cattle-fleet-system"),
            "T6 names its writer"
        );
        assert_eq!((back(person).allowed, back(person).reason), (false, Reason::StatusTransition));
        let failed = labels("failed");
        let failed_back = decide_as(agent, side(&failed, payload(Failed)), side(&deployed, d));
        assert_eq!(failed_back.reason, Reason::StatusTransition, "only superseded goes back");
        let to_pending =
            decide_as(agent, side(&superseded, payload(Superseded)), side(&pending, payload(PendingUpgrade)));
        assert_eq!(to_pending.reason, Reason::StatusTransition);
    }

    /// POLICY.md's table of transitions, row by row (T1 is every status to itself); every pair
    /// of statuses not listed is refused.
    #[test]
    fn helms_own_transitions_and_no_others() {
        use Status::*;
        const PENDING: [Status; 3] = [PendingInstall, PendingUpgrade, PendingRollback];
        let mut rows: Vec<(&str, Status, Status)> = Vec::new();
        for status in <Status as strum::VariantArray>::VARIANTS {
            rows.push(("T1 hooks, descriptions, times", *status, *status));
        }
        for pending in PENDING {
            rows.push(("T2 install/upgrade/rollback succeed", pending, Deployed));
            rows.push(("T2 install/upgrade/rollback fail", pending, Failed));
        }
        rows.extend([
            ("T3 upgrade supersedes the deployed revision", Deployed, Superseded),
            ("T3 upgrade replaces a failed latest", Failed, Superseded),
            ("T3 install --replace, upgrade --install after --keep-history", Uninstalled, Superseded),
            ("T3 a failed rollback supersedes the latest it left", Uninstalling, Superseded),
            ("T3 a failed rollback supersedes the latest it left", Unknown, Superseded),
        ]);
        for pending in PENDING {
            rows.push(("T3 a failed rollback supersedes the latest it left", pending, Superseded));
        }
        for from in [Unknown, Deployed, Superseded, Failed, PendingInstall, PendingUpgrade, PendingRollback] {
            rows.push(("T4 uninstall marks the latest", from, Uninstalling));
        }
        rows.push(("T4 uninstall --keep-history finishes", Uninstalling, Uninstalled));
        for from in [Superseded, Uninstalling, Unknown] {
            rows.push(("T5 recovery marks it failed", from, Failed));
        }
        for from in <Status as strum::VariantArray>::VARIANTS {
            for to in <Status as strum::VariantArray>::VARIANTS {
                let row = rows.iter().find(|(_, f, t)| f == from && t == to);
                assert_eq!(helm_transition(*from, *to), row.is_some(), "{from} -> {to}: {row:?}");
            }
        }
    }

    /// U6b, row by row: each change that takes a release's deployed state or its latest away is
    /// allowed where Helm (or helm-mapkubeapis, or `repair`) makes it, and refused elsewhere: the
    /// first step of each two-step break of issue 57 is one of the refused rows.
    #[test]
    fn u6b_the_history_says_where_helm_makes_each_change() {
        use Status::*;
        let history = History::of;
        // (row, the rest of the release, this revision, from, to, allowed)
        type Row = (&'static str, &'static [(u32, Status)], u32, Status, Status, bool);
        let table: &[Row] = &[
            (
                "upgrade supersedes the deployed below its pending revision",
                &[(1, Superseded), (3, PendingUpgrade)],
                2,
                Deployed,
                Superseded,
                true,
            ),
            (
                "rollback supersedes below its pending revision",
                &[(3, PendingRollback)],
                2,
                Deployed,
                Superseded,
                true,
            ),
            (
                "a failed rollback supersedes the latest it left",
                &[(1, Deployed), (3, PendingRollback)],
                2,
                Failed,
                Superseded,
                true,
            ),
            (
                "Helm 4 uninstall --keep-history supersedes below the uninstalled latest",
                &[(3, Uninstalled)],
                2,
                Deployed,
                Superseded,
                true,
            ),
            ("mapkubeapis supersedes the latest", &[(1, Superseded)], 2, Deployed, Superseded, true),
            (
                "install --replace supersedes the uninstalled latest",
                &[(1, Superseded)],
                2,
                Uninstalled,
                Superseded,
                true,
            ),
            ("repair supersedes an extra deployed revision", &[(3, Deployed)], 2, Deployed, Superseded, true),
            (
                "the only deployed under a failed latest, superseded (issue 57, chain 2)",
                &[(1, Superseded), (3, Failed)],
                2,
                Deployed,
                Superseded,
                false,
            ),
            (
                "the only deployed under a superseded latest",
                &[(3, Superseded)],
                2,
                Deployed,
                Superseded,
                false,
            ),
            (
                "an uninstalling record put back below the latest",
                &[(3, Failed)],
                2,
                Uninstalling,
                Superseded,
                false,
            ),
            ("uninstall marks the latest", &[(1, Superseded)], 2, Deployed, Uninstalling, true),
            ("uninstall marks the failed latest", &[(1, Deployed)], 2, Failed, Uninstalling, true),
            (
                "the deployed revision below a failed latest marked uninstalling",
                &[(3, Failed)],
                2,
                Deployed,
                Uninstalling,
                false,
            ),
            (
                "a record sharing the latest's revision is not the latest",
                &[(2, Failed)],
                2,
                Deployed,
                Uninstalling,
                false,
            ),
            ("completing an upgrade needs no history", &[(1, Superseded)], 2, PendingUpgrade, Deployed, true),
            (
                "set-status marks the superseded latest failed",
                &[(1, Superseded)],
                2,
                Superseded,
                Failed,
                true,
            ),
            (
                "a superseded revision below the latest marked failed",
                &[(3, Failed)],
                2,
                Superseded,
                Failed,
                false,
            ),
            (
                "an uninstalling revision below a rollback marked failed",
                &[(3, PendingRollback)],
                2,
                Uninstalling,
                Failed,
                false,
            ),
            (
                "a stuck pending revision marked failed anywhere",
                &[(3, Failed)],
                2,
                PendingUpgrade,
                Failed,
                true,
            ),
        ];
        let labels_of = |status: Status| labels(status.as_str());
        for &(row, rest, revision, from, to, allowed) in table {
            let others = history(rest);
            let (old_labels, new_labels) = (labels_of(from), labels_of(to));
            let facts = UpdateFacts {
                namespace: "demo",
                object_name: "sh.helm.release.v1.web.v2",
                revision,
                others: &others,
                old: side(&old_labels, payload(from)),
                new: side(&new_labels, payload(to)),
                requester: Requester::new("tenant", &[]),
                break_glass: None,
            };
            let verdict = decide_update(&facts, &PolicyConfig::default());
            let expected = if allowed { Reason::HelmUpdate } else { Reason::HistoryTransition };
            assert_eq!((verdict.allowed, verdict.reason), (allowed, expected), "{row}: {verdict:?}");
        }
    }

    #[test]
    fn u1_break_glass_wins() {
        let deployed = labels("deployed");
        let mut no_owner = labels("deployed");
        no_owner.remove("owner");
        let facts = UpdateFacts {
            namespace: "demo",
            object_name: "sh.helm.release.v1.web.v3",
            revision: 3,
            others: &History::default(),
            old: side(&deployed, payload(Status::Deployed)),
            new: side(&no_owner, payload(Status::Deployed)),
            requester: Requester { break_glass_authorized: true, ..Requester::new("admin", &[]) },
            break_glass: Some("migrating to another driver"),
        };
        let verdict = decide_update(&facts, &PolicyConfig::default());
        assert_eq!((verdict.allowed, verdict.reason), (true, Reason::BreakGlass));
        let unauthorized = UpdateFacts { requester: Requester::new("tenant", &[]), ..facts };
        let refused = decide_update(&unauthorized, &PolicyConfig::default());
        assert_eq!(
            (refused.allowed, refused.reason),
            (false, Reason::IdentityLabelChange),
            "no one by default"
        );
        let facts = UpdateFacts { requester: Requester::new("admin", &[]), ..facts };
        // With --break-glass-group, only its members' annotation counts.
        let config = PolicyConfig {
            break_glass_groups: vec!["incident-responders".into()],
            ..PolicyConfig::default()
        };
        let refused = decide_update(&facts, &config);
        assert_eq!((refused.allowed, refused.reason), (false, Reason::IdentityLabelChange));
        assert!(refused.message.unwrap().contains("members of system:masters, incident-responders"));
        let responders = ["incident-responders".to_owned()];
        let member = UpdateFacts { requester: Requester::new("carol", &responders), ..facts };
        assert_eq!(decide_update(&member, &config).reason, Reason::BreakGlass);
    }
}
