//! What the coordinators a config names say about keeping what they are
//! told: `idmint config check` asks, and warns where a restart or failover
//! can lose leases, marks or counters (docs/design.md, "When the coordinator
//! forgets"). Read-only, and bounded: a server that doesn't answer within
//! the bound is reported as such, never waited for.

use std::time::Duration;

use idmint_redis::{RedisConnection, RedisTarget, ServerFacts, Topology};

use idmint_node::config::{Config, RegistryKind};
use idmint_node::open::redis_registry_config;

/// How long each server gets to answer.
const BOUND: Duration = Duration::from_secs(2);

/// One warning about one coordinator: what it is and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurabilityWarning {
    /// What the config uses it for (`the worker registry`, ...), and its address.
    pub what: String,
    /// What is wrong, and what idmint does about it.
    pub message: String,
}

impl std::fmt::Display for DurabilityWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.message)
    }
}

/// What one Redis the config uses looks like ([`redis_topologies`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyReport {
    /// What the config uses it for, and where it is (no passwords).
    pub what: String,
    /// The topology found, a line each; empty when it could not be read.
    pub lines: Vec<String>,
    /// Where one lost member stops it, or why it could not be read.
    pub warnings: Vec<String>,
}

/// One Redis the config uses: what for, where, and a key of the slot its
/// data lives in (on a Redis Cluster, `INFO` is asked of that slot's master).
struct RedisUse {
    uses: String,
    target: RedisTarget,
    slot_key: String,
}

/// Every Redis the config uses (the worker registry and the oracle's
/// election, the segment store), one entry per distinct target.
fn redis_uses(config: &Config) -> Vec<RedisUse> {
    let mut out: Vec<RedisUse> = Vec::new();
    if config.snowflake.registry == RegistryKind::Redis {
        let uses = if config.has_monotonic_keys() {
            "the worker registry and the oracle's election"
        } else {
            "the worker registry"
        };
        out.push(RedisUse {
            uses: uses.to_owned(),
            target: config.snowflake.redis.target(),
            slot_key: format!("{}epoch", redis_registry_config(config).prefix()),
        });
    }
    if let Some(target) = config.segment_redis_target() {
        match out.iter_mut().find(|u| u.target == target) {
            Some(u) => u.uses.push_str(" and the segment store"),
            None => out.push(RedisUse {
                uses: "the segment store".to_owned(),
                target,
                slot_key: format!("{}segments", config.segment_redis_prefix()),
            }),
        }
    }
    out
}

/// Asks every Redis the config uses (the worker registry, the oracle's
/// election, the segment store) about its persistence, and returns a
/// warning for each that can forget, or that could not be asked.
pub async fn coordinator_warnings(config: &Config) -> Vec<DurabilityWarning> {
    let mut warnings = Vec::new();
    for RedisUse {
        uses,
        target,
        slot_key,
    } in redis_uses(config)
    {
        let addr = target.describe();
        let message = match RedisConnection::open(&target, BOUND).await {
            Err(e) => Some(format!(
                "could not ask it about its persistence ({e}); run Redis with \
                 appendonly yes and appendfsync always, or idmint holds claims and \
                 refuses counters after every restart"
            )),
            Ok(conn) => match ServerFacts::read(&conn, &slot_key, BOUND).await {
                Err(e) => Some(format!("INFO failed: {e}")),
                Ok(mut facts) => {
                    facts.read_config(&conn, &slot_key, BOUND).await;
                    facts.persistence_warning().map(|w| advice(&w))
                }
            },
        };
        if let Some(message) = message {
            warnings.push(DurabilityWarning {
                what: format!("redis at {addr} ({uses})"),
                message,
            });
        }
    }
    warnings
}

/// Reads the topology of every Redis the config uses: the primary and its
/// replicas, the sentinels and the primary each names, or the cluster's
/// slots, masters and replicas; with a warning wherever one lost member
/// stops it (a single member, fewer than 3 sentinels, a master without a
/// replica). Read-only, each request bounded.
pub async fn redis_topologies(config: &Config) -> Vec<TopologyReport> {
    let mut reports = Vec::new();
    for RedisUse { uses, target, .. } in redis_uses(config) {
        let what = format!("redis at {} ({uses})", target.describe());
        let report = match RedisConnection::open(&target, BOUND).await {
            Err(e) => TopologyReport {
                what,
                lines: Vec::new(),
                warnings: vec![format!("could not read its topology: {e}")],
            },
            Ok(conn) => match Topology::read(&conn, BOUND).await {
                Err(e) => TopologyReport {
                    what,
                    lines: Vec::new(),
                    warnings: vec![format!("could not read its topology: {e}")],
                },
                Ok(topology) => TopologyReport {
                    what,
                    lines: topology.lines(),
                    warnings: topology.warnings(),
                },
            },
        };
        reports.push(report);
    }
    reports
}

/// Reads the etcd cluster or ZooKeeper ensemble the worker registry names:
/// each member and which leads, with a warning wherever one lost member
/// stops it (a single member or a standalone server, members the config
/// doesn't list, no leader). Nothing for other registries. Read-only, each
/// request bounded.
pub async fn cluster_topologies(config: &Config) -> Vec<TopologyReport> {
    let sf = &config.snowflake;
    match sf.registry {
        RegistryKind::Etcd => {
            let topology =
                idmint_registry::etcd::topology::read_topology(&sf.etcd.endpoints, BOUND).await;
            vec![TopologyReport {
                what: format!(
                    "etcd at {} (the worker registry)",
                    sf.etcd.endpoints.join(",")
                ),
                lines: topology.lines(),
                warnings: topology.warnings(),
            }]
        }
        RegistryKind::Zookeeper => {
            let topology =
                idmint_registry::zookeeper::topology::read_topology(&sf.zookeeper.connect, BOUND)
                    .await;
            vec![TopologyReport {
                what: format!(
                    "zookeeper at {} (the worker registry)",
                    sf.zookeeper.connect
                ),
                lines: topology.lines(),
                warnings: topology.warnings(),
            }]
        }
        _ => Vec::new(),
    }
}

fn advice(warning: &str) -> String {
    format!(
        "{warning}. A restart or failover can lose what idmint stored: the worker \
         registry then holds every claim for the lease TTL plus the mark window, and the \
         segment store refuses keys it can't prove it never handed out. Set appendonly \
         yes and appendfsync always (and maxmemory-policy noeviction) to avoid both"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_never_show_passwords() {
        let target = RedisTarget::Url("redis://:secret@10.0.0.1:6379/0".to_owned());
        assert_eq!(target.describe(), "10.0.0.1:6379");
    }
}
