//! Replicas that agree: approvals of record deletions serialised per release across replicas.
//!
//! Each replica keeps its own index, and an approved deletion is hidden (a tombstone) only in
//! the index of the replica that approved it. Two deletions of one release, each harmless alone,
//! that reach two replicas at the same instant would both be approved. So before a replica
//! approves such a deletion ([`needs_agreement`]) it writes a *claim* on the record that the
//! other replicas see, and decides again with the claims of others written before its own
//! hidden. The claims are kept in one Lease per replica, its claim book, read by every replica
//! from a watch: the one way replicas agree (a single replica is the same code with no other
//! book). This module holds what a claim is and the contract a decision uses
//! ([`DeleteCoordinator`]). Claims expire after `--tombstone-ttl`, as local tombstones do; by
//! then the watch has seen the deletion.
//!
//! Why not leader election: one leader deciding every DELETE would put a hop, and a single
//! point of failure, on every verdict; claims only order the approvals that can conflict, and
//! only those of one release, and cost nothing on any other request.
//!
//! [`needs_agreement`]: crate::policy::delete::needs_agreement

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Preconditions};
use serde::{Deserialize, Serialize};

use crate::release::ReleaseKey;
use crate::release::record::same_object;
use futures::future::BoxFuture;

/// The annotation holding a Lease's claims, as JSON.
pub(crate) const CLAIMS_ANNOTATION: &str = "helm-guard.io/deletions";

/// One approved deletion, visible to every replica until it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The record's object name.
    pub object: String,
    /// The record's uid: the claim is on that object, not on a later one that reuses its name
    /// (Helm's names come back with every reinstall). Claims written by earlier builds have none;
    /// they stand for the name, as they did, until they expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Unix milliseconds: replicas share the wall clock, not `Instant`s.
    pub until: i64,
    /// The replica that approved it.
    pub by: String,
}

/// The unexpired claims on a release as last read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// The claims, unexpired.
    pub claims: Vec<Claim>,
}

impl Claims {
    /// Reads a Lease's claim annotation; expired claims are dropped. Text that is not a claim
    /// list counts as none (only the guard's own namespace can hold it; the next write repairs
    /// it), with a warning.
    pub fn read(annotation: Option<&str>, now_ms: i64) -> Claims {
        let mut claims: Vec<Claim> = match annotation.map(serde_json::from_str::<Vec<Claim>>) {
            None => Vec::new(),
            Some(Ok(claims)) => claims,
            Some(Err(error)) => {
                tracing::warn!(%error, "a deletion Lease's claims do not parse; counting none");
                Vec::new()
            }
        };
        claims.retain(|claim| claim.until > now_ms);
        Claims { claims }
    }

    /// A Lease's unexpired claims.
    pub(crate) fn of(lease: &Lease, now_ms: i64) -> Claims {
        let annotation =
            lease.metadata.annotations.as_ref().and_then(|a| a.get(CLAIMS_ANNOTATION)).map(String::as_str);
        Claims::read(annotation, now_ms)
    }
}

/// The record a claim is about: its object name and uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimedRecord<'a> {
    /// The object's name.
    pub object: &'a str,
    /// The object's uid, when the request carried one.
    pub uid: Option<&'a str>,
}

impl Claim {
    /// Whether this claim is on `record`: the same name, and the same uid unless one of them has
    /// none.
    pub fn is(&self, record: &ClaimedRecord<'_>) -> bool {
        self.object == record.object && same_object(self.uid.as_deref(), record.uid)
    }
}

/// Claims one replica's book holds at most (an annotation holds 256 KiB): past it, approvals
/// wait ([`CoordinationError::Full`], "retry").
pub(crate) const MAX_BOOK_CLAIMS: usize = 1024;

/// Why a claim could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CoordinationError {
    #[error("the Kubernetes API did not answer within the decision deadline")]
    /// The API did not answer in time.
    Deadline,
    #[error("this replica's claim book already holds {} unexpired claims", MAX_BOOK_CLAIMS)]
    /// This replica's book holds as many claims as it may: approvals wait ("retry").
    Full,
    #[error("the Kubernetes API refused: {0}")]
    /// The API refused the read or the write.
    Api(String),
    #[error("the claim book {0} of another replica is in a format this version cannot read")]
    /// Another replica's claims cannot be read (a newer format, or garbage): nothing can be
    /// agreed until they can.
    Unreadable(String),
}

/// What writing a claim came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// Written: the approval stands.
    Yes,
    /// Another replica claimed on the release since `seen`: decide again.
    Conflict,
}

