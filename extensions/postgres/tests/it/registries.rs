//! Workers from the registries `idmint serve` has, through `idmint.config`:
//! a config that can't work.

use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::{assert_idmint_error, config_file};

const INSERT: &str = "INSERT INTO t (round) VALUES ($1)";

/// A config that can't work: the server starts, says why in its log, and
/// every call fails with `invalid_config` (22023), inserting nothing.
#[test]
fn a_bad_config_is_an_error_not_an_id() {
    let config = config_file(
        "bad",
        "[snowflake]\nregistry = \"etcd\"\n\n[snowflake.etcd]\nlease_ttl = \"1500ms\"\n",
    );
    let cluster = Cluster::start_with("badconfig", &config.setting());
    let mut client = cluster.client();
    client
        .batch_execute("CREATE EXTENSION idmint; CREATE TABLE t (id bigint DEFAULT idmint_next_id(), round int);")
        .unwrap();
    let started = Instant::now();
    let err = client.execute(INSERT, &[&1]).unwrap_err();
    assert_idmint_error(&err, "22023", &["invalid_config"]);
    let message = err.as_db_error().unwrap().message().to_owned();
    assert!(message.contains("snowflake.etcd"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a bad config made the call wait"
    );
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    let log = cluster.log();
    assert!(
        log.contains("idmint error code: invalid_config") && log.contains("snowflake.etcd"),
        "{log}"
    );

    // A file that isn't there either.
    let missing = Cluster::start_with(
        "missingconfig",
        "idmint.config = '/nonexistent/idmint.toml'",
    );
    let mut client = missing.client();
    client.batch_execute("CREATE EXTENSION idmint").unwrap();
    let err = client
        .query_one("SELECT idmint_next_id()", &[])
        .unwrap_err();
    assert_idmint_error(&err, "22023", &["invalid_config"]);
    assert!(
        err.as_db_error()
            .unwrap()
            .message()
            .contains("/nonexistent/idmint.toml"),
        "{err:?}"
    );
}
