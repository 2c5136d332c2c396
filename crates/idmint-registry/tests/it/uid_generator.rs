//! The `sql` registry's uid-generator mode on uid-generator's own `WORKER_NODE`
//! table, on real MariaDB and PostgreSQL.
//!
//! Each test creates its table with uid-generator's DDL (`WORKER_NODE.sql`)
//! under a name of its own, fills it with rows like those a uid-generator
//! deployment leaves (through uid-generator's own `addWorkerNode` statement),
//! and drops it, its side table and the side table's migration records at the
//! end.
//!
//! - MariaDB gets the DDL as uid-generator ships it, table name aside.
//! - PostgreSQL gets the closest faithful translation: `ID BIGSERIAL` for
//!   `BIGINT AUTO_INCREMENT` (a sequence that counts up, as `AUTO_INCREMENT`
//!   does), the same names and widths otherwise (`VARCHAR(64)`, `INT`, `DATE`,
//!   `TIMESTAMP`), and `COMMENT ON` for MySQL's inline comments; unquoted, so
//!   PostgreSQL folds the names to lower case as it would for uid-generator's
//!   own statements.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idmint_registry::sql::{EPOCH_TABLE, SqlConfig, SqlMode, SqlRegistry};
use idmint_registry::{Claim, NodeIdentity, RegistryError, WorkerRegistry};
use idmint_sql::{ConnectOptions, MIGRATIONS_TABLE, on_pool};
use jiff::{SignedDuration, Timestamp};

use crate::support::{exec_sql, exec_sql_on_drop, identity, require_service};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Db {
    Postgres,
    MariaDb,
}

/// One test's `WORKER_NODE` (under a name of its own) on one database.
struct TheirTable {
    db: Db,
    url: String,
    /// As configured (upper case, as uid-generator's DDL writes it).
    table: String,
}

/// uid-generator's `WORKER_NODE.sql`, byte for byte but the table name.
fn mysql_ddl(t: &str) -> Vec<String> {
    vec![
        format!("DROP TABLE IF EXISTS {t}"),
        format!(
            "CREATE TABLE {t}
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
 COMMENT='DB WorkerID Assigner for UID Generator',ENGINE = INNODB"
        ),
    ]
}

/// The PostgreSQL translation (see the module docs).
fn postgres_ddl(t: &str) -> Vec<String> {
    vec![
        format!("DROP TABLE IF EXISTS {t}"),
        format!(
            "CREATE TABLE {t}
(
ID BIGSERIAL NOT NULL,
HOST_NAME VARCHAR(64) NOT NULL,
PORT VARCHAR(64) NOT NULL,
TYPE INT NOT NULL,
LAUNCH_DATE DATE NOT NULL,
MODIFIED TIMESTAMP NOT NULL,
CREATED TIMESTAMP NOT NULL,
PRIMARY KEY(ID)
)"
        ),
        format!("COMMENT ON TABLE {t} IS 'DB WorkerID Assigner for UID Generator'"),
        format!("COMMENT ON COLUMN {t}.ID IS 'auto increment id'"),
        format!("COMMENT ON COLUMN {t}.TYPE IS 'node type: ACTUAL or CONTAINER'"),
    ]
}

/// Rows a uid-generator deployment leaves: actual machines (`TYPE` 2, an IP
/// and `<ms>-<random>`) and a container (`TYPE` 1, `JPAAS_HOST` and its port),
/// inserted with `WORKER_NODE.xml`'s `addWorkerNode` statement.
const THEIR_ROWS: [(&str, &str, i64, &str); 5] = [
    ("10.20.0.11", "1479101245117-53412", 2, "2016-11-14"),
    ("10.20.0.12", "1479101247001-8", 2, "2016-11-14"),
    ("jpaas-web-3.example", "8080", 1, "2017-03-02"),
    ("10.20.0.11", "1530007112950-99120", 2, "2018-06-26"),
    ("10.20.0.13", "1700000000000-4711", 2, "2023-11-14"),
];