/// Serialises approvals of deletions across replicas; every call ends by `deadline`.
pub trait DeleteCoordinator: Send + Sync + std::fmt::Debug {
    /// The unexpired claims on a release.
    fn claims<'a>(
        &'a self,
        key: &'a ReleaseKey,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Claims, CoordinationError>>;
    /// Adds a claim on `record`; [`Claimed::Conflict`] when another replica's claim on the
    /// release, written before it, is not among those `seen`: decide again.
    fn claim<'a>(
        &'a self,
        key: &'a ReleaseKey,
        record: &'a ClaimedRecord<'a>,
        seen: &'a Claims,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Claimed, CoordinationError>>;
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// When a claim's expiry falls on this process's monotonic clock.
pub(crate) fn local_instant(until_ms: i64, now_ms: i64) -> Instant {
    let left = u64::try_from(until_ms.saturating_sub(now_ms)).unwrap_or(0);
    Instant::now() + Duration::from_millis(left)
}

fn is_conflict(error: &kube::Error) -> bool {
    // 409: a stale resourceVersion (the Lease written meanwhile).
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Deletes the Leases labelled `labels` whose claims have all expired, every `every`, so that
/// the claim books of replicas long gone do not pile up.
/// The delete is conditional on the version read: a Lease claimed meanwhile stays.
pub(crate) async fn sweep(leases: Api<Lease>, labels: &'static str, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let listed = match leases.list(&ListParams::default().labels(labels)).await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "could not list the deletion Leases to sweep them");
                continue;
            }
        };
        let now = now_ms();
        for lease in listed {
            if !Claims::of(&lease, now).claims.is_empty() {
                continue;
            }
            let version = lease.metadata.resource_version.clone();
            let Some(name) = lease.metadata.name.as_deref() else { continue };
            let params = DeleteParams {
                preconditions: Some(Preconditions { resource_version: version, uid: None }),
                ..DeleteParams::default()
            };
            if let Err(error) = leases.delete(name, &params).await
                && !is_conflict(&error)
            {
                tracing::debug!(lease = name, %error, "could not delete an expired deletion Lease");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(object: &str, until: i64) -> Claim {
        Claim { object: object.to_owned(), uid: Some(format!("uid-{object}")), until, by: "a".to_owned() }
    }

    #[test]
    fn expired_claims_are_dropped_and_garbage_counts_as_none() {
        let text = serde_json::to_string(&[claim("v1", 100), claim("v2", 300)]).unwrap();
        let claims = Claims::read(Some(&text), 200);
        assert_eq!(claims.claims, vec![claim("v2", 300)]);
        assert!(Claims::read(Some("{not json"), 0).claims.is_empty());
        assert!(Claims::read(None, 0).claims.is_empty());
    }

    #[test]
    fn a_claim_is_on_one_object_not_on_a_later_one_of_its_name() {
        let old = claim("sh.helm.release.v1.web.v2", 100);
        let reinstalled = ClaimedRecord { object: "sh.helm.release.v1.web.v2", uid: Some("uid-new") };
        assert!(!old.is(&reinstalled), "the name came back with a new object");
        let same =
            ClaimedRecord { object: "sh.helm.release.v1.web.v2", uid: Some("uid-sh.helm.release.v1.web.v2") };
        assert!(old.is(&same));
    }

    #[test]
    fn claims_written_before_uids_still_read_and_stand_for_their_name() {
        // What a guard of the previous release writes, and what it makes of this release's claims.
        let older = r#"[{"object":"sh.helm.release.v1.web.v2","until":300,"by":"old-replica"}]"#;
        let claims = Claims::read(Some(older), 200);
        assert_eq!(claims.claims.len(), 1);
        assert_eq!(claims.claims[0].uid, None);
        let any = ClaimedRecord { object: "sh.helm.release.v1.web.v2", uid: Some("whatever") };
        assert!(claims.claims[0].is(&any), "a claim without a uid is on the name");
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct OldClaim {
            object: String,
            until: i64,
            by: String,
        }
        let mine = Claim {
            object: any.object.to_owned(),
            uid: any.uid.map(str::to_owned),
            until: 500,
            by: "new".into(),
        };
        let written = serde_json::to_string(&[mine]).unwrap();
        let read_by_old: Vec<OldClaim> = serde_json::from_str(&written).unwrap();
        assert_eq!(read_by_old.len(), 1, "an older replica still reads the claims this one writes");
    }
}
