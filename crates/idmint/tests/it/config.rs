//! `idmint config check FILE` and `idmint config default`: the resolved
//! config with secrets hidden, bad keys named with their origin and exit 2,
//! the environment overlay applied as `serve` applies it, and the same
//! refusals as `serve` (one shared check).

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::{expect_failure, expect_ok, idmint_with};

/// Every secret a config can hold, each a distinct string to look for.
const SECRETS: &[&str] = &[
    "admin-s3cret",
    "order-t0ken",
    "00112233445566778899aabbccddeeff",
    "pg-passw0rd",
    "my-passw0rd",
    "redis-passw0rd",
];

const WITH_SECRETS: &str = r#"
[server]
admin_token = "admin-s3cret"

[snowflake.sql]
url = "mysql://root:my-passw0rd@127.0.0.1:3306/test"

[snowflake.redis]
url = "redis://:redis-passw0rd@127.0.0.1:6379"

[segment]
url = "postgres://idmint:pg-passw0rd@127.0.0.1:5432/test"

[keys.order]
strategy = "segment"
public = true
token = "order-t0ken"

[obfuscation]
key = "00112233445566778899aabbccddeeff"
"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `idmint args` with `env` set and `stdin` on its input, and without
/// the config variables a developer's shell might hold, so the run sees
/// only what the test sets.
fn run(args: &[&str], env: &[(&str, Option<&str>)], stdin: &str) -> Output {
    let stray: Vec<String> = std::env::vars()
        .map(|(name, _)| name)
        .filter(|name| {
            name.strip_prefix("IDMINT_").is_some_and(|rest| {
                rest.contains("__") || rest == "ADMIN_TOKEN" || rest == "OBFUSCATION_KEY"
            })
        })
        .collect();
    let mut all: Vec<(&str, Option<&str>)> = stray.iter().map(|name| (&**name, None)).collect();
    all.extend_from_slice(env);
    idmint_with(args, &all, stdin)
}

/// `idmint config check FILE` with `env` set.
fn check(file: &Path, env: &[(&str, Option<&str>)]) -> Output {
    run(&["config", "check", file.to_str().unwrap()], env, "")
}

#[test]
fn config_check_prints_the_resolved_config_with_every_secret_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "idmint.toml", WITH_SECRETS);
    let out = check(&file, &[]);
    assert!(out.status.success(), "{out:?}");
    // Online it asks the segment store's host what it is (`topology:` and
    // `warning:` lines): no secret there either.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("topology: segment.url (the segment store): 127.0.0.1:5432 is "),
        "{stderr}"
    );
    let out = String::from_utf8(out.stdout).unwrap();
    for secret in SECRETS {
        assert!(!out.contains(secret), "{secret} shown:\n{out}");
        assert!(!stderr.contains(secret), "{secret} shown:\n{stderr}");
    }
    // Hidden, not dropped: the marker stands where each secret was, and a
    // URL keeps all but its password.
    assert!(out.contains("admin_token = \"***\""), "{out}");
    assert!(out.contains("\ntoken = \"***\""), "{out}");
    assert!(out.contains("\nkey = \"***\""), "{out}");
    assert!(
        out.contains("postgres://idmint:***@127.0.0.1:5432/test"),
        "{out}"
    );
    assert!(
        out.contains("mysql://root:***@127.0.0.1:3306/test"),
        "{out}"
    );
    assert!(out.contains("redis://:***@127.0.0.1:6379"), "{out}");
    // The resolved config: defaults filled in, and valid TOML.
    let table: toml::Table = out.parse().expect("the output is TOML");
    assert_eq!(table["server"]["max_count"].as_integer(), Some(100_000));
    assert_eq!(table["keys"]["order"]["public"].as_bool(), Some(true));

    // Secrets from the environment are hidden alike.
    let args = ["config", "check", "--offline", file.to_str().unwrap()];
    let out = expect_ok(
        &args,
        run(
            &args,
            &[
                ("IDMINT_ADMIN_TOKEN", Some("env-admin-s3cret")),
                ("IDMINT_KEYS__ORDER__TOKEN", Some("env-order-t0ken")),
            ],
            "",
        ),
    );
    assert!(
        !out.contains("env-admin-s3cret") && !out.contains("env-order-t0ken"),
        "{out}"
    );
}

