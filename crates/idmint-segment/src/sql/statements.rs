//! The SQL text of the segment store, per dialect and table schema, built once
//! per store (the table name comes from configuration).

use idmint_sql::{Dialect, Identifier, MigrationSet};

use super::TableSchema;
use super::tinyid::TinyidStatements;

/// The table holding each idmint-schema segment table's epoch marker, one
/// row per segment table (shared by every segment table of the database).
pub(super) const EPOCH_TABLE: &str = "idmint_segment_epochs";

/// The table holding every key each idmint-schema segment table ever had
/// (its ledger), one row per table and key.
pub(super) const LEDGER_TABLE: &str = "idmint_segment_ledger";

/// The columns of Leaf's `leaf_alloc`, which both schemas have.
pub(super) const LEAF_COLUMNS: [&str; 5] =
    ["biz_tag", "max_id", "step", "description", "update_time"];

/// The store's migrations for `table` on `dialect` (the idmint schema only;
/// a Leaf table is never migrated).
pub(super) fn migrations(dialect: Dialect, table: &Identifier) -> MigrationSet {
    let t = dialect.quote(table);
    // Leaf's columns with Leaf's names, BIGINT step (Leaf's INT caps a
    // dynamic step at 2^31 − 1), plus Tinyid's delta/remainder. CHECKs keep
    // rows typed in by hand from ever making the fetch statement misbehave.
    let create = match dialect {
        Dialect::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                biz_tag VARCHAR(128) NOT NULL PRIMARY KEY,
                max_id BIGINT NOT NULL DEFAULT 1 CHECK (max_id >= 0),
                step BIGINT NOT NULL CHECK (step > 0),
                description VARCHAR(256) NULL,
                update_time TIMESTAMPTZ NOT NULL DEFAULT now(),
                delta BIGINT NOT NULL DEFAULT 1,
                remainder BIGINT NOT NULL DEFAULT 0,
                CHECK (delta > 0 AND remainder >= 0 AND remainder < delta)
            )"
        ),
        // ascii_bin: keys are ASCII and compare byte by byte, so `Order` and
        // `order` are two keys, as on the other databases (MySQL's default
        // collations are case-insensitive). DATETIME(6) holds UTC (written
        // with UTC_TIMESTAMP); Leaf's TIMESTAMP ends in 2038.
        Dialect::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                biz_tag VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                max_id BIGINT NOT NULL DEFAULT 1,
                step BIGINT NOT NULL,
                description VARCHAR(256) NULL DEFAULT NULL,
                update_time DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
                delta BIGINT NOT NULL DEFAULT 1,
                remainder BIGINT NOT NULL DEFAULT 0,
                PRIMARY KEY (biz_tag),
                CHECK (max_id >= 0),
                CHECK (step > 0),
                CHECK (delta > 0 AND remainder >= 0 AND remainder < delta)
            ) ENGINE=InnoDB"
        ),
        // STRICT: a value of the wrong type is an error, never stored. SQLite
        // turns an overflowing integer sum into a REAL; a strict INTEGER
        // column refuses it instead of storing 9.2e18.
        Dialect::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                biz_tag TEXT NOT NULL PRIMARY KEY,
                max_id INTEGER NOT NULL DEFAULT 1 CHECK (max_id >= 0),
                step INTEGER NOT NULL CHECK (step > 0),
                description TEXT NULL,
                update_time TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
                delta INTEGER NOT NULL DEFAULT 1,
                remainder INTEGER NOT NULL DEFAULT 0,
                CHECK (delta > 0 AND remainder >= 0 AND remainder < delta)
            ) STRICT"
        ),
    };
    // One row per segment table, written once by the first idmint to use
    // the table (`init_epoch`), never by a migration: a restore or a reset
    // that loses it is how a node tells the store is not the one it knew.
    let epochs = match dialect {
        Dialect::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {EPOCH_TABLE} (
                segment_table VARCHAR(63) NOT NULL PRIMARY KEY,
                epoch VARCHAR(64) NOT NULL,
                created TIMESTAMPTZ NOT NULL DEFAULT now()
            )"
        ),
        Dialect::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {EPOCH_TABLE} (
                segment_table VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                epoch VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                created DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
                PRIMARY KEY (segment_table)
            ) ENGINE=InnoDB"
        ),
        Dialect::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {EPOCH_TABLE} (
                segment_table TEXT NOT NULL PRIMARY KEY,
                epoch TEXT NOT NULL,
                created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
            ) STRICT"
        ),
    };
    // Every key the table ever had: written with the key's row, never
    // deleted, so a row deleted by hand is not created again from its start.
    // The keys already in the table are its first entries.
    let ledger = match dialect {
        Dialect::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (
                segment_table VARCHAR(63) NOT NULL,
                biz_tag VARCHAR(128) NOT NULL,
                created TIMESTAMPTZ NOT NULL DEFAULT now(),
                PRIMARY KEY (segment_table, biz_tag)
            )"
        ),
        Dialect::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (
                segment_table VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                biz_tag VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                created DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
                PRIMARY KEY (segment_table, biz_tag)
            ) ENGINE=InnoDB"
        ),
        Dialect::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (
                segment_table TEXT NOT NULL,
                biz_tag TEXT NOT NULL,
                created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
                PRIMARY KEY (segment_table, biz_tag)
            ) STRICT"
        ),
    };
    // An Identifier is letters, digits and `_`: safe as a literal.
    let backfill = remember_sql(dialect, &t, &format!("'{}'", table.as_str()));
    MigrationSet::new(super::component(table))
        .with_migration(
            1,
            "create the segment table (Leaf's leaf_alloc columns plus delta, remainder)",
            [create],
        )
        .with_migration(
            2,
            "create idmint_segment_epochs, the segment tables' epoch markers",
            [epochs],
        )
        .with_migration(
            3,
            "create idmint_segment_ledger, every key a segment table ever had",
            [ledger, backfill],
        )
}

