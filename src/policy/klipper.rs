//! What klipper-helm's entry script (the program in every K3s/RKE2 helm-install pod) does with a
//! release, by script version: POLICY.md "What the entry script does", read from the script's
//! history in k3s-io/klipper-helm (`entry`, the tags named below).

use crate::release::Status;

/// A script version: the `vMAJOR.MINOR.PATCH` of the image tag (`v0.13.3-build20260727`).
pub(crate) type ScriptVersion = (u32, u32, u32);

/// The oldest behaviour the guard knows (v0.9.8, `971f9fd^:entry`): what an image whose version
/// cannot be read is taken to run, since every rewrite made for it is harmless to newer scripts.
pub(crate) const OLDEST_KNOWN: ScriptVersion = (0, 9, 8);

/// The entry script of a pod's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryScript {
    /// The version read from the image tag; `None` for `latest`, a digest only, or another image.
    pub version: Option<ScriptVersion>,
}

impl EntryScript {
    /// Reads the version from an image reference (`[registry/]path/klipper-helm:TAG[@digest]`,
    /// mirrors such as `mirrored-klipper-helm` included).
    pub fn from_image(image: &str) -> EntryScript {
        let reference = image.split('@').next().unwrap_or_default();
        let (path, tag) = match reference.rsplit_once(':') {
            // A colon before the last slash is a registry port, not a tag.
            Some((path, tag)) if !tag.contains('/') => (path, tag),
            _ => (reference, ""),
        };
        let repository = path.rsplit('/').next().unwrap_or_default();
        let version = if repository.ends_with("klipper-helm") { parse_tag(tag) } else { None };
        EntryScript { version }
    }

    /// The version the predictions follow: the one read, else `OLDEST_KNOWN`.
    pub fn assumed(self) -> ScriptVersion {
        self.version.unwrap_or(OLDEST_KNOWN)
    }

    /// As the `helm-guard.io/script` annotation spells it.
    pub fn describe(self) -> String {
        match self.version {
            Some((major, minor, patch)) => format!("klipper-helm v{major}.{minor}.{patch}"),
            None => {
                let (major, minor, patch) = OLDEST_KNOWN;
                format!("unknown (taken as klipper-helm v{major}.{minor}.{patch})")
            }
        }
    }

    /// v0.9.9 (`971f9fd`): a `superseded` latest is reset to `failed` and upgraded; before, it
    /// fell through to `helm install`, which Helm refuses (the crash loop of PROBLEM.md).
    pub(crate) fn resets_superseded(self) -> bool {
        self.assumed() >= (0, 9, 9)
    }

    /// v0.9.15 (`ac8f73f`): exits without acting when the latest revision is not
    /// `EXPECTED_RELEASE_REVISION`; with status 64 until v0.9.17 (`f573316`), 0 since.
    pub(crate) fn checks_expected_revision(self) -> bool {
        self.assumed() >= (0, 9, 15)
    }

    /// v0.13.2 (`c7185fd`): `FAILURE_POLICY=retry` upgrades a failed release; before, any policy
    /// but `reinstall` waited for an operator.
    pub(crate) fn has_retry_policy(self) -> bool {
        self.assumed() >= (0, 13, 2)
    }

    /// v0.13.0 read `helm ls` through a jq expression that printed one field per line and kept
    /// the first (the chart): no status, no revision, so it installs over any release (fixed in
    /// v0.13.1, `e9fef2a` "Fix jq|read pipeline").
    pub(crate) fn reads_no_state(self) -> bool {
        self.version == Some((0, 13, 0))
    }

    /// v0.13.3 (`09c5242`, HEAD as of 2026-07-27) passes `--server-side` and `--force-conflicts`
    /// (`get_ssa_args`), and drops `--force-conflicts=true` where SSA is off with
    /// `[[ "${SERVER_SIDE}" == ^false$ ]]`: a glob comparison that never matches `false`. So a
    /// HelmChart with `serverSide: false` and `forceConflicts: true` runs Helm with
    /// `--server-side=false --force-conflicts=true`: Helm 4 refuses the upgrade ("forceConflicts
    /// enabled when serverSideApply disabled", `pkg/kube/client.go`), a failed revision, and the
    /// next run, under the default failure policy, uninstalls the release and installs it afresh
    /// (an install takes both flags; seen in real pods, `tests/e2e_jobs.rs`). Unknown versions are taken to have it too: `FORCE_CONFLICTS=false`
    /// without SSA is what every version means.
    pub(crate) fn forces_conflicts_without_ssa(self, env: &ScriptEnv) -> bool {
        self.version.is_none_or(|version| version >= (0, 13, 3))
            && env.server_side.as_deref() == Some("false")
            && env.force_conflicts.as_deref() == Some("true")
    }

