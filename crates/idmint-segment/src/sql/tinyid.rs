//! Didi Tinyid's own tables used as they are ([`TableSchema::Tinyid`]):
//! segments from `tiny_id_info`, leased with Tinyid's optimistic lock, and
//! tokens from `tiny_id_token`.
//!
//! # How Tinyid takes a segment, and why idmint takes it the same way
//! Tinyid's `DbSegmentIdServiceImpl.getNextSegmentId` reads the row
//! (`id, max_id, step, delta, remainder, version`), computes `newMaxId =
//! max_id + step`, and writes it with `TinyIdInfoDAOImpl.updateMaxId`:
//!
//! ```sql
//! update tiny_id_info set max_id = ?, update_time = now(), version = version + 1
//!  where id = ? and max_id = ? and version = ? and biz_type = ?
//! ```
//!
//! One updated row means the segment is its own; none means another server
//! moved the row first, and it reads again. A Tinyid server never locks the
//! row: it relies on every writer changing `max_id` and `version`, so that
//! its own compare fails after someone else's lease. idmint takes its
//! segments with that very statement, so the argument is one for both: a
//! compare-and-swap succeeds only on the exact `(max_id, version)` its writer
//! read, every success changes both (`max_id` only ever grows), so no two
//! writers, Tinyid or idmint, ever extend the same `max_id`, and their
//! segments never overlap. The row's `version` keeps counting every lease, as
//! Tinyid's operators expect.
//!
//! # Tinyid's segment is `(max_id − step, max_id]`
//! Tinyid hands out `currentId + delta, …` up to and including the new
//! `max_id`, starting above the old one (`SegmentId.nextId`: `id > maxId` is
//! "over"). idmint's grants are half-open `[start, end)`, so a Tinyid lease
//! from `old` to `new` is the grant `[old + 1, new + 1)`: the same numbers.
//! `delta`/`remainder` then pick `id % delta == remainder` among them, as
//! Tinyid's `SegmentId.init` does (its first ID is the smallest such number
//! above the old `max_id`). [`KeyInfo::max_id`](crate::KeyInfo::max_id) (where the next segment
//! starts) is the row's `max_id + 1`; a key created with start `s` gets
//! `begin_id = max_id = s − 1`, so its first ID is `s`.
//!
//! # Databases
//! Tinyid ships MySQL DDL and runs on MySQL/MariaDB. The statements here are
//! plain SQL, so the same tables made in PostgreSQL or SQLite (same columns
//! and types) work too; the tests run all three.
//!
//! # References
//! - Didi Tinyid: `tinyid-server/db.sql` (DDL), `TinyIdInfoDAOImpl.updateMaxId`,
//!   `DbSegmentIdServiceImpl.getNextSegmentId`, `SegmentId.init`/`nextId`,
//!   `TinyIdTokenDAOImpl.selectAll`.

use idmint_sql::{Dialect, Identifier, on_pool};

use super::{Bind, KeyRow, SqlSegmentStore, TableSchema};
use crate::error::{Result, SegmentError};
use crate::store::{MAX_ID, NewKey, SegmentGrant};

/// The columns of Tinyid's `tiny_id_info` the store reads or writes.
pub(super) const INFO_COLUMNS: [&str; 9] = [
    "id",
    "biz_type",
    "begin_id",
    "max_id",
    "step",
    "delta",
    "remainder",
    "update_time",
    "version",
];

/// Tinyid's token table (its name is fixed in Tinyid's code).
pub const TOKEN_TABLE: &str = "tiny_id_token";

/// The longest key a Tinyid table holds (`biz_type varchar(63)`).
pub(super) const MAX_BIZ_TYPE: usize = 63;

/// How many lost races in a row a lease takes before it gives up (each
/// after a short jittered wait). Tinyid itself tries a few times, at once.
const MAX_RACES: u32 = 64;

/// One grant-relevant row: id, max_id, step (nullable in Tinyid's DDL),
/// delta, remainder, version.
type InfoRow = (i64, i64, Option<i64>, i64, i64, i64);

/// A row of `tiny_id_token`: the token, and a business type it may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TinyidToken {
    /// The token (Tinyid's `token`).
    pub token: String,
    /// The key it opens (Tinyid's `biz_type`).
    pub biz_type: String,
}

