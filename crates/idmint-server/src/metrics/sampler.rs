//! The throughput history (IDs issued per second, for the status page) and
//! the task that samples it and keeps the recorder's histograms drained
//! ([`SamplerGuard`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::{Metrics, SAMPLES_KEPT, lock};

/// How often the sampler records the issued total (and drains histograms).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// The window of the throughput figure, in samples (seconds).
pub(crate) const RATE_WINDOW: usize = 5;

impl Metrics {
    /// Records the issued total now (the sampler calls this once a second).
    fn sample(&self) {
        let total = self.issued_total();
        let mut samples = lock(&self.samples);
        if samples.len() == SAMPLES_KEPT {
            samples.pop_front();
        }
        samples.push_back((Instant::now(), total));
    }

    /// IDs per second over the last [`RATE_WINDOW`] seconds (or since the
    /// first sample), and per-second rates over the last minute, oldest first.
    pub(crate) fn throughput(&self) -> (f64, Vec<f64>) {
        let now = (Instant::now(), self.issued_total());
        let samples = lock(&self.samples);
        let rate = |from: (Instant, u64), to: (Instant, u64)| {
            let secs = to.0.saturating_duration_since(from.0).as_secs_f64();
            if secs > 0.0 {
                to.1.saturating_sub(from.1) as f64 / secs
            } else {
                0.0
            }
        };
        let recent = samples
            .iter()
            .rev()
            .nth(RATE_WINDOW - 1)
            .or_else(|| samples.front())
            .map_or(0.0, |&from| rate(from, now));
        let history = samples
            .iter()
            .zip(samples.iter().skip(1))
            .map(|(&a, &b)| rate(a, b))
            .collect();
        (recent, history)
    }
}

/// Owns the task that samples the issued total once a second (the status
/// page's throughput) and drains the latency histograms' buffers into their
/// buckets (the recorder's upkeep, so an unscraped server's memory stays flat).
/// Dropping it stops the task.
#[derive(Debug)]
pub(crate) struct SamplerGuard(JoinHandle<()>);

impl SamplerGuard {
    /// Starts the sampler.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub(crate) fn spawn(metrics: Arc<Metrics>) -> SamplerGuard {
        SamplerGuard(tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                metrics.sample();
                metrics.handle.run_upkeep();
            }
        }))
    }
}

impl Drop for SamplerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_node::config::Strategy;

    #[test]
    fn throughput_from_samples() {
        let m = Metrics::new("test (127.0.0.1:1)".to_owned());
        m.sample();
        m.count_issued("a", true, Strategy::Snowflake, 1000);
        std::thread::sleep(Duration::from_millis(20));
        m.sample();
        let (rate, history) = m.throughput();
        assert!(rate > 0.0);
        assert_eq!(history.len(), 1);
        assert!(history[0] > 1000.0, "{history:?}");
    }
}
