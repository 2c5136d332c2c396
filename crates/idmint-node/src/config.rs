//! The server's configuration: a TOML file overlaid by `IDMINT_…` environment
//! variables, checked before anything starts.
//!
//! `idmint.example.toml` at the repository root is the full list of keys,
//! each with its default and meaning; a test (`config/example_tests.rs`)
//! fails when it and these structs drift apart. `idmint config check FILE`
//! loads a file as `idmint serve` does and prints it back with secrets
//! hidden ([`Config::to_toml`]).
//!
//! # Why serde + toml with our own overlay (and not figment or config-rs)
//! Both crates parse an environment value like `12345` into a number, so an
//! admin token or a cluster name made of digits fails to load as a string
//! (figment's own issue tracker has a helper crate just for that). The overlay
//! here is forty lines: each variable is inserted as a TOML literal when it
//! reads as one, and where the typed struct then wants a string at exactly that
//! key it is inserted again as the raw string. `serde_path_to_error` names the
//! key of any value that doesn't fit, so every message says which key (and
//! which variable or file) is wrong. Unknown keys are errors
//! (`deny_unknown_fields`), from the file and from the environment alike.
//!
//! # Environment names
//! `IDMINT_<SECTION>__<KEY>` (sections and keys joined by a double underscore,
//! upper or lower case): `IDMINT_SERVER__HTTP_ADDR=0.0.0.0:8080`,
//! `IDMINT_SNOWFLAKE__SQL__URL=postgres://…`,
//! `IDMINT_KEYS__ORDER__STRATEGY=segment`. Two short aliases:
//! `IDMINT_ADMIN_TOKEN` is `server.admin_token` and `IDMINT_OBFUSCATION_KEY`
//! (the CLI's variable) is `obfuscation.key`. Other `IDMINT_` variables without
//! a double underscore (`IDMINT_LOG`) are not config.
//!
//! # Slow and greedy clients (`[server]`, docs/design.md §5 "Bad input")
//! - `max_connections` (default 4,096): client connections open at once,
//!   HTTP and RESP together. At the cap each listener holds the next
//!   connection it accepted unserved and accepts no more, so further clients
//!   wait (in the kernel's backlog) until a connection closes (a log line
//!   when the cap is reached, at most one a minute). It bounds
//!   what idle and slow clients can hold: about 15 KiB of memory each when
//!   idle (measured with 1,000 open), and file descriptors (keep the
//!   process's `ulimit -n` above it).
//! - `read_timeout` (default `10s`): a client that started a request must
//!   finish sending it within this (HTTP: request line and headers, which
//!   may not pass 32 KiB; RESP: one whole command), or it is disconnected;
//!   this is what stops slowloris clients. An HTTP connection on which no
//!   byte moved this long (opened and silent, or an idle keep-alive) is
//!   closed too; an idle RESP connection is kept, as Redis keeps idle
//!   clients (`timeout 0`), since Redis clients pool connections and don't
//!   expect the server to drop them. A client that stops reading is
//!   disconnected too: over HTTP once no byte has moved for this long, over
//!   RESP when replies the socket couldn't take at once are not all taken
//!   within it.
//!
//! Environment: `IDMINT_SERVER__MAX_CONNECTIONS=10000`,
//! `IDMINT_SERVER__READ_TIMEOUT=5s`.
//!
//! # Snowflake policies (`[snowflake]`, docs/design.md §2 "Clock behaviour")
//! Each is a string, `NAME` or `NAME:ARGUMENT`; durations as `"5ms"`, `"1s"`.
//! - `clock`: the time IDs are made from. `"monotonic"` (the default): the
//!   wall clock read once at start, advanced by the monotonic clock, so a
//!   wall-clock step while running is invisible; the drift between the two is
//!   exported (`idmint_clock_drift_seconds`, the status page, the admin
//!   workers route). `"wall"`: the raw wall clock, which steps back and forward
//!   with the system clock (the classic behaviour; the policies below then
//!   decide); its drift is 0 by definition, as IDs follow the wall clock.
//! - `clock_behind`: what to do when the clock reads earlier than the last ID
//!   issued. `"fail"`; `"wait:5ms"` (wait up to the bound, then fail; the
//!   default, Leaf's); `"borrow:50ms"` (keep issuing from the last time while
//!   it is at most the bound ahead of the clock); `"rollback-bits"` (needs a
//!   layout with rollback bits, e.g. `leaf,rollback=2`); `"history:N"` (reuse
//!   the unspent sequence numbers of the last N ticks, 1..=65536).
//! - `sequence_exhausted`: when a tick's sequence is used up. `"wait"` for the
//!   next tick (the default) or `"borrow:1s"` (move on to the next tick at once
//!   while at most the bound ahead of the clock).
//! - `sequence_start`: where each tick's sequence starts. `"zero"` (the
//!   default) or `"random:100"` (below the bound, at most the layout's IDs per
//!   tick; Leaf uses 100).
//!
//! Environment: `IDMINT_SNOWFLAKE__CLOCK=wall`,
//! `IDMINT_SNOWFLAKE__CLOCK_BEHIND=borrow:50ms` and so on.
//!
//! # Undeclared keys (`server.undeclared_keys`)
//! A key's strategy is fixed for the server's whole run, the same on every
//! surface (`/v1/ids`, gRPC, RESP):
//! - declared in `[keys.<name>]`: its `strategy`; in `[segment.keys.<name>]`:
//!   segment;
//! - a key the segment store holds when the server starts, or one created
//!   through the admin API: segment;
//! - any other name: `server.undeclared_keys`, one of `"snowflake"`,
//!   `"segment"`, `"uuid4"`, `"uuid7"` or `"refuse"` (a typed
//!   `unknown_key` error). The default is `"snowflake"` on idmint's own
//!   segment table (so a fresh server answers every name on every surface)
//!   and `"segment"` with `segment.schema = "leaf"` or `"tinyid"` (a Leaf or
//!   Tinyid user's keys are rows in their table, created there at any time).
//!
//! A name never changes strategy under a running server: the admin API
//! refuses to create a segment key under a name this server has already
//! answered with another strategy. Leaf's routes name the strategy in their
//! URL (`/api/snowflake/get/{key}`, `/api/segment/get/{key}`, and Tinyid's
//! segment routes): they serve any undeclared name with that strategy
//! (`"refuse"` refuses it there too), and answer a key *declared* with
//! another strategy with 409 `wrong_strategy`.
//!
//! # TLS (`[tls]`)
//! Setting `[tls]` turns TLS on for every listener (HTTP, gRPC, RESP), all
//! served from one certificate (`tls.rs`):
//! - `cert`: a PEM file with the server's certificate first, then any
//!   intermediates (required);
//! - `key`: a PEM file with its private key: PKCS#8, PKCS#1 (RSA) or SEC1
//!   (EC) (required);
//! - `client_ca`: a PEM file of CA certificates; set, every client must
//!   present a certificate one of them issued (mutual TLS), or its handshake
//!   fails (default: unset, no client certificates asked for);
//! - `http`, `grpc`, `resp`: whether each listener speaks TLS (default
//!   `true` each); a listener set `false` stays plain text;
//! - `poll_interval`: how often the files' modification times are checked
//!   for a reload (default `5s`).
//!
//! At start an unreadable file, a PEM without a certificate or key, a key
//! that doesn't match the certificate, or an expired certificate stops the
//! server with an error naming the key and the file. The files are read
//! again on `SIGHUP` and when they change; a new set that fails the same
//! checks is logged and counted (`idmint_tls_reload_failures_total`), and the
//! old certificate keeps serving. Open connections are never dropped by a
//! reload: only new handshakes see the new certificate. Replace the files
//! by renaming new ones into place, as certbot and Kubernetes secret
//! volumes do: a pair read between the two renames fails that reload, and
//! the second rename, itself a change, reloads again.
//!
//! Environment: `IDMINT_TLS__CERT=/etc/idmint/server.pem`,
//! `IDMINT_TLS__KEY=...`, `IDMINT_TLS__CLIENT_CA=...`, `IDMINT_TLS__RESP=false`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[cfg(test)]
mod example_tests;
mod sections;
mod show;
mod validate;
pub use sections::*;
use serde::{Deserialize, Serialize};
pub use show::REDACTED;
pub(crate) use validate::CHECKED;

