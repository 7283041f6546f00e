//! DELETE of a record: rules D1–D10 of POLICY.md, first match wins.

use super::config::{PolicyConfig, Requester};
use super::verdict::{Reason, Verdict};
use crate::release::{History, Status};

/// What the request tells about the deletion.
#[derive(Debug, Clone, Copy)]
pub struct DeleteFacts<'a> {
    /// The release's namespace.
    pub namespace: &'a str,
    /// The release's name.
    pub release: &'a str,
    /// The revision being deleted.
    pub revision: u32,
    /// The record's status (payload if it decodes, else label); `None` when its payload does not
    /// decode.
    pub status: Option<Status>,
    /// Whether the namespace is being deleted (D1).
    pub namespace_terminating: bool,
    /// Who asks.
    pub requester: Requester<'a>,
    /// The break-glass reason on the record (D2).
    pub break_glass: Option<&'a str>,
    /// Whether the record is the one the guard last saw deployed in the release (its last good
    /// revision, whatever it was moved to since); `None` when the guard saw none of the
    /// release's records deployed. Only which deletions keep a copy reads it.
    pub last_deployed: Option<bool>,
}

/// Decides a deletion. `others`: the release as Helm sees it now, without the record being
/// deleted (another record may hold the same revision).
pub fn decide_delete(facts: &DeleteFacts<'_>, others: &History, config: &PolicyConfig) -> Verdict {
    let verdict = decide_delete_rules(facts, others, config, Overrides::Count);
    // D10: a controller that forgets releases deletes every record in the order the API lists
    // them, so the rules refuse it somewhere in the middle; what they let through stays theirs
    // (its Helm SDK's own uninstall and history pruning keep no copy).
    if !verdict.allowed
        && let Some(who) = config.forgetter(facts.requester)
    {
        return Verdict::allow(Reason::ReleaseForget).with_detail(who);
    }
    config.explain_break_glass(verdict, facts.break_glass, facts.requester)
}

/// Whether an approved deletion keeps a copy in the recycle bin first (POLICY.md, "The recycle
/// bin"): every one the break-glass annotation lets through (someone chose to delete that
/// record: `helm-guard forget` marks each record so), and otherwise unless the rules, without
/// the annotation, the exemptions and the forgetters, approve it as one of Helm's own flows (an
/// uninstall and its purge, history pruning, stuck-revision recovery) or as namespace teardown.
/// So a deletion let through by an exemption, a forgetter or a weaker mode keeps one, and so
/// does that of a record Helm cannot read (Helm never deletes those: its drivers skip what does
/// not decode).
pub(crate) fn keeps_copy(facts: &DeleteFacts<'_>, others: &History, config: &PolicyConfig) -> bool {
    if !is_teardown(facts) && break_glass_counts(facts, config) {
        return true;
    }
    let rules = decide_delete_rules(facts, others, config, Overrides::Ignore);
    !(rules.allowed && rules.reason.is_helm_deletion()) || takes_last_good(facts, others, rules.reason)
}

/// Whether an approval of Helm's own flows (history pruning, an uninstall's purge) takes the
/// release's last good revision: the record deleted is deployed, or, while no other record is
/// deployed, it is the one the guard last saw deployed. Helm makes these deletions (its
/// pruning with nothing deployed takes the oldest first; its uninstall purges everything below
/// the marked latest, which is normally itself the last one deployed), and so does the second
/// step of a break in two (a downgrade or a forged latest, then the deletion): they keep a copy
/// (POLICY.md, "The recycle bin"). Helm's own flows never wait on it ([`copy_is_best_effort`]).
///
/// A guard that never saw the release deployed (started after it lost its deployed revision)
/// takes the record as the last good one unless it is pending, or a newer record shows it ran
/// (`superseded`, `uninstalling`, `uninstalled`; not an uninstall-marked latest, which may be a
/// revision that never ran, marked).
pub(crate) fn takes_last_good(facts: &DeleteFacts<'_>, others: &History, reason: Reason) -> bool {
    if !matches!(reason, Reason::HistoryPruning | Reason::UninstallPurge) {
        return false;
    }
    // A deployed record is kept whatever else is deployed: Helm prunes one only beside another
    // (an anomaly), and a revision forged and marked deployed above it makes the same picture.
    if facts.status == Some(Status::Deployed) {
        return true;
    }
    if others.deployed().next().is_some() {
        return false;
    }
    if let Some(last) = facts.last_deployed {
        return last;
    }
    let may_have_run = |s: Status| !s.is_pending() && s != Status::Unknown;
    let ran = |s: Status| s == Status::Superseded || s.is_uninstall();
    let latest = others.latest();
    let newer_that_ran = others
        .revisions()
        .iter()
        .any(|&(r, s)| r > facts.revision && ran(s) && !(latest == Some((r, s)) && s.is_uninstall()));
    facts.status.is_some_and(may_have_run) && !newer_that_ran
}

/// Whether a copy may be skipped when the bin cannot store it: the copies of Helm's own
/// deletions ([`takes_last_good`]) are a safety net, and an uninstall that stopped half-purged
/// because the bin was full is the breakage the guard exists to prevent.
pub(crate) fn copy_is_best_effort(facts: &DeleteFacts<'_>, others: &History, config: &PolicyConfig) -> bool {
    let rules = decide_delete_rules(facts, others, config, Overrides::Ignore);
    rules.allowed
        && rules.reason.is_helm_deletion()
        && !(facts.break_glass.is_some() && break_glass_counts(facts, config))
}

