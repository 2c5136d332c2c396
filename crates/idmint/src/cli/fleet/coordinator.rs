//! What the coordinator itself says a fleet costs it: its own request
//! counters (etcd's `/metrics`, Redis's `INFO`, PostgreSQL's
//! `pg_stat_database`, MariaDB/MySQL's `SHOW GLOBAL STATUS`, ZooKeeper's
//! `mntr`), and the CPU time and memory of its processes, read from `/proc`
//! (Linux) for the process listening on the config's endpoint and its
//! children (PostgreSQL's backends).
//!
//! Every reading is best effort: a counter the coordinator doesn't give, or
//! a process this user may not read, is left out of the report, never
//! guessed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use idmint_node::Config;
use idmint_node::config::RegistryKind;
use sqlx::Connection as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The bound on every reading: a coordinator too slow to answer is left
/// out rather than holding up the run.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Which coordinator the config names, and where.
#[derive(Debug, Clone)]
pub struct Coordinator {
    kind: Kind,
    /// `host:port` of its endpoint (the first of several).
    endpoint: Option<(String, u16)>,
    /// The process listening there, when this machine runs it.
    pid: Option<u32>,
}

#[derive(Debug, Clone)]
enum Kind {
    Etcd(String),
    Redis(String),
    Postgres(String),
    Mysql(String),
    ZooKeeper,
    /// SQLite, or a registry without a coordinator.
    Local,
}

/// One reading.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    /// CPU seconds used by the coordinator's processes so far.
    cpu: Option<f64>,
    /// Their memory now (proportional set size, bytes).
    memory: Option<u64>,
    counters: BTreeMap<&'static str, u64>,
}

/// What a coordinator did between two readings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Usage {
    /// CPU used, in percent of one core.
    pub cpu_percent: Option<f64>,
    /// Memory at the end, in MiB.
    pub memory_mib: Option<f64>,
    /// Each counter's rate, per second.
    pub rates: BTreeMap<&'static str, f64>,
}

impl Coordinator {
    /// The coordinator of `config`'s registry.
    pub fn of(config: &Config) -> Coordinator {
        let sf = &config.snowflake;
        let (kind, url) = match sf.registry {
            RegistryKind::Etcd => {
                let url = sf.etcd.endpoints.first().cloned().unwrap_or_default();
                let url = if url.contains("://") {
                    url
                } else {
                    format!("http://{url}")
                };
                (Kind::Etcd(url.clone()), url)
            }
            RegistryKind::Redis => {
                let url = sf.redis.url.expose().to_owned();
                (Kind::Redis(url.clone()), url)
            }
            RegistryKind::Sql => {
                let url = sf
                    .sql
                    .url
                    .as_ref()
                    .map(|u| u.expose().to_owned())
                    .unwrap_or_default();
                if url.starts_with("postgres") {
                    (Kind::Postgres(url.clone()), url)
                } else if url.starts_with("mysql") || url.starts_with("mariadb") {
                    (Kind::Mysql(url.clone()), url)
                } else {
                    (Kind::Local, String::new())
                }
            }
            RegistryKind::Zookeeper => {
                let first = sf.zookeeper.connect.split(',').next().unwrap_or_default();
                let first = first.split('/').next().unwrap_or_default().to_owned();
                (Kind::ZooKeeper, format!("zk://{first}"))
            }
            _ => (Kind::Local, String::new()),
        };
        let endpoint = host_port(&url);
        let pid = endpoint.as_ref().and_then(|(_, port)| listener_pid(*port));
        Coordinator {
            kind,
            endpoint,
            pid,
        }
    }

    /// `host:port` of the coordinator, if it has one.
    pub fn endpoint(&self) -> Option<(String, u16)> {
        self.endpoint.clone()
    }

    /// Reads the counters and the processes' usage now.
    pub async fn sample(&self) -> Sample {
        let counters = tokio::time::timeout(READ_TIMEOUT, self.counters())
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let (cpu, memory) = match self.pid {
            Some(pid) => process_usage(pid),
            None => (None, None),
        };
        Sample {
            at: Instant::now(),
            cpu,
            memory,
            counters,
        }
    }