#[test]
fn config_check_shows_environment_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "idmint.toml", "[server]\nmax_count = 10\n");
    let args = ["config", "check", file.to_str().unwrap()];
    let out = expect_ok(&args, check(&file, &[]));
    assert!(out.contains("max_count = 10\n"), "{out}");
    let out = expect_ok(
        &args,
        check(
            &file,
            &[
                ("IDMINT_SERVER__MAX_COUNT", Some("777")),
                ("IDMINT_SNOWFLAKE__CLOCK_BEHIND", Some("borrow:50ms")),
            ],
        ),
    );
    assert!(out.contains("max_count = 777\n"), "{out}");
    assert!(out.contains("clock_behind = \"borrow:50ms\"\n"), "{out}");
}

/// A config file, the environment, and what the one error line must name.
type BadCase<'a> = (&'a str, &'a [(&'a str, Option<&'a str>)], &'a [&'a str]);

#[test]
fn config_check_names_a_bad_value_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[BadCase] = &[
        // A value of the wrong type, from the file.
        (
            "[server]\nmax_count = \"lots\"\n",
            &[],
            &["server.max_count", "config file"],
        ),
        // Out of range (a check after loading), from the file.
        (
            "[server]\nmax_count = 0\n",
            &[],
            &["server.max_count", "config file"],
        ),
        // Out of range, from the environment.
        (
            "",
            &[("IDMINT_SERVER__MAX_COUNT", Some("0"))],
            &["server.max_count", "IDMINT_SERVER__MAX_COUNT"],
        ),
        (
            "[snowflake]\nlayout = \"twiter\"\n",
            &[],
            &["snowflake.layout", "config file"],
        ),
        // A secret's error never quotes it.
        (
            "[obfuscation]\nkey = \"not-hex-s3cret\"\n",
            &[],
            &["obfuscation.key"],
        ),
        ("[server\n", &[], &["not valid TOML", "config file"]),
    ];
    for (i, (text, env, named)) in cases.iter().enumerate() {
        let file = write(dir.path(), &format!("bad{i}.toml"), text);
        let args = ["config", "check", file.to_str().unwrap()];
        let (code, line) = expect_failure(&args, check(&file, env));
        assert_eq!(code, 2, "{text}: {line}");
        for name in *named {
            assert!(line.contains(name), "{text}: {name} not in {line}");
        }
        if named.contains(&"config file") {
            assert!(line.contains(file.to_str().unwrap()), "{line}");
        }
        assert!(!line.contains("s3cret"), "{line}");
    }
}

#[test]
fn config_check_names_an_unknown_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "idmint.toml",
        "[server]\nhttp_adr = \"127.0.0.1:1\"\n",
    );
    let args = ["config", "check", file.to_str().unwrap()];
    let (code, line) = expect_failure(&args, check(&file, &[]));
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("http_adr") && line.contains("config file"),
        "{line}"
    );

    let file = write(dir.path(), "empty.toml", "");
    let (code, line) = expect_failure(
        &args,
        check(&file, &[("IDMINT_SNOWFLAKE__NOPE", Some("1"))]),
    );
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("nope") && line.contains("IDMINT_SNOWFLAKE__NOPE"),
        "{line}"
    );
}

/// What a backend refuses when opened is refused by `check` too, with no
/// backend running, and by `serve` with the very same line before it
/// touches anything: one check, shared.
#[test]
fn config_check_refuses_what_serve_would_refuse_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str)] = &[
        // etcd grants whole seconds only.
        (
            "[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nlease_ttl = \"1500ms\"\n",
            "snowflake.etcd",
        ),
        (
            "[snowflake]\nregistry = \"zookeeper\"\n[snowflake.zookeeper]\ncluster = \"a/b\"\n",
            "snowflake.zookeeper",
        ),
        (
            "[snowflake]\nregistry = \"host\"\n[snowflake.host]\naddress = \"8.8.8.8\"\n",
            "snowflake.host.address",
        ),
        // Out of the layout's range (twitter: 32 datacenters of 32 workers).
        (
            "[snowflake]\nregistry = \"static\"\nworker = 32\ndatacenter = 3\n",
            "snowflake.worker",
        ),
        ("[snowflake]\ndatacenter = 32\n", "snowflake.datacenter"),
        ("[segment]\ntable = \"no such-table\"\n", "segment.table"),
        ("[segment]\nmax_step = 0\n", "segment"),
        // Reserve, the oracle's internal RPC, open to other hosts, or beside
        // keys that have tokens, without the admin token or mutual TLS.
        (
            "[server]\ngrpc_addr = \"0.0.0.0:50051\"\n[snowflake]\nregistry = \"etcd\"\n\
             [keys.txn]\nstrategy = \"monotonic\"\n",
            "server.admin_token",
        ),
        (
            "[server]\ngrpc_addr = \"127.0.0.1:50051\"\n[snowflake]\nregistry = \"etcd\"\n\
             [keys.txn]\nstrategy = \"monotonic\"\n[keys.order]\nstrategy = \"snowflake\"\ntoken = \"t\"\n",
            "server.admin_token",
        ),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let file = write(dir.path(), &format!("refused{i}.toml"), text);
        let path = file.to_str().unwrap();
        let args = ["config", "check", path];
        let (code, line) = expect_failure(&args, check(&file, &[]));
        assert_eq!(code, 2, "{text}: {line}");
        assert!(
            line.contains(&format!("config key {key} ")),
            "{text}: {line}"
        );

        let data = dir.path().join(format!("data{i}"));
        let serve_args = [
            "serve",
            "--config",
            path,
            "--data-dir",
            data.to_str().unwrap(),
            "--http-addr",
            "127.0.0.1:0",
        ];
        let (serve_code, serve_line) = expect_failure(&serve_args, run(&serve_args, &[], ""));
        assert_eq!((serve_code, &serve_line), (2, &line), "{text}");
        assert!(
            !data.exists(),
            "serve made {} before refusing",
            data.display()
        );
    }
}

