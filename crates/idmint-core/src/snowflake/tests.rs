//! Tests that try to make the snowflake generator repeat an ID or go backwards.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;

use super::*;
use crate::clock::{ManualClock, MonotonicClock};

const MS: Duration = Duration::from_millis(1);
/// 2026-11-21T00:00:00Z, well inside every preset's range but Baidu's.
const T0_MS: i64 = 1_795_219_200_000;

fn clock() -> ManualClock {
    ManualClock::at_millis(T0_MS)
}

fn build(
    layout: Layout,
    clock: &ManualClock,
    f: impl FnOnce(SnowflakeBuilder) -> SnowflakeBuilder,
) -> Snowflake {
    f(Snowflake::builder(layout)
        .with_worker(5)
        .with_clock(Arc::new(clock.clone())))
    .build()
    .unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn hours(n: u64) -> Duration {
    Duration::from_secs(3600 * n)
}

/// Every policy worth stressing, with a layout that supports it.
fn policies() -> Vec<(&'static str, Layout, ClockBehind, SequenceExhausted)> {
    let rollback: Layout = "leaf,rollback=2".parse().unwrap();
    vec![
        (
            "fail+wait",
            Layout::LEAF,
            ClockBehind::Fail,
            SequenceExhausted::Wait,
        ),
        (
            "wait+wait",
            Layout::LEAF,
            ClockBehind::Wait { max: ms(5) },
            SequenceExhausted::Wait,
        ),
        (
            "borrow+wait",
            Layout::LEAF,
            ClockBehind::Borrow { max_lead: ms(10) },
            SequenceExhausted::Wait,
        ),
        (
            "fail+borrow",
            Layout::LEAF,
            ClockBehind::Fail,
            SequenceExhausted::Borrow { max_lead: ms(3) },
        ),
        (
            "rollback-bits",
            rollback,
            ClockBehind::RollbackBits,
            SequenceExhausted::Wait,
        ),
        (
            "history",
            Layout::LEAF,
            ClockBehind::History { ticks: 64 },
            SequenceExhausted::Wait,
        ),
        (
            "history+borrow",
            Layout::LEAF,
            ClockBehind::History { ticks: 64 },
            SequenceExhausted::Borrow { max_lead: ms(2) },
        ),
    ]
}

fn is_monotonic_policy(p: ClockBehind) -> bool {
    !matches!(p, ClockBehind::RollbackBits | ClockBehind::History { .. })
}

#[test]
fn ids_increase_and_carry_the_node() {
    let c = clock();
    let g = Snowflake::builder(Layout::TWITTER)
        .with_datacenter(3)
        .with_worker(17)
        .with_clock(Arc::new(c.clone()))
        .build()
        .unwrap();
    let mut last = None;
    for i in 0..10_000u64 {
        if i % 1000 == 0 {
            c.advance(Duration::from_micros(700));
        }
        let id = g.next_id().unwrap();
        assert!(Some(id) > last);
        last = Some(id);
        let d = Layout::TWITTER.decode(id.get()).unwrap();
        assert_eq!((d.datacenter, d.worker, d.rollback), (3, 17, 0));
        assert!(d.time.as_millisecond() <= c.now_nanos() / 1_000_000);
    }
}

#[test]
fn exhaustion_wait_moves_to_the_next_tick_only_when_the_clock_does() {
    let c = clock();
    let g = build(Layout::TWITTER, &c, |b| b);
    let first = Layout::TWITTER.decode(g.next_id().unwrap().get()).unwrap();
    for _ in 1..4096 {
        g.next_id().unwrap();
    }
    assert_eq!(
        c.now_nanos(),
        T0_MS * 1_000_000,
        "a tick's 4096 IDs need no wait"
    );
    let next = Layout::TWITTER.decode(g.next_id().unwrap().get()).unwrap();
    assert_eq!(next.tick, first.tick + 1);
    assert_eq!(next.sequence, 0);
    assert!(
        c.now_nanos() >= (T0_MS + 1) * 1_000_000,
        "the wait moved the clock to the next tick"
    );
    assert_eq!(g.stats().exhaustion_waits, 1);
    assert_eq!(g.lead(), Duration::ZERO);
}

#[test]
fn exhaustion_borrow_runs_ahead_within_the_bound_then_waits() {
    let c = clock();
    c.set_auto_advance(true);
    let g = build(Layout::TWITTER, &c, |b| {
        b.with_sequence_exhausted(SequenceExhausted::Borrow { max_lead: ms(2) })
    });
    let start = c.now_nanos();
    for _ in 0..3 * 4096 {
        g.next_id().unwrap();
    }
    assert_eq!(
        c.now_nanos(),
        start,
        "ticks +1 and +2 were borrowed, not waited for"
    );
    assert_eq!(g.lead(), ms(2));
    let id = g.next_id().unwrap();
    assert_eq!(
        Layout::TWITTER.decode(id.get()).unwrap().tick,
        Layout::TWITTER
            .tick_at(Timestamp::from_millisecond(T0_MS).unwrap())
            .unwrap()
            + 3
    );
    assert!(
        c.now_nanos() > start,
        "the fourth tick had to be waited for"
    );
}

#[test]
fn fail_policy_refuses_any_step_back_and_recovers() {
    let c = clock();
    let g = build(Layout::LEAF, &c, |b| b.with_clock_behind(ClockBehind::Fail));
    let before = g.next_id().unwrap();
    c.advance(ms(3));
    let high = g.next_id().unwrap();
    for back in [ms(1), ms(5), hours(1)] {
        c.step_back(back);
        let err = g.next_id().unwrap_err();
        assert!(
            matches!(err, Error::ClockBehind { policy: "fail", .. }),
            "{err}"
        );
        assert!(err.is_transient());
        c.advance(back);
    }
    c.advance(MS);
    let after = g.next_id().unwrap();
    assert!(before < high && high < after);
}

#[test]
fn wait_policy_waits_out_small_steps_and_fails_big_ones() {
    let c = clock();
    let g = build(Layout::LEAF, &c, |b| {
        b.with_clock_behind(ClockBehind::Wait { max: ms(5) })
    });
    c.advance(ms(10));
    let high = g.next_id().unwrap();
    for back in [ms(1), ms(5)] {
        c.step_back(back);
        let id = g.next_id().unwrap();
        assert!(id > high);
    }
    assert_eq!(g.stats().clock_behind_waits, 2);
    c.step_back(hours(1));
    let t = c.now_nanos();
    let err = g.next_id().unwrap_err();
    assert!(
        matches!(err, Error::ClockBehind { policy: "wait", .. }),
        "{err}"
    );
    assert_eq!(
        c.now_nanos(),
        t,
        "a step beyond the bound is not waited for"
    );
}

/// A manual clock whose waits wake up to 100 µs early, as real sleeps do.
#[derive(Debug)]
struct EarlyWaker(ManualClock);

impl Clock for EarlyWaker {
    fn now_nanos(&self) -> i64 {
        self.0.now_nanos()
    }

    fn wait(&self, d: Duration) {
        self.0.advance(d - (d / 2).min(Duration::from_micros(100)));
    }
}

#[test]
fn wait_policy_absorbs_a_step_of_exactly_its_bound_with_early_wakes() {
    let c = clock();
    let g = Snowflake::builder(Layout::LEAF)
        .with_worker(5)
        .with_clock(Arc::new(EarlyWaker(c.clone())))
        .with_clock_behind(ClockBehind::Wait { max: ms(5) })
        .build()
        .unwrap();
    c.advance(ms(10));
    let high = g.next_id().unwrap();
    c.step_back(ms(5));
    // Counting the time asked for, not the time that passed, charged the
    // 100 µs left after the first wake twice and failed this step.
    let id = g.next_id().unwrap();
    assert!(id > high);
    c.step_back(ms(6));
    assert!(matches!(
        g.next_id().unwrap_err(),
        Error::ClockBehind { policy: "wait", .. }
    ));
}

#[test]
fn borrow_policy_issues_from_the_last_logical_time_within_the_bound() {
    let c = clock();
    let g = build(Layout::LEAF, &c, |b| {
        b.with_clock_behind(ClockBehind::Borrow { max_lead: ms(10) })
    });
    c.advance(ms(20));
    let high = g.next_id().unwrap();
    let high_tick = Layout::LEAF.decode(high.get()).unwrap().tick;
    c.step_back(ms(5));
    let t = c.now_nanos();
    let id = g.next_id().unwrap();
    assert!(id > high);
    assert_eq!(
        Layout::LEAF.decode(id.get()).unwrap().tick,
        high_tick,
        "issued at the last logical time"
    );
    assert_eq!(c.now_nanos(), t, "no waiting");
    assert_eq!(g.lead(), ms(5));
    c.step_back(hours(1));
    let err = g.next_id().unwrap_err();
    assert!(
        matches!(
            err,
            Error::ClockBehind {
                policy: "borrow",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn borrow_policy_stops_at_the_bound_when_the_sequence_runs_out() {
    let c = clock();
    c.set_auto_advance(false);
    let g = build(Layout::LEAF, &c, |b| {
        b.with_clock_behind(ClockBehind::Borrow { max_lead: ms(10) })
    });
    c.advance(ms(20));
    g.next_id().unwrap();
    c.step_back(ms(10));
    // Plenty of IDs left at the last logical tick; using them all up means the
    // next tick would be 11 ms ahead: the exhaustion policy (wait) applies.
    for _ in 1..4096 {
        g.next_id().unwrap();
    }
    c.set_auto_advance(true);
    let t = c.now_nanos();
    g.next_id().unwrap();
    assert!(
        c.now_nanos() >= t + 10 * 1_000_000,
        "waited for the clock instead of borrowing past the bound"
    );
}

#[test]
fn rollback_bits_issue_fresh_ids_in_a_repeated_time_range() {
    let layout: Layout = "leaf,rollback=2".parse().unwrap();
    let c = clock();
    let g = build(layout, &c, |b| {
        b.with_clock_behind(ClockBehind::RollbackBits)
    });
    let mut seen = HashSet::new();
    let issue = |seen: &mut HashSet<Id>, n: usize| {
        for _ in 0..n {
            assert!(seen.insert(g.next_id().unwrap()), "duplicate");
        }
    };
    issue(&mut seen, 100);
    c.advance(ms(5));
    issue(&mut seen, 100);
    for (i, back) in [ms(1), ms(5), hours(1)].into_iter().enumerate() {
        c.step_back(back);
        let id = g.next_id().unwrap();
        assert!(seen.insert(id));
        let d = layout.decode(id.get()).unwrap();
        assert_eq!(d.rollback as usize, i + 1);
        assert_eq!(
            d.time.as_millisecond(),
            c.now_nanos() / 1_000_000,
            "issued at the clock's time"
        );
        issue(&mut seen, 50);
        c.advance(back);
    }
    assert_eq!(g.stats().rollbacks, 3);
    // Counter 3 is in use at T0+5ms now; counter 0 was used up to T0+5ms too.
    // Stepping back to T0, where all four counter values have issued IDs, must
    // fail rather than repeat.
    issue(&mut seen, 10);
    c.set_nanos(T0_MS * 1_000_000);
    let err = g.next_id().unwrap_err();
    assert!(
        matches!(err, Error::RollbackExhausted { counters: 4, .. }),
        "{err}"
    );
    // Once the clock is past what counter 3 issued, it carries on.
    c.set_nanos((T0_MS + 6) * 1_000_000);
    let id = g.next_id().unwrap();
    assert!(seen.insert(id));
}

#[test]
fn rollback_bits_after_a_restart_never_reuse_counters_below_the_mark() {
    // The run before the restart may have used every counter value up to the
    // mark; its table is gone, so a rollback below the mark must fail.
    let layout: Layout = "leaf,rollback=2".parse().unwrap();
    let c = clock();
    let mark = Timestamp::from_millisecond(T0_MS).unwrap();
    c.advance(ms(10));
    let g = build(layout, &c, |b| {
        b.with_clock_behind(ClockBehind::RollbackBits)
            .with_start_after(mark)
    });
    let first = g.next_id().unwrap();
    assert!(layout.decode(first.get()).unwrap().time > mark);
    c.step_back(ms(15));
    let err = g.next_id().unwrap_err();
    assert!(matches!(err, Error::RollbackExhausted { .. }), "{err}");
    // A rollback that stays above the mark is fine.
    c.advance(ms(12));
    let id = g.next_id().unwrap();
    let d = layout.decode(id.get()).unwrap();
    assert!(d.time > mark && d.rollback == 1, "{d:?}");
}

#[test]
fn history_reuses_unspent_sequence_numbers_of_recent_ticks() {
    let c = clock();
    let g = build(Layout::LEAF, &c, |b| {
        b.with_clock_behind(ClockBehind::History { ticks: 16 })
    });
    let mut seen = HashSet::new();
    for _ in 0..10 {
        for _ in 0..10 {
            assert!(seen.insert(g.next_id().unwrap()));
        }
        c.advance(MS);
    }
    // The clock is now 10 ms past the first tick; step back 3 ms into the ring.
    let _ = g.next_id().unwrap();
    c.step_back(ms(3));
    let id = g.next_id().unwrap();
    let d = Layout::LEAF.decode(id.get()).unwrap();
    assert_eq!(d.time.as_millisecond(), c.now_nanos() / 1_000_000);
    assert_eq!(d.sequence, 10, "the first unspent number of that tick");
    assert!(seen.insert(id));
    for _ in 0..5000 {
        assert!(seen.insert(g.next_id().unwrap()), "duplicate from the ring");
    }
    assert!(g.stats().history_reuses >= 5000);
    // Beyond the window: fail, never guess.
    c.step_back(hours(1));
    assert!(matches!(
        g.next_id(),
        Err(Error::ClockBehind {
            policy: "history",
            ..
        })
    ));
}

#[test]
fn forward_jump_then_return_is_handled_by_each_policy() {
    for (name, layout, policy, exhausted) in policies() {
        let c = clock();
        let g = build(layout, &c, |b| {
            b.with_clock_behind(policy)
                .with_sequence_exhausted(exhausted)
        });
        let mut seen = HashSet::new();
        let a = g.next_id().unwrap();
        seen.insert(a);
        c.advance(hours(1));
        let b = g.next_id().unwrap();
        assert!(b > a && seen.insert(b), "{name}");
        assert!(
            layout.decode(b.get()).unwrap().time.as_millisecond()
                - layout.decode(a.get()).unwrap().time.as_millisecond()
                >= 3_600_000
        );
        // The jump is undone (NTP corrects it): an hour back.
        c.step_back(hours(1));
        match g.next_id() {
            Ok(id) => assert!(seen.insert(id), "{name}: duplicate after the return"),
            Err(e) => assert!(e.is_transient(), "{name}: {e}"),
        }
    }
}

#[test]
fn random_sequence_start_spreads_low_digits() {
    let c = clock();
    let g = build(Layout::LEAF, &c, |b| {
        b.with_sequence_start(SequenceStart::Random { below: 100 })
            .with_seed(7)
    });
    let mut starts = HashSet::new();
    for _ in 0..200 {
        let d = Layout::LEAF.decode(g.next_id().unwrap().get()).unwrap();
        assert!(d.sequence < 100);
        starts.insert(d.sequence);
        c.advance(MS);
    }
    assert!(starts.len() > 50, "starts should vary: {}", starts.len());
}

#[test]
fn mark_bounds_issuing_and_start_after_starts_above_it() {
    let c = clock();
    let mark = Timestamp::from_millisecond(T0_MS + 10).unwrap();
    let g = build(Layout::LEAF, &c, |b| b.with_mark(mark));
    assert_eq!(
        g.mark(),
        Some(
            Timestamp::from_millisecond(T0_MS + 10).unwrap()
                + jiff::SignedDuration::from_nanos(999_999)
        )
    );
    g.next_id().unwrap();
    c.advance(ms(10));
    g.next_id().unwrap();
    c.advance(MS);
    let err = g.next_id().unwrap_err();
    assert!(matches!(err, Error::MarkReached { .. }), "{err}");
    g.advance_mark(Timestamp::from_millisecond(T0_MS + 100).unwrap());
    g.advance_mark(mark); // moving it back is ignored
    let id = g.next_id().unwrap();
    assert_eq!(
        Layout::LEAF.decode(id.get()).unwrap().time.as_millisecond(),
        T0_MS + 11
    );

    // A restart whose clock is 2 s behind the recorded mark.
    let recorded = Timestamp::from_millisecond(T0_MS + 2000).unwrap();
    let strict = build(Layout::LEAF, &c, |b| b.with_start_after(recorded));
    assert!(
        matches!(strict.next_id(), Err(Error::ClockBehind { .. })),
        "wait bound is 5 ms"
    );
    let borrowing = build(Layout::LEAF, &c, |b| {
        b.with_start_after(recorded)
            .with_clock_behind(ClockBehind::Borrow {
                max_lead: Duration::from_secs(3),
            })
    });
    let id = borrowing.next_id().unwrap();
    assert!(
        Layout::LEAF.decode(id.get()).unwrap().time > recorded,
        "starts strictly above the mark"
    );
}

#[test]
fn exhausted_layout_refuses_and_early_clock_is_an_error() {
    let c = clock();
    let g = build(Layout::BAIDU, &c, |b| b);
    let err = g.next_id().unwrap_err();
    assert!(matches!(err, Error::LayoutExhausted { .. }));
    assert!(err.to_string().contains("2024-11-20T13:24:16Z"), "{err}");
    assert!(!err.is_transient());
    let late: Layout = "twitter,epoch=2030-01-01".parse().unwrap();
    let g = build(late, &c, |b| b);
    assert!(matches!(g.next_id(), Err(Error::ClockBeforeEpoch { .. })));
}

#[test]
fn bad_configs_are_rejected() {
    let b = || Snowflake::builder(Layout::LEAF);
    assert!(matches!(
        b().with_worker(1024).build(),
        Err(Error::NodeOutOfRange {
            field: "worker",
            value: 1024,
            max: 1023
        })
    ));
    assert!(matches!(
        b().with_datacenter(1).build(),
        Err(Error::NodeOutOfRange {
            field: "datacenter",
            ..
        })
    ));
    assert!(matches!(
        b().with_clock_behind(ClockBehind::RollbackBits).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        b().with_clock_behind(ClockBehind::History { ticks: 0 })
            .build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        b().with_clock_behind(ClockBehind::Wait {
            max: Duration::ZERO
        })
        .build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        b().with_sequence_start(SequenceStart::Random { below: 4097 })
            .build(),
        Err(Error::InvalidConfig(_))
    ));
    let far = Timestamp::from_second(4_000_000_000).unwrap();
    assert!(matches!(
        Snowflake::builder(Layout::BAIDU)
            .with_start_after(far)
            .build(),
        Err(Error::LayoutExhausted { .. })
    ));
}

#[test]
fn batch_borrows_ahead_in_one_step() {
    let c = clock();
    let g = build(Layout::TWITTER, &c, |b| {
        b.with_sequence_exhausted(SequenceExhausted::Borrow {
            max_lead: Duration::from_secs(1),
        })
    });
    let before = g.next_id().unwrap();
    let batch = g.next_ids(100_000).unwrap();
    assert_eq!(batch.len(), 100_000);
    assert_eq!(batch.runs().len(), 25, "4095 + 23 * 4096 + the rest");
    assert!(batch.runs().iter().all(|r| r.stride() == 1));
    let ids: Vec<Id> = batch.iter().collect();
    assert_eq!(ids.len(), 100_000);
    assert!(ids[0] > before);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(c.now_nanos(), T0_MS * 1_000_000, "no waiting");
    let after = g.next_id().unwrap();
    assert!(after > *ids.last().unwrap());
}

#[test]
fn batch_without_borrowing_waits_tick_by_tick() {
    let c = clock();
    let g = build(Layout::SONYFLAKE, &c, |b| b);
    let batch = g.next_ids(1000).unwrap();
    assert_eq!(batch.len(), 1000);
    assert_eq!(
        batch.runs()[0].stride(),
        1 << 16,
        "sonyflake's sequence sits above the machine bits"
    );
    let ids: Vec<Id> = batch.iter().collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        c.now_nanos() >= (T0_MS + 30) * 1_000_000,
        "four 10 ms ticks of 256"
    );
    for id in ids {
        assert_eq!(Layout::SONYFLAKE.decode(id.get()).unwrap().worker, 5);
    }
}

#[test]
fn batch_counts_out_of_range_are_rejected() {
    let c = clock();
    let g = build(Layout::TWITTER, &c, |b| b);
    assert!(matches!(
        g.next_ids(0),
        Err(Error::InvalidCount { count: 0, .. })
    ));
    assert!(matches!(
        g.next_ids(1_000_000_000_000),
        Err(Error::InvalidCount { .. })
    ));
    let next = g.next_id().unwrap();
    assert_eq!(
        Layout::TWITTER.decode(next.get()).unwrap().sequence,
        0,
        "a refused batch used nothing"
    );
}

/// Two threads share one generator while a third moves the clock back and
/// forth; every policy must hand out 2 × 1,000,000 distinct IDs, each thread's
/// strictly increasing where the policy promises order.
#[test]
fn two_threads_a_million_ids_each_under_a_chaotic_clock() {
    for (name, layout, policy, exhausted) in policies() {
        let c = clock();
        let g = Arc::new(build(layout, &c, |b| {
            b.with_clock_behind(policy)
                .with_sequence_exhausted(exhausted)
        }));
        let done = Arc::new(AtomicBool::new(false));
        let chaos = {
            let (c, done) = (c.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = 0x2545_F491_4F6C_DD1Du64;
                while !done.load(StdOrdering::Relaxed) {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    match rng % 8 {
                        0 => c.step_back(Duration::from_micros(rng % 6000)),
                        1 => c.advance(Duration::from_micros(rng % 20_000)),
                        _ => c.advance(Duration::from_micros(rng % 1500)),
                    }
                    std::thread::yield_now();
                }
            })
        };
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let mut ids = Vec::with_capacity(1_000_000);
                    let mut errors = 0u64;
                    while ids.len() < 1_000_000 {
                        match g.next_id() {
                            Ok(id) => ids.push(id.get()),
                            Err(e) => {
                                assert!(e.is_transient(), "{e}");
                                errors += 1;
                            }
                        }
                    }
                    (ids, errors)
                })
            })
            .collect();
        let results: Vec<(Vec<u64>, u64)> =
            workers.into_iter().map(|w| w.join().unwrap()).collect();
        done.store(true, StdOrdering::Relaxed);
        chaos.join().unwrap();
        if is_monotonic_policy(policy) {
            for (ids, _) in &results {
                assert!(
                    ids.windows(2).all(|w| w[0] < w[1]),
                    "{name}: a thread saw IDs go backwards"
                );
            }
        }
        let mut all: Vec<u64> = results
            .iter()
            .flat_map(|(ids, _)| ids.iter().copied())
            .collect();
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        assert_eq!(all.len(), n, "{name}: {} duplicates", n - all.len());
    }
}

