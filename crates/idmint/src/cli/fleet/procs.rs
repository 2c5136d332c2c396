//! Nodes as real `idmint serve` processes (this binary), each with its own
//! data directory and HTTP port, all on the one config. A node serves once
//! it has written its ready file (`--ready-file`), which the server does
//! only after its worker ID is claimed and its first mark persisted.
//!
//! A kill is SIGKILL: nothing is released, and the coordinator learns of it
//! only when the lease runs out. A stop is SIGTERM, as Kubernetes sends.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::coordinator::process_usage;
use super::progress::Progress;
use super::starts::Starts;

/// A node process.
struct Proc {
    child: Child,
    ready: PathBuf,
    log: PathBuf,
    /// Its HTTP address, once it serves.
    addr: Option<String>,
}

/// The process fleet.
pub struct Processes {
    exe: PathBuf,
    config: PathBuf,
    /// Overrides for every node (`IDMINT_…` variables).
    env: Vec<(String, String)>,
    dir: PathBuf,
    started: usize,
    nodes: VecDeque<Proc>,
}

impl Processes {
    /// Nodes of this binary on `config` with `env` set, with their data
    /// under `dir`.
    pub fn new(config: &Path, env: Vec<(String, String)>, dir: &Path) -> Result<Processes> {
        Ok(Processes {
            exe: std::env::current_exe().context("finding this binary")?,
            config: config.to_owned(),
            env,
            dir: dir.to_owned(),
            started: 0,
            nodes: VecDeque::new(),
        })
    }

    /// How many nodes serve.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Starts `count` processes at once and waits, up to `within`, for each
    /// to serve; times are measured from `from`.
    pub fn start(
        &mut self,
        count: usize,
        from: Instant,
        within: Duration,
        progress: &Progress,
    ) -> Result<Starts> {
        let mut pending = Vec::with_capacity(count);
        for _ in 0..count {
            pending.push(self.spawn()?);
        }
        let mut starts = Starts::default();
        let deadline = Instant::now() + within;
        while !pending.is_empty() {
            let mut waiting = Vec::with_capacity(pending.len());
            for mut p in pending {
                if let Some(addr) = std::fs::read_to_string(&p.ready)
                    .ok()
                    .and_then(|t| t.lines().next().map(str::to_owned))
                {
                    p.addr = Some(addr);
                    starts.took.push(from.elapsed());
                    progress.inc();
                    self.nodes.push_back(p);
                } else if let Ok(Some(status)) = p.child.try_wait() {
                    progress.inc();
                    starts
                        .refused
                        .push(format!("exited ({status}): {}", last_line(&p.log)));
                } else if Instant::now() >= deadline {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    progress.inc();
                    starts.refused.push(format!(
                        "not serving after {within:?}: {}",
                        last_line(&p.log)
                    ));
                } else {
                    waiting.push(p);
                }
            }
            pending = waiting;
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(starts)
    }

    fn spawn(&mut self) -> Result<Proc> {
        let n = self.started;
        self.started += 1;
        let dir = self.dir.join(format!("node-{n}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ready = dir.join("ready");
        let log = dir.join("log");
        let stderr = std::fs::File::create(&log)?;
        let child = Command::new(&self.exe)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--http-addr", "127.0.0.1:0", "--ready-file"])
            .arg(&ready)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("IDMINT_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} serve", self.exe.display()))?;
        Ok(Proc {
            child,
            ready,
            log,
            addr: None,
        })
    }

    /// SIGKILLs `count` nodes spread over the fleet.
    pub fn kill(&mut self, count: usize) -> usize {
        let count = count.min(self.nodes.len());
        if count == 0 {
            return 0;
        }
        let every = self.nodes.len() / count;
        let mut kept = VecDeque::with_capacity(self.nodes.len() - count);
        let mut killed = 0;
        for (i, mut p) in std::mem::take(&mut self.nodes).into_iter().enumerate() {
            if killed < count && i % every == 0 {
                let _ = p.child.kill();
                let _ = p.child.wait();
                killed += 1;
            } else {
                kept.push_back(p);
            }
        }
        self.nodes = kept;
        killed
    }

    /// The HTTP addresses of the serving nodes.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().filter_map(|p| p.addr.clone()).collect()
    }

    /// SIGKILLs the node serving on `addr`.
    pub fn kill_at(&mut self, addr: &str) -> bool {
        let Some(i) = self
            .nodes
            .iter()
            .position(|p| p.addr.as_deref() == Some(addr))
        else {
            return false;
        };
        if let Some(mut p) = self.nodes.remove(i) {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        true
    }

    /// The memory every node process takes now (proportional set size,
    /// bytes).
    pub fn memory(&self) -> Option<u64> {
        self.nodes
            .iter()
            .map(|p| process_usage(p.child.id()).1)
            .sum()
    }

    /// SIGTERMs every node and waits for it to exit.
    pub fn stop_all(&mut self) {
        for p in &self.nodes {
            // Our own child, not yet waited for: the pid is still its.
            if let Some(pid) = rustix::process::Pid::from_raw(p.child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        for mut p in self.nodes.drain(..) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match p.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for p in &mut self.nodes {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// The last line a node logged, for a refusal's reason.
fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .ok()
        .and_then(|t| {
            t.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "(nothing logged)".to_owned())
}