impl TheirTable {
    /// The table for `test` on `db`, created with uid-generator's DDL and
    /// filled with [`THEIR_ROWS`]; `None` (after a loud SKIPPED line) when the
    /// database is down outside CI.
    async fn new(db: Db, test: &str) -> Option<TheirTable> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let (url, port, name) = match db {
            Db::Postgres => (
                std::env::var("IDMINT_TEST_POSTGRES_URL")
                    .unwrap_or_else(|_| idmint_testkit::POSTGRES_URL.to_owned()),
                5432,
                "PostgreSQL",
            ),
            Db::MariaDb => (
                std::env::var("IDMINT_TEST_MYSQL_URL")
                    .unwrap_or_else(|_| idmint_testkit::MYSQL_URL.to_owned()),
                3306,
                "MariaDB",
            ),
        };
        let up = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            std::time::Duration::from_secs(1),
        )
        .is_ok();
        if !require_service(name, up || !url.contains("127.0.0.1")) {
            return None;
        }
        let nanos = Timestamp::now().as_nanosecond() % 1_000_000_000;
        let table = format!(
            "WN_{}_{}_{nanos}_{}",
            test.split('_')
                .filter_map(|w| w.chars().next())
                .collect::<String>(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        )
        .to_ascii_uppercase();
        let env = TheirTable { db, url, table };
        let ddl = match db {
            Db::Postgres => postgres_ddl(&env.table),
            Db::MariaDb => mysql_ddl(&env.table),
        };
        env.exec(&ddl).await;
        for (host, port, node_type, launch) in THEIR_ROWS {
            env.exec(&[format!(
                "INSERT INTO {} (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) \
                 VALUES ('{host}', '{port}', {node_type}, '{launch}', NOW(), NOW())",
                env.table
            )])
            .await;
        }
        Some(env)
    }

    fn config(&self) -> SqlConfig {
        SqlConfig::new(SqlMode::UidGenerator)
            .with_table(&self.table)
            .with_max_connections(1)
    }

    /// A node: a registry with a pool of its own.
    async fn node(&self) -> SqlRegistry {
        SqlRegistry::connect(&self.url, self.config())
            .await
            .unwrap_or_else(|e| panic!("{:?}: connect failed: {e}", self.db))
    }

    fn side(&self) -> String {
        format!("{}_IDMINT", self.table)
    }

    /// The side table as the database names it: the key of its epoch row.
    fn epoch_key(&self) -> String {
        match self.db {
            Db::Postgres => self.side().to_ascii_lowercase(),
            Db::MariaDb => self.side(),
        }
    }

    /// The side table's migration component, as the database names the table.
    fn component(&self) -> String {
        format!("registry:{}", self.epoch_key())
    }

    async fn admin(&self) -> idmint_sql::Database {
        idmint_sql::Database::connect(&ConnectOptions::new(self.url.clone()))
            .await
            .unwrap_or_else(|e| panic!("{:?}: admin connect failed: {e}", self.db))
    }

    async fn exec(&self, statements: &[String]) {
        let admin = self.admin().await;
        exec_sql(&admin, statements).await;
        admin.close().await;
    }

    /// One text column of each row `sql` returns.
    async fn texts(&self, sql: &str) -> Vec<String> {
        let admin = self.admin().await;
        let rows: Vec<String> =
            on_pool!(admin.pool(), p => sqlx::query_scalar(sql).fetch_all(p).await)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        admin.close().await;
        rows
    }

    /// `SELECT` a text cast of `expr` for the database.
    fn text(&self, expr: &str) -> String {
        match self.db {
            Db::Postgres => format!("CAST({expr} AS TEXT)"),
            Db::MariaDb => format!("CAST({expr} AS CHAR)"),
        }
    }

    /// Every row of uid-generator's table, each as
    /// `ID|HOST_NAME|PORT|TYPE|LAUNCH_DATE|MODIFIED=CREATED?`, in `ID` order.
    async fn rows(&self) -> Vec<String> {
        let sep = "'|'";
        let row = [
            self.text("ID"),
            "HOST_NAME".to_owned(),
            "PORT".to_owned(),
            self.text("TYPE"),
            self.text("LAUNCH_DATE"),
            format!(
                "CASE WHEN MODIFIED = CREATED THEN 'same' ELSE {} END",
                self.text("MODIFIED")
            ),
        ]
        .join(&format!(", {sep}, "));
        let row = self.text(&format!("CONCAT({row})"));
        self.texts(&format!("SELECT {row} FROM {} ORDER BY ID", self.table))
            .await
    }

    /// The side table's `(WORKER_ID, MARK_US, TOKEN IS NOT NULL)` rows.
    async fn side_rows(&self) -> Vec<String> {
        let row = format!(
            "CONCAT({}, '|', COALESCE({}, '-'), '|', CASE WHEN TOKEN IS NULL THEN 'free' ELSE \
             'held' END)",
            self.text("WORKER_ID"),
            self.text("MARK_US")
        );
        let row = self.text(&row);
        self.texts(&format!(
            "SELECT {row} FROM {} ORDER BY WORKER_ID",
            self.side()
        ))
        .await
    }

    /// The columns of uid-generator's table, upper-cased and sorted.
    async fn their_columns(&self) -> Vec<String> {
        let sql = match self.db {
            Db::Postgres => format!(
                "SELECT CAST(column_name AS TEXT) FROM information_schema.columns WHERE \
                 table_schema = current_schema() AND table_name = '{}'",
                self.table.to_ascii_lowercase()
            ),
            Db::MariaDb => format!(
                "SELECT CAST(column_name AS CHAR(64)) FROM information_schema.columns WHERE \
                 table_schema = DATABASE() AND table_name = '{}'",
                self.table
            ),
        };
        let mut columns: Vec<String> = self
            .texts(&sql)
            .await
            .into_iter()
            .map(|c| c.to_ascii_uppercase())
            .collect();
        columns.sort();
        columns
    }

    async fn today(&self) -> String {
        let sql = format!("SELECT {}", self.text("CURRENT_DATE"));
        self.texts(&sql).await.remove(0)
    }
}

