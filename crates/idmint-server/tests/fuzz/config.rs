//! Fuzz tests of the server's configuration: the TOML file (valid configs
//! with random edits, and garbage), the `IDMINT_…` environment overlay
//! (random names and values), and the snowflake policy parsers.
//!
//! Every load and check returns within [`BOUND`] without panicking. A failure
//! is a [`ConfigError`] on one line that names the key and where its value
//! came from. A broken config changes nothing: `Config::load`,
//! `Config::validate` and `Server::start` with a config that doesn't
//! validate leave the data directory uncreated. Where a parse succeeds it is
//! stable: the same text loads the same again, and a policy written in its
//! canonical form parses back to itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idmint_core::{ClockBehind, SequenceExhausted, SequenceStart};
use idmint_node::{Config, ConfigError};
use idmint_server::Server;
use idmint_testkit::fuzz::{arbitrary, cases, mutated, timed};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

/// The longest a load (a small file read and parsed) or a check may take.
const BOUND: Duration = Duration::from_millis(50);

/// A scratch directory per test: the config file, and the data directory
/// every load points at and none may create.
struct Scratch {
    _dir: tempfile::TempDir,
    file: PathBuf,
    data_dir: PathBuf,
    runtime: tokio::runtime::Runtime,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Scratch {
            file: dir.path().join("idmint.toml"),
            data_dir: dir.path().join("data-never-created"),
            _dir: dir,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime"),
        }
    }

    /// The variable that points the data directory at the scratch one.
    fn data_dir_var(&self) -> (String, String) {
        (
            "IDMINT_SERVER__DATA_DIR".to_owned(),
            self.data_dir.display().to_string(),
        )
    }

    /// Loads `text` (as the config file, when given) with `env`, then
    /// validates, and checks every outcome. `file_named` is where a value
    /// with no variable behind it came from: the file, or the defaults.
    fn load(&self, text: Option<&str>, env: &[(String, String)]) -> Result<(), TestCaseError> {
        if let Some(text) = text {
            std::fs::write(&self.file, text).expect("writing the config file");
        }
        let file = text.map(|_| self.file.as_path());
        let mut vars = vec![self.data_dir_var()];
        vars.extend(env.iter().cloned());
        let loaded = timed(BOUND, "Config::load", || Config::load(file, vars.clone()))?;
        self.check_unchanged()?;
        let config = match loaded {
            Ok(config) => config,
            Err(e) => return check_load_error(&e, file, &vars),
        };
        prop_assert_eq!(&config.server.data_dir, &self.data_dir);
        let again = Config::load(file, vars.clone()).map(|c| format!("{c:?}"));
        prop_assert_eq!(again.ok(), Some(format!("{config:?}")), "loads differ");
        match timed(BOUND, "Config::validate", || config.validate())? {
            Ok(()) => prop_assert!(config.layout().is_ok()),
            Err(e) => {
                check_error(&e)?;
                prop_assert!(matches!(e, ConfigError::Invalid { .. }), "{e:?}");
                let started = self.runtime.block_on(Server::start(config));
                let err = started.err();
                prop_assert!(
                    err.as_ref().is_some_and(|e| e.is_config()),
                    "a config that does not validate started: {err:?}"
                );
            }
        }
        self.check_unchanged()
    }

    fn check_unchanged(&self) -> Result<(), TestCaseError> {
        prop_assert!(
            !self.data_dir.exists(),
            "a broken config created {}",
            self.data_dir.display()
        );
        Ok(())
    }
}

/// Any config error: a message on one line that says something.
fn check_error(e: &ConfigError) -> Result<(), TestCaseError> {
    let message = e.to_string();
    prop_assert!(!message.trim().is_empty());
    prop_assert!(!message.contains('\n'), "{message:?}");
    if let ConfigError::Invalid {
        key,
        origin,
        message,
    } = e
    {
        prop_assert!(
            !key.is_empty() && !origin.is_empty() && !message.trim().is_empty(),
            "{e:?}"
        );
    }
    Ok(())
}

