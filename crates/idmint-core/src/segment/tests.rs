use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use super::*;

fn take_all(buffer: &SegmentBuffer, n: u64) -> (Vec<u64>, Take) {
    let mut batch = IdBatch::new();
    let take = buffer.take(n, &mut batch);
    (batch.iter().map(Id::get).collect(), take)
}

#[test]
fn from_range_keeps_the_residue_class_and_never_zero() {
    let all = IdRun::from_range(0, 10, 1, 0).unwrap();
    assert_eq!((all.first().get(), all.count()), (1, 9), "0 is never an ID");
    let odd = IdRun::from_range(10, 20, 2, 1).unwrap();
    assert_eq!(
        (odd.first().get(), odd.last().get(), odd.count()),
        (11, 19, 5)
    );
    let one = IdRun::from_range(7, 8, 1, 0).unwrap();
    assert_eq!((one.first().get(), one.count()), (7, 1));
    for (start, end, delta, rem) in [(10, 11, 2, 1), (5, 5, 1, 0), (1, 10, 0, 0), (1, 10, 3, 3)] {
        assert!(
            matches!(
                IdRun::from_range(start, end, delta, rem),
                Err(Error::InvalidRun(_))
            ),
            "[{start}, {end}) delta {delta} remainder {rem}"
        );
    }
    let top = Id::MAX.get() + 1;
    assert_eq!(
        IdRun::from_range(top - 5, top, 1, 0).unwrap().last(),
        Id::MAX
    );
    assert!(IdRun::from_range(top - 5, top + 1, 1, 0).is_err());
}

#[test]
fn single_ids_come_in_order_then_nothing() {
    let buffer = SegmentBuffer::new(0.1);
    assert_eq!(
        take_all(&buffer, 1).1.missing,
        1,
        "empty buffer makes nothing up"
    );
    buffer
        .install(IdRun::from_range(100, 110, 1, 0).unwrap())
        .unwrap();
    let ids: Vec<u64> = (0..10).flat_map(|_| take_all(&buffer, 1).0).collect();
    assert_eq!(ids, (100..110).collect::<Vec<_>>());
    let (ids, take) = take_all(&buffer, 1);
    assert!(ids.is_empty());
    assert_eq!((take.missing, take.reserved), (1, None));
}

#[test]
fn preload_is_asked_once_per_segment_at_the_share() {
    let buffer = SegmentBuffer::new(0.2);
    buffer
        .install(IdRun::from_range(1, 11, 1, 0).unwrap())
        .unwrap();
    let asks: Vec<bool> = (0..5).map(|_| take_all(&buffer, 1).1.preload).collect();
    assert_eq!(
        asks,
        [false, false, true, false, false],
        "the third of ten crosses 20%"
    );
    buffer
        .install(IdRun::from_range(11, 21, 1, 0).unwrap())
        .unwrap();
    assert!(!buffer.wants_next());
    buffer
        .install(IdRun::from_range(21, 31, 1, 0).unwrap())
        .unwrap_err();
    let asks: Vec<bool> = (0..10).map(|_| take_all(&buffer, 1).1.preload).collect();
    assert_eq!(asks.iter().filter(|&&a| a).count(), 1, "{asks:?}");
    assert!(asks[7], "the third ID of the second segment: {asks:?}");
    assert!(buffer.wants_next());
}

#[test]
fn a_batch_spans_both_segments_and_stops_at_the_end() {
    let buffer = SegmentBuffer::new(0.1);
    buffer
        .install(IdRun::from_range(1, 6, 1, 0).unwrap())
        .unwrap();
    let _ = take_all(&buffer, 2);
    buffer
        .install(IdRun::from_range(100, 200, 10, 3).unwrap())
        .unwrap();
    let mut batch = IdBatch::new();
    let take = buffer.take(8, &mut batch);
    assert_eq!((take.taken, take.missing), (8, 0));
    assert_eq!(batch.runs().len(), 2);
    let ids: Vec<u64> = batch.iter().map(Id::get).collect();
    assert_eq!(ids, [3, 4, 5, 103, 113, 123, 133, 143]);
    let (rest, take) = take_all(&buffer, 1000);
    assert_eq!((rest.len(), take.missing, take.reserved), (5, 995, None));
    assert_eq!(rest.last(), Some(&193));
}

#[test]
fn install_refuses_what_would_go_back_or_drop_ids() {
    let buffer = SegmentBuffer::new(0.1);
    buffer
        .install(IdRun::from_range(50, 60, 1, 0).unwrap())
        .unwrap();
    let _ = take_all(&buffer, 1);
    let err = buffer
        .install(IdRun::from_range(40, 55, 1, 0).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("does not start above"), "{err}");
    assert_eq!(buffer.remaining(), 9, "a refused install changes nothing");
    buffer
        .install(IdRun::from_range(60, 70, 1, 0).unwrap())
        .unwrap();
    let err = buffer
        .install(IdRun::from_range(70, 80, 1, 0).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("already buffered"), "{err}");
    let status = buffer.status();
    assert_eq!(
        status.current.map(|(s, left)| (s.first().get(), left)),
        Some((50, 9))
    );
    assert_eq!(status.next.map(|s| s.first().get()), Some(60));
}

