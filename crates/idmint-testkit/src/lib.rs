//! What idmint's integration tests share, so each crate's `tests/it/` doesn't
//! carry its own copy:
//!
//! - [`require_service`]: a test that needs a service fails under `CI=true`
//!   when it is missing, and elsewhere prints a loud SKIPPED line.
//! - [`PrivateService`]: a private instance of etcd, ZooKeeper, PostgreSQL,
//!   MariaDB or Redis, started by the project's own script (`scripts/<name>
//!   check|start|stop|restart DIR`) in a temporary directory on a free loopback
//!   port and stopped on drop, for tests that stop a service mid-run. The
//!   shared instances other tests use are never touched.
//! - [`cluster::PrivateCluster`]: a 3-member etcd cluster or ZooKeeper
//!   ensemble (`scripts/etcd-cluster`, `scripts/zookeeper-cluster`), for
//!   tests that lose a leader or a majority.
//! - The shared instances' addresses ([`POSTGRES_URL`], [`MYSQL_URL`],
//!   [`REDIS_URL`]).
//! - [`FORK_GUARD`]: serializes spawning child processes against tests that
//!   drop `flock`ed files.
//! - [`bench`](mod@bench): what the benchmark harnesses share (run count, median, cost
//!   per call on N threads).
//! - [`proxy`]: a TCP proxy that cuts a client off from a service.
//! - [`redis_ha`]: Redis behind Sentinel and a Redis Cluster, started by
//!   `scripts/redis-sentinel` and `scripts/redis-cluster`.
//! - [`tinyid`]: Didi Tinyid's DDL and sample rows.
//! - [`tls`]: a test CA and the certificates the TLS tests need.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod cluster;
pub mod fuzz;
pub mod proxy;
pub mod redis_ha;
pub mod tinyid;
pub mod tls;

/// The machine's PostgreSQL, for tests.
pub const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The machine's MariaDB, for tests.
pub const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// The machine's Redis, for tests.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/";

/// Whether a test that needs `name` should run: `true` when `reachable`.
///
/// When the service is down, under `CI=true` this panics (CI must have every
/// service), and elsewhere it prints a loud SKIPPED line and returns `false`,
/// so a laptop without the service still runs the rest.
///
/// # Panics
/// Under `CI=true` when `reachable` is `false`.
pub fn require_service(name: &str, reachable: bool) -> bool {
    if reachable {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{name} is not reachable and CI=true: start {name} before running the tests");
    }
    // Written to the real stderr, not through `eprintln!`, which the test
    // harness captures and hides for passing tests: a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {name} is not reachable; this test did not run (set CI=true to fail instead)"
    );
    false
}

/// Serializes spawning a child process against tests that drop data-directory
/// locks: a forked child holds a copy of every open file (with the `flock` on
/// it) until it execs, so a lock dropped by another test in that window stays
/// held a moment longer and that test's next open fails. Tests that reopen a
/// data directory hold `read()` for their whole run; the spawning test holds
/// `write()` while it spawns.
pub static FORK_GUARD: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// One of the services a script under `scripts/` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// etcd (`scripts/etcd`).
    Etcd,
    /// ZooKeeper (`scripts/zookeeper`).
    ZooKeeper,
    /// PostgreSQL (`scripts/postgres`).
    Postgres,
    /// MariaDB (`scripts/mariadb`).
    MariaDb,
    /// Redis (`scripts/redis`).
    Redis,
}

impl Service {
    /// The script's name under `scripts/`.
    fn script(self) -> &'static str {
        match self {
            Service::Etcd => "etcd",
            Service::ZooKeeper => "zookeeper",
            Service::Postgres => "postgres",
            Service::MariaDb => "mariadb",
            Service::Redis => "redis",
        }
    }

    /// The variable `DIR/<name>.env` sets.
    fn variable(self) -> &'static str {
        match self {
            Service::Etcd => "IDMINT_TEST_ETCD_ENDPOINT",
            Service::ZooKeeper => "IDMINT_TEST_ZOOKEEPER",
            Service::Postgres => "IDMINT_TEST_POSTGRES_URL",
            Service::MariaDb => "IDMINT_TEST_MYSQL_URL",
            Service::Redis => "IDMINT_TEST_REDIS_URL",
        }
    }
}

