//! What a [`RedisTarget`] looks like from the inside, for `idmint config
//! check`: the primary and its replicas, the sentinels and which primary
//! each names, or a Cluster's slot ranges with their masters and replicas.
//! Read-only, each read bounded; and [`Topology::warnings`] says where one
//! lost member stops everything (no replica, fewer than 3 sentinels, a
//! cluster master without a replica, slots no master serves).

use std::time::Duration;

use redis::{ConnectionAddr, InfoDict, IntoConnectionInfo, RedisConnectionInfo};

use crate::target::parse_host_port;
use crate::{CallError, RedisConnection, RedisTarget, SentinelTarget};

/// All 16384 Redis Cluster hash slots.
const CLUSTER_SLOTS: u32 = 16384;

/// One Redis server in a [`Topology`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopologyNode {
    /// `host:port` as the servers report it.
    pub addr: String,
    /// What the server or its primary says of it (`master`, `online`,
    /// `wait_bgsave`, a Sentinel's flags ...).
    pub state: String,
}

/// One Cluster master with its slots and replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterShard {
    /// The slot ranges it serves, inclusive.
    pub slots: Vec<(u16, u16)>,
    /// The master, `host:port`.
    pub master: String,
    /// Its replicas, `host:port` each.
    pub replicas: Vec<String>,
}

/// What a Redis deployment looks like, read by [`Topology::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// One server (maybe a primary with replicas, reached directly).
    Single {
        /// The server, with its `role`.
        primary: TopologyNode,
        /// The replicas it reports (`INFO replication`).
        replicas: Vec<TopologyNode>,
    },
    /// A primary behind Redis Sentinel.
    Sentinel {
        /// The master name.
        master_name: String,
        /// Each configured sentinel and the primary it names (`host:port`),
        /// or why it could not be asked.
        sentinels: Vec<(String, Result<String, String>)>,
        /// How many sentinels the first that answered knows of, itself
        /// included.
        known_sentinels: usize,
        /// The primary's `min-replicas-to-write` (`None` when `CONFIG` is
        /// refused).
        min_replicas_to_write: Option<u64>,
        /// The primary the connection uses.
        primary: TopologyNode,
        /// The replicas the sentinels know, with their flags.
        replicas: Vec<TopologyNode>,
    },
    /// A Redis Cluster.
    Cluster {
        /// Its masters, in slot order.
        shards: Vec<ClusterShard>,
    },
}

impl Topology {
    /// Reads the topology of `conn`'s target, each request bounded by
    /// `timeout`.
    ///
    /// # Errors
    /// [`CallError`] when the server (the primary, or the cluster) does not
    /// answer, or answers what this can't read. A sentinel that does not
    /// answer is reported in [`Topology::Sentinel`], not an error.
    pub async fn read(conn: &RedisConnection, timeout: Duration) -> Result<Topology, CallError> {
        match conn.target() {
            RedisTarget::Url(_) => {
                let (primary, replicas) = read_replication(conn, timeout).await?;
                Ok(Topology::Single { primary, replicas })
            }
            RedisTarget::Sentinel(s) => read_sentinel(conn, s, timeout).await,
            RedisTarget::Cluster(_) => {
                // CLUSTER NODES rather than CLUSTER SLOTS: Redis 7 leaves out
                // of CLUSTER SLOTS a replica that has not acknowledged any
                // offset yet, and every failing node; NODES lists them all.
                let nodes: String = conn
                    .call(timeout, |mut c| async move {
                        redis::cmd("CLUSTER").arg("NODES").query_async(&mut c).await
                    })
                    .await?;
                Ok(Topology::Cluster {
                    shards: parse_cluster_nodes(&nodes)?,
                })
            }
        }
    }

