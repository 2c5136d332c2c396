//! Fork safety: what a process that calls `fork()` (Python's `os.fork`,
//! gunicorn's and uWSGI's pre-fork workers, `multiprocessing` with the fork
//! start method) must never do, and how this layer avoids it.
//!
//! After `fork()` the child is a copy of the parent with one thread: the
//! runtime's threads (the keeper, the segment preloader) are gone, any lock
//! they held stays held for good, and the child holds copies of the parent's
//! worker ID and segments. Issuing from those copies would repeat the
//! parent's IDs; touching the parent's runtime could hang.
//!
//! So a binding tells this layer, in the child, right after the fork:
//! [`after_fork_in_child`] (Python registers it with `os.register_at_fork`).
//! It bumps the process's fork generation, one atomic. Everything that holds
//! parent state ([`crate::Generator`], [`crate::Segments`]) was stamped with
//! the generation it was made in and compares on every call (one relaxed
//! load): a generator from a config claims a worker anew in the child, on its
//! own new runtime, before it issues; a fixed-worker generator refuses
//! (`forked`); segments reopen, leasing fresh segments.
//!
//! The parent's copies are never dropped in the child ([`ProcessBound`]):
//! dropping them would run the parent's shutdown code (release the lease the
//! parent still holds, join threads that don't exist). They are leaked: the
//! memory is the copy-on-write image of the parent's, and the child's own
//! objects replace them.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

/// The number of forks this process descends from, counted by
/// [`after_fork_in_child`].
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Tells the layer that this process is a child just forked from its
/// parent: nothing made before the fork issues from the parent's worker ID or
/// segments again. Call it in the child right after `fork()`, before any
/// other call into idmint, from the one thread the child has (Python:
/// `os.register_at_fork(after_in_child=...)`).
///
/// Async-signal-safe: one atomic add, no lock, no allocation.
pub fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The process's fork generation: 0 in the process that was started, then
/// one more in each forked child (as [`after_fork_in_child`] was told).
pub fn generation() -> u64 {
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// A value that belongs to the process it was made in: dropped there as
/// usual, leaked (never dropped) in a forked child, where its drop would run
/// the parent's shutdown on the parent's behalf.
#[derive(Debug)]
pub(crate) struct ProcessBound<T> {
    born: u64,
    /// Always `Some` until the drop, which takes it to leak it.
    value: Option<T>,
}

impl<T> ProcessBound<T> {
    /// `value`, stamped with the current generation.
    pub(crate) fn new(value: T) -> ProcessBound<T> {
        ProcessBound {
            born: generation(),
            value: Some(value),
        }
    }

    /// Whether this process made it (no fork since).
    #[inline]
    pub(crate) fn is_current(&self) -> bool {
        self.born == generation()
    }
}

impl<T> Deref for ProcessBound<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        match &self.value {
            Some(value) => value,
            None => unreachable!("a ProcessBound's value is taken only by its drop"),
        }
    }
}

impl<T> Drop for ProcessBound<T> {
    fn drop(&mut self) {
        if !self.is_current() {
            // Made before a fork: leaked on purpose (see the module docs).
            std::mem::forget(self.value.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_value_made_before_a_fork_is_never_dropped_after_it() {
        let dropped = Arc::new(());
        let here = ProcessBound::new(dropped.clone());
        drop(here);
        assert_eq!(Arc::strong_count(&dropped), 1, "dropped as usual");
        let before = ProcessBound::new(dropped.clone());
        assert!(before.is_current());
        // What a binding's at-fork hook does in the child (in this test
        // process, every later test sees one more generation: harmless,
        // values compare with the generation they were made in).
        after_fork_in_child();
        assert!(!before.is_current());
        drop(before);
        assert_eq!(Arc::strong_count(&dropped), 2, "leaked, not dropped");
        assert!(ProcessBound::new(()).is_current());
    }
}
