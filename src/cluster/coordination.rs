//! Replicas that agree: approvals of record deletions serialised per release across replicas.
//!
//! Each replica keeps its own index, and an approved deletion is hidden (a tombstone) only in
//! the index of the replica that approved it. Two deletions of one release, each harmless alone,
//! that reach two replicas at the same instant would both be approved. So before a replica
//! approves such a deletion ([`needs_agreement`]) it writes a *claim* on the
//! release into a `coordination.k8s.io` Lease in its own namespace, one Lease per release, with
//! an optimistic-concurrency update (the resourceVersion it read). The other replica's write
//! then fails with a conflict; it reads the Lease again, finds the first approval's claim, hides
//! that record in its own index as if it had approved it, and decides again. Claims expire after
//! `--tombstone-ttl`, as local tombstones do, by then the watch has seen the deletion.
//!
//! Why not leader election: one leader deciding every DELETE would put a hop, and a single
//! point of failure, on every verdict; a Lease per release only orders the approvals that can
//! conflict, and only those of one release, and costs nothing on any other request.
//!
//! [`needs_agreement`]: crate::policy::delete::needs_agreement

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::release::ReleaseKey;
use crate::release::record::same_object;
use futures::future::BoxFuture;

/// The annotation holding a Lease's claims, as JSON.
pub const CLAIMS_ANNOTATION: &str = "helm-guard.io/deletions";
/// The annotation naming the release a Lease is for, for people reading it.
pub const RELEASE_ANNOTATION: &str = "helm-guard.io/release";
/// Labels of every Lease the guard writes (the sweep lists by them).
pub const LEASE_LABELS: &str =
    "app.kubernetes.io/managed-by=helm-guard,helm-guard.io/lease=release-deletions";
/// Claims one Lease holds at most: a release whose history is being pruned faster than claims
/// expire waits (a refusal saying "retry") rather than growing an object without bound.
pub const MAX_CLAIMS: usize = 512;

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

/// The unexpired claims on a release as last read, and the version to update against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// The claims, unexpired.
    pub claims: Vec<Claim>,
    /// The Lease's resourceVersion; `None` when there is no Lease yet.
    pub version: Option<String>,
}

impl Claims {
    /// Reads a Lease's claim annotation; expired claims are dropped. Text that is not a claim
    /// list counts as none (only the guard's own namespace can hold it; the next write repairs
    /// it), with a warning.
    pub fn read(annotation: Option<&str>, version: Option<String>, now_ms: i64) -> Claims {
        let mut claims: Vec<Claim> = match annotation.map(serde_json::from_str::<Vec<Claim>>) {
            None => Vec::new(),
            Some(Ok(claims)) => claims,
            Some(Err(error)) => {
                tracing::warn!(%error, "a deletion Lease's claims do not parse; counting none");
                Vec::new()
            }
        };
        claims.retain(|claim| claim.until > now_ms);
        Claims { claims, version }
    }

    /// A Lease's unexpired claims, and its version.
    pub fn of(lease: &Lease, now_ms: i64) -> Claims {
        let annotation =
            lease.metadata.annotations.as_ref().and_then(|a| a.get(CLAIMS_ANNOTATION)).map(String::as_str);
        Claims::read(annotation, lease.metadata.resource_version.clone(), now_ms)
    }

