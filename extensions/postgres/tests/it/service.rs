//! A private single-member etcd (`scripts/etcd`) or ZooKeeper
//! (`scripts/zookeeper`) on free loopback ports, which a test may stop and
//! start again (same ports, same data). Stopped, and its directory removed,
//! on drop.
//!
//! The workspace's tests reach the same scripts through `idmint-testkit`;
//! this crate stays outside the workspace and does not build that one, so
//! the few lines it needs are here, with the same rule: under `CI=true` a
//! missing service fails the test, elsewhere it is skipped loudly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Service {
    /// `etcd` or `zookeeper`: the script under `scripts/`.
    kind: &'static str,
    dir: PathBuf,
    address: String,
}

fn script(kind: &str, args: &[&str]) -> std::process::Output {
    Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts")
            .join(kind),
    )
    .args(args)
    .output()
    .unwrap_or_else(|e| panic!("running scripts/{kind}: {e}"))
}

/// Whether a test may go on without `name`: under `CI=true` a missing
/// service fails the test; elsewhere it prints SKIPPED to the real stderr
/// (the harness hides a passing test's output) and the test returns.
pub fn require_service(name: &str, available: bool, why: &str) -> bool {
    if available {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{name} is not available and CI=true: {why}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "!!!! SKIPPED: {name} is not available ({why}); this test did not run (set CI=true to fail instead)"
    );
    false
}

impl Service {
    /// A new etcd in a fresh directory named after `name`; `None` (after a
    /// loud SKIPPED) when etcd is not installed and `CI` is not `true`.
    pub fn etcd(name: &str) -> Option<Service> {
        Service::start("etcd", name)
    }

    /// A new ZooKeeper, as [`Service::etcd`].
    pub fn zookeeper(name: &str) -> Option<Service> {
        Service::start("zookeeper", name)
    }

    fn start(kind: &'static str, name: &str) -> Option<Service> {
        let dir = std::env::temp_dir().join(format!(
            "wtp-idmint-pg-{kind}-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.to_str().unwrap();
        let check = script(kind, &["check", d]);
        if !require_service(
            kind,
            check.status.success(),
            String::from_utf8_lossy(&check.stderr).trim(),
        ) {
            return None;
        }
        let out = script(kind, &["start", d]);
        assert!(
            out.status.success(),
            "scripts/{kind} start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Both write `IDMINT_TEST_..=ADDRESS` into DIR/KIND.env.
        let env = std::fs::read_to_string(dir.join(format!("{kind}.env"))).unwrap();
        let address = env
            .lines()
            .find_map(|l| l.split_once('=').map(|(_, v)| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("no address in {kind}.env: {env}"));
        Some(Service { kind, dir, address })
    }

    /// The client address: `http://127.0.0.1:PORT` for etcd,
    /// `127.0.0.1:PORT` for ZooKeeper.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Stops the service (SIGTERM, waited for).
    pub fn stop(&self) {
        let out = script(self.kind, &["stop", self.dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts it again on the same ports with the same data.
    pub fn restart(&self) {
        let out = script(self.kind, &["restart", self.dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = script(self.kind, &["stop", self.dir.to_str().unwrap()]);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