/// Whether an approval of `reason` must first be agreed with the other replicas (POLICY.md,
/// "Approvals that need agreement"): two approvals of one release, each harmless alone, can together
/// leave it without its deployed or latest revision. D7 changes the latest, so it always needs
/// agreement. D5 needs it only for a `deployed` record, or one that holds the latest revision
/// with another record: any other record below the latest changes, once gone, neither which
/// revision is latest nor which are deployed, so every other approval decided with it present
/// holds without it, and its own holds whatever else goes. That is Helm's history pruning
/// (`removeLeastRecent` keeps the last deployed), which then costs no claim.
pub(crate) fn needs_agreement(facts: &DeleteFacts<'_>, others: &History, reason: Reason) -> bool {
    let shares_latest = others.latest().is_none_or(|(latest, _)| latest <= facts.revision);
    match reason {
        Reason::StuckRevisionRecovery => true,
        Reason::HistoryPruning => facts.status == Some(Status::Deployed) || shares_latest,
        // D4a of a deployed record, and D6 of a latest with a deployed record left below it
        // (`--history-max` pruning): together they take both.
        Reason::UninstallPurge => facts.status == Some(Status::Deployed) || shares_latest,
        Reason::Uninstall => others.latest().is_some(),
        _ => false,
    }
}

/// Whether an approval holds on a view of the release that lags what is stored, so that a live
/// guard answers it without first showing its watch caught up (POLICY.md, "A view that lags"),
/// the view being one earlier state of the release (the release as its watch brought it, no
/// read having moved part of it ahead) that holds the record as stored (`seen_as_stored`: this
/// object at the request's resourceVersion): D4a of a `superseded` or `failed` record, in a release
/// the view shows in the shape Helm's purge leaves it: the latest marked `uninstalling` or
/// `uninstalled` (its reason says so), every record below it `superseded` or `failed`. No write the
/// view has not seen takes every record above it away then: a revision created later is above it
/// and one of them stays latest until it is gone itself, and the rules refuse the deletion of a
/// latest with older records and nothing deployed below it (D6b, D8, D9), while no record below
/// it can be made `deployed`. So it stays below the latest and D4a or D5 approves it on what is
/// stored too (generative test in `lagging_view_tests.rs`). Helm's purge then waits for one
/// confirmation, not one per record: the marked latest's own (its first request reads the marked
/// latest's new payload alone, which keeps the view one its watch brought).
pub(crate) fn holds_on_a_lagging_view(
    facts: &DeleteFacts<'_>,
    others: &History,
    verdict: &Verdict,
    seen_as_stored: bool,
) -> bool {
    let settled = |s: Status| matches!(s, Status::Superseded | Status::Failed);
    let Some((latest, _)) = others.latest() else { return false };
    verdict.allowed
        && verdict.reason == Reason::UninstallPurge
        && seen_as_stored
        && facts.status.is_some_and(settled)
        && facts.revision < latest
        && others.revisions().iter().all(|&(r, s)| r == latest || settled(s))
}

/// Whether D2 (the break-glass annotation, the exemptions) counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overrides {
    Count,
    Ignore,
}

