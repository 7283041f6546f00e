//! enforce / warn / audit: what becomes of a verdict.

use super::verdict::Verdict;

#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
/// What becomes of a denial: globally `--mode`, per namespace the `helm-guard.io/mode` label.
pub enum Mode {
    /// Deny what the policy denies.
    #[default]
    Enforce,
    /// Allow, and send the would-be denial to the client as a warning and to the audit log.
    Warn,
    /// Allow, and record the would-be denial in the audit log and the guard's log only.
    Audit,
}

impl Mode {
    /// The mode as flags and labels spell it.
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The `decision` audit annotation.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
pub enum Decision {
    /// Let through.
    Allowed,
    /// Refused.
    Denied,
    /// Would have been denied; let through by warn or audit mode.
    Warned,
}

impl Decision {
    /// The decision as the audit annotations and metrics spell it.
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A verdict with the mode applied: what goes back to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the API server lets the request through.
    pub allowed: bool,
    /// What was decided, mode included.
    pub decision: Decision,
    /// The mode that applied.
    pub mode: Mode,
    /// The denial message (enforce) or nothing.
    pub denial: Option<String>,
    /// Admission warnings for the client.
    pub warnings: Vec<String>,
}

/// A warning as the client gets it: cut as every echoed text is ([`super::MAX_ECHOED_CHARS`]; the
/// API server may cut longer ones itself), the full text being in the audit log and the ledger.
fn warning(text: String) -> String {
    super::echoed(&text).into_owned()
}

/// What `mode` makes of `verdict`.
pub(crate) fn apply_mode(verdict: &Verdict, mode: Mode) -> Outcome {
    let message = verdict.message.clone();
    match (verdict.allowed, mode) {
        (true, _) => Outcome {
            allowed: true,
            decision: Decision::Allowed,
            mode,
            denial: None,
            warnings: message.map(warning).into_iter().collect(),
        },
        (false, Mode::Enforce) => Outcome {
            allowed: false,
            decision: Decision::Denied,
            mode,
            denial: message,
            warnings: Vec::new(),
        },
        (false, Mode::Warn) => Outcome {
            allowed: true,
            decision: Decision::Warned,
            mode,
            denial: None,
            warnings: message
                .map(|m| warning(format!("helm-guard (warn mode) would deny [{}]: {m}", verdict.reason)))
                .into_iter()
                .collect(),
        },
        (false, Mode::Audit) => {
            Outcome { allowed: true, decision: Decision::Warned, mode, denial: None, warnings: Vec::new() }
        }
    }
}

/// What a dry run is told beyond `outcome`: in audit mode, silent to Helm, the would-be denial
/// as a warning. Helm never dry-runs a record write; a person asking what the guard would do
/// (`kubectl delete --dry-run=server`, `helm-guard check`) does.
pub(crate) fn tell_dry_run(outcome: &mut Outcome, verdict: &Verdict) {
    if outcome.mode == Mode::Audit
        && outcome.decision == Decision::Warned
        && let Some(message) = &verdict.message
    {
        let said = format!(
            "helm-guard (audit mode, said to dry runs only) would deny [{}]: {message}",
            verdict.reason
        );
        outcome.warnings.push(warning(said));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::verdict::Reason;

    #[test]
    fn a_denial_under_each_mode() {
        let deny = Verdict::deny(Reason::LatestDeployedRevision, "no");
        let enforce = apply_mode(&deny, Mode::Enforce);
        assert_eq!(
            (enforce.allowed, enforce.decision, enforce.denial.as_deref()),
            (false, Decision::Denied, Some("no"))
        );
        let warn = apply_mode(&deny, Mode::Warn);
        assert_eq!((warn.allowed, warn.decision), (true, Decision::Warned));
        assert_eq!(
            warn.warnings,
            vec!["helm-guard (warn mode) would deny [latest-deployed-revision]: no".to_owned()]
        );
        let mut audit = apply_mode(&deny, Mode::Audit);
        assert_eq!((audit.allowed, audit.decision, audit.warnings.len()), (true, Decision::Warned, 0));
        // A dry run is told what audit mode would deny; an enforced denial or a warning is told
        // nothing more.
        tell_dry_run(&mut audit, &deny);
        assert_eq!(
            audit.warnings,
            vec![
                "helm-guard (audit mode, said to dry runs only) would deny [latest-deployed-revision]: no"
                    .to_owned()
            ]
        );
        let (mut enforced, mut warned) = (enforce.clone(), warn.clone());
        tell_dry_run(&mut enforced, &deny);
        tell_dry_run(&mut warned, &deny);
        assert_eq!((enforced, warned), (enforce, warn));
    }

    /// The spelling the `decision` audit annotation, the ledger line and the metrics' label
    /// carry, which alerts, dashboards and `helm-guard audit --denied` match on.
    #[test]
    fn decisions_are_spelt_as_the_annotations_and_alerts_expect() {
        let spelt: Vec<&str> =
            <Decision as strum::VariantArray>::VARIANTS.iter().map(|d| d.as_str()).collect();
        assert_eq!(spelt, ["allowed", "denied", "warned"]);
    }

    #[test]
    fn long_warnings_are_cut_to_what_the_api_server_keeps() {
        let long = Verdict::deny(Reason::WouldOrphanRelease, "é".repeat(400));
        let warned = apply_mode(&long, Mode::Warn);
        assert_eq!(warned.warnings[0].chars().count(), super::super::MAX_ECHOED_CHARS);
        assert!(warned.warnings[0].ends_with('…'));
        assert_eq!(
            apply_mode(&long, Mode::Enforce).denial.unwrap().chars().count(),
            400,
            "denials are not cut"
        );
    }

    #[test]
    fn an_allowance_with_a_warning_keeps_it_in_every_mode() {
        let warn = Verdict::warn(Reason::StuckRevisionRecovery, "revision 1 becomes the latest");
        for mode in [Mode::Enforce, Mode::Warn, Mode::Audit] {
            let outcome = apply_mode(&warn, mode);
            assert_eq!((outcome.allowed, outcome.decision), (true, Decision::Allowed));
            assert_eq!(outcome.warnings, vec!["revision 1 becomes the latest".to_owned()]);
        }
    }
}
