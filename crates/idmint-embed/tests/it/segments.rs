//! Segment keys in process: Leaf's own `leaf_alloc` table on MariaDB, and
//! the embedded default (SQLite in the data directory).

use std::collections::HashSet;

use idmint_embed::Segments;

use crate::support::{config, mariadb, mysql, ordinary, unique};

#[test]
fn leaf_alloc_on_mariadb_continues_above_leafs_ids() {
    let _g = ordinary();
    let Some(url) = mariadb() else { return };
    let table = unique("leaf_alloc");
    // Leaf's DDL (scripts/leaf_alloc.sql) and a row Leaf has issued from.
    mysql(&format!(
        "CREATE TABLE `{table}` (
           `biz_tag` varchar(128) NOT NULL DEFAULT '',
           `max_id` bigint(20) NOT NULL DEFAULT '1',
           `step` int(11) NOT NULL,
           `description` varchar(256) DEFAULT NULL,
           `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
           PRIMARY KEY (`biz_tag`)
         ) ENGINE=InnoDB;
         INSERT INTO `{table}` (biz_tag, max_id, step, description)
           VALUES ('leaf-segment-test', 10001, 2000, 'from Leaf');"
    ));
    let cfg = config(&format!(
        "[segment]\nurl = \"{url}\"\nschema = \"leaf\"\ntable = \"{table}\"\n"
    ));
    let a = Segments::from_config(&cfg.path).unwrap();
    let b = Segments::from_config(&cfg.path).unwrap();
    let mut seen = HashSet::new();
    let mut last_a = 0;
    for _ in 0..3000 {
        let id = a.next_id("leaf-segment-test").unwrap();
        assert!(id > last_a && id >= 10001, "{id} after {last_a}");
        last_a = id;
        assert!(seen.insert(id));
        assert!(seen.insert(b.next_id("leaf-segment-test").unwrap()));
    }
    for id in a.next_ids("leaf-segment-test", 5000).unwrap() {
        assert!(id > last_a && seen.insert(id));
        last_a = id;
    }
    let missing = a.next_id("no-such-key").unwrap_err();
    assert_eq!(missing.code(), "key_not_found", "{missing}");
    assert_eq!(
        a.next_ids("leaf-segment-test", 0).unwrap_err().code(),
        "invalid_count"
    );
    assert_eq!(a.next_id("bad key!").unwrap_err().code(), "invalid_key");
    a.close();
    a.close();
    assert_eq!(a.next_id("leaf-segment-test").unwrap_err().code(), "closed");
    assert_eq!(
        b.try_next_id("leaf-segment-test")
            .unwrap()
            .map(|id| id > 10001),
        Some(true)
    );
    mysql(&format!("DROP TABLE `{table}`"));
}

#[test]
fn declared_keys_on_the_embedded_default_store() {
    let _g = ordinary();
    let cfg = config("[segment.keys.order]\nstep = 100\nstart = 1000\n");
    let s = Segments::from_config(&cfg.path).unwrap();
    let ids: Vec<u64> = (0..250).map(|_| s.next_id("order").unwrap()).collect();
    assert_eq!(ids[0], 1000);
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "dense: {ids:?}");
}

/// Python's binding asks `try_next_id` first (holding the GIL) and calls
/// `next_id` only on `None`. A `try_next_id` that starts a lease or reserves
/// an index and then gives up loses IDs: this walks many segment switches
/// that way and finds every ID.
#[test]
fn try_next_id_then_next_id_loses_no_segment() {
    let _g = ordinary();
    // Steps kept at 10 (they double as segments go fast): 300 switches.
    let cfg = config("[segment]\nmax_step = 10\n[segment.keys.order]\nstep = 10\nstart = 1\n");
    let s = Segments::from_config(&cfg.path).unwrap();
    let ids: Vec<u64> = (0..3000)
        .map(|_| match s.try_next_id("order").unwrap() {
            Some(id) => id,
            None => s.next_id("order").unwrap(),
        })
        .collect();
    assert_eq!(ids[0], 1);
    let gaps: Vec<_> = ids.windows(2).filter(|w| w[1] != w[0] + 1).collect();
    assert!(gaps.is_empty(), "dense, yet gaps at {gaps:?}");
}
