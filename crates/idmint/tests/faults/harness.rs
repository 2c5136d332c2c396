//! The fault suite's harness: real `idmint serve` processes ([`Node`]), a
//! load that records every ID it is handed ([`Load`]), and the checks of
//! docs/design.md §1 over what was recorded ([`Checker`] → [`Outcome`]).
//!
//! A scenario is a plain function `fn(&Ctx) -> anyhow::Result<Outcome>`:
//!
//! ```text
//! let config = ServeConfig::new(Registry::Etcd.coordinator(ctx)?, ctx.unique("cluster"))
//!     .with_segment_store(ctx.shared_postgres()?, ctx.unique("alloc"))
//!     .with_segment_key("order", 100);
//! let mut a = Node::new(ctx, "a", &config, 0)?;
//! a.start()?;
//! let load = Load::start(vec![Target::snowflake(&a, "sf", config.layout()?)], LoadOptions::new());
//! load.wait_ok(Some("a"), 50, Duration::from_secs(30))?;
//! a.kill()?;
//! a.start()?;
//! let record = load.finish();
//! Ok(Checker::new("no duplicates across a restart").check(&record))
//! ```
//!
//! # What is recorded
//! Every response (or failure) of every request, with the stream that sent
//! it, the node and key, the real time it was sent and received, the node's
//! clock offset ([`FakeClock`]) at its start, and the IDs (an ID is kept the
//! moment its response is read, so IDs handed out just before a process died
//! are in the record) or the error code: the JSON `error.code` of an HTTP
//! error, `connect` (refused), `timeout`, `io` (the connection broke mid
//! request), or `bad_body` (a 200 whose body is not IDs, or an ID of 0 or
//! at/above 2^63, which fails the scenario).
//!
//! # What is checked
//! - **Duplicates**: snowflake IDs of every key and node form one space (one
//!   fleet, one ID space); each segment key is its own; monotonic IDs of
//!   every key and node are one space (one oracle).
//! - **Monotonicity**: per stream (one sequential client per node and key is
//!   "per node"), each ID above the one before, across the node's restarts;
//!   and per snowflake worker across every node that held it: an ID received
//!   before another was requested must be below it (so a new holder of a worker
//!   ID issues above the old holder, whichever node).
//! - **Time**: each snowflake ID's decoded time (through `Layout::decode`,
//!   as `idmint decode` does) lies within the node's clock at send and receive,
//!   widened by the configured bounds ([`Checker::with_time_bounds`]); the
//!   node's clock is real time plus its [`FakeClock`] offset when it started,
//!   since the server reads the wall clock once and then runs on the
//!   monotonic clock (a scenario with a node on `snowflake.clock = "wall"`
//!   widens that node's bounds with [`Checker::with_node_time_bounds`] and
//!   checks its times itself).
//! - **Real-time order** of `monotonic` keys (the timestamp oracle), across
//!   every stream, node and monotonic key: for replies A and B where A was
//!   read before B was sent, every ID of B is above every ID of A, and the
//!   IDs of one reply strictly increase (linearizability; O(n log n) by
//!   prefix maxima over replies sorted by receipt). Counted in the `mono`
//!   column: one per request below an earlier one, one per pair out of order
//!   within a reply. Their decoded time lies within real time, 1 s behind
//!   and [`check::MONOTONIC_AHEAD`] ahead unless a scenario widens it.
//! - **Service**: the longest time a stream went without a successful
//!   response (from its first success to the end of the load).

pub mod check;
pub mod config;
pub mod load;
pub mod node;

use std::collections::HashMap;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use idmint_testkit::{PrivateService, Service};
use jiff::Timestamp;

pub use self::check::{Checker, Outcome};
use self::config::host_port;
pub use self::config::{Coordinator, Registry, ServeConfig};
pub use self::load::{Load, LoadOptions, Record, Target};
pub use self::node::Node;
pub use crate::faketime::FakeClock;

/// How much to do: the reduced run of `cargo test`, or the full run of
/// `scripts/faults`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every scenario with small counts and short phases (CI).
    Reduced,
    /// Larger counts and longer phases (`-- --full`).
    Full,
}

impl Mode {
    /// `reduced` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Reduced => "reduced",
            Mode::Full => "full",
        }
    }
}

