//! [`RedisTarget`]: where idmint's Redis is and how to reach it: one server
//! by URL, a primary found through Redis Sentinel, or a Redis Cluster. Each is
//! checked without connecting ([`RedisTarget::validate`]); bad input is a
//! [`CallError::Config`] naming what is wrong.

use std::fmt;

use crate::CallError;

/// Where the Redis is: one server, a Sentinel-managed primary, or a Cluster.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisTarget {
    /// One server, `redis://[user:password@]host:port/[db]` (`rediss://`
    /// for TLS).
    Url(String),
    /// The primary the sentinels name (followed through failovers).
    Sentinel(SentinelTarget),
    /// A Redis Cluster, found from any of its nodes.
    Cluster(ClusterTarget),
}

impl RedisTarget {
    /// Checks the target without connecting.
    ///
    /// # Errors
    /// [`CallError::Config`] naming the setting that can't work: an empty
    /// list, an address that is not `host:port`, an empty master name, a
    /// negative database; a target that asks for TLS ([`Self::tls_setting`])
    /// in a build without the `tls` feature.
    pub fn validate(&self) -> Result<(), CallError> {
        if let Some(setting) = self.tls_setting().filter(|_| !crate::TLS) {
            return Err(CallError::Config(format!(
                "redis {setting} asks for TLS, but this build has no Redis TLS (the `tls` feature of idmint-redis)"
            )));
        }
        match self {
            RedisTarget::Url(url) => redis::Client::open(url.as_str())
                .map(drop)
                .map_err(|e| CallError::Config(format!("invalid redis url: {e}"))),
            RedisTarget::Sentinel(s) => {
                if s.sentinels.is_empty() {
                    return Err(CallError::Config(
                        "redis sentinel: the list of sentinels is empty".to_owned(),
                    ));
                }
                for addr in &s.sentinels {
                    parse_host_port(addr, "sentinel")?;
                }
                if s.master_name.trim().is_empty() {
                    return Err(CallError::Config(
                        "redis sentinel: the master name is empty".to_owned(),
                    ));
                }
                if s.db < 0 {
                    return Err(CallError::Config(format!(
                        "redis sentinel: database {} is negative",
                        s.db
                    )));
                }
                Ok(())
            }
            RedisTarget::Cluster(c) => {
                if c.nodes.is_empty() {
                    return Err(CallError::Config(
                        "redis cluster: the list of nodes is empty".to_owned(),
                    ));
                }
                for addr in &c.nodes {
                    parse_host_port(addr, "cluster node")?;
                }
                Ok(())
            }
        }
    }

    /// The setting of this target that asks for TLS, if one does: `url` (a
    /// `rediss://` or `valkeys://` URL), `tls` (to the Sentinel's primary,
    /// or to the cluster's nodes) or `sentinel_tls` (to the sentinels).
    pub fn tls_setting(&self) -> Option<&'static str> {
        match self {
            RedisTarget::Url(url) => {
                let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
                (scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys"))
                    .then_some("url")
            }
            RedisTarget::Sentinel(s) if s.tls => Some("tls"),
            RedisTarget::Sentinel(s) if s.sentinel_tls => Some("sentinel_tls"),
            RedisTarget::Sentinel(_) => None,
            RedisTarget::Cluster(c) => c.tls.then_some("tls"),
        }
    }

    /// Whether this is a Redis Cluster, where every key of one idmint
    /// cluster must share one hash slot ([`check_single_slot`]).
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisTarget::Cluster(_))
    }

    /// What it is, without passwords, for logs and errors:
    /// `127.0.0.1:6379`, `sentinel master mymaster (a:26379,b:26379)`,
    /// `cluster (a:7000,b:7001)`.
    pub fn describe(&self) -> String {
        match self {
            RedisTarget::Url(url) => host_of(url),
            RedisTarget::Sentinel(s) => format!(
                "sentinel master {} ({})",
                s.master_name,
                s.sentinels.join(",")
            ),
            RedisTarget::Cluster(c) => format!("cluster ({})", c.nodes.join(",")),
        }
    }
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the URL or the passwords: they may carry secrets.
        f.write_str(&self.describe())
    }
}

