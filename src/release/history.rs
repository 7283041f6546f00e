//! The history classifier: one release's stored revisions in, its state (POLICY.md "Release
//! states") out. Shared by `scan`, the metrics and the pod mutation.

use std::collections::BTreeSet;

use serde::Serialize;

use super::status::Status;

/// What is known of a revision's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadStatus {
    /// The payload decoded; this is the status Helm reads.
    Decoded(Status),
    /// The payload does not decode: Helm silently skips the record.
    Undecodable,
    /// The payload is not at hand (metadata-only view): the `status` label stands in.
    NotLoaded,
}

/// What the classifier and the policy need of one stored revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevisionFacts {
    /// The revision (the payload's `version`, else the `version` label).
    pub revision: u32,
    /// What reading the payload found.
    pub payload: PayloadStatus,
    /// The `status` label, when it names a Helm status.
    pub label: Option<Status>,
    /// When Helm stored this revision (Unix seconds): the object's `creationTimestamp`, else the
    /// payload's `last_deployed`. For a pending revision that is when its operation began (Helm
    /// creates the record first). Not the `modifiedAt`/`createdAt` labels: Helm 3.17 and 4.1
    /// copy the previous revision's labels onto the next, so they can be the install's time.
    pub stored_at: Option<i64>,
    /// Helm failed this revision on a server-side-apply field conflict (its payload's
    /// description says so, as Helm 4 writes it: another field manager owns a field the chart
    /// sets). An upgrade with `--force-conflicts` takes the fields back; a plain retry fails
    /// the same way.
    pub field_conflict: bool,
    /// The payload's namespace is not the record's (Flux's `storageNamespace` keeps a release's
    /// records apart from its namespace); false while the payload is unread.
    pub namespace_apart: bool,
}

impl RevisionFacts {
    /// The status of POLICY.md: the payload's where it is at hand and decodes, else the label.
    /// `None` for a record Helm ignores (undecodable) or one with neither.
    pub(crate) fn status(&self) -> Option<Status> {
        match self.payload {
            PayloadStatus::Decoded(status) => Some(status),
            PayloadStatus::Undecodable => None,
            PayloadStatus::NotLoaded => self.label,
        }
    }

    fn label_mismatch(&self) -> bool {
        matches!(self.payload, PayloadStatus::Decoded(status) if self.label != Some(status))
    }
}

/// The revisions Helm sees, in ascending order, with their status. Two records can hold one
/// revision (Helm lists both); both are kept, and where they differ the one `deployed` is taken
/// as that revision's status (Helm's `Deployed()` finds it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    revisions: Vec<(u32, Status)>,
    /// Revisions known only by their labels (payload not read): counted by their `status` label,
    /// which a verdict that must be sure cannot trust.
    unread: Vec<u32>,
}

/// Among records of one revision, the one that counts: `deployed` last, so it wins.
fn rank(status: Status) -> u8 {
    u8::from(status == Status::Deployed)
}

impl History {
    /// The history of these revisions, in any order.
    pub fn new(facts: &[RevisionFacts]) -> History {
        let mut revisions: Vec<(u32, Status)> =
            facts.iter().filter_map(|f| Some((f.revision, f.status()?))).collect();
        revisions.sort_unstable_by_key(|(revision, status)| (*revision, rank(*status)));
        let unread =
            facts.iter().filter(|f| f.payload == PayloadStatus::NotLoaded).map(|f| f.revision).collect();
        History { revisions, unread }
    }

    /// The (revision, status) of each record, ascending.
    pub fn revisions(&self) -> &[(u32, Status)] {
        &self.revisions
    }

    /// Revisions whose payload was not read (their label stands in).
    pub(crate) fn unread(&self) -> &[u32] {
        &self.unread
    }

    /// The latest revision Helm sees and its status.
    pub(crate) fn latest(&self) -> Option<(u32, Status)> {
        self.revisions.last().copied()
    }

