//! Starting and stopping: from a [`Config`] to a listening [`Server`], and the
//! orderly shutdown that releases the worker claim.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use idmint_core::uuid::UuidGenerator;
use idmint_core::{Layout, PublicIdCodec};
use idmint_registry::{
    Campaign, CampaignConfig, CampaignGuard, KeeperGuard, LeaseState, NodeIdentity, RegistryError,
    WorkerHandle, WorkerKeeper,
};
use idmint_segment::{PreloaderGuard, SegmentAllocator};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::backends::{CountingRegistry, key_table, open_segments};
use crate::error::ServerError;
use crate::fleet::FleetView;
use crate::http::{StartProgress, answer_while_starting};
use crate::listen::{Bound, ConnectionLimits};
use crate::metrics::Metrics;
use crate::metrics::sampler::SamplerGuard;
use crate::monotonic::{Forwarder, Monotonic};
use crate::state::AppState;
use crate::tls::{ForwardFiles, Surface, Tls, TlsReload, TlsWatcher};
use crate::tokens::{TinyidTokens, TokenRefresher};
use crate::{grpc, http, resp};
use idmint_node::IdClock;
use idmint_node::config::{Config, RegistryKind};
use idmint_node::open::{
    generator_settings, keeper_config, open_leader_registry, open_registry_observed,
    oracle_keeper_config, oracle_settings, prepare_segments,
};
use idmint_node::{NodeError, advertised_address, create_data_dir, node_identity};

/// A started server: listener bound, worker claimed, segment store open.
/// Dropping it without [`Server::serve`] stops issuing and releases the claim
/// in the background.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: Arc<AppState>,
    keeper: KeeperGuard,
    /// The oracle's campaign, when a key is monotonic.
    campaign: Option<CampaignGuard>,
    preloader: PreloaderGuard,
    /// Re-reads Tinyid's `tiny_id_token` (the tinyid schema only).
    token_refresher: Option<TokenRefresher>,
    watcher: WatcherGuard,
    sampler: SamplerGuard,
    resp: Option<Bound>,
    grpc: Option<Bound>,
    /// Reloads the TLS files on request and when they change.
    tls_watcher: Option<TlsWatcher>,
    grace: Duration,
}

impl Server {
    /// Checks the config, binds the listener, claims the worker ID, opens the
    /// segment store and creates the declared keys. Returns once IDs can be
    /// served.
    ///
    /// The steps, in order, each a function below whose error names it: read
    /// the TLS files (`load_tls`), create the data directory, bind the
    /// listeners (`Listeners::bind`), claim the worker (`claim_worker`),
    /// open the segment store and create the declared keys
    /// (`start_segments`), build the shared state (`build_state`), and
    /// start the background tasks (`Background::spawn`).
    ///
    /// # Errors
    /// [`ServerError`] naming the step and config key that failed.
    pub async fn start(config: Config) -> Result<Server, ServerError> {
        idmint_node::check(&config)?;
        let layout = config.layout()?;
        warn_if_running_out("snowflake.layout", &config.snowflake.layout, layout);
        if config.has_monotonic_keys() {
            warn_if_running_out(
                "monotonic.layout",
                &config.monotonic.layout,
                config.monotonic_layout()?,
            );
        }
        // Read before anything is bound or claimed: bad files stop the start.
        let tls = load_tls(&config)?;
        create_data_dir(&config)?;
        let listeners = Listeners::bind(&config).await?;
        let node = node_identity(&config, listeners.http.local_addr);
        let metrics = Arc::new(Metrics::new(node.to_string()));
        // A claim can wait (every worker ID taken, a registry's hold): the
        // HTTP port says why meanwhile, instead of leaving probes hanging.
        let progress = Arc::new(StartProgress::new("claiming a worker ID"));
        let Claimed {
            keeper,
            worker,
            clock,
            fleet,
        } = tokio::select! {
            claimed = claim_worker(&config, layout, node.clone(), &metrics, &progress) => claimed?,
            never = answer_while_starting(
                &listeners.http.listener,
                tls.as_ref(),
                config.server.read_timeout,
                &progress,
            ) => match never {},
        };
        let oracle = start_oracle(&config, &node, &listeners, &clock, tls.as_ref()).await?;
        let Segments {
            allocator,
            preloader,
            tinyid_tokens,
            token_refresher,
        } = start_segments(&config, &metrics).await?;
        let (campaign, monotonic) = oracle.unzip();
        let parts = Parts {
            monotonic,
            worker,
            clock,
            fleet,
            segments: allocator,
            tinyid_tokens,
            metrics,
            tls,
        };
        let state = build_state(&config, layout, parts).await?;
        let Background {
            tls_watcher,
            watcher,
            sampler,
        } = Background::spawn(&state);
        listeners.log(state.tls.as_deref());
        let Listeners { http, resp, grpc } = listeners;
        Ok(Server {
            listener: http.listener,
            local_addr: http.local_addr,
            state,
            keeper,
            campaign,
            preloader,
            token_refresher,
            watcher,
            sampler,
            resp,
            grpc,
            tls_watcher,
            grace: config.server.shutdown_grace,
        })
    }

