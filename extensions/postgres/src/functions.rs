//! The SQL functions, and each backend's generator over the shared words.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idmint_core::{Error, Layout, Snowflake};
use pgrx::prelude::*;

use crate::error::Failure;
use crate::shared::{self, LEASE_EXPIRED, LEASE_LOST, LEASE_NAMES, LEASE_STOPPED, NO_TIME, Shared};

/// The most IDs `idmint_next_ids` returns in one call.
pub(crate) const MAX_IDS: i32 = 1_000_000;

/// How long a call retries an ID that would pass the mark: the keeper
/// persists ahead (3 s) long before that, so a mark still not raised after
/// this means the registry is failing.
const MARK_WAIT: Duration = Duration::from_millis(200);

/// This backend's generator: built over the shared words for one keeper
/// generation.
struct Local {
    generation: u64,
    generator: Snowflake,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// The configured layout (the same in every process: read in the postmaster).
pub(crate) fn layout() -> Result<Layout, Failure> {
    Ok(crate::settings::settings()?.layout)
}

fn shared_state() -> Result<&'static Shared, Failure> {
    shared::shared().ok_or_else(|| {
        Failure::new(
            "not_ready",
            "idmint is not loaded at server start: add idmint to shared_preload_libraries and restart",
        )
    })
}

/// Sleeps `d` in a way PostgreSQL can cancel.
fn pause(d: Duration) {
    pgrx::check_for_interrupts!();
    // SAFETY: a plain sleep; the interrupt check above and below handles cancels.
    unsafe { pg_sys::pg_usleep(d.as_micros() as std::ffi::c_long) };
    pgrx::check_for_interrupts!();
}

