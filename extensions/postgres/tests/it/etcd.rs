//! A private single-member etcd started by `scripts/etcd` on free loopback
//! ports, which a test may stop and start again (same ports, same data).
//! Stopped, and its directory removed, on drop.
//!
//! The workspace's tests reach the same script through `idmint-testkit`;
//! this crate stays outside the workspace and does not build that one, so
//! the few lines it needs are here, with the same rule: under `CI=true` a
//! missing etcd fails the test, elsewhere it is skipped loudly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Etcd {
    dir: PathBuf,
    endpoint: String,
}

fn script(args: &[&str]) -> std::process::Output {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/etcd"))
        .args(args)
        .output()
        .expect("running scripts/etcd")
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

impl Etcd {
    /// A new etcd in a fresh directory named after `name`; `None` (after a
    /// loud SKIPPED) when etcd is not installed and `CI` is not `true`.
    pub fn start(name: &str) -> Option<Etcd> {
        let dir =
            std::env::temp_dir().join(format!("wtp-idmint-pg-etcd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.to_str().unwrap();
        let check = script(&["check", d]);
        if !require_service(
            "etcd",
            check.status.success(),
            String::from_utf8_lossy(&check.stderr).trim(),
        ) {
            return None;
        }
        let out = script(&["start", d]);
        assert!(
            out.status.success(),
            "scripts/etcd start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let endpoint = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        Some(Etcd { dir, endpoint })
    }

    /// The client endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops etcd (SIGTERM, waited for).
    pub fn stop(&self) {
        let out = script(&["stop", self.dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts it again on the same ports with the same data.
    pub fn restart(&self) {
        let out = script(&["restart", self.dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = script(&["stop", self.dir.to_str().unwrap()]);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
