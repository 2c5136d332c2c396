//! The background worker: runs the registry's keeper and copies what it
//! allows into shared memory.
//!
//! The keeper (`idmint_registry::WorkerKeeper`, as `idmint serve` runs it,
//! on the registry `idmint_node::open` opens from the [settings]) builds a
//! generator of its own in this process; nothing is issued from it.
//! Every [`POLL`] this worker reads that generator's mark and the claim's
//! state and moves the shared words to match:
//!
//! - **Start.** The shared state moves (`fetch_max`) to the keeper
//!   generator's start: above the registry's stored mark, so a restart with a
//!   clock behind can't repeat an ID. Then the generation is published, then
//!   the mark: backends issue only after all three.
//! - **Persist, then allow.** The shared mark is raised only to the keeper's
//!   mark, which the keeper raises only after persisting it.
//! - **Fence.** When the keeper pulls its mark back (the lease ran out, the
//!   claim was lost) or the lease is no longer held, the shared mark is pulled
//!   back too, within one poll. The keeper never lets the mark lead the clock
//!   past the lease's fence, so a cluster whose backends track the clock stops
//!   by itself even if this worker is late.
//! - **A re-claim.** The shared mark is pulled to nothing first, then the new
//!   node and generation are published, then the new mark: a backend that
//!   issued with the old node meanwhile sees the generation change and drops it.
//! - **Stop.** The shared generator is sealed (its true high-water read). The
//!   keeper records a clean stop only from its own generator, so that one is
//!   made to cover the shared high-water first: once the clock passes it, one
//!   ID is taken from it (never handed out). If that can't be done, the keeper
//!   is left without a clean stop, as after a crash: the registry keeps the
//!   mark persisted a window ahead, and the next start begins above it.
//!
//! [settings]: crate::settings

use std::mem::ManuallyDrop;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idmint_core::{Snowflake, SnowflakeWords};
use idmint_registry::{KeeperGuard, LeaseState, WorkerKeeper};
use jiff::Timestamp;
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;

use crate::settings::Settings;
use crate::shared::{self, Shared};

/// How often the worker copies the keeper's state into shared memory.
const POLL: Duration = Duration::from_millis(10);

/// How long a stop waits for the clock to pass the shared high-water.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// The background worker's entry point (registered in `_PG_init`).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idmint_keeper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(shared) = shared::shared() else {
        return;
    };
    if let Err(e) = run(shared) {
        shared
            .error
            .store(shared::code_index("internal"), Ordering::Release);
        shared.lease.store(shared::LEASE_FAILED, Ordering::Release);
        pgrx::log!("idmint keeper: {e}");
    }
}

fn run(shared: &'static Shared) -> Result<(), String> {
    let settings = match crate::settings::settings() {
        Ok(s) => s,
        Err(f) => {
            // Logged once here; the postmaster logged it at start too. No
            // retry: the settings can't change until the server restarts,
            // so the keeper waits for its stop, and every call fails with
            // this error (the backends read the same settings).
            shared
                .error
                .store(shared::code_index(f.code), Ordering::Release);
            shared.lease.store(shared::LEASE_FAILED, Ordering::Release);
            pgrx::log!(
                "idmint keeper: can't start: {} (idmint error code: {})",
                f.message,
                f.code
            );
            while BackgroundWorker::wait_latch(Some(Duration::from_secs(3600))) {}
            return Ok(());
        }
    };
    let config = &settings.config;
    let layout = settings.layout;
    shared.registry.store(
        shared::REGISTRIES
            .iter()
            .position(|r| *r == settings.registry())
            .unwrap_or(0) as u64,
        Ordering::Release,
    );
    // The keeper's task runs on this runtime's one thread; this thread only
    // waits on its latch and copies state, and is the only one that calls
    // into PostgreSQL.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("idmint-keeper")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // Who the registry sees: the host name (or `snowflake.advertise_address`)
    // and the port PostgreSQL listens on, as a server is seen.
    let node =
        idmint_node::node_identity(config, SocketAddr::from((Ipv4Addr::UNSPECIFIED, pg_port())));
    let generator_settings =
        idmint_node::open::generator_settings(config, layout).with_clock(settings.clock());
    // Never dropped implicitly: a dropped guard would record a clean stop
    // from the keeper's own generator, which issued none of the shared IDs.
    let guard = loop {
        // As `idmint serve` starts: open the registry (waiting through a
        // coordinator that is not up yet, up to `snowflake.claim_wait`), then
        // claim a worker and persist a first mark.
        let start = runtime.block_on(async {
            let registry = idmint_node::open::open_registry(config).await?;
            WorkerKeeper::start(
                registry,
                node.clone(),
                generator_settings.clone(),
                idmint_node::open::keeper_config(config),
            )
            .await
        });
        match start {
            Ok(guard) => break ManuallyDrop::new(guard),
            Err(e) => {
                shared
                    .error
                    .store(shared::code_index(e.code()), Ordering::Release);
                shared.lease.store(shared::LEASE_FAILED, Ordering::Release);
                pgrx::log!(
                    "idmint keeper: can't start ({} registry): {e} (idmint error code: {}); trying again in 1 s",
                    settings.registry(),
                    e.code()
                );
                if !BackgroundWorker::wait_latch(Some(Duration::from_secs(1))) {
                    return Ok(());
                }
            }
        }
    };
    pgrx::log!(
        "idmint keeper: worker {} claimed from the {} registry",
        guard.handle().worker(),
        settings.registry()
    );
    shared.error.store(0, Ordering::Release);
    let mut mirror: Option<(u64, Snowflake)> = None;
    while BackgroundWorker::wait_latch(Some(POLL)) {
        publish(shared, &guard, settings, &mut mirror)?;
    }
    stop(shared, guard, &runtime, mirror.map(|(_, m)| m), &layout);
    // The keeper's thread goes with the process.
    std::mem::forget(runtime);
    Ok(())
}

