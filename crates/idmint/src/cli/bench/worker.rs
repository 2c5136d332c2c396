//! What one worker saw: its calls, failures, latencies and IDs, and with
//! `--check-order` each call's span.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::histogram::Histogram;
use super::order::Span;

/// What one worker saw.
#[derive(Debug, Default)]
pub(super) struct Worker {
    pub(super) calls: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) latency: Histogram,
    pub(super) ids: Vec<u64>,
    /// With `--check-order`: every successful call, in the order made.
    pub(super) spans: Option<Vec<Span>>,
    /// The live line's count of IDs, added to every [`PUBLISH_EVERY`] calls.
    progress: Option<Arc<AtomicU64>>,
    /// IDs received since the last addition to `progress`.
    unpublished: u64,
}

/// How many calls a worker makes between additions to the live line's
/// count: one shared atomic add per call would cost more than the call
/// itself in process.
const PUBLISH_EVERY: u64 = 256;

impl Worker {
    pub(super) fn new(check_order: bool, progress: Option<Arc<AtomicU64>>) -> Worker {
        Worker {
            spans: check_order.then(Vec::new),
            progress,
            ..Worker::default()
        }
    }

    /// A call that began at `began` and ends now.
    pub(super) fn record(&mut self, began: Instant, result: Result<Vec<u64>, String>) {
        let ended = Instant::now();
        self.calls += 1;
        self.latency
            .record(u64::try_from(ended.duration_since(began).as_nanos()).unwrap_or(u64::MAX));
        match result {
            Ok(ids) => {
                if let (Some(spans), Some(&min), Some(&max)) =
                    (&mut self.spans, ids.iter().min(), ids.iter().max())
                {
                    spans.push(Span {
                        began,
                        ended,
                        min,
                        max,
                        increasing: ids.windows(2).all(|w| w[0] < w[1]),
                    });
                }
                self.unpublished += ids.len() as u64;
                self.ids.extend(ids);
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
        if self.calls.is_multiple_of(PUBLISH_EVERY)
            && let Some(progress) = &self.progress
        {
            progress.fetch_add(std::mem::take(&mut self.unpublished), Ordering::Relaxed);
        }
    }
}
