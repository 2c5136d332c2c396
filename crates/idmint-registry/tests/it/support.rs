//! Helpers shared by the integration tests.

pub use idmint_testkit::{FORK_GUARD, require_service};

// ---- Shared by the file and keeper tests ----

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_core::Layout;
use idmint_core::clock::ManualClock;
use idmint_registry::{
    Claim, FleetMember, Lease, NodeIdentity, PeerReport, RegistryError, WorkerRegistry,
};
use jiff::Timestamp;

/// 2026-11-21T00:00:00Z in milliseconds.
pub const T0_MS: i64 = 1_795_219_200_000;

/// A manual clock at `T0_MS`.
pub fn clock() -> ManualClock {
    ManualClock::at_millis(T0_MS)
}

/// A node identity for tests.
pub fn node(name: &str) -> NodeIdentity {
    NodeIdentity {
        host: name.to_owned(),
        address: "127.0.0.1".to_owned(),
        port: 7000,
    }
}

/// The time inside an ID of `layout`.
pub fn id_time(layout: &Layout, id: idmint_core::Id) -> Timestamp {
    layout.decode(id.get()).unwrap().time
}

/// An in-memory registry with leases on tokio's (pausable) clock and switches
/// to make it fail, hang, or lose a holder: the keeper's tests drive it.
#[derive(Debug, Default)]
pub struct MemRegistry {
    /// Lease TTL; `None`: no leases.
    pub ttl: Option<Duration>,
    /// `persist_mark` fails with a backend error.
    pub fail_persist: AtomicBool,
    /// `renew` fails with a backend error.
    pub fail_renew: AtomicBool,
    /// Every call hangs (for timeouts).
    pub hang: AtomicBool,
    /// How many calls hung.
    pub hung: std::sync::atomic::AtomicU64,
    /// Reports are stamped with the registry's (tokio's) clock when they
    /// are written, and `peers` tells each one's age, as SQL, Redis and
    /// ZooKeeper do; off, ages are unknown, as with etcd.
    pub ages: AtomicBool,
    /// Never gives a worker ID to another node (as SQL `disposable` or
    /// ZooKeeper `forever`): [`WorkerRegistry::reassigns_workers`] is false,
    /// and [`WorkerRegistry::persist_local`] keeps a local mark that never hangs.
    pub keeps_workers: AtomicBool,
    /// `persist_local` fails (a data directory that can't be written).
    pub fail_local: AtomicBool,
    state: Mutex<MemState>,
}

#[derive(Debug, Default)]
struct MemState {
    holders: HashMap<u32, (String, Option<Instant>)>,
    /// Who holds each worker, as `NodeIdentity`'s display.
    names: HashMap<u32, String>,
    /// Who holds each worker.
    nodes: HashMap<u32, NodeIdentity>,
    marks: HashMap<u32, Timestamp>,
    /// The marks kept locally, where the registry keeps its workers.
    local_marks: HashMap<u32, Timestamp>,
    /// Each report and when it was stored (on tokio's clock).
    reports: HashMap<u32, (Timestamp, Instant)>,
    claims: u64,
    persists: u64,
}