    /// v0.13.3 (`09c5242`) passes `FORCE_CONFLICTS` to Helm (`get_ssa_args`: `--force-conflicts=true`
    /// where SSA is on, or `auto` over a release applied with SSA); before, no script passed it,
    /// and Helm 4 upgrades without it.
    pub(crate) fn passes_force_conflicts(self) -> bool {
        self.version.is_some_and(|version| version >= (0, 13, 3))
    }

    /// The flags v0.13.3's `get_ssa_args` gives every `helm install` and `helm upgrade` it runs
    /// (none before it), as its source computes them: `--server-side=$SERVER_SIDE` when set
    /// (`auto` becomes `true` for a release with no revision yet), `--force-conflicts=$FORCE_CONFLICTS`
    /// when set, turned `false` under `auto` unless the release was applied server-side (its
    /// `apply_method`), and never under `false` (the glob bug of
    /// [`Self::forces_conflicts_without_ssa`]). `revision`: the latest, `None` for the install
    /// after a reinstall's uninstall; `applied_server_side`: the latest's `apply_method` is `ssa`,
    /// when known. `None`: no flags.
    pub(crate) fn ssa_args(
        self,
        env: &ScriptEnv,
        revision: Option<u32>,
        applied_server_side: Option<bool>,
    ) -> Option<String> {
        if !self.passes_force_conflicts() {
            return None;
        }
        let mut server_side = env.server_side.clone().filter(|s| !s.is_empty());
        let mut force = env.force_conflicts.clone().filter(|f| !f.is_empty());
        if revision.is_none() && server_side.as_deref() == Some("auto") {
            server_side = Some("true".to_owned());
        }
        if force.as_deref() == Some("true") && server_side.as_deref() == Some("auto") {
            match applied_server_side {
                Some(true) => {}
                Some(false) => force = Some("false".to_owned()),
                None => force = Some("true (false unless the release was applied server-side)".to_owned()),
            }
        }
        let flags: Vec<String> = [
            server_side.map(|s| format!("--server-side={s}")),
            force.map(|f| format!("--force-conflicts={f}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!flags.is_empty()).then(|| flags.join(" "))
    }

    /// The failure policy that keeps a failed release instead of uninstalling it.
    pub(crate) fn keeping_policy(self) -> &'static str {
        if self.has_retry_policy() { "retry" } else { "abort" }
    }
}

fn parse_tag(tag: &str) -> Option<ScriptVersion> {
    let version = tag.strip_prefix('v')?;
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|part| part.parse::<u32>().ok());
    let parsed = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(parsed)
}

/// The first argument of the pod: what the helm-controller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// `install` (or `upgrade`, after the guard's rewrite): install or upgrade the chart.
    Install,
    /// `upgrade`: the guard's rewrite of `install`; the script's last branch then upgrades.
    Upgrade,
    /// `delete`: uninstall the chart.
    Delete,
}

/// What the script will do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScriptAction {
    /// `helm install`.
    Install,
    /// `helm install` over an existing release: Helm refuses it, the job fails and retries.
    InstallRefused,
    /// `helm upgrade`.
    Upgrade,
    /// `helm set-status ... failed` on an interrupted or superseded latest, then `helm upgrade`.
    ResetAndUpgrade,
    /// The failure policy `reinstall`: `helm uninstall` (every resource of the release goes),
    /// then `helm install`; `reset` when the latest was first set to `failed`.
    Reinstall {
        /// The latest was first set to `failed` (it was interrupted).
        reset: bool,
    },
    /// The failure policy `abort` (or an unknown one): exits 1 and waits for an operator.
    WaitForOperator {
        /// The latest was first set to `failed`.
        reset: bool,
    },
    /// The failure policy `retry`: `helm upgrade` of the failed release.
    RetryUpgrade {
        /// The latest was first set to `failed`.
        reset: bool,
    },
    /// The latest revision is not the one the helm-controller expected: exits without acting
    /// (with status 64 before v0.9.17, so the job retries).
    Skip {
        /// The latest revision.
        revision: u32,
        /// `EXPECTED_RELEASE_REVISION`.
        expected: String,
    },
    /// `helm uninstall`.
    Uninstall,
    /// `delete` of a release that is not there.
    NothingToDelete,
}