    async fn counters(&self) -> Option<BTreeMap<&'static str, u64>> {
        match &self.kind {
            Kind::Etcd(url) => etcd_counters(url).await,
            Kind::Redis(url) => redis_counters(url).await,
            Kind::Postgres(url) => postgres_counters(url).await,
            Kind::Mysql(url) => mysql_counters(url).await,
            Kind::ZooKeeper => zookeeper_counters(self.endpoint.as_ref()?).await,
            Kind::Local => None,
        }
    }
}

/// The usage between `earlier` and `later`.
pub fn usage(earlier: &Sample, later: &Sample) -> Usage {
    let seconds = later.at.duration_since(earlier.at).as_secs_f64().max(1e-9);
    let cpu_percent = match (earlier.cpu, later.cpu) {
        (Some(a), Some(b)) => Some((b - a).max(0.0) / seconds * 100.0),
        _ => None,
    };
    let rates = later
        .counters
        .iter()
        .filter_map(|(name, &b)| {
            let a = *earlier.counters.get(name)?;
            Some((*name, b.saturating_sub(a) as f64 / seconds))
        })
        .collect();
    Usage {
        cpu_percent,
        memory_mib: later.memory.map(|b| b as f64 / (1024.0 * 1024.0)),
        rates,
    }
}

/// `host` and `port` of a URL or `host:port`, with the scheme's default port.
fn host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?']).next()?;
    let authority = authority.rsplit('@').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() => (host, port.parse().ok()?),
        _ => {
            let port = match scheme {
                "postgres" | "postgresql" => 5432,
                "mysql" | "mariadb" => 3306,
                "redis" | "rediss" => 6379,
                "zk" => 2181,
                "https" => 443,
                _ => 2379,
            };
            (authority, port)
        }
    };
    Some((host.trim_matches(['[', ']']).to_owned(), port))
}

async fn etcd_counters(url: &str) -> Option<BTreeMap<&'static str, u64>> {
    let text = reqwest::get(format!("{}/metrics", url.trim_end_matches('/')))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let sum = |name: &str| -> u64 {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let keepalives = text
        .lines()
        .filter(|l| l.starts_with("grpc_server_msg_received_total") && l.contains("LeaseKeepAlive"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64;
    let mut counters = BTreeMap::new();
    counters.insert("grpc messages", sum("grpc_server_msg_received_total"));
    counters.insert("lease keep-alives", keepalives);
    counters.insert(
        "raft proposals",
        sum("etcd_server_proposals_committed_total"),
    );
    counters.insert("range reads", sum("etcd_mvcc_range_total"));
    counters.insert("txns", sum("etcd_mvcc_txn_total"));
    Some(counters)
}

async fn redis_counters(url: &str) -> Option<BTreeMap<&'static str, u64>> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok()?;
    let (mut commands, mut scripts) = (0u64, 0u64);
    for line in info.lines() {
        let Some((name, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if name == "info" {
            continue;
        }
        let calls = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        commands += calls;
        if name.starts_with("eval") || name.starts_with("fcall") {
            scripts += calls;
        }
    }
    Some(BTreeMap::from([
        ("commands", commands),
        ("scripts", scripts),
    ]))
}

async fn postgres_counters(url: &str) -> Option<BTreeMap<&'static str, u64>> {
    let mut conn = sqlx::PgConnection::connect(url).await.ok()?;
    // Counters flushed by every backend so far, read fresh each time.
    let row: (i64, i64, i64) = sqlx::query_as(
        "SELECT (xact_commit + xact_rollback)::bigint, \
                (tup_returned + tup_fetched)::bigint, \
                (tup_inserted + tup_updated + tup_deleted)::bigint \
         FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut conn)
    .await
    .ok()?;
    let _ = conn.close().await;
    Some(BTreeMap::from([
        ("transactions", row.0.max(0) as u64),
        ("rows read", row.1.max(0) as u64),
        ("rows written", row.2.max(0) as u64),
    ]))
}

async fn mysql_counters(url: &str) -> Option<BTreeMap<&'static str, u64>> {
    let mut conn = sqlx::MySqlConnection::connect(url).await.ok()?;
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL STATUS WHERE Variable_name IN \
         ('Questions', 'Com_select', 'Com_insert', 'Com_update', 'Com_delete', 'Com_commit')",
    )
    .fetch_all(&mut conn)
    .await
    .ok()?;
    let _ = conn.close().await;
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(BTreeMap::from([
        ("statements", get("Questions")),
        ("selects", get("Com_select")),
        (
            "row writes",
            get("Com_insert") + get("Com_update") + get("Com_delete"),
        ),
        ("commits", get("Com_commit")),
    ]))
}

/// ZooKeeper's `mntr` four-letter word (it must be on the server's
/// `4lw.commands.whitelist`). Hand-written: the protocol is the four bytes
/// out and the text back until the server closes, and the ZooKeeper client
/// crate has no call for it.
async fn zookeeper_counters(endpoint: &(String, u16)) -> Option<BTreeMap<&'static str, u64>> {
    let mut stream = tokio::net::TcpStream::connect((endpoint.0.as_str(), endpoint.1))
        .await
        .ok()?;
    stream.write_all(b"mntr").await.ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let get = |name: &str| {
        text.lines().find_map(|l| {
            let (n, v) = l.split_once('\t')?;
            (n == name).then(|| v.trim().parse::<f64>().ok().map(|v| v as u64))?
        })
    };
    Some(BTreeMap::from([(
        "packets received",
        get("zk_packets_received")?,
    )]))
}