fn mono() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl MemRegistry {
    /// A registry with leases of `ttl`.
    pub fn with_ttl(ttl: Duration) -> MemRegistry {
        MemRegistry {
            ttl: Some(ttl),
            ..MemRegistry::default()
        }
    }

    /// A registry without leases that never gives a worker ID to another
    /// node ([`MemRegistry::keeps_workers`]).
    pub fn keeping_workers() -> MemRegistry {
        MemRegistry {
            keeps_workers: true.into(),
            ..MemRegistry::default()
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.state.lock().unwrap()
    }

    /// The stored mark of `worker`.
    pub fn mark(&self, worker: u32) -> Option<Timestamp> {
        self.state().marks.get(&worker).copied()
    }

    /// The mark of `worker` kept locally ([`MemRegistry::keeps_workers`]).
    pub fn local_mark(&self, worker: u32) -> Option<Timestamp> {
        self.state().local_marks.get(&worker).copied()
    }

    /// Sets the stored mark of `worker` (as an earlier holder would have).
    pub fn set_mark(&self, worker: u32, mark: Timestamp) {
        self.state().marks.insert(worker, mark);
    }

    /// Records a peer's report.
    pub fn set_report(&self, worker: u32, reported: Timestamp) {
        self.state().reports.insert(worker, (reported, mono()));
    }

    /// Records a peer's report as stored `age` ago (its age is told only
    /// while [`MemRegistry::ages`] is on).
    pub fn set_report_aged(&self, worker: u32, reported: Timestamp, age: Duration) {
        let stored = mono().checked_sub(age).expect("the clock is past the age");
        self.state().reports.insert(worker, (reported, stored));
    }

    /// Whether `worker` is held.
    pub fn is_held(&self, worker: u32) -> bool {
        self.state().holders.contains_key(&worker)
    }

    /// Takes `worker` away from its holder (an expiry seen by the registry).
    pub fn revoke(&self, worker: u32) {
        self.state().holders.remove(&worker);
    }

    /// How many marks were persisted.
    pub fn persists(&self) -> u64 {
        self.state().persists
    }

    /// How many claims were granted.
    pub fn claims(&self) -> u64 {
        self.state().claims
    }

    async fn maybe_hang(&self) {
        if self.hang.load(Ordering::SeqCst) {
            self.hung.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
    }

    fn lease(&self) -> Option<Lease> {
        self.ttl.map(|ttl| Lease {
            ttl,
            valid_until: mono() + ttl,
        })
    }

    /// Hands `worker` to `node`: a new token, a lease, the stored mark.
    fn hold(&self, s: &mut MemState, worker: u32, node: &NodeIdentity) -> Claim {
        s.claims += 1;
        let token = format!("t{}", s.claims);
        let lease = self.lease();
        s.holders
            .insert(worker, (token.clone(), lease.map(|l| l.valid_until)));
        s.names.insert(worker, node.to_string());
        s.nodes.insert(worker, node.clone());
        Claim {
            worker,
            stored_mark: s.marks.get(&worker).copied(),
            lease,
            token,
        }
    }

    /// Forgets holders whose lease ran out.
    fn expire(s: &mut MemState) {
        let now = mono();
        s.holders
            .retain(|_, (_, until)| until.is_none_or(|u| now < u));
    }

    fn check(&self, s: &MemState, claim: &Claim) -> Result<(), RegistryError> {
        match s.holders.get(&claim.worker) {
            Some((token, until)) if *token == claim.token && until.is_none_or(|u| mono() < u) => {
                Ok(())
            }
            _ => Err(RegistryError::LeaseLost {
                registry: "mem",
                worker: claim.worker,
                reason: "not the holder".to_owned(),
            }),
        }
    }
}

#[async_trait]
impl WorkerRegistry for MemRegistry {
    fn kind(&self) -> &'static str {
        "mem"
    }

    fn reassigns_workers(&self) -> bool {
        !self.keeps_workers.load(Ordering::SeqCst)
    }

    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<(), RegistryError> {
        if self.fail_local.load(Ordering::SeqCst) {
            return Err(RegistryError::Backend {
                registry: "mem",
                operation: "persist mark locally",
                message: "injected local failure".to_owned(),
            });
        }
        let mut s = self.state();
        let m = s.local_marks.entry(claim.worker).or_insert(mark);
        *m = (*m).max(mark);
        Ok(())
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim, RegistryError> {
        self.maybe_hang().await;
        let mut s = self.state();
        Self::expire(&mut s);
        let worker =
            (0..range)
                .find(|w| !s.holders.contains_key(w))
                .ok_or(RegistryError::Exhausted {
                    registry: "mem",
                    in_use: s.holders.len() as u64,
                    range: u64::from(range),
                })?;
        Ok(self.hold(&mut s, worker, node))
    }

    async fn claim_worker(
        &self,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
    ) -> Result<Claim, RegistryError> {
        self.maybe_hang().await;
        if worker >= range {
            return Err(RegistryError::Config {
                registry: "mem",
                message: format!("worker {worker} is out of range 0..{range}"),
            });
        }
        let mut s = self.state();
        Self::expire(&mut s);
        if s.holders.contains_key(&worker) {
            return Err(RegistryError::WorkerTaken {
                registry: "mem",
                worker,
                node: node.to_string(),
                holder: s.names.get(&worker).cloned().unwrap_or_default(),
                origin: None,
            });
        }
        Ok(self.hold(&mut s, worker, node))
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>, RegistryError> {
        self.maybe_hang().await;
        if self.fail_renew.load(Ordering::SeqCst) {
            return Err(RegistryError::Backend {
                registry: "mem",
                operation: "renew",
                message: "injected failure".to_owned(),
            });
        }
        let mut s = self.state();
        self.check(&s, claim)?;
        let lease = self.lease();
        s.holders.insert(
            claim.worker,
            (claim.token.clone(), lease.map(|l| l.valid_until)),
        );
        Ok(lease)
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.maybe_hang().await;
        if self.fail_persist.load(Ordering::SeqCst) {
            return Err(RegistryError::Backend {
                registry: "mem",
                operation: "persist mark",
                message: "injected failure".to_owned(),
            });
        }
        let mut s = self.state();
        self.check(&s, claim)?;
        let m = s.marks.entry(claim.worker).or_insert(mark);
        *m = (*m).max(mark);
        s.reports.insert(claim.worker, (reported, mono()));
        s.persists += 1;
        Ok(())
    }

    /// Fenced as a persist; the mark is set to `high`, as the trait allows
    /// a clean stop to.
    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.maybe_hang().await;
        if self.fail_persist.load(Ordering::SeqCst) {
            return Err(RegistryError::Backend {
                registry: "mem",
                operation: "record clean stop",
                message: "injected failure".to_owned(),
            });
        }
        let mut s = self.state();
        self.check(&s, claim)?;
        s.marks.insert(claim.worker, high);
        s.reports.insert(claim.worker, (reported, mono()));
        Ok(())
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>, RegistryError> {
        self.maybe_hang().await;
        Ok(self
            .state()
            .reports
            .iter()
            .filter(|(w, _)| **w != claim.worker)
            .map(|(w, (r, stored))| {
                let report = PeerReport::new(*w, *r);
                if self.ages.load(Ordering::SeqCst) {
                    report.with_age(mono().saturating_duration_since(*stored))
                } else {
                    report
                }
            })
            .collect())
    }

    async fn release(&self, claim: &Claim) -> Result<(), RegistryError> {
        self.maybe_hang().await;
        let mut s = self.state();
        if s.holders
            .get(&claim.worker)
            .is_some_and(|(t, _)| *t == claim.token)
        {
            s.holders.remove(&claim.worker);
        }
        Ok(())
    }

    /// The live holders, with their identities and marks.
    async fn fleet(&self) -> Result<Vec<FleetMember>, RegistryError> {
        self.maybe_hang().await;
        let mut s = self.state();
        Self::expire(&mut s);
        let mut members: Vec<FleetMember> = s
            .holders
            .iter()
            .map(|(&worker, (_, until))| {
                let mut m = FleetMember::new(worker);
                if let Some(node) = s.nodes.get(&worker) {
                    m = m.with_node(node);
                }
                m.live = true;
                m.lease_left = until.map(|u| u.saturating_duration_since(mono()));
                m.mark = s.marks.get(&worker).copied();
                m
            })
            .collect();
        members.sort_by_key(|m| m.worker);
        Ok(members)
    }
}

/// Shares a registry as the keeper takes it.
pub fn shared<R: WorkerRegistry + 'static>(r: &Arc<R>) -> Arc<dyn WorkerRegistry> {
    r.clone()
}

// ---- Shared by the backend, contract and outage tests ----

/// A node identity for shared-registry tests: `node-N` at `10.0.X.Y:7000+N`,
/// distinct for every `n` (ZooKeeper's forever mode keys workers by it).
pub fn identity(n: usize) -> NodeIdentity {
    NodeIdentity {
        host: format!("node-{n}"),
        address: format!("10.0.{}.{}", n / 256, n % 256),
        port: 7000 + u16::try_from(n).unwrap(),
    }
}

/// A timestamp from Unix milliseconds.
pub fn ms(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

/// Claims with `registry` for `node` every 50 ms until it succeeds or `within`
/// passes (waiting for a dead holder's lease to run out).
pub async fn claim_eventually(
    registry: &dyn WorkerRegistry,
    node: &NodeIdentity,
    range: u32,
    within: Duration,
) -> Claim {
    let deadline = Instant::now() + within;
    loop {
        match registry.claim(node, range).await {
            Ok(claim) => return claim,
            Err(RegistryError::Exhausted { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("claim did not succeed within {within:?}: {e}"),
        }
    }
}

/// A registry whose connection can be cut, as a crash or a network partition
/// would: after [`Severable::sever`] every call fails and the real registry
/// (its connections, pool or session) is dropped, so nothing more reaches the
/// store: no renewal, no final report, no release.
#[derive(Debug)]
pub struct Severable {
    kind: &'static str,
    inner: Mutex<Option<Arc<dyn WorkerRegistry>>>,
}

impl Severable {
    pub fn new(inner: Arc<dyn WorkerRegistry>) -> Arc<Severable> {
        Arc::new(Severable {
            kind: inner.kind(),
            inner: Mutex::new(Some(inner)),
        })
    }

    /// Cuts the connection for good.
    pub fn sever(&self) {
        let inner = self.inner.lock().unwrap().take();
        drop(inner);
    }

    fn get(&self, operation: &'static str) -> Result<Arc<dyn WorkerRegistry>, RegistryError> {
        self.inner
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| RegistryError::Backend {
                registry: self.kind,
                operation,
                message: "severed: this node is dead".to_owned(),
            })
    }
}

#[async_trait]
impl WorkerRegistry for Severable {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn reassigns_workers(&self) -> bool {
        self.get("reassigns_workers")
            .map_or(true, |inner| inner.reassigns_workers())
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim, RegistryError> {
        self.get("claim")?.claim(node, range).await
    }

    async fn claim_worker(
        &self,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
    ) -> Result<Claim, RegistryError> {
        self.get("claim")?.claim_worker(node, worker, range).await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>, RegistryError> {
        self.get("renew")?.renew(claim).await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.get("persist mark")?
            .persist_mark(claim, mark, reported)
            .await
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.get("record clean stop")?
            .record_clean_stop(claim, high, reported)
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>, RegistryError> {
        self.get("list peers")?.peers(claim).await
    }

    async fn release(&self, claim: &Claim) -> Result<(), RegistryError> {
        self.get("release")?.release(claim).await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>, RegistryError> {
        self.get("fleet")?.fleet().await
    }
}

/// Runs `f` with its own current-thread runtime on a thread of its own and
/// waits for it: for cleanups in `Drop`, which may run while the test's
/// runtime is panicking or gone.
pub fn block_on_side<T: Send + 'static>(
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>> + Send + 'static,
) -> Option<T> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        Some(rt.block_on(f()))
    })
    .join()
    .ok()
    .flatten()
}

/// A unique name per test and process, for key prefixes, clusters and tables.
pub fn unique_name(test: &str) -> String {
    use std::sync::atomic::AtomicU32;
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000_000;
    format!("{test}-{}-{nanos}-{seq}", std::process::id())
}

/// The longest one registry test against a real service may take. A test
/// that hangs then fails, naming itself, instead of holding the whole binary
/// (and CI with it) until CI's own limit, as a DROP TABLE stuck behind a
/// lock once did.
pub const TEST_LIMIT: Duration = Duration::from_secs(300);

/// Awaits `test`'s body, failing it when it runs past [`TEST_LIMIT`].
pub async fn within_limit(test: &str, body: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(TEST_LIMIT, body).await.is_err() {
        panic!("{test} did not finish within {TEST_LIMIT:?}: it hangs");
    }
}

// ---- The SQL tests' own statements ----

/// How long a statement the SQL tests run themselves (a set-up, a DROP, a
/// clean-up) waits for a lock another session holds. Left to the servers,
/// MariaDB waits a day (`lock_wait_timeout`) and PostgreSQL for ever
/// (`lock_timeout`).
pub const SQL_LOCK_WAIT: Duration = Duration::from_secs(30);

/// The statement that bounds a session's lock waits by [`SQL_LOCK_WAIT`].
fn bound_lock_waits(dialect: idmint_sql::Dialect) -> Option<String> {
    let secs = SQL_LOCK_WAIT.as_secs();
    match dialect {
        idmint_sql::Dialect::Postgres => Some(format!("SET lock_timeout = '{secs}s'")),
        idmint_sql::Dialect::MySql => Some(format!("SET SESSION lock_wait_timeout = {secs}")),
        idmint_sql::Dialect::Sqlite => None,
    }
}

/// Runs each of `statements` on one connection of `db`, its lock waits
/// bounded by [`SQL_LOCK_WAIT`]. A statement that fails panics naming it,
/// the error, and every session on the server with its transaction, so a
/// lock nobody releases names its holder.
pub async fn exec_sql(db: &idmint_sql::Database, statements: &[String]) {
    let failed = idmint_sql::on_pool!(db.pool(), p => {
        let mut conn = p.acquire().await.unwrap_or_else(|e| panic!("acquire: {e}"));
        let mut failed = None;
        for sql in bound_lock_waits(db.dialect()).iter().chain(statements) {
            if let Err(e) = sqlx::query(sql).execute(&mut *conn).await {
                failed = Some(format!("{sql}: {e}"));
                break;
            }
        }
        failed
    });
    if let Some(failed) = failed {
        panic!(
            "{failed}\nsessions on the server:\n{}",
            server_sessions(db).await.join("\n")
        );
    }
}

/// One line per session on `db`'s server: its id, state, open transaction
/// and statement (empty on SQLite, or when they can't be read).
async fn server_sessions(db: &idmint_sql::Database) -> Vec<String> {
    let sql = match db.dialect() {
        idmint_sql::Dialect::MySql => {
            "SELECT CONCAT_WS(' | ', p.ID, p.COMMAND, p.TIME, IFNULL(p.STATE, ''), \
             IFNULL(CONCAT('transaction since ', t.trx_started), 'no transaction'), \
             IFNULL(LEFT(p.INFO, 200), '')) \
             FROM information_schema.PROCESSLIST p \
             LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID"
        }
        idmint_sql::Dialect::Postgres => {
            "SELECT concat_ws(' | ', pid, state, 'transaction since ' || xact_start, \
             wait_event_type, wait_event, left(query, 200)) \
             FROM pg_stat_activity WHERE datname = current_database()"
        }
        idmint_sql::Dialect::Sqlite => return Vec::new(),
    };
    let rows = idmint_sql::on_pool!(db.pool(), p => {
        sqlx::query_scalar::<_, String>(sql).fetch_all(p).await
    });
    rows.unwrap_or_else(|e| vec![format!("(sessions unreadable: {e})")])
}

/// Runs `statements` on the database at `url` from a `Drop`, on a
/// connection of its own with bounded lock waits, the whole bounded by a
/// minute. Best effort: a failure leaves litter, not a wrong result, and
/// never a clean-up that waits for ever.
pub fn exec_sql_on_drop(url: String, statements: Vec<String>) {
    block_on_side(move || {
        Box::pin(async move {
            let cleanup = async {
                let options = idmint_sql::ConnectOptions::new(url).with_max_connections(1);
                let Ok(db) = idmint_sql::Database::connect(&options).await else {
                    return;
                };
                idmint_sql::on_pool!(db.pool(), p => {
                    if let Ok(mut conn) = p.acquire().await {
                        for sql in bound_lock_waits(db.dialect()).iter().chain(&statements) {
                            let _ = sqlx::query(sql).execute(&mut *conn).await;
                        }
                    }
                });
                db.close().await;
            };
            let _ = tokio::time::timeout(Duration::from_secs(60), cleanup).await;
        })
    });
}