/// Four threads take single IDs and batches while the main thread installs a
/// segment whenever the buffer wants one: every ID is issued once, each
/// thread's IDs increase, and reservations resolve after the next install.
#[test]
fn threads_and_an_installer_never_repeat_an_id() {
    const THREADS: usize = 4;
    const EACH: u64 = 20_000;
    let buffer = Arc::new(SegmentBuffer::new(0.5));
    buffer
        .install(IdRun::from_range(1, 101, 1, 0).unwrap())
        .unwrap();
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (buffer, barrier, done) = (buffer.clone(), barrier.clone(), done.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut ids = Vec::with_capacity(EACH as usize);
                while (ids.len() as u64) < EACH {
                    if t == 2 {
                        // The taker that never reserves.
                        match buffer.try_take_one() {
                            Some((id, _)) => ids.push(id.get()),
                            None => std::thread::yield_now(),
                        }
                        continue;
                    }
                    let want = if t % 2 == 0 {
                        1
                    } else {
                        7.min(EACH - ids.len() as u64)
                    };
                    let mut batch = IdBatch::new();
                    let mut take = buffer.take(want, &mut batch);
                    while let Some(reservation) = take.reserved {
                        match buffer.resolve(reservation, &mut batch) {
                            Ok(resolved) => take = resolved,
                            Err(_) => std::thread::yield_now(),
                        }
                    }
                    ids.extend(batch.iter().map(Id::get));
                    if batch.is_empty() {
                        std::thread::yield_now();
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
                ids
            })
        })
        .collect();
    barrier.wait();
    let mut next_start = 101;
    while done.load(Ordering::Relaxed) < THREADS as u64 {
        if buffer.wants_next() {
            // Segments of varying size with gaps between them, as a shared
            // store gives when other servers lease too.
            let size = 50 + next_start % 97;
            buffer
                .install(IdRun::from_range(next_start, next_start + size, 1, 0).unwrap())
                .unwrap();
            next_start += size + 13;
        } else {
            std::thread::yield_now();
        }
    }
    let mut seen = HashSet::new();
    for handle in handles {
        let ids = handle.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread's IDs increase"
        );
        for id in ids {
            assert!(seen.insert(id), "ID {id} issued twice");
        }
    }
    assert_eq!(seen.len() as u64, THREADS as u64 * EACH);
}

#[test]
fn take_one_walks_the_segments_without_a_batch() {
    let buffer = SegmentBuffer::new(0.5);
    assert_eq!(buffer.take_one(), TakeOne::Empty);
    buffer
        .install(IdRun::from_range(5, 7, 1, 0).unwrap())
        .unwrap();
    let first = buffer.take_one();
    assert_eq!(
        first,
        TakeOne::Id {
            id: Id::new(5).unwrap(),
            preload: false
        }
    );
    assert_eq!(
        buffer.take_one(),
        TakeOne::Id {
            id: Id::new(6).unwrap(),
            preload: true
        }
    );
    assert_eq!(buffer.take_one(), TakeOne::Empty);
}

#[test]
fn try_take_one_never_reserves_so_giving_up_skips_nothing() {
    let buffer = SegmentBuffer::new(0.5);
    assert_eq!(buffer.try_take_one(), None);
    buffer
        .install(IdRun::from_range(5, 7, 1, 0).unwrap())
        .unwrap();
    assert_eq!(buffer.try_take_one(), Some((Id::new(5).unwrap(), false)));
    assert_eq!(buffer.try_take_one(), Some((Id::new(6).unwrap(), true)));
    // Empty: asked many times, it hands out no index (take_one's fetch_add
    // would reserve one each time, and a caller that drops a reservation
    // skips an ID of the next segment).
    for _ in 0..10 {
        assert_eq!(buffer.try_take_one(), None);
    }
    assert_eq!(buffer.handed_out(), 2);
    buffer
        .install(IdRun::from_range(20, 23, 1, 0).unwrap())
        .unwrap();
    let next: Vec<u64> = std::iter::from_fn(|| buffer.try_take_one())
        .map(|(id, _)| id.get())
        .collect();
    assert_eq!(
        next,
        [20, 21, 22],
        "the next segment whole, from its first ID"
    );
}

#[test]
fn position_names_the_preload_point_only_while_the_newest_segment_is_current() {
    let buffer = SegmentBuffer::new(0.5);
    assert_eq!(
        buffer.position(),
        BufferPosition::default(),
        "nothing installed"
    );
    buffer
        .install(IdRun::from_range(1, 11, 1, 0).unwrap())
        .unwrap();
    let first = buffer.position();
    assert_eq!((first.preload_at, first.runway()), (Some(5), Some(5)));
    let mut batch = IdBatch::new();
    buffer.take(6, &mut batch);
    assert!(buffer.position().wants_next());
    buffer
        .install(IdRun::from_range(11, 31, 1, 0).unwrap())
        .unwrap();
    let waiting = buffer.position();
    assert_eq!(waiting.preload_at, None, "the next segment waits");
    assert!(!waiting.wants_next());
    buffer.take(3, &mut batch);
    assert_eq!(
        buffer.position().preload_at,
        None,
        "still in the first segment"
    );
    buffer.take(1, &mut batch);
    let second = buffer.position();
    assert_eq!(
        (second.handed_out, second.buffered_end, second.preload_at),
        (10, 30, Some(20))
    );
    buffer.take(10, &mut batch);
    assert!(!buffer.position().wants_next(), "indices up to 19 taken");
    buffer.take(1, &mut batch);
    assert!(buffer.position().wants_next(), "index 20 taken");
}