/// A load error names the file it could not parse, or the key and where its
/// value came from: the file, or one of the variables given.
fn check_load_error(
    e: &ConfigError,
    file: Option<&Path>,
    vars: &[(String, String)],
) -> Result<(), TestCaseError> {
    check_error(e)?;
    match e {
        ConfigError::Syntax { path, .. } => prop_assert_eq!(Some(path.as_path()), file),
        ConfigError::Invalid { origin, .. } => {
            let from_file = file.is_some_and(|f| *origin == format!("config file {}", f.display()));
            let from_var = vars
                .iter()
                .any(|(var, _)| *origin == format!("environment variable {var}"));
            prop_assert!(
                from_file || from_var,
                "{e} blames neither the file nor a variable given"
            );
        }
        other => prop_assert!(false, "unexpected error {other:?}"),
    }
    Ok(())
}

// ---- TOML ----

const FULL: &str = r#"# every section
[server]
http_addr = "127.0.0.1:0"
resp_addr = "127.0.0.1:0"
max_count = 1000
shutdown_grace = "2s"
admin_token = "s3cret"

[snowflake]
layout = "leaf,rollback=2"
registry = "static"
worker = 7
window = "3s"
clock_behind = "rollback-bits"
sequence_exhausted = "borrow:1s"
sequence_start = "random:100"

[snowflake.sql]
url = "postgres://postgres@127.0.0.1:5432/test"
mode = "disposable"
cluster = "c1"
table = "idmint_worker"
lease_ttl = "30s"

[snowflake.etcd]
endpoints = ["http://127.0.0.1:2379", "http://127.0.0.1:22379"]
lease_ttl = "10s"

[segment]
table = "leaf_alloc"
schema = "leaf"
preload_share = 0.2
max_step = 500000

[segment.keys.order]
step = 1000
start = 1
delta = 2
remainder = 1
description = "orders"

[keys.order]
strategy = "segment"
public = true
token = "t0k"

[keys."a.b"]
strategy = "uuid7"

[obfuscation]
key = "1:2b7e151628aed2a6abf7158809cf4f3c 0:8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0"
bits = 63
key_id_bits = 1
active_key = 1
format = "base32"
"#;

const INLINE: &str = r#"server = { max_count = 10, shutdown_grace = "PT1S" }
snowflake = { layout = "time=41,epoch=2020-01-01,worker=10,seq=12", registry = "file", worker = 3, clock_behind = "history:64" }
segment.keys.a = { step = 10 }
keys.a = { strategy = "segment" }
keys.b = { strategy = "snowflake", public = false }
"#;

const REGISTRIES: &str = r#"[snowflake]
registry = "zookeeper"
sequence_start = "zero"
clock_behind = "wait:5ms"
[snowflake.zookeeper]
connect = "127.0.0.1:2181"
mode = "forever"
session_timeout = "10s"
[snowflake.redis]
url = "redis://127.0.0.1:6379"
[snowflake.host]
address = "10.0.0.7"
[snowflake.k8s]
hostname = "idmint-3"
"#;

const TOML_TOKENS: &[&str] = &[
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "\"",
    "'",
    "'''",
    "\"\"\"",
    "#",
    "\\",
    "\\u0000",
    "\\uD800",
    "= ",
    "\n[server]\n",
    "\n[server]\nmax_count = 0\n",
    "\n[nope]\n",
    "\nhttp_adr = 1\n",
    "x = 1\n",
    "= [1, \"a\"]",
    "1979-05-27T07:32:00Z",
    "inf",
    "nan",
    "true",
    "0o777",
    "0b11",
    "1_000",
    "1e400",
    "-0.0",
    "\"-1s\"",
    "\"999999999999999999s\"",
    "\"P1Y\"",
    "\"borrow:0ms\"",
    "\"history:65537\"",
    "\"random:4097\"",
    "\"baidu,epoch=1969-01-01\"",
    "\"999.999.999.999:99999\"",
    "\"[::1]:0\"",
];

fn toml_text() -> impl Strategy<Value = String> {
    mutated(
        select(&[FULL, INLINE, REGISTRIES, ""][..]).prop_map(str::to_owned),
        TOML_TOKENS,
    )
}

