//! The report of one run: throughput, latency percentiles, the duplicate
//! check and the order check, and whether the run failed.

use std::fmt::Write as _;
use std::time::Duration;

use super::histogram::Histogram;
use super::order::{OrderCheck, check_order};
use super::worker::Worker;

/// The figures of one run.
#[derive(Debug)]
pub(super) struct Report {
    label: String,
    concurrency: u32,
    elapsed: Duration,
    calls: u64,
    errors: u64,
    first_error: Option<String>,
    n_ids: u64,
    latency: Histogram,
    n_duplicates: u64,
    duplicate_examples: Vec<u64>,
    /// With `--check-order`.
    order: Option<OrderCheck>,
}

impl Report {
    pub(super) fn new(
        label: String,
        concurrency: u32,
        elapsed: Duration,
        workers: Vec<Worker>,
    ) -> Report {
        let mut latency = Histogram::default();
        let (mut calls, mut errors, mut first_error) = (0, 0, None);
        let mut ids = Vec::with_capacity(workers.iter().map(|w| w.ids.len()).sum());
        let mut spans = Vec::new();
        for w in workers {
            calls += w.calls;
            errors += w.errors;
            if first_error.is_none() {
                first_error = w.first_error;
            }
            latency.merge(&w.latency);
            ids.extend(w.ids);
            spans.extend(w.spans);
        }
        let order = (!spans.is_empty()).then(|| check_order(&spans));
        let n_ids = ids.len() as u64;
        let (n_duplicates, duplicate_examples) = duplicates(ids);
        Report {
            label,
            concurrency,
            elapsed,
            calls,
            errors,
            first_error,
            n_ids,
            latency,
            n_duplicates,
            duplicate_examples,
            order,
        }
    }

    pub(super) fn render(&self, out: &mut String) {
        let secs = self.elapsed.as_secs_f64();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let p = |q: f64| format_nanos(self.latency.quantile(q));
        let _ = writeln!(out, "target        {}", self.label);
        let _ = writeln!(out, "concurrency   {}", self.concurrency);
        let _ = writeln!(out, "duration      {secs:.2} s");
        let _ = writeln!(out, "calls         {} ({} failed)", self.calls, self.errors);
        let _ = writeln!(out, "ids           {}", self.n_ids);
        let _ = writeln!(
            out,
            "throughput    {:.0} ids/s, {:.0} calls/s",
            per_sec(self.n_ids),
            per_sec(self.calls)
        );
        let _ = writeln!(
            out,
            "latency       p50 {}, p99 {}, p99.9 {}, max {}",
            p(0.5),
            p(0.99),
            p(0.999),
            format_nanos(self.latency.max)
        );
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "first error   {e}");
        }
        if self.n_duplicates == 0 {
            let _ = writeln!(out, "duplicates    0 (all {} IDs unique)", self.n_ids);
        } else {
            let examples: Vec<String> =
                self.duplicate_examples.iter().map(u64::to_string).collect();
            let _ = writeln!(
                out,
                "duplicates    {} !!! DUPLICATE IDS RECEIVED, e.g. {}",
                self.n_duplicates,
                examples.join(", ")
            );
        }
        if let Some(order) = &self.order {
            if order.violations == 0 {
                let _ = writeln!(
                    out,
                    "order         0 violations (all {} calls in real-time order; {} of them \
                     began after a call of another connection ended)",
                    order.calls, order.ordered_across
                );
            } else {
                let _ = writeln!(
                    out,
                    "order         {} violations !!! IDS OUT OF REAL-TIME ORDER in {} of {} calls \
                     ({} within a connection), e.g. {}",
                    order.violations,
                    order.violations,
                    order.calls,
                    order.within_connection,
                    order.examples.join("; ")
                );
            }
        }
    }

    /// Why this run counts as failed, if it does.
    pub(super) fn failure(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.n_duplicates > 0 {
            why.push(format!(
                "{} duplicate IDs from {}",
                self.n_duplicates, self.label
            ));
        }
        if let Some(order) = self.order.as_ref().filter(|o| o.violations > 0) {
            why.push(format!(
                "{} of {} calls to {} got IDs out of real-time order",
                order.violations, order.calls, self.label
            ));
        }
        if self.errors > 0 {
            why.push(format!(
                "{} of {} calls to {} failed, first: {}",
                self.errors,
                self.calls,
                self.label,
                self.first_error.as_deref().unwrap_or("?")
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// The number of IDs that came more than once (each repeat counts), and up
/// to five of them.
fn duplicates(mut ids: Vec<u64>) -> (u64, Vec<u64>) {
    ids.sort_unstable();
    let mut n = 0;
    let mut examples = Vec::new();
    for w in ids.windows(2) {
        if w[0] == w[1] {
            n += 1;
            if examples.len() < 5 && examples.last() != Some(&w[0]) {
                examples.push(w[0]);
            }
        }
    }
    (n, examples)
}

fn format_nanos(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_counted_with_examples() {
        assert_eq!(duplicates(vec![3, 1, 2]), (0, vec![]));
        assert_eq!(duplicates(vec![5, 1, 5, 2, 5, 2]), (3, vec![2, 5]));
    }
}