/// The README's monotonic setup (gRPC on every address, with the admin
/// token) passes; loopback-only gRPC with no tokens needs none.
#[test]
fn config_check_accepts_reserve_guarded_or_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    for text in [
        "[server]\ngrpc_addr = \"0.0.0.0:50051\"\nadmin_token = \"change-me\"\n\
         [snowflake]\nregistry = \"etcd\"\n[keys.txn]\nstrategy = \"monotonic\"\n",
        "[server]\ngrpc_addr = \"127.0.0.1:50051\"\n[snowflake]\nregistry = \"etcd\"\n\
         [keys.txn]\nstrategy = \"monotonic\"\n",
    ] {
        let file = write(dir.path(), "ok.toml", text);
        let out = run(
            &["config", "check", "--offline", file.to_str().unwrap()],
            &[],
            "",
        );
        assert!(out.status.success(), "{text}: {out:?}");
    }
}

/// `config check` takes the flags `serve` takes, so a config whose gRPC
/// address comes from `--grpc-addr` checks as it serves.
#[test]
fn config_check_takes_serves_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "mono.toml",
        "[snowflake]\nregistry = \"etcd\"\n[keys.txn]\nstrategy = \"monotonic\"\n",
    );
    let path = file.to_str().unwrap();
    let (code, line) = expect_failure(&["config", "check", path], check(&file, &[]));
    assert_eq!(code, 2);
    assert!(line.contains("server.grpc_addr"), "{line}");
    let args = [
        "config",
        "check",
        "--offline",
        "--grpc-addr",
        "127.0.0.1:50051",
        "--data-dir",
        "/tmp/elsewhere",
        path,
    ];
    let out = expect_ok(&args, run(&args, &[], ""));
    assert!(out.contains("grpc_addr = \"127.0.0.1:50051\""), "{out}");
    assert!(out.contains("data_dir = \"/tmp/elsewhere\""), "{out}");
}

#[test]
fn config_default_passes_config_check_and_loads_back_the_same() {
    let default = expect_ok(&["config", "default"], run(&["config", "default"], &[], ""));
    assert!(default.contains("[server]\n"), "{default}");
    assert!(
        default.contains("http_addr = \"127.0.0.1:8080\"\n"),
        "{default}"
    );

    // Through a file, and through standard input.
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "default.toml", &default);
    let args = ["config", "check", file.to_str().unwrap()];
    let checked = expect_ok(&args, check(&file, &[]));
    // The file's relative data directory is read from the file's folder.
    let in_folder = format!("data_dir = {:?}", dir.path().join("idmint-data"));
    assert_eq!(
        checked,
        default.replace("data_dir = \"./idmint-data\"", &in_folder)
    );
    // Standard input has no folder: the working directory's.
    let args = ["config", "check", "/dev/stdin"];
    let piped = expect_ok(&args, run(&args, &[], &default));
    assert_eq!(piped, default);
}