/// Runs `issue` on this backend's generator for the current generation, and
/// keeps the result only if the generation did not change meanwhile (a
/// re-claim's new worker ID must not mix with the old one's words).
fn with_generator<T>(mut issue: impl FnMut(&Snowflake) -> Result<T, Error>) -> Result<T, Failure> {
    // A bad config fails at once, with its own code, not after a wait.
    let settings = crate::settings::settings()?;
    let shared = shared_state()?;
    // Read only once a call has to wait: the path of an ID (a ready
    // generator, an ID below the mark) reads no clock but the generator's.
    let mut started: Option<Instant> = None;
    let mut waited = || started.get_or_insert_with(Instant::now).elapsed();
    loop {
        let generation = shared.generation.load(Ordering::Acquire);
        if generation == 0 {
            if waited() >= crate::READY_WAIT {
                let why = shared.error_code().unwrap_or("not_ready");
                return Err(Failure::new(
                    "not_ready",
                    format!(
                        "idmint's keeper has no worker ID yet after {:?} (last failure: {why}); see the server log",
                        crate::READY_WAIT
                    ),
                ));
            }
            pause(Duration::from_millis(20));
            continue;
        }
        let result = LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            if local.as_ref().is_none_or(|l| l.generation != generation) {
                let node = shared.node.load(Ordering::Acquire);
                let generator = settings
                    .builder((node >> 32) as u32, node as u32)
                    .with_shared_words(&shared.words)
                    .build()?;
                *local = Some(Local {
                    generation,
                    generator,
                });
            }
            let local = local.as_ref().expect("set above");
            Ok::<_, Failure>(issue(&local.generator))
        })?;
        if shared.generation.load(Ordering::Acquire) != generation {
            continue;
        }
        match result {
            Ok(v) => return Ok(v),
            Err(e @ Error::MarkReached { .. }) => {
                let lease = shared.lease.load(Ordering::Acquire);
                if matches!(lease, LEASE_EXPIRED | LEASE_LOST | LEASE_STOPPED) {
                    return Err(Failure::new(
                        "lease_lost",
                        format!(
                            "idmint's worker lease is {}: issuing stopped until the worker is claimed again",
                            LEASE_NAMES[lease as usize]
                        ),
                    ));
                }
                if waited() >= MARK_WAIT {
                    return Err(e.into());
                }
                pause(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The next ID: usable as a column default (`id bigint DEFAULT idmint_next_id()`).
#[pg_extern(volatile)]
fn idmint_next_id() -> i64 {
    match with_generator(|g| g.next_id()) {
        Ok(id) => id.get() as i64,
        Err(f) => f.raise("idmint_next_id"),
    }
}

/// `n` IDs (1 to 1,000,000), each greater than the one before.
#[pg_extern(volatile)]
fn idmint_next_ids(n: i32) -> SetOfIterator<'static, i64> {
    if !(1..=MAX_IDS).contains(&n) {
        Failure::new(
            "invalid_count",
            format!("count {n} is out of range (1..={MAX_IDS})"),
        )
        .raise("idmint_next_ids");
    }
    match with_generator(|g| g.next_ids(n as u64)) {
        Ok(batch) => SetOfIterator::new(batch.iter().map(|id| id.get() as i64).collect::<Vec<_>>()),
        Err(f) => f.raise("idmint_next_ids"),
    }
}

/// A unix-millisecond time as a `timestamptz`.
fn timestamptz_of_ms(ms: i64) -> Option<TimestampWithTimeZone> {
    // PostgreSQL's epoch is 2000-01-01 UTC: 946,684,800 s after Unix's.
    let pg_micros = ms.checked_sub(946_684_800_000)?.checked_mul(1000)?;
    TimestampWithTimeZone::try_from(pg_micros).ok()
}

/// An ID taken apart by the configured layout, as `idmint decode` does.
#[pg_extern(immutable, parallel_safe)]
fn idmint_decode(
    id: i64,
) -> TableIterator<
    'static,
    (
        name!(time, TimestampWithTimeZone),
        name!(datacenter, i32),
        name!(worker, i32),
        name!(sequence, i32),
    ),
> {
    let decoded = layout().and_then(|layout| {
        let raw = u64::try_from(id)
            .map_err(|_| Failure::new("invalid_id", format!("id {id} is negative")))?;
        layout.decode(raw).map_err(Failure::from)
    });
    let decoded = match decoded {
        Ok(d) => d,
        Err(f) => f.raise("idmint_decode"),
    };
    let Some(time) = timestamptz_of_ms(decoded.time.as_millisecond()) else {
        Failure::new(
            "invalid_id",
            format!("id {id}'s time is out of timestamptz's range"),
        )
        .raise("idmint_decode")
    };
    TableIterator::once((
        time,
        decoded.datacenter as i32,
        decoded.worker as i32,
        decoded.sequence as i32,
    ))
}

/// The keeper's claim: the registry, the worker, the lease, the marks.
// pgrx reads the column names from the `name!` items in the signature itself:
// they can't move into a type alias.
#[expect(
    clippy::type_complexity,
    reason = "pgrx's name! columns must be spelled out"
)]
#[pg_extern(volatile)]
fn idmint_status() -> TableIterator<
    'static,
    (
        name!(registry, String),
        name!(datacenter, i32),
        name!(worker, i32),
        name!(lease, String),
        name!(lease_left_ms, Option<i64>),
        name!(mark, Option<TimestampWithTimeZone>),
        name!(persisted_mark, Option<TimestampWithTimeZone>),
        name!(generation, i64),
        name!(last_error, Option<String>),
    ),
> {
    let shared = match shared_state() {
        Ok(s) => s,
        Err(f) => f.raise("idmint_status"),
    };
    let node = shared.node.load(Ordering::Acquire);
    let lease = shared.lease.load(Ordering::Acquire) as usize;
    let left = shared.lease_left_ms.load(Ordering::Acquire);
    let persisted = shared.persisted_ms.load(Ordering::Acquire);
    // The mark backends are allowed up to, read through a generator over the words.
    let mark = layout()
        .ok()
        .and_then(|l| {
            Snowflake::builder(l)
                .with_shared_words(&shared.words)
                .build()
                .ok()
        })
        .and_then(|g| g.mark())
        .filter(|m| m.as_millisecond() > 0)
        .and_then(|m| timestamptz_of_ms(m.as_millisecond()));
    TableIterator::once((
        shared::REGISTRIES
            .get(shared.registry.load(Ordering::Acquire) as usize)
            .copied()
            .unwrap_or("file")
            .to_owned(),
        (node >> 32) as i32,
        node as u32 as i32,
        LEASE_NAMES
            .get(lease)
            .copied()
            .unwrap_or("unknown")
            .to_owned(),
        (left >= 0).then_some(left),
        mark,
        (persisted != NO_TIME)
            .then(|| timestamptz_of_ms(persisted))
            .flatten(),
        shared.generation.load(Ordering::Acquire) as i64,
        shared.error_code().map(str::to_owned),
    ))
}
