//! One process, one live generator per layout and worker ID: a second one,
//! fixed or leased, is refused with `worker_taken` whatever its preset is
//! called; closing or dropping the first frees the worker ID; a leased
//! generator's re-claim moves its entry; a forked child isn't blocked by
//! its parent's.

use std::process::Command;
use std::time::{Duration, Instant};

use idmint_embed::{Generator, GeneratorOptions, Layout, after_fork_in_child};

use crate::support::{alone, config, ordinary, unique};

fn fixed(layout: &str, datacenter: u32, worker: u32) -> Result<Generator, idmint_embed::Error> {
    Generator::new(
        GeneratorOptions::new(Layout::parse(layout).unwrap(), worker).with_datacenter(datacenter),
    )
}

#[test]
fn a_second_fixed_generator_of_one_worker_is_refused() {
    let _g = ordinary();
    let first = fixed("twitter,epoch=2021-02-03", 1, 9).unwrap();
    let a = first.next_ids(1000).unwrap();
    let e = fixed("twitter,epoch=2021-02-03", 1, 9).unwrap_err();
    assert_eq!(e.code(), "worker_taken", "{e}");
    assert!(e.message().contains("worker ID 9"), "{e}");
    assert!(!e.is_bad_input() && e.retry_after().is_none());
    // The same bits by another name: leaf's one 10-bit node field, worker
    // 41, is twitter's datacenter 1, worker 9.
    let e = fixed("leaf,epoch=2021-02-03", 0, 41).unwrap_err();
    assert_eq!(e.code(), "worker_taken", "{e}");
    // Another worker, another epoch: IDs of their own.
    let other_worker = fixed("twitter,epoch=2021-02-03", 1, 10).unwrap();
    let other_epoch = fixed("twitter,epoch=2021-02-04", 1, 9).unwrap();
    let b = other_worker.next_ids(1000).unwrap();
    assert!(a.iter().all(|id| !b.contains(id)));
    other_epoch.next_id().unwrap();
    // Closed (or dropped), the worker ID is free again.
    first.close();
    let again = fixed("twitter,epoch=2021-02-03", 1, 9).unwrap();
    assert!(again.next_id().unwrap() > a[999]);
    drop(again);
    fixed("leaf,epoch=2021-02-03", 0, 41).unwrap();
}

/// A worker ID given back and taken again at once, in the same tick or
/// with the last IDs borrowed ahead of the clock: the new generator starts
/// after the old one's last ID, never on it.
#[test]
fn a_worker_id_taken_again_starts_after_its_last_id() {
    let _g = ordinary();
    let layout = Layout::parse("twitter,epoch=2021-04-05").unwrap();
    let borrowing = || {
        Generator::new(
            GeneratorOptions::new(layout, 3)
                .with_sequence_exhausted("borrow:1s")
                .unwrap(),
        )
    };
    for round in 0..20 {
        let g = borrowing().unwrap();
        // 50 ticks' worth at once: the last ones are ahead of the clock.
        let last = *g.next_ids(4096 * 50).unwrap().last().unwrap();
        if round % 2 == 0 {
            g.close();
        } else {
            drop(g);
        }
        let again = borrowing().unwrap();
        let next = again.next_id().unwrap();
        assert!(next > last, "round {round}: {next} after {last}");
    }
}

/// A fixed generator and one leased from a registry, in one process: the
/// claimed worker ID is checked against the fixed one, both ways.
#[test]
fn a_leased_generator_joins_the_table() {
    let _g = ordinary();
    let layout = "twitter,epoch=2021-03-04";
    let file = config(&format!(
        "[snowflake]\nlayout = \"{layout}\"\nregistry = \"file\"\nworker = 6\n"
    ));
    let held = fixed(layout, 0, 6).unwrap();
    let e = Generator::from_config(&file.path).unwrap_err();
    assert_eq!(e.code(), "worker_taken", "{e}");
    assert!(e.message().contains("fixed worker ID 6"), "{e}");
    held.close();
    // The refused claim was released: the data directory is free.
    let leased = Generator::from_config(&file.path).unwrap();
    leased.next_id().unwrap();
    let e = fixed(layout, 0, 6).unwrap_err();
    assert_eq!(e.code(), "worker_taken", "{e}");
    assert!(e.message().contains("file registry"), "{e}");
    leased.close();
    fixed(layout, 0, 6).unwrap();
}

