//! The SQL servers a config names, as `idmint config check` reports them:
//! each host of `snowflake.sql.url` (when the `sql` registry is used) and of
//! a PostgreSQL or MySQL/MariaDB `segment.url`, with its role (primary,
//! standby, unreachable), and warnings where the topology can't survive a
//! failover or is not what idmint needs. Read-only and bounded: each host
//! gets [`BOUND`] to answer, on a connection of its own
//! (`idmint_sql::survey`); SQLite URLs have no hosts and are skipped.

use std::fmt;
use std::time::Duration;

use idmint_sql::{ConnectOptions, HostReport, HostRole, Replication};

use idmint_node::config::{Config, RegistryKind};

/// How long each host gets to answer.
const BOUND: Duration = Duration::from_secs(2);

/// The hosts of one database URL of the config, and what each is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlTopology {
    /// The setting (`snowflake.sql.url`, `segment.url`).
    pub setting: &'static str,
    /// What the config uses the database for (`the worker registry`, ...).
    pub uses: String,
    /// Each host in the URL's order, with its role; empty when the URL could
    /// not be read (see [`SqlTopology::error`]).
    pub hosts: Vec<HostReport>,
    /// Why the hosts could not be asked (a URL the checks let through but the
    /// driver refuses).
    pub error: Option<String>,
}

impl SqlTopology {
    /// One line per host: `setting (uses): host is role`.
    pub fn lines(&self) -> Vec<String> {
        self.hosts
            .iter()
            .map(|h| {
                let replicas = h.replication.map(describe).unwrap_or_default();
                format!(
                    "{} ({}): {} is {}{replicas}",
                    self.setting, self.uses, h.host, h.role
                )
            })
            .collect()
    }

    /// What is wrong with the topology, for a failover or at all: one host
    /// (a failover needs the standbys listed, or a proxy), no writable host,
    /// more than one writable host.
    pub fn warnings(&self) -> Vec<String> {
        let setting = self.setting;
        if let Some(error) = &self.error {
            return vec![format!("{setting}: could not ask its hosts: {error}")];
        }
        let mut warnings = Vec::new();
        if let [only] = self.hosts.as_slice() {
            warnings.push(format!(
                "{setting} names one database host ({}): a failover to a standby or replica \
                 needs it listed too (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write, \
                 mysql://h1:3306,h2:3306/db) or a proxy that follows the primary; see \
                 docs/operating.md, \"PostgreSQL and MySQL/MariaDB in production\"",
                only.host
            ));
        }
        let primaries: Vec<&str> = self
            .hosts
            .iter()
            .filter(|h| h.role == HostRole::Primary)
            .map(|h| h.host.as_str())
            .collect();
        match primaries.as_slice() {
            [] => warnings.push(format!(
                "no host of {setting} takes writes now (each is a standby or unreachable): \
                 idmint waits for a primary at start"
            )),
            [_] => {}
            several => warnings.push(format!(
                "{} hosts of {setting} take writes ({}): idmint writes to the first in the \
                 list; a second primary is an old one that was not fenced, stop it or make it \
                 a standby",
                several.len(),
                several.join(", ")
            )),
        }
        // A segment is a range of IDs committed once: a standby promoted
        // without the last commits hands them out again, and no hold can
        // help (the worker registry's marks are times, which a hold waits
        // past). So the segment store needs every standby a failover can
        // promote to be synchronous.
        if self.uses.contains("segment store") {
            for host in &self.hosts {
                if let Some(r) = host.replication.filter(|r| r.asynchronous > 0) {
                    warnings.push(format!(
                        "{setting}: the primary {} replicates to {} standby(s) \
                         asynchronously: a failover to one can lose the last segments leased \
                         and hand their IDs out again; make every standby a failover may \
                         promote synchronous (PostgreSQL synchronous_standby_names with \
                         synchronous_commit = on, MariaDB semi-synchronous replication); see \
                         docs/operating.md, \"PostgreSQL and MySQL/MariaDB in production\"",
                        host.host, r.asynchronous
                    ));
                }
            }
        }
        warnings
    }
}

