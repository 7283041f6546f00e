//! The guard's background tasks, owned: the watches, the fence's rounds, the read-ahead, the
//! claim books, the Event writer, the sweeps, the writers' judge, the PolicyReport writer and the
//! webhooks' registration are each spawned into one [`Tasks`], which the server stops once it no
//! longer admits requests and has drained them (`server::Running::shutdown`), rather than
//! leaving them to the process's end. Stopping aborts each at its next await and waits until it
//! has ended: no lock is held across an await, so an aborted task leaves nothing half-done that
//! a restart does not redo (a fence round or a claim not written is written again).

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use tokio::task::JoinSet;

/// A set of background tasks that ends together.
#[derive(Debug, Default)]
pub struct Tasks {
    set: Mutex<JoinSet<()>>,
}

impl Tasks {
    /// Spawns `task` on the current runtime, owned by this set.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
        // Tasks that ended by themselves (a registration that gave up) are let go here.
        while set.try_join_next().is_some() {}
        set.spawn(task);
    }

    /// Tasks still running.
    pub fn running(&self) -> usize {
        let mut set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
        while set.try_join_next().is_some() {}
        set.len()
    }

    /// Stops every task and waits until each has ended.
    pub async fn stop(&self) {
        let mut set = std::mem::take(&mut *self.set.lock().unwrap_or_else(PoisonError::into_inner));
        set.shutdown().await;
    }
}
