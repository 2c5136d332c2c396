//! The live line on stderr while a run lasts (only on a terminal).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The live line on stderr while a run lasts: the time, the IDs received so
/// far and the rate over the last half second, redrawn twice a second by a
/// thread of its own. Only when stderr is a terminal; otherwise nothing is
/// started and nothing printed. Cleared when dropped, before the report.
pub(super) struct LiveProgress {
    ids: Arc<AtomicU64>,
    live: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl LiveProgress {
    pub(super) fn start(duration: Duration) -> LiveProgress {
        let ids = Arc::new(AtomicU64::new(0));
        if !std::io::stderr().is_terminal() {
            return LiveProgress { ids, live: None };
        }
        let total_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let style = indicatif::ProgressStyle::with_template("{bar:30} {elapsed_precise} / {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        let bar = indicatif::ProgressBar::new(total_ms).with_style(style);
        let stop = Arc::new(AtomicBool::new(false));
        let (count, done) = (ids.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let (mut last_ids, mut last_at) = (0u64, started);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let now = Instant::now();
                let n = count.load(Ordering::Relaxed);
                let rate = (n - last_ids) as f64 / now.duration_since(last_at).as_secs_f64();
                (last_ids, last_at) = (n, now);
                bar.set_position(
                    u64::try_from(now.duration_since(started).as_millis()).unwrap_or(u64::MAX),
                );
                bar.set_message(format!(
                    "{:.0?}: {} IDs so far, {} IDs/s now",
                    Duration::from_millis(total_ms),
                    group(n),
                    group(rate as u64)
                ));
            }
            bar.finish_and_clear();
        });
        LiveProgress {
            ids,
            live: Some((stop, thread)),
        }
    }

    /// The count workers add to, when the line is shown.
    pub(super) fn counter(&self) -> Option<Arc<AtomicU64>> {
        self.live.as_ref().map(|_| self.ids.clone())
    }
}

impl Drop for LiveProgress {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.live.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(4_064_163), "4,064,163");
        assert_eq!(group(u64::MAX), "18,446,744,073,709,551,615");
    }
}
