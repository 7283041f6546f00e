//! CREATE of a record: rules C1–C8 of POLICY.md, first match wins. A record created is the
//! release Helm reads next (its manifest is what the next upgrade or uninstall deletes from, with
//! the privileges of whoever runs Helm), so a CREATE is allowed only as Helm makes one: the next
//! revision above the rest, named as Helm names it, in a status Helm stores a new revision in, over a latest
//! that Helm would write it over (`pkg/action` install, upgrade, rollback; helm-mapkubeapis).

use super::config::{PolicyConfig, Requester};
use super::verdict::{Reason, Verdict};
use crate::release::record::{HIGHEST_REVISION, NAME_PREFIX, UnlikeHelms};
use crate::release::{History, Status};

/// The annotation `helm-guard restore` puts on each record it recreates: the copy it came from.
/// It counts as the break-glass annotation does (for `--break-glass-group` members, when that
/// names any), and for a CREATE only.
pub(crate) const RESTORED_FROM_ANNOTATION: &str = "helm-guard.io/restored-from";

/// The namespace label that caps the revisions a release may get in an hour (C8).
pub(crate) const MAX_REVISIONS_LABEL: &str = "helm-guard.io/max-revisions-per-hour";

/// The highest revision a CREATE may jump to past the latest + 1 (C5). Helm's pruning leaves
/// gaps of the failed revisions it deletes, a handful; a forged gap to near [`HIGHEST_REVISION`]
/// would leave the owner's Helm no revision to write within a few upgrades. From here a release
/// still has a billion upgrades before the edge (the longest loop reported reached 110,760).
pub(crate) const GAP_CEILING: u32 = 1 << 30;

/// What the CREATE rules read of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CreateFacts<'a> {
    /// The record's namespace.
    pub namespace: &'a str,
    /// The release (the `name` label).
    pub release: &'a str,
    /// The object's name.
    pub object_name: &'a str,
    /// The payload's revision and status; `None` when Helm cannot read it.
    pub payload: Option<(u32, Status)>,
    /// Where the object differs from the one Helm's storage writes for that payload (its name,
    /// the `name`, `version` and `status` labels, a Secret's `type`); `None` when it is Helm's.
    pub unlike_helms: Option<&'a UnlikeHelms>,
    /// Whether the payload's namespace is not the record's.
    pub namespace_apart: bool,
    /// Metadata Helm never sets on a record, when the object has some: `immutable`, finalizers,
    /// owner references.
    pub foreign_metadata: Option<&'static str>,
    /// The rest of the release as Helm sees it.
    pub others: &'a History,
    /// Whether the payload of the rest's latest readable record is in a namespace apart from the
    /// record's; `None` when the rest has no readable record.
    pub others_apart: Option<bool>,
    /// Who asks.
    pub requester: Requester<'a>,
    /// Whether `requester` may break glass ([`PolicyConfig::may_break_glass`]).
    pub may_break_glass: bool,
    /// The `helm-guard.io/restored-from` annotation.
    pub restored_from: Option<&'a str>,
    /// Revisions of the release created in the last hour (before this one).
    pub revisions_last_hour: u32,
    /// The namespace's `helm-guard.io/max-revisions-per-hour`.
    pub max_per_hour: Option<u32>,
}