/// The environment variable that holds the admin bearer token.
pub const ADMIN_TOKEN_ENV: &str = "IDMINT_ADMIN_TOKEN";
/// The environment variable that holds the obfuscation key(s).
pub const OBFUSCATION_KEY_ENV: &str = "IDMINT_OBFUSCATION_KEY";

/// A configuration that can't work, naming the key and where its value came from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file can't be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not TOML.
    #[error("config file {path} is not valid TOML: {}", clipped(.message))]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (line and column included).
        message: String,
    },
    /// A key's value is wrong, or the key is unknown.
    #[error("config key {key} (from {origin}): {}", clipped(.message))]
    Invalid {
        /// The key, dotted (`snowflake.sql.url`).
        key: String,
        /// Where the value came from: the file, an environment variable, or the default.
        origin: String,
        /// What is wrong, naming the value (never a secret).
        message: String,
    },
    /// The config can't be written as TOML ([`Config::to_toml`]).
    #[error("cannot show the config as TOML: {message}")]
    Show {
        /// The serializer's message.
        message: String,
    },
}

/// The longest error message shown whole, in characters.
const MAX_SHOWN: usize = 300;

/// `message`, cut short when a huge bad value (a 100 KB environment
/// variable) would make it a huge error line.
fn clipped(message: &str) -> std::borrow::Cow<'_, str> {
    match message.char_indices().nth(MAX_SHOWN) {
        None => message.into(),
        Some((end, _)) => format!("{}… ({} bytes in all)", &message[..end], message.len()).into(),
    }
}

/// The Redis segment store's key prefix on a Redis Cluster unless
/// `segment.key_prefix` is set: a hash tag keeps every key in one slot.
pub const CLUSTER_SEGMENT_PREFIX: &str = "idmint:{idmint}:";

/// A secret from config (admin token, obfuscation keys): never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// A secret holding `text`.
    pub fn new(text: impl Into<String>) -> Secret {
        Secret(text.into())
    }

    /// The secret's text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

/// The whole configuration. Every section and key has a default, so an empty
/// file (or none) is the embedded default: a `file` worker lease and a SQLite
/// segment store in `./idmint-data`, HTTP on loopback.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[server]`: listeners, data directory, admin token, limits.
    pub server: ServerConfig,
    /// `[snowflake]`: the layout and the worker registry.
    pub snowflake: SnowflakeConfig,
    /// `[segment]`: the segment store and the keys declared in it.
    pub segment: SegmentSection,
    /// `[monotonic]`: the timestamp oracle of `strategy = "monotonic"` keys.
    pub monotonic: MonotonicSection,
    /// `[keys.<name>]`: per-key strategy and whether its IDs are public.
    pub keys: BTreeMap<String, KeyConfig>,
    /// `[obfuscation]`: the keyed permutation behind public IDs.
    pub obfuscation: ObfuscationConfig,
    /// `[tls]`: TLS on the listeners; unset (the default), all plain text.
    pub tls: Option<TlsSection>,
}

/// The keys whose values are paths (or SQLite URLs, whose path is one).
const PATH_KEYS: &[&[&str]] = &[
    &["server", "data_dir"],
    &["monotonic", "forward_ca"],
    &["monotonic", "forward_cert"],
    &["monotonic", "forward_key"],
    &["tls", "cert"],
    &["tls", "key"],
    &["tls", "client_ca"],
];
const SQLITE_URL_KEYS: &[&[&str]] = &[&["segment", "url"], &["snowflake", "sql", "url"]];

/// Makes every relative path written in a config file relative to the file's
/// folder, as nginx's, systemd's and most servers' users expect: `idmint serve
/// --config conf/idmint.toml` reads `tls.cert = "server.pem"` as
/// `conf/server.pem` from whatever folder it runs in. Paths from `IDMINT_…`
/// variables, flags and the defaults (`./idmint-data`) stay relative to the
/// working directory, where whoever typed them stood. A config file in the
/// working directory itself (`folder` empty) changes nothing.
fn resolve_relative_paths(table: &mut toml::Table, folder: &Path) {
    if folder.as_os_str().is_empty() {
        return;
    }
    for key in PATH_KEYS {
        if let Some(toml::Value::String(text)) = lookup_mut(table, key) {
            let path = Path::new(text.as_str());
            if path.is_relative() && !text.is_empty() {
                *text = within(folder, path).to_string_lossy().into_owned();
            }
        }
    }
    for key in SQLITE_URL_KEYS {
        if let Some(toml::Value::String(url)) = lookup_mut(table, key)
            && let Some(resolved) = sqlite_url_in(url, folder)
        {
            *url = resolved;
        }
    }
}

