use loom::sync::Arc;

use super::*;

/// Two takers (two single IDs through `take_one`; one batch of 2) against an installer that
/// adds a segment when the buffer wants one: no ID twice, each
/// taker's IDs increase, and nothing comes from a half-written slot.
#[test]
fn loom_takers_and_installer() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let buffer = Arc::new(SegmentBuffer::new(0.5));
        buffer
            .install(IdRun::from_range(1, 3, 1, 0).unwrap())
            .unwrap();
        let installer = {
            let buffer = buffer.clone();
            loom::thread::spawn(move || {
                for (start, end) in [(10, 12)] {
                    for _ in 0..4 {
                        if buffer.wants_next() {
                            buffer
                                .install(IdRun::from_range(start, end, 1, 0).unwrap())
                                .unwrap();
                            break;
                        }
                        loom::thread::yield_now();
                    }
                }
            })
        };
        let takers: Vec<_> = [(1, 2), (2, 1)]
            .into_iter()
            .map(|(n, rounds)| {
                let buffer = buffer.clone();
                loom::thread::spawn(move || {
                    let mut ids = Vec::new();
                    for _ in 0..rounds {
                        let mut batch = IdBatch::new();
                        // Single IDs go through the hot path, as the allocator's do.
                        let mut take = if n == 1 {
                            match buffer.take_one() {
                                TakeOne::Id { id, .. } => {
                                    ids.push(id.get());
                                    continue;
                                }
                                TakeOne::Reserved(reservation) => Take {
                                    taken: 0,
                                    missing: 0,
                                    reserved: Some(reservation),
                                    preload: false,
                                },
                                TakeOne::Skipped | TakeOne::Empty => continue,
                            }
                        } else {
                            buffer.take(n, &mut batch)
                        };
                        for _ in 0..4 {
                            let Some(reservation) = take.reserved else {
                                break;
                            };
                            match buffer.resolve(reservation, &mut batch) {
                                Ok(resolved) => take = resolved,
                                Err(_) => loom::thread::yield_now(),
                            }
                        }
                        ids.extend(batch.iter().map(Id::get));
                    }
                    ids
                })
            })
            .collect();
        installer.join().unwrap();
        let mut all = Vec::new();
        for taker in takers {
            let ids = taker.join().unwrap();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
            all.extend(ids);
        }
        let valid = [1, 2, 10, 11];
        assert!(all.iter().all(|id| valid.contains(id)), "{all:?}");
        all.sort_unstable();
        let len = all.len();
        all.dedup();
        assert_eq!(all.len(), len, "an ID issued twice");
    });
}
