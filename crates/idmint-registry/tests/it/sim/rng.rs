//! The simulation's randomness: every choice comes from the seed.
//!
//! Two kinds. The driver draws from one [`Rng`] stream in a fixed order (which
//! node fails next, how, for how long). The registry decides each call's fault
//! with [`mix`] over the call's coordinates (seed, node, incarnation, operation,
//! the caller's simulated time), not from a stream: whether a call fails then
//! does not depend on how many calls came before it, so a task woken once more
//! or once less (tokio's `select!` picks among ready branches at random) cannot
//! shift every later fault of the run.

use std::time::Duration;

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};

/// A stream of random numbers from a seed.
#[derive(Debug, Clone)]
pub struct Rng(Xoshiro256PlusPlus);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(Xoshiro256PlusPlus::seed_from_u64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        below(self.next_u64(), n)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        unit(self.next_u64()) < p
    }

    /// A duration uniform in `lo..hi`.
    pub fn uniform(&mut self, lo: Duration, hi: Duration) -> Duration {
        uniform(self.next_u64(), lo, hi)
    }

    /// A duration whose logarithm is uniform in `lo..hi`: as many 5 ms steps as
    /// 5 s and 5 h ones.
    pub fn log_uniform(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (a, b) = (lo.as_secs_f64().ln(), hi.as_secs_f64().ln());
        Duration::from_secs_f64((a + unit(self.next_u64()) * (b - a)).exp())
    }

    /// One of `weights.len()` choices, each as likely as its weight.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut pick = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if pick < u64::from(w) {
                return i;
            }
            pick -= u64::from(w);
        }
        unreachable!("pick is below the total")
    }
}

/// One well-mixed number from `parts`: the same parts give the same number on
/// every run and every machine.
pub fn mix(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5eed_1dc0_ffee, |acc, &p| {
        Xoshiro256PlusPlus::seed_from_u64(acc ^ p.rotate_left(17)).next_u64()
    })
}

/// `x` as a fraction in `0..1`.
pub fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// `x` scaled into `0..n` (`n > 0`; the bias is below 2^-64 · n).
pub fn below(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

/// `x` as a duration uniform in `lo..hi`.
pub fn uniform(x: u64, lo: Duration, hi: Duration) -> Duration {
    lo + (hi - lo).mul_f64(unit(x))
}