/// Copies the keeper's state into shared memory (see the module docs).
fn publish(
    shared: &'static Shared,
    guard: &KeeperGuard,
    settings: &Settings,
    mirror: &mut Option<(u64, Snowflake)>,
) -> Result<(), String> {
    let handle = guard.handle();
    let status = handle.status();
    let keeper_gen = handle.generator();
    if mirror.as_ref().is_none_or(|(g, _)| *g != status.generation) {
        if let Some((_, old)) = mirror.as_ref() {
            old.retract_mark(Timestamp::MIN);
        }
        let claimed = handle.worker();
        let (datacenter, worker) = split(settings, claimed);
        let generator = settings
            .builder(datacenter, worker)
            .with_shared_words(words(shared))
            .with_start_after(keeper_gen.last_tick_time())
            .build()
            .map_err(|e| e.to_string())?;
        shared.node.store(
            (u64::from(datacenter) << 32) | u64::from(worker),
            Ordering::Release,
        );
        shared
            .generation
            .store(status.generation.max(1), Ordering::Release);
        *mirror = Some((status.generation, generator));
    }
    let (_, generator) = mirror.as_ref().expect("set above");
    let lease = match status.lease {
        LeaseState::Held => shared::LEASE_HELD,
        LeaseState::Renewing => shared::LEASE_RENEWING,
        LeaseState::Expired => shared::LEASE_EXPIRED,
        LeaseState::Lost => shared::LEASE_LOST,
        _ => shared::LEASE_STOPPED,
    };
    let issuing = matches!(lease, shared::LEASE_HELD | shared::LEASE_RENEWING);
    match status.mark {
        Some(mark) if issuing => {
            // Down first (a keeper that pulled its mark back), then up.
            generator.retract_mark(mark);
            generator.advance_mark(mark);
        }
        _ => generator.retract_mark(Timestamp::MIN),
    }
    shared.lease.store(lease, Ordering::Release);
    shared.lease_left_ms.store(
        status.lease_left.map_or(-1, |d| d.as_millis() as i64),
        Ordering::Release,
    );
    shared.persisted_ms.store(
        status
            .persisted_mark
            .map_or(shared::NO_TIME, |m| m.as_millisecond()),
        Ordering::Release,
    );
    shared.error.store(
        status
            .last_error
            .as_ref()
            .map_or(0, |_| shared::code_index("registry_backend")),
        Ordering::Release,
    );
    Ok(())
}

/// A clean stop (see the module docs).
fn stop(
    shared: &'static Shared,
    guard: ManuallyDrop<KeeperGuard>,
    runtime: &tokio::runtime::Runtime,
    mirror: Option<Snowflake>,
    layout: &idmint_core::Layout,
) {
    shared.lease.store(shared::LEASE_STOPPED, Ordering::Release);
    let Some(mirror) = mirror else {
        return;
    };
    let high = mirror.seal();
    let keeper_gen = guard.handle().generator();
    let deadline = Instant::now() + STOP_WAIT;
    while keeper_gen.clock().now_nanos() <= high.as_nanosecond() as i64 {
        if Instant::now() >= deadline {
            pgrx::log!("idmint keeper: the clock did not pass the last ID's time; no clean stop");
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    match guard.handle().next_id() {
        Ok(id) if layout.decode(id.get()).is_ok_and(|d| d.time > high) => {
            runtime.block_on(ManuallyDrop::into_inner(guard).shutdown());
            pgrx::log!("idmint keeper: clean stop recorded (last ID's time {high})");
        }
        _ => pgrx::log!(
            "idmint keeper: the keeper could not cover the last ID's time; no clean stop"
        ),
    }
}

/// (datacenter, worker) of a claimed ID, as the keeper splits it: with
/// `snowflake.datacenter` set the claim is the worker part only, else the
/// whole node field (datacenter in the high bits).
fn split(settings: &Settings, claimed: u32) -> (u32, u32) {
    if let Some(datacenter) = settings.config.snowflake.datacenter {
        return (datacenter, claimed);
    }
    let bits = u32::from(settings.layout.worker_bits());
    if bits >= 32 {
        (0, claimed)
    } else {
        (claimed >> bits, claimed & ((1 << bits) - 1))
    }
}

fn words(shared: &'static Shared) -> &'static SnowflakeWords {
    &shared.words
}

fn pg_port() -> u16 {
    // SAFETY: PostPortNumber is set from the configuration before workers start.
    u16::try_from(unsafe { pg_sys::PostPortNumber }).unwrap_or(5432)
}