impl Drop for TheirTable {
    /// Drops both tables and the side table's migration records, even after a
    /// panic. Best effort: a failure leaves litter, not a wrong result.
    fn drop(&mut self) {
        let statements = vec![
            format!("DROP TABLE IF EXISTS {}", self.table),
            format!("DROP TABLE IF EXISTS {}", self.side()),
            format!(
                "DELETE FROM {MIGRATIONS_TABLE} WHERE component = '{}'",
                self.component()
            ),
            format!(
                "DELETE FROM {EPOCH_TABLE} WHERE WORKER_TABLE = '{}'",
                self.epoch_key()
            ),
        ];
        exec_sql_on_drop(self.url.clone(), statements);
    }
}

/// The layout's range for `baidu` (22 worker bits).
const BAIDU_RANGE: u32 = 1 << 22;

/// A mark with whole microseconds, so it reads back exactly.
fn mark_at(offset: SignedDuration) -> Timestamp {
    let t = Timestamp::now() + offset;
    Timestamp::from_microsecond(t.as_microsecond()).unwrap()
}

async fn a_claim_continues_above_their_rows_with_a_row_like_theirs(env: TheirTable) {
    let before = env.rows().await;
    assert_eq!(before.len(), THEIR_ROWS.len());
    let columns = env.their_columns().await;
    let node = env.node().await;
    let me = NodeIdentity {
        host: "idmint-1".to_owned(),
        address: "10.20.0.99".to_owned(),
        port: 8080,
    };
    let started_ms = Timestamp::now().as_millisecond();
    let claim = node.claim(&me, BAIDU_RANGE).await.unwrap();
    let ended_ms = Timestamp::now().as_millisecond();
    assert_eq!(claim.worker, 6, "{:?}: the next ID after five rows", env.db);
    assert_eq!(claim.stored_mark, None, "a new row has no history");
    assert_eq!(claim.lease, None, "uid-generator's rows have no lease");

    let after = env.rows().await;
    assert_eq!(
        after[..5],
        before[..],
        "{:?}: their rows are untouched",
        env.db
    );
    assert_eq!(after.len(), 6);
    // DisposableWorkerIdAssigner on an actual machine: the IP, `<ms>-<random
    // below 100000>`, TYPE 2 (ACTUAL), today, MODIFIED = CREATED = NOW().
    let fields: Vec<&str> = after[5].split('|').collect();
    assert_eq!(fields[0], "6");
    assert_eq!(fields[1], "10.20.0.99");
    let (ms, random) = fields[2].split_once('-').expect("PORT is <ms>-<random>");
    let ms: i64 = ms.parse().unwrap();
    assert!(
        (started_ms - 1000..=ended_ms + 1000).contains(&ms),
        "{ms} not within the claim"
    );
    assert!(random.parse::<u32>().unwrap() < 100_000, "{random}");
    assert_eq!(fields[3], "2");
    assert_eq!(fields[4], env.today().await);
    assert_eq!(fields[5], "same", "MODIFIED = CREATED");
    assert_eq!(
        env.their_columns().await,
        columns,
        "{:?}: their table keeps exactly its columns",
        env.db
    );
    assert_eq!(env.side_rows().await, ["6|-|held"]);
}