fn script_path(service: Service) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(service.script())
}

/// Runs `scripts/<service> <action> <dir>`; the output, or the error text.
fn run_script(service: Service, action: &str, dir: &Path) -> Result<String, String> {
    let out = {
        // A forked child holds copies of the test binary's open files until it
        // execs; see `FORK_GUARD`.
        let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
        Command::new(script_path(service))
            .arg(action)
            .arg(dir)
            .output()
            .map_err(|e| format!("scripts/{} does not run: {e}", service.script()))?
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "scripts/{} {action} failed ({}): {}",
            service.script(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A private instance of a service, stopped (by its script) on drop.
#[derive(Debug)]
pub struct PrivateService {
    service: Service,
    dir: tempfile::TempDir,
    address: String,
}

impl PrivateService {
    /// Starts a private instance, or returns `None` after a loud SKIPPED line when
    /// its software is not installed (under `CI=true` that panics instead).
    ///
    /// # Panics
    /// When the software is installed but the instance does not start.
    pub fn start(service: Service) -> Option<PrivateService> {
        let check = run_script(service, "check", Path::new("."));
        let name = format!("{} (scripts/{} check)", service.script(), service.script());
        if let Err(why) = &check {
            eprintln!("{why}");
        }
        if !require_service(&name, check.is_ok()) {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("idmint-{}-", service.script()))
            .tempdir()
            .unwrap();
        let mut instance = PrivateService {
            service,
            dir,
            address: String::new(),
        };
        instance.run("start");
        instance.address = instance.read_env();
        Some(instance)
    }

    /// The service's name (its script's).
    pub fn name(&self) -> &'static str {
        self.service.script()
    }

    /// Where it listens, as its `.env` file names it (a URL, an endpoint, or
    /// `host:port`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Stops it and waits until it is gone.
    pub fn stop(&self) {
        self.run("stop");
    }

    /// Starts it again on the same port, with the same data.
    pub fn restart(&self) {
        self.run("restart");
        let again = self.read_env();
        assert_eq!(again, self.address, "restarted on another address");
    }

    /// PostgreSQL only: copies the running cluster into a replica that
    /// receives nothing after, as an asynchronous replica that lags
    /// (`scripts/postgres replica`).
    pub fn replicate(&self) {
        assert_eq!(
            self.service,
            Service::Postgres,
            "only PostgreSQL has replicas here"
        );
        self.run("replica");
    }

    /// PostgreSQL only: fails over to the replica of [`Self::replicate`] on
    /// the same port: the primary stops, the replica is promoted (a new
    /// timeline) and lacks every write made after it was copied
    /// (`scripts/postgres promote`).
    pub fn promote(&self) {
        assert_eq!(
            self.service,
            Service::Postgres,
            "only PostgreSQL has replicas here"
        );
        self.run("promote");
        let again = self.read_env();
        assert_eq!(again, self.address, "promoted on another address");
    }

    /// Runs `scripts/<service> <action> DIR` on this instance and returns
    /// what it printed: for the actions that have no method here, such as
    /// PostgreSQL's `standby` and `promote-standby` and MariaDB's `replica`
    /// and `promote` (each prints the URL of the server it made).
    ///
    /// # Panics
    /// When the script fails.
    pub fn action(&self, action: &str) -> String {
        run_script(self.service, action, self.dir.path()).unwrap_or_else(|why| panic!("{why}"))
    }

    /// The value of `variable` in `DIR/<file>` (a `NAME=value` file a script
    /// wrote, such as `standby.env`).
    ///
    /// # Panics
    /// When the file or the variable is missing.
    pub fn env(&self, file: &str, variable: &str) -> String {
        let path = self.dir.path().join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} was not written: {e}", path.display()));
        let prefix = format!("{variable}=");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{} has no {prefix}: {text:?}", path.display()))
            .to_owned()
    }

    fn run(&self, action: &str) {
        if let Err(why) = run_script(self.service, action, self.dir.path()) {
            panic!("{why}");
        }
    }

    fn read_env(&self) -> String {
        let path = self
            .dir
            .path()
            .join(format!("{}.env", self.service.script()));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} was not written: {e}", path.display()));
        let prefix = format!("{}=", self.service.variable());
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{} has no {prefix}: {text:?}", path.display()))
            .to_owned()
    }
}

