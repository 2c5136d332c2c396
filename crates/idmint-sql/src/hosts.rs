//! Database URLs that name several hosts: libpq's multi-host form for
//! PostgreSQL, `postgres://h1:5432,h2:5432/db?target_session_attrs=read-write`,
//! and the same host list for MySQL/MariaDB, `mysql://h1:3306,h2:3306/db`.
//!
//! Parsed here rather than by sqlx because sqlx 0.8's `PgConnectOptions` and
//! `MySqlConnectOptions` hold one host each, and their URL parsers fail on (or,
//! worse, misread) a comma in the authority. So the host list is taken out of
//! the URL here, sqlx parses what is left (user, password, database, TLS and
//! the other parameters, percent-decoding included) as a one-host URL, and
//! each host of the list gets a copy of those options with its own host and
//! port ([`HostUrl::first_host_url`] and [`HostUrl::hosts`]). Nothing of the
//! user's URL is rewritten for sqlx beyond dropping the other hosts and the
//! one parameter idmint consumes itself, `target_session_attrs`.
//!
//! # Which `target_session_attrs` are accepted
//! idmint writes on every connection (claims, marks, segments), so it needs
//! the writable server of the list:
//! - `read-write` (libpq: the session is not read-only) and `primary` (libpq:
//!   the server is not in recovery) are accepted, and idmint checks both
//!   either way: a primary with `default_transaction_read_only = on` can't
//!   take idmint's writes any more than a standby can;
//! - `any`, `read-only`, `standby` and `prefer-standby` are refused with
//!   [`Error::InvalidUrl`]: each would let idmint settle on a server that
//!   refuses its writes;
//! - with no `target_session_attrs`, a URL with several hosts is read as
//!   `read-write` (libpq's own default, `any`, would settle on a standby
//!   listed first), and a one-host URL is passed to sqlx untouched.
//!
//! MySQL and MariaDB have no such parameter: a list of hosts always means
//! "the one with `@@read_only = 0` and `@@innodb_read_only = 0`".

use std::fmt;

use crate::dialect::Dialect;
use crate::error::{Error, Result};

/// The libpq parameter naming which server of a list to settle on.
const TARGET_SESSION_ATTRS: &str = "target_session_attrs";

/// One host of a URL's host list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    /// The host name or address (an IPv6 address without its brackets).
    pub(crate) name: String,
    /// The port (the dialect's default when the URL gives none).
    pub(crate) port: u16,
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.contains(':') {
            write!(f, "[{}]:{}", self.name, self.port)
        } else {
            write!(f, "{}:{}", self.name, self.port)
        }
    }
}

/// A PostgreSQL or MySQL/MariaDB URL, its host list taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostUrl {
    /// The hosts, in the URL's order (at least one).
    pub(crate) hosts: Vec<Host>,
    /// The URL with only the first host and without `target_session_attrs`:
    /// what sqlx parses for everything but the host.
    pub(crate) first_host_url: String,
    /// Whether each connection must be checked to be writable: several
    /// hosts, or a `target_session_attrs` that asks for it.
    pub(crate) needs_writable: bool,
}

