//! Private instances of the services, for tests that stop them mid-run: each
//! one started by the project's own script (`scripts/etcd`, `scripts/zookeeper`,
//! `scripts/postgres`, `scripts/mariadb`, `scripts/redis`) in a temporary
//! directory, on a free loopback port, and stopped when dropped. The shared
//! instances other tests use are never touched.
//!
//! Every script takes `check|start|stop|restart DIR`; `start` writes
//! `DIR/<name>.env` with the variable naming the instance (as `scripts/test`
//! sources it for the shared ones), and `restart` starts again on the same port
//! and data.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{FORK_GUARD, require_service};

/// One of the services a script under `scripts/` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Etcd,
    ZooKeeper,
    Postgres,
    MariaDb,
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
