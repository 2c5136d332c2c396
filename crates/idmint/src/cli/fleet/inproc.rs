//! Nodes as tasks in this process: each one a [`WorkerKeeper`] with an
//! identity of its own, claiming from the real coordinator exactly as
//! `idmint serve` does (the server's own `open_registry`, generator
//! settings and keeper config), through a [`Tracked`] view of one of a few
//! shared registry clients.
//!
//! Sharing clients is what lets thousands of nodes run here: a real fleet
//! opens one client (and, on SQL, a pool of two connections) per node,
//! which a coordinator's connection limit caps long before its request
//! rate does. The requests each node makes are the same either way.
//!
//! ZooKeeper is the exception: a claim there is an ephemeral node, held by
//! the client's session rather than renewed by calls, so each node opens a
//! session of its own, through a proxy of its own that a kill cuts (the
//! session then expires at the server, as a crashed process's does).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use idmint_node::config::RegistryKind;
use idmint_node::open::{generator_settings, keeper_config, open_registry};
use idmint_node::{Config, IdClock};
use idmint_registry::{
    GeneratorSettings, KeeperConfig, KeeperGuard, NodeIdentity, WorkerKeeper, WorkerRegistry,
};
use tokio::task::JoinSet;

use super::progress::Progress;
use super::proxy::DelayProxy;
use super::registry::{Calls, Tracked, kill};
use super::starts::Starts;

/// A node: its keeper and the switch that kills it.
struct Node {
    guard: KeeperGuard,
    alive: Arc<AtomicBool>,
    /// Its own connection to the coordinator, where the claim lives on it.
    proxy: Option<DelayProxy>,
}

/// The in-process fleet.
pub struct InProcess {
    clients: Vec<Arc<dyn WorkerRegistry>>,
    /// With per-node sessions: the config each node opens its own client
    /// from, and the coordinator its proxy forwards to.
    per_node: Option<(Config, (String, u16))>,
    calls: Arc<Calls>,
    space: Arc<AtomicU32>,
    settings: GeneratorSettings,
    keeper: KeeperConfig,
    /// What makes this run's identities differ from an earlier run's.
    run: u32,
    started: u64,
    nodes: VecDeque<Node>,
    /// Every ID the checks had the nodes issue.
    issued: HashSet<u64>,
}

/// What [`InProcess::watch`] saw.
#[derive(Debug, Default)]
pub struct Watch {
    /// How long it probed.
    pub watched: Duration,
    /// The longest time a node went without issuing.
    pub longest_gap: Duration,
    /// The 99th percentile of the nodes' longest gaps.
    pub gap_p99: Duration,
    /// Nodes that refused at least one probe.
    pub nodes_refused: usize,
    /// Nodes holding another worker ID at the end than at the start.
    pub workers_changed: usize,
}

/// What one check found.
#[derive(Debug, Default)]
pub struct Check {
    /// Nodes that refused to issue.
    pub paused: usize,
    /// Nodes that issued with a worker ID another node also issued with.
    pub shared_workers: usize,
}

impl InProcess {
    /// Opens `connections` clients of `config`'s registry (on ZooKeeper,
    /// one per node as it starts instead; `endpoint` is where it is).
    pub async fn open(
        config: &Config,
        connections: usize,
        endpoint: Option<(String, u16)>,
    ) -> Result<InProcess> {
        let per_node = match (config.snowflake.registry, endpoint) {
            (RegistryKind::Zookeeper, Some(endpoint)) => Some((config.clone(), endpoint)),
            _ => None,
        };
        let shared = if per_node.is_some() {
            0
        } else {
            connections.max(1)
        };
        let mut clients = Vec::with_capacity(shared);
        for _ in 0..shared {
            clients.push(
                open_registry(config)
                    .await
                    .context("opening the registry")?,
            );
        }
        let layout = config.layout().context("snowflake.layout")?;
        let settings = generator_settings(config, layout)
            .with_clock(IdClock::new(config.snowflake.clock).shared());
        let range = settings.range();
        Ok(InProcess {
            clients,
            per_node,
            calls: Arc::new(Calls::default()),
            space: Arc::new(AtomicU32::new(range)),
            settings,
            keeper: keeper_config(config),
            run: std::process::id() ^ (jiff::Timestamp::now().as_millisecond() as u32),
            started: 0,
            nodes: VecDeque::new(),
            issued: HashSet::new(),
        })
    }

    /// Whether each node has a session of its own (ZooKeeper).
    pub fn per_node_sessions(&self) -> bool {
        self.per_node.is_some()
    }