/// The process listening on TCP `port` on this machine, from `/proc/net`
/// and the processes' open sockets. `None` elsewhere than Linux, or when
/// the listener belongs to a process this user can't see.
fn listener_pid(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEXIP:HEXPORT; state 0A is LISTEN.
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let listening_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *state == "0A" && listening_port == Some(port) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for pid in pids() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path())
                && inodes.iter().any(|i| target.as_os_str() == i.as_str())
            {
                return Some(pid);
            }
        }
    }
    None
}

fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
}

/// CPU seconds (with reaped children's) and proportional memory of `root`
/// and every process below it.
pub fn process_usage(root: u32) -> (Option<f64>, Option<u64>) {
    let parents: Vec<(u32, u32)> = pids()
        .filter_map(|pid| Some((pid, stat(pid)?.ppid)))
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    let ticks = clock_ticks();
    let mut cpu = None;
    let mut memory = None;
    for pid in tree {
        if let Some(s) = stat(pid) {
            let own = s.utime + s.stime;
            // Children that ended (a PostgreSQL backend that closed) count
            // in their parent's; only the root's are added, once.
            let reaped = if pid == root { s.cutime + s.cstime } else { 0 };
            *cpu.get_or_insert(0.0) += (own + reaped) as f64 / ticks;
        }
        if let Some(pss) = pss(pid) {
            *memory.get_or_insert(0) += pss;
        }
    }
    (cpu, memory)
}

struct Stat {
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count fields
    // after the last ')'. Field 3 (state) is the first after it.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(Stat {
        ppid: u32::try_from(num(1)?).ok()?,
        utime: num(11)?,
        stime: num(12)?,
        cutime: num(13)?,
        cstime: num(14)?,
    })
}

/// Proportional set size in bytes: shared pages (PostgreSQL's shared
/// buffers) split among the processes that map them, so a sum over
/// processes is the memory they really take.
fn pss(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .or_else(|_| std::fs::read_to_string(format!("/proc/{pid}/status")))
        .ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("Pss:"))
        .or_else(|| text.lines().find(|l| l.starts_with("VmRSS:")))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn clock_ticks() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_read_from_every_url_form() {
        assert_eq!(
            host_port("http://127.0.0.1:2379"),
            Some(("127.0.0.1".to_owned(), 2379))
        );
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1/test"),
            Some(("127.0.0.1".to_owned(), 5432))
        );
        assert_eq!(
            host_port("mysql://root:pw@db:3307/test?ssl-mode=disabled"),
            Some(("db".to_owned(), 3307))
        );
        assert_eq!(
            host_port("redis://[::1]:6380/0"),
            Some(("::1".to_owned(), 6380))
        );
        assert_eq!(host_port("zk://zk1:2181"), Some(("zk1".to_owned(), 2181)));
    }

    #[test]
    fn this_process_is_found_listening_and_measured() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(listener_pid(port), Some(std::process::id()));
        let (cpu, memory) = process_usage(std::process::id());
        assert!(cpu.is_some_and(|c| c >= 0.0));
        assert!(memory.is_some_and(|m| m > 1024 * 1024), "{memory:?}");
    }
}