async fn concurrent_claims_get_distinct_ids_above_the_max(env: TheirTable) {
    let env = Arc::new(env);
    let mut tasks = Vec::new();
    for n in 0..6 {
        let env = env.clone();
        tasks.push(tokio::spawn(async move {
            let node = env.node().await;
            node.claim(&identity(n), BAIDU_RANGE).await.unwrap().worker
        }));
    }
    let mut workers = BTreeSet::new();
    for t in tasks {
        assert!(workers.insert(t.await.unwrap()), "{workers:?}");
    }
    assert_eq!(
        workers.into_iter().collect::<Vec<_>>(),
        [6, 7, 8, 9, 10, 11],
        "{:?}",
        env.db
    );
    assert_eq!(env.rows().await.len(), 11);
    assert_eq!(env.side_rows().await.len(), 6);
}

async fn marks_only_rise_and_peers_report(env: TheirTable) {
    let a = env.node().await;
    let b = env.node().await;
    let ca = a.claim(&identity(1), BAIDU_RANGE).await.unwrap();
    let cb = b.claim(&identity(2), BAIDU_RANGE).await.unwrap();
    assert_eq!((ca.worker, cb.worker), (6, 7));
    let high = mark_at(SignedDuration::from_secs(3));
    let low = mark_at(SignedDuration::from_secs(1));
    a.persist_mark(&ca, high, Timestamp::now()).await.unwrap();
    a.persist_mark(&ca, low, Timestamp::now()).await.unwrap();
    let side = env.side_rows().await;
    assert_eq!(
        side[0],
        format!("6|{}|held", high.as_microsecond()),
        "{:?}: the mark never goes down",
        env.db
    );
    let reported = mark_at(SignedDuration::ZERO);
    b.persist_mark(&cb, high, reported).await.unwrap();
    assert_eq!(b.renew(&cb).await.unwrap(), None);
    let peers = a.peers(&ca).await.unwrap();
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!((peers[0].worker, peers[0].reported), (7, reported));
    assert!(b.peers(&cb).await.unwrap().iter().all(|p| p.worker == 6));

    // Fenced by the claim's token: a forged claim changes nothing.
    let forged = Claim {
        token: "not-the-token".to_owned(),
        ..ca.clone()
    };
    let far = mark_at(SignedDuration::from_hours(1));
    let err = a.persist_mark(&forged, far, far).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker: 6, .. }),
        "{err}"
    );
    assert_eq!(
        env.side_rows().await[0],
        format!("6|{}|held", high.as_microsecond())
    );
    let err = a
        .claim_worker(&identity(1), 3, BAIDU_RANGE)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_unsupported", "{err}");
}

/// The fleet names each holder from the side table's `HOLDER`, with no lease
/// (the mode has none), and drops a released one.
async fn the_fleet_names_holders_without_leases(env: TheirTable) {
    let a = env.node().await;
    let ca = a.claim(&identity(1), BAIDU_RANGE).await.unwrap();
    let cb = a.claim(&identity(2), BAIDU_RANGE).await.unwrap();
    let high = mark_at(SignedDuration::from_secs(3));
    let reported = mark_at(SignedDuration::ZERO);
    a.persist_mark(&ca, high, reported).await.unwrap();
    let fleet = a.fleet().await.unwrap();
    assert_eq!(fleet.len(), 2, "{:?}: {fleet:?}", env.db);
    assert_eq!((fleet[0].worker, fleet[1].worker), (ca.worker, cb.worker));
    assert!(fleet[0].is_node(&identity(1)), "{fleet:?}");
    assert_eq!(fleet[0].host.as_deref(), Some("node-1"));
    assert!(fleet[1].is_node(&identity(2)), "{fleet:?}");
    assert!(fleet.iter().all(|m| m.live && m.lease_left.is_none()));
    assert_eq!(
        (fleet[0].mark, fleet[0].reported),
        (Some(high), Some(reported))
    );
    assert_eq!((fleet[1].mark, fleet[1].reported), (None, None));
    a.release(&cb).await.unwrap();
    let fleet = a.fleet().await.unwrap();
    assert_eq!(
        fleet.iter().map(|m| m.worker).collect::<Vec<_>>(),
        [ca.worker],
        "{:?}: a released holder is listed",
        env.db
    );
}