/// A scenario: a name (with its variant in brackets, `sigkill-restart-behind[etcd]`)
/// and the function that runs it.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// The name, as printed and as filtered on.
    pub name: &'static str,
    /// Runs the scenario.
    pub run: fn(&Ctx) -> Result<Outcome>,
}

/// The error a scenario returns when a service it needs is missing and the run
/// is not under `CI=true`: the scenario is reported SKIPPED, not failed.
#[derive(Debug)]
pub struct Skipped(pub String);

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "skipped: {}", self.0)
    }
}

impl std::error::Error for Skipped {}

/// What scenarios share across a run: the private coordinators, started on
/// first use and kept for the next scenario (a scenario that stops one starts
/// it again before it ends).
#[derive(Debug, Default)]
pub struct Services {
    started: Mutex<HashMap<&'static str, Arc<PrivateService>>>,
}

/// What a scenario gets: the mode, its own directory, unique names, and the
/// services.
#[derive(Debug)]
pub struct Ctx {
    /// Reduced or full.
    pub mode: Mode,
    name: String,
    dir: PathBuf,
    services: Arc<Services>,
    seq: AtomicU32,
}

impl Ctx {
    /// A context for scenario `name`, with its files under `dir`.
    pub fn new(mode: Mode, name: &str, dir: PathBuf, services: Arc<Services>) -> Ctx {
        Ctx {
            mode,
            name: name.to_owned(),
            dir,
            services,
            seq: AtomicU32::new(0),
        }
    }

    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `reduced` in reduced mode, `full` in full mode.
    pub fn scale<T>(&self, reduced: T, full: T) -> T {
        match self.mode {
            Mode::Reduced => reduced,
            Mode::Full => full,
        }
    }

    /// A fresh directory `<scenario dir>/<name>` (created).
    ///
    /// # Errors
    /// When it can't be created.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// A name no other scenario or run uses, fit for a SQL table, an etcd
    /// prefix or a Redis key: `f<pid>_<millis>_<n>_<base>` with anything but
    /// ASCII letters, digits and `_` in `base` turned into `_`.
    pub fn unique(&self, base: &str) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let stamp = Timestamp::now().as_millisecond() % 100_000_000;
        let clean: String = base
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("f{}_{stamp}_{n}_{clean}", std::process::id())
    }

    /// A private instance of `service` (started on first use, shared by the
    /// run's scenarios; stopped when the run ends).
    ///
    /// # Errors
    /// [`Skipped`] when its software is not installed (not under `CI=true`,
    /// where that panics, failing the scenario).
    pub fn private(&self, service: Service) -> Result<Arc<PrivateService>> {
        let key = service_name(service);
        let mut started = self
            .services
            .started
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(found) = started.get(key) {
            return Ok(found.clone());
        }
        let Some(instance) = PrivateService::start(service) else {
            return Err(Skipped(format!("{key} is not installed")).into());
        };
        let instance = Arc::new(instance);
        started.insert(key, instance.clone());
        Ok(instance)
    }

    /// The machine's PostgreSQL (`IDMINT_TEST_POSTGRES_URL` or the test
    /// kit's), for what no scenario stops (segment stores, mostly).
    ///
    /// # Errors
    /// [`Skipped`] when it does not answer (not under `CI=true`).
    pub fn shared_postgres(&self) -> Result<String> {
        shared(
            "PostgreSQL",
            "IDMINT_TEST_POSTGRES_URL",
            idmint_testkit::POSTGRES_URL,
        )
    }
}

fn service_name(service: Service) -> &'static str {
    match service {
        Service::Etcd => "etcd",
        Service::ZooKeeper => "zookeeper",
        Service::Postgres => "postgres",
        Service::MariaDb => "mariadb",
        Service::Redis => "redis",
    }
}

/// A shared service's URL when it answers on its port.
fn shared(name: &str, var: &str, default: &str) -> Result<String> {
    let url = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    let reachable = host_port(&url).is_some_and(|hp| {
        hp.parse()
            .is_ok_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok())
    });
    if idmint_testkit::require_service(name, reachable) {
        Ok(url)
    } else {
        Err(Skipped(format!("{name} is not reachable at {url}")).into())
    }
}

/// Locks `m`, carrying on past a panicked holder (the data are records and
/// flags, fine to read after a panic).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
