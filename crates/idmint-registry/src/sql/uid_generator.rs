//! The `sql` registry's uid-generator mode ([`SqlMode::UidGenerator`]):
//! worker IDs from uid-generator's own `WORKER_NODE` table, used as its DDL
//! made it, plus a side table of idmint's for what that table has no column
//! for.
//!
//! # uid-generator's table, as it is
//! A claim inserts one row exactly as uid-generator's
//! `DisposableWorkerIdAssigner` does (`WORKER_NODE.xml`, `addWorkerNode`), and
//! the worker ID is the row's auto-increment `ID`. So it continues above every
//! row already there, uid-generator's own and idmint's, and a team keeps its
//! table and the history of worker IDs its IDs were made with:
//! - `HOST_NAME`, `PORT`, `TYPE`: `buildWorkerNode`'s convention. In a
//!   container as uid-generator recognises one (`JPAAS_HOST` and
//!   `JPAAS_HTTP_PORT`, or `JPAAS_HOST_PORT_8080`, set), `TYPE` 1 (`CONTAINER`)
//!   with those two values; otherwise `TYPE` 2 (`ACTUAL`), the node's address
//!   as `HOST_NAME` and `<Unix ms>-<random below 100000>` as `PORT`, so two
//!   starts on one host never share a `(HOST_NAME, PORT)`.
//! - `LAUNCH_DATE` is today's date and `MODIFIED` = `CREATED` the database's
//!   `NOW()`, in the session's time zone as uid-generator's statement has it
//!   (`CURRENT_DATE`/`now()` on PostgreSQL).
//!
//! idmint never creates, alters or deletes uid-generator's table, nor updates
//! its rows. A missing table is refused: a fresh one would count `ID` from 1
//! again and hand out the worker IDs the old IDs were made with.
//!
//! # The side table
//! `<table>_IDMINT` (`WORKER_NODE_IDMINT`), created and upgraded by idmint's
//! migrations (component `registry:<side table>`), one row per worker ID idmint
//! claimed: `WORKER_ID` (the `WORKER_NODE` row's `ID`), `HOLDER`, `TOKEN`,
//! `LIVE_UNTIL` (database clock), `MARK_US`, `REPORTED_US`, `MODIFIED`. It is
//! not needed for uniqueness between nodes (row IDs are never handed out
//! twice), and a restart gets a new row, hence a new worker ID, with no mark to
//! start above. It holds:
//! - each running worker's **high-water mark**, raised before the generator
//!   passes it, as in every registry, and checked against the claim's token,
//!   so the registry contract holds as written;
//! - each worker's **last reported time** and a liveness deadline (the TTL
//!   from each report or renewal), for the clock check against live peers at
//!   start;
//! - the marks of **worker IDs handed out again**: should `WORKER_NODE`'s
//!   auto-increment ever repeat an `ID` (rows deleted, the table recreated from
//!   a dump, `AUTO_INCREMENT` lowered, or InnoDB before MySQL 8 recomputing it
//!   as `MAX(ID) + 1` at restart), the claim finds the ID's row here and starts
//!   above its stored mark; while that row's holder is live, the claim is
//!   refused ([`RegistryError::WorkerTaken`]).
//!
//! uid-generator nodes still running on the same table take rows of their own
//! and never appear in the side table: idmint's nodes don't see them as peers.
//!
//! MySQL/MariaDB and PostgreSQL only: uid-generator keeps `WORKER_NODE` in
//! MySQL, and the translation of its DDL to PostgreSQL works the same way
//! (a `BIGSERIAL` `ID`). SQLite is refused at connect.

use async_trait::async_trait;
use idmint_sql::{Bind, Dialect, Identifier, MigrationSet};
use jiff::Timestamp;

use super::statements::{Guards, sqlite_now_us};
use super::{
    Base, REGISTRY, SqlMode, backend_error, new_token, recent_us, row_ids_only, timestamp_from_us,
    worker_u32,
};
use crate::error::{RegistryError, Result};
use crate::registry::{Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry};
use crate::util::random_u64;