/// The value at the dotted `key` in `table`, when every part is there.
fn lookup_mut<'a>(table: &'a mut toml::Table, key: &[&str]) -> Option<&'a mut toml::Value> {
    let (last, parents) = key.split_last()?;
    let mut here = table;
    for part in parents {
        here = here.get_mut(*part)?.as_table_mut()?;
    }
    here.get_mut(*last)
}

/// `url` with its file made relative to `folder`, when it is a SQLite URL
/// (`sqlite://PATH` or `sqlite:PATH`, either with `?options`) naming a
/// relative file; `None` for any other URL, an absolute path or `:memory:`.
fn sqlite_url_in(url: &str, folder: &Path) -> Option<String> {
    let scheme = url.get(..7).filter(|s| s.eq_ignore_ascii_case("sqlite:"))?;
    let rest = &url[7..];
    let (slashes, rest) = match rest.strip_prefix("//") {
        Some(rest) => ("//", rest),
        None => ("", rest),
    };
    let (file, options) = match rest.find('?') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if file.is_empty() || file.starts_with(':') || Path::new(file).is_absolute() {
        return None;
    }
    let file = within(folder, Path::new(file));
    Some(format!("{scheme}{slashes}{}{options}", file.display()))
}

/// `folder/path`, without `path`'s `.` parts (`./idmint-data` in `conf/`
/// is `conf/idmint-data`).
fn within(folder: &Path, path: &Path) -> PathBuf {
    let mut joined = folder.to_path_buf();
    joined.extend(
        path.components()
            .filter(|c| !matches!(c, std::path::Component::CurDir)),
    );
    joined
}

/// Where an overlaid value came from.
#[derive(Debug, Clone)]
struct EnvValue {
    path: Vec<String>,
    var: String,
    raw: String,
}

impl Config {
    /// Loads the config: the embedded defaults, then `file` (if any), then the
    /// `IDMINT_…` variables among `env`.
    ///
    /// `env` is passed in (usually `std::env::vars()`) so tests need not touch
    /// the process environment.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, or the key and where its value came
    /// from: an unknown key, a value of the wrong type or out of range.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (mut table, file_origin) = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let table: toml::Table =
                    text.parse()
                        .map_err(|e: toml::de::Error| ConfigError::Syntax {
                            path: path.to_owned(),
                            message: one_line(&e.to_string()),
                        })?;
                let mut table = table;
                // A pipe (`/dev/stdin`) has no folder of its own.
                let is_file = std::fs::metadata(path).is_ok_and(|m| m.is_file());
                if let Some(folder) = path.parent().filter(|_| is_file) {
                    resolve_relative_paths(&mut table, folder);
                }
                (table, format!("config file {}", path.display()))
            }
            None => (toml::Table::new(), "the defaults".to_owned()),
        };
        let overlay = env_overlay(env);
        for value in &overlay {
            insert(&mut table, &value.path, literal(&value.raw), &value.var)?;
        }
        // Each retry reads one env value the next way: a TOML literal, then a
        // plain string, then a comma-separated list (`http://a:2379,http://b:2379`
        // for a list key); three tries each at most, so this ends.
        let mut tries = vec![0u8; overlay.len()];
        loop {
            let value = toml::Value::Table(table.clone());
            match serde_path_to_error::deserialize::<_, Config>(value) {
                Ok(config) => return Ok(config),
                Err(e) => {
                    let key = e.path().to_string();
                    // The list reading only for a key that wants a list.
                    let wants_list = e.inner().to_string().contains("expected a sequence");
                    let hit = overlay
                        .iter()
                        .position(|v| v.path.join(".") == key)
                        .filter(|&i| tries[i] == 0 || (tries[i] == 1 && wants_list));
                    if let Some(i) = hit {
                        tries[i] += 1;
                        let v = &overlay[i];
                        let next = if tries[i] == 1 {
                            toml::Value::String(v.raw.clone())
                        } else {
                            comma_list(&v.raw)
                        };
                        insert(&mut table, &v.path, next, &v.var)?;
                        continue;
                    }
                    let origin = env_origin(&overlay, &key).unwrap_or(file_origin.clone());
                    let key = match key.as_str() {
                        "." => "(top level)".to_owned(),
                        "" => "\"\" (an empty key)".to_owned(),
                        _ => key,
                    };
                    return Err(ConfigError::Invalid {
                        key,
                        origin,
                        message: without_key_suffix(&e.into_inner().to_string()),
                    });
                }
            }
        }
    }

    /// The segment store's Redis when it is a Redis store: the sentinels
    /// (`[segment.redis_sentinel]`), the cluster (`[segment.redis_cluster]`)
    /// or a `redis://` (`rediss://`) `segment.url`; `None` for SQL.
    pub fn segment_redis_target(&self) -> Option<idmint_redis::RedisTarget> {
        let seg = &self.segment;
        sections::redis_target(seg.redis_sentinel.as_ref(), seg.redis_cluster.as_ref()).or_else(
            || {
                let url = seg.url.as_ref()?.expose();
                (url.starts_with("redis://") || url.starts_with("rediss://"))
                    .then(|| idmint_redis::RedisTarget::Url(url.to_owned()))
            },
        )
    }

    /// The Redis segment store's key prefix: `segment.key_prefix`, else
    /// `idmint:{idmint}:` on a Redis Cluster (whose keys must share a hash
    /// slot), else the store's default (`idmint:`, as before clusters).
    pub fn segment_redis_prefix(&self) -> String {
        match &self.segment.key_prefix {
            Some(prefix) => prefix.clone(),
            None if self.segment.redis_cluster.is_some() => CLUSTER_SEGMENT_PREFIX.to_owned(),
            None => idmint_segment::redis::DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// The segment store as logs and errors name it: `segment.url` and the
    /// URL (password hidden), or the Sentinel or Cluster section and what it
    /// names.
    pub fn segment_store_name(&self) -> String {
        match self.segment_redis_target() {
            Some(target @ idmint_redis::RedisTarget::Sentinel(_)) => {
                format!("segment.redis_sentinel ({})", target.describe())
            }
            Some(target @ idmint_redis::RedisTarget::Cluster(_)) => {
                format!("segment.redis_cluster ({})", target.describe())
            }
            _ => format!(
                "segment.url {}",
                idmint_sql::redact_url(&self.segment_url())
            ),
        }
    }

    /// The segment store URL: `segment.url`, or SQLite in the data directory.
    pub fn segment_url(&self) -> String {
        match &self.segment.url {
            Some(url) => url.expose().to_owned(),
            None => format!(
                "sqlite://{}",
                self.server.data_dir.join("segments.db").display()
            ),
        }
    }

    /// `server.undeclared_keys`, or its default: `segment` on a Leaf or
    /// Tinyid table, `snowflake` otherwise.
    pub fn undeclared_keys(&self) -> UndeclaredKeys {
        self.server
            .undeclared_keys
            .unwrap_or(match self.segment.schema {
                SchemaName::Idmint => UndeclaredKeys::Snowflake,
                SchemaName::Leaf | SchemaName::Tinyid => UndeclaredKeys::Segment,
            })
    }
}

/// A TOML syntax error on one line: where, then what (the parser draws the
/// line and a caret in between).
fn one_line(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default().to_owned();
    match lines.next_back() {
        Some(last) => format!("{first}: {last}"),
        None => first,
    }
}

/// A deserializer message without the `` in `key` `` that toml appends: the
/// key is named already.
fn without_key_suffix(message: &str) -> String {
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match message.rfind(" in `") {
        Some(at) if message.ends_with('`') => message[..at].to_owned(),
        _ => message,
    }
}

/// The variable behind `key`, as an origin: one that set the key, a table
/// holding it, or a key inside it (an unknown section or key of its own, a
/// field its table then lacks).
fn env_origin(overlay: &[EnvValue], key: &str) -> Option<String> {
    let under = |inner: &str, outer: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    };
    overlay
        .iter()
        .find(|v| {
            let path = v.path.join(".");
            under(key, &path) || under(&path, key)
        })
        .map(|v| format!("environment variable {}", v.var))
}