fn decide_delete_rules(
    facts: &DeleteFacts<'_>,
    others: &History,
    config: &PolicyConfig,
    overrides: Overrides,
) -> Verdict {
    let DeleteFacts { namespace, release, revision, .. } = *facts;
    if is_teardown(facts) {
        return Verdict::allow(Reason::NamespaceTeardown);
    }
    if let Some(reason) = facts.break_glass
        && overrides == Overrides::Count
        && break_glass_counts(facts, config)
    {
        return Verdict::allow(Reason::BreakGlass).with_detail(reason);
    }
    if let Some(who) = config.exemption(facts.requester).filter(|_| overrides == Overrides::Count) {
        return Verdict::allow(Reason::Exempt).with_detail(who);
    }
    // D3
    let Some(status) = facts.status else {
        return Verdict::warn(
            Reason::UndecodableRecord,
            format!(
                "revision {revision} of {namespace}/{release} does not decode; Helm ignores it, deleting it changes nothing Helm sees"
            ),
        );
    };
    // D3b: the rules below depend on the other records; labels can lie, so each must have been
    // read as Helm reads it.
    if let Some(unread) = others.unread().first() {
        return Verdict::deny(
            Reason::UnreadHistory,
            format!(
                "helm-guard: could not read revision {unread} of {namespace}/{release} within the decision deadline, \
                 so it cannot show that deleting revision {revision} is harmless; retry in a moment"
            ),
        );
    }
    // The request carries the record itself: its status wins over what the index holds, and a
    // record the index has not seen yet still counts.
    let history = others.with(revision, status);
    let Some((latest, latest_status)) = history.latest() else {
        return Verdict::allow(Reason::HistoryPruning);
    };
    // Not the latest when another record holds this revision or a later one.
    if others.latest().is_some_and(|(other, _)| other >= revision) {
        // D4a: an uninstall purging the history (Helm deletes the `uninstalling` record last).
        // Nothing it deletes can take the release's latest revision with it, so two of these
        // approved at once by two replicas are as harmless as each alone: no agreement needed.
        if latest_status.is_uninstall() {
            return Verdict::allow(Reason::UninstallPurge);
        }
        // D4
        let only_deployed = status == Status::Deployed && others.deployed().next().is_none();
        if only_deployed {
            let fix = remedies(
                namespace,
                release,
                Some(revision),
                "first (a new deployed revision then takes its place)",
            );
            return Verdict::deny(
                Reason::LastDeployedRevision,
                format!(
                    "helm-guard: revision {revision} of release {namespace}/{release} is its only deployed revision (the latest, revision {latest}, is {latest_status}); \
                     deleting it would leave the release with nothing to roll back to. Instead: {fix}"
                ),
            );
        }
        // D5
        return Verdict::allow(Reason::HistoryPruning);
    }
    // D6: Helm's purge deletes the marked latest last (`uninstall.go` `purgeReleases`, the
    // history sorted by revision). Deleting it first would leave the older records as a release
    // Helm no longer sees as being uninstalled, with nothing deployed. (Helm's `--history-max`
    // pruning deletes it before a deployed revision it keeps: that leaves the deployed one.)
    if status.is_uninstall() {
        if let Some((below, below_status)) = others.latest().filter(|_| others.deployed().next().is_none()) {
            return Verdict::deny(
                Reason::UninstallOrder,
                format!(
                    "helm-guard: revision {revision} ({status}) of {namespace}/{release} is deleted while older records \
                     remain; Helm's uninstall deletes the `{status}` latest last. Deleting it now would make revision \
                     {below} ({below_status}) the latest. Instead: `helm uninstall {release} -n {namespace}` finishes the \
                     uninstall, or annotate the record with {}=<reason> to force the deletion",
                    super::BREAK_GLASS_ANNOTATION
                ),
            );
        }
        return Verdict::allow(Reason::Uninstall);
    }
    let remaining = others;
    let after = aftermath(release, remaining);
    let rollback_target = remaining.deployed().last().or_else(|| remaining.latest().map(|(r, _)| r));
    let fix = remedies(namespace, release, rollback_target, "to go back");
    let previous = remaining.latest().map(|(_, s)| s);
    // D7: a stuck operation's revision above a deployed one, or alone (an install that never
    // finished). A `failed` latest alone is not an operation under way: it was an install that
    // failed (`helm uninstall` removes it) or a revision once deployed and downgraded, and
    // deleting it forgets the release while its resources stay (D9).
    let stuck = status.is_pending() && matches!(previous, None | Some(Status::Deployed));
    if stuck || (status == Status::Failed && previous == Some(Status::Deployed)) {
        return Verdict::warn(
            Reason::StuckRevisionRecovery,
            format!("helm-guard: deleting revision {revision} ({status}) of {namespace}/{release}; {after}"),
        );
    }
    // D8
    if status == Status::Deployed {
        return Verdict::deny(
            Reason::LatestDeployedRevision,
            format!(
                "helm-guard: revision {revision} is the latest, deployed revision of release {namespace}/{release}; {after}. Instead: {fix}"
            ),
        );
    }
    // D9
    Verdict::deny(
        Reason::WouldOrphanRelease,
        format!(
            "helm-guard: revision {revision} ({status}) is the latest revision of release {namespace}/{release}; {after}. Instead: {fix}"
        ),
    )
}

/// D1: only a namespace going away is teardown; the garbage collector elsewhere (an owner
/// reference someone added) is decided like anyone.
fn is_teardown(facts: &DeleteFacts<'_>) -> bool {
    facts.namespace_terminating || PolicyConfig::is_namespace_controller(facts.requester)
}

/// D2's annotation: it counts for `--break-glass-group` members only, when it names any; for
/// others the rules decide (Helm deleting a record someone annotated is still Helm).
fn break_glass_counts(facts: &DeleteFacts<'_>, config: &PolicyConfig) -> bool {
    facts.break_glass.is_some() && config.may_break_glass(facts.requester)
}

/// What Helm would see once the latest revision is gone.
fn aftermath(release: &str, remaining: &History) -> String {
    match remaining.latest() {
        None => format!(
            "no revision would be left: Helm would forget release {release} while its resources stay in the cluster"
        ),
        Some((revision, Status::Deployed)) => {
            format!("revision {revision} would become the latest and it is deployed")
        }
        Some((revision, Status::Superseded)) if remaining.deployed().next().is_none() => format!(
            "revision {revision} would become the latest and it is superseded, with nothing deployed; \
             the K3s/RKE2 helm-install job would then fail with `{helm3}` (Helm 4: `{helm4}`)",
            helm3 = crate::release::NAME_IN_USE[0],
            helm4 = crate::release::NAME_IN_USE[1],
        ),
        Some((revision, status)) => format!("revision {revision} would become the latest and it is {status}"),
    }
}

