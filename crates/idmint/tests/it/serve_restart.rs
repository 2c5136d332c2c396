//! Restarts of `idmint serve` and what the next holder of a worker waits for
//! (issue 36): a clean stop (SIGTERM) records the last tick it really issued
//! in place of the mark persisted a window ahead, so the next holder serves
//! at once; a crash (SIGKILL) leaves the window-ahead mark, which the next
//! holder still waits out. Each case counts duplicates across the restart
//! over at least 10^6 IDs.
//!
//! Assertions are on IDs, the lease file and the keeper's log line, never on
//! how long something took (the figures are in BENCHMARKS.md): the keeper
//! says when a start waits for its clock to pass the stored mark
//! (`behind the worker's stored mark`), and a decoded ID says when it was
//! made.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use idmint_core::Layout;
use idmint_testkit::{PrivateService, Service};
use jiff::{SignedDuration, Timestamp};
use reqwest::StatusCode;
use reqwest::blocking::Client;

use crate::serve::{Served, binary_ids, client, unique_suffix};

/// What the keeper logs when a start waits for its clock.
const WAITS: &str = "behind the worker's stored mark";

/// IDs fetched on each side of a restart: 10^6, in binary batches.
const PER_SIDE: u64 = 1_000_000;
const BATCH: u64 = 100_000;

/// `PER_SIDE` IDs of `key`, strictly increasing.
fn fetch(c: &Client, server: &Served, key: &str) -> Vec<u64> {
    let mut ids = Vec::with_capacity(PER_SIDE as usize);
    while (ids.len() as u64) < PER_SIDE {
        ids.extend(binary_ids(c, server, key, BATCH));
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "IDs went back");
    ids
}

/// The time of `id` under `layout`.
fn time_of(layout: &Layout, id: u64) -> Timestamp {
    layout.decode(id).unwrap().time
}

/// The last instant of the tick `id` was made in: what a clean stop records.
fn tick_end(layout: &Layout, id: u64) -> Timestamp {
    let unit = SignedDuration::try_from(layout.unit()).unwrap();
    time_of(layout, id) + unit - SignedDuration::from_nanos(1)
}

/// The mark the data directory's lease file holds.
fn lease_mark(data: &Path) -> Timestamp {
    let text = std::fs::read_to_string(data.join("worker.lease")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("mark="))
        .unwrap_or_else(|| panic!("no mark in the lease file: {text}"))
        .parse()
        .unwrap()
}

/// Counts duplicates across `sides`, which must hold `expected` IDs in all.
fn assert_no_duplicates(sides: &[&[u64]], expected: usize) {
    let mut all = HashSet::with_capacity(expected);
    for side in sides {
        all.extend(side.iter().copied());
    }
    let total: usize = sides.iter().map(|s| s.len()).sum();
    assert_eq!(total, expected);
    assert_eq!(all.len(), total, "{} duplicates", total - all.len());
}

/// SIGKILL: no clean stop, no release (the directory lock goes with the
/// process).
fn kill(server: Served) {
    drop(server);
}

#[test]
fn a_clean_restart_serves_at_once_above_everything_issued_before() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let layout = Layout::TWITTER;
    let c = client();
    let first = Served::start(&data, None, &[]);
    let before = fetch(&c, &first, "a");
    let ahead = lease_mark(&data);
    let (status, log) = first.terminate();
    assert!(status.success(), "{status}: {log}");
    // The window-ahead mark was replaced by the last tick issued.
    let last = *before.last().unwrap();
    let recorded = lease_mark(&data);
    assert!(ahead > tick_end(&layout, last), "{ahead}: not ahead");
    assert!(
        recorded >= tick_end(&layout, last)
            && recorded <= tick_end(&layout, last) + SignedDuration::from_millis(1),
        "recorded {recorded} for a last ID at {}",
        time_of(&layout, last)
    );

    let next = Served::start(&data, None, &[]);
    let after = fetch(&c, &next, "a");
    assert!(after[0] > last, "{} <= {last}", after[0]);
    assert!(!next.log().contains(WAITS), "{}", next.log());
    assert_no_duplicates(&[&before, &after], 2 * PER_SIDE as usize);
}

#[test]
fn a_sigkill_restart_still_starts_above_the_window_ahead_mark() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let layout = Layout::TWITTER;
    let c = client();
    let first = Served::start(&data, None, &[]);
    let before = fetch(&c, &first, "a");
    kill(first);
    let last = *before.last().unwrap();
    let mark = lease_mark(&data);
    // Persisted ahead (a window, renewed within half of it), never the
    // last tick: nothing recorded what was issued.
    assert!(
        mark > tick_end(&layout, last) + SignedDuration::from_millis(100),
        "mark {mark} for a last ID at {}",
        time_of(&layout, last)
    );

    let next = Served::start(&data, None, &[]);
    let after = fetch(&c, &next, "a");
    let first_after = time_of(&layout, after[0]);
    assert!(
        first_after > mark,
        "after a crash the first ID ({first_after}) must be above the mark {mark}"
    );
    assert_no_duplicates(&[&before, &after], 2 * PER_SIDE as usize);
}