impl ConfigError {
    /// This error with the origin of a key found wrong by the checks after
    /// loading ([`Config::validate`]) pinned down when it can be: the
    /// environment variable behind it, else `file` when it sets the key.
    /// Otherwise (a key that is wrong for being unset, like a static
    /// registry's `snowflake.worker`) it stays "the config file or
    /// environment". `file` and `env` are what the config was loaded from.
    /// Errors from loading name their origin already and are returned as
    /// they are.
    pub fn located(
        self,
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> ConfigError {
        let ConfigError::Invalid {
            key,
            origin,
            message,
        } = self
        else {
            return self;
        };
        if origin != CHECKED {
            return ConfigError::Invalid {
                key,
                origin,
                message,
            };
        }
        let in_file = |path: &Path| {
            let table: toml::Table = std::fs::read_to_string(path).ok()?.parse().ok()?;
            let mut parts = key.split('.');
            let mut here = table.get(parts.next()?)?;
            for part in parts {
                here = here.get(part)?;
            }
            Some(format!("config file {}", path.display()))
        };
        let origin = env_origin(&env_overlay(env), &key)
            .or_else(|| file.and_then(in_file))
            .unwrap_or(origin);
        ConfigError::Invalid {
            key,
            origin,
            message,
        }
    }
}

/// The `IDMINT_…` variables that are config, with their key paths.
fn env_overlay(env: impl IntoIterator<Item = (String, String)>) -> Vec<EnvValue> {
    let mut out: Vec<EnvValue> = env
        .into_iter()
        .filter_map(|(var, raw)| {
            let path: Vec<String> = match var.as_str() {
                ADMIN_TOKEN_ENV => vec!["server".into(), "admin_token".into()],
                OBFUSCATION_KEY_ENV => vec!["obfuscation".into(), "key".into()],
                _ => {
                    let rest = var.strip_prefix("IDMINT_")?;
                    if !rest.contains("__") {
                        return None;
                    }
                    rest.split("__").map(|p| p.to_ascii_lowercase()).collect()
                }
            };
            Some(EnvValue { path, var, raw })
        })
        .collect();
    // Deterministic order; the double-underscore spelling wins over an alias.
    out.sort_by(|a, b| (a.var.contains("__"), &a.var).cmp(&(b.var.contains("__"), &b.var)));
    out
}

/// An environment value as a list of strings, split at commas and trimmed:
/// how a list key (`snowflake.etcd.endpoints`) reads `a,b` when it is not
/// written as a TOML array (`["a", "b"]`).
fn comma_list(raw: &str) -> toml::Value {
    toml::Value::Array(
        raw.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| toml::Value::String(part.to_owned()))
            .collect(),
    )
}