    /// Where one lost member stops idmint, or where the deployment is not
    /// what it should be: each a sentence.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        match self {
            Topology::Single { primary, replicas } => {
                if replicas.is_empty() {
                    warnings.push(format!(
                        "a single member: {} has no replica, so losing it stops every node \
                         that needs Redis (run a primary with replicas behind Sentinel, or a \
                         Redis Cluster)",
                        primary.addr
                    ));
                } else {
                    warnings.push(format!(
                        "{} has {} replica(s) but is reached directly: a failover needs a \
                         config change (configure its sentinels instead)",
                        primary.addr,
                        replicas.len()
                    ));
                }
            }
            Topology::Sentinel {
                master_name,
                sentinels,
                known_sentinels,
                min_replicas_to_write,
                primary,
                replicas,
            } => {
                if *min_replicas_to_write == Some(0) {
                    warnings.push(format!(
                        "{master_name}'s primary {} has min-replicas-to-write 0: cut off from \
                         its replicas and sentinels, it goes on taking writes that the next \
                         promotion drops, and a node still talking to it keeps renewing a \
                         worker the majority side hands out again after its hold; set \
                         min-replicas-to-write 1 and min-replicas-max-lag at most the \
                         sentinels' down-after-milliseconds plus snowflake.window \
                         (docs/operating.md, \"Redis in production\")",
                        primary.addr
                    ));
                }
                if *known_sentinels < 3 {
                    warnings.push(format!(
                        "only {known_sentinels} sentinel(s) watch {master_name}: a failover \
                         needs a majority, so run at least 3"
                    ));
                }
                if replicas.is_empty() {
                    warnings.push(format!(
                        "a single member: {master_name} ({}) has no replica to fail over to",
                        primary.addr
                    ));
                }
                for (sentinel, named) in sentinels {
                    match named {
                        Ok(addr) if *addr != primary.addr => warnings.push(format!(
                            "sentinel {sentinel} names {addr} as {master_name}'s primary, \
                             not {}",
                            primary.addr
                        )),
                        Ok(_) => {}
                        Err(e) => warnings.push(format!("sentinel {sentinel}: {e}")),
                    }
                }
            }
            Topology::Cluster { shards } => {
                let covered: u32 = shards
                    .iter()
                    .flat_map(|s| &s.slots)
                    .map(|&(a, b)| u32::from(b) - u32::from(a) + 1)
                    .sum();
                if covered < CLUSTER_SLOTS {
                    warnings.push(format!(
                        "only {covered} of {CLUSTER_SLOTS} slots are served: keys in the \
                         others fail"
                    ));
                }
                if shards.len() == 1 {
                    warnings.push("a single master serves every slot".to_owned());
                }
                for shard in shards.iter().filter(|s| s.replicas.is_empty()) {
                    warnings.push(format!(
                        "a single member: master {} has no replica, so losing it stops \
                         its slots",
                        shard.master
                    ));
                }
            }
        }
        warnings
    }

    /// The topology in lines for people.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        match self {
            Topology::Single { primary, replicas } => {
                lines.push(format!("server {} ({})", primary.addr, primary.state));
                for r in replicas {
                    lines.push(format!("  replica {} ({})", r.addr, r.state));
                }
            }
            Topology::Sentinel {
                master_name,
                sentinels,
                known_sentinels,
                primary,
                replicas,
                ..
            } => {
                lines.push(format!(
                    "sentinel master {master_name}: primary {} ({}), {} replica(s), \
                     {known_sentinels} sentinel(s) known",
                    primary.addr,
                    primary.state,
                    replicas.len()
                ));
                for r in replicas {
                    lines.push(format!("  replica {} ({})", r.addr, r.state));
                }
                for (sentinel, named) in sentinels {
                    match named {
                        Ok(addr) => lines.push(format!("  sentinel {sentinel}: names {addr}")),
                        Err(e) => lines.push(format!("  sentinel {sentinel}: {e}")),
                    }
                }
            }
            Topology::Cluster { shards } => {
                let replicas: usize = shards.iter().map(|s| s.replicas.len()).sum();
                lines.push(format!(
                    "cluster: {} master(s), {replicas} replica(s)",
                    shards.len()
                ));
                for shard in shards {
                    let slots: Vec<String> = shard
                        .slots
                        .iter()
                        .map(|(a, b)| format!("{a}-{b}"))
                        .collect();
                    lines.push(format!(
                        "  slots {}: master {}, replicas [{}]",
                        slots.join(","),
                        shard.master,
                        shard.replicas.join(", ")
                    ));
                }
            }
        }
        lines
    }
}

