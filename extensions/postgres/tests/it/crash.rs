//! The postmaster SIGKILLed under inserts' aftermath and started again with
//! its wall clock an hour behind (libfaketime): the extension refuses or
//! waits, and never repeats an ID.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::cluster::Cluster;
use crate::service::require_service;
use crate::{CREATE, INSERT, assert_idmint_error, config_file, max_id, say};

/// libfaketime for threaded programs (the keeper runs a tokio thread).
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Every ID after the crash is above every ID before it: the ones made under
/// the shifted clock (if any were) and the ones after the clock is right.
/// The embedded default, the file registry in `$PGDATA/idmint`.
#[test]
fn sigkill_and_a_restart_an_hour_behind_repeat_no_id() {
    sigkill_and_restart_an_hour_behind("faketime", "", "file");
}

/// The same with a worker fixed in the config (`registry = "static"`, one
/// server): no coordinator to ask, so the mark file in the data directory
/// alone stands between the restart and a repeat.
#[test]
fn the_static_registry_repeats_no_id_after_a_sigkill_an_hour_behind() {
    let config = config_file(
        "crash-static",
        "[snowflake]\nregistry = \"static\"\nworker = 9\n",
    );
    sigkill_and_restart_an_hour_behind("faketime-static", &config.setting(), "static");
}

/// A cluster started with `settings` (its worker from `registry`): inserts,
/// SIGKILL, a start an hour behind (refused or above, typed), then a start
/// with the clock right.
fn sigkill_and_restart_an_hour_behind(name: &str, settings: &str, registry: &str) {
    if !require_service(
        "libfaketime",
        Path::new(FAKETIME).exists(),
        "install Debian's faketime (scripts/deps)",
    ) {
        return;
    }
    let cluster = Cluster::start_with(name, settings);
    let mut client = cluster.client();
    client.batch_execute(CREATE).unwrap();
    cluster.insert(8, 2_000, INSERT, 1);
    let used: String = client
        .query_one("SELECT registry FROM idmint_status()", &[])
        .unwrap()
        .get(0);
    assert_eq!(used, registry);
    let max_before = max_id(&mut client);
    drop(client);

    cluster.kill();
    cluster.start_with_env(&[
        ("LD_PRELOAD", FAKETIME),
        ("FAKETIME", "-1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]);
    let mut client = cluster.client();
    let server_now: f64 = client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0);
    let real_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let behind = real_now - server_now;
    assert!(
        (3500.0..3700.0).contains(&behind),
        "the server's clock is {behind:.0} s behind, not an hour"
    );

    // Refused (typed) or above every earlier ID; never a repeat.
    let mut refused = Vec::new();
    match client.query_one("SELECT idmint_next_id()", &[]) {
        Ok(row) => assert!(row.get::<_, i64>(0) > max_before),
        Err(e) => refused.push(assert_idmint_error(
            &e,
            "55000",
            &[
                "not_ready",
                "clock_behind",
                "clock_behind_mark",
                "mark_reached",
            ],
        )),
    }
    match client.execute(INSERT, &[&2]) {
        Ok(_) => {}
        Err(e) => refused.push(assert_idmint_error(
            &e,
            "55000",
            &[
                "not_ready",
                "clock_behind",
                "clock_behind_mark",
                "mark_reached",
            ],
        )),
    }
    let status = client
        .query_one("SELECT lease, last_error FROM idmint_status()", &[])
        .unwrap();
    let (lease, last_error): (String, Option<String>) = (status.get(0), status.get(1));
    say(&format!(
        "SIGKILL, then a start 1 h behind: refused with {refused:?} (lease {lease}, last error {last_error:?})"
    ));
    let below: i64 = client
        .query_one(
            "SELECT count(*) FROM t WHERE round = 2 AND id <= $1",
            &[&max_before],
        )
        .unwrap()
        .get(0);
    assert_eq!(below, 0);
    drop(client);

    // The clock right again: inserts go on, above everything before.
    cluster.restart();
    cluster.insert(8, 500, INSERT, 3);
    let mut client = cluster.client();
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT id), min(id) FILTER (WHERE round > 1) FROM t",
            &[],
        )
        .unwrap();
    let (n, distinct, min_after): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(n, distinct, "duplicate IDs");
    assert!(
        min_after > max_before,
        "{min_after} after the crash, {max_before} before"
    );
}