impl ScriptAction {
    /// As the `helm-guard.io/action` annotation spells it.
    pub(crate) fn describe(&self) -> String {
        let reset = |reset: bool, what: &str| {
            if reset { format!("reset-to-failed, then {what}") } else { what.to_owned() }
        };
        match self {
            ScriptAction::Install => "install".to_owned(),
            ScriptAction::InstallRefused => "install (refused by Helm: the name is in use)".to_owned(),
            ScriptAction::Upgrade => "upgrade".to_owned(),
            ScriptAction::ResetAndUpgrade => "reset-and-upgrade".to_owned(),
            ScriptAction::Reinstall { reset: r } => reset(*r, "reinstall (uninstalls first)"),
            ScriptAction::WaitForOperator { reset: r } => reset(*r, "wait-for-operator"),
            ScriptAction::RetryUpgrade { reset: r } => reset(*r, "upgrade (failure policy retry)"),
            ScriptAction::Skip { revision, expected } => {
                format!("skip: revision {revision} is not the expected {expected}")
            }
            ScriptAction::Uninstall => "uninstall".to_owned(),
            ScriptAction::NothingToDelete => "nothing-to-delete".to_owned(),
        }
    }

    /// The action with the server-side-apply flags the script gives Helm
    /// ([`EntryScript::ssa_args`]) for the `helm install` or `upgrade` it runs, as the
    /// `helm-guard.io/action` annotation spells it.
    pub(crate) fn describe_with_flags(
        &self,
        script: EntryScript,
        env: &ScriptEnv,
        latest: Option<u32>,
        applied_server_side: Option<bool>,
    ) -> String {
        let applies = match self {
            ScriptAction::Install
            | ScriptAction::InstallRefused
            | ScriptAction::Upgrade
            | ScriptAction::ResetAndUpgrade
            | ScriptAction::RetryUpgrade { .. } => Some(latest),
            // The install after the uninstall: the script asks for the flags of no release.
            ScriptAction::Reinstall { .. } => Some(None),
            _ => None,
        };
        match applies.and_then(|revision| script.ssa_args(env, revision, applied_server_side)) {
            Some(flags) => format!("{}, with {flags}", self.describe()),
            None => self.describe(),
        }
    }

    /// Whether the release's resources are uninstalled on the way (what `helm-guard.io/protect`
    /// prevents).
    pub(crate) fn reinstalls(&self) -> bool {
        matches!(self, ScriptAction::Reinstall { .. })
    }
}

/// What the pod's environment tells the script.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ScriptEnv {
    /// `FAILURE_POLICY` (the script's default is `reinstall`).
    pub failure_policy: Option<String>,
    /// `EXPECTED_RELEASE_REVISION`, injected by helm-controller v0.17.0+ (0 for no release).
    pub expected_revision: Option<String>,
    /// `SERVER_SIDE` (`auto`, `true`, `false`), from the HelmChart's `serverSide` (v0.13.3 on).
    pub server_side: Option<String>,
    /// `FORCE_CONFLICTS` (`true`, `false`), from the HelmChart's `forceConflicts` (v0.13.3 on).
    pub force_conflicts: Option<String>,
}