/// The seeds are valid configs, so the edits start from one that works.
#[test]
fn seed_configs_load_and_validate() {
    let scratch = Scratch::new();
    for seed in [FULL, INLINE, REGISTRIES] {
        std::fs::write(&scratch.file, seed).expect("writing the config file");
        let config = Config::load(Some(&scratch.file), [scratch.data_dir_var()]);
        let checked = config.as_ref().map(Config::validate);
        assert!(matches!(checked, Ok(Ok(()))), "{seed}: {checked:?}");
    }
}

proptest! {
    #![proptest_config(cases(1500))]

    #[test]
    fn fuzz_config_toml_mutated(text in toml_text()) {
        Scratch::new().load(Some(&text), &[])?;
    }

    #[test]
    fn fuzz_config_toml_arbitrary(text in arbitrary("a-z_.=\"'\\[\\]{}#0-9 \n,:-")) {
        Scratch::new().load(Some(&text), &[])?;
    }
}

// ---- The environment overlay ----

const PARTS: &[&str] = &[
    "SERVER",
    "SNOWFLAKE",
    "SEGMENT",
    "KEYS",
    "OBFUSCATION",
    "SQL",
    "ETCD",
    "REDIS",
    "ZOOKEEPER",
    "HOST",
    "K8S",
    "ORDER",
    "HTTP_ADDR",
    "RESP_ADDR",
    "MAX_COUNT",
    "ADMIN_TOKEN",
    "SHUTDOWN_GRACE",
    "LAYOUT",
    "REGISTRY",
    "WORKER",
    "DATACENTER",
    "WINDOW",
    "CLOCK_BEHIND",
    "SEQUENCE_EXHAUSTED",
    "SEQUENCE_START",
    "URL",
    "MODE",
    "CLUSTER",
    "TABLE",
    "LEASE_TTL",
    "ENDPOINTS",
    "STEP",
    "START",
    "DELTA",
    "REMAINDER",
    "STRATEGY",
    "PUBLIC",
    "TOKEN",
    "KEY",
    "BITS",
    "KEY_ID_BITS",
    "FORMAT",
    "",
    "_",
];

/// A variable name: built from config words (any case), an alias, a name
/// that isn't config, random, or absurdly deep.
fn var_name() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        4 => select(PARTS).prop_map(str::to_owned),
        1 => "[A-Za-z0-9_]{0,8}",
    ];
    prop_oneof![
        6 => (prop::collection::vec(part, 1..=5), any::<bool>()).prop_map(|(parts, lower)| {
            let path = parts.join("__");
            format!("IDMINT_{}", if lower { path.to_lowercase() } else { path })
        }),
        1 => select(&["IDMINT_ADMIN_TOKEN", "IDMINT_OBFUSCATION_KEY", "IDMINT_LOG", "IDMINT_", "IDMINT___", "PATH", "idmint_server__max_count"][..])
            .prop_map(str::to_owned),
        1 => "IDMINT_[A-Za-z0-9_]{0,30}",
        // Nested far deeper than any key (this once overflowed the stack).
        1 => (1usize..12_000).prop_map(|depth| format!("IDMINT_{}X", "A__".repeat(depth))),
    ]
}

/// A variable value: what the overlay may read as a TOML literal, what it
/// must keep a string, and anything.
fn var_value() -> impl Strategy<Value = String> {
    prop_oneof![
        select(
            &[
                "8080",
                "0",
                "-1",
                "true",
                "false",
                "1.5",
                "nan",
                "inf",
                "[\"a\", \"b\"]",
                "[]",
                "[1, \"a\"]",
                "{ a = 1 }",
                "{ step = 10 }",
                "{ strategy = \"segment\" }",
                "1979-05-27T07:32:00Z",
                "\"quoted\"",
                "'literal'",
                "127.0.0.1:0",
                "5s",
                "0s",
                "-5s",
                "borrow:50ms",
                "history:64",
                "twitter",
                "leaf,rollback=2",
                "segment",
                "snowflake",
                "uuid4",
                "static",
                "sql",
                "2b7e151628aed2a6abf7158809cf4f3c",
                "1:2b7e151628aed2a6abf7158809cf4f3c,0:00",
                "99999999999999999999",
                "18446744073709551615",
                "1\nx = 2",
                "[",
                "]]",
                "{",
                "\"",
                "",
            ][..]
        )
        .prop_map(str::to_owned),
        arbitrary("a-z0-9:.,\"'\\[\\]{} =_-"),
    ]
}