/// uid-generator's `WorkerNodeType`.
const CONTAINER: i64 = 1;
const ACTUAL: i64 = 2;

/// The columns of uid-generator's `WORKER_NODE` that a claim writes or reads.
pub(super) const THEIR_COLUMNS: [&str; 7] = [
    "ID",
    "HOST_NAME",
    "PORT",
    "TYPE",
    "LAUNCH_DATE",
    "MODIFIED",
    "CREATED",
];

/// The side table's columns.
const SIDE_COLUMNS: [&str; 7] = [
    "WORKER_ID",
    "HOLDER",
    "TOKEN",
    "LIVE_UNTIL",
    "MARK_US",
    "REPORTED_US",
    "MODIFIED",
];

/// `VARCHAR(64)` in uid-generator's DDL.
const THEIR_TEXT_LEN: usize = 64;

/// The side table's name for `table` (`WORKER_NODE` → `WORKER_NODE_IDMINT`),
/// before PostgreSQL's folding.
pub(super) fn side_table(table: &Identifier) -> Result<Identifier> {
    Identifier::new(format!("{table}_IDMINT")).map_err(|e| {
        RegistryError::config(
            REGISTRY,
            format!(
                "table {table}: its side table {table}_IDMINT is not a valid name ({e}); use a \
             shorter table name"
            ),
        )
    })
}

/// The side table's migrations (component `registry:<side table>`).
pub(super) fn migrations(dialect: Dialect, side: &Identifier) -> MigrationSet {
    let t = dialect.quote(side);
    // SQLite's forms are never run (connect refuses SQLite in this mode);
    // they keep the match total.
    let create = match dialect {
        Dialect::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                WORKER_ID BIGINT NOT NULL PRIMARY KEY,
                HOLDER VARCHAR(512) NOT NULL,
                TOKEN VARCHAR(64) NULL,
                LIVE_UNTIL TIMESTAMPTZ NULL,
                MARK_US BIGINT NULL,
                REPORTED_US BIGINT NULL,
                MODIFIED TIMESTAMPTZ NOT NULL
            )"
        ),
        Dialect::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                WORKER_ID BIGINT NOT NULL,
                HOLDER VARCHAR(512) NOT NULL,
                TOKEN VARCHAR(64) NULL,
                LIVE_UNTIL DATETIME(6) NULL,
                MARK_US BIGINT NULL,
                REPORTED_US BIGINT NULL,
                MODIFIED DATETIME(6) NOT NULL,
                PRIMARY KEY (WORKER_ID)
            ) ENGINE=InnoDB"
        ),
        Dialect::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                WORKER_ID INTEGER NOT NULL PRIMARY KEY,
                HOLDER TEXT NOT NULL,
                TOKEN TEXT NULL,
                LIVE_UNTIL INTEGER NULL,
                MARK_US INTEGER NULL,
                REPORTED_US INTEGER NULL,
                MODIFIED TEXT NOT NULL
            )"
        ),
    };
    MigrationSet::new(format!("registry:{side}"))
        .with_migration(
            1,
            "create the side table of uid-generator's WORKER_NODE (high-water marks, last \
             reported times, liveness)",
            [create],
        )
        .with_migration(
            2,
            "stamp each report with the database's clock (REPORTED_AT) and the holding that \
             wrote it (REPORTED_TOKEN), so a start weighs a report by its age",
            super::statements::report_stamp_columns(dialect, &t),
        )
}

