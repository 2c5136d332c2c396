//! The process's table of what holds a lease or a store open, so one call
//! closes it all when the process exits: [`close_all`].
//!
//! Every binding closes what is still open when its language's process
//! exits normally (Python's `atexit`, Node's `process.on('exit')`, the
//! JVM's shutdown hook), so leases are released then rather than when they
//! run out. The table, and what closing it means, is this layer's; a
//! binding only calls [`close_all`] from its language's exit hook.
//!
//! The table holds weak references: it never keeps a generator or an
//! allocator alive, and one dropped meanwhile (closed by its drop) is
//! skipped. In a forked child, [`close_all`] closes only what the child
//! opened (what the parent made is the parent's to close).

use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Something [`close_all`] closes: a generator's or an allocator's state.
pub(crate) trait Close: Send + Sync {
    /// Closes it, as its `close()` does (idempotent).
    fn close(&self);
}

/// Every generator and allocator made in this process, weakly.
static OPEN: Mutex<Vec<Weak<dyn Close>>> = Mutex::new(Vec::new());

fn table() -> MutexGuard<'static, Vec<Weak<dyn Close>>> {
    OPEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Lists `state` (forgetting the entries dropped since).
pub(crate) fn track<T: Close + 'static>(state: &Arc<T>) {
    let mut open = table();
    open.retain(|w| w.strong_count() > 0);
    let state: Arc<dyn Close> = state.clone();
    open.push(Arc::downgrade(&state));
}

/// Closes every [`crate::Generator`] and [`crate::Segments`] still open in
/// this process: their leases are released and their stores closed now, as
/// each one's `close()` does. What every binding calls when its process
/// exits normally; safe to call from any thread, more than once, and while
/// other threads call (theirs then fail with `closed`).
pub fn close_all() {
    // Taken off the table first: closing waits on registries (a few
    // seconds at most each), with no lock held.
    let open: Vec<Arc<dyn Close>> = std::mem::take(&mut *table())
        .into_iter()
        .filter_map(|w| w.upgrade())
        .collect();
    for state in open {
        state.close();
    }
}