    /// The layout's worker space (claims are made below it).
    pub fn layout_space(&self) -> u32 {
        self.settings.range()
    }

    /// Claims are made in `0..workers` from now on.
    pub fn set_space(&self, workers: u32) {
        self.space.store(
            workers.min(self.settings.range()),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The registry calls every node made so far.
    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    /// How many nodes serve.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Starts `count` nodes at once. Each start's time is measured from
    /// `from` (a kill, for replacements) to the moment it can issue.
    pub async fn start(&mut self, count: usize, from: Instant, progress: &Progress) -> Starts {
        let mut set = JoinSet::new();
        for _ in 0..count {
            let n = self.started;
            self.started += 1;
            let shared = (!self.clients.is_empty())
                .then(|| self.clients[(n as usize) % self.clients.len()].clone());
            let per_node = self.per_node.clone();
            let (calls, space) = (self.calls.clone(), self.space.clone());
            let node = NodeIdentity {
                host: format!("fleet-{:08x}-{n}", self.run),
                // Distinct addresses, as pods get: registries keyed by
                // address and port (Leaf's, uid-generator's) see new nodes.
                address: format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255),
                port: 8080,
            };
            let (settings, keeper) = (self.settings.clone(), self.keeper);
            set.spawn(async move {
                let (client, proxy) = match (shared, per_node) {
                    (Some(client), _) => (client, None),
                    (None, Some((config, endpoint))) => match own_client(config, endpoint).await {
                        Ok((client, proxy)) => (client, Some(proxy)),
                        Err(e) => return (Err(e), from.elapsed()),
                    },
                    (None, None) => unreachable!("a fleet has shared clients or per-node ones"),
                };
                let tracked = Tracked::new(client, calls, space);
                let alive = tracked.alive();
                let result = WorkerKeeper::start(Arc::new(tracked), node, settings, keeper)
                    .await
                    .map(|guard| Node {
                        guard,
                        alive,
                        proxy,
                    })
                    .map_err(anyhow::Error::from);
                (result, from.elapsed())
            });
        }
        let mut starts = Starts::default();
        while let Some(joined) = set.join_next().await {
            progress.inc();
            match joined {
                Ok((Ok(node), took)) => {
                    starts.took.push(took);
                    self.nodes.push_back(node);
                }
                Ok((Err(e), _)) => starts.refused.push(format!("{e:#}")),
                Err(e) => starts.refused.push(format!("the start's task failed: {e}")),
            }
        }
        starts.claims = Some(self.calls.take_claim_times());
        starts
    }

    /// Kills `count` nodes spread over the fleet: their registry calls fail
    /// from now on, so their leases run out as a crashed process's do.
    pub fn kill(&mut self, count: usize) -> usize {
        let count = count.min(self.nodes.len());
        if count == 0 {
            return 0;
        }
        let every = self.nodes.len() / count;
        let mut kept = VecDeque::with_capacity(self.nodes.len() - count);
        let mut killed = 0;
        for (i, node) in std::mem::take(&mut self.nodes).into_iter().enumerate() {
            if killed < count && i % every == 0 {
                kill(&node.alive);
                if let Some(proxy) = &node.proxy {
                    proxy.cut();
                }
                // The keeper stops issuing; its release fails, as the
                // registry can no longer be reached.
                drop(node.guard);
                killed += 1;
            } else {
                kept.push_back(node);
            }
        }
        self.nodes = kept;
        killed
    }

    /// Stops the `count` oldest nodes as a SIGTERM stops a server: each
    /// persists its last report and releases its worker ID.
    pub async fn stop_oldest(&mut self, count: usize) {
        let mut set = JoinSet::new();
        for _ in 0..count.min(self.nodes.len()) {
            if let Some(node) = self.nodes.pop_front() {
                // The proxy goes after the release, with the task.
                let proxy = node.proxy;
                set.spawn(async move {
                    node.guard.shutdown().await;
                    drop(proxy);
                });
            }
        }
        while set.join_next().await.is_some() {}
    }

    /// Checks what the fleet promises: every serving node issues an ID no
    /// node issued before in this run, with the worker ID it holds.
    ///
    /// Two nodes may hold one worker ID for a moment during a takeover (a
    /// node whose lease ran out at the coordinator before its own, earlier,
    /// fence passed): the new holder starts above every mark the old one
    /// persisted, so their IDs still differ, and that is what is checked.
    /// Nodes that refuse to issue just then (a keeper waiting on a slow
    /// coordinator pauses its node: a refusal, never a broken promise) are
    /// counted in [`Check::paused`].
    pub fn check(&mut self) -> Result<Check> {
        let mut holders: HashMap<u32, usize> = HashMap::new();
        let mut result = Check::default();
        for (i, node) in self.nodes.iter().enumerate() {
            let handle = node.guard.handle();
            let worker = handle.worker();
            let Ok(id) = handle.next_id() else {
                result.paused += 1;
                continue;
            };
            if holders.insert(worker, i).is_some() {
                result.shared_workers += 1;
            }
            if !self.issued.insert(id.get()) {
                return Err(anyhow!(
                    "node {i} (worker {worker}) issued {}, which was issued before",
                    id.get()
                ));
            }
            let parts = self.settings.layout().decode(id.get())?;
            if parts.worker != worker {
                return Err(anyhow!(
                    "node {i} holds worker {worker} but issued {} with worker {}",
                    id.get(),
                    parts.worker
                ));
            }
        }
        Ok(result)
    }

    /// Has every node issue an ID every 100 ms for `within` (a coordinator
    /// fault under way): each node's longest time without one, counted from
    /// the start, and whether it holds the same worker ID at the end. An ID
    /// issued twice is an error, as in [`InProcess::check`].
    pub async fn watch(&mut self, within: Duration) -> Result<Watch> {
        let workers: Vec<u32> = self
            .nodes
            .iter()
            .map(|n| n.guard.handle().worker())
            .collect();
        let began = Instant::now();
        let mut last_ok = vec![began; self.nodes.len()];
        let mut gaps = vec![Duration::ZERO; self.nodes.len()];
        let mut refused = vec![false; self.nodes.len()];
        while began.elapsed() < within {
            for (i, node) in self.nodes.iter().enumerate() {
                let handle = node.guard.handle();
                match handle.next_id() {
                    Ok(id) => {
                        let now = Instant::now();
                        gaps[i] = gaps[i].max(now - last_ok[i]);
                        last_ok[i] = now;
                        if !self.issued.insert(id.get()) {
                            return Err(anyhow!(
                                "node {i} (worker {}) issued {}, which was issued before",
                                handle.worker(),
                                id.get()
                            ));
                        }
                    }
                    Err(_) => refused[i] = true,
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let end = Instant::now();
        for (gap, last) in gaps.iter_mut().zip(&last_ok) {
            *gap = (*gap).max(end - *last);
        }
        let workers_changed = self
            .nodes
            .iter()
            .zip(&workers)
            .filter(|(n, w)| n.guard.handle().worker() != **w)
            .count();
        let mut sorted = gaps.clone();
        sorted.sort();
        let p99 = sorted
            .get((sorted.len() * 99 / 100).min(sorted.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default();
        Ok(Watch {
            watched: began.elapsed(),
            longest_gap: sorted.last().copied().unwrap_or_default(),
            gap_p99: p99,
            nodes_refused: refused.iter().filter(|r| **r).count(),
            workers_changed,
        })
    }

    /// Stops the `count` newest nodes, as [`InProcess::stop_oldest`] does.
    pub async fn stop_newest(&mut self, count: usize) {
        let mut newest = VecDeque::new();
        for _ in 0..count.min(self.nodes.len()) {
            if let Some(node) = self.nodes.pop_back() {
                newest.push_front(node);
            }
        }
        let mut rest = std::mem::replace(&mut self.nodes, newest);
        self.stop_oldest(count).await;
        self.nodes.append(&mut rest);
    }

    /// Stops every node, releasing its worker ID.
    pub async fn stop_all(&mut self) {
        let n = self.nodes.len();
        self.stop_oldest(n).await;
    }
}

/// A client of its own for one node, through a proxy of its own.
async fn own_client(
    mut config: Config,
    endpoint: (String, u16),
) -> Result<(Arc<dyn WorkerRegistry>, DelayProxy)> {
    let proxy = DelayProxy::start(endpoint, Duration::ZERO)
        .await
        .context("starting the node's proxy")?;
    super::setup::redirect(&mut config, proxy.addr());
    let client = open_registry(&config)
        .await
        .context("opening the node's registry client")?;
    Ok((client, proxy))
}

/// How many registry clients `nodes` share by default: one per ten nodes,
/// from 1 to 64.
pub fn default_connections(nodes: usize) -> usize {
    nodes.div_ceil(10).clamp(1, 64)
}
