//! Helm's release statuses, as Helm writes them in `info.status` and the `status` label.

use serde::{Deserialize, Serialize};

/// One of the nine statuses Helm 3 and 4 know.
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
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Status {
    /// `unknown`: Helm's zero value.
    Unknown,
    /// `deployed`: the release's current revision.
    Deployed,
    /// `uninstalled`: kept after `helm uninstall --keep-history`.
    Uninstalled,
    /// `superseded`: replaced by a later revision.
    Superseded,
    /// `failed`: an install, upgrade or rollback that failed.
    Failed,
    /// `uninstalling`: `helm uninstall` under way.
    Uninstalling,
    /// `pending-install`: `helm install` under way.
    PendingInstall,
    /// `pending-upgrade`: `helm upgrade` under way.
    PendingUpgrade,
    /// `pending-rollback`: `helm rollback` under way.
    PendingRollback,
}

impl Status {
    /// The status as Helm spells it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether an operation is under way (`pending-*`).
    pub fn is_pending(self) -> bool {
        matches!(self, Status::PendingInstall | Status::PendingUpgrade | Status::PendingRollback)
    }

    /// `uninstalling` or `uninstalled`: the release is on its way out (or gone with its history kept).
    pub fn is_uninstall(self) -> bool {
        matches!(self, Status::Uninstalling | Status::Uninstalled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_name() {
        for &status in <Status as strum::VariantArray>::VARIANTS {
            assert_eq!(status.as_str().parse::<Status>().ok(), Some(status));
            assert_eq!(serde_json::to_string(&status).unwrap(), format!("\"{status}\""));
        }
        assert!("Deployed".parse::<Status>().is_err());
    }
}