    /// The claims after this replica's approval of `record` (a claim of the same object is
    /// replaced), or `None` when the Lease is full.
    pub fn with(&self, record: &ClaimedRecord<'_>, until: i64, by: &str) -> Option<Vec<Claim>> {
        let mut claims: Vec<Claim> = self.claims.iter().filter(|c| !c.is(record)).cloned().collect();
        if claims.len() >= MAX_CLAIMS {
            return None;
        }
        let uid = record.uid.map(str::to_owned);
        claims.push(Claim { object: record.object.to_owned(), uid, until, by: by.to_owned() });
        Some(claims)
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

/// Why a claim could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CoordinationError {
    #[error("the Kubernetes API did not answer within the decision deadline")]
    /// The API did not answer in time.
    Deadline,
    #[error("the release's deletion Lease already holds {MAX_CLAIMS} unexpired claims")]
    /// The Lease holds as many claims as it may.
    Full,
    #[error("the Kubernetes API refused: {0}")]
    /// The API refused the read or the write.
    Api(String),
}

/// What writing a claim came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// Written: the approval stands.
    Yes,
    /// Someone wrote the Lease since it was read: read it again and decide again.
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
    /// Adds a claim on `record`, if the Lease is still as `seen` read it.
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
pub fn local_instant(until_ms: i64, now_ms: i64) -> Instant {
    let left = u64::try_from(until_ms.saturating_sub(now_ms)).unwrap_or(0);
    Instant::now() + Duration::from_millis(left)
}

/// The Lease of one release: a fixed-length name (release and namespace names together can be
/// longer than an object name may be), the release named in an annotation.
pub fn lease_name(key: &ReleaseKey) -> String {
    let digest = sha2::Sha256::digest(format!("{}/{}/{}", key.driver, key.namespace, key.release));
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("helm-guard-deletions-{hex}")
}

/// Claims written to `coordination.k8s.io/v1` Leases in one namespace.
pub struct LeaseCoordinator {
    /// The Leases' namespace.
    pub leases: Api<Lease>,
    /// This replica, as claims and `holderIdentity` name it.
    pub identity: String,
    /// How long a claim holds.
    pub ttl: Duration,
}

impl std::fmt::Debug for LeaseCoordinator {
    // kube's Api has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseCoordinator").field("identity", &self.identity).finish_non_exhaustive()
    }
}

impl LeaseCoordinator {
    /// One API call, until the deadline.
    async fn until<T>(
        deadline: Instant,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, CoordinationError> {
        let deadline = tokio::time::Instant::from_std(deadline);
        tokio::time::timeout_at(deadline, call).await.map_err(|_| CoordinationError::Deadline)
    }
}

fn api_error(error: kube::Error) -> CoordinationError {
    CoordinationError::Api(error.to_string())
}

fn is_conflict(error: &kube::Error) -> bool {
    // 409: a stale resourceVersion on update, or a Lease created meanwhile.
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

impl DeleteCoordinator for LeaseCoordinator {
    fn claims<'a>(
        &'a self,
        key: &'a ReleaseKey,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Claims, CoordinationError>> {
        Box::pin(async move {
            let name = lease_name(key);
            let lease = Self::until(deadline, self.leases.get_opt(&name)).await?.map_err(api_error)?;
            let Some(lease) = lease else { return Ok(Claims::default()) };
            Ok(Claims::of(&lease, now_ms()))
        })
    }

    fn claim<'a>(
        &'a self,
        key: &'a ReleaseKey,
        record: &'a ClaimedRecord<'a>,
        seen: &'a Claims,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Claimed, CoordinationError>> {
        Box::pin(self.claim_by(key, record, seen, deadline))
    }
}