/// Records every key of the table `t` (quoted) in the ledger under the
/// table name `name` (a bind or a literal), leaving the entries there alone.
fn remember_sql(dialect: Dialect, t: &str, name: &str) -> String {
    let select = format!("SELECT {name}, biz_tag FROM {t}");
    match dialect {
        Dialect::Postgres => format!(
            "INSERT INTO {LEDGER_TABLE} (segment_table, biz_tag) {select} \
             ON CONFLICT (segment_table, biz_tag) DO NOTHING"
        ),
        Dialect::MySql => {
            format!("INSERT IGNORE INTO {LEDGER_TABLE} (segment_table, biz_tag) {select}")
        }
        Dialect::Sqlite => {
            format!("INSERT OR IGNORE INTO {LEDGER_TABLE} (segment_table, biz_tag) {select}")
        }
    }
}

/// Every statement of one store. Written with `?`; numbered for PostgreSQL.
#[derive(Debug)]
pub(super) struct Statements {
    /// `max_id += ?` (a given step), guarded; binds step, key, floor, limit.
    /// Returns the grant row on PostgreSQL and SQLite.
    pub fetch_given: String,
    /// `max_id += step` (the row's step), guarded; binds key, floor,
    /// `MAX_ID`. Returns the grant row on PostgreSQL and SQLite.
    pub fetch_own: String,
    /// `max_id = ?` where it is below; binds the new max_id, key, the new
    /// max_id again.
    pub raise: String,
    /// The table's epoch marker; binds the table name.
    pub epoch_read: String,
    /// Writes the table's epoch marker unless it has one; binds the table
    /// name, the marker.
    pub epoch_init: String,
    /// The grant row (`max_id, step, delta, remainder`); binds key.
    pub read_grant: String,
    /// A key's full row; binds key.
    pub describe: String,
    /// Every full row.
    pub list: String,
    /// A new row; binds key, max_id, step, description (then delta and
    /// remainder for the idmint schema).
    pub insert: String,
    /// The columns the table has; binds the table name.
    pub columns: String,
    /// Records a key in the ledger; binds the table name, the key. Fails on
    /// the primary key when the ledger has it (idmint schema only).
    pub ledger_insert: String,
    /// The same, leaving an entry that is there alone (a raise).
    pub ledger_upsert: String,
    /// Records every key of the table; binds the table name.
    pub ledger_remember: String,
    /// Tinyid's lease, insert and token statements (the Tinyid schema only,
    /// whose lease and insert are not the ones above: those stay empty).
    pub tinyid: Option<TinyidStatements>,
}