/// The values of a new `WORKER_NODE` row: `(HOST_NAME, PORT, TYPE)`, as
/// `DisposableWorkerIdAssigner.buildWorkerNode` makes them. `env` reads an
/// environment variable; `now_ms` and `random` make an `ACTUAL` row's port.
pub(super) fn node_row(
    node: &NodeIdentity,
    env: impl Fn(&str) -> Option<String>,
    now_ms: i64,
    random: u64,
) -> Result<(String, String, i64)> {
    // `DockerUtils.retrieveFromEnv`: blank counts as unset.
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let host = var("JPAAS_HOST");
    let port = var("JPAAS_HTTP_PORT").or_else(|| var("JPAAS_HOST_PORT_8080"));
    match (host, port) {
        (Some(host), Some(port)) => Ok((clip(&host), clip(&port), CONTAINER)),
        (None, None) => Ok((
            clip(&node.address),
            format!("{now_ms}-{}", random % 100_000),
            ACTUAL,
        )),
        (host, port) => Err(RegistryError::config(
            REGISTRY,
            format!(
                "uid-generator's container convention needs both JPAAS_HOST and JPAAS_HTTP_PORT \
             (or JPAAS_HOST_PORT_8080), but only {} is set ({:?})",
                if host.is_some() {
                    "JPAAS_HOST"
                } else {
                    "the port"
                },
                host.or(port).unwrap_or_default()
            ),
        )),
    }
}

/// At most 64 characters, the width of uid-generator's text columns.
fn clip(s: &str) -> String {
    s.chars().take(THEIR_TEXT_LEN).collect()
}

/// Every statement of uid-generator mode, built once per registry.
#[derive(Debug)]
pub(super) struct Statements {
    /// The side table as the database names it.
    pub(super) side: Identifier,
    max_id: String,
    insert_node: String,
    count_below: String,
    side_insert: String,
    side_take: String,
    side_mark: String,
    side_holder: String,
    pub(super) side_renew: String,
    pub(super) side_persist: String,
    pub(super) side_peers: String,
    pub(super) side_release: String,
    pub(super) side_fleet: String,
}