    /// The handle that makes the server read its TLS files again (what
    /// `idmint serve` does on `SIGHUP`), when `[tls]` is set.
    pub fn tls_reload(&self) -> Option<TlsReload> {
        self.state.tls.clone().map(TlsReload)
    }

    /// The address HTTP listens on (the chosen port when the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the RESP listener listens on, when `server.resp_addr` is set.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp.as_ref().map(|b| b.local_addr)
    }

    /// The address the gRPC listener listens on, when `server.grpc_addr` is set.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|b| b.local_addr)
    }

    /// Serves HTTP (and RESP, gRPC) until `shutdown` completes; then stops accepting, waits for
    /// in-flight requests (at most `server.shutdown_grace`), and releases the
    /// worker claim.
    ///
    /// # Errors
    /// [`ServerError::Serve`] when the listener fails.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let Server {
            listener,
            local_addr,
            state,
            keeper,
            campaign,
            preloader,
            token_refresher,
            watcher,
            sampler,
            resp,
            grpc,
            tls_watcher,
            grace,
        } = self;
        let stopping = Arc::new(tokio::sync::Notify::new());
        let signal = stopping.clone();
        let (stop_resp, resp_stopped) = tokio::sync::watch::channel(false);
        let grpc =
            grpc.map(|g| tokio::spawn(grpc::serve(g, state.clone(), resp_stopped.clone(), grace)));
        let resp = resp.map(|r| tokio::spawn(resp::serve(r, state.clone(), resp_stopped, grace)));
        let shutdown = async move {
            shutdown.await;
            tracing::info!(addr = %local_addr, "shutting down: no new connections");
            signal.notify_one();
            let _ = stop_resp.send(true);
        };
        let limits = state.connections.clone();
        let app = http::router(state.clone());
        let served = http::serve(listener, state, app, limits, shutdown);
        let result = tokio::select! {
            () = served => Ok(()),
            () = async { stopping.notified().await; tokio::time::sleep(grace).await } => {
                tracing::warn!(grace = ?grace, "requests still in flight after the shutdown grace; closing");
                Ok(())
            }
        };
        if let Some(resp) = resp {
            // Stopped with HTTP; it waits up to the grace for its connections.
            if let Err(e) = resp.await {
                tracing::error!(error = %e, "the RESP listener task failed");
            }
        }
        if let Some(grpc) = grpc {
            // Stopped with HTTP; it waits up to the grace for its calls and streams.
            if let Err(e) = grpc.await {
                tracing::error!(error = %e, "the gRPC listener task failed");
            }
        }
        drop(watcher);
        drop(tls_watcher);
        drop(sampler);
        drop(preloader);
        drop(token_refresher);
        if let Some(campaign) = campaign {
            // Released now, so another node leads without waiting for the lease.
            campaign.shutdown().await;
        }
        keeper.shutdown().await;
        tracing::info!("worker claim released; stopped");
        result
    }
}

/// Starts a server on `config` and serves until `shutdown` completes.
///
/// # Errors
/// Those of [`Server::start`] and [`Server::serve`].
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    Server::start(config).await?.serve(shutdown).await
}

// ---- The steps of `Server::start` ----

/// Reads and checks the TLS files (`[tls]`), when set.
fn load_tls(config: &Config) -> Result<Option<Arc<Tls>>, ServerError> {
    let Some(section) = &config.tls else {
        return Ok(None);
    };
    // Followers' forwarding to the oracle's leader rides on the same files
    // and reloads (SIGHUP, or the files changed).
    let m = &config.monotonic;
    let forward = match &m.forward_ca {
        Some(ca) if section.grpc && config.has_monotonic_keys() => Some(ForwardFiles {
            ca: ca.clone(),
            identity: m.forward_cert.clone().zip(m.forward_key.clone()),
        }),
        _ => None,
    };
    let tls = Arc::new(Tls::load(section, forward)?);
    let cert = tls.cert();
    tracing::info!(subject = %cert.subject, serial = %cert.serial, "TLS certificate loaded");
    Ok(Some(tls))
}

