//! What a Redis server says about itself: who it is (`run_id`), how long it
//! has run, whether it was promoted from a replica, and whether it keeps what
//! it is told (AOF with `appendfsync always`, no eviction, never flushed).
//!
//! Redis can forget: a restart without persistence comes back empty, one with
//! RDB snapshots comes back minutes behind, and a failover promotes a replica
//! that may lack the last writes (replication is asynchronous). Everything
//! idmint keeps in Redis (worker leases and marks, segment counters) must be
//! able to tell. These facts are what `INFO` (and `CONFIG GET appendfsync`)
//! give for it; [`ServerFacts::read`] reads them in one or two round trips.
//!
//! - `run_id` changes whenever the server process changes: a restart, or a
//!   failover to another server. It is the identity idmint records.
//! - `second_repl_offset` is `-1` on a server that was never promoted since
//!   it started, and an offset on one that was (a failover).
//! - `aof_enabled` with `appendfsync always` is the only configuration whose
//!   restart loses no acknowledged write.
//! - `evicted_keys` above 0, or a `FLUSHALL`/`FLUSHDB` in `INFO commandstats`,
//!   means keys went away without a restart.

use std::time::Duration;

use redis::InfoDict;

use crate::{CallError, RedisConnection};

/// What one Redis server says about itself, read by [`ServerFacts::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerFacts {
    /// The server process's random identity (`INFO server` `run_id`); a new
    /// one after every restart and on every other server.
    pub run_id: String,
    /// How long the process has run (whole seconds, as Redis reports).
    pub uptime: Duration,
    /// `master` or `slave` (Redis's own words).
    pub role: String,
    /// The server was promoted from a replica since it started
    /// (`second_repl_offset` is not -1): a failover happened here.
    pub promoted: bool,
    /// The server's replication ID (`master_replid`).
    pub replid: String,
    /// Replicas connected to it now.
    pub replicas: u64,
    /// The append-only file is on (`aof_enabled:1`).
    pub aof_enabled: bool,
    /// The `appendfsync` setting, when `CONFIG GET` is allowed (managed
    /// Redis services often rename or forbid `CONFIG`).
    pub appendfsync: Option<String>,
    /// RDB snapshots are configured (`CONFIG GET save` is not empty); `None`
    /// when `CONFIG` is refused.
    pub rdb_snapshots: Option<bool>,
    /// Keys evicted under `maxmemory` since the start (`evicted_keys`).
    pub evicted_keys: u64,
    /// The eviction policy (`maxmemory_policy`, from `INFO memory`).
    pub maxmemory_policy: Option<String>,
}

impl ServerFacts {
    /// Reads the facts `INFO` gives (its default sections; one round trip),
    /// bounded by `timeout`, from the server that holds `key` (on a Redis
    /// Cluster, the master of its slot; elsewhere the one server, or the
    /// Sentinel's primary). The `CONFIG` fields stay `None` until
    /// [`ServerFacts::read_config`].
    ///
    /// # Errors
    /// [`CallError`] when `INFO` fails or times out, or when its answer has no
    /// `run_id` (not a Redis server, or a proxy that hides it).
    pub async fn read(
        conn: &RedisConnection,
        key: &str,
        timeout: Duration,
    ) -> Result<Self, CallError> {
        let info: InfoDict = conn.call_at(timeout, key, redis::cmd("INFO")).await?;
        Self::from_info(&info).ok_or_else(|| {
            CallError::Config(
                "INFO has no run_id: the server (or a proxy in front of it) does not say \
                 who it is, so a restart could not be told"
                    .to_owned(),
            )
        })
    }

    /// Adds what `CONFIG GET appendfsync` and `CONFIG GET save` say (two
    /// round trips, each bounded by `timeout`, on the server that holds
    /// `key`); a refused `CONFIG` leaves those fields `None`.
    pub async fn read_config(&mut self, conn: &RedisConnection, key: &str, timeout: Duration) {
        self.appendfsync = config_get(conn, key, timeout, "appendfsync").await;
        self.rdb_snapshots = config_get(conn, key, timeout, "save")
            .await
            .map(|s| !s.trim().is_empty());
    }

    /// The facts in an `INFO` answer; `None` without a `run_id`.
    pub fn from_info(info: &InfoDict) -> Option<Self> {
        let run_id: String = info.get("run_id")?;
        let number = |key: &str| info.get::<i64>(key);
        Some(ServerFacts {
            run_id,
            uptime: Duration::from_secs(
                number("uptime_in_seconds").map_or(0, |s| s.max(0).unsigned_abs()),
            ),
            role: info.get("role").unwrap_or_default(),
            promoted: number("second_repl_offset").is_some_and(|o| o != -1),
            replid: info.get("master_replid").unwrap_or_default(),
            replicas: number("connected_slaves").map_or(0, |n| n.max(0).unsigned_abs()),
            aof_enabled: number("aof_enabled") == Some(1),
            appendfsync: None,
            rdb_snapshots: None,
            evicted_keys: number("evicted_keys").map_or(0, |n| n.max(0).unsigned_abs()),
            maxmemory_policy: info.get("maxmemory_policy"),
        })
    }

