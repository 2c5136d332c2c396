//! The wait at the high-water mark: what a snowflake call does when it
//! meets the mark, on the server (`issue.rs`, asleep on tokio) and in
//! `idmint-embed` (asleep on the caller's thread) alike.

use std::time::{Duration, Instant};

use idmint_registry::{LeaseState, WorkerHandle};

use crate::error::{IssueError, MARK_POLL, MARK_WAIT};

/// One call's wait at the mark. While the lease is held, the keeper (nudged
/// by the failed call) is persisting the next window, so the call looks
/// again every [`MARK_POLL`] for up to [`MARK_WAIT`] from the first time it
/// met the mark; then, or at once without the lease, it is refused with
/// [`IssueError::paused`].
#[derive(Debug, Default)]
pub struct MarkWait {
    deadline: Option<Instant>,
}

impl MarkWait {
    /// A call that has not met the mark yet (the clock is read only once it
    /// does).
    pub const fn new() -> MarkWait {
        MarkWait { deadline: None }
    }

    /// The call met the mark with `e`: how long to pause before trying
    /// again, or the refusal.
    ///
    /// # Errors
    /// [`IssueError::paused`] once the wait is over or the lease is not held.
    pub fn pause(
        &mut self,
        e: &idmint_core::Error,
        worker: &WorkerHandle,
    ) -> Result<Duration, IssueError> {
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + MARK_WAIT);
        let status = worker.status();
        if Instant::now() < deadline && status.lease == LeaseState::Held {
            Ok(MARK_POLL)
        } else {
            Err(IssueError::paused(e, &status))
        }
    }
}
