//! Keeps `idmint.example.toml` (the repository root) and [`Config`] from
//! drifting apart, both ways:
//!
//! - every key the struct has is in the file, in the struct's order, and the
//!   file has no key the struct lacks (the key set comes from serialising a
//!   config with every field filled: a field added to a config struct breaks
//!   [`full`]'s struct literals until it is filled, and then shows up here);
//! - the file's uncommented values are [`Config::default`], compared through
//!   the loader and the serializer, so changing a default in code fails;
//! - with its commented-out examples uncommented, the file loads and passes
//!   [`check`](crate::check).
//!
//! The file's convention: a commented-out example is `# ` followed by a TOML
//! line (`key = value` or a `[table]` header); every such key line is marked
//! `# no default` or, inside a map section's example entry, `# default` when
//! it shows the entry's default. A commented-out table header ending in
//! `# alternative` starts an example that replaces another setting (a Redis
//! reached through its sentinels or as a cluster instead of its URL): the
//! alternatives are listed like every key, but loaded one at a time, since
//! they can't all be on in one config.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use idmint_core::{ClockBehind, SequenceExhausted, SequenceStart};

use super::*;

const EXAMPLE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../idmint.example.toml");

fn example() -> String {
    std::fs::read_to_string(EXAMPLE_PATH).expect("read idmint.example.toml")
}

/// A config with every field set (every `Option` is `Some`, every map has
/// an entry named as in the example), so that every key serialises. Struct
/// literals without `..`: a new field fails to compile here until it is
/// given a value, and then fails [`the_example_lists_every_key_in_struct_order`]
/// until the example has it.
fn full() -> Config {
    let secs = Duration::from_secs;
    let addr = |text: &str| text.parse::<SocketAddr>().expect("an address");
    Config {
        server: ServerConfig {
            http_addr: addr("127.0.0.1:8080"),
            resp_addr: Some(addr("127.0.0.1:6380")),
            grpc_addr: Some(addr("127.0.0.1:50051")),
            data_dir: PathBuf::from("./idmint-data"),
            admin_token: Some(Secret::new("token")),
            max_count: 100,
            shutdown_grace: secs(1),
            max_connections: 10,
            read_timeout: secs(1),
            undeclared_keys: Some(UndeclaredKeys::Refuse),
        },
        snowflake: SnowflakeConfig {
            layout: "twitter".to_owned(),
            registry: RegistryKind::File,
            worker: Some(1),
            datacenter: Some(1),
            window: MarkWindow::Fixed(secs(5)),
            max_peer_skew: secs(10),
            report_interval: secs(3),
            claim_wait: ClaimWait::Auto,
            clock: ClockSource::Wall,
            clock_behind: ClockBehind::Fail,
            sequence_exhausted: SequenceExhausted::Wait,
            sequence_start: SequenceStart::Zero,
            advertise_address: Some("10.0.0.7".to_owned()),
            host: HostSection {
                address: Some(Ipv4Addr::new(10, 0, 0, 7)),
            },
            k8s: K8sSection {
                hostname: Some("idmint-2".to_owned()),
            },
            sql: SqlRegistrySection {
                url: Some(Secret::new("sqlite://w.db")),
                mode: SqlModeName::Lease,
                cluster: "c".to_owned(),
                table: Some("t".to_owned()),
                lease_ttl: secs(30),
            },
            redis: RedisRegistrySection {
                url: Secret::new("redis://127.0.0.1:6379"),
                cluster: "c".to_owned(),
                lease_ttl: secs(10),
                sentinel: Some(sentinel()),
                redis_cluster: Some(redis_cluster()),
            },
            etcd: EtcdSection {
                endpoints: vec!["http://127.0.0.1:2379".to_owned()],
                cluster: "c".to_owned(),
                lease_ttl: secs(10),
            },
            zookeeper: ZooKeeperSection {
                connect: "127.0.0.1:2181".to_owned(),
                mode: ZooKeeperModeName::Forever,
                cluster: "c".to_owned(),
                session_timeout: secs(10),
            },
        },
        segment: SegmentSection {
            url: Some(Secret::new("sqlite://s.db")),
            table: Some("t".to_owned()),
            schema: SchemaName::Idmint,
            key_prefix: Some("p:".to_owned()),
            replicas: Some(1),
            redis_sentinel: Some(sentinel()),
            redis_cluster: Some(redis_cluster()),
            preload_share: 0.5,
            max_step: 10,
            keys: BTreeMap::from([(
                "order".to_owned(),
                SegmentKeyConfig {
                    step: 10,
                    start: 1,
                    delta: 1,
                    remainder: 0,
                    description: "d".to_owned(),
                },
            )]),
        },
        monotonic: MonotonicSection {
            layout: "tso".to_owned(),
            lease_ttl: secs(3),
            window: secs(3),
            max_lead: secs(3600),
            leader_wait: secs(2),
            poll: Duration::from_millis(250),
            forward_ca: Some(PathBuf::from("ca.pem")),
            forward_cert: Some(PathBuf::from("client.pem")),
            forward_key: Some(PathBuf::from("client.key")),
        },
        keys: BTreeMap::from([(
            "order".to_owned(),
            KeyConfig {
                strategy: Strategy::Segment,
                public: true,
                token: Some(Secret::new("t")),
            },
        )]),
        obfuscation: ObfuscationConfig {
            key: Some(Secret::new("00112233445566778899aabbccddeeff")),
            bits: 63,
            key_id_bits: 1,
            active_key: Some(0),
            format: "dec".to_owned(),
        },
        tls: Some(TlsSection {
            cert: Some(PathBuf::from("server.pem")),
            key: Some(PathBuf::from("server.key")),
            client_ca: Some(PathBuf::from("ca.pem")),
            http: false,
            grpc: false,
            resp: false,
            poll_interval: secs(1),
        }),
    }
}

