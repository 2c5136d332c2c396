//! The `sql` registry's epochs: what keeps a database that forgot (a
//! promoted asynchronous replica, a restored backup) from handing a worker
//! ID to a second node while its holder still issues. See the [parent
//! module](super)'s docs, "When the database forgets", for the protocol and
//! what it cannot see; this file holds the decision ([`plan`], pure, tested
//! below) and the statements' plumbing on [`Base`].

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idmint_sql::{Bind, Database, Dialect, bind_all, is_retryable, is_unique_violation, on_pool};

use super::statements::{EpochRead, EpochRow, HOLD_REASON_LEN, Identity};
use super::{Base, REGISTRY, backend_error, timestamp_from_us, token_epoch};
use crate::error::{RegistryError, Result};
use crate::registry::Claim;
use crate::util::random_u64;

/// The hold of an epoch that holds nothing (a new cluster's), from now: a
/// second in the past, not now. A statement's "now" can be taken a moment
/// before another transaction commits and still see its row (PostgreSQL's
/// `now()` is when the statement's transaction began), and must find such
/// an epoch's hold over all the same.
pub(super) const NO_HOLD_US: i64 = -1_000_000;

/// What an epoch row records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Recorded {
    /// The epoch's ID.
    pub(super) epoch: String,
    /// The identity of the server the epoch was last seen on.
    pub(super) server: String,
    /// Microseconds until the hold ends, on the database's clock (≤ 0: over).
    pub(super) left_us: i64,
    /// The longest hold any node asked for, µs.
    pub(super) hold_us: i64,
    /// The floor of every claim's mark, µs since the Unix epoch (0: none).
    pub(super) floor_us: i64,
    /// Why the epoch began with a hold (empty for a new cluster's).
    pub(super) reason: String,
}

impl From<EpochRow> for Recorded {
    fn from((epoch, server, left_us, hold_us, floor_us, reason): EpochRow) -> Recorded {
        Recorded {
            epoch,
            server,
            left_us: left_us.unwrap_or(0),
            hold_us,
            floor_us,
            reason,
        }
    }
}

/// The epoch a claim is made in, as a check found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Epoch {
    pub(super) id: String,
    /// How long claims are still held (zero: not held).
    pub(super) hold_left: Duration,
    /// The floor of every claim's mark, µs (0: none).
    pub(super) floor_us: i64,
    /// Why claims are held.
    pub(super) reason: String,
}

impl Epoch {
    fn of(r: &Recorded) -> Epoch {
        Epoch {
            id: r.epoch.clone(),
            hold_left: micros(r.left_us),
            floor_us: r.floor_us,
            reason: r.reason.clone(),
        }
    }
}

/// Why a new epoch begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Why {
    /// No epoch and no worker rows: a new cluster, which has nothing to
    /// forget; no hold.
    NewCluster,
    /// No epoch, yet worker rows: an upgrade from an idmint without epochs,
    /// or rows restored without their epoch.
    Missing,
    /// The epoch records another server than the one answering.
    ServerChanged {
        /// The identity the epoch recorded.
        from: String,
    },
}

/// What a check writes to the epoch row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// Nothing: the epoch goes on as recorded.
    Keep,
    /// The same epoch, with a longer hold recorded or a higher floor.
    Raise { hold_us: i64, floor_us: i64 },
    /// A new epoch, its claims held for `hold_from_now_us`.
    Begin {
        why: Why,
        hold_from_now_us: i64,
        hold_us: i64,
        floor_us: i64,
    },
}

