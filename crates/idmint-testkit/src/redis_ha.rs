//! The Redis topologies production runs, started for tests by the project's
//! scripts on loopback: [`SentinelDeployment`] (a primary, 2 replicas and 3
//! sentinels, `scripts/redis-sentinel`) and [`ClusterDeployment`] (a 6-node
//! Redis Cluster, 3 masters and 3 replicas, `scripts/redis-cluster`). Each
//! lives in a temporary directory and is stopped on drop; a test that needs
//! one skips loudly when Redis is not installed (fails under `CI=true`, see
//! [`require_service`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{FORK_GUARD, require_service};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name)
}

/// Runs `scripts/<name> <args..>`; its stdout, trimmed, or the error text.
fn run(name: &str, args: &[&str]) -> Result<String, String> {
    let out = {
        let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
        Command::new(script(name))
            .args(args)
            .output()
            .map_err(|e| format!("scripts/{name} does not run: {e}"))?
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "scripts/{name} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Starts `scripts/<name>` in a new temporary directory; `None` after a loud
/// SKIPPED line when its check fails outside CI.
fn start(name: &str) -> Option<(tempfile::TempDir, String)> {
    let check = run(name, &["check", "."]);
    if let Err(why) = &check {
        eprintln!("{why}");
    }
    if !require_service(&format!("{name} (scripts/{name} check)"), check.is_ok()) {
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix(&format!("idmint-{name}-"))
        .tempdir()
        .expect("a temporary directory");
    let dir_arg = dir
        .path()
        .to_str()
        .expect("a UTF-8 temporary path")
        .to_owned();
    match run(name, &["start", &dir_arg]) {
        Ok(env) => Some((dir, env)),
        Err(why) => {
            let _ = run(name, &["stop", &dir_arg]);
            panic!("{why}");
        }
    }
}

fn var<'a>(env: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}=");
    env.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("the script printed no {name}: {env:?}"))
}

fn port(text: &str) -> u16 {
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a port: {text:?}"))
}

/// A Redis primary with 2 replicas and 3 sentinels (master name in
/// [`SentinelDeployment::master_name`]), persistence off; stopped on drop.
#[derive(Debug)]
pub struct SentinelDeployment {
    dir: tempfile::TempDir,
    sentinels: Vec<String>,
    master_name: String,
}

impl SentinelDeployment {
    /// Starts it (about 3 s), or `None` after a SKIPPED line.
    ///
    /// # Panics
    /// When Redis is installed but the deployment does not start.
    pub fn start() -> Option<SentinelDeployment> {
        let (dir, env) = start("redis-sentinel")?;
        let sentinels = var(&env, "IDMINT_TEST_REDIS_SENTINELS")
            .split(',')
            .map(str::to_owned)
            .collect();
        let master_name = var(&env, "IDMINT_TEST_REDIS_SENTINEL_MASTER").to_owned();
        Some(SentinelDeployment {
            dir,
            sentinels,
            master_name,
        })
    }

    /// The sentinels, `127.0.0.1:PORT` each.
    pub fn sentinels(&self) -> &[String] {
        &self.sentinels
    }

    /// The master name the sentinels monitor.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    fn run(&self, args: &[&str]) -> String {
        let dir = self.dir.path().to_str().expect("a UTF-8 path");
        let mut all = vec![args[0], dir];
        all.extend_from_slice(&args[1..]);
        run("redis-sentinel", &all).unwrap_or_else(|why| panic!("{why}"))
    }

    /// The primary's port, as the sentinels name it.
    pub fn primary(&self) -> u16 {
        port(&self.run(&["primary"]))
    }

    /// The replicas' ports.
    pub fn replicas(&self) -> Vec<u16> {
        self.run(&["replicas"]).lines().map(port).collect()
    }

    /// SIGKILLs the primary; its port.
    pub fn kill_primary(&self) -> u16 {
        port(&self.run(&["kill-primary"]))
    }

    /// SIGSTOPs the data node on `port` (it stops replicating).
    pub fn pause(&self, port: u16) {
        self.run(&["pause", &port.to_string()]);
    }

    /// SIGCONTs the data node on `port`.
    pub fn resume(&self, port: u16) {
        self.run(&["resume", &port.to_string()]);
    }

    /// Stops the primary's replication, so that what it is told next is lost
    /// by a failover: waits until its replicas have every earlier write,
    /// then SIGSTOPs them and closes their links (a
    /// stopped replica's kernel would still take in what the primary sends,
    /// and apply it once resumed). Returns the replicas' ports.
    pub fn lag_replicas(&self) -> Vec<u16> {
        let replicas = self.replicas();
        self.run(&["sync", &self.primary().to_string()]);
        for &port in &replicas {
            self.pause(port);
        }
        self.run(&["cut", &self.primary().to_string()]);
        replicas
    }

    /// Waits (bounded) until the sentinels name a primary other than `old`
    /// that answers as master; its port.
    pub fn wait_failover(&self, old: u16) -> u16 {
        port(&self.run(&["wait-failover", &old.to_string()]))
    }
}

