//! Counts the core keeps for the metrics, without knowing how they are exported: `server`
//! registers each [`Tally`] as a Prometheus counter.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A count shared by its clones.
#[derive(Debug, Clone, Default)]
pub struct Tally(Arc<AtomicU64>);

impl Tally {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