/// The decision of an epoch check, given what the row records (if any),
/// the identity of the server answering (`None`: it won't show it, and
/// whatever server the epoch names is taken for this one: such a node never
/// begins an epoch for a change of server, so nodes that read it and nodes
/// that can't don't take turns beginning epochs), whether the worker table holds
/// rows the epoch covers (asked only when there is no row), this node's
/// hold (lease TTL + mark window) and the highest mark this registry ever
/// persisted; `raise_floor` when a holder found its epoch gone and the
/// floor must cover what it issued.
pub(super) fn plan(
    recorded: Option<&Recorded>,
    identity: Option<&str>,
    rows_exist: bool,
    my_hold_us: i64,
    my_highest_us: i64,
    raise_floor: bool,
) -> Plan {
    match recorded {
        None => Plan::Begin {
            why: if rows_exist {
                Why::Missing
            } else {
                Why::NewCluster
            },
            hold_from_now_us: if rows_exist { my_hold_us } else { NO_HOLD_US },
            hold_us: my_hold_us,
            floor_us: my_highest_us.max(0),
        },
        Some(r) if identity.is_some_and(|id| r.server != id) => {
            let hold_us = r.hold_us.max(my_hold_us);
            Plan::Begin {
                why: Why::ServerChanged {
                    from: r.server.clone(),
                },
                // A hold still running goes on at least as long.
                hold_from_now_us: hold_us.max(r.left_us),
                hold_us,
                floor_us: r.floor_us.max(my_highest_us),
            }
        }
        Some(r) => {
            let hold_us = r.hold_us.max(my_hold_us);
            let floor_us = if raise_floor {
                r.floor_us.max(my_highest_us)
            } else {
                r.floor_us
            };
            if hold_us == r.hold_us && floor_us == r.floor_us {
                Plan::Keep
            } else {
                Plan::Raise { hold_us, floor_us }
            }
        }
    }
}

/// How the server's identity is read on `db`: asks the server which kind it
/// is (MySQL or MariaDB) and checks the identity can be read. On PostgreSQL
/// without access to `pg_control_system()` (a managed service may revoke
/// it), [`Identity::Unreadable`], with a warning.
pub(super) async fn probe_identity(db: &Database) -> Result<Identity> {
    const OP: &str = "read the server's identity";
    let identity = match db.dialect() {
        Dialect::Sqlite => return Ok(Identity::Sqlite),
        Dialect::Postgres => Identity::Postgres,
        Dialect::MySql => {
            let version: String = on_pool!(db.pool(), p => {
                sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR(255))").fetch_one(p).await
            })
            .map_err(backend_error(OP))?;
            if version.to_ascii_lowercase().contains("mariadb") {
                Identity::MariaDb
            } else {
                Identity::MySql
            }
        }
    };
    let sql = format!("SELECT {}", identity.expr());
    let read: std::result::Result<String, sqlx::Error> =
        on_pool!(db.pool(), p => sqlx::query_scalar(&sql).fetch_one(p).await);
    match read {
        Ok(_) => Ok(identity),
        // undefined_function, insufficient_privilege
        Err(e)
            if identity == Identity::Postgres
                && e.as_database_error()
                    .and_then(|d| d.code())
                    .is_some_and(|c| c == "42883" || c == "42501") =>
        {
            tracing::warn!(
                url = %db.redacted_url(),
                error = %e,
                "sql registry: the server does not show its identity (pg_control_system()); a \
                 promoted replica or a restore into a new server is not detected: after one, keep \
                 every idmint node stopped for the lease TTL plus the mark window"
            );
            Ok(Identity::Unreadable)
        }
        Err(e) => Err(backend_error(OP)(e)),
    }
}

/// `us` microseconds as a duration, none when not positive.
fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// `text` cut to at most `max` characters.
fn clip(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => text[..at].to_owned(),
        None => text,
    }
}

impl Base {
    /// The epoch row's key: the worker table (the side table in
    /// uid-generator mode) as the database names it, and the cluster (none
    /// in uid-generator mode: the table is one cluster).
    fn epoch_key(&self) -> [Bind<'_>; 2] {
        [
            Bind::Text(self.epoch_table_key.as_str()),
            Bind::Text(self.epoch_cluster.as_str()),
        ]
    }

