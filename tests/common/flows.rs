//! Random Helm operations, seeded and reproducible, shared by the in-process property test
//! (src/tests/helm_flows.rs, Helm's storage calls modelled from its source) and the end-to-end test
//! that runs the real Helm 3 and Helm 4 binaries (tests/e2e_flows.rs).

use helm_guard::release::Status;

/// One step a user (or a K3s helm-install job) takes with Helm, or a hand edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelmOp {
    /// `helm install` (`--replace` when `replace`); `fail`: the install fails (`--wait` on
    /// pods that never run).
    Install { release: usize, replace: bool, fail: bool },
    /// `helm upgrade` (`--install` when `install`), `--history-max` when set, `--atomic` (Helm
    /// 3) / `--rollback-on-failure` (Helm 4) when `atomic`.
    Upgrade { release: usize, install: bool, fail: bool, atomic: bool, history_max: Option<u32> },
    /// `helm rollback` to the `pick`-th stored revision (modulo how many there are).
    Rollback { release: usize, pick: usize, fail: bool },
    /// `helm uninstall` (`--keep-history` when `keep_history`).
    Uninstall { release: usize, keep_history: bool },
    /// `helm uninstall` and, at once, `helm install` (klipper-helm's `failurePolicy: reinstall`).
    Reinstall { release: usize },
    /// An upgrade whose Helm process is killed after it stored the pending revision.
    KilledUpgrade { release: usize },
    /// The recovery of a stuck pending latest: `helm set-status failed` (klipper-helm, Flux's
    /// unlock), or with `delete` the deletion of the pending record.
    Repair { release: usize, delete: bool },
    /// `kubectl delete` of the `pick`-th stored record of the release, by hand.
    HandDelete { release: usize, pick: usize },
    /// Rancher Fleet's agent forgets the release (`delete.go` `deleteHistory`): every record
    /// deleted, in the order the API lists them.
    FleetForget { release: usize },
    /// Fleet's drift correction of a deployed release (`rollback.go` `RemoveExternalChanges`):
    /// a rollback to the latest revision that fails applying its manifest (Helm supersedes the
    /// revision it started from and stores a failed "Rollback" revision), then
    /// `removeFailedRollback` deletes that revision and writes the one it started from back.
    FleetFailedRollback { release: usize },
    /// Flux's helm-controller unlocks a pending latest (`unlock.go`): marked failed.
    FluxUnlock { release: usize },
    /// helm-mapkubeapis (klipper-helm before every upgrade): the latest, whatever its status,
    /// superseded, then a new deployed revision with the mapped manifest.
    MapKubeApis { release: usize },
}

impl HelmOp {
    /// The release the step is about.
    pub fn release(&self) -> usize {
        match *self {
            HelmOp::Install { release, .. }
            | HelmOp::Upgrade { release, .. }
            | HelmOp::Rollback { release, .. }
            | HelmOp::Uninstall { release, .. }
            | HelmOp::Reinstall { release }
            | HelmOp::KilledUpgrade { release }
            | HelmOp::Repair { release, .. }
            | HelmOp::HandDelete { release, .. }
            | HelmOp::FleetForget { release }
            | HelmOp::FleetFailedRollback { release }
            | HelmOp::FluxUnlock { release }
            | HelmOp::MapKubeApis { release } => release,
        }
    }
}

/// A random step over `releases` releases; weighted towards the steps that write most.
pub fn random_op(rng: &mut fastrand::Rng, releases: usize) -> HelmOp {
    let release = rng.usize(..releases);
    let fail = rng.u8(..5) == 0;
    match rng.u8(..100) {
        0..=11 => HelmOp::Install { release, replace: rng.bool(), fail },
        12..=41 => HelmOp::Upgrade {
            release,
            install: rng.bool(),
            fail,
            atomic: fail && rng.bool(),
            history_max: [None, None, Some(2), Some(3), Some(10)][rng.usize(..5)],
        },
        42..=51 => HelmOp::Rollback { release, pick: rng.usize(..16), fail },
        52..=63 => HelmOp::Uninstall { release, keep_history: rng.bool() },
        64..=71 => HelmOp::Reinstall { release },
        72..=77 => HelmOp::KilledUpgrade { release },
        78..=83 => HelmOp::Repair { release, delete: rng.bool() },
        84..=91 => HelmOp::HandDelete { release, pick: rng.usize(..16) },
        92..=93 => HelmOp::FleetForget { release },
        94..=95 => HelmOp::FleetFailedRollback { release },
        96..=97 => HelmOp::FluxUnlock { release },
        _ => HelmOp::MapKubeApis { release },
    }
}

/// Who the other writers of Helm's storage write as: Fleet's agent, Flux's helm-controller,
/// klipper-helm's job (user, groups).
pub const FLEET_AGENT: (&str, &[&str]) = (
    "system:serviceaccount:cattle-fleet-system:fleet-agent",
    &["system:serviceaccounts", "system:serviceaccounts:cattle-fleet-system", "system:authenticated"],
);
pub const FLUX: (&str, &[&str]) = (
    "system:serviceaccount:flux-system:helm-controller",
    &["system:serviceaccounts", "system:serviceaccounts:flux-system", "system:authenticated"],
);
pub const KLIPPER: (&str, &[&str]) = (
    "system:serviceaccount:kube-system:helm-web",
    &["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
);

/// The seeds to run: `HELM_FLOWS_SEED` alone when set (to reproduce a failure), else `count`
/// seeds from `first`.
pub fn seeds(first: u64, count: u64) -> Vec<u64> {
    match std::env::var("HELM_FLOWS_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (first..first + count).collect(),
    }
}

/// POLICY.md's DELETE rules D4–D9, applied to what is really stored (`history`, the deleted
/// revision among it): the oracle a lagging index must agree with.
pub fn deletion_allowed(history: &[(u32, Status, String)], revision: u32) -> bool {
    let (_, latest_status, _) = history.last().unwrap();
    let status = history.iter().find(|(r, ..)| *r == revision).unwrap().1;
    let others: Vec<(u32, Status)> =
        history.iter().filter(|(r, ..)| *r != revision).map(|(r, s, _)| (*r, *s)).collect();
    if latest_status.is_uninstall() {
        // D4a: the purge of an uninstall; D6: its marked latest goes last
        // (or before a deployed revision, as `--history-max` pruning may)
        return others.iter().any(|(r, s)| *r >= revision || *s == Status::Deployed) || others.is_empty();
    }
    if others.iter().any(|(r, _)| *r > revision) {
        // D4, D5: not the latest; the only deployed revision must stay
        return status != Status::Deployed || others.iter().any(|(_, s)| *s == Status::Deployed);
    }
    // D7 allows a stuck latest over a deployed one (or alone), a failed one over a deployed
    // one; D8, D9 refuse the rest
    let previous = others.last().map(|(_, s)| *s);
    (status.is_pending() && previous.is_none_or(|s| s == Status::Deployed))
        || (status == Status::Failed && previous == Some(Status::Deployed))
}