/// The server's role and the replicas it reports, from `INFO replication`.
async fn read_replication(
    conn: &RedisConnection,
    timeout: Duration,
) -> Result<(TopologyNode, Vec<TopologyNode>), CallError> {
    let info: InfoDict = conn
        .call(timeout, |mut c| async move {
            redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
        })
        .await?;
    let role: String = info.get("role").unwrap_or_default();
    let count: usize = info.get("connected_slaves").unwrap_or(0);
    let mut replicas = Vec::with_capacity(count);
    for i in 0..count {
        let Some(line) = info.get::<String>(&format!("slave{i}")) else {
            continue;
        };
        let field = |name: &str| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or("?")
                .to_owned()
        };
        replicas.push(TopologyNode {
            addr: format!("{}:{}", field("ip"), field("port")),
            state: format!("{}, lag {}", field("state"), field("lag")),
        });
    }
    let primary = TopologyNode {
        addr: conn.addr(),
        state: role,
    };
    Ok((primary, replicas))
}

async fn read_sentinel(
    conn: &RedisConnection,
    s: &SentinelTarget,
    timeout: Duration,
) -> Result<Topology, CallError> {
    let mut sentinels = Vec::with_capacity(s.sentinels.len());
    let mut replicas = None;
    let mut known_sentinels = 0;
    for addr in &s.sentinels {
        let asked = ask_sentinel(s, addr, timeout).await;
        match asked {
            Ok((primary, others, their_replicas)) => {
                if replicas.is_none() {
                    known_sentinels = others + 1;
                    replicas = Some(their_replicas);
                }
                sentinels.push((addr.clone(), Ok(primary)));
            }
            Err(e) => sentinels.push((addr.clone(), Err(e.to_string()))),
        }
    }
    // The primary as the connection finds it (the crate asks the sentinels
    // and checks its ROLE), and where it says it is.
    let info: InfoDict = conn
        .call(timeout, |mut c| async move {
            redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
        })
        .await?;
    let named = sentinels
        .iter()
        .find_map(|(_, r)| r.as_ref().ok().cloned())
        .unwrap_or_else(|| "?".to_owned());
    let primary = TopologyNode {
        addr: named,
        state: info.get("role").unwrap_or_default(),
    };
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("min-replicas-to-write");
    let min_replicas_to_write = conn
        .call_at::<Vec<String>>(timeout, "", cmd)
        .await
        .ok()
        .and_then(|pair| pair.get(1)?.parse().ok());
    Ok(Topology::Sentinel {
        master_name: s.master_name.clone(),
        sentinels,
        known_sentinels,
        min_replicas_to_write,
        primary,
        replicas: replicas.unwrap_or_default(),
    })
}

/// One sentinel's view: the primary it names, how many other sentinels it
/// knows, and the replicas it knows.
async fn ask_sentinel(
    s: &SentinelTarget,
    addr: &str,
    timeout: Duration,
) -> Result<(String, usize, Vec<TopologyNode>), CallError> {
    let (host, port) = parse_host_port(addr, "sentinel")?;
    let conn_addr = if s.sentinel_tls {
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host, port)
    };
    let mut settings = RedisConnectionInfo::default();
    if let Some(user) = &s.sentinel_username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &s.sentinel_password {
        settings = settings.set_password(password);
    }
    let info = conn_addr
        .into_connection_info()?
        .set_redis_settings(settings);
    let client = redis::Client::open(info)?;
    let name = s.master_name.clone();
    let ask = async move {
        let mut c = client.get_multiplexed_async_connection().await?;
        let primary: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&name)
            .query_async(&mut c)
            .await?;
        let others: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg("SENTINELS")
            .arg(&name)
            .query_async(&mut c)
            .await?;
        let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&name)
            .query_async(&mut c)
            .await?;
        Ok::<_, redis::RedisError>((primary, others.len(), replicas))
    };
    let (primary, others, replicas) = tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| CallError::Timeout { after: timeout })??;
    let primary = primary
        .map(|(h, p)| format!("{h}:{p}"))
        .ok_or_else(|| CallError::Config(format!("knows no master named {:?}", s.master_name)))?;
    let replicas = replicas
        .into_iter()
        .map(|r| TopologyNode {
            addr: format!(
                "{}:{}",
                r.get("ip").map_or("?", String::as_str),
                r.get("port").map_or("?", String::as_str)
            ),
            state: r.get("flags").cloned().unwrap_or_default(),
        })
        .collect();
    Ok((primary, others, replicas))
}