/// What `script` does when asked `asked` for a release whose latest revision (as `helm status`
/// and `helm ls` read it: the highest) is `latest`. Follows the script's branches in order.
pub(crate) fn predict(
    script: EntryScript,
    asked: Asked,
    latest: Option<(u32, Status)>,
    env: &ScriptEnv,
) -> ScriptAction {
    let skip = |revision: u32| -> Option<ScriptAction> {
        let expected = env.expected_revision.as_deref().filter(|e| !e.is_empty())?;
        (script.checks_expected_revision() && expected != revision.to_string())
            .then(|| ScriptAction::Skip { revision, expected: expected.to_owned() })
    };
    if asked == Asked::Delete {
        let Some((revision, _)) = latest else { return ScriptAction::NothingToDelete };
        return skip(revision).unwrap_or(ScriptAction::Uninstall);
    }
    // The last branch runs the pod's own first argument.
    let as_asked = || match asked {
        Asked::Upgrade => ScriptAction::Upgrade,
        _ => ScriptAction::InstallRefused,
    };
    let Some((revision, status)) = latest else {
        return match asked {
            // `helm upgrade` of nothing fails; the guard never rewrites such a pod.
            Asked::Upgrade => ScriptAction::Upgrade,
            _ => ScriptAction::Install,
        };
    };
    if script.reads_no_state() {
        return as_asked();
    }
    if let Some(skipped) = skip(revision) {
        return skipped;
    }
    let mut reset = false;
    match status {
        Status::PendingUpgrade => return ScriptAction::ResetAndUpgrade,
        Status::Superseded if script.resets_superseded() => return ScriptAction::ResetAndUpgrade,
        Status::PendingInstall | Status::PendingRollback | Status::Uninstalling => reset = true,
        Status::Deployed => return ScriptAction::Upgrade,
        // Older scripts, and `uninstalled` in every version, fall through to the last branch.
        Status::Superseded | Status::Uninstalled => return as_asked(),
        Status::Failed | Status::Unknown => {}
    }
    match env.failure_policy.as_deref().unwrap_or("reinstall") {
        "reinstall" => ScriptAction::Reinstall { reset },
        "retry" if script.has_retry_policy() => ScriptAction::RetryUpgrade { reset },
        _ => ScriptAction::WaitForOperator { reset },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `get_ssa_args` of v0.13.3 (`09c5242:entry`), row by row: what the script gives Helm for
    /// each SERVER_SIDE and FORCE_CONFLICTS, with and without a release, by apply method.
    #[test]
    fn the_ssa_flags_are_the_ones_the_head_script_passes() {
        let head = EntryScript { version: Some((0, 13, 3)) };
        let env = |server_side: &str, force: &str| ScriptEnv {
            server_side: (!server_side.is_empty()).then(|| server_side.to_owned()),
            force_conflicts: (!force.is_empty()).then(|| force.to_owned()),
            ..ScriptEnv::default()
        };
        // SERVER_SIDE, FORCE_CONFLICTS, the latest revision, applied server-side, the flags.
        type Row<'a> = (&'a str, &'a str, Option<u32>, Option<bool>, Option<&'a str>);
        let table: [Row; 9] = [
            ("", "", Some(2), None, None),
            ("true", "", Some(2), None, Some("--server-side=true")),
            ("auto", "", None, None, Some("--server-side=true")),
            ("auto", "", Some(2), None, Some("--server-side=auto")),
            ("auto", "true", Some(2), Some(true), Some("--server-side=auto --force-conflicts=true")),
            ("auto", "true", Some(2), Some(false), Some("--server-side=auto --force-conflicts=false")),
            (
                "auto",
                "true",
                Some(2),
                None,
                Some(
                    "--server-side=auto --force-conflicts=true (false unless the release was applied server-side)",
                ),
            ),
            // The glob bug: `== ^false$` never matches, so force stays.
            ("false", "true", Some(2), None, Some("--server-side=false --force-conflicts=true")),
            ("", "true", Some(2), None, Some("--force-conflicts=true")),
        ];
        for (server_side, force, revision, applied, flags) in table {
            assert_eq!(
                head.ssa_args(&env(server_side, force), revision, applied).as_deref(),
                flags,
                "SERVER_SIDE={server_side:?} FORCE_CONFLICTS={force:?} revision {revision:?} ssa {applied:?}"
            );
        }
        let before = EntryScript { version: Some((0, 13, 2)) };
        assert_eq!(before.ssa_args(&env("true", "true"), Some(2), None), None, "no flags before v0.13.3");
        let upgrade = ScriptAction::Upgrade.describe_with_flags(head, &env("true", ""), Some(2), None);
        assert_eq!(upgrade, "upgrade, with --server-side=true");
        let reinstall = ScriptAction::Reinstall { reset: false }.describe_with_flags(
            head,
            &env("auto", ""),
            Some(2),
            None,
        );
        assert_eq!(reinstall, "reinstall (uninstalls first), with --server-side=true", "installs afresh");
        let waiting = ScriptAction::WaitForOperator { reset: false };
        assert_eq!(
            waiting.describe_with_flags(head, &env("true", "true"), Some(2), None),
            "wait-for-operator"
        );
    }

    #[test]
    fn the_version_is_read_from_the_image_tag() {
        let table: [(&str, Option<ScriptVersion>); 9] = [
            ("rancher/klipper-helm:v0.9.8-build20250709", Some((0, 9, 8))),
            ("docker.io/rancher/klipper-helm:v0.13.3-build20260727", Some((0, 13, 3))),
            ("registry.local:5000/rancher/mirrored-klipper-helm:v0.11.0", Some((0, 11, 0))),
            ("rancher/klipper-helm:v0.12.1@sha256:abc", Some((0, 12, 1))),
            ("rancher/klipper-helm:latest", None),
            ("rancher/klipper-helm@sha256:abc", None),
            ("registry.local:5000/rancher/klipper-helm", None),
            ("example/helm-runner:v0.13.3", None),
            ("rancher/klipper-helm:v0.13", None),
        ];
        for (image, version) in table {
            assert_eq!(EntryScript::from_image(image).version, version, "{image}");
        }
        assert_eq!(EntryScript::from_image("x").describe(), "unknown (taken as klipper-helm v0.9.8)");
    }

    fn script(version: ScriptVersion) -> EntryScript {
        EntryScript { version: Some(version) }
    }

    fn env(policy: Option<&str>, expected: Option<&str>) -> ScriptEnv {
        ScriptEnv {
            failure_policy: policy.map(str::to_owned),
            expected_revision: expected.map(str::to_owned),
            ..ScriptEnv::default()
        }
    }

    /// v0.13.3's `get_ssa_args`, read from the script (`09c5242:entry`): SSA off with
    /// force-conflicts on is passed to Helm as both.
    #[test]
    fn v0_13_3_passes_force_conflicts_with_ssa_off() {
        let ssa = |server_side: &str, force: &str| ScriptEnv {
            server_side: Some(server_side.to_owned()),
            force_conflicts: Some(force.to_owned()),
            ..ScriptEnv::default()
        };
        assert!(script((0, 13, 3)).forces_conflicts_without_ssa(&ssa("false", "true")));
        assert!(EntryScript { version: None }.forces_conflicts_without_ssa(&ssa("false", "true")));
        for (server_side, force) in [("true", "true"), ("auto", "true"), ("false", "false")] {
            assert!(
                !script((0, 13, 3)).forces_conflicts_without_ssa(&ssa(server_side, force)),
                "{server_side} {force}"
            );
        }
        assert!(
            !script((0, 13, 2)).forces_conflicts_without_ssa(&ssa("false", "true")),
            "no SSA flags before v0.13.3"
        );
    }

    /// POLICY.md "What the entry script does", row by row.
    #[test]
    fn each_script_version_does_what_its_source_says() {
        use Status::*;
        const OLD: ScriptVersion = (0, 9, 8);
        const MID: ScriptVersion = (0, 12, 1);
        const BROKEN: ScriptVersion = (0, 13, 0);
        const HEAD: ScriptVersion = (0, 13, 3);
        type Row = (ScriptVersion, Asked, Option<(u32, Status)>, Option<&'static str>, &'static str);
        let table: [Row; 25] = [
            (HEAD, Asked::Install, None, None, "install"),
            // `helm upgrade` of a release that is not there: Helm says so and the job fails.
            (HEAD, Asked::Upgrade, None, None, "upgrade"),
            (HEAD, Asked::Install, Some((3, Deployed)), None, "upgrade"),
            (
                OLD,
                Asked::Install,
                Some((3, Superseded)),
                None,
                "install (refused by Helm: the name is in use)",
            ),
            (OLD, Asked::Upgrade, Some((3, Superseded)), None, "upgrade"),
            (MID, Asked::Install, Some((3, Superseded)), None, "reset-and-upgrade"),
            (HEAD, Asked::Install, Some((3, PendingUpgrade)), Some("abort"), "reset-and-upgrade"),
            (
                OLD,
                Asked::Install,
                Some((3, PendingInstall)),
                None,
                "reset-to-failed, then reinstall (uninstalls first)",
            ),
            (
                HEAD,
                Asked::Install,
                Some((3, Uninstalling)),
                Some("abort"),
                "reset-to-failed, then wait-for-operator",
            ),
            (
                HEAD,
                Asked::Install,
                Some((3, PendingRollback)),
                Some("retry"),
                "reset-to-failed, then upgrade (failure policy retry)",
            ),
            (OLD, Asked::Install, Some((3, Failed)), None, "reinstall (uninstalls first)"),
            (OLD, Asked::Install, Some((3, Failed)), Some("abort"), "wait-for-operator"),
            (OLD, Asked::Install, Some((3, Failed)), Some("retry"), "wait-for-operator"),
            (MID, Asked::Install, Some((3, Failed)), Some("retry"), "wait-for-operator"),
            (HEAD, Asked::Install, Some((3, Failed)), Some("reinstall"), "reinstall (uninstalls first)"),
            (HEAD, Asked::Install, Some((3, Failed)), Some("retry"), "upgrade (failure policy retry)"),
            (HEAD, Asked::Install, Some((3, Failed)), Some("abort"), "wait-for-operator"),
            (HEAD, Asked::Install, Some((3, Failed)), Some("typo"), "wait-for-operator"),
            (HEAD, Asked::Install, Some((3, Unknown)), None, "reinstall (uninstalls first)"),
            (
                HEAD,
                Asked::Install,
                Some((3, Uninstalled)),
                None,
                "install (refused by Helm: the name is in use)",
            ),
            (
                BROKEN,
                Asked::Install,
                Some((3, Deployed)),
                None,
                "install (refused by Helm: the name is in use)",
            ),
            (BROKEN, Asked::Upgrade, Some((3, Failed)), None, "upgrade"),
            (HEAD, Asked::Delete, None, None, "nothing-to-delete"),
            (HEAD, Asked::Delete, Some((3, Failed)), None, "uninstall"),
            (OLD, Asked::Delete, Some((3, Deployed)), Some("abort"), "uninstall"),
        ];
        for (version, asked, latest, policy, action) in table {
            let got = predict(script(version), asked, latest, &env(policy, None)).describe();
            assert_eq!(got, action, "{version:?} {asked:?} {latest:?} {policy:?}");
        }
    }

    #[test]
    fn a_revision_other_than_the_expected_one_is_skipped_by_scripts_that_check() {
        let expected = env(None, Some("2"));
        let failed = Some((3, Status::Failed));
        let skip = "skip: revision 3 is not the expected 2";
        assert_eq!(predict(script((0, 13, 3)), Asked::Install, failed, &expected).describe(), skip);
        assert_eq!(predict(script((0, 9, 15)), Asked::Delete, failed, &expected).describe(), skip);
        // Older scripts do not read the variable; the expected revision acts; none expected.
        assert!(predict(script((0, 9, 14)), Asked::Install, failed, &expected).reinstalls());
        assert!(predict(script((0, 13, 3)), Asked::Install, failed, &env(None, Some("3"))).reinstalls());
        assert!(predict(script((0, 13, 3)), Asked::Install, failed, &env(None, Some(""))).reinstalls());
        // An absent release is installed before the check (helm-controller expects 0 then).
        assert_eq!(predict(script((0, 13, 3)), Asked::Install, None, &expected), ScriptAction::Install);
    }

    #[test]
    fn the_policy_that_keeps_a_release_is_retry_where_the_script_has_it() {
        assert_eq!(script((0, 13, 2)).keeping_policy(), "retry");
        assert_eq!(script((0, 13, 1)).keeping_policy(), "abort");
        assert_eq!(EntryScript { version: None }.keeping_policy(), "abort");
    }
}
