//! A rule's verdict and the reason codes of POLICY.md.

/// The reason codes of POLICY.md, plus the codes for requests no rule is about.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::VariantArray,
    strum::EnumMessage,
)]
#[strum(serialize_all = "kebab-case")]
pub enum Reason {
    /// D1: the namespace is being torn down.
    NamespaceTeardown,
    /// D2/U1: the record carries `helm-guard.io/allow-delete` with a reason.
    BreakGlass,
    /// D2/U1: the requester is an exempt user or group.
    Exempt,
    /// D3: the record is one Helm cannot read (and ignores).
    UndecodableRecord,
    /// D4: the only `deployed` revision below a latest that is not being uninstalled.
    LastDeployedRevision,
    /// D5: an older revision, as Helm's `--history-max` prunes.
    HistoryPruning,
    /// D4a: an older record of a release whose latest is `uninstalling`/`uninstalled`: the
    /// uninstall's purge (Helm deletes the latest last).
    UninstallPurge,
    /// D6: the latest revision of a release being uninstalled.
    Uninstall,
    /// D7: a stuck `pending-*` or `failed` latest above a `deployed` one (or alone).
    StuckRevisionRecovery,
    /// D8: the latest revision, `deployed`.
    LatestDeployedRevision,
    /// D9: any other deletion of the latest: the release would be left orphaned.
    WouldOrphanRelease,
    /// D10: a deletion D3–D9 refuse, by a controller that forgets releases (Rancher Fleet's
    /// agent): let through, a copy kept.
    ReleaseForget,
    /// U2: the `owner`, `name` or `version` label, or the Secret `type`, changed.
    IdentityLabelChange,
    /// U2b: a protected label (`helmcharts.helm.cattle.io/configHash`) added, changed or
    /// removed, or `modifiedAt` removed or not a Unix time.
    ProtectedLabelChange,
    /// U7: the payload status and the `status` label disagree after the update.
    StatusLabelMismatch,
    /// U4: a readable payload replaced by an unreadable one.
    PayloadCorruption,
    /// D3b, C4, U6b: a verdict that needs records the guard could not read within its deadline.
    UnreadHistory,
    /// An UPDATE that changes what Helm never changes in a written revision.
    PayloadContentChange,
    /// An UPDATE moving the payload status along a transition no Helm flow makes.
    StatusTransition,
    /// An UPDATE adding owner references or finalizers (Helm never sets them).
    ForeignMetadata,
    /// A DELETE review without the object being deleted (API servers send it since 1.15).
    NoOldObject,
    /// An approval of a DELETE that could not be agreed with the other replicas in time.
    CoordinationUnavailable,
    /// A DELETE that keeps a copy in the recycle bin first, refused because the copy could not
    /// be written within the decision deadline.
    RecycleBinUnavailable,
    /// U6b: a status change Helm makes only at another place in the history (a revision
    /// superseded with no operation above it, a revision other than the latest marked
    /// `uninstalling`).
    HistoryTransition,
    /// D6b: the `uninstalling` latest deleted while older records remain and none is deployed
    /// (Helm's purge deletes it last).
    UninstallOrder,
    /// C3, C5, C6: a CREATE of a record Helm would not create (not its object name and labels, a
    /// revision not above the rest, or a status Helm never stores a new revision in over that
    /// latest).
    ImplausibleRecord,
    /// C8: a CREATE past the namespace's `helm-guard.io/max-revisions-per-hour`.
    RevisionRate,
    /// C1: a CREATE by `helm-guard restore` (its `helm-guard.io/restored-from` annotation,
    /// counting as the break-glass annotation does).
    Restore,
    /// D3a, U4a, C2a: a record whose payload decodes past `--max-decoded-bytes`: Helm reads it,
    /// the guard cannot, so no write of it can be shown harmless.
    PayloadTooLarge,
    /// O1: a write of a release locked to its owner (`helm-guard.io/owner-lock`) by another
    /// identity.
    OwnerLock,
    /// U8: Helm's own update.
    HelmUpdate,
    /// C2, C7: a CREATE Helm makes (or of a record Helm cannot read, with a warning).
    HelmCreate,
    /// The object is not a Helm release record.
    NotAReleaseRecord,
    /// The guard's reachability probe (a dry-run ConfigMap labelled `helm-guard.io/probe`):
    /// refused, since only the API server can carry that refusal back to the guard that sent it.
    Probe,
    /// N1: a Namespace change that switches nothing off.
    NotAnOptOut,
    /// N2/N3: a namespace opted out by an exempt namespace's requester or an opt-out holder.
    OptOut,
    /// N4: an opt-out by a requester who may not.
    OptOutRefused,
    /// A pod that is not a helm-install pod.
    NotAHelmInstallPod,
    /// A helm-install pod admitted unchanged because the release state cannot be seen.
    ReleaseStateUnavailable,
    /// A helm-install pod annotated (and perhaps rewritten).
    ReleaseStateAnnotated,
    /// A helm-install pod that already carries helm-guard's annotations.
    AlreadyAnnotated,
}