impl Statements {
    /// `t`: uid-generator's table, quoted; `side`: the side table as the
    /// database names it; `guards`: the epoch conditions of the fenced
    /// statements (uid-generator's own insert carries none: it stays
    /// theirs, and a claim checks the epoch before it).
    pub(super) fn new(dialect: Dialect, t: &str, side: Identifier, guards: &Guards) -> Self {
        let s_q = dialect.quote(&side);
        let s = &s_q;
        // `db_now`/`live_for` for LIVE_UNTIL (compared on the database clock),
        // `wall` for the side table's MODIFIED; `their_now`/`today` are what
        // uid-generator's insert writes (`NOW()`, the session's time zone).
        let (db_now, live_for, wall, their_now, today) = match dialect {
            Dialect::Postgres => (
                "now()",
                "(now() + ?::bigint * interval '1 microsecond')",
                "now()",
                "now()",
                "CURRENT_DATE",
            ),
            Dialect::MySql => (
                "UTC_TIMESTAMP(6)",
                "DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)",
                "UTC_TIMESTAMP(6)",
                "NOW()",
                "CURDATE()",
            ),
            Dialect::Sqlite => (
                sqlite_now_us!(),
                concat!("(", sqlite_now_us!(), " + ?)"),
                "strftime('%Y-%m-%d %H:%M:%f', 'now')",
                "datetime('now', 'localtime')",
                "date('now', 'localtime')",
            ),
        };
        let free = format!("(TOKEN IS NULL OR LIVE_UNTIL IS NULL OR LIVE_UNTIL <= {db_now})");
        let left = super::micros_left(dialect, "LIVE_UNTIL");
        let raise_mark =
            "MARK_US = CASE WHEN MARK_US IS NULL OR MARK_US < ? THEN ? ELSE MARK_US END";
        let stamp = super::statements::report_stamp(dialect);
        let age = super::statements::report_age(dialect);
        let p = |sql: String| dialect.placeholders(&sql);
        let Guards { claim, holder } = guards;
        let dual = if dialect == Dialect::MySql {
            " FROM DUAL"
        } else {
            ""
        };
        Statements {
            max_id: p(format!("SELECT MAX(ID) FROM {t}")),
            insert_node: p(format!(
                "INSERT INTO {t} (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) \
                 VALUES (?, ?, ?, {today}, {their_now}, {their_now}){}",
                if dialect == Dialect::MySql {
                    ""
                } else {
                    " RETURNING ID"
                }
            )),
            count_below: p(format!("SELECT COUNT(*) FROM {t} WHERE ID < ?")),
            side_insert: p(format!(
                "INSERT INTO {s} (WORKER_ID, HOLDER, TOKEN, LIVE_UNTIL, MODIFIED) \
                 SELECT ?, ?, ?, {live_for}, {wall}{dual} WHERE {claim}"
            )),
            side_take: p(format!(
                "UPDATE {s} SET HOLDER = ?, TOKEN = ?, LIVE_UNTIL = {live_for}, \
                 REPORTED_US = NULL, MODIFIED = {wall} WHERE WORKER_ID = ? AND {free} \
                 AND {claim}"
            )),
            side_mark: p(format!(
                "SELECT MARK_US FROM {s} WHERE WORKER_ID = ? AND TOKEN = ?"
            )),
            side_holder: p(format!("SELECT HOLDER FROM {s} WHERE WORKER_ID = ?")),
            // No lease to keep: LIVE_UNTIL only decides who counts as a live
            // peer, so renewing does not require it unexpired.
            side_renew: p(format!(
                "UPDATE {s} SET LIVE_UNTIL = {live_for}, MODIFIED = {wall} \
                 WHERE WORKER_ID = ? AND TOKEN = ? AND {holder}"
            )),
            // The keeper renews only claims with a lease, but reports every
            // few seconds: each report extends the liveness deadline.
            side_persist: p(format!(
                "UPDATE {s} SET {raise_mark}, REPORTED_US = ?, {stamp}, LIVE_UNTIL = {live_for}, \
                 MODIFIED = {wall} WHERE WORKER_ID = ? AND TOKEN = ? AND {holder}"
            )),
            side_peers: p(format!(
                "SELECT WORKER_ID, REPORTED_US, {age} FROM {s} WHERE WORKER_ID <> ? \
                 AND TOKEN IS NOT NULL AND LIVE_UNTIL > {db_now} AND REPORTED_US IS NOT NULL \
                 ORDER BY WORKER_ID"
            )),
            // The shape of the other modes' listing: HOLDER stands for the
            // identity; `live_for` bound to minus the recent window.
            side_fleet: p(format!(
                "SELECT WORKER_ID, HOLDER, '', '', {left}, REPORTED_US, MARK_US FROM {s} \
                 WHERE TOKEN IS NOT NULL AND LIVE_UNTIL > {live_for} ORDER BY WORKER_ID"
            )),
            side_release: p(format!(
                "UPDATE {s} SET TOKEN = NULL, LIVE_UNTIL = NULL, MODIFIED = {wall} \
                 WHERE WORKER_ID = ? AND TOKEN = ?"
            )),
            side,
        }
    }
}

/// uid-generator mode on their table and our side table.
#[derive(Debug)]
pub(super) struct UidGenerator {
    base: Base,
    uid: Statements,
}

impl UidGenerator {
    pub(super) fn new(base: Base, uid: Statements) -> UidGenerator {
        UidGenerator { base, uid }
    }

    pub(super) fn base(&self) -> &Base {
        &self.base
    }

