//! The config written back out as TOML (`idmint config check`, `idmint
//! config default`), in the spelling the loader reads, with every secret
//! hidden.
//!
//! # Secrets never serialize
//! [`Secret`]'s `Serialize` writes [`REDACTED`], never its text, so no path
//! through serde (TOML, JSON, a debug dump) can print an admin token, a key
//! token or an obfuscation key, and a secret field added later is hidden
//! without anyone remembering to. URL fields (the SQL, Redis and segment
//! store URLs, etcd endpoints) opt into showing the URL with only its
//! password hidden (`idmint_sql::redact_url`, the form the server logs), as
//! the host and database are what a reader checks.
//!
//! # Round trip
//! Every value is written as the loader reads it: durations in jiff's
//! friendly form (`"10s"`, `"5ms"`), snowflake policies as `NAME:ARGUMENT`.
//! So the defaults printed by `idmint config default` load back to
//! [`Config::default`]; printed secrets do not (they are [`REDACTED`]).

use std::fmt;
use std::time::Duration;

use idmint_core::duration::format_duration;
use serde::ser::Error as _;
use serde::{Serialize, Serializer};

use super::{Config, ConfigError, Secret};

/// What a hidden secret, or the password inside a URL, is shown as (the
/// marker the server's logs use for URL passwords too).
pub const REDACTED: &str = "***";

impl Serialize for Secret {
    /// Always [`REDACTED`]: see the module docs.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl Config {
    /// The config as TOML, every key that has a value, in the loader's
    /// spelling; secrets hidden (tokens and keys as [`REDACTED`], URL
    /// passwords replaced by it). Keys without a value (an unset
    /// `server.admin_token`) are left out.
    ///
    /// # Errors
    /// [`ConfigError::Show`] when a value has no TOML spelling (a snowflake
    /// policy newer than this config knows).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string_pretty(self).map_err(|e| ConfigError::Show {
            message: e.to_string(),
        })
    }
}

/// `url` with its password hidden; wholly hidden when it is not a URL at
/// all (`user:pass@host` without a scheme would otherwise show as is).
fn redacted_url(url: &str) -> String {
    if url.contains("://") {
        idmint_sql::redact_url(url)
    } else {
        REDACTED.to_owned()
    }
}

pub(super) fn url<S: Serializer>(url: &Secret, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redacted_url(url.expose()))
}

pub(super) fn optional_url<S: Serializer>(
    url: &Option<Secret>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_some(&redacted_url(url.expose())),
        None => serializer.serialize_none(),
    }
}

pub(super) fn urls<S: Serializer>(urls: &[String], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(urls.iter().map(|u| redacted_url(u)))
}

/// A duration as the loader reads it: jiff's friendly form (`"1m 30s"`,
/// `"5ms"`), written by the core's [`format_duration`].
pub(super) fn duration<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_duration(*d).map_err(S::Error::custom)?)
}

/// A value in its text form ([`fmt::Display`]), which the core defines next to
/// the type to read back with `FromStr` (the snowflake policies).
pub(super) fn text<S: Serializer, T: fmt::Display>(
    value: &T,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_core::{ClockBehind, SequenceExhausted, SequenceStart};

    #[test]
    fn secrets_and_url_passwords_do_not_serialize() {
        let mut config = Config::default();
        config.server.admin_token = Some(Secret::new("hunter2"));
        config.obfuscation.key = Some(Secret::new("2b7e151628aed2a6abf7158809cf4f3c"));
        config.segment.url = Some(Secret::new("postgres://idmint:pgpass@db/test"));
        config.snowflake.sql.url = Some(Secret::new("mysql://root@db/test?password=mypass"));
        config.snowflake.redis.url = Secret::new("redis://:redispass@cache:6379");
        config.snowflake.etcd.endpoints = vec!["http://u:etcdpass@etcd:2379".to_owned()];
        config.keys.insert(
            "order".to_owned(),
            super::super::KeyConfig {
                strategy: super::super::Strategy::Snowflake,
                public: false,
                token: Some(Secret::new("t0ken")),
            },
        );
        let text = config.to_toml().unwrap();
        for secret in [
            "hunter2",
            "2b7e15",
            "pgpass",
            "mypass",
            "redispass",
            "etcdpass",
            "t0ken",
        ] {
            assert!(!text.contains(secret), "{secret} shown:\n{text}");
        }
        assert!(text.contains("postgres://idmint:***@db/test"), "{text}");
        assert!(text.contains("redis://:***@cache:6379"), "{text}");
        assert!(text.contains("admin_token = \"***\""), "{text}");
        // Not a URL: hidden whole.
        assert_eq!(redacted_url("root:pw@db"), REDACTED);
    }

    #[test]
    fn multi_host_url_passwords_do_not_serialize() {
        let mut config = Config::default();
        config.snowflake.sql.url = Some(Secret::new(
            "postgres://app:pgpass@db1:5432,db2:5432/ids?target_session_attrs=read-write",
        ));
        config.segment.url = Some(Secret::new(
            "mysql://app:mypass@db1:3306,db2:3306/ids?ssl-mode=disabled",
        ));
        let text = config.to_toml().unwrap();
        assert!(
            !text.contains("pgpass") && !text.contains("mypass"),
            "{text}"
        );
        assert!(
            text.contains(
                "postgres://app:***@db1:5432,db2:5432/ids?target_session_attrs=read-write"
            ),
            "{text}"
        );
        assert!(
            text.contains("mysql://app:***@db1:3306,db2:3306/ids?ssl-mode=disabled"),
            "{text}"
        );
    }

    #[test]
    fn policies_and_durations_are_written_as_the_loader_reads_them() {
        let mut config = Config::default();
        config.snowflake.clock_behind = ClockBehind::Borrow {
            max_lead: Duration::from_millis(1500),
        };
        config.snowflake.sequence_exhausted = SequenceExhausted::Borrow {
            max_lead: Duration::from_secs(90),
        };
        config.snowflake.sequence_start = SequenceStart::Random { below: 100 };
        config.server.read_timeout = Duration::from_micros(2500);
        // Absolute: a relative one would be read from the file's folder.
        config.server.data_dir = "/var/lib/idmint".into();
        let text = config.to_toml().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shown.toml");
        std::fs::write(&path, &text).unwrap();
        let back = Config::load(Some(&path), Vec::new()).unwrap();
        assert_eq!(back.snowflake.clock_behind, config.snowflake.clock_behind);
        assert_eq!(
            back.snowflake.sequence_exhausted,
            config.snowflake.sequence_exhausted
        );
        assert_eq!(
            back.snowflake.sequence_start,
            config.snowflake.sequence_start
        );
        assert_eq!(back.server.read_timeout, config.server.read_timeout);
        assert_eq!(back.to_toml().unwrap(), text);
    }
}
