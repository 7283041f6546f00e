//! Counts the core keeps for the metrics, without knowing how they are exported: `server`
//! registers each [`Tally`] as a Prometheus counter, each [`Level`] as a gauge.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A count shared by its clones.
#[derive(Debug, Clone, Default)]
pub struct Tally(Arc<AtomicU64>);

impl Tally {
    /// Adds one.
    pub(crate) fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A level shared by its clones (a Prometheus gauge in `server`).
#[derive(Debug, Clone, Default)]
pub struct Level(Arc<AtomicU64>);

impl Level {
    /// Sets it.
    pub(crate) fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }

    /// The level now.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
