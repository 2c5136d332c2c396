//! `idmint serve` on uid-generator's own `WORKER_NODE` table: the `sql`
//! registry's `uid-generator` mode, end to end on MariaDB.
//!
//! The table is made with uid-generator's DDL (`WORKER_NODE.sql`) and holds
//! rows a uid-generator deployment left. The server runs uid-generator's bit
//! split (the `baidu` preset's 28 s · 22 · 13) with an epoch where the preset
//! ran out, since the preset itself refuses to issue; each ID it hands out
//! decodes to the worker of the row it inserted, an `ACTUAL` row, or a
//! `CONTAINER` row where uid-generator's container variables are set.
//!
//! Needs MariaDB at 127.0.0.1:3306 (user root, database `test`) and its
//! command-line client `mysql`. When either is missing the test prints
//! `SKIPPED`, and fails under `CI=true`.

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use idmint_core::Layout;
use idmint_testkit::require_service;
use serde_json::Value;

use crate::serve::{Served, binary_ids, client, get};

/// Runs `sql` with the `mysql` client on the `test` database; returns stdout
/// (tab-separated, no header).
fn mysql(sql: &str) -> String {
    let out = Command::new("mysql")
        .args([
            "-uroot",
            "-h127.0.0.1",
            "-P3306",
            "--batch",
            "--skip-column-names",
            "test",
            "-e",
        ])
        .arg(sql)
        .output()
        .expect("run mysql");
    assert!(
        out.status.success(),
        "mysql failed on {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Drops the test's tables and the side table's migration record.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let t = &self.0;
        let _ = Command::new("mysql")
            .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
            .arg(format!(
                "DROP TABLE IF EXISTS {t}; DROP TABLE IF EXISTS {t}_IDMINT; \
                 DELETE FROM idmint_schema_migrations WHERE component = 'registry:{t}_IDMINT'"
            ))
            .output();
    }
}

#[test]
fn serve_uid_generator_worker_node_hands_out_the_new_rows_worker() {
    let up = TcpStream::connect_timeout(&"127.0.0.1:3306".parse().unwrap(), Duration::from_secs(2))
        .is_ok();
    let client_present = Command::new("mysql").arg("--version").output().is_ok();
    if !require_service("MariaDB and its mysql client", up && client_present) {
        return;
    }
    let table = format!(
        "WN_SERVE_{}_{}",
        std::process::id(),
        jiff::Timestamp::now().as_microsecond() % 1_000_000_000
    );
    let _cleanup = Cleanup(table.clone());
    // uid-generator's WORKER_NODE.sql, table name aside.
    mysql(&format!(
        "DROP TABLE IF EXISTS {table};
CREATE TABLE {table}
(
ID BIGINT NOT NULL AUTO_INCREMENT COMMENT 'auto increment id',
HOST_NAME VARCHAR(64) NOT NULL COMMENT 'host name',
PORT VARCHAR(64) NOT NULL COMMENT 'port',
TYPE INT NOT NULL COMMENT 'node type: ACTUAL or CONTAINER',
LAUNCH_DATE DATE NOT NULL COMMENT 'launch date',
MODIFIED TIMESTAMP NOT NULL COMMENT 'modified time',
CREATED TIMESTAMP NOT NULL COMMENT 'created time',
PRIMARY KEY(ID)
)
 COMMENT='DB WorkerID Assigner for UID Generator',ENGINE = INNODB;
INSERT INTO {table} (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) VALUES
 ('10.20.0.11', '1479101245117-53412', 2, '2016-11-14', NOW(), NOW()),
 ('10.20.0.12', '1479101247001-8', 2, '2016-11-14', NOW(), NOW()),
 ('jpaas-web-3.example', '8080', 1, '2017-03-02', NOW(), NOW());"
    ));
    let layout_text = "baidu,epoch=2024-11-20T13:24:16Z";
    let config = format!(
        r#"
[server]
admin_token = "t"

[snowflake]
layout = "{layout_text}"
registry = "sql"

[snowflake.sql]
url = "mysql://root@127.0.0.1:3306/test"
mode = "uid-generator"
table = "{table}"

[keys.order]
strategy = "snowflake"
"#
    );
    let layout: Layout = layout_text.parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let mut workers = Vec::new();
    for run in 0..2 {
        let server = Served::start(&dir.path().join(format!("run{run}")), Some(&config), &[]);
        let rows = mysql(&format!(
            "SELECT ID, TYPE, HOST_NAME, PORT REGEXP '^[0-9]{{13}}-[0-9]{{1,5}}$' FROM {table} \
             ORDER BY ID DESC LIMIT 1"
        ));
        let fields: Vec<&str> = rows.trim_end().split('\t').collect();
        let row_id: u32 = fields[0].parse().unwrap();
        assert_eq!(row_id, 4 + run, "continues above the rows already there");
        assert_eq!((fields[1], fields[3]), ("2", "1"), "an ACTUAL row: {rows}");

        let ids = binary_ids(&c, &server, "order", 1000);
        assert_eq!(ids.len(), 1000);
        for &id in &ids {
            let d = layout.decode(id).unwrap();
            assert_eq!(d.worker, row_id, "ID {id} decodes to the row's worker");
        }
        let (status, body) = get(&c, &server.url(&format!("/v1/decode/{}", ids[0])));
        assert!(status.is_success(), "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["worker"], row_id, "{body}");
        let v: Value = c
            .get(server.url("/v1/admin/workers"))
            .bearer_auth("t")
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(v["workers"][0]["worker"], row_id, "{v}");
        // The side table keeps the running worker's mark, their table no
        // column of idmint's.
        let side = mysql(&format!(
            "SELECT WORKER_ID, MARK_US IS NOT NULL FROM {table}_IDMINT WHERE WORKER_ID = {row_id}"
        ));
        assert_eq!(side.trim_end(), format!("{row_id}\t1"));
        workers.push(row_id);
        let (status, log) = server.terminate();
        assert!(status.success(), "{log}");
    }
    assert_eq!(workers, [4, 5], "each start takes a new row");

    // In a container as uid-generator recognises one, the row says so.
    let env = [
        ("JPAAS_HOST", "box-7.example"),
        ("JPAAS_HTTP_PORT", "31080"),
    ];
    let server = Served::start(&dir.path().join("container"), Some(&config), &env);
    let row = mysql(&format!(
        "SELECT ID, TYPE, HOST_NAME, PORT FROM {table} ORDER BY ID DESC LIMIT 1"
    ));
    assert_eq!(row.trim_end(), "6\t1\tbox-7.example\t31080");
    let ids = binary_ids(&c, &server, "order", 10);
    assert!(ids.iter().all(|&id| layout.decode(id).unwrap().worker == 6));
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let columns = mysql(&format!(
        "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND \
         table_name = '{table}'"
    ));
    assert_eq!(
        columns.trim_end(),
        "7",
        "their table keeps exactly its columns"
    );
}