impl HostUrl {
    /// Takes `url` apart; `dialect` is PostgreSQL or MySQL (SQLite URLs have no
    /// hosts and never come here).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`], naming what is wrong: an empty host in the list,
    /// a port that is not a number from 1 to 65535, an unclosed `[` of an
    /// IPv6 address, a `target_session_attrs` other than `read-write` or
    /// `primary` (or on MySQL, which has none), or the parameter given twice.
    pub(crate) fn parse(url: &str, dialect: Dialect) -> Result<HostUrl> {
        let bad = |reason: String| Error::InvalidUrl {
            url: crate::redact::redact_url(url),
            reason,
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("no \"://\" after the scheme".to_owned()))?;
        // The authority ends at the first '/', '?' or '#' after the userinfo;
        // a password may hold any of them percent-encoded only, as in every URL.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, host_list) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let default_port = match dialect {
            Dialect::Postgres => 5432,
            _ => 3306,
        };
        let hosts = host_list
            .split(',')
            .enumerate()
            .map(|(i, text)| {
                parse_host(text, default_port)
                    .map_err(|why| bad(format!("host {} of the list ({text:?}): {why}", i + 1)))
            })
            .collect::<Result<Vec<Host>>>()?;

        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (tail, None),
        };
        let mut session = None;
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if key.eq_ignore_ascii_case(TARGET_SESSION_ATTRS) {
                if dialect != Dialect::Postgres {
                    return Err(bad(format!(
                        "{TARGET_SESSION_ATTRS} is a PostgreSQL parameter; a MySQL/MariaDB \
                         host list always settles on the writable host"
                    )));
                }
                if session.is_some() {
                    return Err(bad(format!("{TARGET_SESSION_ATTRS} is given twice")));
                }
                session = Some(parse_session_attrs(value).map_err(bad)?);
            } else if !pair.is_empty() {
                kept.push(pair);
            }
        }

        let mut first_host_url = format!("{scheme}://");
        if let Some(userinfo) = userinfo {
            first_host_url.push_str(userinfo);
            first_host_url.push('@');
        }
        first_host_url.push_str(&hosts[0].to_string());
        first_host_url.push_str(path);
        if !kept.is_empty() {
            first_host_url.push('?');
            first_host_url.push_str(&kept.join("&"));
        }
        let needs_writable = hosts.len() > 1 || session.is_some();
        Ok(HostUrl {
            hosts,
            first_host_url,
            needs_writable,
        })
    }
}

/// The host list of a PostgreSQL or MySQL/MariaDB URL, as `host:port`
/// strings in the URL's order (a SQLite URL has none: an empty list). For
/// reports that must not connect, such as `idmint config check --offline`.
///
/// # Errors
/// [`Error::InvalidUrl`] as [`crate::Database::connect`] reports it, without
/// connecting.
///
/// # Examples
/// ```
/// let hosts = idmint_sql::url_hosts(
///     "postgres://app:pw@db1,db2:5433/ids?target_session_attrs=read-write",
/// )?;
/// assert_eq!(hosts, ["db1:5432", "db2:5433"]);
/// assert!(idmint_sql::url_hosts("postgres://db1,db2/ids?target_session_attrs=any").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn url_hosts(url: &str) -> Result<Vec<String>> {
    match Dialect::from_url(url)? {
        Dialect::Sqlite => Ok(Vec::new()),
        dialect => Ok(HostUrl::parse(url, dialect)?
            .hosts
            .iter()
            .map(Host::to_string)
            .collect()),
    }
}

fn parse_host(text: &str, default_port: u16) -> std::result::Result<Host, String> {
    if text.is_empty() {
        return Err("empty host".to_owned());
    }
    let (name, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (address, after) = bracketed
            .split_once(']')
            .ok_or_else(|| "an IPv6 address whose '[' is not closed".to_owned())?;
        match after {
            "" => (address, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (address, Some(port)),
                None => return Err(format!("{after:?} after the IPv6 address")),
            },
        }
    } else {
        match text.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        }
    };
    if name.is_empty() {
        return Err("empty host name".to_owned());
    }
    let port = match port {
        None => default_port,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("port {port:?} is not a number from 1 to 65535")),
        },
    };
    Ok(Host {
        name: name.to_owned(),
        port,
    })
}