/// The same two threads on the real monotonic clock: the steady state.
#[test]
fn two_threads_a_million_ids_each_on_the_real_clock() {
    for (name, layout, policy, exhausted) in policies() {
        let g = Arc::new(
            Snowflake::builder(layout)
                .with_clock(Arc::new(MonotonicClock::new()))
                .with_clock_behind(policy)
                .with_sequence_exhausted(exhausted)
                .build()
                .unwrap(),
        );
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    (0..1_000_000)
                        .map(|_| g.next_id().unwrap().get())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in threads {
            let ids = t.join().unwrap();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{name}");
            all.extend(ids);
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2_000_000, "{name}");
    }
}

#[derive(Debug, Clone)]
enum Op {
    Next,
    Batch(u64),
    Advance(u64),
    Back(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Next),
        1 => (1u64..3000).prop_map(Op::Batch),
        2 => (0u64..5_000).prop_map(Op::Advance),
        1 => (0u64..8_000).prop_map(Op::Back),
    ]
}

fn policy_index() -> impl Strategy<Value = usize> {
    0..policies().len()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any interleaving of issuing and clock moves (in microseconds) under any
    /// policy: no duplicate, ever; order where the policy promises it.
    #[test]
    fn no_sequence_of_clock_moves_makes_a_duplicate(idx in policy_index(), ops in proptest::collection::vec(op(), 1..300), random_start in any::<bool>()) {
        let (_, layout, policy, exhausted) = policies()[idx];
        let c = clock();
        let start = if random_start { SequenceStart::Random { below: 100 } } else { SequenceStart::Zero };
        let g = build(layout, &c, |b| b.with_clock_behind(policy).with_sequence_exhausted(exhausted).with_sequence_start(start));
        let mut seen = HashSet::new();
        let mut last: Option<Id> = None;
        for op in ops {
            let issued: Vec<Id> = match op {
                Op::Next => g.next_id().map(|id| vec![id]).unwrap_or_default(),
                Op::Batch(n) => g.next_ids(n).map(|b| b.iter().collect()).unwrap_or_default(),
                Op::Advance(us) => { c.advance(Duration::from_micros(us)); vec![] }
                Op::Back(us) => { c.step_back(Duration::from_micros(us)); vec![] }
            };
            for id in issued {
                prop_assert!(seen.insert(id), "duplicate {id}");
                if is_monotonic_policy(policy) {
                    prop_assert!(Some(id) > last, "went backwards: {id} after {last:?}");
                }
                last = Some(id);
            }
        }
    }
}