impl Drop for SentinelDeployment {
    fn drop(&mut self) {
        let dir = self.dir.path().to_str().unwrap_or(".").to_owned();
        if let Err(why) = run("redis-sentinel", &["stop", &dir]) {
            eprintln!("{why}");
        }
    }
}

/// A 6-node Redis Cluster (3 masters, 3 replicas), persistence off; stopped
/// on drop.
#[derive(Debug)]
pub struct ClusterDeployment {
    dir: tempfile::TempDir,
    nodes: Vec<String>,
}

impl ClusterDeployment {
    /// Starts it (about 3 s), or `None` after a SKIPPED line.
    ///
    /// # Panics
    /// When Redis is installed but the cluster does not start.
    pub fn start() -> Option<ClusterDeployment> {
        let (dir, env) = start("redis-cluster")?;
        let nodes = var(&env, "IDMINT_TEST_REDIS_CLUSTER_NODES")
            .split(',')
            .map(str::to_owned)
            .collect();
        Some(ClusterDeployment { dir, nodes })
    }

    /// All six nodes, `127.0.0.1:PORT` each.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    fn run(&self, args: &[&str]) -> String {
        let dir = self.dir.path().to_str().expect("a UTF-8 path");
        let mut all = vec![args[0], dir];
        all.extend_from_slice(&args[1..]);
        run("redis-cluster", &all).unwrap_or_else(|why| panic!("{why}"))
    }

    /// The port of the master serving `key`'s slot.
    pub fn master(&self, key: &str) -> u16 {
        port(&self.run(&["master", key]))
    }

    /// The ports of the replicas of the master serving `key`'s slot.
    pub fn replicas(&self, key: &str) -> Vec<u16> {
        self.run(&["replicas", key]).lines().map(port).collect()
    }

    /// SIGKILLs the master serving `key`'s slot; its port.
    pub fn kill_master(&self, key: &str) -> u16 {
        port(&self.run(&["kill-master", key]))
    }

    /// SIGSTOPs the node on `port`.
    pub fn pause(&self, port: u16) {
        self.run(&["pause", &port.to_string()]);
    }

    /// SIGCONTs the node on `port`.
    pub fn resume(&self, port: u16) {
        self.run(&["resume", &port.to_string()]);
    }

    /// Stops the replication of the master serving `key`'s slot, as
    /// [`SentinelDeployment::lag_replicas`] does; returns its replicas' ports.
    pub fn lag_replicas(&self, key: &str) -> Vec<u16> {
        let replicas = self.replicas(key);
        self.run(&["sync", &self.master(key).to_string()]);
        for &port in &replicas {
            self.pause(port);
        }
        self.run(&["cut", &self.master(key).to_string()]);
        replicas
    }

    /// Waits (bounded) until a node other than `old` serves `key`'s slot as
    /// master and the cluster is ok; its port.
    pub fn wait_failover(&self, key: &str, old: u16) -> u16 {
        port(&self.run(&["wait-failover", key, &old.to_string()]))
    }
}

impl Drop for ClusterDeployment {
    fn drop(&mut self) {
        let dir = self.dir.path().to_str().unwrap_or(".").to_owned();
        if let Err(why) = run("redis-cluster", &["stop", &dir]) {
            eprintln!("{why}");
        }
    }
}
