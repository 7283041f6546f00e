//! Where a decision may wait on the API server, as a type.
//!
//! The API calls a verdict makes (a fence round, a listing, GETs, a claim, a copy in the recycle
//! bin) are async; a decision is synchronous code, so it waits on them with `block_on`. On one of
//! tokio's async workers that panics (and would stall every request the worker serves), so a
//! request is first decided inline, where no call may wait, and goes to the blocking pool only
//! when its verdict needs one. [`Blocking`] is the proof of being where waiting is allowed: only
//! [`Blocking::spawn`] (a thread of the blocking pool) and [`Blocking::outside_runtime`] (a thread
//! no runtime drives: a test, a command-line tool) make one, and every call that waits takes it.
//! The inline pass has none, so it cannot express a call that waits.

use std::future::Future;

/// Held only on a thread where `block_on` is allowed; see the module documentation.
#[derive(Debug)]
pub struct Blocking {
    _private: (),
}

impl Blocking {
    /// Runs `work` on tokio's blocking pool, with the token.
    pub async fn spawn<T: Send + 'static>(
        work: impl FnOnce(&Blocking) -> T + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        tokio::task::spawn_blocking(move || work(&Blocking { _private: () })).await
    }

    /// The token for a thread that no tokio runtime drives; `None` on one that a runtime does.
    pub fn outside_runtime() -> Option<Blocking> {
        tokio::runtime::Handle::try_current().is_err().then_some(Blocking { _private: () })
    }

    /// Waits for `future` on `runtime` (where the API client's connections live).
    pub fn block_on<F: Future>(&self, runtime: &tokio::runtime::Handle, future: F) -> F::Output {
        runtime.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_exists_on_the_blocking_pool_and_off_any_runtime_but_not_on_an_async_worker() {
        assert!(Blocking::outside_runtime().is_some());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap_or_else(|e| unreachable!("a runtime: {e}"));
        runtime.block_on(async {
            assert!(Blocking::outside_runtime().is_none(), "an async worker gets none");
            let handle = tokio::runtime::Handle::current();
            let waited = Blocking::spawn(move |blocking| blocking.block_on(&handle, async { 7 })).await;
            assert_eq!(waited.ok(), Some(7), "the blocking pool waits on the runtime");
        });
    }
}