/// An environment value as a TOML literal when it reads as one (`8080`,
/// `true`, `["a", "b"]`), else as a string.
fn literal(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

/// The deepest key path a variable may name. No config key is deeper than
/// `segment.keys.<name>.step`; the bound turns a name nested thousands of
/// levels deep (which made a table whose clone and drop recurse per level,
/// and overflowed the stack) into an error.
const MAX_ENV_DEPTH: usize = 8;

fn insert(
    table: &mut toml::Table,
    path: &[String],
    value: toml::Value,
    var: &str,
) -> Result<(), ConfigError> {
    let conflict = |at: &str| ConfigError::Invalid {
        key: at.to_owned(),
        origin: format!("environment variable {var}"),
        message: "is not a table, so it has no keys to set".to_owned(),
    };
    let (last, parents) = path.split_last().ok_or_else(|| conflict("(empty)"))?;
    if path.iter().any(String::is_empty) {
        return Err(ConfigError::Invalid {
            key: path.join("."),
            origin: format!("environment variable {var}"),
            message: "an empty key part (three underscores in a row?)".to_owned(),
        });
    }
    if path.len() > MAX_ENV_DEPTH {
        return Err(ConfigError::Invalid {
            key: format!("{}...", path[..MAX_ENV_DEPTH].join(".")),
            origin: format!("environment variable {var}"),
            message: format!(
                "nested {} levels deep; no config key is deeper than {MAX_ENV_DEPTH}",
                path.len()
            ),
        });
    }
    let mut here = table;
    for (depth, part) in parents.iter().enumerate() {
        let entry = here
            .entry(part.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = match entry {
            toml::Value::Table(t) => t,
            _ => return Err(conflict(&path[..=depth].join("."))),
        };
    }
    here.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::time::Duration;

    use idmint_core::{ClockBehind, SequenceExhausted, SequenceStart};

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn multi_host_database_urls_are_read_and_bad_ones_named() {
        let url = "postgres://app:pw@db1:5432,db2:5432/ids?target_session_attrs=read-write";
        let config = Config::load(
            None,
            env(&[
                ("IDMINT_SNOWFLAKE__REGISTRY", "sql"),
                ("IDMINT_SNOWFLAKE__SQL__URL", url),
                ("IDMINT_SEGMENT__URL", "mysql://app:pw@db1,db2:3307/ids"),
            ]),
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.snowflake.sql.url.as_ref().unwrap().expose(), url);
        for (key, variable, bad, names) in [
            (
                "snowflake.sql.url",
                "IDMINT_SNOWFLAKE__SQL__URL",
                "postgres://app:pw@db1,db2/ids?target_session_attrs=prefer-standby",
                "target_session_attrs=prefer-standby",
            ),
            (
                "snowflake.sql.url",
                "IDMINT_SNOWFLAKE__SQL__URL",
                "postgres://app:pw@db1,,db2/ids",
                "host 2 of the list",
            ),
            (
                "segment.url",
                "IDMINT_SEGMENT__URL",
                "mysql://app:pw@db1:3306,db2:99999/ids",
                "port \"99999\"",
            ),
        ] {
            let mut vars = vec![("IDMINT_SNOWFLAKE__REGISTRY", "sql")];
            if variable != "IDMINT_SNOWFLAKE__SQL__URL" {
                vars.push(("IDMINT_SNOWFLAKE__SQL__URL", url));
            }
            vars.push((variable, bad));
            let loaded = Config::load(None, env(&vars)).unwrap();
            let e = loaded.validate().unwrap_err();
            let ConfigError::Invalid {
                key: at, message, ..
            } = &e
            else {
                panic!("{bad}: {e}");
            };
            assert_eq!(at, key, "{bad}: {e}");
            assert!(message.contains(names), "{bad}: {message}");
            assert!(!e.to_string().contains(":pw@"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_config_files_relative_paths_are_read_from_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("conf");
        std::fs::create_dir(&conf).unwrap();
        let path = conf.join("idmint.toml");
        std::fs::write(
            &path,
            "[server]\ndata_dir = \"data\"\n\
             [segment]\nurl = \"sqlite://segments.db?mode=rwc\"\n\
             [snowflake]\nregistry = \"sql\"\n[snowflake.sql]\nurl = \"sqlite:/abs/w.db\"\n\
             [monotonic]\nforward_ca = \"/etc/ca.pem\"\nforward_cert = \"c.pem\"\n\
             [tls]\ncert = \"tls/server.pem\"\nkey = \"server.key\"\n",
        )
        .unwrap();
        // The key file from a variable stays where the caller stood.
        let config = Config::load(Some(&path), env(&[("IDMINT_TLS__KEY", "mine.key")])).unwrap();
        assert_eq!(config.server.data_dir, conf.join("data"));
        assert_eq!(
            config.segment_url(),
            format!("sqlite://{}?mode=rwc", conf.join("segments.db").display())
        );
        let sql = config
            .snowflake
            .sql
            .url
            .as_ref()
            .unwrap()
            .expose()
            .to_owned();
        assert_eq!(sql, "sqlite:/abs/w.db", "an absolute path is kept");
        assert_eq!(
            config.monotonic.forward_ca.as_deref(),
            Some(Path::new("/etc/ca.pem"))
        );
        assert_eq!(config.monotonic.forward_cert, Some(conf.join("c.pem")));
        let tls = config.tls.unwrap();
        assert_eq!(tls.cert, Some(conf.join("tls/server.pem")));
        assert_eq!(tls.key, Some(PathBuf::from("mine.key")));

        // A file in the working directory, and the defaults, change nothing.
        assert_eq!(
            sqlite_url_in("sqlite::memory:", Path::new("conf")),
            None,
            "memory"
        );
        assert_eq!(sqlite_url_in("postgres://h/db", Path::new("conf")), None);
        assert_eq!(
            sqlite_url_in("sqlite:ids.db", Path::new("conf")).as_deref(),
            Some("sqlite:conf/ids.db")
        );
        let mut table: toml::Table = "[server]\ndata_dir = \"d\"\n".parse().unwrap();
        resolve_relative_paths(&mut table, Path::new(""));
        assert_eq!(table["server"]["data_dir"].as_str(), Some("d"));
        let defaults = Config::load(None, env(&[])).unwrap();
        assert_eq!(defaults.server.data_dir, PathBuf::from("./idmint-data"));
    }

    #[test]
    fn defaults_are_the_embedded_default() {
        let config = Config::load(None, env(&[])).unwrap();
        config.validate().unwrap();
        assert_eq!(config.server.http_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(config.snowflake.registry, RegistryKind::File);
        assert_eq!(config.server.max_count, 100_000);
        assert_eq!(config.segment_url(), "sqlite://./idmint-data/segments.db");
    }

    #[test]
    fn undeclared_keys_default_by_schema_and_load_from_file_and_env() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.undeclared_keys(), UndeclaredKeys::Snowflake);
        for schema in ["leaf", "tinyid"] {
            let f = file(&format!("[segment]\nschema = \"{schema}\"\n"));
            let config = Config::load(Some(f.path()), env(&[])).unwrap();
            assert_eq!(
                config.undeclared_keys(),
                UndeclaredKeys::Segment,
                "{schema}"
            );
            assert_eq!(config.segment.table, None);
        }
        let f = file("[server]\nundeclared_keys = \"uuid7\"\n");
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        assert_eq!(config.undeclared_keys(), UndeclaredKeys::Uuid7);
        let config = Config::load(
            Some(f.path()),
            env(&[("IDMINT_SERVER__UNDECLARED_KEYS", "refuse")]),
        )
        .unwrap();
        assert_eq!(config.undeclared_keys(), UndeclaredKeys::Refuse);
        assert_eq!(config.undeclared_keys().name(), "refuse");
        let f = file("[server]\nundeclared_keys = \"nope\"\n");
        let e = Config::load(Some(f.path()), env(&[])).unwrap_err();
        assert!(e.to_string().contains("server.undeclared_keys"), "{e}");
        // Leaf's and Tinyid's schemas are SQL tables.
        let f = file("[segment]\nurl = \"redis://127.0.0.1:6379\"\nschema = \"tinyid\"\n");
        let e = Config::load(Some(f.path()), env(&[]))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("segment.schema"), "{e}");
    }

    #[test]
    fn list_keys_take_commas_or_toml_arrays_from_the_environment() {
        let endpoints = |raw: &str| {
            Config::load(None, env(&[("IDMINT_SNOWFLAKE__ETCD__ENDPOINTS", raw)]))
                .unwrap()
                .snowflake
                .etcd
                .endpoints
        };
        let two = ["http://a:2379", "http://b:2379"];
        assert_eq!(endpoints("http://a:2379,http://b:2379"), two);
        assert_eq!(endpoints(" http://a:2379 , http://b:2379 ,"), two);
        assert_eq!(endpoints(r#"["http://a:2379", "http://b:2379"]"#), two);
        assert_eq!(endpoints("http://a:2379"), ["http://a:2379"]);
        // A scalar key still gets the value as given, commas and all.
        let config = Config::load(None, env(&[("IDMINT_SNOWFLAKE__SQL__CLUSTER", "a,b")])).unwrap();
        assert_eq!(config.snowflake.sql.cluster, "a,b");
    }

    #[test]
    fn env_overrides_file_with_types_from_the_struct() {
        let f = file("[server]\nmax_count = 10\n[keys.order]\nstrategy = \"segment\"\n");
        let config = Config::load(
            Some(f.path()),
            env(&[
                ("IDMINT_SERVER__MAX_COUNT", "500"),
                ("IDMINT_ADMIN_TOKEN", "12345"),
                ("IDMINT_KEYS__ORDER__PUBLIC", "false"),
                ("IDMINT_SNOWFLAKE__SQL__CLUSTER", "42"),
                ("IDMINT_SNOWFLAKE__WINDOW", "5s"),
                ("IDMINT_LOG", "debug"),
            ]),
        )
        .unwrap();
        assert_eq!(config.server.max_count, 500);
        assert_eq!(config.server.admin_token.unwrap().expose(), "12345");
        assert_eq!(config.snowflake.sql.cluster, "42");
        assert_eq!(
            config.snowflake.window,
            MarkWindow::Fixed(Duration::from_secs(5))
        );
        assert_eq!(config.keys["order"].strategy, Strategy::Segment);
    }

    #[test]
    fn connection_limits_load_from_file_and_env_and_are_checked() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.server.max_connections, 4096);
        assert_eq!(config.server.read_timeout, Duration::from_secs(10));
        let f = file("[server]\nmax_connections = 20\nread_timeout = \"2s\"\n");
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        config.validate().unwrap();
        assert_eq!(config.server.max_connections, 20);
        assert_eq!(config.server.read_timeout, Duration::from_secs(2));
        let config = Config::load(None, env(&[("IDMINT_SERVER__READ_TIMEOUT", "500ms")])).unwrap();
        assert_eq!(config.server.read_timeout, Duration::from_millis(500));
        for (vars, key) in [
            (
                &[("IDMINT_SERVER__MAX_CONNECTIONS", "0")],
                "server.max_connections",
            ),
            (
                &[("IDMINT_SERVER__READ_TIMEOUT", "0s")],
                "server.read_timeout",
            ),
        ] {
            let err = Config::load(None, env(vars))
                .and_then(|c| c.validate().map(|()| c))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{err}");
        }
        let err = Config::load(None, env(&[("IDMINT_SERVER__MAX_CONNECTIONS", "lots")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("IDMINT_SERVER__MAX_CONNECTIONS"), "{err}");
    }

    #[test]
    fn a_huge_bad_value_makes_a_short_error_naming_its_source() {
        let huge = "é".repeat(100_000);
        // Named by the variable when it fails to load, by its key when it
        // fails the checks after loading.
        for (var, named) in [
            ("IDMINT_SERVER__MAX_COUNT", "IDMINT_SERVER__MAX_COUNT"),
            ("IDMINT_SNOWFLAKE__LAYOUT", "snowflake.layout"),
        ] {
            let err = Config::load(None, env(&[(var, &huge)]))
                .and_then(|c| c.validate().map(|()| c))
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{err}");
            assert!(err.len() < 1000, "{} bytes", err.len());
            assert!(err.contains("bytes in all)"), "{err}");
        }
        let f = file(&format!("[server]\nhttp_addr = \"{huge}\"\n"));
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.http_addr") && err.len() < 1000,
            "{err}"
        );
    }

    #[test]
    fn the_grpc_listener_is_off_unless_set_in_the_file_or_environment() {
        assert_eq!(Config::load(None, env(&[])).unwrap().server.grpc_addr, None);
        let f = file("[server]\ngrpc_addr = \"127.0.0.1:50051\"\n");
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        assert_eq!(
            config.server.grpc_addr,
            Some(SocketAddr::from(([127, 0, 0, 1], 50051)))
        );
        let config = Config::load(
            Some(f.path()),
            env(&[("IDMINT_SERVER__GRPC_ADDR", "0.0.0.0:0")]),
        )
        .unwrap();
        assert_eq!(
            config.server.grpc_addr,
            Some(SocketAddr::from(([0, 0, 0, 0], 0)))
        );
        let err = Config::load(None, env(&[("IDMINT_SERVER__GRPC_ADDR", "nowhere")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.grpc_addr") && err.contains("IDMINT_SERVER__GRPC_ADDR"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let f = file("[server]\nhttp_adr = \"127.0.0.1:1\"\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("http_adr"), "{err}");
        let err = Config::load(None, env(&[("IDMINT_SERVER__NOPE", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nope") && err.contains("IDMINT_SERVER__NOPE"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_name_the_key_and_origin() {
        let err = Config::load(None, env(&[("IDMINT_SERVER__HTTP_ADDR", "nowhere")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.http_addr") && err.contains("IDMINT_SERVER__HTTP_ADDR"),
            "{err}"
        );
        let f = file("[snowflake]\nlayout = \"twiter\"\n");
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("snowflake.layout"), "{err}");
        let f = file("[keys.a]\nstrategy = \"snowflake\"\npublic = true\n");
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("keys.a.public"), "{err}");
    }

    #[test]
    fn secrets_do_not_show_in_debug() {
        let config = Config::load(
            None,
            env(&[
                ("IDMINT_ADMIN_TOKEN", "hunter2"),
                ("IDMINT_OBFUSCATION_KEY", "2b7e151628aed2a6abf7158809cf4f3c"),
            ]),
        )
        .unwrap();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("2b7e15"),
            "{shown}"
        );
        assert!(config.obfuscation.obfuscator().unwrap().is_some());
    }

    #[test]
    fn snowflake_policies_load_with_defaults_and_errors_naming_the_key() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(
            config.snowflake.clock_behind,
            ClockBehind::Wait {
                max: Duration::from_millis(5)
            }
        );
        assert_eq!(config.snowflake.sequence_exhausted, SequenceExhausted::Wait);
        assert_eq!(config.snowflake.sequence_start, SequenceStart::Zero);

        let f =
            file("[snowflake]\nclock_behind = \"borrow:50ms\"\nsequence_start = \"random:100\"\n");
        let config = Config::load(
            Some(f.path()),
            env(&[("IDMINT_SNOWFLAKE__SEQUENCE_EXHAUSTED", "borrow:1s")]),
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.snowflake.clock_behind,
            ClockBehind::Borrow {
                max_lead: Duration::from_millis(50)
            }
        );
        assert_eq!(
            config.snowflake.sequence_exhausted,
            SequenceExhausted::Borrow {
                max_lead: Duration::from_secs(1)
            }
        );

        let f = file("[snowflake]\nclock_behind = \"sometimes\"\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("snowflake.clock_behind") && !err.contains('\n'),
            "{err}"
        );
        let err = Config::load(
            None,
            env(&[("IDMINT_SNOWFLAKE__SEQUENCE_START", "random:x")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("snowflake.sequence_start")
                && err.contains("IDMINT_SNOWFLAKE__SEQUENCE_START"),
            "{err}"
        );

        // Checked against the layout: no rollback bits in `twitter`, and a
        // random start above its 4096 IDs per tick.
        let f = file("[snowflake]\nclock_behind = \"rollback-bits\"\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("snowflake.clock_behind"), "{err}");
        let f =
            file("[snowflake]\nlayout = \"leaf,rollback=2\"\nclock_behind = \"rollback-bits\"\n");
        Config::load(Some(f.path()), env(&[]))
            .unwrap()
            .validate()
            .unwrap();
        let f = file("[snowflake]\nsequence_start = \"random:5000\"\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("snowflake.sequence_start"), "{err}");
    }

    #[test]
    fn clock_source_loads_from_file_and_env_with_errors_naming_the_key() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.snowflake.clock, ClockSource::Monotonic);
        let f = file("[snowflake]\nclock = \"wall\"\n");
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        config.validate().unwrap();
        assert_eq!(config.snowflake.clock, ClockSource::Wall);
        assert_eq!(config.snowflake.clock.name(), "wall");
        let config = Config::load(
            Some(f.path()),
            env(&[("IDMINT_SNOWFLAKE__CLOCK", "monotonic")]),
        )
        .unwrap();
        assert_eq!(config.snowflake.clock, ClockSource::Monotonic);

        let f = file("[snowflake]\nclock = \"sundial\"\n");
        let err = Config::load(Some(f.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("snowflake.clock ")
                && err.contains("sundial")
                && err.contains("monotonic")
                && !err.contains('\n'),
            "{err}"
        );
        let err = Config::load(None, env(&[("IDMINT_SNOWFLAKE__CLOCK", "Wall")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("snowflake.clock ") && err.contains("IDMINT_SNOWFLAKE__CLOCK"),
            "{err}"
        );
    }

    #[test]
    fn sql_uid_generator_mode_loads_and_is_checked() {
        let f = file(
            "[snowflake]\nregistry = \"sql\"\n[snowflake.sql]\nurl = \"mysql://root@127.0.0.1/test\"\n\
             mode = \"uid-generator\"\n",
        );
        let config = Config::load(Some(f.path()), env(&[])).unwrap();
        config.validate().unwrap();
        assert_eq!(config.snowflake.sql.mode, SqlModeName::UidGenerator);
        assert_eq!(config.snowflake.sql.table, None, "the mode's own default");
        let config = Config::load(
            Some(f.path()),
            env(&[("IDMINT_SNOWFLAKE__SQL__TABLE", "UID_WORKER_NODE")]),
        )
        .unwrap();
        assert_eq!(
            config.snowflake.sql.table.as_deref(),
            Some("UID_WORKER_NODE")
        );

        // The table is one cluster: a cluster name would be silently ignored.
        let config = Config::load(
            Some(f.path()),
            env(&[("IDMINT_SNOWFLAKE__SQL__CLUSTER", "orders")]),
        )
        .unwrap();
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.contains("snowflake.sql.cluster") && err.contains("\"orders\""),
            "{err}"
        );
        let err = Config::load(
            Some(f.path()),
            env(&[("IDMINT_SNOWFLAKE__SQL__MODE", "uid_generator")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("snowflake.sql.mode") && err.contains("uid-generator"),
            "{err}"
        );
    }

    #[test]
    fn key_tokens_load_from_file_and_env_and_are_checked() {
        let f = file(
            "[keys.a]\nstrategy = \"snowflake\"\ntoken = \"t0k\"\n[keys.b]\nstrategy = \"segment\"\n",
        );
        let config =
            Config::load(Some(f.path()), env(&[("IDMINT_KEYS__B__TOKEN", "12345")])).unwrap();
        config.validate().unwrap();
        assert_eq!(config.keys["a"].token.as_ref().unwrap().expose(), "t0k");
        assert_eq!(config.keys["b"].token.as_ref().unwrap().expose(), "12345");
        assert!(!format!("{config:?}").contains("12345"));
        for bad in ["", "two words"] {
            let f = file(&format!(
                "[keys.a]\nstrategy = \"snowflake\"\ntoken = {bad:?}\n"
            ));
            let err = Config::load(Some(f.path()), env(&[]))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("keys.a.token") && !err.contains("two words"),
                "{err}"
            );
        }
    }

    #[test]
    fn redis_sentinel_and_cluster_load_from_file_and_env() {
        let f = file(
            "[snowflake]\nregistry = \"redis\"\n[snowflake.redis.sentinel]\n\
             sentinels = [\"10.0.0.1:26379\"]\nmaster_name = \"m\"\npassword = \"hunter2\"\n\
             sentinel_password = \"s3cret\"\ndb = 2\n",
        );
        let config = Config::load(
            Some(f.path()),
            env(&[
                (
                    "IDMINT_SNOWFLAKE__REDIS__SENTINEL__SENTINELS",
                    "a:26379, b:26379,c:26379",
                ),
                ("IDMINT_SEGMENT__REDIS_CLUSTER__NODES", "n1:7000,n2:7001"),
                ("IDMINT_SEGMENT__REDIS_CLUSTER__PASSWORD", "clusterpw"),
            ]),
        )
        .unwrap();
        config.validate().unwrap();
        let idmint_redis::RedisTarget::Sentinel(s) = config.snowflake.redis.target() else {
            panic!(
                "not a sentinel target: {:?}",
                config.snowflake.redis.target()
            );
        };
        assert_eq!(s.sentinels(), ["a:26379", "b:26379", "c:26379"]);
        assert_eq!(s.master_name(), "m");
        let segment = config.segment_redis_target().unwrap();
        assert!(segment.is_cluster());
        assert_eq!(segment.describe(), "cluster (n1:7000,n2:7001)");
        // A Cluster's segment keys share one slot unless told otherwise.
        assert_eq!(config.segment_redis_prefix(), CLUSTER_SEGMENT_PREFIX);
        let shown = config.to_toml().unwrap();
        for secret in ["hunter2", "s3cret", "clusterpw"] {
            assert!(!shown.contains(secret), "{secret} shown: {shown}");
            assert!(!format!("{config:?}").contains(secret));
        }
        assert!(shown.contains("[snowflake.redis.sentinel]"), "{shown}");
        // Without a Sentinel or Cluster section, nothing changes: the URL, and
        // the prefix plain-Redis stores always had.
        let plain = Config::load(
            None,
            env(&[("IDMINT_SEGMENT__URL", "redis://127.0.0.1:6379/")]),
        )
        .unwrap();
        assert_eq!(
            plain.snowflake.redis.target(),
            idmint_redis::RedisTarget::Url(DEFAULT_REDIS_URL.to_owned())
        );
        assert_eq!(plain.segment_redis_prefix(), "idmint:");
    }

    #[test]
    fn redis_topologies_that_cant_work_are_refused_naming_the_setting() {
        let refused = |toml: &str, vars: &[(&str, &str)]| {
            let f = file(toml);
            Config::load(Some(f.path()), env(vars))
                .and_then(|c| c.validate())
                .unwrap_err()
                .to_string()
        };
        let both = "[snowflake.redis.sentinel]\nsentinels = [\"a:1\"]\nmaster_name = \"m\"\n\
                    [snowflake.redis.redis_cluster]\nnodes = [\"b:2\"]\n";
        let err = refused(both, &[]);
        assert!(
            err.contains("snowflake.redis.redis_cluster") && err.contains("set one"),
            "{err}"
        );
        let err = refused(
            "[snowflake.redis]\nurl = \"redis://elsewhere:6379\"\n[snowflake.redis.redis_cluster]\nnodes = [\"b:2\"]\n",
            &[],
        );
        assert!(
            err.contains("snowflake.redis.url") && err.contains("leave the url unset"),
            "{err}"
        );
        let err = refused(
            "[snowflake.redis.sentinel]\nsentinels = [\"nohost\"]\nmaster_name = \"m\"\n",
            &[],
        );
        assert!(
            err.contains("snowflake.redis.sentinel") && err.contains("\"nohost\" has no port"),
            "{err}"
        );
        let err = refused(
            "[snowflake.redis.sentinel]\nsentinels = []\nmaster_name = \"m\"\n",
            &[],
        );
        assert!(err.contains("list of sentinels is empty"), "{err}");
        let err = refused("[snowflake.redis.sentinel]\nsentinels = [\"a:1\"]\n", &[]);
        assert!(err.contains("master_name"), "{err}");
        let err = refused(
            "[snowflake.redis.sentinel]\nsentinels = [\"a:1\"]\nmaster_name = \"m\"\nport = 1\n",
            &[],
        );
        assert!(err.contains("port"), "{err}");
        // On a Cluster every key of one idmint cluster must share a slot.
        let err = refused(
            "[segment]\nkey_prefix = \"ids:\"\n[segment.redis_cluster]\nnodes = [\"a:7000\"]\n",
            &[],
        );
        assert!(
            err.contains("segment.key_prefix") && err.contains("hash tag"),
            "{err}"
        );
        let err = refused(
            "[segment]\nurl = \"postgres://h/db\"\n[segment.redis_sentinel]\nsentinels = [\"a:1\"]\nmaster_name = \"m\"\n",
            &[],
        );
        assert!(
            err.contains("segment.url") && err.contains("is set beside"),
            "{err}"
        );
        let err = refused(
            "[snowflake.redis]\ncluster = \"\"\n[snowflake.redis.redis_cluster]\nnodes = [\"a:7000\"]\n",
            &[],
        );
        assert!(err.contains("snowflake.redis.cluster"), "{err}");
    }

    /// Each Redis setting that asks for TLS, as a build without Redis TLS
    /// (a binding's default) refuses it: by its key, naming the feature;
    /// with the `redis-tls` feature (the server's build) it passes.
    #[test]
    fn redis_tls_is_refused_by_name_in_a_build_without_it() {
        let sentinel = "sentinels = [\"a:26379\"]\nmaster_name = \"m\"\n";
        let cases = [
            (
                "[snowflake]\nregistry = \"redis\"\n[snowflake.redis]\nurl = \"rediss://h:6379/0\"\n".to_owned(),
                "snowflake.redis.url",
            ),
            (
                format!("[snowflake]\nregistry = \"redis\"\n[snowflake.redis.sentinel]\n{sentinel}tls = true\n"),
                "snowflake.redis.sentinel.tls",
            ),
            (
                format!("[snowflake]\nregistry = \"redis\"\n[snowflake.redis.sentinel]\n{sentinel}sentinel_tls = true\n"),
                "snowflake.redis.sentinel.sentinel_tls",
            ),
            (
                "[snowflake]\nregistry = \"redis\"\n[snowflake.redis.redis_cluster]\nnodes = [\"a:7000\"]\ntls = true\n".to_owned(),
                "snowflake.redis.redis_cluster.tls",
            ),
            (
                "[segment]\nurl = \"rediss://h:6379/0\"\n".to_owned(),
                "segment.url",
            ),
            (
                format!("[segment.redis_sentinel]\n{sentinel}tls = true\n"),
                "segment.redis_sentinel.tls",
            ),
            (
                "[segment.redis_cluster]\nnodes = [\"a:7000\"]\ntls = true\n".to_owned(),
                "segment.redis_cluster.tls",
            ),
        ];
        for (toml, key) in cases {
            let f = file(&toml);
            let checked = Config::load(Some(f.path()), env(&[])).and_then(|c| c.validate());
            if idmint_redis::TLS {
                assert!(checked.is_ok(), "{toml}: {checked:?}");
                continue;
            }
            let err = checked.unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { key: k, .. } if k == key),
                "{toml}: {err:?}"
            );
            let message = err.to_string();
            assert!(
                message.contains("no Redis TLS") && message.contains("`redis-tls` feature"),
                "{message}"
            );
        }
    }
}