    /// Revisions with a `deployed` record, ascending, each once.
    pub(crate) fn deployed(&self) -> impl Iterator<Item = u32> + '_ {
        let mut last = None;
        self.revisions.iter().filter(|(_, s)| *s == Status::Deployed).map(|(r, _)| *r).filter(move |r| {
            let new = last != Some(*r);
            last = Some(*r);
            new
        })
    }

    /// The statuses of the records above `revision`, ascending.
    pub(crate) fn above(&self, revision: u32) -> impl Iterator<Item = Status> + '_ {
        self.revisions.iter().filter(move |(r, _)| *r > revision).map(|(_, s)| *s)
    }

    /// A history of records whose payloads were read, each (revision, status): what the
    /// policy's table tests write.
    #[cfg(test)]
    pub(crate) fn of(records: &[(u32, Status)]) -> History {
        let facts: Vec<RevisionFacts> = records
            .iter()
            .map(|&(revision, status)| RevisionFacts {
                revision,
                payload: PayloadStatus::Decoded(status),
                label: Some(status),
                stored_at: None,
                field_conflict: false,
                namespace_apart: false,
            })
            .collect();
        History::new(&facts)
    }

    /// This history with one more record.
    pub(crate) fn with(&self, revision: u32, status: Status) -> History {
        let mut revisions = self.revisions.clone();
        let at = revisions.partition_point(|(r, s)| (*r, rank(*s)) < (revision, rank(status)));
        revisions.insert(at, (revision, status));
        History { revisions, unread: self.unread.clone() }
    }
}

/// The state of a release, by its latest revision.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ReleaseState {
    /// No revision at all: `helm install` starts afresh.
    Absent,
    /// The latest revision is `deployed`.
    Healthy,
    /// The latest revision is `failed`.
    Failed,
    /// The latest revision is `pending-install`.
    PendingInstall,
    /// The latest revision is `pending-upgrade`.
    PendingUpgrade,
    /// The latest revision is `pending-rollback`.
    PendingRollback,
    /// The latest revision is `uninstalling`.
    Uninstalling,
    /// The latest revision is `uninstalled` (kept with `--keep-history`).
    Uninstalled,
    /// The latest revision is `superseded` and none is `deployed`: the crash loop of PROBLEM.md.
    OrphanedSuperseded,
    /// The latest is `unknown`, or `superseded` while another revision is still `deployed`.
    Unknown,
}

impl ReleaseState {
    /// The state as `scan`, metrics and annotations spell it (`orphaned-superseded`).
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }

    /// Healthy, absent or uninstalled: nothing for an operator to do.
    pub(crate) fn is_ok(self) -> bool {
        matches!(self, ReleaseState::Absent | ReleaseState::Healthy | ReleaseState::Uninstalled)
    }
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
/// Something about a release's records that Helm tolerates but an operator should know.
pub enum Anomaly {
    /// More than one revision is `deployed`.
    MultipleDeployed,
    /// A record's `status` label says other than its payload.
    StatusLabelMismatch,
    /// A record Helm cannot read (it skips it, or fails on it).
    UndecodableRecord,
    /// More than [`CHURN_PER_HOUR`] revisions created in the last hour: a writer upgrading in a
    /// loop (K3s's helm-controller has taken releases past 100,000 revisions), which fills etcd.
    Churn,
}

/// Revisions created in an hour past which a release is named `churn`: far more than any
/// person or pipeline upgrades one release, far fewer than a controller in a loop (a revision a
/// few seconds) makes in an hour.
pub(crate) const CHURN_PER_HOUR: u32 = 30;

/// How many revisions of a release were created within `window_secs` before `now`, counted
/// from its records' own revisions and creation times: Helm numbers revisions in the order it
/// creates them, so with a record older than the window kept (revision `r`), every revision
/// above it was created within it; without one, the records within it span at least their own
/// revisions (Helm's pruning may have taken more). `next`: the revision about to be created, if
/// any (it is not counted).
pub fn revisions_within(facts: &[RevisionFacts], now: i64, window_secs: i64, next: Option<u32>) -> u32 {
    let since = now.saturating_sub(window_secs);
    let top = next.map(|n| n.saturating_sub(1)).or_else(|| facts.iter().map(|f| f.revision).max());
    let Some(top) = top else { return 0 };
    let before = facts.iter().filter(|f| f.stored_at.is_some_and(|at| at < since)).map(|f| f.revision).max();
    let within = facts.iter().filter(|f| f.stored_at.is_some_and(|at| at >= since)).map(|f| f.revision).min();
    match (before, within) {
        (Some(old), _) => top.saturating_sub(old),
        (None, Some(first)) => top.saturating_sub(first).saturating_add(1),
        (None, None) => 0,
    }
}

