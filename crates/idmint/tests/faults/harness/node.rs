//! [`Node`]: a real `idmint serve` process, started, killed, stopped,
//! continued and restarted by the scenarios.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use jiff::Timestamp;

use super::config::ServeConfig;
use super::{Ctx, FakeClock};

/// What a [`Load`] needs of a node: its name, address and clock offset,
/// shared with the [`Node`] across its restarts.
#[derive(Debug)]
pub struct NodeInfo {
    name: String,
    addr: RwLock<String>,
    offset_ms: AtomicI64,
}

impl NodeInfo {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.addr.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A node known by name only (no process): for records made up to test
    /// the checker.
    pub fn detached(name: &str) -> Arc<NodeInfo> {
        Arc::new(NodeInfo {
            name: name.to_owned(),
            addr: RwLock::new(String::new()),
            offset_ms: AtomicI64::new(0),
        })
    }

    /// The node's clock offset from real time (ms) when it last started:
    /// the server reads the wall clock once, then runs on the monotonic clock.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }
}

/// Why a node exited instead of serving: the error code its start failed
/// with (`clock_behind_mark`, `clock_skew`, `workers_exhausted`, ...), read
/// from its `error:` line.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The code (`start_failed` when the line matches no known error).
    pub code: String,
    /// The process's exit status.
    pub status: ExitStatus,
    /// The `error:` line, or the log's tail.
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refused to start ({}, {}): {}",
            self.code, self.status, self.message
        )
    }
}

impl std::error::Error for Refusal {}

/// What [`Node::start_retrying`] went through.
#[derive(Debug)]
pub struct Attempts {
    /// The codes of the refusals retried.
    pub retried: Vec<String>,
    /// The last attempt: serving, or refused.
    pub result: std::result::Result<(), Refusal>,
}

/// The start-error code of an `error:` line of `idmint serve`.
fn refusal_code(line: &str) -> &'static str {
    const CODES: &[(&str, &str)] = &[
        // The segment store forgot what this node issued (issue 23); the
        // floor's message also says the store "was reset or restored".
        ("below this node's floor", "key_below_floor"),
        ("store was reset: its epoch marker", "store_reset"),
        ("stored high-water mark", "clock_behind_mark"),
        ("clock is off by", "clock_skew"),
        ("worker IDs of the", "workers_exhausted"),
        ("claims are held", "registry_held"),
        ("is already held by node", "worker_taken"),
        ("timed out after", "registry_timeout"),
        ("cannot listen on", "bind"),
        ("lease on worker", "lease_lost"),
        ("already locked", "data_dir_locked"),
        ("config:", "config"),
    ];
    CODES
        .iter()
        .find(|(pattern, _)| line.contains(pattern))
        .map_or("start_failed", |(_, code)| code)
}

/// A real `idmint serve` process on a fixed loopback port (kept across
/// restarts, so the node's identity stays), with its config,
/// data directory, log and optional [`FakeClock`]. Killed on drop.
#[derive(Debug)]
pub struct Node {
    info: Arc<NodeInfo>,
    dir: PathBuf,
    data_dir: PathBuf,
    config_path: PathBuf,
    log_path: PathBuf,
    clock: Option<FakeClock>,
    child: Option<Child>,
    stopped: bool,
    starts: u32,
}

impl Node {
    /// A node named `name` (unique in the scenario) running `config` as node
    /// number `node_idx` (see [`ServeConfig::toml`]); not started.
    ///
    /// # Errors
    /// When its directory can't be made or no port is free.
    pub fn new(ctx: &Ctx, name: &str, config: &ServeConfig, node_idx: u32) -> Result<Node> {
        Node::with_toml(ctx, name, &config.toml(node_idx))
    }

    /// A node running the config text `toml`; not started.
    ///
    /// # Errors
    /// When its directory can't be made or no port is free.
    pub fn with_toml(ctx: &Ctx, name: &str, toml: &str) -> Result<Node> {
        let dir = ctx.dir(&format!("node-{name}"))?;
        let config_path = dir.join("idmint.toml");
        std::fs::write(&config_path, toml)
            .with_context(|| format!("writing {}", config_path.display()))?;
        Ok(Node {
            info: Arc::new(NodeInfo {
                name: name.to_owned(),
                addr: RwLock::new(format!("127.0.0.1:{}", free_port()?)),
                offset_ms: AtomicI64::new(0),
            }),
            data_dir: dir.join("data"),
            log_path: dir.join("stderr.log"),
            config_path,
            dir,
            clock: None,
            child: None,
            stopped: false,
            starts: 0,
        })
    }

