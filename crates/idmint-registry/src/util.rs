//! Small helpers the backends share: random bits without a random-number
//! crate, random picks of worker IDs to claim, marks in whole milliseconds, and the timeout around a remote call.

use std::collections::HashSet;
use std::future::Future;
use std::hash::{BuildHasher, DefaultHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use jiff::Timestamp;

use crate::error::{RegistryError, Result};

/// 64 random bits, for claim start offsets and lease tokens: std's
/// `RandomState` is seeded from the OS per thread and perturbed per instance;
/// the clock and a counter make each call distinct. Offsets need spread and
/// tokens uniqueness (a collision would let a stale node pass for the new
/// holder, and 128 such bits make that negligible), not secrecy.
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// What a registration again in `epoch` (`WorkerRegistry::register_again`)
/// puts in its new token beside the epoch: 128 bits derived from the
/// holding's old token, the same for every try of that registration. A try
/// whose answer was lost (the call timed out after the store had committed
/// it, seen on a loaded machine just after a PostgreSQL promotion) has left
/// the worker under this token; the next try finds it there and takes it
/// as its own, where a token drawn afresh each time read as another node's
/// lease, and the holder fenced and lost its worker to the hold.
///
/// Only the old token's holder asks with it, and tokens are unique, so no
/// other holding derives the same one. `DefaultHasher::new` has fixed keys:
/// the same input hashes the same within one process, which is all the
/// tries of one registration span.
pub(crate) fn registration_suffix(old_token: &str, epoch: &str) -> String {
    let hash = |salt: u8| {
        let mut h = DefaultHasher::new();
        h.write_u8(salt);
        h.write(old_token.as_bytes());
        h.write_u8(0xff);
        h.write(epoch.as_bytes());
        h.finish()
    };
    format!("{:016x}{:016x}", hash(1), hash(2))
}

/// `ts` in Unix milliseconds, rounded up: a stored mark never understates what
/// the node promised not to pass.
pub(crate) fn ceil_ms(ts: Timestamp) -> i64 {
    let ns = ts.as_nanosecond();
    let ms = ns.div_euclid(1_000_000) + i128::from(ns.rem_euclid(1_000_000) > 0);
    i64::try_from(ms).expect("a jiff timestamp in milliseconds fits an i64")
}

/// Refuses a zero `timeout` named `what` (`timeout`, `connect timeout`):
/// every remote call would time out at once.
pub(crate) fn check_timeout(registry: &'static str, what: &str, timeout: Duration) -> Result<()> {
    if timeout.is_zero() {
        return Err(RegistryError::config(registry, format!("{what} is zero")));
    }
    Ok(())
}

/// Runs `fut`, or fails with [`RegistryError::Timeout`] after `after`.
pub(crate) async fn bounded<T>(
    registry: &'static str,
    operation: &'static str,
    after: Duration,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(after, fut)
        .await
        .unwrap_or(Err(RegistryError::Timeout {
            registry,
            operation,
            after,
        }))
}

/// `n` distinct random numbers below `range` (which is larger than `n`).
pub(crate) fn distinct_below(range: u32, n: u32) -> Vec<u32> {
    let mut picked = Vec::with_capacity(n as usize);
    while picked.len() < n as usize {
        let w = (random_u64() % u64::from(range)) as u32;
        if !picked.contains(&w) {
            picked.push(w);
        }
    }
    picked
}

/// Up to `n` of the numbers below `range` that are not in `held`, drawn at
/// random (a reservoir sample: one pass, no list of every free ID), in random
/// order. Random, not the first free ones from some offset: claimers that
/// all read the same held set would otherwise queue for the same IDs.
pub(crate) fn sample_free(range: u32, held: &HashSet<u32>, n: usize) -> Vec<u32> {
    let mut chosen = Vec::with_capacity(n);
    let mut seen = 0u64;
    for w in (0..range).filter(|w| !held.contains(w)) {
        seen += 1;
        if chosen.len() < n {
            chosen.push(w);
        } else {
            let j = random_u64() % seen;
            if let Some(slot) = chosen.get_mut(j as usize) {
                *slot = w;
            }
        }
    }
    // Shuffle (Fisher-Yates): the reservoir keeps early IDs in order.
    for i in (1..chosen.len()).rev() {
        let j = (random_u64() % (i as u64 + 1)) as usize;
        chosen.swap(i, j);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_distinct_and_in_range() {
        for _ in 0..100 {
            let picked = distinct_below(65, 32);
            assert_eq!(picked.len(), 32);
            assert!(picked.iter().all(|w| *w < 65));
            let set: HashSet<u32> = picked.iter().copied().collect();
            assert_eq!(set.len(), picked.len(), "{picked:?}");
        }
    }

    #[test]
    fn free_workers_are_drawn_from_all_free_ones() {
        let held: HashSet<u32> = (0..1000).filter(|w| w % 10 != 0).collect();
        let mut drawn = HashSet::new();
        for _ in 0..200 {
            let free = sample_free(1000, &held, 4);
            assert_eq!(free.len(), 4);
            assert!(free.iter().all(|w| w % 10 == 0 && *w < 1000), "{free:?}");
            let set: HashSet<u32> = free.iter().copied().collect();
            assert_eq!(set.len(), free.len(), "{free:?}");
            drawn.extend(free);
        }
        // 800 draws from 100 free IDs: all but a few are seen, the late ones too.
        assert!(
            drawn.len() > 90,
            "only {} of 100 free IDs drawn",
            drawn.len()
        );
        assert!(drawn.iter().any(|w| *w > 900), "{drawn:?}");
        // Fewer free than asked for: all of them.
        let held: HashSet<u32> = (0..1000).filter(|w| *w != 500 && *w != 7).collect();
        let mut free = sample_free(1000, &held, 4);
        free.sort_unstable();
        assert_eq!(free, vec![7, 500]);
        assert!(sample_free(3, &(0..3).collect(), 4).is_empty());
    }

    #[test]
    fn marks_round_up_to_the_millisecond() {
        let exact = Timestamp::from_millisecond(1_700_000_000_123).unwrap();
        assert_eq!(ceil_ms(exact), 1_700_000_000_123);
        let past = exact + jiff::SignedDuration::from_nanos(1);
        assert_eq!(ceil_ms(past), 1_700_000_000_124);
        let before_epoch = Timestamp::from_nanosecond(-1_500_000).unwrap();
        assert_eq!(ceil_ms(before_epoch), -1);
        let exact_before = Timestamp::from_nanosecond(-2_000_000).unwrap();
        assert_eq!(ceil_ms(exact_before), -2);
    }

    #[test]
    fn random_bits_differ_between_calls() {
        let a: Vec<u64> = (0..64).map(|_| random_u64()).collect();
        let mut b = a.clone();
        b.sort_unstable();
        b.dedup();
        assert_eq!(b.len(), a.len());
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_calls_time_out_typed() {
        let err = bounded("etcd", "renew", Duration::from_millis(300), async {
            std::future::pending::<Result<()>>().await
        })
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "etcd registry: renew timed out after 300ms"
        );
        assert_eq!(
            bounded("etcd", "renew", Duration::from_millis(300), async { Ok(7) })
                .await
                .unwrap(),
            7
        );
    }
}