#[test]
fn retract_mark_stops_new_ticks_at_once_and_advance_resumes() {
    let c = clock();
    let far = Timestamp::from_millisecond(T0_MS + 1000).unwrap();
    let g = build(Layout::LEAF, &c, |b| b.with_mark(far));
    let before = g.next_id().unwrap();

    // Lowering to a time before the epoch stops every new tick.
    g.retract_mark(Timestamp::MIN);
    c.advance(MS);
    assert!(matches!(g.next_id(), Err(Error::MarkReached { .. })));
    assert!(g.mark().unwrap() < Timestamp::from_millisecond(T0_MS).unwrap());

    // Retracting never raises: a later time than the current mark is ignored.
    g.retract_mark(far);
    assert!(matches!(g.next_ids(3), Err(Error::MarkReached { .. })));

    // Advancing raises it again; IDs go on above the ones before.
    g.advance_mark(far);
    let after = g.next_id().unwrap();
    assert!(after > before);

    // A retract to a time ahead of the clock bounds issuing there.
    g.retract_mark(Timestamp::from_millisecond(T0_MS + 5).unwrap());
    c.advance(ms(4));
    g.next_id().unwrap();
    c.advance(ms(1));
    let err = g.next_id().unwrap_err();
    assert!(matches!(err, Error::MarkReached { .. }), "{err}");

    // Unbounded generators ignore it, as they ignore `advance_mark`.
    let free = build(Layout::LEAF, &c, |b| b);
    free.retract_mark(Timestamp::MIN);
    assert_eq!(free.mark(), None);
    free.next_id().unwrap();
}