/// A peer counts as live while it reports: each report extends its deadline
/// by the TTL (the keeper never renews a claim without a lease).
async fn a_peer_is_live_while_it_reports(env: TheirTable) {
    let ttl = std::time::Duration::from_secs(1);
    let a = SqlRegistry::connect(&env.url, env.config().with_lease_ttl(ttl))
        .await
        .unwrap();
    let ca = a.claim(&identity(1), BAIDU_RANGE).await.unwrap();
    let cb = a.claim(&identity(2), BAIDU_RANGE).await.unwrap();
    let mark = mark_at(SignedDuration::from_secs(3));
    for _ in 0..3 {
        a.persist_mark(&cb, mark, mark_at(SignedDuration::ZERO))
            .await
            .unwrap();
        tokio::time::sleep(ttl / 2).await;
        let peers = a.peers(&ca).await.unwrap();
        assert_eq!(peers.len(), 1, "{:?}: {peers:?}", env.db);
    }
    tokio::time::sleep(ttl + ttl / 2).await;
    assert!(
        a.peers(&ca).await.unwrap().is_empty(),
        "{:?}: silent for longer than the TTL",
        env.db
    );
}

async fn a_restart_gets_a_new_row_and_the_old_mark_stays(env: TheirTable) {
    let node = env.node().await;
    let first = node.claim(&identity(1), BAIDU_RANGE).await.unwrap();
    let mark = mark_at(SignedDuration::from_secs(3));
    node.persist_mark(&first, mark, Timestamp::now())
        .await
        .unwrap();
    node.release(&first).await.unwrap();
    node.close().await;

    let node = env.node().await;
    let second = node.claim(&identity(1), BAIDU_RANGE).await.unwrap();
    assert_eq!(
        (first.worker, second.worker),
        (6, 7),
        "{:?}: a new row",
        env.db
    );
    assert_eq!(second.stored_mark, None);
    assert_eq!(
        env.side_rows().await,
        [
            format!("6|{}|free", mark.as_microsecond()),
            "7|-|held".to_owned()
        ]
    );
    let err = node.persist_mark(&first, mark, mark).await.unwrap_err();
    assert!(matches!(err, RegistryError::LeaseLost { .. }), "{err}");
    assert_eq!(env.rows().await.len(), 7);
}

/// Should the table's counter hand out an ID again (rows deleted and the
/// counter lowered), the claim starts above the mark the ID's last holder left.
async fn an_id_handed_out_again_starts_above_its_mark(env: TheirTable) {
    let node = env.node().await;
    let first = node.claim(&identity(1), BAIDU_RANGE).await.unwrap();
    let mark = mark_at(SignedDuration::from_secs(3));
    node.persist_mark(&first, mark, Timestamp::now())
        .await
        .unwrap();
    let t = &env.table;
    let delete = format!("DELETE FROM {t} WHERE ID = {}", first.worker);
    // While the holder is live, the repeated ID is refused.
    let lower = match env.db {
        Db::MariaDb => format!("ALTER TABLE {t} AUTO_INCREMENT = 1"),
        Db::Postgres => format!("SELECT setval(pg_get_serial_sequence('{t}', 'id'), 5)"),
    };
    env.exec(&[delete.clone(), lower.clone()]).await;
    let err = node.claim(&identity(2), BAIDU_RANGE).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::WorkerTaken { worker: 6, .. }),
        "{:?}: {err}",
        env.db
    );
    assert!(err.to_string().contains("auto-increment"), "{err}");

    node.release(&first).await.unwrap();
    env.exec(&[delete, lower]).await;
    let again = node.claim(&identity(2), BAIDU_RANGE).await.unwrap();
    assert_eq!(again.worker, 6);
    assert_eq!(again.stored_mark, Some(mark), "{:?}", env.db);
}

async fn a_full_range_is_a_typed_error_that_inserts_nothing(env: TheirTable) {
    let node = env.node().await;
    let err = node.claim(&identity(1), 6).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Exhausted {
                in_use: 5,
                range: 6,
                ..
            }
        ),
        "{:?}: {err}",
        env.db
    );
    assert_eq!(env.rows().await.len(), 5, "nothing inserted");
    assert_eq!(node.claim(&identity(1), 7).await.unwrap().worker, 6);
    let err = node.claim(&identity(1), 7).await.unwrap_err();
    assert_eq!(err.code(), "workers_exhausted", "{err}");
}

