//! What the coordinators a config names say about keeping what they are
//! told: `idmint config check` asks, and warns where a restart or failover
//! can lose leases, marks or counters (docs/design.md, "When the coordinator
//! forgets"). Read-only, and bounded: a server that doesn't answer within
//! the bound is reported as such, never waited for.

use std::time::Duration;

use idmint_redis::{RedisConnection, ServerFacts};

use crate::config::{Config, RegistryKind};

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

/// Asks every Redis the config uses (the worker registry, the oracle's
/// election, the segment store) about its persistence, and returns a
/// warning for each that can forget, or that could not be asked.
pub async fn coordinator_warnings(config: &Config) -> Vec<DurabilityWarning> {
    let mut servers: Vec<(String, String)> = Vec::new();
    if config.snowflake.registry == RegistryKind::Redis {
        let uses = if config.has_monotonic_keys() {
            "the worker registry and the oracle's election"
        } else {
            "the worker registry"
        };
        servers.push((
            uses.to_owned(),
            config.snowflake.redis.url.expose().to_owned(),
        ));
    }
    if let Some(url) = &config.segment.url {
        let url = url.expose();
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            match servers.iter_mut().find(|(_, u)| u == url) {
                Some((uses, _)) => uses.push_str(" and the segment store"),
                None => servers.push(("the segment store".to_owned(), url.to_owned())),
            }
        }
    }
    let mut warnings = Vec::new();
    for (uses, url) in servers {
        let (addr, message) = match RedisConnection::connect(&url, BOUND).await {
            Err(e) => (
                host_of(&url),
                Some(format!(
                    "could not ask it about its persistence ({e}); run Redis with \
                     appendonly yes and appendfsync always, or idmint holds claims and \
                     refuses counters after every restart"
                )),
            ),
            Ok(conn) => {
                let addr = conn.addr().to_owned();
                match ServerFacts::read(&conn, BOUND).await {
                    Err(e) => (addr, Some(format!("INFO failed: {e}"))),
                    Ok(mut facts) => {
                        facts.read_config(&conn, BOUND).await;
                        (addr, facts.persistence_warning().map(|w| advice(&w)))
                    }
                }
            }
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

fn advice(warning: &str) -> String {
    format!(
        "{warning}. A restart or failover can lose what idmint stored: the worker \
         registry then holds every claim for the lease TTL plus the mark window, and the \
         segment store refuses keys it can't prove it never handed out. Set appendonly \
         yes and appendfsync always (and maxmemory-policy noeviction) to avoid both"
    )
}

/// `host:port` of a Redis URL, without its password.
fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_never_show_passwords() {
        assert_eq!(host_of("redis://:secret@10.0.0.1:6379/0"), "10.0.0.1:6379");
        assert_eq!(host_of("redis://127.0.0.1:6380"), "127.0.0.1:6380");
    }
}
