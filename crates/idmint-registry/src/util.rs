//! Small helpers the backends share: random bits without a random-number
//! crate, marks in whole milliseconds, and the timeout around a remote call.

use std::future::Future;
use std::hash::{BuildHasher, Hasher, RandomState};
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

#[cfg(test)]
mod tests {
    use super::*;

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
