//! The runtime each generator and segment allocator owns: a tokio runtime on
//! one thread of its own, where the keeper and the preloader run, and the
//! blocking bridge the public API calls through.
//!
//! One per object rather than one per process: an object then owns all of
//! its threads and state, so closing it (or leaking it in a forked child,
//! `fork.rs`) touches nothing another object uses, and no process-wide lock
//! exists for a fork to catch held.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::error::Error;

/// How long closing waits for the runtime's tasks to end once they were
/// told to (a lease release in flight gets this long).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// A tokio runtime with one worker thread, shut down on drop.
#[derive(Debug)]
pub(crate) struct Runtime {
    /// `Some` until dropped.
    rt: Option<tokio::runtime::Runtime>,
}

impl Runtime {
    /// Starts the worker thread (`idmint-embed`) and the timer and I/O
    /// drivers.
    pub(crate) fn start() -> Result<Runtime, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("idmint-embed")
            .enable_all()
            .build()
            .map_err(|e| Error::runtime(&e))?;
        Ok(Runtime { rt: Some(rt) })
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        match &self.rt {
            Some(rt) => rt,
            None => unreachable!("the runtime is taken only by its drop"),
        }
    }

    /// Runs `fut` to completion from a thread outside the runtime, blocking
    /// it.
    pub(crate) fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.rt().block_on(fut)
    }

    /// Runs `fut` to completion, polling it once right here first: a future
    /// that is ready at once (a segment ID from the buffer) costs no trip
    /// through the runtime's blocking machinery.
    pub(crate) fn run<F: Future>(&self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        let first = {
            let _context = self.rt().enter();
            fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        };
        match first {
            Poll::Ready(v) => v,
            Poll::Pending => self.rt().block_on(fut),
        }
    }

    /// Enters the runtime's context on this thread (to spawn its tasks).
    pub(crate) fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.rt().enter()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(SHUTDOWN_WAIT);
        }
    }
}