impl Anomaly {
    /// The anomaly as `scan` and metrics spell it (`multiple-deployed`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How long a `pending-*` latest revision may stay unchanged before it counts as stuck.
pub(crate) const DEFAULT_STUCK_AFTER_SECS: i64 = 15 * 60;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
/// What a release's history amounts to, as Helm would act on it.
pub struct Classification {
    /// The state Helm acts on.
    pub state: ReleaseState,
    /// The latest revision Helm sees and its status.
    pub revision: Option<u32>,
    /// The status of `revision`.
    pub status: Option<Status>,
    /// Revisions whose status is `deployed`.
    pub deployed: Vec<u32>,
    /// A `pending-*` latest revision no one will finish: its writer's pod is gone, or, its writer
    /// not known to run in a pod, unchanged for longer than the threshold.
    pub stuck: bool,
    /// Why `stuck`.
    pub stuck_because: Option<super::writer::StuckBecause>,
    /// Seconds since the latest revision was last written, when known.
    pub age_secs: Option<i64>,
    /// The latest revision failed on a server-side-apply field conflict
    /// ([`RevisionFacts::field_conflict`]).
    pub field_conflict: bool,
    /// What is odd about the records, whatever the state.
    pub anomalies: BTreeSet<Anomaly>,
}

impl Classification {
    /// The stuck rule once the latest revision's writer is known to run or not
    /// ([`super::writer`]): a pending latest whose writer's pod is gone is stuck whatever its
    /// age, one whose pod runs is not whatever its age; otherwise the age rule stands.
    pub fn with_writer(mut self, liveness: super::writer::Liveness) -> Classification {
        use super::writer::{Liveness, StuckBecause};
        let pending = self.status.is_some_and(Status::is_pending);
        match liveness {
            Liveness::Gone if pending => {
                self.stuck = true;
                self.stuck_because = Some(StuckBecause::WriterGone);
            }
            Liveness::Alive => {
                self.stuck = false;
                self.stuck_because = None;
            }
            _ => {}
        }
        self
    }

    /// Broken means an operator should look: any state but healthy/absent/uninstalled, or an anomaly.
    pub(crate) fn is_broken(&self) -> bool {
        !self.state.is_ok() || !self.anomalies.is_empty()
    }

    /// [`Classification::with_writer`] for a pending latest revision, `liveness` asked (by that
    /// revision) only then: no lookup for a release with nothing under way.
    pub fn judged_by(self, liveness: impl FnOnce(u32) -> super::writer::Liveness) -> Classification {
        match self.revision.filter(|_| self.status.is_some_and(Status::is_pending)) {
            Some(revision) => {
                let liveness = liveness(revision);
                self.with_writer(liveness)
            }
            None => self,
        }
    }