/// The ways out that leave Helm's history intact.
fn remedies(namespace: &str, release: &str, rollback_to: Option<u32>, rollback_why: &str) -> String {
    let rollback = rollback_to
        .map(|r| format!("`helm rollback {release} {r} -n {namespace}` {rollback_why}, "))
        .unwrap_or_default();
    format!(
        "`helm uninstall {release} -n {namespace}` to remove the release, {rollback}\
         or annotate the record with {}=<reason> to force the deletion",
        super::BREAK_GLASS_ANNOTATION
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::history::{PayloadStatus, RevisionFacts};
    use Status::*;

    fn history(revisions: &[(u32, Status)]) -> History {
        History::of(revisions)
    }

    /// A requester the authorizer allows `breakglass` (cluster-admin, say).
    const ADMIN: Requester<'static> =
        Requester { username: "admin", groups: &[], break_glass_authorized: true };

    fn facts(revision: u32, status: Option<Status>) -> DeleteFacts<'static> {
        DeleteFacts {
            namespace: "demo",
            release: "web",
            revision,
            status,
            namespace_terminating: false,
            requester: ADMIN,
            break_glass: None,
            last_deployed: None,
        }
    }

    /// A table's whole history, without the record deleted: what the verdict gets.
    fn others(revision: u32, status: Option<Status>, revisions: &[(u32, Status)]) -> History {
        let mut others = revisions.to_vec();
        if let Some(at) = others.iter().position(|&(r, s)| r == revision && Some(s) == status) {
            others.remove(at);
        }
        history(&others)
    }

    /// Decides on a table that lists the whole history, the deleted record included.
    fn decide(revision: u32, status: Option<Status>, revisions: &[(u32, Status)]) -> Verdict {
        decide_delete(
            &facts(revision, status),
            &others(revision, status, revisions),
            &PolicyConfig::default(),
        )
    }

    /// (rule, revision deleted, its status, the history, allowed, reason)
    type Row = (&'static str, u32, Option<Status>, &'static [(u32, Status)], bool, Reason);

    /// A refusal says what Helm would see next, and names K3s/RKE2's crash loop only when it
    /// would follow: a superseded latest with nothing deployed.
    #[test]
    fn a_refusal_names_the_crash_loop_only_when_nothing_would_be_deployed() {
        let message = |revisions: &'static [(u32, Status)]| {
            let verdict = decide(3, Some(Deployed), revisions);
            assert!(!verdict.allowed);
            verdict.message.unwrap_or_default()
        };
        let orphaned = message(&[(2, Superseded), (3, Deployed)]);
        assert!(
            orphaned
                .contains("revision 2 would become the latest and it is superseded, with nothing deployed"),
            "{orphaned}"
        );
        assert!(orphaned.contains("cannot re-use a name that is still in use"), "{orphaned}");
        // Revision 1 is still deployed (a stale record Helm left): no crash loop to foretell.
        let stale = message(&[(1, Deployed), (2, Superseded), (3, Deployed)]);
        assert!(stale.contains("revision 2 would become the latest and it is superseded"), "{stale}");
        assert!(!stale.contains("nothing deployed") && !stale.contains("re-use"), "{stale}");
    }

    /// One row per rule of POLICY.md, in its order.
    #[test]
    fn the_rules_of_policy_md() {
        let table: [Row; 18] = [
            ("D3 undecodable", 3, None, &[(2, Superseded), (3, Deployed)], true, Reason::UndecodableRecord),
            (
                "D4 only deployed, not latest",
                3,
                Some(Deployed),
                &[(3, Deployed), (4, Failed)],
                false,
                Reason::LastDeployedRevision,
            ),
            (
                "D4a purge while uninstalling",
                3,
                Some(Deployed),
                &[(3, Deployed), (4, Uninstalling)],
                true,
                Reason::UninstallPurge,
            ),
            (
                "D4a purge after uninstall --keep-history",
                3,
                Some(Deployed),
                &[(3, Deployed), (4, Uninstalled)],
                true,
                Reason::UninstallPurge,
            ),
            (
                "D4a purge of a superseded revision",
                1,
                Some(Superseded),
                &[(1, Superseded), (2, Superseded), (3, Uninstalling)],
                true,
                Reason::UninstallPurge,
            ),
            (
                "D5 oldest superseded",
                1,
                Some(Superseded),
                &[(1, Superseded), (2, Superseded), (3, Deployed)],
                true,
                Reason::HistoryPruning,
            ),
            (
                "D5 one of two deployed",
                1,
                Some(Deployed),
                &[(1, Deployed), (2, Deployed)],
                true,
                Reason::HistoryPruning,
            ),
            (
                "D6 uninstalling, the last record",
                2,
                Some(Uninstalling),
                &[(2, Uninstalling)],
                true,
                Reason::Uninstall,
            ),
            (
                "D6 uninstalling, older records left (issue 57, chain 1)",
                3,
                Some(Uninstalling),
                &[(1, Superseded), (2, Superseded), (3, Uninstalling)],
                false,
                Reason::UninstallOrder,
            ),
            ("D6 uninstalled", 1, Some(Uninstalled), &[(1, Uninstalled)], true, Reason::Uninstall),
            (
                "D7 pending over deployed",
                2,
                Some(PendingUpgrade),
                &[(1, Deployed), (2, PendingUpgrade)],
                true,
                Reason::StuckRevisionRecovery,
            ),
            (
                "D7 pending-install with nothing before",
                1,
                Some(PendingInstall),
                &[(1, PendingInstall)],
                true,
                Reason::StuckRevisionRecovery,
            ),
            (
                "D7 failed over deployed",
                2,
                Some(Failed),
                &[(1, Deployed), (2, Failed)],
                true,
                Reason::StuckRevisionRecovery,
            ),
            (
                "D9 failed with nothing before (issue 57, chain 3)",
                1,
                Some(Failed),
                &[(1, Failed)],
                false,
                Reason::WouldOrphanRelease,
            ),
            (
                "D8 latest deployed",
                3,
                Some(Deployed),
                &[(2, Superseded), (3, Deployed)],
                false,
                Reason::LatestDeployedRevision,
            ),
            (
                "D9 latest superseded",
                1,
                Some(Superseded),
                &[(1, Superseded)],
                false,
                Reason::WouldOrphanRelease,
            ),
            (
                "D9 failed over superseded",
                4,
                Some(Failed),
                &[(3, Superseded), (4, Failed)],
                false,
                Reason::WouldOrphanRelease,
            ),
            (
                "D9 unknown",
                2,
                Some(Unknown),
                &[(1, Deployed), (2, Unknown)],
                false,
                Reason::WouldOrphanRelease,
            ),
        ];
        for (rule, revision, status, revisions, allowed, reason) in table {
            let verdict = decide(revision, status, revisions);
            assert_eq!((verdict.allowed, verdict.reason), (allowed, reason), "{rule}: {verdict:?}");
        }
    }

    /// Which approvals are agreed with the other replicas first, as POLICY.md lists them.
    #[test]
    fn agreement_is_needed_where_another_approval_could_turn_this_one() {
        let needs = |revision, status, revisions: &[(u32, Status)]| {
            let facts = facts(revision, Some(status));
            let others = others(revision, Some(status), revisions);
            let verdict = decide_delete(&facts, &others, &PolicyConfig::default());
            assert!(verdict.allowed, "{verdict:?}");
            needs_agreement(&facts, &others, verdict.reason)
        };
        // Helm's history pruning of a superseded or failed revision: none.
        assert!(!needs(1, Superseded, &[(1, Superseded), (2, Superseded), (3, Deployed)]));
        assert!(!needs(2, Failed, &[(1, Superseded), (2, Failed), (3, Deployed)]));
        // A deployed revision while another is deployed: the other may be going too.
        assert!(needs(1, Deployed, &[(1, Deployed), (2, Deployed), (3, Failed)]));
        // A record that shares the latest revision with another: that one may be going too.
        assert!(needs(3, Superseded, &[(1, Deployed), (3, Superseded), (3, Failed)]));
        // D7 changes the latest.
        assert!(needs(2, PendingUpgrade, &[(1, Deployed), (2, PendingUpgrade)]));
        // The purge of a deployed revision, and the marked latest deleted before a deployed one
        // (`--history-max` pruning): together they would take both.
        assert!(needs(3, Deployed, &[(3, Deployed), (4, Uninstalling)]));
        assert!(needs(4, Uninstalling, &[(3, Deployed), (4, Uninstalling)]));
        // The rest of an uninstall holds whatever else goes.
        assert!(!needs(1, Superseded, &[(1, Superseded), (2, Uninstalling)]));
        assert!(!needs(2, Uninstalling, &[(2, Uninstalling)]));
    }

    /// Two approvals decided at once on the same history, neither seeing the other (what two
    /// replicas do when one of them needs no agreement), must end where some order of the two,
    /// each decided after the other, would: random histories (revisions shared, every status),
    /// every pair of records. Seeded: `HELM_GUARD_SEED` reruns one.
    #[test]
    fn an_approval_without_agreement_holds_whatever_else_is_approved_at_once() {
        let statuses = <Status as strum::VariantArray>::VARIANTS;
        let seed = std::env::var("HELM_GUARD_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(31);
        let mut rng = fastrand::Rng::with_seed(seed);
        let approves = |records: &[(u32, Status)], at: usize| {
            let &(revision, status) = records.get(at)?;
            let mut others = records.to_vec();
            others.remove(at);
            let facts = facts(revision, Some(status));
            let others = history(&others);
            let verdict = decide_delete(&facts, &others, &PolicyConfig::default());
            verdict.allowed.then(|| needs_agreement(&facts, &others, verdict.reason))
        };
        let without = |records: &[(u32, Status)], at: usize| {
            let mut rest = records.to_vec();
            rest.remove(at);
            rest
        };
        let (mut unagreed, mut pairs) = (0, 0);
        for _ in 0..20_000 {
            let records: Vec<(u32, Status)> = (0..rng.usize(2..7))
                .map(|_| (rng.u32(1..6), statuses[rng.usize(..statuses.len())]))
                .collect();
            for a in 0..records.len() {
                // `a` approved with no claim written.
                if approves(&records, a) != Some(false) {
                    continue;
                }
                unagreed += 1;
                for b in (0..records.len()).filter(|&b| b != a) {
                    if approves(&records, b).is_none() {
                        continue;
                    }
                    pairs += 1;
                    // After `a`, `b` is approved at the position it then has (and vice versa).
                    let b_after_a = approves(&without(&records, a), if b > a { b - 1 } else { b }).is_some();
                    let a_after_b = approves(&without(&records, b), if a > b { a - 1 } else { a }).is_some();
                    assert!(
                        b_after_a || a_after_b,
                        "seed {seed}: {records:?}: deleting {:?} and {:?} at once is no order of the two",
                        records[a],
                        records[b]
                    );
                }
            }
        }
        assert!(
            unagreed > 1_000 && pairs > 1_000,
            "the generator reached too few cases: {unagreed}, {pairs}"
        );
    }

    #[test]
    fn d1_namespace_teardown_comes_first() {
        let mut terminating = facts(3, Some(Deployed));
        terminating.namespace_terminating = true;
        let nothing_else = history(&[]);
        let verdict = decide_delete(&terminating, &nothing_else, &PolicyConfig::default());
        assert_eq!((verdict.allowed, verdict.reason), (true, Reason::NamespaceTeardown));
        let mut controller = facts(3, Some(Deployed));
        controller.requester = Requester::new("system:serviceaccount:kube-system:namespace-controller", &[]);
        assert_eq!(
            decide_delete(&controller, &nothing_else, &PolicyConfig::default()).reason,
            Reason::NamespaceTeardown
        );
    }

    #[test]
    fn d1_the_garbage_collector_outside_a_terminating_namespace_is_decided_like_anyone() {
        // An owner reference added by hand makes the garbage collector delete the record.
        for user in
            ["system:serviceaccount:kube-system:generic-garbage-collector", "system:kube-controller-manager"]
        {
            let mut gc = facts(3, Some(Deployed));
            gc.requester = Requester::new(user, &[]);
            let verdict = decide_delete(&gc, &history(&[(2, Superseded)]), &PolicyConfig::default());
            assert_eq!((verdict.allowed, verdict.reason), (false, Reason::LatestDeployedRevision), "{user}");
        }
    }

    #[test]
    fn d3b_a_record_known_only_by_its_labels_is_not_trusted() {
        let labels_only = RevisionFacts {
            revision: 2,
            payload: PayloadStatus::NotLoaded,
            label: Some(Deployed),
            stored_at: None,
            field_conflict: false,
            namespace_apart: false,
        };
        let verdict = decide_delete(
            &facts(1, Some(Superseded)),
            &History::new(&[labels_only]),
            &PolicyConfig::default(),
        );
        assert_eq!((verdict.allowed, verdict.reason), (false, Reason::UnreadHistory));
        assert!(verdict.message.unwrap().contains("retry"));
    }

    #[test]
    fn a_second_record_of_the_same_revision_is_kept_apart() {
        // A crafted copy of revision 3 marked superseded: deleting it leaves the real one.
        let verdict = decide(3, Some(Superseded), &[(2, Superseded), (3, Deployed), (3, Superseded)]);
        assert_eq!((verdict.allowed, verdict.reason), (true, Reason::HistoryPruning));
        // Deleting the real one leaves only the copy: refused.
        let verdict = decide(3, Some(Deployed), &[(2, Superseded), (3, Deployed), (3, Superseded)]);
        assert_eq!((verdict.allowed, verdict.reason), (false, Reason::LastDeployedRevision));
    }

    #[test]
    fn d2_break_glass_and_exemptions_carry_their_detail() {
        let latest_deployed = history(&[]);
        let mut glass = facts(3, Some(Deployed));
        glass.break_glass = Some("INC-1234 restore from backup");
        let verdict = decide_delete(&glass, &latest_deployed, &PolicyConfig::default());
        assert_eq!((verdict.allowed, verdict.reason), (true, Reason::BreakGlass));
        assert_eq!(verdict.detail.as_deref(), Some("INC-1234 restore from backup"));

        let groups = ["platform-admins".to_owned()];
        let mut member = facts(3, Some(Deployed));
        member.requester = Requester::new("alice", &groups);
        let config =
            PolicyConfig { exempt_groups: vec!["platform-admins".into()], ..PolicyConfig::default() };
        let verdict = decide_delete(&member, &latest_deployed, &config);
        assert_eq!(
            (verdict.reason, verdict.detail.as_deref()),
            (Reason::Exempt, Some("group:platform-admins"))
        );
        let config = PolicyConfig { exempt_users: vec!["alice".into()], ..PolicyConfig::default() };
        assert_eq!(decide_delete(&member, &latest_deployed, &config).detail.as_deref(), Some("user:alice"));
    }

    #[test]
    fn d2_with_break_glass_groups_the_annotation_counts_for_their_members_only() {
        let latest_deployed = history(&[]);
        let config = PolicyConfig {
            break_glass_groups: vec!["incident-responders".into()],
            ..PolicyConfig::default()
        };
        let responders = ["incident-responders".to_owned()];
        let mut annotated = facts(3, Some(Deployed));
        annotated.break_glass = Some("INC-1234");
        annotated.requester = Requester::new("carol", &responders);
        assert_eq!(decide_delete(&annotated, &latest_deployed, &config).reason, Reason::BreakGlass);

        annotated.requester = Requester::new("tenant", &[]);
        let refused = decide_delete(&annotated, &latest_deployed, &config);
        assert_eq!((refused.allowed, refused.reason), (false, Reason::LatestDeployedRevision));
        let message = refused.message.unwrap();
        assert!(
            message.ends_with("and for members of system:masters, incident-responders; tenant is neither)"),
            "{message}"
        );
        // For anyone else the rules decide: Helm pruning an annotated record is still allowed.
        let mut pruned = facts(1, Some(Superseded));
        pruned.break_glass = Some("left over");
        pruned.requester = Requester::new("helm", &[]);
        let allowed = decide_delete(&pruned, &history(&[(2, Deployed)]), &config);
        assert_eq!((allowed.allowed, allowed.reason), (true, Reason::HistoryPruning));
        assert!(allowed.message.is_none());
    }

    /// (why the deletion is let go, revision deleted, its status, the history, a copy kept)
    type BinRow = (&'static str, u32, Option<Status>, &'static [(u32, Status)], bool);

    /// POLICY.md, "The recycle bin": which approved deletions keep a copy first. Whatever the
    /// break-glass annotation lets go keeps one, even where Helm's own rules would allow it.
    #[test]
    fn the_recycle_bin_keeps_what_only_an_override_lets_go() {
        let exempt = ["platform-admins".to_owned()];
        let table: [BinRow; 10] = [
            (
                "break-glass, latest deployed (D8 otherwise)",
                3,
                Some(Deployed),
                &[(2, Superseded), (3, Deployed)],
                true,
            ),
            (
                "break-glass, only deployed (D4 otherwise)",
                3,
                Some(Deployed),
                &[(3, Deployed), (4, Failed)],
                true,
            ),
            (
                "break-glass, superseded latest (D9 otherwise)",
                2,
                Some(Superseded),
                &[(1, Superseded), (2, Superseded)],
                true,
            ),
            (
                "break-glass, an old revision Helm would prune (D5)",
                1,
                Some(Superseded),
                &[(1, Superseded), (2, Deployed)],
                true,
            ),
            (
                "break-glass, Helm's uninstall (D6)",
                2,
                Some(Uninstalling),
                &[(1, Superseded), (2, Uninstalling)],
                true,
            ),
            (
                "break-glass, the purge of an uninstall (D4a)",
                1,
                Some(Deployed),
                &[(1, Deployed), (2, Uninstalled)],
                true,
            ),
            (
                "break-glass, a stuck revision (D7)",
                2,
                Some(PendingUpgrade),
                &[(1, Deployed), (2, PendingUpgrade)],
                true,
            ),
            ("break-glass, a record Helm cannot read (D3)", 3, None, &[(2, Deployed)], true),
            ("exempt, latest deployed", 3, Some(Deployed), &[(2, Superseded), (3, Deployed)], true),
            ("exempt, an old revision", 1, Some(Superseded), &[(1, Superseded), (2, Deployed)], false),
        ];
        let config = PolicyConfig { exempt_groups: exempt.to_vec(), ..PolicyConfig::default() };
        for (why, revision, status, revisions, kept) in table {
            let others = others(revision, status, revisions);
            let mut deletion = facts(revision, status);
            if why.starts_with("exempt") {
                deletion.requester = Requester::new("alice", &exempt);
            } else {
                deletion.break_glass = Some("INC-1");
            }
            let verdict = decide_delete(&deletion, &others, &config);
            assert!(verdict.allowed, "{why}: let go");
            assert_eq!(keeps_copy(&deletion, &others, &config), kept, "{why}");
        }
        // Without an override: whatever the rules refuse (and a mode lets through) keeps one;
        // teardown keeps none.
        assert!(keeps_copy(&facts(3, Some(Deployed)), &history(&[(2, Superseded)]), &config));
        let mut teardown = facts(3, Some(Deployed));
        teardown.namespace_terminating = true;
        assert!(!keeps_copy(&teardown, &history(&[(2, Superseded)]), &config));
        teardown.break_glass = Some("INC-1");
        assert!(!keeps_copy(&teardown, &history(&[(2, Superseded)]), &config), "teardown goes first");
        // Helm's own deletions that take the last revision that ran keep one: pruning while
        // nothing is deployed (the second step of a downgrade, then a deletion), the purge of a
        // deployed revision; pruning beside a deployed revision, and a purge of what was
        // superseded, keep none.
        let plain = PolicyConfig::default();
        assert!(keeps_copy(&facts(2, Some(Superseded)), &history(&[(1, Superseded), (3, Failed)]), &plain));
        assert!(keeps_copy(&facts(2, Some(Failed)), &history(&[(3, Failed)]), &plain));
        assert!(!keeps_copy(&facts(1, Some(Superseded)), &history(&[(2, Deployed), (3, Failed)]), &plain));
        assert!(keeps_copy(&facts(1, Some(Deployed)), &history(&[(2, Uninstalling)]), &plain));
        // The purge of an uninstall: the guard saw the marked latest deployed, so what is below
        // it keeps none; one that saw none of them deployed keeps the newest that ran below it.
        let purged = DeleteFacts { last_deployed: Some(false), ..facts(1, Some(Superseded)) };
        assert!(!keeps_copy(&purged, &history(&[(2, Uninstalling)]), &plain));
        assert!(keeps_copy(
            &facts(2, Some(Superseded)),
            &history(&[(1, Superseded), (3, Uninstalling)]),
            &plain
        ));
        assert!(!keeps_copy(
            &facts(1, Some(Superseded)),
            &history(&[(2, Superseded), (3, Uninstalling)]),
            &plain
        ));
        // The revision the guard last saw deployed, downgraded below a forged latest.
        let downgraded = DeleteFacts { last_deployed: Some(true), ..facts(2, Some(Failed)) };
        assert!(keeps_copy(&downgraded, &history(&[(1, Superseded), (3, PendingRollback)]), &plain));
        // An annotation that does not count (--break-glass-group) keeps nothing of Helm's pruning.
        let responders = PolicyConfig { break_glass_groups: vec!["sre".into()], ..PolicyConfig::default() };
        let mut pruned = facts(1, Some(Superseded));
        pruned.break_glass = Some("INC-1");
        pruned.requester = Requester::new("helm", &[]);
        assert!(!keeps_copy(&pruned, &history(&[(2, Deployed)]), &responders));
    }

    /// D10, generatively (seeded): Rancher Fleet's agent forgets a release by deleting every
    /// record in whatever order the API lists them (`deleteHistory`), as its own account or one
    /// it impersonates in its namespace. Every deletion goes through; the ones the rules refuse
    /// keep a copy, the ones they allow stay Helm's own (no copy). The same deletions by a person
    /// are refused somewhere, and so with the forgetters turned off.
    #[test]
    fn d10_fleet_forgets_a_release_in_any_order_and_a_person_cannot() {
        let statuses = [Deployed, Superseded, Failed, PendingUpgrade, Uninstalling, Uninstalled];
        let fleet_agent = ["system:serviceaccounts:cattle-fleet-system".to_owned()];
        let impersonated = ["system:serviceaccounts:cattle-fleet-local-system".to_owned()];
        let requesters = [
            Requester::new("system:serviceaccount:cattle-fleet-system:fleet-agent", &fleet_agent),
            Requester::new("system:serviceaccount:cattle-fleet-local-system:fleet-default", &impersonated),
        ];
        let person = Requester::new("alice", &[]);
        let config = PolicyConfig::default();
        let off = PolicyConfig { forgetter_groups: Vec::new(), ..PolicyConfig::default() };
        let mut refused_for_people = 0;
        for seed in 0..500_u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let latest = rng.u32(1..=10);
            // Fleet keeps 2 revisions (`MaxHelmHistory`), a person or another tool more.
            let first = rng.u32(1..=latest);
            let mut records: Vec<(u32, Status)> = (first..=latest).map(|r| (r, Superseded)).collect();
            if let Some(last) = records.last_mut() {
                last.1 = statuses[rng.usize(..statuses.len())];
            }
            rng.shuffle(&mut records);
            let requester = requesters[rng.usize(..requesters.len())];
            let (mut fleet_left, mut person_left) = (records.clone(), records.clone());
            let mut person_refused = false;
            for &(revision, status) in &records {
                let mut deletion = facts(revision, Some(status));
                deletion.requester = requester;
                fleet_left.retain(|&record| record != (revision, status));
                let rest = history(&fleet_left);
                let verdict = decide_delete(&deletion, &rest, &config);
                assert!(verdict.allowed, "seed {seed}: v{revision} {status} of {records:?}: {verdict:?}");
                let rules = decide_delete(&DeleteFacts { requester: person, ..deletion }, &rest, &config);
                let kept = keeps_copy(&deletion, &rest, &config);
                let last_good = takes_last_good(&deletion, &rest, rules.reason);
                assert_eq!(
                    kept,
                    !rules.allowed || last_good,
                    "seed {seed}: a copy exactly where the rules refuse, or take the last good revision"
                );
                if rules.allowed {
                    assert_eq!(verdict, rules, "seed {seed}: an approval of the rules stays theirs");
                } else {
                    assert_eq!(verdict.reason, Reason::ReleaseForget, "seed {seed}");
                    assert_eq!(
                        verdict.detail.as_deref(),
                        Some(format!("group:{}", requester.groups[0]).as_str())
                    );
                    let without = decide_delete(&deletion, &rest, &off);
                    assert!(!without.allowed, "seed {seed}: no forgetters, refused");
                }
                // A person deleting in the same order stops at the first refusal.
                if !person_refused {
                    person_left.retain(|&record| record != (revision, status));
                    let person_deletion = DeleteFacts { requester: person, ..deletion };
                    person_refused =
                        !decide_delete(&person_deletion, &history(&person_left), &config).allowed;
                }
            }
            refused_for_people += usize::from(person_refused);
        }
        // Every release with a latest Helm still serves is refused to people somewhere.
        assert!(refused_for_people > 300, "{refused_for_people} of 500 refused to a person");
    }

    #[test]
    fn a_denial_says_which_revision_what_breaks_and_what_to_do() {
        let verdict = decide(3, Some(Deployed), &[(2, Superseded), (3, Deployed)]);
        let message = verdict.message.unwrap();
        for needle in [
            "revision 3",
            "demo/web",
            "revision 2 would become the latest and it is superseded",
            "cannot re-use a name that is still in use` (Helm 4: `cannot reuse a name that is still in use`)",
            "helm uninstall web -n demo",
            "helm rollback web 2 -n demo",
            "helm-guard.io/allow-delete",
        ] {
            assert!(message.contains(needle), "{needle:?} missing from {message}");
        }
    }

    #[test]
    fn the_only_deployed_revision_points_to_a_rollback_to_itself() {
        let message = decide(3, Some(Deployed), &[(3, Deployed), (4, Failed)]).message.unwrap();
        assert!(message.contains("`helm rollback web 3 -n demo` first"), "{message}");
    }

    #[test]
    fn the_last_revision_of_a_release_names_what_is_lost() {
        let message = decide(1, Some(Superseded), &[(1, Superseded)]).message.unwrap();
        assert!(message.contains("no revision would be left"), "{message}");
    }

    #[test]
    fn stuck_recovery_warns_what_becomes_latest() {
        let warning = decide(2, Some(PendingUpgrade), &[(1, Deployed), (2, PendingUpgrade)]).message.unwrap();
        assert!(warning.contains("revision 1 would become the latest and it is deployed"), "{warning}");
    }

    #[test]
    fn a_record_the_index_has_not_seen_yet_still_counts() {
        // The index lags the request: the record being deleted is added to the history.
        let verdict = decide(3, Some(Deployed), &[(2, Superseded)]);
        assert_eq!(verdict.reason, Reason::LatestDeployedRevision);
    }
}