/// Decides a CREATE of a release record (POLICY.md, rules C1–C8).
pub(crate) fn decide_create(facts: &CreateFacts<'_>, config: &PolicyConfig) -> Verdict {
    let CreateFacts { namespace, release, object_name, others, .. } = *facts;
    // C1: an exempt identity (Velero, helm-2to3, whoever the configuration trusts to write
    // history back); a restore, by someone who may break glass, of a record Helm wrote (C3 holds
    // for it too: a restore brings back the record as it was, under its own name).
    if let Some(who) = config.exemption(facts.requester) {
        return Verdict::allow(Reason::Exempt).with_detail(who);
    }
    if let Some(copy) = facts.restored_from.filter(|_| facts.may_break_glass && facts.unlike_helms.is_none())
    {
        return Verdict::allow(Reason::Restore).with_detail(copy);
    }
    // C2: a record Helm cannot read changes nothing Helm sees, but under one of Helm's names it
    // takes the name Helm writes a revision under: that write then fails "already exists".
    let Some((revision, status)) = facts.payload else {
        if object_name.starts_with(NAME_PREFIX) {
            return Verdict::deny(
                Reason::ImplausibleRecord,
                format!(
                    "helm-guard: the payload of {namespace}/{object_name} does not decode, and the name is one Helm \
                     stores a revision of release {release} under: Helm's next write of it would fail \"already \
                     exists\". Helm writes only records it can read back"
                ),
            );
        }
        return Verdict::warn(
            Reason::HelmCreate,
            format!(
                "helm-guard: the payload of {namespace}/{object_name} does not decode; Helm will ignore this record"
            ),
        );
    };
    let refuse = |why: String| {
        Verdict::deny(
            Reason::ImplausibleRecord,
            format!(
                "helm-guard: this creation of {namespace}/{object_name} (release {release}, revision {revision}, \
                 {status}) is not one Helm makes: {why}. The record would become the release Helm reads next. To \
                 change a release use `helm upgrade` or `helm rollback`; to bring back a deleted record, \
                 `helm-guard restore`"
            ),
        )
    };
    // C3: Helm addresses a record by its payload's name and version; one named or labelled
    // otherwise is missed by Helm's own update and delete of that revision.
    if let Some(unlike) = facts.unlike_helms {
        return refuse(unlike.to_string());
    }
    // C3a: Helm's upgrade and rollback copy the namespace of the release they start from
    // (`upgrade.go`, `rollback.go`: `currentRelease.Namespace`); an install takes its caller's
    // (Flux's `targetNamespace`, its records in `storageNamespace`), a reinstall over a release
    // uninstalled with its history kept included.
    let copies_namespace = status != Status::PendingInstall;
    if copies_namespace && facts.others_apart.is_some_and(|apart| apart != facts.namespace_apart) {
        return refuse(format!(
            "its payload's namespace is not the one of the revision it is made from (Helm's upgrade and rollback \
             copy it: {})",
            if facts.namespace_apart {
                format!(
                    "its payload names a namespace other than {namespace}, where the release's revisions are"
                )
            } else {
                format!("the release's revisions name a namespace other than {namespace}")
            }
        ));
    }
    // C3b
    if let Some(what) = facts.foreign_metadata {
        return Verdict::deny(
            Reason::ForeignMetadata,
            format!(
                "helm-guard: this creation of {namespace}/{object_name} sets {what}, which Helm never sets on a \
                 record: an immutable record can never be updated again (Helm cannot finish or supersede the \
                 revision), a finalizer holds Helm's uninstall, an owner reference hands the record to the garbage \
                 collector"
            ),
        );
    }
    // C4: the rules below read the rest of the release; labels can lie.
    if let Some(unread) = others.unread().first() {
        return Verdict::deny(
            Reason::UnreadHistory,
            format!(
                "helm-guard: could not read revision {unread} of {namespace}/{release} within the decision deadline, \
                 so it cannot show that creating revision {revision} is one of Helm's; retry in a moment"
            ),
        );
    }
    // C5: Helm stores `Last(name).Version + 1`, taken before `--history-max` pruning, which
    // keeps the last deployed revision and may then delete every failed or pending one above it:
    // so the new revision is the latest + 1, or past it only over a deployed latest. Never past
    // the highest a 32-bit Helm reads the next of, and no jump past GAP_CEILING (a forged gap
    // would otherwise bring the release's numbers to that edge in one write).
    let latest = others.latest();
    if let Some((top, top_status)) = latest.filter(|(top, _)| revision <= *top) {
        return refuse(format!(
            "Helm stores a revision above every one the release has, and its latest is {top} ({top_status})"
        ));
    }
    if revision > HIGHEST_REVISION {
        return refuse(format!(
            "Helm's next revision after it would be past {}, the highest a 32-bit Helm reads",
            i32::MAX
        ));
    }
    let next = latest.map_or(1, |(top, _)| top + 1);
    let over_deployed = latest.is_some_and(|(_, s)| s == Status::Deployed);
    if revision > next && !(over_deployed && revision <= GAP_CEILING) {
        return refuse(format!(
            "Helm stores revision {next} next: the latest + 1, or past it only over a deployed latest (whose failed \
             revisions above it Helm's --history-max pruning deleted) and never past {GAP_CEILING}"
        ));
    }
    // C6: the status Helm stores a new revision in, over the latest it writes it over.
    let over = latest.map(|(_, s)| s);
    let plausible = match status {
        // `install`, and `install --replace` over a failed or uninstalled latest
        // (`availableName`, `replaceRelease`).
        Status::PendingInstall => matches!(over, None | Some(Status::Failed | Status::Superseded)),
        // `upgrade`: the latest not pending, and something to upgrade from (the deployed
        // revision, else a failed or superseded latest: `prepareUpgrade`).
        Status::PendingUpgrade => {
            over.is_some_and(|s| !s.is_pending())
                && (others.deployed().next().is_some()
                    || matches!(over, Some(Status::Failed | Status::Superseded)))
        }
        // `rollback` takes the latest whatever it is (`prepareRollback`: `Last()`, no status
        // check: an uninstalled one after `uninstall --keep-history`, an uninstalling one whose
        // uninstall failed).
        Status::PendingRollback => true,
        // helm-mapkubeapis: the latest superseded, then the mapped revision stored deployed.
        Status::Deployed => over == Some(Status::Superseded),
        _ => false,
    };
    if !plausible {
        let over = over.map_or_else(|| "a release with no revision".to_owned(), |s| format!("a {s} latest"));
        return refuse(format!(
            "Helm stores a new revision as pending-install (a new release, or over a failed or uninstalled one), \
             pending-upgrade (over a revision it can upgrade from), pending-rollback, or deployed (helm-mapkubeapis, over the \
             latest it has just superseded), not {status} over {over}"
        ));
    }
    // C8: a writer in a loop (a controller upgrading forever fills etcd) stopped at the cap its
    // namespace sets; deletions (Helm's pruning, an uninstall, a forget) are never held by it.
    if let Some(max) = facts.max_per_hour.filter(|max| facts.revisions_last_hour >= *max) {
        return Verdict::deny(
            Reason::RevisionRate,
            format!(
                "helm-guard: release {namespace}/{release} has had {} revisions created in the last hour, and \
                 namespace {namespace} allows {max} ({MAX_REVISIONS_LABEL}={max}); revision {revision} by {} is \
                 refused. A writer upgrading in a loop fills etcd: see why with `helm history {release} -n {namespace}`. \
                 To lift it (an opt-out holder's privilege): `kubectl label namespace {namespace} {MAX_REVISIONS_LABEL}-`, or a higher \
                 number",
                facts.revisions_last_hour, facts.requester.username
            ),
        );
    }
    Verdict::allow(Reason::HelmCreate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::{PayloadStatus, RevisionFacts};
    use Status::*;

    fn history(records: &[(u32, Status)]) -> History {
        History::of(records)
    }

    fn decide(rest: &[(u32, Status)], revision: u32, status: Status) -> Verdict {
        let others = history(rest);
        let facts = CreateFacts {
            namespace: "demo",
            release: "web",
            object_name: "sh.helm.release.v1.web.vN",
            payload: Some((revision, status)),
            unlike_helms: None,
            namespace_apart: false,
            foreign_metadata: None,
            others: &others,
            others_apart: None,
            requester: Requester::new("tenant", &[]),
            may_break_glass: false,
            restored_from: None,
            revisions_last_hour: 0,
            max_per_hour: None,
        };
        decide_create(&facts, &PolicyConfig::default())
    }

    /// One row per case of POLICY.md's C5 and C6: every CREATE Helm and helm-mapkubeapis make,
    /// and the forgeries of issue 57 (a `deployed` revision over a failed or deployed latest, a
    /// revision far past the latest or below it).
    #[test]
    fn the_rules_of_policy_md() {
        // (row, the release, revision created, status, allowed)
        type Row = (&'static str, &'static [(u32, Status)], u32, Status, bool);
        let table: &[Row] = &[
            ("install", &[], 1, PendingInstall, true),
            (
                "install --replace over an uninstalled latest (superseded first)",
                &[(1, Superseded)],
                2,
                PendingInstall,
                true,
            ),
            ("install --replace over a failed latest", &[(1, Failed)], 2, PendingInstall, true),
            ("upgrade over a deployed latest", &[(1, Superseded), (2, Deployed)], 3, PendingUpgrade, true),
            ("upgrade over a failed latest", &[(2, Deployed), (3, Failed)], 4, PendingUpgrade, true),
            ("rollback", &[(2, Superseded), (3, Deployed)], 4, PendingRollback, true),
            ("helm-mapkubeapis over the latest it superseded", &[(2, Superseded)], 3, Deployed, true),
            ("install over a deployed release", &[(1, Deployed)], 2, PendingInstall, false),
            (
                "a deployed revision over a failed latest (issue 57)",
                &[(3, Deployed), (4, Failed)],
                5,
                Deployed,
                false,
            ),
            ("a deployed revision over a deployed latest", &[(3, Deployed)], 4, Deployed, false),
            ("a revision below the latest", &[(3, Deployed)], 2, Superseded, false),
            ("a second record of the latest revision", &[(3, Deployed)], 3, Deployed, false),
            ("a deployed revision far past a deployed latest", &[(3, Deployed)], 9, Deployed, false),
            ("a failed revision", &[(3, Deployed)], 4, Failed, false),
            ("a superseded revision", &[(3, Deployed)], 4, Superseded, false),
            ("an uninstalled revision", &[(3, Deployed)], 4, Uninstalled, false),
            ("an upgrade of no release", &[], 1, PendingUpgrade, false),
            ("an upgrade over a pending latest", &[(3, PendingUpgrade)], 4, PendingUpgrade, false),
            (
                "an upgrade over an uninstalled latest, a deployed one below",
                &[(1, Deployed), (2, Uninstalled)],
                3,
                PendingUpgrade,
                true,
            ),
            (
                "an upgrade over an uninstalling latest, nothing deployed",
                &[(1, Superseded), (2, Uninstalling)],
                3,
                PendingUpgrade,
                false,
            ),
            (
                "rollback after uninstall --keep-history",
                &[(1, Superseded), (2, Uninstalled)],
                3,
                PendingRollback,
                true,
            ),
            ("rollback of a release whose uninstall failed", &[(2, Uninstalling)], 3, PendingRollback, true),
            // D9 keeps a record of every release that has one: a revision over none is an install's.
            ("a rollback over no record", &[], 4, PendingRollback, false),
        ];
        for &(row, rest, revision, status, allowed) in table {
            let verdict = decide(rest, revision, status);
            let reason = if allowed { Reason::HelmCreate } else { Reason::ImplausibleRecord };
            assert_eq!((verdict.allowed, verdict.reason), (allowed, reason), "{row}: {verdict:?}");
        }
    }

    /// C5's numbers: past the latest + 1 only over a deployed latest (Helm's `--history-max`
    /// pruning of the failed ones above it) and not past the gap ceiling, and never past what a
    /// 32-bit Helm reads the next of (issue 80, class 5).
    #[test]
    fn c5_numbers_are_the_ones_helm_writes_next() {
        // (row, the release, revision created, status, allowed)
        type Row<'a> = (&'static str, &'a [(u32, Status)], u32, Status, bool);
        let top = HIGHEST_REVISION;
        let (below_top, at_top) = ([(top - 1, Deployed)], [(top, Deployed)]);
        let table: &[Row] = &[
            ("after --history-max pruned the failed 2 and 3", &[(1, Deployed)], 4, PendingUpgrade, true),
            ("a gap over a failed latest", &[(1, Deployed), (2, Failed)], 4, PendingUpgrade, false),
            ("a gap over a superseded latest", &[(1, Superseded)], 3, PendingRollback, false),
            ("a gap to the ceiling", &[(1, Deployed)], GAP_CEILING, PendingUpgrade, true),
            ("a gap past the ceiling", &[(1, Deployed)], GAP_CEILING + 1, PendingUpgrade, false),
            ("an install over no record", &[], 1, PendingInstall, true),
            ("an install numbered past 1", &[], 2, PendingInstall, false),
            ("the highest a 32-bit Helm reads the next of", &below_top, top, PendingUpgrade, true),
            ("past it", &at_top, top + 1, PendingUpgrade, false),
            ("the last u32", &at_top, u32::MAX, PendingRollback, false),
        ];
        for &(row, rest, revision, status, allowed) in table {
            let verdict = decide(rest, revision, status);
            let reason = if allowed { Reason::HelmCreate } else { Reason::ImplausibleRecord };
            assert_eq!((verdict.allowed, verdict.reason), (allowed, reason), "{row}: {verdict:?}");
        }
    }

    #[test]
    fn c1_restores_and_exemptions_pass_and_c3_c4_come_before_the_history() {
        let others = history(&[(3, Deployed)]);
        let config = PolicyConfig::default();
        let base = CreateFacts {
            namespace: "demo",
            release: "web",
            object_name: "sh.helm.release.v1.web.v2",
            payload: Some((2, Superseded)),
            unlike_helms: None,
            namespace_apart: false,
            foreign_metadata: None,
            others: &others,
            others_apart: None,
            requester: Requester::new("alice", &[]),
            may_break_glass: false,
            restored_from: None,
            revisions_last_hour: 0,
            max_per_hour: None,
        };
        assert_eq!(decide_create(&base, &config).reason, Reason::ImplausibleRecord);
        // A restore counts only for a requester who may break glass.
        let restore = CreateFacts { restored_from: Some("helm-guard/copy-1"), ..base };
        assert_eq!(decide_create(&restore, &config).reason, Reason::ImplausibleRecord);
        let by_glass = CreateFacts { may_break_glass: true, ..restore };
        assert_eq!(decide_create(&by_glass, &config).reason, Reason::Restore);
        // Not of a record Helm did not write: another release's name over this one's payload.
        let elsewhere = UnlikeHelms::Name { helm_names_it: "sh.helm.release.v1.other.v2".into() };
        let misnamed_restore = CreateFacts { unlike_helms: Some(&elsewhere), ..by_glass };
        assert_eq!(decide_create(&misnamed_restore, &config).reason, Reason::ImplausibleRecord);
        let velero = PolicyConfig {
            exempt_users: vec!["system:serviceaccount:velero:velero".into()],
            ..config.clone()
        };
        let by_velero =
            CreateFacts { requester: Requester::new("system:serviceaccount:velero:velero", &[]), ..base };
        assert_eq!(decide_create(&by_velero, &velero).reason, Reason::Exempt);
        // C2: an unreadable record is Helm's business only under one of Helm's names.
        let unreadable = CreateFacts { payload: None, object_name: "web-notes", ..base };
        let warned = decide_create(&unreadable, &config);
        assert!(warned.allowed && warned.message.is_some(), "{warned:?}");
        let squat = CreateFacts { payload: None, object_name: "sh.helm.release.v1.web.v4", ..base };
        let refused = decide_create(&squat, &config);
        assert_eq!((refused.allowed, refused.reason), (false, Reason::ImplausibleRecord));
        assert!(refused.message.unwrap().contains("already exists"));
        // C3, C3a, C3b, each before the history is read.
        let name = UnlikeHelms::Name { helm_names_it: "sh.helm.release.v1.web.v4".into() };
        let next = CreateFacts { payload: Some((4, PendingUpgrade)), ..base };
        let misnamed = CreateFacts { unlike_helms: Some(&name), ..next };
        let refused = decide_create(&misnamed, &config);
        assert!(
            refused
                .message
                .unwrap()
                .contains("Helm names the record of this payload sh.helm.release.v1.web.v4")
        );
        assert!(decide_create(&next, &config).allowed, "the next revision, as Helm writes it");
        let elsewhere = CreateFacts { namespace_apart: true, others_apart: Some(false), ..next };
        assert!(
            decide_create(&elsewhere, &config).message.unwrap().contains("names a namespace other than demo")
        );
        let flux = CreateFacts { namespace_apart: true, others_apart: Some(true), ..next };
        assert!(decide_create(&flux, &config).allowed, "Flux's storageNamespace: every revision apart");
        let first_apart = CreateFacts { namespace_apart: true, others_apart: None, ..next };
        assert!(decide_create(&first_apart, &config).allowed, "the first revision of a Flux release");
        for what in ["immutable", "a finalizer", "an owner reference"] {
            let foreign = CreateFacts { foreign_metadata: Some(what), ..next };
            let refused = decide_create(&foreign, &config);
            assert_eq!((refused.allowed, refused.reason), (false, Reason::ForeignMetadata), "{what}");
            assert!(
                refused.message.unwrap().contains(&format!("sets {what}, which Helm never sets")),
                "{what}"
            );
        }
        let unread = History::new(&[RevisionFacts {
            revision: 3,
            payload: PayloadStatus::NotLoaded,
            label: Some(Deployed),
            stored_at: None,
            field_conflict: false,
            namespace_apart: false,
        }]);
        let unread = CreateFacts { others: &unread, ..next };
        assert_eq!(decide_create(&unread, &config).reason, Reason::UnreadHistory);
    }
}

#[cfg(test)]
mod rate {
    use super::*;
    use Status::*;

    /// C8: at the namespace's cap, the next revision is refused, naming the count, the writer
    /// and how to lift it; under it, or without the label, it passes.
    #[test]
    fn c8_a_writer_in_a_loop_is_stopped_at_the_namespaces_cap() {
        let others = History::of(&[(40, Superseded), (41, Deployed)]);
        let facts = |revisions_last_hour, max_per_hour| CreateFacts {
            namespace: "kube-system",
            release: "traefik",
            object_name: "sh.helm.release.v1.traefik.v42",
            payload: Some((42, PendingUpgrade)),
            unlike_helms: None,
            namespace_apart: false,
            foreign_metadata: None,
            others: &others,
            others_apart: None,
            requester: Requester::new("system:serviceaccount:kube-system:helm-traefik", &[]),
            may_break_glass: false,
            restored_from: None,
            revisions_last_hour,
            max_per_hour,
        };
        let config = PolicyConfig::default();
        let refused = decide_create(&facts(20, Some(20)), &config);
        assert_eq!((refused.allowed, refused.reason), (false, Reason::RevisionRate));
        let message = refused.message.unwrap();
        for needle in [
            "20 revisions created in the last hour",
            "allows 20",
            "helm-traefik",
            "helm-guard.io/max-revisions-per-hour-",
        ] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        assert!(decide_create(&facts(19, Some(20)), &config).allowed);
        assert!(decide_create(&facts(500, None), &config).allowed);
    }
}