/// A Redis primary found through Redis Sentinel (builder-lite:
/// [`SentinelTarget::new`] plus `with_*` setters).
///
/// The sentinels are asked which server is the primary of `master_name`;
/// that server is asked `ROLE` before it is used; and after a connection
/// error, a timeout or a `READONLY` answer (the primary was demoted) the
/// sentinels are asked again.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    pub(crate) sentinels: Vec<String>,
    pub(crate) master_name: String,
    pub(crate) sentinel_username: Option<String>,
    pub(crate) sentinel_password: Option<String>,
    pub(crate) sentinel_tls: bool,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) tls: bool,
    pub(crate) db: i64,
}

impl SentinelTarget {
    /// The sentinels (`host:port` each) and the master name they know the
    /// primary by; no auth, no TLS, database 0.
    pub fn new(sentinels: Vec<String>, master_name: impl Into<String>) -> Self {
        SentinelTarget {
            sentinels,
            master_name: master_name.into(),
            sentinel_username: None,
            sentinel_password: None,
            sentinel_tls: false,
            username: None,
            password: None,
            tls: false,
            db: 0,
        }
    }

    /// The user and password the sentinels ask for (`requirepass` /
    /// ACL of the sentinels themselves).
    #[must_use]
    pub fn with_sentinel_auth(
        mut self,
        username: Option<String>,
        password: Option<String>,
    ) -> Self {
        self.sentinel_username = username;
        self.sentinel_password = password;
        self
    }

    /// Talk TLS to the sentinels.
    #[must_use]
    pub fn with_sentinel_tls(mut self, tls: bool) -> Self {
        self.sentinel_tls = tls;
        self
    }

    /// The user and password of the primary (and its replicas).
    #[must_use]
    pub fn with_auth(mut self, username: Option<String>, password: Option<String>) -> Self {
        self.username = username;
        self.password = password;
        self
    }

    /// Talk TLS to the primary.
    #[must_use]
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// The database number on the primary.
    #[must_use]
    pub fn with_db(mut self, db: i64) -> Self {
        self.db = db;
        self
    }

    /// The sentinels, `host:port` each.
    pub fn sentinels(&self) -> &[String] {
        &self.sentinels
    }

    /// The master name.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// Whether TLS is used to the sentinels.
    pub fn sentinel_tls(&self) -> bool {
        self.sentinel_tls
    }
}

/// A Redis Cluster, found from any of `nodes` (builder-lite:
/// [`ClusterTarget::new`] plus `with_*` setters).
///
/// The `redis` crate's cluster client learns the slot map from the nodes,
/// follows `MOVED` and `ASK` redirections, and refreshes the map after a
/// failover.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterTarget {
    pub(crate) nodes: Vec<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) tls: bool,
}

impl ClusterTarget {
    /// Some of the cluster's nodes, `host:port` each; no auth, no TLS.
    pub fn new(nodes: Vec<String>) -> Self {
        ClusterTarget {
            nodes,
            username: None,
            password: None,
            tls: false,
        }
    }

    /// The user and password of every node.
    #[must_use]
    pub fn with_auth(mut self, username: Option<String>, password: Option<String>) -> Self {
        self.username = username;
        self.password = password;
        self
    }

    /// Talk TLS to the nodes.
    #[must_use]
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// The nodes given, `host:port` each.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
}

/// `host:port` split and checked.
pub(crate) fn parse_host_port(addr: &str, what: &str) -> Result<(String, u16), CallError> {
    let bad = |why: &str| {
        CallError::Config(format!(
            "redis {what} address {addr:?} {why}; write host:port"
        ))
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(char::is_whitespace) || host.contains('/') {
        return Err(bad("has no valid host"));
    }
    let port: u16 = port.parse().map_err(|_| bad("has no valid port"))?;
    if port == 0 {
        return Err(bad("has port 0"));
    }
    Ok((host.to_owned(), port))
}

/// The hash tag of a key, as Redis Cluster finds it: what lies between the
/// first `{` and the first `}` after it, when that is not empty.
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    let tag = &key[open + 1..open + 1 + close];
    (!tag.is_empty()).then_some(tag)
}

/// Checks that every key built as `prefix + anything` hashes to one slot:
/// `prefix` must hold a whole, non-empty hash tag (`idmint:{orders}:`), so
/// that what follows it never decides the slot. Each of idmint's Lua
/// scripts touches several keys under one prefix, and Redis Cluster runs a
/// script on one node only.
///
/// # Errors
/// [`CallError::Config`] naming the prefix and what to write instead.
pub fn check_single_slot(prefix: &str) -> Result<(), CallError> {
    if hash_tag(prefix).is_some() {
        return Ok(());
    }
    Err(CallError::Config(format!(
        "redis key prefix {prefix:?} has no hash tag: on a Redis Cluster its keys would spread \
         over many slots and idmint's scripts could not run; put the part that names the \
         cluster in braces, e.g. \"{}\"",
        suggest_tagged(prefix)
    )))
}