fn sentinel() -> RedisSentinelSection {
    RedisSentinelSection {
        sentinels: vec!["h:26379".to_owned()],
        master_name: "m".to_owned(),
        username: Some("u".to_owned()),
        password: Some(Secret::new("p")),
        tls: true,
        db: 1,
        sentinel_username: Some("su".to_owned()),
        sentinel_password: Some(Secret::new("sp")),
        sentinel_tls: true,
    }
}

fn redis_cluster() -> RedisClusterSection {
    RedisClusterSection {
        nodes: vec!["h:7000".to_owned()],
        username: Some("u".to_owned()),
        password: Some(Secret::new("p")),
        tls: true,
    }
}

/// `# key = value` and `# [table]` lines with the `# ` taken off.
fn example_line(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("# ")?;
    let is_key = |rest: &str| {
        rest.split_once(" = ").is_some_and(|(key, _)| {
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    (rest.starts_with('[') || is_key(rest)).then_some(rest)
}

/// The example with its commented-out examples uncommented.
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|line| example_line(line).unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A table header marked `# alternative` starts an example that replaces
/// another setting (a Redis reached through its sentinels instead of its
/// URL): they can't all be on in one config.
fn is_alternative(line: &str) -> bool {
    example_line(line).is_some_and(|rest| rest.starts_with('[') && rest.ends_with("# alternative"))
}

/// The example with its commented-out examples uncommented, except the
/// alternatives (`# alternative` tables), which stay commented out; or only
/// the alternative whose header is `only`.
fn uncommented_one_choice(text: &str, only: Option<&str>) -> String {
    let mut skipping = false;
    text.lines()
        .map(|line| {
            if let Some(rest) = example_line(line)
                && rest.starts_with('[')
            {
                skipping = is_alternative(line) && !only.is_some_and(|h| rest.starts_with(h));
            }
            if skipping {
                line
            } else {
                example_line(line).unwrap_or(line)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The dotted key of every `key = value` line, in order, headers applied.
/// Enough TOML for the example and for `toml::to_string`'s output (one key
/// per line, bare keys, inline arrays).
fn key_paths(text: &str) -> Vec<String> {
    let mut table = String::new();
    let mut keys = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            table = header.split(']').next().unwrap_or(header).to_owned();
        } else if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            keys.push(if table.is_empty() {
                key.to_owned()
            } else {
                format!("{table}.{key}")
            });
        }
    }
    keys
}

/// Loads `text` as a config file, with no environment.
/// Loads `text` as a config file. Every file goes in one folder, so the
/// relative paths in two loads are read from the same place.
fn load(text: &str) -> Result<Config, ConfigError> {
    static FOLDER: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = FOLDER.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.path().join(format!("idmint-{n}.toml"));
    std::fs::write(&path, text).expect("write the config");
    Config::load(Some(&path), Vec::new())
}

fn as_value(config: &Config) -> toml::Value {
    toml::Value::try_from(config).expect("the config serialises")
}

#[test]
fn the_example_lists_every_key_in_struct_order() {
    let want = key_paths(&toml::to_string(&full()).expect("the config serialises"));
    let have = key_paths(&uncommented(&example()));
    let have_set: BTreeSet<&String> = have.iter().collect();
    let want_set: BTreeSet<&String> = want.iter().collect();
    let missing: Vec<_> = want_set.difference(&have_set).collect();
    let unknown: Vec<_> = have_set.difference(&want_set).collect();
    assert!(
        missing.is_empty(),
        "keys of the config struct missing from idmint.example.toml: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "keys in idmint.example.toml the config struct lacks: {unknown:?}"
    );
    assert_eq!(have.len(), have_set.len(), "a key is listed twice");
    assert_eq!(
        have, want,
        "idmint.example.toml lists the keys in another order than the config struct"
    );
}

#[test]
fn the_example_with_its_examples_uncommented_loads_and_passes_the_checks() {
    let config = load(&uncommented_one_choice(&example(), None)).unwrap_or_else(|e| panic!("{e}"));
    crate::check(&config).unwrap_or_else(|e| panic!("{e}"));
    // Each alternative on its own loads and passes too; the segment's with
    // its URL left out, which they replace.
    let text = example();
    let headers: Vec<&str> = text
        .lines()
        .filter(|line| is_alternative(line))
        .filter_map(|line| example_line(line)?.split_whitespace().next())
        .collect();
    assert_eq!(headers.len(), 4, "{headers:?}");
    for header in headers {
        let mut one = uncommented_one_choice(&text, Some(header));
        if header.starts_with("[segment.") {
            one = one
                .lines()
                .filter(|line| !line.starts_with("url = \"postgres"))
                .collect::<Vec<_>>()
                .join("\n");
        }
        let config = load(&one).unwrap_or_else(|e| panic!("{header}: {e}"));
        crate::check(&config).unwrap_or_else(|e| panic!("{header}: {e}"));
    }
    // The examples took effect (not commented out twice, say).
    assert_eq!(
        config.server.resp_addr,
        Some(SocketAddr::from(([127, 0, 0, 1], 6380)))
    );
    assert_eq!(config.segment.keys["order"].step, 1000);
    assert_eq!(config.keys["order"].strategy, Strategy::Segment);
}

#[test]
fn the_examples_values_shown_as_defaults_are_the_defaults() {
    let text = example();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("idmint.toml");
    std::fs::write(&path, &text).expect("write the config");
    let as_is = Config::load(Some(&path), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let mut defaults = Config::default();
    // The file's `data_dir = "./idmint-data"` is read from the file's folder.
    defaults.server.data_dir = dir.path().join("idmint-data");
    assert_eq!(
        as_value(&as_is),
        as_value(&defaults),
        "idmint.example.toml's uncommented values are not Config::default()"
    );
    // Spelled as the defaults serialise, key for key (a loaded comparison
    // alone would pass a default left out of the file).
    let shown: BTreeSet<String> = key_paths(&text).into_iter().collect();
    let default_keys: BTreeSet<String> =
        key_paths(&toml::to_string(&defaults).expect("the defaults serialise"))
            .into_iter()
            .collect();
    assert_eq!(
        shown, default_keys,
        "uncommented keys are not the defaults' keys"
    );

    // Map entries' fields marked `# default` show the entry's default:
    // dropping them changes nothing.
    let full = uncommented_one_choice(&text, None);
    let without: String = uncommented_one_choice(
        &text
            .lines()
            .filter(|line| {
                let marked_default = example_line(line).is_some() && line.ends_with("# default");
                !marked_default || in_alternative(&text, line)
            })
            .collect::<Vec<_>>()
            .join("\n"),
        None,
    );
    assert!(without.len() < full.len(), "no `# default` entry fields");
    assert_eq!(
        as_value(&load(&without).unwrap_or_else(|e| panic!("{e}"))),
        as_value(&load(&full).unwrap_or_else(|e| panic!("{e}"))),
        "a map entry's field marked `# default` is not its default"
    );
}

/// Whether `line` lies in an alternative's table (not checked by the
/// `# default` comparison, which loads one config without them).
fn in_alternative(text: &str, line: &str) -> bool {
    let mut inside = false;
    for l in text.lines() {
        if example_line(l).is_some_and(|rest| rest.starts_with('[')) || l.starts_with('[') {
            inside = is_alternative(l);
        }
        if std::ptr::eq(l, line) {
            return inside;
        }
    }
    false
}

#[test]
fn every_commented_out_key_says_whether_it_has_a_default() {
    for line in example().lines() {
        if let Some(rest) = example_line(line)
            && !rest.starts_with('[')
        {
            assert!(
                line.contains("# no default") || line.ends_with("# default"),
                "mark it `# no default` or `# default`: {line}"
            );
        }
    }
}