fn parse_session_attrs(value: &str) -> std::result::Result<(), String> {
    match value {
        "read-write" | "primary" => Ok(()),
        "any" | "read-only" | "standby" | "prefer-standby" => Err(format!(
            "{TARGET_SESSION_ATTRS}={value} could settle on a server that refuses writes; \
             idmint writes, so use read-write or primary"
        )),
        _ => Err(format!(
            "{TARGET_SESSION_ATTRS}={value:?} is not a libpq value; idmint accepts read-write \
             or primary"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(url: &str) -> Result<HostUrl> {
        HostUrl::parse(url, Dialect::Postgres)
    }

    fn names(parsed: &HostUrl) -> Vec<String> {
        parsed.hosts.iter().map(Host::to_string).collect()
    }

    #[test]
    fn libpq_multi_host_urls() {
        let u = pg("postgres://app:s3cret@h1:5432,h2:6543/ids?target_session_attrs=read-write&sslmode=disable").unwrap();
        assert_eq!(names(&u), ["h1:5432", "h2:6543"]);
        assert_eq!(
            u.first_host_url,
            "postgres://app:s3cret@h1:5432/ids?sslmode=disable"
        );
        assert!(u.needs_writable);

        let u = pg("postgresql://h1,h2/ids").unwrap();
        assert_eq!(names(&u), ["h1:5432", "h2:5432"]);
        assert_eq!(u.first_host_url, "postgresql://h1:5432/ids");
        assert!(u.needs_writable, "several hosts are read as read-write");

        let u =
            pg("postgres://[::1]:5433,[fe80::2],127.0.0.1/x?target_session_attrs=primary").unwrap();
        assert_eq!(
            names(&u),
            ["[::1]:5433", "[fe80::2]:5432", "127.0.0.1:5432"]
        );
        assert_eq!(u.hosts[0].name, "::1");
        assert_eq!(u.first_host_url, "postgres://[::1]:5433/x");
    }

    #[test]
    fn one_host_needs_no_check_unless_asked() {
        let u = pg("postgres://u@db:5432/ids").unwrap();
        assert!(!u.needs_writable);
        let u = pg("postgres://u@db/ids?target_session_attrs=read-write").unwrap();
        assert!(u.needs_writable);
        assert_eq!(u.first_host_url, "postgres://u@db:5432/ids");
    }

    #[test]
    fn mysql_host_lists() {
        let u = HostUrl::parse(
            "mysql://root:pw@a:3306,b:3307/ids?ssl-mode=disabled",
            Dialect::MySql,
        )
        .unwrap();
        assert_eq!(names(&u), ["a:3306", "b:3307"]);
        assert_eq!(
            u.first_host_url,
            "mysql://root:pw@a:3306/ids?ssl-mode=disabled"
        );
        assert!(u.needs_writable);
        let u = HostUrl::parse("mariadb://a,b/ids", Dialect::MySql).unwrap();
        assert_eq!(names(&u), ["a:3306", "b:3306"]);
    }

    #[test]
    fn bad_input_is_named_and_the_password_hidden() {
        for (url, names_it) in [
            (
                "postgres://u:pw@h1,,h2/db",
                "host 2 of the list (\"\"): empty host",
            ),
            ("postgres://u:pw@h1,/db", "host 2 of the list"),
            ("postgres://u:pw@h1:0/db", "port \"0\" is not a number"),
            (
                "postgres://u:pw@h1,h2:99999/db",
                "host 2 of the list (\"h2:99999\")",
            ),
            ("postgres://u:pw@h1,h2:x/db", "port \"x\""),
            ("postgres://u:pw@[::1/db", "'[' is not closed"),
            ("postgres://u:pw@[::1]x/db", "\"x\" after the IPv6 address"),
            ("postgres://u:pw@:5432/db", "empty host name"),
            (
                "postgres://u:pw@h1,h2/db?target_session_attrs=any",
                "target_session_attrs=any could settle",
            ),
            (
                "postgres://u:pw@h1,h2/db?target_session_attrs=standby",
                "use read-write or primary",
            ),
            (
                "postgres://u:pw@h1/db?target_session_attrs=prefer-standby",
                "use read-write or primary",
            ),
            (
                "postgres://u:pw@h1/db?target_session_attrs=read-only",
                "use read-write or primary",
            ),
            (
                "postgres://u:pw@h1/db?target_session_attrs=rw",
                "\"rw\" is not a libpq value",
            ),
            (
                "postgres://u:pw@h1/db?target_session_attrs=primary&target_session_attrs=primary",
                "given twice",
            ),
            ("postgres:u:pw@h1/db", "no \"://\""),
        ] {
            let err = pg(url).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::InvalidUrl { .. }), "{url}: {text}");
            assert!(text.contains(names_it), "{url}: {text}");
            assert!(!text.contains(":pw@"), "{url}: {text}");
        }
        let err = HostUrl::parse(
            "mysql://a,b/db?target_session_attrs=read-write",
            Dialect::MySql,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("is a PostgreSQL parameter"),
            "{err}"
        );
    }

    #[test]
    fn url_hosts_reports_without_connecting() {
        assert_eq!(url_hosts("mysql://a:1,b:2/x").unwrap(), ["a:1", "b:2"]);
        assert_eq!(url_hosts("postgres://only/x").unwrap(), ["only:5432"]);
        assert!(url_hosts("sqlite://x.db").unwrap().is_empty());
        assert!(url_hosts("redis://x").is_err());
    }
}