    /// The binds of a fenced statement's epoch condition for `token`'s
    /// claim. A token without an epoch matches no epoch.
    pub(super) fn guard_binds<'a>(&'a self, token: &'a str) -> [Bind<'a>; 3] {
        let [table, cluster] = self.epoch_key();
        [table, cluster, Bind::Text(token_epoch(token).unwrap_or(""))]
    }

    /// The hold this node asks for after the database forgot: the lease TTL
    /// plus the mark window, µs.
    fn hold_us(&self) -> i64 {
        i64::try_from(self.config.reset_hold().as_micros()).unwrap_or(i64::MAX)
    }

    /// The identity read, for [`plan`]: `None` where the server won't show it.
    fn known<'a>(&self, identity: &'a str) -> Option<&'a str> {
        (self.identity() != Identity::Unreadable).then_some(identity)
    }

    /// Whether the server an epoch records is the one answering, as the
    /// fenced statements' epoch condition decides it.
    fn same_server(&self, recorded: &str, identity: &str) -> bool {
        self.known(identity).is_none_or(|id| id == recorded)
    }

    /// The highest mark persisted (or attempted) through this registry, µs.
    fn highest_us(&self) -> i64 {
        self.highest_mark_us.load(Ordering::Relaxed)
    }

    /// Notes a mark about to be persisted: no holding of this registry
    /// issues past the highest such mark, which a fenced holder raises the
    /// new epoch's floor to.
    pub(super) fn note_mark(&self, mark_us: i64) {
        self.highest_mark_us.fetch_max(mark_us, Ordering::Relaxed);
    }

    /// The server's identity as it answers now, for
    /// [`super::SqlRegistry::server_identity`].
    pub(super) async fn read_identity(&self) -> Result<String> {
        const OP: &str = "read the server's identity";
        let sql = &self.epoch.identity;
        self.timed(OP, async {
            on_pool!(self.db.pool(), p => sqlx::query_scalar::<_, String>(sql).fetch_one(p).await)
                .map_err(backend_error(OP))
        })
        .await
    }

    /// One round trip: the identity of the server answering and the
    /// epoch's row, if any.
    async fn read_epoch(&self, operation: &'static str) -> Result<(String, Option<Recorded>)> {
        let key = self.epoch_key();
        let sql = &self.epoch.read;
        let read: EpochRead = on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query_as::<_, EpochRead>(sql), &key)
                .fetch_one(p)
                .await
        })
        .map_err(backend_error(operation))?;
        let (identity, epoch, server, left_us, hold_us, floor_us, reason) = read;
        let recorded = match (epoch, server, hold_us, floor_us) {
            (Some(epoch), Some(server), Some(hold_us), Some(floor_us)) => Some(Recorded {
                epoch,
                server,
                left_us: left_us.unwrap_or(0),
                hold_us,
                floor_us,
                reason: reason.unwrap_or_default(),
            }),
            _ => None,
        };
        Ok((identity, recorded))
    }

    /// The epoch check: reads the server's identity and the epoch's row,
    /// and when the row is missing, names another server, records a shorter
    /// hold than this node's or (`raise_floor`) a floor below this
    /// registry's highest mark, writes it in a transaction that locks the
    /// row. Not bounded by itself: callers run it within their timeout.
    pub(super) async fn check_epoch(
        &self,
        operation: &'static str,
        raise_floor: bool,
    ) -> Result<Epoch> {
        let (identity, recorded) = self.read_epoch(operation).await?;
        if let Some(r) = &recorded {
            let plan = plan(
                Some(r),
                self.known(&identity),
                true,
                self.hold_us(),
                self.highest_us(),
                raise_floor,
            );
            if plan == Plan::Keep {
                return Ok(Epoch::of(r));
            }
        }
        loop {
            match self.write_epoch(raise_floor).await {
                Ok(epoch) => return Ok(epoch),
                // Two nodes wrote at once (a unique violation on the first
                // row, a deadlock, SQLITE_BUSY): the transaction changed
                // nothing; look again.
                Err(e) if is_retryable(&e) || is_unique_violation(&e) => {
                    let jitter = random_u64() % 10;
                    tokio::time::sleep(Duration::from_millis(1 + jitter)).await;
                }
                Err(e) => return Err(backend_error(operation)(e)),
            }
        }
    }

    /// The epoch check's write: in one transaction, reads the identity and
    /// the row (locked), decides again ([`plan`]) and writes.
    async fn write_epoch(&self, raise_floor: bool) -> std::result::Result<Epoch, sqlx::Error> {
        let st = &self.epoch;
        let key = self.epoch_key();
        let probe = self.rows_probe_binds();
        let new_id = format!("{:016x}", random_u64());
        let (my_hold, highest) = (self.hold_us(), self.highest_us());
        let sqlite = self.db.dialect() == Dialect::Sqlite;
        let (epoch, why) = on_pool!(self.db.pool(), p => {
            // SQLite: take the write lock first, as the read decides the write.
            let mut tx = if sqlite {
                p.begin_with("BEGIN IMMEDIATE").await?
            } else {
                p.begin().await?
            };
            let identity: String = sqlx::query_scalar(&st.identity).fetch_one(&mut *tx).await?;
            let row = bind_all!(sqlx::query_as::<_, EpochRow>(&st.lock), &key)
                .fetch_optional(&mut *tx)
                .await?;
            let recorded = row.map(Recorded::from);
            let rows_exist = match &recorded {
                Some(_) => true,
                None => bind_all!(sqlx::query(&st.rows_probe), &probe)
                    .fetch_optional(&mut *tx)
                    .await?
                    .is_some(),
            };
            let plan = plan(
                recorded.as_ref(),
                self.known(&identity),
                rows_exist,
                my_hold,
                highest,
                raise_floor,
            );
            let done = match plan {
                Plan::Keep => {
                    let r = recorded.as_ref().expect("kept only a recorded epoch");
                    (Epoch::of(r), None)
                }
                Plan::Raise { hold_us, floor_us } => {
                    let r = recorded.as_ref().expect("raised only a recorded epoch");
                    let [table, cluster] = key;
                    let binds = [Bind::Int(hold_us), Bind::Int(floor_us), table, cluster];
                    bind_all!(sqlx::query(&st.raise), &binds).execute(&mut *tx).await?;
                    (Epoch { floor_us, ..Epoch::of(r) }, None)
                }
                Plan::Begin { why, hold_from_now_us, hold_us, floor_us } => {
                    let reason = clip(self.hold_reason(&why, &identity), HOLD_REASON_LEN);
                    let [table, cluster] = key;
                    if recorded.is_some() {
                        let binds = [
                            Bind::Text(&new_id),
                            Bind::Text(&identity),
                            Bind::Int(hold_from_now_us),
                            Bind::Int(hold_us),
                            Bind::Int(floor_us),
                            Bind::Text(&reason),
                            table,
                            cluster,
                        ];
                        bind_all!(sqlx::query(&st.begin), &binds).execute(&mut *tx).await?;
                    } else {
                        let binds = [
                            table,
                            cluster,
                            Bind::Text(&new_id),
                            Bind::Text(&identity),
                            Bind::Int(hold_from_now_us),
                            Bind::Int(hold_us),
                            Bind::Int(floor_us),
                            Bind::Text(&reason),
                        ];
                        bind_all!(sqlx::query(&st.insert), &binds).execute(&mut *tx).await?;
                    }
                    let epoch = Epoch {
                        id: new_id.clone(),
                        hold_left: micros(hold_from_now_us),
                        floor_us,
                        reason,
                    };
                    (epoch, Some(why))
                }
            };
            tx.commit().await?;
            done
        });
        match why {
            Some(Why::NewCluster) => tracing::info!(
                table = %self.epoch_table_key,
                cluster = %self.epoch_cluster,
                epoch = %epoch.id,
                "sql registry: the cluster's first epoch (a new cluster: no hold)"
            ),
            Some(_) => tracing::warn!(
                table = %self.epoch_table_key,
                cluster = %self.epoch_cluster,
                epoch = %epoch.id,
                hold = ?epoch.hold_left,
                "sql registry: a new epoch: {}; every claim waits until no earlier holder can \
                 still issue",
                epoch.reason
            ),
            None => {}
        }
        Ok(epoch)
    }

    /// Why claims are held, for the epoch row and the errors.
    fn hold_reason(&self, why: &Why, identity: &str) -> String {
        match why {
            Why::NewCluster => String::new(),
            Why::Missing => format!(
                "no epoch is recorded for table {}, cluster {:?}, yet it has worker rows: an \
                 upgrade from an idmint without epochs, or rows restored without their epoch",
                self.epoch_table_key, self.epoch_cluster
            ),
            Why::ServerChanged { from } => format!(
                "the database server changed (was {from}, now {identity}): a promoted replica or \
                 a restored backup may lack the last leases and marks"
            ),
        }
    }

    /// The epoch check before a claim: the epoch to claim in, or
    /// [`RegistryError::Held`] while its hold lasts.
    async fn epoch_for_claim(&self) -> Result<Epoch> {
        let epoch = self.check_epoch("claim", false).await?;
        if epoch.hold_left.is_zero() {
            return Ok(epoch);
        }
        Err(RegistryError::Held {
            registry: REGISTRY,
            retry_after: epoch.hold_left,
            reason: if epoch.reason.is_empty() {
                "the database may have lost the last leases and marks".to_owned()
            } else {
                epoch.reason
            },
        })
    }

    /// Whether claims in `epoch` can still succeed: it is the recorded one,
    /// on the server answering, its hold over. What every claim statement's
    /// epoch condition checks, asked when an attempt won nothing.
    pub(super) async fn epoch_current(&self, epoch: &str) -> Result<bool> {
        let (identity, recorded) = self.read_epoch("claim").await?;
        Ok(recorded.is_some_and(|r| {
            r.epoch == epoch && self.same_server(&r.server, &identity) && r.left_us <= 0
        }))
    }

    /// A claim in the current epoch: checks the epoch (held: the typed
    /// error), then runs `attempt` with its ID, which answers `None` when
    /// the epoch moved under it; then checks again, three times at most.
    /// The claim's stored mark is raised to the epoch's floor.
    pub(super) async fn claim_in_epoch<F, Fut>(&self, mut attempt: F) -> Result<Claim>
    where
        F: FnMut(String) -> Fut,
        Fut: Future<Output = Result<Option<Claim>>>,
    {
        for _ in 0..3 {
            let epoch = self.epoch_for_claim().await?;
            if let Some(mut claim) = attempt(epoch.id).await? {
                if epoch.floor_us > 0 {
                    let floor = timestamp_from_us(epoch.floor_us)?;
                    claim.stored_mark = Some(claim.stored_mark.map_or(floor, |m| m.max(floor)));
                }
                return Ok(claim);
            }
        }
        Err(RegistryError::Backend {
            registry: REGISTRY,
            operation: "claim",
            message: "the registry's epoch changed three times during one claim: is the database \
                      failing over again and again?"
                .to_owned(),
        })
    }

    /// The error for a fenced statement (renew, persist) that changed
    /// nothing: the epoch moved (the server changed, or a new epoch began),
    /// or else the lease is lost for `lease_reason`. When the epoch moved,
    /// first raises the new epoch's floor to this registry's highest mark
    /// (best effort), so the next holders start above what it issued.
    pub(super) async fn refused(
        &self,
        claim: &Claim,
        doing: &'static str,
        lease_reason: String,
    ) -> RegistryError {
        let Some(mine) = token_epoch(&claim.token) else {
            return self.lease_lost(claim, &lease_reason);
        };
        let read = self.timed(doing, self.read_epoch(doing)).await;
        let why = match read {
            Err(e) => {
                return self.lease_lost(
                    claim,
                    &format!(
                        "{lease_reason}; whether the registry's epoch changed is unknown: {e}"
                    ),
                );
            }
            Ok((_, None)) => "the epoch record is gone".to_owned(),
            Ok((identity, Some(r))) if !self.same_server(&r.server, &identity) => format!(
                "the database server changed (was {}, now {identity})",
                r.server
            ),
            Ok((_, Some(r))) if r.epoch != mine => {
                if r.reason.is_empty() {
                    "a new epoch began".to_owned()
                } else {
                    format!("a new epoch began: {}", r.reason)
                }
            }
            Ok(_) => return self.lease_lost(claim, &lease_reason),
        };
        let raised = self
            .timed("raise the floor", self.check_epoch("raise the floor", true))
            .await;
        if let Err(e) = raised {
            tracing::warn!(error = %e, "sql registry: could not raise the new epoch's floor");
        }
        self.lease_lost(
            claim,
            &format!("{doing}: the registry's epoch changed ({why}): issuing stopped"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(server: &str, left_us: i64, hold_us: i64, floor_us: i64) -> Recorded {
        Recorded {
            epoch: "e1".to_owned(),
            server: server.to_owned(),
            left_us,
            hold_us,
            floor_us,
            reason: String::new(),
        }
    }

    #[test]
    fn a_new_cluster_begins_without_a_hold() {
        assert_eq!(
            plan(None, Some("s1"), false, 5_000, 0, false),
            Plan::Begin {
                why: Why::NewCluster,
                hold_from_now_us: NO_HOLD_US,
                hold_us: 5_000,
                floor_us: 0
            }
        );
    }

    #[test]
    fn rows_without_an_epoch_are_held() {
        assert_eq!(
            plan(None, Some("s1"), true, 5_000, 7, false),
            Plan::Begin {
                why: Why::Missing,
                hold_from_now_us: 5_000,
                hold_us: 5_000,
                floor_us: 7
            }
        );
    }

    #[test]
    fn another_server_begins_a_held_epoch_with_the_longest_hold_and_floor() {
        let r = recorded("s1", -10, 9_000, 100);
        assert_eq!(
            plan(Some(&r), Some("s2"), true, 5_000, 50, false),
            Plan::Begin {
                why: Why::ServerChanged {
                    from: "s1".to_owned()
                },
                hold_from_now_us: 9_000,
                hold_us: 9_000,
                floor_us: 100
            }
        );
        // A hold still running longer than a new one is kept.
        let r = recorded("s1", 20_000, 9_000, 100);
        let Plan::Begin {
            hold_from_now_us,
            floor_us,
            ..
        } = plan(Some(&r), Some("s2"), true, 5_000, 500, false)
        else {
            panic!("a new epoch");
        };
        assert_eq!((hold_from_now_us, floor_us), (20_000, 500));
    }

    #[test]
    fn the_same_server_keeps_its_epoch_and_raises_only_what_is_asked() {
        let r = recorded("s1", 0, 5_000, 100);
        assert_eq!(
            plan(Some(&r), Some("s1"), true, 5_000, 900, false),
            Plan::Keep
        );
        assert_eq!(
            plan(Some(&r), Some("s1"), true, 4_000, 50, true),
            Plan::Keep
        );
        assert_eq!(
            plan(Some(&r), Some("s1"), true, 5_000, 900, true),
            Plan::Raise {
                hold_us: 5_000,
                floor_us: 900
            }
        );
        assert_eq!(
            plan(Some(&r), Some("s1"), true, 8_000, 900, false),
            Plan::Raise {
                hold_us: 8_000,
                floor_us: 100
            }
        );
    }

    #[test]
    fn a_node_that_cant_read_the_server_never_begins_an_epoch_for_it() {
        let r = recorded("s1", 0, 5_000, 100);
        assert_eq!(plan(Some(&r), None, true, 5_000, 0, false), Plan::Keep);
        let Plan::Begin { why, .. } = plan(None, None, true, 5_000, 0, false) else {
            panic!("a missing epoch begins one");
        };
        assert_eq!(why, Why::Missing);
    }

    #[test]
    fn reasons_are_clipped_on_a_character_boundary() {
        assert_eq!(clip("ééé".to_owned(), 2), "éé");
        assert_eq!(clip("ab".to_owned(), 5), "ab");
    }
}