#[test]
fn a_clean_stop_then_a_restart_two_seconds_behind_waits_for_the_last_tick() {
    let Some(faketime) = Faketime::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let layout = Layout::TWITTER;
    let c = client();
    let first = Served::start(&data, None, &[]);
    let before = fetch(&c, &first, "a");
    let (status, log) = first.terminate();
    assert!(status.success(), "{status}: {log}");
    let recorded = lease_mark(&data);

    let env = faketime.env(dir.path(), -2_000);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let spawned = Instant::now();
    let next = Served::start(&data, None, &env);
    let first_after = first_id(&c, &next);
    let took = spawned.elapsed();
    let log = next.log();
    assert!(log.contains(WAITS), "no wait for the clock: {log}");
    assert!(
        time_of(&layout, first_after) > recorded,
        "{} <= {recorded}",
        time_of(&layout, first_after)
    );
    let after = fetch(&c, &next, "a");
    assert!(after[0] > *before.last().unwrap());
    eprintln!("restart 2 s behind a clean stop: first ID after {took:?}");
    assert_no_duplicates(
        &[&before, &[first_after], &after],
        2 * PER_SIDE as usize + 1,
    );
}

#[test]
fn a_worker_released_cleanly_is_taken_by_another_node_at_once() {
    let (endpoint, _etcd) = match std::env::var("IDMINT_TEST_ETCD_ENDPOINT") {
        Ok(endpoint) => (endpoint, None),
        Err(_) => {
            let Some(etcd) = PrivateService::start(Service::Etcd) else {
                return;
            };
            (etcd.address().to_owned(), Some(etcd))
        }
    };
    // One worker ID, so the second node takes the very ID the first released.
    let layout_text = "time=41,epoch=2010-11-04T01:42:54.657Z,worker=0,sequence=12";
    let layout: Layout = layout_text.parse().unwrap();
    let config = format!(
        r#"
[snowflake]
registry = "etcd"
layout = "{layout_text}"

[snowflake.etcd]
endpoints = ["{endpoint}"]
cluster = "restart-{}"
"#,
        unique_suffix()
    );
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let a = Served::start(&dir.path().join("a"), Some(&config), &[]);
    let before = fetch(&c, &a, "a");
    let (status, log) = a.terminate();
    assert!(status.success(), "{status}: {log}");

    let b = Served::start(&dir.path().join("b"), Some(&config), &[]);
    let after = fetch(&c, &b, "a");
    let last = *before.last().unwrap();
    assert!(after[0] > last, "{} <= {last}", after[0]);
    assert!(
        time_of(&layout, after[0]) > time_of(&layout, last),
        "the new holder started in the old one's last tick"
    );
    assert!(!b.log().contains(WAITS), "{}", b.log());

    // After a crash the next node waits for the dead lease (10 s), and past
    // that for the window-ahead mark, which stays: its IDs are above both.
    kill(b);
    let last = *after.last().unwrap();
    let c2 = Served::start(&dir.path().join("c"), Some(&config), &[]);
    let third = fetch(&c, &c2, "a");
    assert!(third[0] > last);
    assert!(
        time_of(&layout, third[0]) > tick_end(&layout, last) + SignedDuration::from_millis(100),
        "after a crash the next node started at {}, next to a last ID at {}",
        time_of(&layout, third[0]),
        time_of(&layout, last)
    );
    assert_no_duplicates(&[&before, &after, &third], 3 * PER_SIDE as usize);
}

/// One ID of key `a`.
fn first_id(c: &Client, server: &Served) -> u64 {
    let r = c.get(server.url("/api/snowflake/get/a")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.text().unwrap().parse().unwrap()
}

/// libfaketime for one process: its wall clock shifted, its monotonic
/// clock left alone (as the fault suite runs it, `tests/faults/faketime.rs`).
struct Faketime {
    library: &'static str,
}

impl Faketime {
    /// `None` (after a loud SKIPPED line) when libfaketime is not installed.
    fn new() -> Option<Faketime> {
        let library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
        let present = Path::new(library).exists();
        idmint_testkit::require_service("libfaketime", present).then_some(Faketime { library })
    }

    /// The environment of a process whose wall clock is `offset_ms` from
    /// real time, its time file in `dir`.
    fn env(&self, dir: &Path, offset_ms: i64) -> Vec<(&'static str, String)> {
        let file = dir.join("faketime.rc");
        let sign = if offset_ms < 0 { '-' } else { '+' };
        let abs = offset_ms.unsigned_abs();
        std::fs::write(&file, format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000)).unwrap();
        vec![
            ("LD_PRELOAD", self.library.to_owned()),
            ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
    }
}