/// The highest tick among `ids`, as a time: what `seal` must cover.
fn latest_tick_end(layout: &Layout, ids: &HashSet<Id>) -> Timestamp {
    let latest = ids
        .iter()
        .map(|id| layout.decode(id.get()).unwrap().time)
        .max()
        .unwrap();
    latest
        .checked_add(jiff::SignedDuration::try_from(layout.unit()).unwrap())
        .unwrap()
        .checked_sub(jiff::SignedDuration::from_nanos(1))
        .unwrap()
}

#[test]
fn seal_returns_the_last_issued_tick_and_stops_for_good() {
    for (name, layout, policy, exhausted) in policies() {
        let c = clock();
        let g = build(layout, &c, |b| {
            b.with_clock_behind(policy)
                .with_sequence_exhausted(exhausted)
                .with_mark(Timestamp::from_millisecond(T0_MS + 10_000).unwrap())
        });
        let mut seen = HashSet::new();
        for step in 0..20 {
            for _ in 0..50 {
                assert!(seen.insert(g.next_id().unwrap()), "{name}: duplicate");
            }
            if step % 5 == 4 && policy != ClockBehind::Fail {
                // Back, so rollback-bits and history issue below the last tick.
                c.step_back(ms(3));
            } else {
                c.advance(ms(2));
            }
        }
        c.advance(ms(40));
        let high = g.seal();
        assert_eq!(high, latest_tick_end(&layout, &seen), "{name}");
        assert!(g.next_id().is_err(), "{name}: issued after the seal");
        assert!(g.next_ids(3).is_err(), "{name}: batch after the seal");
        assert_eq!(g.seal(), high, "{name}: a second seal moves nothing");
        // The next holder starts above it and repeats nothing, even with its
        // clock behind (it waits, or follows its policy, from there).
        let next = build(layout, &c, |b| {
            b.with_clock_behind(policy)
                .with_sequence_exhausted(exhausted)
                .with_start_after(high)
        });
        for _ in 0..100 {
            let id = next.next_id().unwrap();
            assert!(!seen.contains(&id), "{name}: the next holder repeated {id}");
            assert!(
                layout.decode(id.get()).unwrap().time > high,
                "{name}: {id} is not above the seal"
            );
        }
    }
}