/// `CLUSTER NODES`: a line per node, `id ip:port@bus flags master-id ping
/// pong epoch link slot..`; masters (with their slot ranges) and their
/// replicas, a failing node's flags kept beside its address.
fn parse_cluster_nodes(text: &str) -> Result<Vec<ClusterShard>, CallError> {
    let bad = |line: &str| {
        CallError::Config(format!(
            "CLUSTER NODES answered a line this can't read: {line:?}"
        ))
    };
    struct Node<'a> {
        id: &'a str,
        addr: String,
        flags: &'a str,
        master_id: &'a str,
        slots: Vec<(u16, u16)>,
    }
    let mut nodes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return Err(bad(line));
        }
        let addr = fields[1].split('@').next().unwrap_or(fields[1]);
        let flags = fields[2];
        let failing = flags.split(',').any(|f| f == "fail" || f == "fail?");
        let mut slots = Vec::new();
        for range in &fields[8..] {
            if range.starts_with('[') {
                continue; // a slot being migrated or imported
            }
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) else {
                return Err(bad(line));
            };
            slots.push((a, b));
        }
        nodes.push(Node {
            id: fields[0],
            addr: if failing {
                format!("{addr} (failing)")
            } else {
                addr.to_owned()
            },
            flags,
            master_id: fields[3],
            slots,
        });
    }
    let is = |n: &Node<'_>, flag: &str| n.flags.split(',').any(|f| f == flag);
    let mut shards: Vec<ClusterShard> = nodes
        .iter()
        .filter(|n| is(n, "master") && !n.slots.is_empty())
        .map(|m| ClusterShard {
            slots: m.slots.clone(),
            master: m.addr.clone(),
            replicas: nodes
                .iter()
                .filter(|r| is(r, "slave") && r.master_id == m.id)
                .map(|r| r.addr.clone())
                .collect(),
        })
        .collect();
    shards.sort_by_key(|s| s.slots.first().copied());
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_group_replicas_under_masters_and_warn_about_lone_masters() {
        let nodes = "\
a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-8191
b2 10.0.0.2:7001@17001 master - 0 0 2 connected 8192-16383
c3 10.0.0.3:7002@17002 slave a1 0 0 1 connected
d4 10.0.0.4:7003@17003 master,fail - 0 0 3 disconnected
";
        let shards = parse_cluster_nodes(nodes).unwrap();
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].master, "10.0.0.1:7000");
        assert_eq!(shards[0].slots, vec![(0, 8191)]);
        assert_eq!(shards[0].replicas, vec!["10.0.0.3:7002".to_owned()]);
        let topology = Topology::Cluster { shards };
        let warnings = topology.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("master 10.0.0.2:7001 has no replica"));
        assert!(topology.lines()[0].contains("2 master(s), 1 replica(s)"));
        let half = Topology::Cluster {
            shards: parse_cluster_nodes("a 1.1.1.1:1@2 master - 0 0 1 connected 0-99\n").unwrap(),
        };
        assert!(
            half.warnings()
                .iter()
                .any(|w| w.contains("only 100 of 16384"))
        );
        assert!(parse_cluster_nodes("garbage\n").is_err());
    }

    #[test]
    fn a_lone_server_and_few_sentinels_are_warned_about() {
        let lone = Topology::Single {
            primary: TopologyNode {
                addr: "h:1".into(),
                state: "master".into(),
            },
            replicas: vec![],
        };
        assert!(lone.warnings()[0].contains("single member"));
        let sentinel = Topology::Sentinel {
            master_name: "m".into(),
            sentinels: vec![
                ("s:1".into(), Ok("h:1".into())),
                ("s:2".into(), Ok("h:2".into())),
            ],
            known_sentinels: 2,
            min_replicas_to_write: Some(0),
            primary: TopologyNode {
                addr: "h:1".into(),
                state: "master".into(),
            },
            replicas: vec![TopologyNode {
                addr: "h:2".into(),
                state: "slave".into(),
            }],
        };
        let warnings = sentinel.warnings();
        assert!(
            warnings.iter().any(|w| w.contains("only 2 sentinel")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("s:2 names h:2")),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("min-replicas-to-write 0")),
            "{warnings:?}"
        );
        assert_eq!(warnings.len(), 3);
    }
}
