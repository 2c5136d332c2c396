//! [`PrivateCluster`]: a coordinator as production runs it, a 3-member etcd
//! cluster or a 3-server ZooKeeper ensemble, started on loopback by the
//! project's own scripts (`scripts/etcd-cluster`, `scripts/zookeeper-cluster`)
//! in a temporary directory and stopped on drop, for tests that lose a
//! leader or a majority.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{FORK_GUARD, require_service};

/// Which cluster a [`PrivateCluster`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterKind {
    /// etcd, 3 members (`scripts/etcd-cluster`).
    Etcd,
    /// ZooKeeper, 3 servers (`scripts/zookeeper-cluster`).
    ZooKeeper,
}

impl ClusterKind {
    fn script(self) -> &'static str {
        match self {
            ClusterKind::Etcd => "etcd-cluster",
            ClusterKind::ZooKeeper => "zookeeper-cluster",
        }
    }

    /// The variable the script's `.env` file sets to the client addresses.
    fn variable(self) -> &'static str {
        match self {
            ClusterKind::Etcd => "IDMINT_TEST_ETCD_ENDPOINTS",
            ClusterKind::ZooKeeper => "IDMINT_TEST_ZOOKEEPER_ENSEMBLE",
        }
    }
}

/// A private 3-member cluster, stopped (by its script) on drop.
#[derive(Debug)]
pub struct PrivateCluster {
    kind: ClusterKind,
    dir: tempfile::TempDir,
    members: Vec<String>,
}

impl PrivateCluster {
    /// Starts the cluster and waits until it has a leader, or returns `None`
    /// after a loud SKIPPED line when its software is not installed (under
    /// `CI=true` that panics instead).
    ///
    /// # Panics
    /// When the software is installed but the cluster does not start.
    pub fn start(kind: ClusterKind) -> Option<PrivateCluster> {
        let check = run(kind, &["check", "."]);
        if let Err(why) = &check {
            eprintln!("{why}");
        }
        let name = format!("{} (scripts/{} check)", kind.script(), kind.script());
        if !require_service(&name, check.is_ok()) {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("idmint-{}-", kind.script()))
            .tempdir()
            .unwrap();
        let mut cluster = PrivateCluster {
            kind,
            dir,
            members: Vec::new(),
        };
        cluster.script(&["start"]);
        let env = cluster.dir.path().join(format!("{}.env", kind.script()));
        let text = std::fs::read_to_string(&env)
            .unwrap_or_else(|e| panic!("{} was not written: {e}", env.display()));
        let prefix = format!("{}=", kind.variable());
        let list = text
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{} has no {prefix}: {text:?}", env.display()));
        cluster.members = list.split(',').map(str::to_owned).collect();
        let distinct: std::collections::HashSet<&String> = cluster.members.iter().collect();
        assert_eq!(
            distinct.len(),
            cluster.members.len(),
            "scripts/{} gave two members one address: {list}",
            kind.script()
        );
        Some(cluster)
    }

    /// The members' client addresses, in member order: etcd endpoints
    /// (`http://127.0.0.1:PORT`) or ZooKeeper `127.0.0.1:PORT`s.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The members' client addresses comma-separated (a ZooKeeper connect
    /// string).
    pub fn connect_string(&self) -> String {
        self.members.join(",")
    }

    /// The directory the cluster lives in: the `DIR` its script takes, for
    /// a command that acts on the cluster from another process
    /// (`scripts/etcd-cluster kill leader DIR`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The script that runs the cluster (`scripts/etcd-cluster`,
    /// `scripts/zookeeper-cluster`), absolute.
    pub fn script_path(&self) -> PathBuf {
        script_path(self.kind)
            .canonicalize()
            .unwrap_or_else(|_| script_path(self.kind))
    }

    /// The leader's member number (1 to 3).
    pub fn leader(&self) -> usize {
        self.script(&["leader"]).parse().expect("a member number")
    }

    /// SIGKILLs the leader; returns its member number.
    pub fn kill_leader(&self) -> usize {
        self.script(&["kill", "leader"])
            .parse()
            .expect("a member number")
    }

    /// SIGKILLs member `n` (1 to 3).
    pub fn kill(&self, n: usize) {
        self.script(&["kill", &n.to_string()]);
    }

    /// Starts member `n` again on its ports and data; it rejoins.
    pub fn revive(&self, n: usize) {
        self.script(&["revive", &n.to_string()]);
    }

    fn script(&self, args: &[&str]) -> String {
        let dir = self.dir.path().to_string_lossy().into_owned();
        let mut all: Vec<&str> = args.to_vec();
        all.push(&dir);
        run(self.kind, &all).unwrap_or_else(|why| panic!("{why}"))
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let dir = self.dir.path().to_string_lossy().into_owned();
        if let Err(why) = run(self.kind, &["stop", &dir]) {
            eprintln!("{why}");
        }
    }
}

fn script_path(kind: ClusterKind) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(kind.script())
}

/// Runs `scripts/<kind> args...`; its output, or the error text.
fn run(kind: ClusterKind, args: &[&str]) -> Result<String, String> {
    let out = {
        let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
        Command::new(script_path(kind))
            .args(args)
            .output()
            .map_err(|e| format!("scripts/{} does not run: {e}", kind.script()))?
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "scripts/{} {} failed ({}): {}",
            kind.script(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