    /// Checks uid-generator's table (never changes it), then migrates and
    /// checks the side table.
    pub(super) async fn ready(&self) -> Result<()> {
        let columns = self.base.columns_of(&self.base.table).await?;
        if columns.is_empty() {
            return Err(RegistryError::config(
                REGISTRY,
                format!(
                    "table {} does not exist in {}: uid-generator mode uses uid-generator's own \
                 WORKER_NODE table and never creates it (a new table would count worker IDs \
                 from 1 again); create it with uid-generator's WORKER_NODE.sql, or name the \
                 existing one in the table setting",
                    self.base.table,
                    self.base.db.redacted_url()
                ),
            ));
        }
        let missing = super::missing_columns(&THEIR_COLUMNS, &columns);
        if !missing.is_empty() {
            return Err(RegistryError::config(
                REGISTRY,
                format!(
                    "table {} in {} is not uid-generator's WORKER_NODE: it lacks column(s) {}",
                    self.base.table,
                    self.base.db.redacted_url(),
                    missing.join(", ")
                ),
            ));
        }
        let side = &self.uid.side;
        let set = migrations(self.base.db.dialect(), side);
        self.base
            .db
            .migrate(&set)
            .await
            .map_err(super::sql_error("migrate"))?;
        let columns = self.base.columns_of(side).await?;
        let missing = super::missing_columns(&SIDE_COLUMNS, &columns);
        if !missing.is_empty() {
            return Err(RegistryError::config(
                REGISTRY,
                format!(
                    "side table {side} in {} lacks column(s) {}: it is not idmint's; drop or rename \
                 it",
                    self.base.db.redacted_url(),
                    missing.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The exhaustion error: every `ID` below `range` is taken.
    async fn exhausted(&self, range: u32) -> Result<RegistryError> {
        let in_use = self
            .base
            .fetch_ints(&self.uid.count_below, &[Bind::Int(i64::from(range))])
            .await
            .map_err(backend_error("claim"))?;
        Ok(RegistryError::Exhausted {
            registry: REGISTRY,
            in_use: in_use.first().copied().unwrap_or(0).max(0) as u64,
            range: u64::from(range),
        })
    }

    /// A new `WORKER_NODE` row and its side row, in `epoch`; `None` when the
    /// epoch moved under it (the `WORKER_NODE` row then stays unused, like
    /// one past the range: IDs are never reused).
    async fn claim_row(
        &self,
        node: &NodeIdentity,
        range: u32,
        epoch: String,
    ) -> Result<Option<Claim>> {
        const OP: &str = "claim";
        debug_assert_eq!(self.base.config.mode, SqlMode::UidGenerator);
        let st = &self.uid;
        // A table already past the range is refused before inserting, so a
        // node restarting in a loop doesn't fill the table with dead rows.
        let max = loop {
            match self.base.fetch_opt_int(&st.max_id, &[]).await {
                Ok(m) => break m.flatten(),
                Err(e) if idmint_sql::is_retryable(&e) => continue,
                Err(e) => return Err(backend_error(OP)(e)),
            }
        };
        if max.is_some_and(|m| m >= i64::from(range) - 1) {
            return Err(self.exhausted(range).await?);
        }
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let (host, port, node_type) =
            node_row(node, |k| std::env::var(k).ok(), now_ms, random_u64())?;
        let id = loop {
            let inserted = self
                .base
                .insert_returning_id(
                    &st.insert_node,
                    &[Bind::Text(&host), Bind::Text(&port), Bind::Int(node_type)],
                )
                .await;
            match inserted {
                Ok(Some(id)) => break id,
                Ok(None) => return Err(backend_error(OP)(sqlx::Error::RowNotFound)),
                Err(e) if idmint_sql::is_retryable(&e) => continue,
                Err(e) => return Err(backend_error(OP)(e)),
            }
        };
        if id < 0 || id >= i64::from(range) {
            // The row stays, unused, like one of a uid-generator that failed
            // its range check: IDs are never reused.
            return Err(self.exhausted(range).await?);
        }
        let holder = node.to_string();
        loop {
            let token = new_token(&epoch);
            let [e_table, e_cluster, e_id] = self.base.guard_binds(&token);
            let inserted = self
                .base
                .exec_rows(
                    &st.side_insert,
                    &[
                        Bind::Int(id),
                        Bind::Text(&holder),
                        Bind::Text(&token),
                        Bind::Int(self.base.ttl_us()),
                        e_table,
                        e_cluster,
                        e_id,
                    ],
                )
                .await;
            match inserted {
                Ok(0) => return Ok(None),
                Ok(_) => {
                    return Ok(Some(Claim {
                        worker: worker_u32(id)?,
                        stored_mark: None,
                        lease: None,
                        token,
                    }));
                }
                Err(e) if idmint_sql::is_unique_violation(&e) => {}
                Err(e) if idmint_sql::is_retryable(&e) => continue,
                Err(e) => return Err(backend_error(OP)(e)),
            }
            // This worker ID was handed out before: take its side row over if
            // its holder is gone, and start above the mark it left.
            let taken = self
                .base
                .exec_rows(
                    &st.side_take,
                    &[
                        Bind::Text(&holder),
                        Bind::Text(&token),
                        Bind::Int(self.base.ttl_us()),
                        Bind::Int(id),
                        e_table,
                        e_cluster,
                        e_id,
                    ],
                )
                .await;
            match taken {
                Ok(1) => {
                    let mark = self
                        .base
                        .fetch_opt_int(&st.side_mark, &[Bind::Int(id), Bind::Text(&token)])
                        .await
                        .map_err(backend_error(OP))?;
                    let Some(mark_us) = mark else {
                        continue;
                    };
                    return Ok(Some(Claim {
                        worker: worker_u32(id)?,
                        stored_mark: mark_us.map(timestamp_from_us).transpose()?,
                        lease: None,
                        token,
                    }));
                }
                Ok(_) => {}
                Err(e) if idmint_sql::is_retryable(&e) => continue,
                Err(e) => return Err(backend_error(OP)(e)),
            }
            let held_by = self
                .base
                .fetch_texts1(&st.side_holder, &[Bind::Int(id)])
                .await
                .map_err(backend_error(OP))?;
            let Some(held_by) = held_by else {
                // Gone meanwhile: insert again.
                continue;
            };
            // Not taken over: held, or refused by the epoch condition.
            if !self.base.epoch_current(&epoch).await? {
                return Ok(None);
            }
            return Err(RegistryError::WorkerTaken {
                registry: REGISTRY,
                worker: worker_u32(id)?,
                node: holder,
                holder: held_by,
                origin: Some(format!(
                    "the new {} row's ID, which the table's auto-increment handed out again: \
                     was the table emptied or its counter lowered?",
                    self.base.table
                )),
            });
        }
    }
}

#[async_trait]
impl WorkerRegistry for UidGenerator {
    fn kind(&self) -> &'static str {
        REGISTRY
    }

    /// `WORKER_NODE`'s `ID` is never given again, as in uid-generator.
    fn reassigns_workers(&self) -> bool {
        false
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        let claim = self
            .base
            .claim_in_epoch(|epoch| self.claim_row(node, range, epoch));
        self.base.timed("claim", claim).await
    }

    async fn claim_worker(&self, _node: &NodeIdentity, _worker: u32, _range: u32) -> Result<Claim> {
        Err(row_ids_only("uid-generator"))
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        self.base.renew_by_id(&self.uid.side_renew, claim).await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let ttl = Bind::Int(self.base.ttl_us());
        self.base
            .persist(&self.uid.side_persist, ttl, claim, mark, reported)
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        // The table is one cluster.
        let worker = Bind::Int(i64::from(claim.worker));
        self.base.peers(&self.uid.side_peers, &[worker]).await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        let rows = self
            .base
            .fleet_rows(&self.uid.side_fleet, &[Bind::Int(recent_us())])
            .await?;
        rows.into_iter()
            .map(|row| Base::fleet_member(row, true))
            .collect()
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let binds = [Bind::Int(i64::from(claim.worker)), Bind::Text(&claim.token)];
        self.base
            .release(&self.uid.side_release, claim, &binds)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeIdentity {
        NodeIdentity {
            host: "app-1".to_owned(),
            address: "10.1.2.3".to_owned(),
            port: 8080,
        }
    }

    #[test]
    fn an_actual_machine_row_is_its_address_and_a_timestamped_port() {
        let row = node_row(&node(), |_| None, 1_732_000_000_123, 1_234_567).unwrap();
        assert_eq!(
            row,
            (
                "10.1.2.3".to_owned(),
                "1732000000123-34567".to_owned(),
                ACTUAL
            )
        );
    }

    #[test]
    fn a_container_row_takes_uid_generators_environment() {
        let env = |k: &str| match k {
            "JPAAS_HOST" => Some("box-7".to_owned()),
            "JPAAS_HOST_PORT_8080" => Some("31080".to_owned()),
            _ => None,
        };
        let row = node_row(&node(), env, 0, 0).unwrap();
        assert_eq!(row, ("box-7".to_owned(), "31080".to_owned(), CONTAINER));
        let half = |k: &str| (k == "JPAAS_HOST").then(|| "box-7".to_owned());
        let err = node_row(&node(), half, 0, 0).unwrap_err();
        assert_eq!(err.code(), "registry_config");
        assert!(err.to_string().contains("JPAAS_HTTP_PORT"), "{err}");
        let blank = |k: &str| (k == "JPAAS_HOST").then(|| "  ".to_owned());
        assert_eq!(node_row(&node(), blank, 5, 5).unwrap().2, ACTUAL);
    }

    #[test]
    fn long_values_fit_uid_generators_columns() {
        let mut n = node();
        n.address = "h".repeat(100);
        assert_eq!(node_row(&n, |_| None, 0, 0).unwrap().0.len(), 64);
    }

    #[test]
    fn statements_bind_what_the_code_binds() {
        let side = Identifier::new("WORKER_NODE_IDMINT").unwrap();
        let guards = Guards::new(Dialect::MySql, super::super::statements::Identity::MySql);
        let s = Statements::new(Dialect::MySql, "`WORKER_NODE`", side, &guards);
        let count = |sql: &str| sql.matches('?').count();
        // The side table's fenced statements end in the epoch condition's
        // three binds; uid-generator's own insert has none.
        assert_eq!(count(&s.insert_node), 3);
        assert_eq!(count(&s.side_insert), 4 + 3);
        assert_eq!(count(&s.side_take), 4 + 3);
        assert_eq!(count(&s.side_mark), 2);
        assert_eq!(count(&s.side_renew), 3 + 3);
        assert_eq!(count(&s.side_persist), 6 + 3);
        assert_eq!(count(&s.side_peers), 1);
        assert_eq!(count(&s.side_release), 2);
        // uid-generator's own statement, on its own columns only.
        assert!(
            s.insert_node.starts_with(
                "INSERT INTO `WORKER_NODE` (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED)"
            ),
            "{}",
            s.insert_node
        );
        assert!(s.insert_node.contains("NOW(), NOW()"), "{}", s.insert_node);
        assert!(!s.insert_node.contains("EXISTS"), "{}", s.insert_node);
        assert!(
            s.side_insert.contains("FROM DUAL WHERE EXISTS"),
            "{}",
            s.side_insert
        );
    }

    #[test]
    fn the_side_table_is_named_after_the_table() {
        let t = Identifier::new("WORKER_NODE").unwrap();
        assert_eq!(side_table(&t).unwrap().as_str(), "WORKER_NODE_IDMINT");
        let long = Identifier::new("w".repeat(60)).unwrap();
        assert_eq!(side_table(&long).unwrap_err().code(), "registry_config");
        let set = migrations(
            Dialect::Postgres,
            &Identifier::new("worker_node_idmint").unwrap(),
        );
        set.validate().unwrap();
        assert_eq!(set.component(), "registry:worker_node_idmint");
    }
}