/// How long before a layout runs out the start warns (the alert rule
/// `IdmintLayoutRunningOut` fires at the same distance).
const RUN_OUT_WARNING: Duration = Duration::from_secs(365 * 24 * 3600);

/// Logs a warning at start when the layout runs out within a year.
fn warn_if_running_out(key: &str, text: &str, layout: Layout) {
    let now = jiff::Timestamp::now();
    if let (Some(end), Some(left)) = (layout.runs_out_at(), layout.time_left(now))
        && left < RUN_OUT_WARNING
    {
        tracing::warn!(
            key,
            layout = text,
            runs_out_at = %end,
            days_left = left.as_secs() / 86_400,
            "the layout runs out within a year: after {end} no ID can be issued and the \
             node leaves /readyz; move to a later epoch or more time bits before then"
        );
    }
}

/// The listeners, bound before anything is claimed: HTTP, and RESP and gRPC
/// when configured.
struct Listeners {
    http: Bound,
    resp: Option<Bound>,
    grpc: Option<Bound>,
}

impl Listeners {
    /// Binds `server.http_addr`, then `server.resp_addr` and
    /// `server.grpc_addr` when set.
    async fn bind(config: &Config) -> Result<Listeners, ServerError> {
        let addr = config.server.http_addr;
        let http = Bound::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        let resp = match config.server.resp_addr {
            Some(addr) => Some(
                Bound::bind(addr)
                    .await
                    .map_err(|source| ServerError::BindResp { addr, source })?,
            ),
            None => None,
        };
        let grpc = match config.server.grpc_addr {
            Some(addr) => Some(
                Bound::bind(addr)
                    .await
                    .map_err(|source| ServerError::BindGrpc { addr, source })?,
            ),
            None => None,
        };
        Ok(Listeners { http, resp, grpc })
    }

    /// Logs each listener's address, and whether it speaks TLS.
    fn log(&self, tls: Option<&Tls>) {
        let tls_on = |surface| tls.is_some_and(|t| t.enabled(surface));
        tracing::info!(addr = %self.http.local_addr, tls = tls_on(Surface::Http), "listening for HTTP");
        if let Some(resp) = &self.resp {
            tracing::info!(addr = %resp.local_addr, tls = tls_on(Surface::Resp), "listening for RESP (Redis protocol)");
        }
        if let Some(grpc) = &self.grpc {
            tracing::info!(addr = %grpc.local_addr, tls = tls_on(Surface::Grpc), "listening for gRPC (idmint.v1.IdService)");
        }
    }
}

/// A claimed worker: the keeper that holds the claim, its handle, the clock
/// its generator reads, and the registry's fleet as this node sees it.
struct Claimed {
    keeper: KeeperGuard,
    worker: WorkerHandle,
    clock: IdClock,
    fleet: FleetView,
}

/// Opens the worker registry (its failed calls counted in `metrics`) and
/// claims a worker ID for `node` through a [`WorkerKeeper`], which persists
/// the first high-water mark before it returns.
async fn claim_worker(
    config: &Config,
    layout: Layout,
    node: NodeIdentity,
    metrics: &Arc<Metrics>,
    progress: &StartProgress,
) -> Result<Claimed, ServerError> {
    let kind = config.snowflake.registry;
    let registry_error = |source| NodeError::Registry {
        registry: kind.name(),
        source,
    };
    let connecting =
        |error: &RegistryError| progress.set(format!("waiting to reach the registry: {error}"));
    let registry = open_registry_observed(config, &connecting)
        .await
        .map_err(registry_error)?;
    let registry = CountingRegistry::wrap(registry, metrics.clone());
    let fleet = FleetView::new(registry.clone(), node.clone());
    let clock = IdClock::new(config.snowflake.clock);
    let settings = generator_settings(config, layout).with_clock(clock.shared());
    let waiting =
        |error: &RegistryError| progress.set(format!("waiting to claim a worker ID: {error}"));
    let keeper = WorkerKeeper::start_observed(
        registry,
        node.clone(),
        settings,
        keeper_config(config),
        &waiting,
    )
    .await
    .map_err(registry_error)?;
    let worker = keeper.handle().clone();
    let status = worker.status();
    tracing::info!(
        registry = kind.name(),
        clock = clock.source().name(),
        worker = status.worker,
        node = %node,
        mark = ?status.persisted_mark,
        "worker ID claimed"
    );
    Ok(Claimed {
        keeper,
        worker,
        clock,
        fleet,
    })
}

