//! Per-key prefetch buffers (Tinyid's client idea) and the task that refills
//! each one.
//!
//! A [`KeyBuffer`] holds IDs fetched ahead, in the order the server issued
//! them. Takers pop from the front under a short `std` mutex (never held
//! across an `.await`). When a take leaves fewer than the low-water count,
//! it wakes the key's refill task, which fetches one batch of `prefetch`
//! IDs and appends it; so a steady caller finds the buffer non-empty and
//! never waits on the network. A taker that finds too few IDs wakes the
//! task and waits for the buffer to change: every change bumps `epoch` and
//! is announced on a `watch` channel, and a refill that failed leaves its
//! error with its epoch, so each waiter gets either IDs or that error.
//!
//! Invariants:
//! - An ID enters a buffer once (from one server answer) and leaves it once
//!   (popped under the mutex): concurrent callers never share an ID.
//! - Only the refill task appends, one batch at a time: IDs come out in the
//!   order the server issued them, batch after batch.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use crate::error::Error;
use crate::transport::Transport;

/// What a [`KeyBuffer`] holds.
#[derive(Debug, Default)]
struct State {
    ids: VecDeque<u64>,
    /// Bumped on every refill, successful or not.
    epoch: u64,
    /// The last refill's error and its epoch; cleared by a successful refill.
    error: Option<(u64, Error)>,
}

/// The prefetched IDs of one key.
#[derive(Debug)]
pub(crate) struct KeyBuffer {
    key: String,
    state: Mutex<State>,
    /// Wakes the refill task (a stored permit if it is busy).
    demand: Notify,
    /// Announces each refill (the value is the epoch).
    changed: watch::Sender<u64>,
    /// How many IDs one refill fetches.
    batch: u64,
    /// Refill when fewer than this many are left (at least 1).
    low_water: u64,
}

impl KeyBuffer {
    pub(crate) fn new(key: &str, batch: u64, low_water: u64) -> KeyBuffer {
        KeyBuffer {
            key: key.to_owned(),
            state: Mutex::new(State::default()),
            demand: Notify::new(),
            changed: watch::Sender::new(0),
            batch,
            low_water: low_water.clamp(1, batch),
        }
    }

    /// The number of IDs that can wait for the buffer (more go straight to a server).
    pub(crate) fn low_water(&self) -> u64 {
        self.low_water
    }

    /// How many IDs are buffered now.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().expect("not poisoned").ids.len()
    }

    /// Takes `n` IDs if the buffer holds that many, without waiting.
    pub(crate) fn try_take(&self, n: u64) -> Option<Vec<u64>> {
        let mut state = self.state.lock().expect("not poisoned");
        self.take_locked(&mut state, n)
    }

    fn take_locked(&self, state: &mut State, n: u64) -> Option<Vec<u64>> {
        if (state.ids.len() as u64) < n {
            return None;
        }
        let ids: Vec<u64> = state.ids.drain(..n as usize).collect();
        if (state.ids.len() as u64) < self.low_water {
            self.demand.notify_one();
        }
        Some(ids)
    }

    /// Takes `n` IDs (`n` at most the low-water count), waiting for refills
    /// as needed; the error of a refill that failed while waiting.
    pub(crate) async fn take(&self, n: u64) -> Result<Vec<u64>, Error> {
        debug_assert!(n <= self.low_water);
        // Subscribed before looking, so a refill after the look wakes us.
        let mut changes = self.changed.subscribe();
        // The epoch at the last look: a failure after it is ours to report
        // (an older one happened before we asked, and we ask again).
        let mut seen: Option<u64> = None;
        loop {
            {
                let mut state = self.state.lock().expect("not poisoned");
                if let Some(ids) = self.take_locked(&mut state, n) {
                    return Ok(ids);
                }
                if let (Some(seen), Some((epoch, error))) = (seen, &state.error)
                    && *epoch > seen
                {
                    return Err(error.clone());
                }
                seen = Some(state.epoch);
                self.demand.notify_one();
            }
            if changes.changed().await.is_err() {
                return Err(Error::invalid("the client was dropped while waiting"));
            }
        }
    }

    /// The refill loop: waits for demand, then fetches batches until the
    /// buffer is above the low-water count or a fetch fails.
    pub(crate) async fn refill(self: Arc<KeyBuffer>, transport: Arc<Transport>) {
        loop {
            self.demand.notified().await;
            while self.len() < self.low_water as usize {
                let result = transport.fetch(&self.key, self.batch).await;
                let failed = result.is_err();
                let epoch = {
                    let mut state = self.state.lock().expect("not poisoned");
                    state.epoch += 1;
                    match result {
                        Ok(ids) => {
                            state.ids.extend(ids);
                            state.error = None;
                        }
                        Err(e) => state.error = Some((state.epoch, e)),
                    }
                    state.epoch
                };
                self.changed.send_replace(epoch);
                if failed {
                    // The waiters have the error; the next take asks again.
                    break;
                }
            }
        }
    }
}
