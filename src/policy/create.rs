//! CREATE of a record: rules C1–C8 of POLICY.md, first match wins. A record created is the
//! release Helm reads next (its manifest is what the next upgrade or uninstall deletes from, with
//! the privileges of whoever runs Helm), so a CREATE is allowed only as Helm makes one: the next
//! revision above the rest, named as Helm names it, in a status Helm stores a new revision in, over a latest
//! that Helm would write it over (`pkg/action` install, upgrade, rollback; helm-mapkubeapis).

use super::config::{PolicyConfig, Requester};
use super::verdict::{Reason, Verdict};
use crate::release::{History, Status};

/// The annotation `helm-guard restore` puts on each record it recreates: the copy it came from.
/// It counts as the break-glass annotation does (for `--break-glass-group` members, when that
/// names any), and for a CREATE only.
pub(crate) const RESTORED_FROM_ANNOTATION: &str = "helm-guard.io/restored-from";

/// The namespace label that caps the revisions a release may get in an hour (C8).
pub(crate) const MAX_REVISIONS_LABEL: &str = "helm-guard.io/max-revisions-per-hour";

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
    /// Whether the object is named and labelled as Helm writes a record of that payload:
    /// `sh.helm.release.v1.<release>.v<revision>`, the `version` and `status` labels the
    /// payload's.
    pub as_helm_writes_it: bool,
    /// The rest of the release as Helm sees it.
    pub others: &'a History,
    /// Who asks.
    pub requester: Requester<'a>,
    /// The `helm-guard.io/restored-from` annotation.
    pub restored_from: Option<&'a str>,
    /// Revisions of the release created in the last hour (before this one).
    pub revisions_last_hour: u32,
    /// The namespace's `helm-guard.io/max-revisions-per-hour`.
    pub max_per_hour: Option<u32>,
}

/// Decides a CREATE of a release record (POLICY.md, rules C1–C6).
pub(crate) fn decide_create(facts: &CreateFacts<'_>, config: &PolicyConfig) -> Verdict {
    let CreateFacts { namespace, release, object_name, others, .. } = *facts;
    // C1: a restore, counting as the break-glass annotation; an exempt identity (Velero,
    // helm-2to3, whoever the configuration trusts to write history back).
    if let Some(copy) = facts.restored_from.filter(|_| config.may_break_glass(facts.requester)) {
        return Verdict::allow(Reason::Restore).with_detail(copy);
    }
    if let Some(who) = config.exemption(facts.requester) {
        return Verdict::allow(Reason::Exempt).with_detail(who);
    }
    // C2: a record Helm cannot read changes nothing Helm sees.
    let Some((revision, status)) = facts.payload else {
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
    // C3
    if !facts.as_helm_writes_it {
        return refuse(format!(
            "Helm names the record sh.helm.release.v1.{release}.v{revision} and labels it version={revision}, \
             status={status}"
        ));
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
    // C5: Helm stores a revision above every one it lists: `Last(name).Version + 1`, taken
    // before `--history-max` pruning, which may then delete the failed or pending revisions
    // above the last deployed one, so the new revision can be past the latest + 1.
    let latest = others.latest();
    if let Some((top, top_status)) = latest.filter(|(top, _)| revision <= *top) {
        return refuse(format!(
            "Helm stores a revision above every one the release has, and its latest is {top} ({top_status})"
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
        // uninstall failed), and with `--history-max 1` its pruning may have deleted every record
        // before it stores the new one.
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
                 To lift it: `kubectl label namespace {namespace} {MAX_REVISIONS_LABEL}-`, or a higher number",
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
            as_helm_writes_it: true,
            others: &others,
            requester: Requester { username: "tenant", groups: &[] },
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
            (
                "an upgrade after --history-max pruned the failed latest",
                &[(1, Deployed)],
                3,
                PendingUpgrade,
                true,
            ),
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
            ("rollback --history-max 1, its pruning took every record", &[], 4, PendingRollback, true),
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
            as_helm_writes_it: true,
            others: &others,
            requester: Requester { username: "alice", groups: &[] },
            restored_from: None,
            revisions_last_hour: 0,
            max_per_hour: None,
        };
        assert_eq!(decide_create(&base, &config).reason, Reason::ImplausibleRecord);
        let restore = CreateFacts { restored_from: Some("helm-guard/copy-1"), ..base };
        assert_eq!(decide_create(&restore, &config).reason, Reason::Restore);
        // With --break-glass-group, a restore counts for its members only.
        let sre = PolicyConfig { break_glass_groups: vec!["sre".into()], ..PolicyConfig::default() };
        assert_eq!(decide_create(&restore, &sre).reason, Reason::ImplausibleRecord);
        let velero = PolicyConfig {
            exempt_users: vec!["system:serviceaccount:velero:velero".into()],
            ..config.clone()
        };
        let by_velero = CreateFacts {
            requester: Requester { username: "system:serviceaccount:velero:velero", groups: &[] },
            ..base
        };
        assert_eq!(decide_create(&by_velero, &velero).reason, Reason::Exempt);
        let unreadable = CreateFacts { payload: None, ..base };
        let warned = decide_create(&unreadable, &config);
        assert!(warned.allowed && warned.message.is_some(), "{warned:?}");
        let misnamed = CreateFacts { payload: Some((4, PendingUpgrade)), as_helm_writes_it: false, ..base };
        let refused = decide_create(&misnamed, &config);
        assert!(refused.message.unwrap().contains("sh.helm.release.v1.web.v4"));
        let unread = History::new(&[RevisionFacts {
            revision: 3,
            payload: PayloadStatus::NotLoaded,
            label: Some(Deployed),
            stored_at: None,
            field_conflict: false,
        }]);
        let next = CreateFacts { payload: Some((4, PendingUpgrade)), others: &unread, ..base };
        assert_eq!(decide_create(&next, &config).reason, Reason::UnreadHistory);
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
            as_helm_writes_it: true,
            others: &others,
            requester: Requester { username: "system:serviceaccount:kube-system:helm-traefik", groups: &[] },
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