impl LeaseCoordinator {
    async fn claim_by(
        &self,
        key: &ReleaseKey,
        record: &ClaimedRecord<'_>,
        seen: &Claims,
        deadline: Instant,
    ) -> Result<Claimed, CoordinationError> {
        let now = now_ms();
        let ttl_ms = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        let claims =
            seen.with(record, now.saturating_add(ttl_ms), &self.identity).ok_or(CoordinationError::Full)?;
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(lease_name(key)),
                resource_version: seen.version.clone(),
                labels: Some(
                    LEASE_LABELS
                        .split(',')
                        .filter_map(|pair| pair.split_once('='))
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                ),
                annotations: Some(
                    [
                        (
                            RELEASE_ANNOTATION.to_owned(),
                            format!("{} {}/{}", key.driver, key.namespace, key.release),
                        ),
                        (CLAIMS_ANNOTATION.to_owned(), serde_json::to_string(&claims).unwrap_or_default()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(i32::try_from(self.ttl.as_secs()).unwrap_or(i32::MAX)),
                renew_time: Some(MicroTime(jiff::Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        let name = lease_name(key);
        let written = match seen.version {
            None => Self::until(deadline, self.leases.create(&PostParams::default(), &lease)).await?,
            Some(_) => {
                Self::until(deadline, self.leases.replace(&name, &PostParams::default(), &lease)).await?
            }
        };
        match written {
            Ok(_) => Ok(Claimed::Yes),
            Err(error) if is_conflict(&error) => Ok(Claimed::Conflict),
            Err(error) => Err(api_error(error)),
        }
    }
}

/// Deletes the Leases labelled `labels` whose claims have all expired, every `every`, so that
/// one Lease per release ever pruned (or a claim book of a replica long gone) does not pile up.
/// The delete is conditional on the version read: a Lease claimed meanwhile stays.
pub async fn sweep(leases: Api<Lease>, labels: &'static str, every: Duration) {
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
            let claims = Claims::of(&lease, now);
            if !claims.claims.is_empty() {
                continue;
            }
            let version = claims.version;
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
    use crate::release::Driver;

    fn claim(object: &str, until: i64) -> Claim {
        Claim { object: object.to_owned(), uid: Some(format!("uid-{object}")), until, by: "a".to_owned() }
    }

    fn record(object: &str) -> ClaimedRecord<'_> {
        ClaimedRecord { object, uid: None }
    }

    #[test]
    fn expired_claims_are_dropped_and_garbage_counts_as_none() {
        let text = serde_json::to_string(&[claim("v1", 100), claim("v2", 300)]).unwrap();
        let claims = Claims::read(Some(&text), Some("7".into()), 200);
        assert_eq!(claims.claims, vec![claim("v2", 300)]);
        assert_eq!(claims.version.as_deref(), Some("7"));
        assert!(Claims::read(Some("{not json"), None, 0).claims.is_empty());
        assert!(Claims::read(None, None, 0).claims.is_empty());
    }

    #[test]
    fn a_new_claim_replaces_one_of_the_same_object_and_a_full_lease_refuses() {
        let claims = Claims { claims: vec![claim("v1", 100), claim("v2", 100)], version: None };
        let v1 = ClaimedRecord { object: "v1", uid: Some("uid-v1") };
        let after = claims.with(&v1, 500, "b").unwrap();
        let renewed = Claim { object: "v1".into(), uid: Some("uid-v1".into()), until: 500, by: "b".into() };
        assert_eq!(after, vec![claim("v2", 100), renewed]);
        let full =
            Claims { claims: (0..MAX_CLAIMS).map(|i| claim(&format!("v{i}"), 100)).collect(), version: None };
        assert!(full.with(&record("new"), 500, "b").is_none());
        assert!(full.with(&record("v3"), 500, "b").is_some(), "renewing an existing claim fits");
    }

    #[test]
    fn a_claim_is_on_one_object_not_on_a_later_one_of_its_name() {
        let old = claim("sh.helm.release.v1.web.v2", 100);
        let reinstalled = ClaimedRecord { object: "sh.helm.release.v1.web.v2", uid: Some("uid-new") };
        assert!(!old.is(&reinstalled), "the name came back with a new object");
        let same =
            ClaimedRecord { object: "sh.helm.release.v1.web.v2", uid: Some("uid-sh.helm.release.v1.web.v2") };
        assert!(old.is(&same));
        let after = Claims { claims: vec![old.clone()], version: None }.with(&reinstalled, 500, "b").unwrap();
        assert_eq!(after.len(), 2, "a claim on the new object does not replace the old one's");
    }

    #[test]
    fn claims_written_before_uids_still_read_and_stand_for_their_name() {
        // What a guard of the previous release writes, and what it makes of this release's claims.
        let older = r#"[{"object":"sh.helm.release.v1.web.v2","until":300,"by":"old-replica"}]"#;
        let claims = Claims::read(Some(older), Some("3".into()), 200);
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
        let written = serde_json::to_string(&claims.with(&any, 500, "new").unwrap()).unwrap();
        let read_by_old: Vec<OldClaim> = serde_json::from_str(&written).unwrap();
        assert_eq!(read_by_old.len(), 1, "an older replica still reads the claims this one writes");
    }

    #[test]
    fn lease_names_are_valid_object_names_for_any_release() {
        let long = ReleaseKey { driver: Driver::Secret, namespace: "n".repeat(63), release: "r".repeat(53) };
        let name = lease_name(&long);
        assert!(
            name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        let other = ReleaseKey { driver: Driver::ConfigMap, ..long.clone() };
        assert_ne!(lease_name(&other), name, "the driver is part of the release's identity");
    }
}