/// True for a variable that would move the data directory away from the
/// scratch one (the overlay lower-cases everything after `IDMINT_`).
fn moves_data_dir(var: &str) -> bool {
    var.strip_prefix("IDMINT_")
        .is_some_and(|rest| rest.eq_ignore_ascii_case("server__data_dir"))
}

/// A key in a section (or a section's table) that is not one of its keys, or
/// an unknown section: the load must fail and blame the variable.
fn unknown_var() -> impl Strategy<Value = (String, String)> {
    (
        select(
            &[
                "ZZ__",
                "SERVER__",
                "SNOWFLAKE__",
                "SNOWFLAKE__SQL__",
                "SEGMENT__",
                "OBFUSCATION__",
                "KEYS__A__",
                "SEGMENT__KEYS__A__",
            ][..],
        ),
        "ZZ[A-Z0-9_]{0,8}",
        var_value(),
    )
        .prop_map(|(section, key, value)| (format!("IDMINT_{section}{key}"), value))
}

/// What the fuzzing found, kept as plain cases: each error blames the
/// variable or file its value came from, names a key, and none crashes.
#[test]
fn found_by_fuzzing_errors_blame_their_source() {
    let scratch = Scratch::new();
    let var_cases = [
        // An unknown section, and a key's table set to a list: both once
        // blamed on "the defaults".
        ("IDMINT_SQL__SERVER", "8080"),
        ("IDMINT_KEYS__SERVER", "[\"a\", \"b\"]"),
        ("IDMINT_KEYS__ORDER__PUBLIC", "true"),
    ];
    for (var, value) in var_cases {
        let err = Config::load(
            None,
            [scratch.data_dir_var(), (var.to_owned(), value.to_owned())],
        )
        .expect_err(var)
        .to_string();
        assert!(
            err.contains(&format!("(from environment variable {var})")),
            "{err}"
        );
    }
    // A name 10,000 levels deep overflowed the stack.
    let deep = format!("IDMINT_{}X", "A__".repeat(10_000));
    let err = Config::load(None, [(deep, "1".to_owned())])
        .expect_err("too deep")
        .to_string();
    assert!(
        err.contains("no config key is deeper than"),
        "{}",
        &err[..200]
    );
    // An empty key in the file was named as nothing at all.
    std::fs::write(&scratch.file, "'' = 1\n").expect("writing the config file");
    let err = Config::load(Some(&scratch.file), [scratch.data_dir_var()])
        .expect_err("an empty key")
        .to_string();
    assert!(
        err.starts_with("config key \"\" (an empty key) (from config file"),
        "{err}"
    );
}

proptest! {
    #![proptest_config(cases(1500))]

    /// With no file, every value comes from a variable or the defaults, and
    /// the defaults are valid: an error names a variable that was given.
    #[test]
    fn fuzz_config_env_overlay(env in prop::collection::vec((var_name(), var_value()), 0..6)) {
        let env: Vec<(String, String)> = env.into_iter().filter(|(var, _)| !moves_data_dir(var)).collect();
        Scratch::new().load(None, &env)?;
    }

    /// Unknown keys are errors, from the environment as from the file.
    #[test]
    fn fuzz_config_env_unknown_key((var, value) in unknown_var()) {
        let scratch = Scratch::new();
        let env = [(var.clone(), value)];
        let loaded = Config::load(None, [scratch.data_dir_var()].into_iter().chain(env.iter().cloned()));
        prop_assert!(loaded.is_err(), "{var} was accepted");
        scratch.load(None, &env)?;
    }

    /// Env values over a valid file: the file is then one more place a bad
    /// value may come from.
    #[test]
    fn fuzz_config_env_over_file(
        file in select(&[FULL, INLINE, REGISTRIES][..]),
        env in prop::collection::vec((var_name(), var_value()), 1..4),
    ) {
        let env: Vec<(String, String)> = env.into_iter().filter(|(var, _)| !moves_data_dir(var)).collect();
        Scratch::new().load(Some(file), &env)?;
    }
}