fn suggest_tagged(prefix: &str) -> String {
    let trimmed = prefix.trim_end_matches(':');
    let clean: String = trimmed.chars().filter(|c| *c != '{' && *c != '}').collect();
    if clean.is_empty() {
        "{idmint}:".to_owned()
    } else {
        format!("{{{clean}}}:")
    }
}

/// `host:port` of a Redis URL, without its password.
pub(crate) fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_target_is_refused_by_name_unless_the_build_has_tls() {
        let url = |u: &str| RedisTarget::Url(u.to_owned());
        let sentinel = SentinelTarget::new(vec!["a:26379".to_owned()], "m".to_owned());
        let cluster = ClusterTarget::new(vec!["a:7000".to_owned()]);
        let cases = [
            (url("rediss://h:6379/0"), Some("url")),
            (url("RedisS://h:6379/0"), Some("url")),
            (url("valkeys://h:6379/0"), Some("url")),
            (url("redis://h:6379/0"), None),
            (RedisTarget::Sentinel(sentinel.clone()), None),
            (
                RedisTarget::Sentinel(sentinel.clone().with_tls(true)),
                Some("tls"),
            ),
            (
                RedisTarget::Sentinel(sentinel.with_sentinel_tls(true)),
                Some("sentinel_tls"),
            ),
            (RedisTarget::Cluster(cluster.clone()), None),
            (RedisTarget::Cluster(cluster.with_tls(true)), Some("tls")),
        ];
        for (target, setting) in cases {
            assert_eq!(target.tls_setting(), setting, "{target:?}");
            match (setting, crate::TLS, target.validate()) {
                (None, _, Ok(())) | (Some(_), true, Ok(())) => {}
                (Some(setting), false, Err(CallError::Config(m)))
                    if m.contains(setting) && m.contains("no Redis TLS") => {}
                (_, _, other) => panic!("{target:?} (TLS built: {}): {other:?}", crate::TLS),
            }
        }
    }

    #[test]
    fn hash_tags_are_found_as_redis_finds_them() {
        assert_eq!(hash_tag("idmint:{orders}:worker:1"), Some("orders"));
        assert_eq!(hash_tag("idmint:{}:x"), None);
        assert_eq!(hash_tag("idmint:{a"), None);
        assert_eq!(hash_tag("a}{b}"), Some("b"));
        assert!(check_single_slot("idmint:{default}:").is_ok());
        let err = check_single_slot("idmint:").unwrap_err().to_string();
        assert!(
            err.contains("\"idmint:\"") && err.contains("{idmint}:"),
            "{err}"
        );
        assert!(check_single_slot("idmint:{x").is_err());
    }

    #[test]
    fn bad_targets_are_refused_naming_what_is_wrong() {
        let no_port = RedisTarget::Sentinel(SentinelTarget::new(vec!["a".into()], "m"));
        assert!(
            no_port
                .validate()
                .unwrap_err()
                .to_string()
                .contains("\"a\" has no port")
        );
        let empty = RedisTarget::Sentinel(SentinelTarget::new(vec![], "m"));
        assert!(empty.validate().unwrap_err().to_string().contains("empty"));
        let no_name = RedisTarget::Sentinel(SentinelTarget::new(vec!["a:1".into()], " "));
        assert!(
            no_name
                .validate()
                .unwrap_err()
                .to_string()
                .contains("master name")
        );
        let neg = RedisTarget::Sentinel(SentinelTarget::new(vec!["a:1".into()], "m").with_db(-1));
        assert!(neg.validate().unwrap_err().to_string().contains("negative"));
        let port0 = RedisTarget::Cluster(ClusterTarget::new(vec!["h:0".into()]));
        assert!(port0.validate().unwrap_err().to_string().contains("port 0"));
        let nodes = RedisTarget::Cluster(ClusterTarget::new(vec![]));
        assert!(nodes.validate().is_err());
        let ok = RedisTarget::Cluster(ClusterTarget::new(vec![
            "[::1]:7000".into(),
            "h:7001".into(),
        ]));
        ok.validate().unwrap();
        assert_eq!(ok.describe(), "cluster ([::1]:7000,h:7001)");
        let secret = RedisTarget::Url("redis://:pw@h:1/0".into());
        assert!(!format!("{secret:?}").contains("pw"));
    }
}