async fn a_missing_or_foreign_table_is_refused(env: TheirTable) {
    let config = env.config().with_table(format!("{}_NONE", env.table));
    let err = SqlRegistry::connect(&env.url, config).await.unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    assert!(err.to_string().contains("WORKER_NODE.sql"), "{err}");
    env.exec(&[format!("ALTER TABLE {} DROP COLUMN LAUNCH_DATE", env.table)])
        .await;
    let err = SqlRegistry::connect(&env.url, env.config())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    assert!(err.to_string().contains("LAUNCH_DATE"), "{err}");
    assert_eq!(env.row_count().await, 5, "nothing inserted");
}

/// The database server changed under a running node (a promoted replica;
/// here the epoch's recorded server is edited, which is what the registry
/// sees): a replica that lacks the last `WORKER_NODE` insert hands its `ID`
/// out again, so a claim is held (and inserts no row while held), the
/// holder fences at its next mark, and the next claim starts above the
/// highest mark it persisted.
async fn a_changed_server_holds_claims_and_fences_holders(env: TheirTable) {
    let config = env
        .config()
        .with_lease_ttl(std::time::Duration::from_millis(300))
        .with_mark_window(std::time::Duration::from_millis(200));
    let holder = SqlRegistry::connect(&env.url, config.clone())
        .await
        .unwrap();
    let claim = holder.claim(&identity(1), BAIDU_RANGE).await.unwrap();
    assert_eq!(claim.worker, 6, "a new cluster is not held");
    let far = mark_at(SignedDuration::from_mins(10));
    holder
        .persist_mark(&claim, far, Timestamp::now())
        .await
        .unwrap();
    env.exec(&[format!(
        "UPDATE {EPOCH_TABLE} SET SERVER_IDENTITY = 'the-old-primary' WHERE WORKER_TABLE = '{}'",
        env.epoch_key()
    )])
    .await;

    let newcomer = SqlRegistry::connect(&env.url, config).await.unwrap();
    let rows = env.row_count().await;
    let err = newcomer.claim(&identity(2), BAIDU_RANGE).await.unwrap_err();
    let RegistryError::Held { retry_after, .. } = &err else {
        panic!("{:?}: claims are held, not {err}", env.db);
    };
    assert!(err.to_string().contains("server changed"), "{err}");
    assert_eq!(env.row_count().await, rows, "nothing inserted while held");

    let err = holder
        .persist_mark(&claim, far, Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("epoch changed"), "{err}");
    let err = holder.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");

    tokio::time::sleep(*retry_after + std::time::Duration::from_millis(20)).await;
    let taken = newcomer.claim(&identity(2), BAIDU_RANGE).await.unwrap();
    assert_eq!(taken.worker, 7);
    assert!(
        taken.stored_mark >= Some(far),
        "{:?}: the floor: {:?}",
        env.db,
        taken.stored_mark
    );
}

impl TheirTable {
    async fn row_count(&self) -> usize {
        self.texts(&format!("SELECT {} FROM {}", self.text("ID"), self.table))
            .await
            .len()
    }
}

/// Runs each scenario as a test named after it in the invoking module.
macro_rules! scenarios {
    ($db:ident: $($test:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                if let Some(env) = super::TheirTable::new(super::Db::$db, stringify!($test)).await {
                    crate::support::within_limit(stringify!($test), super::$test(env)).await;
                }
            }
        )+
    };
}

macro_rules! per_database {
    ($module:ident, $db:ident) => {
        mod $module {
            scenarios!($db:
                a_claim_continues_above_their_rows_with_a_row_like_theirs,
                concurrent_claims_get_distinct_ids_above_the_max,
                marks_only_rise_and_peers_report,
                a_restart_gets_a_new_row_and_the_old_mark_stays,
                a_peer_is_live_while_it_reports,
                the_fleet_names_holders_without_leases,
                an_id_handed_out_again_starts_above_its_mark,
                a_full_range_is_a_typed_error_that_inserts_nothing,
                a_missing_or_foreign_table_is_refused,
                a_changed_server_holds_claims_and_fences_holders,
            );
        }
    };
}

per_database!(mariadb, MariaDb);
per_database!(postgres, Postgres);