/// Starts the timestamp oracle when a key is declared monotonic: opens the
/// leader's registry and campaigns in it as this node, at the address
/// followers forward to (the gRPC port; the HTTP one for a node that is its
/// own oracle).
async fn start_oracle(
    config: &Config,
    node: &NodeIdentity,
    listeners: &Listeners,
    clock: &IdClock,
    tls: Option<&Arc<Tls>>,
) -> Result<Option<(CampaignGuard, Arc<Monotonic>)>, ServerError> {
    if !config.has_monotonic_keys() {
        return Ok(None);
    }
    let kind = config.snowflake.registry;
    let registry_error = |source| NodeError::Registry {
        registry: kind.name(),
        source,
    };
    let layout = config.monotonic_layout()?;
    let registry = open_leader_registry(config, &|_| {})
        .await
        .map_err(registry_error)?;
    let shared = kind != RegistryKind::File;
    // Followers reach the leader at its gRPC listener: that listener's own
    // address (or `advertise_address`), not the HTTP one's, which may be
    // another IP.
    let leader_node = match (&listeners.grpc, shared) {
        (Some(grpc), true) => NodeIdentity {
            address: advertised_address(config, grpc.local_addr, &node.host),
            port: grpc.local_addr.port(),
            host: node.host.clone(),
        },
        _ => node.clone(),
    };
    let settings = oracle_settings(config, layout).with_clock(clock.shared());
    let campaign = Campaign::spawn(
        registry,
        leader_node.clone(),
        settings,
        oracle_keeper_config(config),
        CampaignConfig::new().with_poll(config.monotonic.poll),
    )
    .map_err(registry_error)?;
    let forwarder = if shared {
        Some(Forwarder::spawn(
            config.server.max_count,
            config.server.admin_token.clone(),
            tls.filter(|t| t.forwarding().is_some()).cloned(),
        ))
    } else {
        None
    };
    if !shared {
        tracing::warn!(
            "monotonic keys on the file registry: this node is its own oracle; \
             its IDs increase on this node only"
        );
    }
    tracing::info!(registry = kind.name(), node = %leader_node, "oracle campaign started");
    let monotonic = Monotonic::new(
        campaign.oracle().clone(),
        forwarder,
        config.monotonic.leader_wait,
        layout,
    );
    Ok(Some((campaign, Arc::new(monotonic))))
}

/// The segment allocator, running: its preloader, and Tinyid's tokens with
/// the task that re-reads them when the store is Tinyid's table.
struct Segments {
    allocator: SegmentAllocator,
    preloader: PreloaderGuard,
    tinyid_tokens: Option<Arc<TinyidTokens>>,
    token_refresher: Option<TokenRefresher>,
}

/// Opens the segment store and allocator (failed leases counted in
/// `metrics`, floors in the data directory), reads Tinyid's tokens when the
/// store is Tinyid's table, checks the store against this node's floors
/// (refusing a store that was reset or restored behind them), creates the
/// keys declared in `[segment.keys]`, and starts the preloader.
async fn start_segments(config: &Config, metrics: &Arc<Metrics>) -> Result<Segments, ServerError> {
    let (segments, tinyid_store) = open_segments(config, metrics.clone()).await?;
    // Tinyid's tokens, read now (a missing table stops the start) and
    // again every minute, as Tinyid does.
    let (tinyid_tokens, token_refresher) = match tinyid_store {
        Some(store) => {
            let rows = store
                .tinyid_tokens()
                .await
                .map_err(|source| NodeError::Segment {
                    what: format!(
                        "reading Tinyid's tokens from {}",
                        idmint_segment::sql::tinyid::TOKEN_TABLE
                    ),
                    source,
                })?;
            tracing::info!(tokens = rows.len(), "Tinyid tokens read");
            let tokens = Arc::new(TinyidTokens::new(rows));
            let refresher = TokenRefresher::spawn(store, tokens.clone());
            (Some(tokens), Some(refresher))
        }
        None => (None, None),
    };
    // Before anything is created: a store that forgot what this node issued
    // (reset, or restored from an older backup) stops the start here, and
    // is left as it was.
    prepare_segments(config, &segments).await?;
    let preloader = segments.spawn_preloader();
    Ok(Segments {
        allocator: segments,
        preloader,
        tinyid_tokens,
        token_refresher,
    })
}

