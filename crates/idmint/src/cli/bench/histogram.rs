//! A log-linear latency histogram: no samples kept, so a long run needs no
//! memory for its latencies.

/// A log-linear latency histogram in nanoseconds: exact below 128, then 64
/// buckets per power of two (1/64 relative precision).
#[derive(Debug, Clone)]
pub(super) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    pub(super) max: u64,
}

/// Sub-buckets per power of two, as a shift.
const SUB_BITS: u32 = 6;
const LINEAR: u64 = 2 << SUB_BITS;
const BUCKETS: usize = (LINEAR + (64 - SUB_BITS as u64 - 1) * (1 << SUB_BITS)) as usize;

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        if v < LINEAR {
            return v as usize;
        }
        let exp = 63 - u64::from(v.leading_zeros()); // at least SUB_BITS + 1
        let sub = (v >> (exp - u64::from(SUB_BITS))) & ((1 << SUB_BITS) - 1);
        (LINEAR + (exp - u64::from(SUB_BITS) - 1) * (1 << SUB_BITS) + sub) as usize
    }

    /// The highest value of bucket `idx`.
    fn high(idx: usize) -> u64 {
        let idx = idx as u64;
        if idx < LINEAR {
            return idx;
        }
        let exp = (idx - LINEAR) / (1 << SUB_BITS) + u64::from(SUB_BITS) + 1;
        let sub = (idx - LINEAR) % (1 << SUB_BITS);
        let width = 1u64 << (exp - u64::from(SUB_BITS));
        ((1 << SUB_BITS) + sub)
            .saturating_mul(width)
            .saturating_add(width - 1)
    }

    pub(super) fn record(&mut self, v: u64) {
        self.counts[Histogram::index(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    pub(super) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The value at quantile `q` (0 to 1), as its bucket's highest value,
    /// capped by the largest value seen.
    pub(super) fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (idx, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Histogram::high(idx).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, exact) in [(0.5, 5_000_000u64), (0.99, 9_900_000), (0.999, 9_990_000)] {
            let got = h.quantile(q);
            assert!(
                got >= exact && got <= exact + exact / 32,
                "{q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.quantile(1.0), 10_000_000);
        // Every bucket's high value maps back into it, up to the top.
        for v in [0, 1, 127, 128, 129, 255, 256, 1 << 40, u64::MAX] {
            let idx = Histogram::index(v);
            assert!(idx < BUCKETS, "{v}");
            assert!(Histogram::high(idx) >= v, "{v}");
            assert_eq!(Histogram::index(Histogram::high(idx)), idx, "{v}");
        }
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }
}
