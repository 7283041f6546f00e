//! A Lease in memory for tests of replicas that agree: the Lease's semantics (a version, writes
//! conditional on it), shared by in-process replicas, with the worst interleaving available on
//! demand (every replica reads before any writes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use helm_guard::cluster::coordination::{
    Claim, Claimed, ClaimedRecord, Claims, CoordinationError, DeleteCoordinator, now_ms,
};
use helm_guard::release::ReleaseKey;

/// A Lease in memory: claims and a version; a write against an old version conflicts.
#[derive(Debug)]
pub struct SharedLeases {
    pub leases: Mutex<HashMap<ReleaseKey, (u64, Vec<Claim>)>>,
    /// The first `rendezvous` reads wait for each other: every replica has read before any writes.
    pub rendezvous: Option<Barrier>,
    pub reads: AtomicUsize,
    pub writes: AtomicUsize,
    /// Answer nothing, as an API server that does not answer in time.
    pub unavailable: bool,
}

impl SharedLeases {
    pub fn new(rendezvous: usize) -> SharedLeases {
        SharedLeases {
            leases: Mutex::default(),
            rendezvous: (rendezvous > 0).then(|| Barrier::new(rendezvous)),
            reads: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
            unavailable: false,
        }
    }
}

/// One replica's view of the shared Leases.
#[derive(Debug)]
pub struct Replica {
    pub leases: Arc<SharedLeases>,
    pub name: &'static str,
}

impl DeleteCoordinator for Replica {
    fn claims<'a>(
        &'a self,
        key: &'a ReleaseKey,
        _deadline: Instant,
    ) -> BoxFuture<'a, Result<Claims, CoordinationError>> {
        Box::pin(std::future::ready(self.read(key)))
    }

    fn claim<'a>(
        &'a self,
        key: &'a ReleaseKey,
        record: &'a ClaimedRecord<'a>,
        seen: &'a Claims,
        _deadline: Instant,
    ) -> BoxFuture<'a, Result<Claimed, CoordinationError>> {
        Box::pin(std::future::ready(self.write(key, record, seen)))
    }
}

impl Replica {
    /// Reads the Lease; the first two reads wait for each other (a std barrier: the replicas
    /// decide on threads of their own).
    fn read(&self, key: &ReleaseKey) -> Result<Claims, CoordinationError> {
        if self.leases.unavailable {
            return Err(CoordinationError::Deadline);
        }
        let read = {
            let leases = self.leases.leases.lock().unwrap();
            match leases.get(key) {
                None => Claims::default(),
                Some((version, claims)) => {
                    let text = serde_json::to_string(claims).unwrap();
                    Claims::read(Some(&text), Some(version.to_string()), now_ms())
                }
            }
        };
        let first_reads = self.leases.reads.fetch_add(1, Ordering::SeqCst);
        if let Some(barrier) = &self.leases.rendezvous
            && first_reads < 2
        {
            barrier.wait();
        }
        Ok(read)
    }

    fn write(
        &self,
        key: &ReleaseKey,
        record: &ClaimedRecord<'_>,
        seen: &Claims,
    ) -> Result<Claimed, CoordinationError> {
        let mut leases = self.leases.leases.lock().unwrap();
        let current = leases.get(key).map(|(version, _)| version.to_string());
        if current != seen.version {
            return Ok(Claimed::Conflict);
        }
        let claims = with(seen, record, now_ms() + 30_000, self.name).ok_or(CoordinationError::Full)?;
        let version = leases.get(key).map_or(1, |(version, _)| version + 1);
        leases.insert(key.clone(), (version, claims));
        self.leases.writes.fetch_add(1, Ordering::SeqCst);
        Ok(Claimed::Yes)
    }
}

/// The claims a Lease holds after `by`'s approval of `record` (a claim of the same object is
/// replaced), or `None` when the Lease is full: what a Lease per release held.
fn with(seen: &Claims, record: &ClaimedRecord<'_>, until: i64, by: &str) -> Option<Vec<Claim>> {
    const MAX_CLAIMS: usize = 512;
    let mut claims: Vec<Claim> = seen.claims.iter().filter(|c| !c.is(record)).cloned().collect();
    if claims.len() >= MAX_CLAIMS {
        return None;
    }
    let uid = record.uid.map(str::to_owned);
    claims.push(Claim { object: record.object.to_owned(), uid, until, by: by.to_owned() });
    Some(claims)
}