impl Drop for PrivateService {
    fn drop(&mut self) {
        if let Err(why) = run_script(self.service, "stop", self.dir.path()) {
            eprintln!("{why}");
        }
    }
}

/// What the benchmark harnesses (`benches/*.rs`, `harness = false`) share.
///
/// A custom harness rather than criterion: the figures that matter are ratios
/// between measurements of one run, sustained rates over wall-clock windows and
/// latency percentiles over call streams, which criterion's per-iteration
/// statistics don't give.
pub mod bench {
    use std::hint::black_box;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::{Duration, Instant};

    /// How many runs each figure is the median of: `IDMINT_BENCH_RUNS`,
    /// default 7.
    pub fn runs() -> usize {
        std::env::var("IDMINT_BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(7)
    }

    /// True when the harness runs as a smoke test (`cargo test --benches`
    /// passes no `--bench`), whose figures mean nothing.
    pub fn quick() -> bool {
        !std::env::args().any(|a| a == "--bench")
    }

    /// The median (upper middle for an even count).
    ///
    /// # Panics
    /// On an empty list.
    pub fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// One row of a figures table: what was measured, the figure, and its
    /// ratio to the run's baseline (or a detail).
    #[derive(Debug, Clone)]
    pub struct Row {
        /// What was measured.
        pub what: String,
        /// The figure, with its unit.
        pub figure: String,
        /// The ratio to the baseline, or a detail.
        pub ratio: String,
    }

    /// Prints `rows` as the Markdown table BENCHMARKS.md quotes, under a
    /// header naming the three columns.
    pub fn print_table(columns: [&str; 3], rows: &[Row]) {
        println!("| {} | {} | {} |", columns[0], columns[1], columns[2]);
        println!("|---|---|---|");
        for r in rows {
            println!("| {} | {} | {} |", r.what, r.figure, r.ratio);
        }
    }

    /// Runs one closure per thread, the threads released together by a
    /// barrier, and returns what each returned, in thread order.
    pub fn together<R, F>(threads: usize, make: impl Fn() -> F) -> Vec<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let barrier = Arc::new(Barrier::new(threads + 1));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let f = make();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    f()
                })
            })
            .collect();
        barrier.wait();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// Nanoseconds per call of the closures `make` builds, one per thread,
    /// `per_thread` calls each, all started together; the slowest thread's
    /// time over all calls.
    pub fn cost<F>(threads: usize, per_thread: u64, make: impl Fn() -> F) -> f64
    where
        F: FnMut() -> u64 + Send + 'static,
    {
        let took = together(threads, || {
            let mut f = make();
            move || {
                let start = Instant::now();
                for _ in 0..per_thread {
                    black_box(f());
                }
                start.elapsed()
            }
        });
        per_call_ns(took.into_iter().max().unwrap(), per_thread * threads as u64)
    }

    /// Nanoseconds per call when `calls` calls took `took` in all.
    pub fn per_call_ns(took: Duration, calls: u64) -> f64 {
        took.as_nanos() as f64 / calls as f64
    }

    /// The baseline of the in-process figures: the median nanoseconds per
    /// `fetch_add` on one `AtomicU64` shared by `threads` threads, over `runs`
    /// runs of `per_thread` calls each.
    pub fn fetch_add_ns(threads: usize, per_thread: u64, runs: usize) -> f64 {
        median(
            (0..runs)
                .map(|_| {
                    let c = Arc::new(AtomicU64::new(0));
                    cost(threads, per_thread, || {
                        let c = c.clone();
                        move || c.fetch_add(1, Ordering::Relaxed)
                    })
                })
                .collect(),
        )
    }

    /// The baseline row for [`fetch_add_ns`]'s figure.
    pub fn fetch_add_row(threads: usize, ns: f64) -> Row {
        Row {
            what: format!("`AtomicU64::fetch_add`, {threads} thread(s) (baseline)"),
            figure: format!("{ns:.1} ns/ID"),
            ratio: "1.00×".into(),
        }
    }
}