// ---- Policies and durations ----

/// A policy parses to one whose canonical text parses back to it, or fails
/// with a one-line message quoting the text.
fn check_policy<T>(what: &str, text: &str) -> Result<(), TestCaseError>
where
    T: std::str::FromStr<Err = idmint_core::Error>
        + std::fmt::Display
        + PartialEq
        + std::fmt::Debug,
{
    match timed(BOUND, what, || text.parse::<T>())? {
        Ok(policy) => {
            let written = policy.to_string();
            prop_assert_eq!(
                written.parse::<T>(),
                Ok(policy),
                "{} {:?} written as {:?}",
                what,
                text,
                written
            );
        }
        Err(error) => {
            let message = error.to_string();
            prop_assert!(!message.contains('\n'), "{message:?}");
            prop_assert!(
                message.contains(&format!("{text:?}")),
                "{what}: {message} does not quote {text:?}"
            );
        }
    }
    Ok(())
}

const POLICY_SEEDS: &[&str] = &[
    "fail",
    "wait:5ms",
    " Borrow : 50ms ",
    "rollback-bits",
    "history:64",
    "wait",
    "borrow:1s",
    "zero",
    "random:100",
    "wait:PT0.005S",
    "borrow:1m 30s",
    "wait:1h",
];

const POLICY_TOKENS: &[&str] = &[
    ":",
    "::",
    "ms",
    "s",
    "ns",
    "us",
    "µs",
    "m",
    "h",
    "d",
    "y",
    "PT",
    "P1Y",
    "-",
    "+",
    " ",
    "0",
    "65536",
    "65537",
    "4294967295",
    "4294967296",
    "9223372036854775807s",
    "1e9s",
    "ago",
];

proptest! {
    #![proptest_config(cases(3000))]

    #[test]
    fn fuzz_config_policies(
        text in prop_oneof![
            mutated(select(POLICY_SEEDS).prop_map(str::to_owned), POLICY_TOKENS),
            arbitrary("a-z0-9:. -"),
        ],
    ) {
        check_policy::<ClockBehind>("clock_behind", &text)?;
        check_policy::<SequenceExhausted>("sequence_exhausted", &text)?;
        check_policy::<SequenceStart>("sequence_start", &text)?;
    }

    /// Durations come in through the same reader everywhere: a bad one names
    /// its key and variable.
    #[test]
    fn fuzz_config_durations(
        text in prop_oneof![
            mutated(select(&["3s", "500ms", "1m 30s", "PT3S", "2h", "1s 5ns"][..]).prop_map(str::to_owned), POLICY_TOKENS),
            arbitrary("a-zA-Z0-9:. -"),
        ],
    ) {
        let scratch = Scratch::new();
        let var = "IDMINT_SNOWFLAKE__WINDOW".to_owned();
        match Config::load(None, [scratch.data_dir_var(), (var.clone(), text.clone())]) {
            Ok(config) => {
                // What was read is what its canonical text reads as.
                let window = config.snowflake.window;
                let again = Config::load(None, [scratch.data_dir_var(), (var.clone(), window.to_string())]);
                prop_assert_eq!(again.map(|c| c.snowflake.window).ok(), Some(window), "{:?}", text);
            }
            Err(ConfigError::Invalid { key, origin, .. }) => {
                prop_assert_eq!(key, "snowflake.window");
                prop_assert_eq!(origin, format!("environment variable {var}"));
            }
            Err(other) => prop_assert!(false, "{text:?}: {other:?}"),
        }
        scratch.load(None, &[(var, text)])?;
    }
}