/// The statements on Tinyid's tables, built once per store.
#[derive(Debug)]
pub(super) struct TinyidStatements {
    /// The row the lease computes from; binds biz_type.
    read: String,
    /// Tinyid's `updateMaxId`; binds new max_id, id, old max_id, version, biz_type.
    cas: String,
    /// A new row; binds biz_type, begin_id, max_id, step, delta, remainder.
    insert: String,
    /// Every token row.
    tokens: String,
}

/// `column` as a signed 64-bit integer whatever its declared type (Tinyid's
/// `id` is `bigint unsigned`, its `step`/`delta`/`remainder` are `int`).
fn int(dialect: Dialect, column: &str) -> String {
    match dialect {
        Dialect::MySql => format!("CAST({column} AS SIGNED)"),
        Dialect::Postgres | Dialect::Sqlite => format!("CAST({column} AS BIGINT)"),
    }
}

impl TinyidStatements {
    pub(super) fn new(dialect: Dialect, table: &Identifier) -> TinyidStatements {
        let t = dialect.quote(table);
        let s = |sql: String| dialect.placeholders(&sql);
        let (id, step, delta, remainder, version) = (
            int(dialect, "id"),
            int(dialect, "step"),
            int(dialect, "delta"),
            int(dialect, "remainder"),
            int(dialect, "version"),
        );
        TinyidStatements {
            read: s(format!(
                "SELECT {id}, max_id, {step}, {delta}, {remainder}, {version} FROM {t} \
                 WHERE biz_type = ?"
            )),
            // Tinyid's statement, with CURRENT_TIMESTAMP for its now(): the
            // same on every database.
            cas: s(format!(
                "UPDATE {t} SET max_id = ?, update_time = CURRENT_TIMESTAMP, \
                 version = version + 1 \
                 WHERE id = ? AND max_id = ? AND version = ? AND biz_type = ?"
            )),
            insert: s(format!(
                "INSERT INTO {t} (biz_type, begin_id, max_id, step, delta, remainder, \
                 create_time, update_time, version) \
                 VALUES (?, ?, ?, ?, ?, ?, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 0)"
            )),
            tokens: format!("SELECT token, biz_type FROM {TOKEN_TABLE}"),
        }
    }

    /// The describe and list statements' row (the shared `KeyRow` shape):
    /// key, max_id, step (0 when NULL), delta, remainder, no description,
    /// update_time in microseconds (`updated_us`, the dialect's expression).
    pub(super) fn row_columns(dialect: Dialect, updated_us: &str) -> String {
        format!(
            "biz_type, max_id, {}, {}, {}, NULL, {updated_us}",
            int(dialect, "COALESCE(step, 0)"),
            int(dialect, "delta"),
            int(dialect, "remainder"),
        )
    }
}

impl SqlSegmentStore {
    fn tinyid_sql(&self) -> &TinyidStatements {
        // Built by `Statements::new` for the Tinyid schema, the only caller's.
        self.sql
            .tinyid
            .as_ref()
            .expect("tinyid statements exist for the tinyid schema")
    }