/// `config check` asks each Redis the config uses whether it keeps what it
/// is told, and warns on stderr (exit 0) when a restart can lose it: here a
/// private Redis started with persistence off, then the same server with
/// `appendonly yes` and `appendfsync always`, which draws no warning.
/// `--offline` asks nothing.
#[test]
fn config_check_warns_when_redis_can_forget() {
    let Some(redis) = idmint_testkit::PrivateService::start(idmint_testkit::Service::Redis) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "idmint.toml",
        &format!(
            "[snowflake]\nregistry = \"redis\"\n[snowflake.redis]\nurl = {:?}\n\
             [segment]\nurl = {:?}\n",
            redis.address(),
            redis.address()
        ),
    );
    let out = check(&file, &[]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: redis at 127.0.0.1:")
            && stderr.contains("(the worker registry and the segment store)")
            && stderr.contains("persistence is off")
            && stderr.contains("appendfsync always"),
        "{stderr}"
    );

    let offline = run(
        &["config", "check", "--offline", file.to_str().unwrap()],
        &[],
        "",
    );
    assert!(offline.status.success(), "{offline:?}");
    assert!(offline.stderr.is_empty(), "{offline:?}");

    let mut conn = redis::Client::open(redis.address())
        .and_then(|c| c.get_connection())
        .unwrap();
    for (name, value) in [("appendonly", "yes"), ("appendfsync", "always")] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut conn)
            .unwrap();
    }
    let out = check(&file, &[]);
    assert!(out.status.success(), "{out:?}");
    // No persistence warning now; what remains is the topology: one server,
    // a single member.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].starts_with("topology: redis at 127.0.0.1:") && lines[0].ends_with("(master)"),
        "{stderr}"
    );
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[1].starts_with("warning: redis at 127.0.0.1:")
            && lines[1].contains("a single member")
            && lines[1].contains("has no replica"),
        "{stderr}"
    );
}

/// Issue 32: `config check` reports the Redis topologies it finds, here a
/// primary with 2 replicas behind 3 sentinels (the registry) and a 6-node
/// Redis Cluster (the segment store), started by the project's scripts:
/// the primary, its replicas and the primary each sentinel names; the
/// cluster's slots with their masters and replicas. Neither has a single
/// member, so neither draws that warning.
#[test]
fn config_check_reports_the_sentinel_and_cluster_topologies_it_finds() {
    use idmint_testkit::redis_ha::{ClusterDeployment, SentinelDeployment};
    let Some(sentinel) = SentinelDeployment::start() else {
        return;
    };
    let Some(cluster) = ClusterDeployment::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "idmint.toml",
        &format!(
            "[snowflake]\nregistry = \"redis\"\n[snowflake.redis.sentinel]\nsentinels = {:?}\n\
             master_name = {:?}\n[segment.redis_cluster]\nnodes = {:?}\n",
            sentinel.sentinels(),
            sentinel.master_name(),
            &cluster.nodes()[..1],
        ),
    );
    let out = check(&file, &[]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let primary = format!("127.0.0.1:{}", sentinel.primary());
    let topology = |needle: &str| {
        stderr
            .lines()
            .any(|l| l.starts_with("topology: ") && l.contains(needle))
    };
    assert!(
        topology(&format!(
            "sentinel master idmint: primary {primary} (master), 2 replica(s), 3 sentinel(s) known"
        )),
        "{stderr}"
    );
    for s in sentinel.sentinels() {
        assert!(
            topology(&format!("sentinel {s}: names {primary}")),
            "{stderr}"
        );
    }
    for r in sentinel.replicas() {
        assert!(
            topology(&format!("replica 127.0.0.1:{r} (slave)")),
            "{stderr}"
        );
    }
    assert!(topology("cluster: 3 master(s), 3 replica(s)"), "{stderr}");
    assert!(topology("slots 0-5460: master 127.0.0.1:"), "{stderr}");
    assert!(!stderr.contains("single member"), "{stderr}");
    assert!(!stderr.contains("could not"), "{stderr}");
    // The test deployment lets a cut-off primary take writes (the HA tests
    // need it to lose some): the check says what that costs.
    assert!(
        stderr.contains(&format!(
            "warning: redis at sentinel master idmint ({}) (the worker registry): idmint's primary \
             {primary} has min-replicas-to-write 0",
            sentinel.sentinels().join(",")
        )),
        "{stderr}"
    );

    let offline = run(
        &["config", "check", "--offline", file.to_str().unwrap()],
        &[],
        "",
    );
    assert!(offline.status.success(), "{offline:?}");
    assert!(offline.stderr.is_empty(), "{offline:?}");
}