#[test]
fn seal_of_a_generator_that_issued_nothing_is_its_start() {
    let c = clock();
    let start = Timestamp::from_millisecond(T0_MS - 500).unwrap();
    let g = build(Layout::LEAF, &c, |b| b.with_start_after(start));
    let high = g.seal();
    assert_eq!(high.as_millisecond(), T0_MS - 500, "{high}");
    assert!(high < Timestamp::from_millisecond(T0_MS - 499).unwrap());
}

#[test]
fn seal_stops_an_unbounded_generator_too() {
    let c = clock();
    let g = build(Layout::TWITTER, &c, |b| b);
    let id = g.next_id().unwrap();
    let high = g.seal();
    assert_eq!(high.as_millisecond(), T0_MS);
    assert!(high > Layout::TWITTER.decode(id.get()).unwrap().time);
    assert!(g.next_id().is_err());
}

#[test]
fn seal_under_load_counts_every_id_taken_and_nothing_after() {
    // Threads issue on the real clock while another seals: every ID they got
    // must be at or below the sealed time, and none may come after.
    for exhausted in [
        SequenceExhausted::Wait,
        SequenceExhausted::Borrow { max_lead: ms(5) },
    ] {
        let g = Arc::new(
            Snowflake::builder(Layout::TWITTER)
                .with_worker(3)
                .with_sequence_exhausted(exhausted)
                .with_mark(Timestamp::now() + jiff::SignedDuration::from_secs(60))
                .build()
                .unwrap(),
        );
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    let mut refused = 0;
                    while refused < 1000 {
                        let got = if i == 0 {
                            g.next_ids(7).map(|b| b.iter().collect::<Vec<_>>())
                        } else {
                            g.next_id().map(|id| vec![id])
                        };
                        match got {
                            Ok(ids) => {
                                // The mark is a minute ahead: only the seal
                                // makes it refuse, and nothing passes after.
                                assert_eq!(refused, 0, "issued after the seal refused");
                                mine.extend(ids);
                            }
                            Err(Error::MarkReached { .. }) => refused += 1,
                            // A thread that read the clock, then waited for
                            // the CPU while others borrowed ahead, may find
                            // itself behind: the clock policy's answer.
                            Err(_) => {}
                        }
                    }
                    mine
                })
            })
            .collect();
        std::thread::sleep(ms(30));
        let high = g.seal();
        let mut all = Vec::new();
        for t in threads {
            all.extend(t.join().unwrap());
        }
        assert!(!all.is_empty());
        let latest = all
            .iter()
            .map(|id| Layout::TWITTER.decode(id.get()).unwrap().time)
            .max()
            .unwrap();
        assert!(latest <= high, "{latest} issued past the seal {high}");
        assert!(g.next_id().is_err());
    }
}

