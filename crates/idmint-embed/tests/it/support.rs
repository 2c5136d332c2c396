//! What the tests share: config files in temporary directories, service
//! lookups, and the lock that keeps the fork test apart from the others.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

pub use idmint_testkit::{PrivateService, Service, require_service};

/// Every test holds `read()` for its whole run; the fork test, which bumps
/// the process's fork generation (so every object made before it acts as
/// its parent's), holds `write()`.
static GENERATION: RwLock<()> = RwLock::new(());

/// Held by an ordinary test for its whole run.
pub fn ordinary() -> RwLockReadGuard<'static, ()> {
    GENERATION.read().unwrap_or_else(|p| p.into_inner())
}

/// Held by the test that plays a forked child.
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    GENERATION.write().unwrap_or_else(|p| p.into_inner())
}

/// A temporary directory with a config file: `[server] data_dir` in the
/// directory, then `body`.
pub struct ConfigFile {
    /// Kept for its drop, which removes the directory.
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

pub fn config(body: &str) -> ConfigFile {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idmint.toml");
    let text = format!(
        "[server]\ndata_dir = {:?}\n\n{body}\n",
        dir.path().join("data")
    );
    std::fs::write(&path, text).unwrap();
    ConfigFile { _dir: dir, path }
}

/// A unique name for a test's cluster, table or key.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{}_{}", std::process::id(), nanos % 1_000_000_000)
}

fn listens(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_ok()
}

/// The machine's PostgreSQL, if it runs.
pub fn postgres() -> Option<&'static str> {
    require_service("PostgreSQL on 127.0.0.1:5432", listens(5432))
        .then_some(idmint_testkit::POSTGRES_URL)
}

/// The machine's MariaDB, if it runs.
pub fn mariadb() -> Option<&'static str> {
    require_service("MariaDB on 127.0.0.1:3306", listens(3306)).then_some(idmint_testkit::MYSQL_URL)
}

/// The machine's Redis, if it runs.
pub fn redis() -> Option<&'static str> {
    require_service("Redis on 127.0.0.1:6379", listens(6379)).then_some(idmint_testkit::REDIS_URL)
}

/// The etcd `scripts/test` started, if any.
pub fn etcd() -> Option<String> {
    let endpoint = std::env::var("IDMINT_TEST_ETCD_ENDPOINT").ok();
    require_service("etcd (IDMINT_TEST_ETCD_ENDPOINT)", endpoint.is_some()).then_some(endpoint)?
}

/// Runs SQL on the machine's MariaDB `test` database with the `mysql` client
/// (scripts/deps installs it).
pub fn mysql(sql: &str) {
    let out = Command::new("mysql")
        .args([
            "-h",
            "127.0.0.1",
            "-P",
            "3306",
            "-u",
            "root",
            "test",
            "-e",
            sql,
        ])
        .output()
        .expect("the mysql client runs (scripts/deps installs mariadb-client)");
    assert!(
        out.status.success(),
        "mysql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs SQL on the machine's PostgreSQL `test` database with `psql`
/// (scripts/deps installs it).
pub fn psql(sql: &str) {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "test",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("psql runs (scripts/deps installs postgresql-client)");
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