impl Statements {
    pub(super) fn new(dialect: Dialect, table: &Identifier, schema: TableSchema) -> Statements {
        let t = dialect.quote(table);
        let now = dialect.now();
        // Integers decode as i64: PostgreSQL decodes strictly by type, and
        // Leaf's `step` is INT there when a Leaf table was adapted by hand.
        let (step, delta, remainder) = match (dialect, schema) {
            (Dialect::Postgres, TableSchema::Idmint) => ("step", "delta", "remainder"),
            (Dialect::Postgres, TableSchema::Leaf) => (
                "CAST(step AS BIGINT)",
                "CAST(1 AS BIGINT)",
                "CAST(0 AS BIGINT)",
            ),
            (_, TableSchema::Idmint) => ("step", "delta", "remainder"),
            (_, TableSchema::Leaf) => ("step", "1", "0"),
            // Leases and inserts go through `tinyid.rs`; only the row
            // columns below are shared.
            (_, TableSchema::Tinyid) => ("step", "delta", "remainder"),
        };
        // `update_time` as microseconds since the Unix epoch, NULL if unreadable.
        let updated_us = match dialect {
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM update_time) * 1000000 AS BIGINT)",
            // Sessions run in UTC (sqlx sets time_zone = '+00:00'), so this
            // reads Leaf's TIMESTAMP and idmint's UTC DATETIME(6) alike.
            Dialect::MySql => "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', update_time)",
            Dialect::Sqlite => {
                // Rounded to SQLite's millisecond: truncating the float could
                // put it a microsecond off.
                "(CAST(ROUND((julianday(update_time) - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
            }
        };
        // MySQL reads binary-collated text as bytes; give sqlx plain text.
        let key = match dialect {
            Dialect::MySql => "CAST(biz_tag AS CHAR(128))",
            _ => "biz_tag",
        };
        let grant_columns = format!("max_id, {step}, {delta}, {remainder}");
        let returning = match dialect {
            Dialect::Postgres | Dialect::Sqlite => format!(" RETURNING {grant_columns}"),
            // MariaDB and MySQL have no UPDATE … RETURNING: read in the
            // same transaction instead.
            Dialect::MySql => String::new(),
        };
        let row_columns = match schema {
            TableSchema::Tinyid => TinyidStatements::row_columns(dialect, updated_us),
            _ => format!("{key}, max_id, {step}, {delta}, {remainder}, description, {updated_us}"),
        };

        let s = |sql: String| dialect.placeholders(&sql);
        let insert = match schema {
            TableSchema::Idmint => format!(
                "INSERT INTO {t} (biz_tag, max_id, step, description, update_time, delta, \
                 remainder) VALUES (?, ?, ?, ?, {now}, ?, ?)"
            ),
            TableSchema::Leaf => format!(
                "INSERT INTO {t} (biz_tag, max_id, step, description, update_time) \
                 VALUES (?, ?, ?, ?, {now})"
            ),
            TableSchema::Tinyid => String::new(),
        };
        let columns = match dialect {
            Dialect::Postgres => {
                "SELECT CAST(column_name AS TEXT) FROM information_schema.columns \
                                  WHERE table_schema = current_schema() AND table_name = ?"
                    .to_owned()
            }
            Dialect::MySql => {
                "SELECT CAST(column_name AS CHAR(64)) FROM information_schema.columns \
                               WHERE table_schema = DATABASE() AND table_name = ?"
                    .to_owned()
            }
            Dialect::Sqlite => "SELECT name FROM pragma_table_info(?)".to_owned(),
        };
        // MySQL reads binary-collated text as bytes; give sqlx plain text.
        let epoch = match dialect {
            Dialect::MySql => "CAST(epoch AS CHAR(64))",
            _ => "epoch",
        };
        let epoch_read = s(format!(
            "SELECT {epoch} FROM {EPOCH_TABLE} WHERE segment_table = ?"
        ));
        let epoch_init = s(match dialect {
            Dialect::Postgres => format!(
                "INSERT INTO {EPOCH_TABLE} (segment_table, epoch) VALUES (?, ?) \
                 ON CONFLICT (segment_table) DO NOTHING"
            ),
            Dialect::MySql => {
                format!("INSERT IGNORE INTO {EPOCH_TABLE} (segment_table, epoch) VALUES (?, ?)")
            }
            Dialect::Sqlite => {
                format!("INSERT OR IGNORE INTO {EPOCH_TABLE} (segment_table, epoch) VALUES (?, ?)")
            }
        });
        let ledger_insert = s(format!(
            "INSERT INTO {LEDGER_TABLE} (segment_table, biz_tag) VALUES (?, ?)"
        ));
        let ledger_upsert = s(match dialect {
            Dialect::Postgres => format!(
                "INSERT INTO {LEDGER_TABLE} (segment_table, biz_tag) VALUES (?, ?) \
                 ON CONFLICT (segment_table, biz_tag) DO NOTHING"
            ),
            Dialect::MySql => {
                format!("INSERT IGNORE INTO {LEDGER_TABLE} (segment_table, biz_tag) VALUES (?, ?)")
            }
            Dialect::Sqlite => format!(
                "INSERT OR IGNORE INTO {LEDGER_TABLE} (segment_table, biz_tag) VALUES (?, ?)"
            ),
        });
        let ledger_remember = s(remember_sql(dialect, &t, "?"));
        if schema == TableSchema::Tinyid {
            return Statements {
                ledger_insert,
                ledger_upsert,
                ledger_remember,
                fetch_given: String::new(),
                fetch_own: String::new(),
                raise: String::new(),
                epoch_read,
                epoch_init,
                read_grant: String::new(),
                describe: s(format!("SELECT {row_columns} FROM {t} WHERE biz_type = ?")),
                list: format!("SELECT {row_columns} FROM {t}"),
                insert,
                columns: s(columns),
                tinyid: Some(TinyidStatements::new(dialect, table)),
            };
        }
        Statements {
            // The guards keep `max_id + step` within 2^63 − 1 without ever
            // computing a sum that overflows: the limit `MAX_ID − step` is
            // computed in Rust (given step) or in SQL only for a positive step
            // (the CASE; SQL does not promise to evaluate AND left to right).
            // Overflow matters most on SQLite, which would silently turn the
            // sum into a REAL.
            // `max_id >= ?` is the floor (0 for none): a row below what the
            // caller issued is left alone, in the same atomic statement.
            fetch_given: s(format!(
                "UPDATE {t} SET max_id = max_id + ?, update_time = {now} \
                 WHERE biz_tag = ? AND max_id >= ? AND max_id <= ?{returning}"
            )),
            fetch_own: s(format!(
                "UPDATE {t} SET max_id = max_id + step, update_time = {now} \
                 WHERE biz_tag = ? AND max_id >= ? \
                 AND CASE WHEN step > 0 THEN max_id <= ? - step ELSE 1 = 0 END{returning}"
            )),
            raise: s(format!(
                "UPDATE {t} SET max_id = ?, update_time = {now} WHERE biz_tag = ? AND max_id < ?"
            )),
            epoch_read,
            epoch_init,
            read_grant: s(format!("SELECT {grant_columns} FROM {t} WHERE biz_tag = ?")),
            describe: s(format!("SELECT {row_columns} FROM {t} WHERE biz_tag = ?")),
            list: format!("SELECT {row_columns} FROM {t}"),
            insert: s(insert),
            columns: s(columns),
            ledger_insert,
            ledger_upsert,
            ledger_remember,
            tinyid: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<(Dialect, TableSchema, Statements)> {
        let t = Identifier::new("leaf_alloc").unwrap();
        let mut out = Vec::new();
        for d in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            for schema in [TableSchema::Idmint, TableSchema::Leaf] {
                out.push((d, schema, Statements::new(d, &t, schema)));
            }
        }
        out
    }

    /// Placeholders per statement match what the store binds.
    #[test]
    fn every_statement_binds_what_the_store_binds() {
        for (d, schema, s) in all() {
            let count = |sql: &str| match d {
                Dialect::Postgres => sql.matches('$').count(),
                _ => sql.matches('?').count(),
            };
            assert_eq!(count(&s.fetch_given), 4, "{d} {schema:?}");
            assert_eq!(count(&s.fetch_own), 3, "{d} {schema:?}");
            assert_eq!(count(&s.raise), 3, "{d} {schema:?}");
            assert_eq!(count(&s.epoch_read), 1, "{d} {schema:?}");
            assert_eq!(count(&s.epoch_init), 2, "{d} {schema:?}");
            assert_eq!(count(&s.ledger_insert), 2, "{d} {schema:?}");
            assert_eq!(count(&s.ledger_upsert), 2, "{d} {schema:?}");
            assert_eq!(count(&s.ledger_remember), 1, "{d} {schema:?}");
            assert_eq!(count(&s.read_grant), 1, "{d} {schema:?}");
            assert_eq!(count(&s.describe), 1, "{d} {schema:?}");
            assert_eq!(count(&s.list), 0, "{d} {schema:?}");
            let insert = match schema {
                TableSchema::Idmint => 6,
                TableSchema::Leaf => 4,
                // Not built in `all()`: tinyid.rs tests its own statements.
                TableSchema::Tinyid => unreachable!(),
            };
            assert_eq!(count(&s.insert), insert, "{d} {schema:?}");
            assert_eq!(count(&s.columns), 1, "{d} {schema:?}");
        }
    }

    #[test]
    fn fetch_is_one_returning_statement_except_on_mysql() {
        for (d, _, s) in all() {
            let returning =
                s.fetch_given.contains("RETURNING") && s.fetch_own.contains("RETURNING");
            assert_eq!(returning, d != Dialect::MySql, "{d}");
        }
    }

    #[test]
    fn the_table_name_is_quoted() {
        let t = Identifier::new("Order").unwrap();
        let s = Statements::new(Dialect::Postgres, &t, TableSchema::Idmint);
        assert!(s.describe.contains("FROM \"Order\""), "{}", s.describe);
        let s = Statements::new(Dialect::MySql, &t, TableSchema::Idmint);
        assert!(s.describe.contains("FROM `Order`"), "{}", s.describe);
        let m = migrations(Dialect::Sqlite, &t);
        assert_eq!(m.component(), "segment:Order");
        m.validate().unwrap();
    }
}