impl Reason {
    /// The reason as the audit annotations, metrics and POLICY.md spell it.
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }
}

impl Reason {
    /// An approval of one of Helm's own deletions (D1 teardown, D4a, D5, D6, D7): the only
    /// approvals that keep no copy in the recycle bin.
    pub(crate) fn is_helm_deletion(self) -> bool {
        matches!(
            self,
            Reason::NamespaceTeardown
                | Reason::UninstallPurge
                | Reason::HistoryPruning
                | Reason::Uninstall
                | Reason::StuckRevisionRecovery
        )
    }

    /// A verdict read off the rest of the release's history (D4–D9; U6b; a CREATE's C4–C8): one
    /// record the guard has not seen yet, or one gone that it has not seen go, can turn it (a
    /// live guard confirms a DELETE's, and the refusals of the others). The teardown, break-glass, exempt and undecodable verdicts hold
    /// whatever else is stored.
    pub(crate) fn rests_on_history(self) -> bool {
        matches!(
            self,
            Reason::UninstallPurge
                | Reason::LastDeployedRevision
                | Reason::HistoryPruning
                | Reason::StuckRevisionRecovery
                | Reason::LatestDeployedRevision
                | Reason::WouldOrphanRelease
                | Reason::Uninstall
                | Reason::UninstallOrder
                | Reason::HistoryTransition
                | Reason::ImplausibleRecord
                | Reason::RevisionRate
        )
    }
}

/// What a rule says, before the mode is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the rule lets the request through.
    pub allowed: bool,
    /// The rule that decided.
    pub reason: Reason,
    /// For a denial: what, why, and what to do instead. For an allowance: a warning, if any.
    pub message: Option<String>,
    /// Free text that goes to the audit annotations (the break-glass reason, the exempt identity).
    pub detail: Option<String>,
}

impl Verdict {
    /// An allowance.
    pub(crate) fn allow(reason: Reason) -> Verdict {
        Verdict { allowed: true, reason, message: None, detail: None }
    }

    /// An allowance with a warning for the client.
    pub(crate) fn warn(reason: Reason, warning: impl Into<String>) -> Verdict {
        Verdict { allowed: true, reason, message: Some(warning.into()), detail: None }
    }

    /// A denial with its message: what, why, and what to do instead.
    pub(crate) fn deny(reason: Reason, message: impl Into<String>) -> Verdict {
        Verdict { allowed: false, reason, message: Some(message.into()), detail: None }
    }

    #[must_use]
    /// The same verdict with free text for the audit annotations.
    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Verdict {
        self.detail = Some(detail.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    /// Which approvals and refusals a live guard confirms against what is stored before it
    /// answers (the doc of `rests_on_history`, rule by rule).
    #[test]
    fn the_verdicts_read_off_the_rest_of_the_history_are_the_ones_confirmed() {
        let resting = [
            Reason::UninstallPurge,
            Reason::LastDeployedRevision,
            Reason::HistoryPruning,
            Reason::StuckRevisionRecovery,
            Reason::LatestDeployedRevision,
            Reason::WouldOrphanRelease,
        ];
        for reason in resting {
            assert!(reason.rests_on_history(), "{reason}");
        }
        for reason in
            [Reason::NamespaceTeardown, Reason::BreakGlass, Reason::Exempt, Reason::UndecodableRecord]
        {
            assert!(!reason.rests_on_history(), "{reason} holds whatever else is stored");
        }
    }
}