/// A lease taken over in Redis: the keeper claims another worker ID, and the
/// table follows (the old ID is free in this process, the new one taken).
#[test]
fn a_reclaim_moves_the_generators_entry() {
    let _g = ordinary();
    let Some(url) = crate::support::redis() else {
        return;
    };
    let layout = "twitter,epoch=2021-05-06";
    let cluster = unique("reclaim");
    let cfg = config(&format!(
        "[snowflake]\nlayout = \"{layout}\"\nregistry = \"redis\"\nwindow = \"1s\"\n[snowflake.redis]\n\
         url = \"{url}\"\ncluster = \"{cluster}\"\nlease_ttl = \"3s\"\n"
    ));
    let g = Generator::from_config(&cfg.path).unwrap();
    let before = g.status().unwrap().worker;
    let split = |node: u32| (node >> 5, node & 31);
    let (dc, w) = split(before);
    assert_eq!(fixed(layout, dc, w).unwrap_err().code(), "worker_taken");
    // Another node's lease on our worker ID: the next renewal finds it lost.
    let out = Command::new("redis-cli")
        .args(["-u", url, "SET"])
        .arg(format!("idmint:{{{cluster}}}:worker:{before}"))
        .args(["someone-else", "PX", "60000"])
        .output()
        .expect("redis-cli runs (scripts/deps installs redis-tools)");
    assert!(out.status.success(), "{out:?}");
    let started = Instant::now();
    let after = loop {
        if let Ok(s) = g.status()
            && s.worker != before
            && s.lease == "held"
        {
            break s.worker;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no re-claim: {:?}",
            g.status()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    g.next_id().unwrap();
    let (dc, w) = split(before);
    fixed(layout, dc, w).unwrap();
    let (dc, w) = split(after);
    let e = fixed(layout, dc, w).unwrap_err();
    assert_eq!(e.code(), "worker_taken", "{e}");
    g.close();
    fixed(layout, dc, w).unwrap();
}

/// A forked child's table is its own: its parent's generators neither block
/// it nor are released by it, and its own are checked as usual.
#[test]
fn a_forked_child_has_a_table_of_its_own() {
    let _g = alone();
    let layout = "twitter,epoch=2021-07-08";
    let parents = fixed(layout, 0, 12).unwrap();
    after_fork_in_child();
    assert_eq!(parents.next_id().unwrap_err().code(), "forked");
    // The parent's worker ID is another process's now: the caller's to keep
    // apart, as for any two processes; not this table's.
    let childs = fixed(layout, 0, 12).unwrap();
    childs.next_id().unwrap();
    assert_eq!(fixed(layout, 0, 12).unwrap_err().code(), "worker_taken");
    // Dropping the parent's generator in the child gives back nothing of
    // the child's.
    drop(parents);
    assert_eq!(fixed(layout, 0, 12).unwrap_err().code(), "worker_taken");
}

/// A config whose registry and store keep nothing on disk makes no data
/// directory (PostgreSQL registry, MariaDB store); the file registry and
/// the default store make theirs.
#[test]
fn no_data_directory_unless_something_is_kept_there() {
    let _g = ordinary();
    let Some(url) = crate::support::postgres() else {
        return;
    };
    let cfg = config(&format!(
        "[snowflake]\nlayout = \"twitter,epoch=2021-09-10\"\nregistry = \"sql\"\n\
         [snowflake.sql]\nurl = \"{url}\"\ncluster = \"{}\"\n",
        unique("nodir")
    ));
    let data = cfg.path.with_file_name("data");
    let g = Generator::from_config(&cfg.path).unwrap();
    g.next_id().unwrap();
    g.close();
    assert!(!data.exists(), "{} was made for nothing", data.display());
    if let Some(mariadb) = crate::support::mariadb() {
        let seg = config(&format!(
            "[segment]\nurl = \"{mariadb}\"\ntable = \"{}\"\n[segment.keys.order]\nstep = 10\n",
            unique("nodir")
        ));
        let s = idmint_embed::Segments::from_config(&seg.path).unwrap();
        s.next_id("order").unwrap();
        s.close();
        assert!(!seg.path.with_file_name("data").exists());
    }
    let sqlite = config("[segment.keys.order]\nstep = 10\n");
    let s = idmint_embed::Segments::from_config(&sqlite.path).unwrap();
    s.next_id("order").unwrap();
    assert!(
        sqlite
            .path
            .with_file_name("data")
            .join("segments.db")
            .exists()
    );
}

/// A malformed obfuscation key given as a value is `invalid_key`, as
/// docs/api.md says of the library; in a config file it is a setting.
#[test]
fn a_malformed_obfuscation_key_is_invalid_key() {
    let _g = ordinary();
    for ring in [
        "zz",
        "abc",
        "0:zz",
        "x:000102030405060708090a0b0c0d0e0f",
        "",
    ] {
        let e = idmint_embed::PublicIds::new(ring, 63, 0, None, "dec").unwrap_err();
        assert_eq!(e.code(), "invalid_key", "{ring:?}: {e}");
        assert!(e.is_bad_input());
    }
    let key = "000102030405060708090a0b0c0d0e0f";
    let e = idmint_embed::PublicIds::new(key, 63, 0, None, "hex").unwrap_err();
    assert_eq!(e.code(), "invalid_obfuscator", "{e}");
    let e = idmint_embed::PublicIds::new(key, 20, 0, None, "dec").unwrap_err();
    assert_eq!(e.code(), "invalid_obfuscator", "{e}");
    let cfg = config("[obfuscation]\nkey = \"zz\"\n");
    assert_eq!(
        idmint_embed::PublicIds::from_config(&cfg.path)
            .unwrap_err()
            .code(),
        "invalid_config"
    );
}
