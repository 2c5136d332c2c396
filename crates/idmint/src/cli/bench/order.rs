//! The `--check-order` check: whether the IDs came in real-time order, as a
//! `monotonic` key promises ([`check_order`]).

use std::time::Instant;

/// One successful call as the worker saw it, for the order check: when it
/// began (before the request was sent) and ended (after the answer came),
/// and its IDs' range.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) began: Instant,
    pub(super) ended: Instant,
    /// The lowest and highest ID of the call.
    pub(super) min: u64,
    pub(super) max: u64,
    /// Whether the call's IDs strictly increased, in the order received.
    pub(super) increasing: bool,
}

/// What the order check found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct OrderCheck {
    /// Successful calls checked.
    pub(super) calls: u64,
    /// Calls whose IDs were not above every ID of a call that ended before
    /// they began, or not increasing among themselves.
    pub(super) violations: u64,
    /// Of those, calls below their own connection's previous call.
    pub(super) within_connection: u64,
    /// Calls that had a call of another connection ended before they began
    /// (the cross-connection constraints actually checked).
    pub(super) ordered_across: u64,
    /// Up to five violations, described.
    pub(super) examples: Vec<String>,
}

/// Checks real-time order: a call's IDs strictly increase, and every call
/// that began after another call ended (on any connection) got IDs above
/// that call's. Sound with timestamps taken on the client: a call's end is
/// read after its answer came and the next call's start before its request
/// is sent, on one monotonic clock, so `ended <= began` means the first
/// answer was in before the second request left. Calls that overlap in time
/// may come back in any order. `connections[i]` is connection `i`'s calls in
/// the order made.
pub(super) fn check_order(connections: &[Vec<Span>]) -> OrderCheck {
    let mut check = OrderCheck::default();
    let example = |check: &mut OrderCheck, text: String| {
        if check.examples.len() < 5 {
            check.examples.push(text);
        }
    };
    // All calls by end, with their highest ID and connection.
    let mut by_end: Vec<(Instant, u64, usize)> = connections
        .iter()
        .enumerate()
        .flat_map(|(c, spans)| spans.iter().map(move |s| (s.ended, s.max, c)))
        .collect();
    by_end.sort_unstable_by_key(|&(ended, _, _)| ended);
    // For each prefix of that order: the highest ID in it, and its first two
    // distinct connections (enough to tell whether it holds a call of a
    // connection other than a given one).
    let mut prefix_max = Vec::with_capacity(by_end.len());
    let mut firsts: Vec<(usize, Option<usize>)> = Vec::with_capacity(by_end.len());
    let mut max = 0u64;
    let mut two: (usize, Option<usize>) = (usize::MAX, None);
    for &(_, m, c) in &by_end {
        max = max.max(m);
        prefix_max.push(max);
        if two.0 == usize::MAX {
            two.0 = c;
        } else if two.1.is_none() && c != two.0 {
            two.1 = Some(c);
        }
        firsts.push(two);
    }
    for (c, spans) in connections.iter().enumerate() {
        let mut previous: Option<&Span> = None;
        for s in spans {
            check.calls += 1;
            let before = by_end.partition_point(|&(ended, _, _)| ended <= s.began);
            if before > 0 {
                let (a, b) = firsts[before - 1];
                if a != c || b.is_some() {
                    check.ordered_across += 1;
                }
            }
            let floor = (before > 0).then(|| prefix_max[before - 1]);
            let mut bad = false;
            if !s.increasing {
                bad = true;
                example(
                    &mut check,
                    format!("connection {c}: a call's IDs did not strictly increase"),
                );
            }
            if let Some(p) = previous.filter(|p| s.min <= p.max) {
                bad = true;
                check.within_connection += 1;
                example(
                    &mut check,
                    format!(
                        "connection {c}: a call got {} after its previous call got up to {}",
                        s.min, p.max
                    ),
                );
            } else if let Some(floor) = floor.filter(|&f| s.min <= f) {
                bad = true;
                example(
                    &mut check,
                    format!(
                        "connection {c}: a call got {} though a call that returned {floor} \
                         had ended before it began",
                        s.min
                    ),
                );
            }
            if bad {
                check.violations += 1;
            }
            previous = Some(s);
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_order_check_allows_overlap_and_catches_inversions() {
        let t0 = Instant::now();
        let span = |began: u64, ended: u64, ids: &[u64]| Span {
            began: t0 + Duration::from_millis(began),
            ended: t0 + Duration::from_millis(ended),
            min: *ids.iter().min().unwrap(),
            max: *ids.iter().max().unwrap(),
            increasing: ids.windows(2).all(|w| w[0] < w[1]),
        };
        // Two connections; calls that overlap may come back in any order,
        // and one that began after another ended is above it.
        let ok = check_order(&[
            vec![span(0, 10, &[5]), span(10, 20, &[8, 9])],
            vec![span(1, 9, &[4]), span(12, 15, &[6])],
        ]);
        assert_eq!(ok.calls, 4);
        assert_eq!(ok.violations, 0, "{ok:?}");
        // (12, 15) began after (1, 9) ended; (10, 20) after (1, 9) too.
        assert_eq!(ok.ordered_across, 2, "{ok:?}");

        // Across connections: a call that began after another ended got less.
        let bad = check_order(&[vec![span(0, 5, &[5])], vec![span(6, 9, &[4])]]);
        assert_eq!((bad.violations, bad.within_connection), (1, 0), "{bad:?}");
        assert!(bad.examples[0].contains("returned 5"), "{bad:?}");
        // Within a connection, and within a call.
        let bad = check_order(&[vec![span(0, 5, &[5, 6]), span(5, 9, &[6, 7])]]);
        assert_eq!((bad.violations, bad.within_connection), (1, 1), "{bad:?}");
        let bad = check_order(&[vec![span(0, 5, &[7, 6])]]);
        assert_eq!(bad.violations, 1, "{bad:?}");
        assert!(bad.examples[0].contains("strictly increase"), "{bad:?}");
        assert_eq!(check_order(&[vec![], vec![]]), OrderCheck::default());
    }
}