/// `" (1 synchronous, 2 asynchronous standbys)"`, or nothing without any.
fn describe(r: Replication) -> String {
    let parts: Vec<String> = [
        (r.synchronous, "synchronous"),
        (r.asynchronous, "asynchronous"),
        (r.unknown, "of unknown state"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        let total = r.synchronous + r.asynchronous + r.unknown;
        let noun = if total == 1 { "standby" } else { "standbys" };
        format!(" ({} {noun})", parts.join(", "))
    }
}

impl fmt::Display for SqlTopology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

/// Asks every host of every PostgreSQL or MySQL/MariaDB URL the config uses
/// what it is (a URL used twice is asked once).
pub async fn sql_topology(config: &Config) -> Vec<SqlTopology> {
    let mut urls: Vec<(&'static str, String, &str)> = Vec::new();
    if config.snowflake.registry == RegistryKind::Sql
        && let Some(url) = &config.snowflake.sql.url
    {
        urls.push((
            "snowflake.sql.url",
            "the worker registry".to_owned(),
            url.expose(),
        ));
    }
    if let Some(url) = &config.segment.url {
        let url = url.expose();
        match urls.iter_mut().find(|(_, _, u)| *u == url) {
            Some((_, uses, _)) => uses.push_str(" and the segment store"),
            None => urls.push(("segment.url", "the segment store".to_owned(), url)),
        }
    }
    let mut out = Vec::new();
    for (setting, uses, url) in urls {
        // SQLite and Redis URLs have no SQL hosts to ask.
        if !matches!(
            idmint_sql::Dialect::from_url(url),
            Ok(idmint_sql::Dialect::Postgres | idmint_sql::Dialect::MySql)
        ) {
            continue;
        }
        let options = ConnectOptions::new(url.to_owned()).with_connect_timeout(BOUND);
        let (hosts, error) = match idmint_sql::survey(&options).await {
            Ok(hosts) => (hosts, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        out.push(SqlTopology {
            setting,
            uses,
            hosts,
            error,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(roles: &[HostRole]) -> SqlTopology {
        SqlTopology {
            setting: "segment.url",
            uses: "the segment store".to_owned(),
            hosts: roles
                .iter()
                .enumerate()
                .map(|(i, role)| HostReport {
                    host: format!("db{i}:5432"),
                    role: role.clone(),
                    replication: None,
                })
                .collect(),
            error: None,
        }
    }

    #[test]
    fn warns_about_one_host_no_primary_and_two_primaries() {
        let down = HostRole::Unreachable {
            reason: "refused".to_owned(),
        };
        assert!(
            topology(&[HostRole::Primary, HostRole::Standby])
                .warnings()
                .is_empty()
        );
        let one = topology(&[HostRole::Primary]).warnings();
        assert_eq!(one.len(), 1, "{one:?}");
        assert!(
            one[0].contains("names one database host (db0:5432)"),
            "{one:?}"
        );
        let none = topology(&[HostRole::Standby, down.clone()]).warnings();
        assert!(
            none[0].contains("no host of segment.url takes writes"),
            "{none:?}"
        );
        let two = topology(&[HostRole::Primary, down, HostRole::Primary]).warnings();
        assert!(
            two[0].contains("2 hosts of segment.url take writes (db0:5432, db2:5432)"),
            "{two:?}"
        );
        assert_eq!(
            topology(&[HostRole::Primary, HostRole::Standby]).lines(),
            [
                "segment.url (the segment store): db0:5432 is primary",
                "segment.url (the segment store): db1:5432 is standby (read-only)"
            ]
        );
    }

    #[test]
    fn a_segment_store_with_an_asynchronous_standby_is_warned_about() {
        let mut t = topology(&[HostRole::Primary, HostRole::Standby]);
        t.hosts[0].replication = Some(Replication {
            synchronous: 1,
            asynchronous: 2,
            unknown: 0,
        });
        assert_eq!(
            t.lines()[0],
            "segment.url (the segment store): db0:5432 is primary (1 synchronous, 2 asynchronous \
             standbys)"
        );
        let warnings = t.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("db0:5432 replicates to 2 standby(s) asynchronously"),
            "{warnings:?}"
        );
        // The registry alone: its marks are times, and a hold covers a
        // promotion that lost some.
        t.uses = "the worker registry".to_owned();
        assert!(t.warnings().is_empty());
        t.uses = "the segment store".to_owned();
        t.hosts[0].replication = Some(Replication {
            synchronous: 2,
            ..Replication::default()
        });
        assert!(t.warnings().is_empty());
        assert_eq!(
            t.lines()[0],
            "segment.url (the segment store): db0:5432 is primary (2 synchronous standbys)"
        );
    }
}