    /// Whether a restart of this server loses no acknowledged write: AOF on
    /// with `appendfsync always`, and not a promoted replica (replication is
    /// asynchronous, so a promotion can lose the last writes whatever the
    /// persistence). `false` when `CONFIG` could not be read.
    pub fn keeps_every_write(&self) -> bool {
        self.aof_enabled && self.appendfsync.as_deref() == Some("always") && !self.promoted
    }

    /// Whether keys can vanish without a restart: an eviction policy that
    /// evicts keys without an expiry (`allkeys-*`), or evictions that
    /// already happened.
    pub fn evicts(&self) -> bool {
        self.evicted_keys > 0
            || self
                .maxmemory_policy
                .as_deref()
                .is_some_and(|p| p.starts_with("allkeys"))
    }

    /// What the server's persistence is, in a phrase for logs and warnings:
    /// `None` when it keeps every write.
    pub fn persistence_warning(&self) -> Option<String> {
        if self.keeps_every_write() && !self.evicts() {
            return None;
        }
        let mut parts = Vec::new();
        if self.promoted {
            parts.push(
                "it was promoted from a replica (a failover can lose the last writes)".to_owned(),
            );
        }
        match (self.aof_enabled, self.appendfsync.as_deref()) {
            (false, _) => parts.push(match self.rdb_snapshots {
                Some(true) => "appendonly is off (RDB snapshots only: a restart comes back as of the last snapshot)".to_owned(),
                Some(false) => "persistence is off (appendonly no, no RDB snapshots: a restart comes back empty)".to_owned(),
                None => "appendonly is off".to_owned(),
            }),
            (true, Some("always")) => {}
            (true, Some(other)) => parts.push(format!(
                "appendfsync is {other} (a crash can lose the last writes)"
            )),
            (true, None) => parts.push("appendfsync can't be read (CONFIG is refused)".to_owned()),
        }
        if self.evicts() {
            parts.push(format!(
                "keys can be evicted (maxmemory-policy {}, {} evicted so far)",
                self.maxmemory_policy.as_deref().unwrap_or("?"),
                self.evicted_keys
            ));
        }
        Some(parts.join("; "))
    }

    /// Whether `FLUSHALL` or `FLUSHDB` ever ran on this server since its
    /// start (or its last `CONFIG RESETSTAT`), from `INFO commandstats` of
    /// the server that holds `key`.
    /// `true` when that can't be read: the caller can't rule it out.
    pub async fn ever_flushed(conn: &RedisConnection, key: &str, timeout: Duration) -> bool {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("commandstats");
        let stats: Result<InfoDict, _> = conn.call_at(timeout, key, cmd).await;
        match stats {
            Ok(stats) => {
                stats.contains_key(&"cmdstat_flushall") || stats.contains_key(&"cmdstat_flushdb")
            }
            Err(_) => true,
        }
    }
}

/// `CONFIG GET name`'s value, or `None` when refused or absent.
async fn config_get(
    conn: &RedisConnection,
    key: &str,
    timeout: Duration,
    name: &'static str,
) -> Option<String> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg(name);
    let pair: Vec<String> = conn.call_at(timeout, key, cmd).await.ok()?;
    pair.get(1).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n\
        # Memory\r\nmaxmemory_policy:noeviction\r\n\
        # Persistence\r\naof_enabled:0\r\n\
        # Stats\r\nevicted_keys:0\r\n\
        # Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:r1\r\nsecond_repl_offset:-1\r\n";

    #[test]
    fn facts_come_from_info() {
        let facts = ServerFacts::from_info(&InfoDict::new(INFO)).unwrap();
        assert_eq!(facts.run_id, "abc123");
        assert_eq!(facts.uptime, Duration::from_secs(42));
        assert_eq!(facts.role, "master");
        assert!(!facts.promoted);
        assert_eq!(facts.replid, "r1");
        assert!(!facts.aof_enabled);
        assert!(!facts.evicts());
        assert!(!facts.keeps_every_write());
        assert!(
            ServerFacts::from_info(&InfoDict::new("# Server\r\nuptime_in_seconds:1\r\n")).is_none()
        );
    }

    #[test]
    fn only_aof_always_on_a_server_never_promoted_keeps_every_write() {
        let mut facts = ServerFacts::from_info(&InfoDict::new(INFO)).unwrap();
        facts.rdb_snapshots = Some(false);
        let warning = facts.persistence_warning().unwrap();
        assert!(warning.contains("comes back empty"), "{warning}");
        facts.aof_enabled = true;
        facts.appendfsync = Some("everysec".to_owned());
        assert!(
            facts
                .persistence_warning()
                .unwrap()
                .contains("appendfsync is everysec")
        );
        facts.appendfsync = Some("always".to_owned());
        assert!(facts.keeps_every_write());
        assert_eq!(facts.persistence_warning(), None);
        facts.promoted = true;
        assert!(!facts.keeps_every_write());
        assert!(facts.persistence_warning().unwrap().contains("promoted"));
        facts.promoted = false;
        facts.maxmemory_policy = Some("allkeys-lru".to_owned());
        assert!(facts.evicts());
        assert!(facts.persistence_warning().unwrap().contains("allkeys-lru"));
    }
}