    /// One short sentence on what to do; every command in it can be pasted as it is.
    pub(crate) fn hint(&self, release: &str, namespace: &str) -> String {
        let earlier_deployed = self.deployed.iter().copied().filter(|r| Some(*r) != self.revision).max();
        let mut hint = match self.state {
            ReleaseState::Absent => "no revision Helm can read".to_owned(),
            ReleaseState::Healthy => "ok".to_owned(),
            ReleaseState::Uninstalled => "uninstalled with --keep-history".to_owned(),
            ReleaseState::Uninstalling => "an uninstall is under way or was interrupted".to_owned(),
            ReleaseState::Failed => match earlier_deployed {
                Some(rev) => format!(
                    "last upgrade failed; revision {rev} is still deployed: fix and upgrade, or `helm rollback {release} {rev} -n {namespace}`"
                ),
                None => format!(
                    "failed and nothing deployed: `helm upgrade` or `helm uninstall {release} -n {namespace}`"
                ),
            },
            ReleaseState::PendingInstall | ReleaseState::PendingUpgrade | ReleaseState::PendingRollback => {
                if self.stuck {
                    let gone = self.stuck_because == Some(super::writer::StuckBecause::WriterGone);
                    let stuck = if gone { "stuck (its writer's pod is gone)" } else { "stuck" };
                    match earlier_deployed {
                        Some(rev) => {
                            format!(
                                "{stuck}: `helm rollback {release} {rev} -n {namespace}`, or delete the pending revision"
                            )
                        }
                        None => format!(
                            "{stuck}: `helm uninstall {release} -n {namespace}`, or delete the pending revision"
                        ),
                    }
                } else {
                    "an operation is in progress".to_owned()
                }
            }
            ReleaseState::OrphanedSuperseded => format!(
                "latest deployed revision was deleted: `helm upgrade` (not install) or `helm rollback {release} {} -n {namespace}`",
                self.revision.unwrap_or_default()
            ),
            ReleaseState::Unknown => {
                format!("latest status is unexpected: check `helm history {release} -n {namespace}`")
            }
        };
        if self.anomalies.contains(&Anomaly::UndecodableRecord) {
            hint.push_str("; a record does not decode (Helm skips it)");
        }
        if self.anomalies.contains(&Anomaly::Churn) {
            hint.push_str(&format!(
                "; more than {CHURN_PER_HOUR} revisions in the last hour: a writer upgrading in a loop (`helm history {release} -n {namespace}`; cap it with the namespace label helm-guard.io/max-revisions-per-hour)"
            ));
        }
        hint
    }
}

/// Classifies one release's history. `now` is Unix seconds.
pub fn classify(facts: &[RevisionFacts], now: i64, stuck_after_secs: i64) -> Classification {
    let history = History::new(facts);
    let deployed: Vec<u32> = history.deployed().collect();
    let mut anomalies = BTreeSet::new();
    if deployed.len() > 1 {
        anomalies.insert(Anomaly::MultipleDeployed);
    }
    if facts.iter().any(RevisionFacts::label_mismatch) {
        anomalies.insert(Anomaly::StatusLabelMismatch);
    }
    if facts.iter().any(|f| f.payload == PayloadStatus::Undecodable) {
        anomalies.insert(Anomaly::UndecodableRecord);
    }
    if revisions_within(facts, now, 3600, None) > CHURN_PER_HOUR {
        anomalies.insert(Anomaly::Churn);
    }
    let latest = history.latest();
    let state = match latest.map(|(_, status)| status) {
        None => ReleaseState::Absent,
        Some(Status::Deployed) => ReleaseState::Healthy,
        Some(Status::Failed) => ReleaseState::Failed,
        Some(Status::PendingInstall) => ReleaseState::PendingInstall,
        Some(Status::PendingUpgrade) => ReleaseState::PendingUpgrade,
        Some(Status::PendingRollback) => ReleaseState::PendingRollback,
        Some(Status::Uninstalling) => ReleaseState::Uninstalling,
        Some(Status::Uninstalled) => ReleaseState::Uninstalled,
        Some(Status::Superseded) if deployed.is_empty() => ReleaseState::OrphanedSuperseded,
        Some(Status::Superseded | Status::Unknown) => ReleaseState::Unknown,
    };
    let stored_at = latest
        .and_then(|(revision, _)| facts.iter().find(|f| f.revision == revision).and_then(|f| f.stored_at));
    let age_secs = stored_at.map(|at| now.saturating_sub(at).max(0));
    let field_conflict = latest.is_some_and(|(revision, status)| {
        status == Status::Failed && facts.iter().any(|f| f.revision == revision && f.field_conflict)
    });
    let stuck =
        latest.is_some_and(|(_, s)| s.is_pending()) && age_secs.is_some_and(|age| age > stuck_after_secs);
    Classification {
        state,
        revision: latest.map(|(r, _)| r),
        status: latest.map(|(_, s)| s),
        deployed,
        stuck,
        stuck_because: stuck.then_some(super::writer::StuckBecause::Age),
        field_conflict,
        age_secs,
        anomalies,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Revisions created within the window, from the records alone: exact when a record older
    /// than the window is kept, at least what the records within it span when pruning took the
    /// rest; 41 revisions in a minute are `churn`, a person's day of upgrades is not.
    #[test]
    fn revisions_created_within_an_hour_are_counted_from_the_records() {
        let at = |revision: u32, stored_at: i64| RevisionFacts {
            revision,
            payload: PayloadStatus::Decoded(Status::Superseded),
            label: Some(Status::Superseded),
            stored_at: Some(stored_at),
            field_conflict: false,
            namespace_apart: false,
        };
        let now = 100_000;
        // v10 kept from two hours ago (the last deployed one Helm's pruning keeps), v48..v50
        // within the hour: v11..v50 were all created in it.
        let pruned = [at(10, now - 7200), at(48, now - 30), at(49, now - 20), at(50, now - 10)];
        assert_eq!(revisions_within(&pruned, now, 3600, None), 40);
        assert_eq!(revisions_within(&pruned, now, 3600, Some(51)), 40, "the next is not counted");
        // Nothing older kept: at least v48..v50.
        assert_eq!(revisions_within(&pruned[1..], now, 3600, None), 3);
        let loop_: Vec<RevisionFacts> = (1..=41).map(|r| at(r, now - 60 + i64::from(r))).collect();
        assert_eq!(revisions_within(&loop_, now, 3600, None), 41);
        assert!(classify(&loop_, now, 900).anomalies.contains(&Anomaly::Churn));
        let day: Vec<RevisionFacts> =
            (1..=12).map(|r| at(r, now - 3600 * 12 + 3600 * i64::from(r))).collect();
        assert!(!classify(&day, now, 900).anomalies.contains(&Anomaly::Churn));
        assert_eq!(revisions_within(&[], now, 3600, Some(1)), 0);
    }

    fn rev(revision: u32, status: Status) -> RevisionFacts {
        RevisionFacts {
            revision,
            payload: PayloadStatus::Decoded(status),
            label: Some(status),
            stored_at: Some(1_000),
            field_conflict: false,
            namespace_apart: false,
        }
    }

    fn state_of(facts: &[RevisionFacts]) -> ReleaseState {
        classify(facts, 1_000, DEFAULT_STUCK_AFTER_SECS).state
    }

    #[test]
    fn the_state_follows_the_latest_revision() {
        use Status::*;
        let table = [
            (vec![], ReleaseState::Absent),
            (vec![rev(1, Superseded), rev(2, Deployed)], ReleaseState::Healthy),
            (vec![rev(3, Deployed), rev(4, Failed)], ReleaseState::Failed),
            (vec![rev(1, PendingInstall)], ReleaseState::PendingInstall),
            (vec![rev(1, Deployed), rev(2, PendingUpgrade)], ReleaseState::PendingUpgrade),
            (vec![rev(2, Deployed), rev(3, PendingRollback)], ReleaseState::PendingRollback),
            (vec![rev(1, Superseded), rev(2, Uninstalling)], ReleaseState::Uninstalling),
            (vec![rev(1, Uninstalled)], ReleaseState::Uninstalled),
            (vec![rev(1, Superseded), rev(2, Superseded)], ReleaseState::OrphanedSuperseded),
            (vec![rev(1, Deployed), rev(2, Superseded)], ReleaseState::Unknown),
            (vec![rev(1, Unknown)], ReleaseState::Unknown),
        ];
        for (facts, expected) in table {
            assert_eq!(state_of(&facts), expected, "{facts:?}");
        }
    }

    #[test]
    fn revisions_are_ordered_numerically_not_by_input_order() {
        let facts = [rev(10, Status::Deployed), rev(9, Status::Superseded)];
        let c = classify(&facts, 0, DEFAULT_STUCK_AFTER_SECS);
        assert_eq!((c.state, c.revision), (ReleaseState::Healthy, Some(10)));
    }

    #[test]
    fn undecodable_records_are_skipped_as_helm_skips_them() {
        let mut broken = rev(3, Status::Deployed);
        broken.payload = PayloadStatus::Undecodable;
        let c = classify(&[rev(2, Status::Superseded), broken], 0, DEFAULT_STUCK_AFTER_SECS);
        assert_eq!(c.state, ReleaseState::OrphanedSuperseded);
        assert_eq!(c.revision, Some(2));
        assert!(c.anomalies.contains(&Anomaly::UndecodableRecord));
    }

    #[test]
    fn a_label_that_disagrees_with_the_payload_is_an_anomaly_and_the_payload_wins() {
        let mut edited = rev(2, Status::Superseded);
        edited.label = Some(Status::Deployed);
        let c = classify(&[rev(1, Status::Superseded), edited], 0, DEFAULT_STUCK_AFTER_SECS);
        assert_eq!(c.state, ReleaseState::OrphanedSuperseded);
        assert!(c.anomalies.contains(&Anomaly::StatusLabelMismatch));
    }

    #[test]
    fn without_a_payload_the_label_stands_in() {
        let facts = RevisionFacts {
            revision: 1,
            payload: PayloadStatus::NotLoaded,
            label: Some(Status::Deployed),
            stored_at: None,
            field_conflict: false,
            namespace_apart: false,
        };
        let c = classify(&[facts], 0, DEFAULT_STUCK_AFTER_SECS);
        assert_eq!(c.state, ReleaseState::Healthy);
        assert!(c.anomalies.is_empty());
    }

    #[test]
    fn a_pending_revision_is_stuck_when_its_writer_is_gone_and_never_while_it_runs() {
        use crate::release::writer::{Liveness, StuckBecause};
        let pending = [rev(1, Status::Deployed), rev(2, Status::PendingUpgrade)];
        // Young, its writer's pod gone: stuck at once.
        let young = classify(&pending, 1_010, 900);
        assert!(!young.stuck);
        let gone = young.clone().with_writer(Liveness::Gone);
        assert_eq!((gone.stuck, gone.stuck_because), (true, Some(StuckBecause::WriterGone)));
        assert!(
            gone.hint("web", "demo")
                .starts_with("stuck (its writer's pod is gone): `helm rollback web 1 -n demo`")
        );
        // Old, its writer's pod still there (a long --wait): not stuck.
        let old = classify(&pending, 1_000_000, 900);
        assert_eq!(old.stuck_because, Some(StuckBecause::Age));
        let alive = old.clone().with_writer(Liveness::Alive);
        assert_eq!((alive.stuck, alive.stuck_because), (false, None));
        // No pod, or not known: the age rule.
        assert_eq!(old.clone().with_writer(Liveness::NoPod), old);
        assert_eq!(young.clone().with_writer(Liveness::Unknown), young);
        // Nothing pending: nothing stuck, whatever the writer.
        let healthy = classify(&pending[..1], 1_000_000, 900).with_writer(Liveness::Gone);
        assert!(!healthy.stuck);
    }

    #[test]
    fn pending_is_stuck_only_past_the_threshold() {
        let pending = [rev(1, Status::PendingInstall)];
        assert!(!classify(&pending, 1_000 + 900, 900).stuck);
        assert!(classify(&pending, 1_000 + 901, 900).stuck);
        let healthy = [rev(1, Status::Deployed)];
        assert!(!classify(&healthy, 1_000_000, 900).stuck);
    }

    #[test]
    fn every_command_in_a_hint_names_the_namespace() {
        use Status::*;
        let stuck = |facts: &[RevisionFacts]| classify(facts, 1_000_000, 900);
        for facts in [
            vec![rev(3, Deployed), rev(4, Failed)],
            vec![rev(1, Failed)],
            vec![rev(1, Deployed), rev(2, PendingUpgrade)],
            vec![rev(1, PendingInstall)],
            vec![rev(1, Superseded), rev(2, Superseded)],
            vec![rev(1, Unknown)],
        ] {
            let hint = stuck(&facts).hint("web", "demo");
            let commands: Vec<&str> =
                hint.split('`').skip(1).step_by(2).filter(|c| c.contains("web")).collect();
            assert!(!commands.is_empty(), "{hint}");
            for command in commands {
                assert!(command.ends_with("-n demo"), "{command} in {hint}");
            }
        }
    }

    #[test]
    fn two_deployed_revisions_are_an_anomaly() {
        let c = classify(&[rev(1, Status::Deployed), rev(2, Status::Deployed)], 0, 900);
        assert_eq!(c.deployed, vec![1, 2]);
        assert!(c.anomalies.contains(&Anomaly::MultipleDeployed));
        assert!(c.is_broken());
    }

    /// Two records of one revision (a name reused, a copy restored beside Helm's): the deployed
    /// one counts, in whichever order they are listed.
    #[test]
    fn a_revision_held_twice_reads_as_deployed_whichever_record_comes_first() {
        use Status::*;
        for facts in [
            [rev(1, Superseded), rev(2, Deployed), rev(2, Failed)],
            [rev(1, Superseded), rev(2, Failed), rev(2, Deployed)],
        ] {
            let history = History::new(&facts);
            // As `helm history` lists them: each record, ascending, the one that counts last.
            assert_eq!(history.revisions(), [(1, Superseded), (2, Failed), (2, Deployed)]);
            assert_eq!(history.latest(), Some((2, Deployed)), "{facts:?}");
            assert_eq!(state_of(&facts), ReleaseState::Healthy, "{facts:?}");
        }
    }

    /// `scan --broken` and the PolicyReports: an operator looks at any state but healthy,
    /// absent or uninstalled, and at any anomaly.
    #[test]
    fn broken_is_every_state_an_operator_must_look_at_and_every_anomaly() {
        use Status::*;
        // (records, the state is fine, broken)
        let table = [
            (vec![rev(1, Superseded), rev(2, Deployed)], true, false),
            (vec![], true, false),
            (vec![rev(1, Uninstalled)], true, false),
            (vec![rev(3, Deployed), rev(4, Failed)], false, true),
            (vec![rev(1, Superseded), rev(2, Superseded)], false, true),
            (vec![rev(1, Deployed), rev(2, PendingUpgrade)], false, true),
            (vec![rev(1, Superseded), rev(2, Uninstalling)], false, true),
            // Healthy, but two revisions deployed.
            (vec![rev(1, Deployed), rev(2, Deployed)], true, true),
        ];
        for (facts, ok, broken) in table {
            let c = classify(&facts, 1_000, DEFAULT_STUCK_AFTER_SECS);
            assert_eq!(
                (c.state.is_ok(), c.is_broken()),
                (ok, broken),
                "{facts:?}: {:?} {:?}",
                c.state,
                c.anomalies
            );
        }
    }

    /// The documented default of `--stuck-after`: 15 minutes.
    #[test]
    fn by_default_a_pending_revision_is_stuck_after_fifteen_minutes() {
        let pending = [rev(1, Status::PendingUpgrade)];
        assert!(!classify(&pending, 1_000 + 14 * 60, DEFAULT_STUCK_AFTER_SECS).stuck);
        assert!(classify(&pending, 1_000 + 16 * 60, DEFAULT_STUCK_AFTER_SECS).stuck);
    }

    #[test]
    fn a_failed_upgrade_hint_names_the_revision_still_deployed() {
        let c = classify(&[rev(3, Status::Deployed), rev(4, Status::Failed)], 1_000, 900);
        let hint = c.hint("web", "demo");
        assert!(
            hint.contains("revision 3 is still deployed") && hint.contains("`helm rollback web 3 -n demo`"),
            "{hint}"
        );
        let alone = classify(&[rev(1, Status::Failed)], 1_000, 900).hint("web", "demo");
        assert!(alone.contains("nothing deployed"), "{alone}");
    }

    /// A record about to be created, inserted where Helm would list it.
    #[test]
    fn a_history_with_one_more_record_keeps_the_order_helm_lists() {
        use Status::*;
        let history = History::new(&[rev(1, Superseded), rev(3, Deployed)]);
        assert_eq!(history.with(2, Failed).revisions(), [(1, Superseded), (2, Failed), (3, Deployed)]);
        assert_eq!(history.with(4, PendingUpgrade).latest(), Some((4, PendingUpgrade)));
        assert_eq!(
            history.with(3, Failed).latest(),
            Some((3, Deployed)),
            "the deployed record of a revision counts"
        );
    }
}