    /// Tinyid's row of `key` as the lease and the raise read it.
    async fn read_tinyid(&self, op: &'static str, key: &str) -> Result<Option<InfoRow>> {
        let sql = self.tinyid_sql();
        self.retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query_as(&sql.read).bind(key).fetch_optional(p).await
                })
            })
            .await
            .map_err(self.backend(op))
    }

    /// Tinyid's optimistic lock: sets `key`'s `max_id` to `new_max` on the
    /// row `(id, max_id, version)` was read from, only if it still holds that
    /// `max_id` and `version` (and bumps `version`). Whether it won the race.
    async fn cas_tinyid(
        &self,
        op: &'static str,
        key: &str,
        (id, max_id, version): (i64, i64, i64),
        new_max: i64,
    ) -> Result<bool> {
        let sql = self.tinyid_sql();
        let updated = self
            .retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query(&sql.cas)
                        .bind(new_max)
                        .bind(id)
                        .bind(max_id)
                        .bind(version)
                        .bind(key)
                        .execute(p)
                        .await
                        .map(|done| done.rows_affected())
                })
            })
            .await
            .map_err(self.backend(op))?;
        Ok(updated == 1)
    }

    /// A lease on a Tinyid row, exactly as Tinyid takes one (see the
    /// [module docs](self)): read, compare-and-swap on `max_id` and
    /// `version`, again on a lost race.
    /// Refused, changing nothing, when the next segment would start below
    /// `floor`: the compare-and-swap writes only over the row it checked.
    pub(super) async fn fetch_tinyid(
        &self,
        key: &str,
        given: Option<i64>,
        floor: u64,
    ) -> Result<SegmentGrant> {
        const OP: &str = "fetch";
        for race in 1..=MAX_RACES {
            let row = self.read_tinyid(OP, key).await?;
            let Some((id, max_id, row_step, delta, remainder, version)) = row else {
                return Err(SegmentError::NotFound {
                    key: key.to_owned(),
                });
            };
            let step = match (given, row_step) {
                (Some(step), _) => step,
                (None, Some(step)) if step > 0 => step,
                (None, step) => {
                    return Err(self.bad_row(key, format!("step {step:?} is not positive")));
                }
            };
            if max_id < 0 {
                return Err(self.bad_row(key, format!("max_id {max_id} is negative")));
            }
            if delta <= 0 || remainder < 0 || remainder >= delta {
                return Err(self.bad_row(
                    key,
                    format!("remainder {remainder} is not in 0..{delta} (the delta)"),
                ));
            }
            // The segment starts at max_id + 1.
            if (max_id as u64) < floor.saturating_sub(1) {
                return Err(SegmentError::KeyBelowFloor {
                    store: self.dialect.name(),
                    key: key.to_owned(),
                    floor,
                    found: Some(max_id as u64 + 1),
                });
            }
            // The grant's end is `max_id + step + 1`: it must stay ≤ 2^63 − 1.
            if max_id > MAX_ID as i64 - 1 - step {
                return Err(SegmentError::Exhausted {
                    key: key.to_owned(),
                    max_id: max_id as u64,
                    step: step as u64,
                });
            }
            let new_max = max_id + step;
            if self
                .cas_tinyid(OP, key, (id, max_id, version), new_max)
                .await?
            {
                // All four are positive and checked above.
                return Ok(SegmentGrant {
                    max_id: new_max as u64 + 1,
                    step: step as u64,
                    delta: delta as u64,
                    remainder: remainder as u64,
                });
            }
            // Another server (Tinyid or idmint) moved the row since we read it.
            tracing::debug!(key, race, "lost a race for a tinyid row; reading it again");
            tokio::time::sleep(self.retry.delay(race.min(6))).await;
        }
        Err(SegmentError::Backend {
            store: self.dialect.name(),
            operation: OP,
            message: format!(
                "lost the race for key {key:?}'s row {MAX_RACES} times in a row \
                 (other servers keep moving it); retry"
            ),
        })
    }

    /// Raises a Tinyid row so its next segment starts at `key.start()` or
    /// above (its `max_id` to `start − 1` when below), with Tinyid's
    /// compare-and-swap, so a Tinyid server's lease in between is never
    /// undone; creates the row when missing.
    pub(super) async fn raise_tinyid(&self, key: &NewKey) -> Result<KeyRow> {
        const OP: &str = "raise";
        // validate() bounds the start by MAX_ID: the cast is exact.
        let target = key.start().max(1) as i64 - 1;
        for race in 1..=MAX_RACES {
            let row = self.read_tinyid(OP, key.key()).await?;
            let Some((id, max_id, _, _, _, version)) = row else {
                match self.create_tinyid(key).await {
                    Err(SegmentError::KeyExists { .. }) => continue,
                    other => return other,
                }
            };
            if max_id >= target {
                return self.tinyid_row(key.key()).await;
            }
            if self
                .cas_tinyid(OP, key.key(), (id, max_id, version), target)
                .await?
            {
                return self.tinyid_row(key.key()).await;
            }
            tokio::time::sleep(self.retry.delay(race.min(6))).await;
        }
        Err(SegmentError::Backend {
            store: self.dialect.name(),
            operation: OP,
            message: format!(
                "lost the race for key {:?}'s row {MAX_RACES} times in a row; retry",
                key.key()
            ),
        })
    }

    /// The full row of `key`, which exists.
    async fn tinyid_row(&self, key: &str) -> Result<KeyRow> {
        let row: Option<KeyRow> = self
            .retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query_as(&self.sql.describe).bind(key).fetch_optional(p).await
                })
            })
            .await
            .map_err(self.backend("raise"))?;
        row.ok_or_else(|| self.bad_row(key, "it vanished during the raise".to_owned()))
    }

    /// Creates a Tinyid row for `key` (validated by the caller): `begin_id =
    /// max_id = start − 1`, `version` 0.
    pub(super) async fn create_tinyid(&self, key: &NewKey) -> Result<KeyRow> {
        let spec = |field, reason: String| Err(SegmentError::InvalidSpec { field, reason });
        if key.key().len() > MAX_BIZ_TYPE {
            return Err(SegmentError::InvalidKey {
                key: key.key().chars().take(64).collect(),
                reason: format!(
                    "a Tinyid table's biz_type holds at most {MAX_BIZ_TYPE} characters, not {}",
                    key.key().len()
                ),
            });
        }
        for (field, value) in [
            ("step", key.step()),
            ("delta", key.delta()),
            ("remainder", key.remainder()),
        ] {
            if value > i32::MAX as u64 {
                return spec(
                    field,
                    format!(
                        "{value} does not fit a Tinyid table's INT {field} (at most {})",
                        i32::MAX
                    ),
                );
            }
        }
        if !key.description().is_empty() {
            return spec(
                "description",
                "a Tinyid table has no description column: leave it empty".to_owned(),
            );
        }
        // validate() bounds every number by MAX_ID, so the casts are exact.
        let max_id = key.start().max(1) as i64 - 1;
        let binds = [
            Bind::Int(max_id),
            Bind::Int(max_id),
            Bind::Int(key.step() as i64),
            Bind::Int(key.delta() as i64),
            Bind::Int(key.remainder() as i64),
        ];
        self.insert_key(key, &self.tinyid_sql().insert, &binds, None)
            .await
    }

    /// A Tinyid row's [`KeyInfo::max_id`](crate::KeyInfo::max_id): where the next segment starts,
    /// one above the row's `max_id`.
    pub(super) fn tinyid_next_start(&self, key: &str, max_id: u64) -> Result<u64> {
        max_id
            .checked_add(1)
            .filter(|&next| next <= MAX_ID)
            .ok_or_else(|| self.bad_row(key, format!("max_id {max_id} is the largest ID")))
    }

    /// Every row of Tinyid's `tiny_id_token` (which keys each token opens),
    /// for a server that checks Tinyid's tokens. Only a store on the Tinyid
    /// schema has them.
    ///
    /// # Errors
    /// [`SegmentError::Config`] on another schema; [`SegmentError::Backend`]
    /// when the table can't be read (missing, or the database failing).
    pub async fn tinyid_tokens(&self) -> Result<Vec<TinyidToken>> {
        if self.schema != TableSchema::Tinyid {
            return Err(SegmentError::Config(format!(
                "tokens live in {TOKEN_TABLE} only with the tinyid schema, not {:?}",
                self.schema
            )));
        }
        let sql = self.tinyid_sql();
        let rows: Vec<(String, String)> = self
            .retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query_as(&sql.tokens).fetch_all(p).await
                })
            })
            .await
            .map_err(self.backend("read tokens"))?;
        Ok(rows
            .into_iter()
            .map(|(token, biz_type)| TinyidToken { token, biz_type })
            .collect())
    }
}

/// The lease's statements bind what the store binds.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_bind_what_the_store_binds() {
        let t = Identifier::new("tiny_id_info").unwrap();
        for d in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let s = TinyidStatements::new(d, &t);
            let count = |sql: &str| match d {
                Dialect::Postgres => sql.matches('$').count(),
                _ => sql.matches('?').count(),
            };
            assert_eq!(count(&s.read), 1, "{d}");
            assert_eq!(count(&s.cas), 5, "{d}");
            assert_eq!(count(&s.insert), 6, "{d}");
            assert_eq!(count(&s.tokens), 0, "{d}");
            assert!(s.cas.contains("version = version + 1"), "{}", s.cas);
            assert!(
                s.cas.contains("max_id = ") && s.cas.contains("AND version = "),
                "{}",
                s.cas
            );
        }
    }
}