/// What the shared state is made of, from the steps before [`build_state`].
struct Parts {
    monotonic: Option<Arc<Monotonic>>,
    worker: WorkerHandle,
    clock: IdClock,
    fleet: FleetView,
    segments: SegmentAllocator,
    tinyid_tokens: Option<Arc<TinyidTokens>>,
    metrics: Arc<Metrics>,
    tls: Option<Arc<Tls>>,
}

/// The shared state: `parts`, the obfuscation settings, the key table (read
/// from the store), and the tokens and limits of the config.
async fn build_state(
    config: &Config,
    layout: Layout,
    parts: Parts,
) -> Result<Arc<AppState>, ServerError> {
    let Parts {
        monotonic,
        worker,
        clock,
        fleet,
        segments,
        tinyid_tokens,
        metrics,
        tls,
    } = parts;
    let obfuscator = config.obfuscation.obfuscator()?;
    let codec = PublicIdCodec::new(config.obfuscation.text_format()?);
    let keys = key_table(config, &segments).await?;

    Ok(Arc::new(AppState {
        worker,
        layout,
        layout_text: layout_name(&layout),
        clock,
        clock_policy: (
            config.snowflake.clock_behind,
            config.snowflake.sequence_exhausted,
        ),
        clock_failed_until: AtomicI64::new(i64::MIN),
        segments,
        uuids: UuidGenerator::new(),
        keys,
        obfuscator,
        codec,
        admin_token: config.server.admin_token.clone(),
        key_tokens: config
            .keys
            .iter()
            .filter_map(|(name, key)| Some((name.clone(), key.token.clone()?)))
            .collect(),
        tinyid_tokens,
        max_count: config.server.max_count,
        metrics,
        connections: ConnectionLimits::new(
            config.server.max_connections,
            config.server.read_timeout,
        ),
        fleet,
        tls,
        monotonic,
    }))
}

/// The background tasks started once the state is built; each stops when
/// its guard drops.
struct Background {
    /// Reloads the TLS files on request and when they change.
    tls_watcher: Option<TlsWatcher>,
    /// Logs the worker lease's state changes.
    watcher: WatcherGuard,
    /// Samples the throughput and keeps the recorder drained.
    sampler: SamplerGuard,
}

impl Background {
    /// Starts the tasks, on `state`'s parts.
    fn spawn(state: &AppState) -> Background {
        Background {
            tls_watcher: state.tls.as_ref().map(Tls::spawn_watcher),
            watcher: WatcherGuard::spawn(state.worker.clone()),
            sampler: SamplerGuard::spawn(state.metrics.clone()),
        }
    }
}

/// The layout's preset name, else its full text form.
fn layout_name(layout: &Layout) -> String {
    layout
        .preset_name()
        .map_or_else(|| layout.to_string(), str::to_owned)
}

/// Owns the task that logs the worker lease's state changes (lost, expired,
/// renewing, held again): one line per change.
#[derive(Debug)]
struct WatcherGuard(JoinHandle<()>);

impl WatcherGuard {
    fn spawn(worker: WorkerHandle) -> WatcherGuard {
        WatcherGuard(tokio::spawn(async move {
            let mut last = (LeaseState::Held, worker.worker(), None::<String>);
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let s = worker.status();
                let now = (s.lease, s.worker, s.last_error.clone());
                if now == last {
                    continue;
                }
                match (s.lease, &s.last_error) {
                    (LeaseState::Held, None) => {
                        tracing::info!(
                            worker = s.worker,
                            generation = s.generation,
                            "worker lease held"
                        )
                    }
                    (LeaseState::Held | LeaseState::Renewing, Some(e)) => {
                        tracing::warn!(worker = s.worker, lease = s.lease.name(), error = %e, "worker store failing")
                    }
                    (state, e) => tracing::error!(
                        worker = s.worker,
                        lease = state.name(),
                        error = e.as_deref().unwrap_or(""),
                        "worker lease lost: not issuing snowflake IDs"
                    ),
                }
                last = now;
            }
        }))
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