    /// Runs on `data_dir` instead of its own (a replacement on the same volume).
    pub fn with_data_dir(mut self, data_dir: &Path) -> Node {
        self.data_dir = data_dir.to_owned();
        self
    }

    /// Runs the next starts under `clock` (or the real clock with `None`).
    pub fn set_clock(&mut self, clock: Option<FakeClock>) {
        self.clock = clock;
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// What a [`Target`] needs.
    pub fn info(&self) -> Arc<NodeInfo> {
        self.info.clone()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.info.addr()
    }

    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr())
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The config file it runs.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The log (stderr of every start, each headed by a `==== start` line).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether the log says `text` within `within`: lines some time after an
    /// event (the server's lease watcher looks every 250 ms) are waited for.
    pub fn log_says(&self, text: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.log().contains(text) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process ID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs (stopped counts as running).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Starts the process and waits (up to 60 s) until it serves.
    ///
    /// # Errors
    /// A [`Refusal`] (downcast it) when the process exits first; other errors
    /// when it can't be spawned or does not serve in time.
    pub fn start(&mut self) -> Result<()> {
        for _ in 0..3 {
            match self.try_start()? {
                Ok(()) => return Ok(()),
                Err(refusal) if refusal.code == "bind" => {
                    // Someone took the port between runs: take another.
                    *self.info.addr.write().unwrap_or_else(|p| p.into_inner()) =
                        format!("127.0.0.1:{}", free_port()?);
                }
                Err(refusal) => return Err(refusal.into()),
            }
        }
        bail!("node {}: no port could be bound", self.name())
    }

    /// Starts the process and waits until it serves or exits: `Ok(Ok(()))`
    /// serving, `Ok(Err(refusal))` exited with the code it gave.
    ///
    /// # Errors
    /// When it is running already, can't be spawned, or neither serves nor
    /// exits within 60 s.
    pub fn try_start(&mut self) -> Result<Result<(), Refusal>> {
        if self.is_running() {
            bail!("node {} is running already", self.name());
        }
        self.starts += 1;
        let offset = self.clock.as_ref().map_or(0, FakeClock::offset_ms);
        let ready = self.dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let log_start = log.metadata().map_or(0, |m| m.len());
        writeln!(
            log,
            "==== start {} at {} on {} (clock offset {offset} ms)",
            self.starts,
            Timestamp::now(),
            self.addr()
        )?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_idmint"));
        command
            .arg("serve")
            .arg("--config")
            .arg(&self.config_path)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--http-addr")
            .arg(self.addr())
            .arg("--ready-file")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.try_clone()?);
        for (name, _) in std::env::vars() {
            if name.starts_with("IDMINT_") || name.starts_with("FAKETIME") || name == "LD_PRELOAD" {
                command.env_remove(name);
            }
        }
        command.env("IDMINT_LOG", "info");
        for (name, value) in self.clock.iter().flat_map(FakeClock::env) {
            command.env(name, value);
        }
        let child = {
            let _fork = idmint_testkit::FORK_GUARD
                .write()
                .unwrap_or_else(|p| p.into_inner());
            command.spawn().context("running idmint serve")?
        };
        self.info.offset_ms.store(offset, Ordering::SeqCst);
        self.child = Some(child);
        self.stopped = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::fs::read_to_string(&ready).is_ok_and(|t| t.ends_with('\n')) {
                return Ok(Ok(()));
            }
            let child = self.child.as_mut().ok_or_else(|| anyhow!("no child"))?;
            if let Some(status) = child.try_wait()? {
                self.child = None;
                let text = read_from(&self.log_path, log_start);
                let message = text
                    .lines()
                    .find(|l| l.starts_with("error: "))
                    .map_or_else(|| tail(&text, 10), str::to_owned);
                return Ok(Err(Refusal {
                    code: refusal_code(&message).to_owned(),
                    status,
                    message,
                }));
            }
            if Instant::now() > deadline {
                bail!(
                    "node {} did not serve within 60 s; log tail:\n{}",
                    self.name(),
                    tail(&read_from(&self.log_path, log_start), 20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts, retrying (every 250 ms, up to `within`) while the start is
    /// refused with one of `retry_on` (`workers_exhausted` while a dead node's
    /// lease runs out, say).
    ///
    /// # Errors
    /// When a start can't be made at all (see [`Node::try_start`]); a refusal
    /// is not an error but [`Attempts::result`].
    pub fn start_retrying(&mut self, retry_on: &[&str], within: Duration) -> Result<Attempts> {
        self.start_retrying_with(retry_on, within, |_| Ok(()))
    }

    /// [`Node::start_retrying`], calling `before` ahead of every attempt (to
    /// set a [`FakeClock`] relative to an event, say).
    ///
    /// # Errors
    /// As [`Node::start_retrying`], and `before`'s.
    pub fn start_retrying_with(
        &mut self,
        retry_on: &[&str],
        within: Duration,
        mut before: impl FnMut(&Node) -> Result<()>,
    ) -> Result<Attempts> {
        let deadline = Instant::now() + within;
        let mut retried = Vec::new();
        loop {
            before(self)?;
            match self.try_start()? {
                Err(r) if retry_on.contains(&r.code.as_str()) && Instant::now() < deadline => {
                    retried.push(r.code);
                    std::thread::sleep(Duration::from_millis(250));
                }
                result => return Ok(Attempts { retried, result }),
            }
        }
    }

    /// SIGKILL, and waits for the process to be gone.
    ///
    /// # Errors
    /// When it does not run.
    pub fn kill(&mut self) -> Result<()> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| anyhow!("node {} is not running", self.name()))?;
        child.kill().context("SIGKILL")?;
        child.wait().context("reaping")?;
        self.stopped = false;
        Ok(())
    }

    /// SIGSTOP: the process freezes (its sockets stay open).
    ///
    /// # Errors
    /// When it does not run.
    pub fn stop(&mut self) -> Result<()> {
        self.signal("STOP")?;
        self.stopped = true;
        Ok(())
    }

    /// SIGCONT after [`Node::stop`].
    ///
    /// # Errors
    /// When it does not run.
    pub fn cont(&mut self) -> Result<()> {
        self.signal("CONT")?;
        self.stopped = false;
        Ok(())
    }

    /// `GET /readyz`: the status code and the JSON body.
    ///
    /// # Errors
    /// When the node does not answer.
    pub fn readyz(&self) -> Result<(u16, serde_json::Value)> {
        let r = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?
            .get(self.url("/readyz"))
            .send()?;
        let status = r.status().as_u16();
        Ok((status, r.json()?))
    }

    /// Waits (polling every 50 ms, up to `within`) until `/readyz` says ready;
    /// returns the worker ID it holds.
    ///
    /// # Errors
    /// When it is not ready in time.
    pub fn wait_ready(&self, within: Duration) -> Result<u32> {
        let mut last = String::new();
        wait_for(within, Duration::from_millis(50), || match self.readyz() {
            Ok((200, body)) => Ok(body["worker"].as_u64().and_then(|w| u32::try_from(w).ok())),
            Ok((_, body)) => {
                last = body.to_string();
                Ok(None)
            }
            Err(e) => {
                last = e.to_string();
                Ok(None)
            }
        })
        .with_context(|| format!("node {} not ready: {last}", self.name()))
    }

    fn signal(&self, signal: &str) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| anyhow!("node {} is not running", self.name()))?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill -{signal} {pid} failed: {status}");
        }
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.stopped {
            let _ = self.signal("CONT");
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port nobody listens on now.
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding port 0")?;
    Ok(listener.local_addr()?.port())
}

fn read_from(path: &Path, offset: u64) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(0).min(text.len());
    String::from_utf8_lossy(&text[start..]).into_owned()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `probe` every `every` until it gives `Some`, for at most `within`.
///
/// # Errors
/// The probe's error, or a timeout.
pub fn wait_for<T>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = probe()? {
            return Ok(found);
        }
        if Instant::now() > deadline {
            bail!("not within {within:?}");
        }
        std::thread::sleep(every);
    }
}