/// docs/design.md: the server refuses to issue past a layout's end. A layout
/// that has run out (uid-generator's `baidu` preset, on 2024-11-20) is
/// refused by `config check` and `serve` alike, naming the instant.
#[test]
fn a_layout_that_ran_out_is_refused_naming_when() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "baidu.toml",
        "[snowflake]\nlayout = \"baidu\"\n",
    );
    let path = file.to_str().unwrap();
    let (code, line) = expect_failure(&["config", "check", path], check(&file, &[]));
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("config key snowflake.layout ")
            && line.contains("ran out at 2024-11-20T13:24:16Z"),
        "{line}"
    );
    let data = dir.path().join("data");
    let serve_args = [
        "serve",
        "--config",
        path,
        "--data-dir",
        data.to_str().unwrap(),
        "--http-addr",
        "127.0.0.1:0",
    ];
    let (serve_code, serve_line) = expect_failure(&serve_args, run(&serve_args, &[], ""));
    assert_eq!((serve_code, &serve_line), (2, &line));
    // The same preset with a later epoch is fine.
    let file = write(
        dir.path(),
        "later.toml",
        "[snowflake]\nlayout = \"baidu,epoch=2024-01-01\"\n",
    );
    assert!(check(&file, &[]).status.success());
}

#[test]
fn config_check_plans_the_worker_space_of_its_registry_for_a_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idmint.toml");
    std::fs::write(
        &file,
        "[snowflake]\nlayout = \"twitter,worker=5\"\ndatacenter = 1\nregistry = \"etcd\"\n\
         [snowflake.etcd]\nendpoints = [\"127.0.0.1:1\"]\nlease_ttl = \"5s\"\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = run(
        &[
            "config",
            "check",
            path,
            "--offline",
            "--fleet",
            "30",
            "--restarts-per-hour",
            "100",
        ],
        &[],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("plan: 32 worker IDs (etcd registry)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: only 2 of 32 worker IDs are free"),
        "{stderr}"
    );
    let roomy = run(
        &["config", "check", path, "--offline", "--fleet", "10"],
        &[],
        "",
    );
    let stderr = String::from_utf8_lossy(&roomy.stderr).into_owned();
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// `config check` asks each host of a SQL URL what it is: a PostgreSQL
/// primary with a streaming standby (`scripts/postgres standby`) behind a
/// multi-host URL, the standby listed first, gets a `topology:` line per
/// host, the primary's naming its asynchronous standby; a one-host URL gets
/// a warning naming the host, and a segment store on an asynchronously
/// replicated primary one naming the risk; `--offline` asks nothing.
#[test]
fn config_check_reports_the_sql_topology() {
    let Some(pg) = idmint_testkit::PrivateService::start(idmint_testkit::Service::Postgres) else {
        return;
    };
    let standby_url = pg.action("standby");
    let host_of = |url: &str| {
        let rest = url.split_once('@').unwrap().1;
        rest.split_once('/').unwrap().0.to_owned()
    };
    let (primary, standby) = (host_of(pg.address()), host_of(&standby_url));
    let both = format!(
        "postgres://postgres:not-a-passw0rd@{standby},{primary}/postgres?target_session_attrs=read-write"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "idmint.toml",
        &format!(
            "[snowflake]\nregistry = \"sql\"\n[snowflake.sql]\nurl = {both:?}\n\
             [segment]\nurl = {:?}\n",
            pg.address()
        ),
    );
    let out = check(&file, &[]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let expected = [
        format!(
            "topology: snowflake.sql.url (the worker registry): {standby} is standby (read-only)"
        ),
        format!(
            "topology: snowflake.sql.url (the worker registry): {primary} is primary \
             (1 asynchronous standby)"
        ),
        format!(
            "topology: segment.url (the segment store): {primary} is primary \
             (1 asynchronous standby)"
        ),
    ];
    assert_eq!(lines[..3], expected, "{stderr}");
    assert_eq!(lines.len(), 5, "{stderr}");
    assert!(
        lines[3].starts_with(&format!(
            "warning: segment.url names one database host ({primary}): a failover"
        )),
        "{stderr}"
    );
    // The segment store's primary streams to its standby asynchronously: a
    // promotion could lose segments, which no hold makes safe.
    assert!(
        lines[4].starts_with(&format!(
            "warning: segment.url: the primary {primary} replicates to 1 standby(s) \
             asynchronously"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("not-a-passw0rd"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "postgres://postgres:***@{standby},{primary}/postgres"
        )),
        "{stdout}"
    );

    let offline = run(
        &["config", "check", "--offline", file.to_str().unwrap()],
        &[],
        "",
    );
    assert!(offline.status.success(), "{offline:?}");
    assert!(offline.stderr.is_empty(), "{offline:?}");
}

/// `config check` names each member of a 3-member etcd cluster and of a
/// ZooKeeper ensemble, which one leads, and warns when the config lists
/// only one of them.
#[test]
fn config_check_reports_the_etcd_and_zookeeper_members() {
    use idmint_testkit::cluster::{ClusterKind, PrivateCluster};
    let Some(etcd) = PrivateCluster::start(ClusterKind::Etcd) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let endpoints: Vec<String> = etcd.members().iter().map(|e| format!("{e:?}")).collect();
    let all = write(
        dir.path(),
        "all.toml",
        &format!(
            "[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nendpoints = [{}]\n",
            endpoints.join(", ")
        ),
    );
    let out = check(&all, &[]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let members: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("topology: etcd at ") && l.contains(": member "))
        .collect();
    assert_eq!(members.len(), 3, "{stderr}");
    assert_eq!(
        members.iter().filter(|l| l.ends_with(": leader")).count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("warning: etcd"), "{stderr}");
    let one = write(
        dir.path(),
        "one.toml",
        &format!(
            "[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nendpoints = [{}]\n",
            endpoints[0]
        ),
    );
    let out = check(&one, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("are not in snowflake.etcd.endpoints"),
        "{stderr}"
    );
    drop(etcd);

    let Some(zk) = PrivateCluster::start(ClusterKind::ZooKeeper) else {
        return;
    };
    let ensemble = write(
        dir.path(),
        "zk.toml",
        &format!(
            "[snowflake]\nregistry = \"zookeeper\"\n[snowflake.zookeeper]\nconnect = {:?}\n",
            zk.connect_string()
        ),
    );
    let out = check(&ensemble, &[]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let servers: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("topology: zookeeper at "))
        .collect();
    assert_eq!(servers.len(), 3, "{stderr}");
    assert_eq!(
        servers.iter().filter(|l| l.ends_with(": leader")).count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("warning: zookeeper"), "{stderr}");
    let lone = write(
        dir.path(),
        "zk1.toml",
        &format!(
            "[snowflake]\nregistry = \"zookeeper\"\n[snowflake.zookeeper]\nconnect = {:?}\n",
            zk.members()[0]
        ),
    );
    let out = check(&lone, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("names one server"), "{stderr}");
}

/// `config check` says what each `auto` of `[snowflake]` comes to for the
/// config it checks: the window is wider where leader elections stop
/// writes, the claim wait follows the lease TTL and the window. A duration
/// written out is shown as it is, and the output stays TOML.
#[test]
fn config_check_tells_what_auto_resolves_to() {
    let dir = tempfile::tempdir().unwrap();
    let offline = |text: &str| {
        let file = write(dir.path(), "idmint.toml", text);
        let args = ["config", "check", "--offline", file.to_str().unwrap()];
        let out = expect_ok(&args, run(&args, &[], ""));
        let table: toml::Table = out.parse().expect("the output is TOML");
        assert!(table["snowflake"].is_table(), "{out}");
        out
    };
    let etcd = offline("[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nlease_ttl = \"40s\"\n");
    assert!(
        etcd.contains("window = \"auto\" # 6s with the etcd registry\n"),
        "{etcd}"
    );
    assert!(
        etcd.contains(
            "claim_wait = \"auto\" # 1m 16s: the lease TTL 40s + the window 6s + 30s, at least 60s\n"
        ),
        "{etcd}"
    );
    let forever = offline(
        "[snowflake]\nregistry = \"zookeeper\"\n[snowflake.zookeeper]\nmode = \"forever\"\n",
    );
    assert!(
        forever.contains("window = \"auto\" # 3s with the zookeeper (forever) registry\n"),
        "{forever}"
    );
    let file = offline("[snowflake]\nclaim_wait = \"2m\"\n");
    assert!(
        file.contains("window = \"auto\" # 3s with the file registry\n"),
        "{file}"
    );
    assert!(file.contains("claim_wait = \"2m\"\n"), "{file}");
    // `[monotonic]` has a window of its own, never `auto`.
    let fixed = offline("[snowflake]\nregistry = \"etcd\"\nwindow = \"5s\"\n");
    assert!(fixed.contains("window = \"5s\"\n"), "{fixed}");
    assert!(fixed.contains("+ the window 5s +"), "{fixed}");
    assert!(!fixed.contains("with the etcd registry"), "{fixed}");
}