/// Shared words, as a process's shared memory would hold them.
fn leaked_words() -> &'static SnowflakeWords {
    Box::leak(Box::new(SnowflakeWords::new()))
}

#[test]
fn generators_over_shared_words_issue_no_id_twice() {
    let words = leaked_words();
    let clock = MonotonicClock::new();
    let mark = Timestamp::from_millisecond(clock.now_nanos() / 1_000_000 + 60_000).unwrap();
    let make = || {
        Snowflake::builder(Layout::TWITTER)
            .with_worker(5)
            .with_shared_words(words)
            .with_mark(mark)
            .build()
            .unwrap()
    };
    let (a, b) = (Arc::new(make()), Arc::new(make()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let g = if t % 2 == 0 { a.clone() } else { b.clone() };
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(20_000);
                for i in 0..10_000 {
                    let id = g.next_id().unwrap().get();
                    assert!(ids.last().is_none_or(|&last| id > last));
                    ids.push(id);
                    if i % 1000 == 0 {
                        ids.extend(g.next_ids(3).unwrap().iter().map(|id| id.get()));
                    }
                }
                ids
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for t in threads {
        for id in t.join().unwrap() {
            assert!(seen.insert(id), "{id} issued twice");
        }
    }
}

#[test]
fn shared_words_issue_nothing_until_a_mark_and_obey_any_generators_mark() {
    let words = leaked_words();
    let c = clock();
    let a = build(Layout::TWITTER, &c, |b| b.with_shared_words(words));
    let b = build(Layout::TWITTER, &c, |b| b.with_shared_words(words));
    assert_eq!(a.mark(), b.mark());
    assert!(matches!(a.next_id(), Err(Error::MarkReached { .. })));
    let now = Timestamp::from_millisecond(T0_MS).unwrap();
    b.advance_mark(now + jiff::SignedDuration::from_secs(3));
    a.next_id().unwrap();
    a.retract_mark(Timestamp::MIN);
    assert!(matches!(b.next_id(), Err(Error::MarkReached { .. })));
}

#[test]
fn building_over_shared_words_never_moves_them_back() {
    let words = leaked_words();
    let c = clock();
    let later = Timestamp::from_millisecond(T0_MS + 10).unwrap();
    let mark = Timestamp::from_millisecond(T0_MS + 60_000).unwrap();
    let first = build(Layout::TWITTER, &c, |b| {
        b.with_shared_words(words)
            .with_start_after(later)
            .with_mark(mark)
    });
    c.advance(ms(20));
    let before = first.next_id().unwrap();
    // A second generator with an earlier start and mark, built after IDs were
    // issued: neither the state nor the mark go back.
    let second = build(Layout::TWITTER, &c, |b| {
        b.with_shared_words(words)
            .with_start_after(Timestamp::from_millisecond(T0_MS).unwrap())
            .with_mark(Timestamp::from_millisecond(T0_MS + 1).unwrap())
    });
    assert_eq!(second.mark(), first.mark());
    assert!(second.next_id().unwrap() > before);
    // The first ID of a fresh generator over words started after `later` is
    // in a later tick.
    let fresh = leaked_words();
    let g = build(Layout::TWITTER, &c, |b| {
        b.with_shared_words(fresh)
            .with_start_after(Timestamp::from_millisecond(T0_MS + 20).unwrap())
            .with_mark(mark)
    });
    let parts = Layout::TWITTER.decode(g.next_id().unwrap().get()).unwrap();
    assert!(parts.time > Timestamp::from_millisecond(T0_MS + 20).unwrap());
}

#[test]
fn shared_words_refuse_per_generator_tables() {
    let rollback: Layout = "leaf,rollback=2".parse().unwrap();
    for (layout, policy) in [
        (rollback, ClockBehind::RollbackBits),
        (Layout::LEAF, ClockBehind::History { ticks: 16 }),
    ] {
        let err = Snowflake::builder(layout)
            .with_clock_behind(policy)
            .with_shared_words(leaked_words())
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    }
}
