//! Starts measured in a phase ([`Starts`], filled by the nodes as they
//! serve) and their figures: percentiles, refusals, the bound.

use std::time::Duration;

use serde::Serialize;

/// Starts measured in one phase.
#[derive(Debug, Default)]
pub struct Starts {
    /// Each successful start's time.
    pub took: Vec<Duration>,
    /// Why each refused start was refused.
    pub refused: Vec<String>,
    /// How long each granted registry claim call took, where this process
    /// saw them (in-process nodes).
    pub claims: Option<Vec<Duration>>,
}

impl Starts {
    pub(super) fn figures(mut self, bound: Option<Duration>) -> StartFigures {
        self.took.sort();
        let claims = self.claims.map(|mut c| {
            c.sort();
            Percentiles::of(&c)
        });
        let took = Percentiles::of(&self.took);
        StartFigures {
            served: self.took.len(),
            p50_ms: took.p50_ms,
            p99_ms: took.p99_ms,
            max_ms: took.max_ms,
            claim_call: claims,
            within_bound: bound.map(|b| self.took.last().is_none_or(|&t| t <= b)),
            refused: self.refused.len(),
            refusals: self.refused.into_iter().take(3).collect(),
        }
    }
}

/// p50, p99 and the largest of sorted times, in milliseconds.
#[derive(Debug, Serialize)]
pub(super) struct Percentiles {
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

impl Percentiles {
    fn of(sorted: &[Duration]) -> Percentiles {
        let pct = |p: f64| -> Option<f64> {
            let last = sorted.len().checked_sub(1)?;
            let i = ((last as f64) * p).round() as usize;
            Some(ms(sorted[i]))
        };
        Percentiles {
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            max_ms: pct(1.0),
        }
    }
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What a start phase measured.
#[derive(Debug, Serialize)]
pub(super) struct StartFigures {
    pub(super) served: usize,
    /// From the start (or the kill) to serving.
    pub(super) p50_ms: Option<f64>,
    pub(super) p99_ms: Option<f64>,
    pub(super) max_ms: Option<f64>,
    /// The registry's claim calls alone (in-process nodes).
    pub(super) claim_call: Option<Percentiles>,
    pub(super) within_bound: Option<bool>,
    pub(super) refused: usize,
    /// The first few refusals' reasons.
    pub(super) refusals: Vec<String>,
}

impl StartFigures {
    pub(super) fn text(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} ms"));
        let claims = match &self.claim_call {
            Some(c) => format!(
                " (claim calls p50 {}, p99 {}, max {})",
                f(c.p50_ms),
                f(c.p99_ms),
                f(c.max_ms)
            ),
            None => String::new(),
        };
        format!(
            "{} serving: p50 {}, p99 {}, max {}{claims}; {} refused",
            self.served,
            f(self.p50_ms),
            f(self.p99_ms),
            f(self.max_ms),
            self.refused
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_read_off_the_sorted_times() {
        let starts = Starts {
            took: (1..=100).rev().map(Duration::from_millis).collect(),
            refused: vec!["no".to_owned()],
            claims: None,
        };
        let f = starts.figures(Some(Duration::from_millis(99)));
        assert_eq!(
            (f.p50_ms, f.p99_ms, f.max_ms),
            (Some(51.0), Some(99.0), Some(100.0))
        );
        assert_eq!(f.within_bound, Some(false));
        assert_eq!(f.refused, 1);
    }
}
