//! The background worker: runs the registry's keeper and copies what it
//! allows into shared memory.
//!
//! The keeper (`idmint_registry::WorkerKeeper`, as `idmint serve` runs it)
//! builds a generator of its own in this process; nothing is issued from it.
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

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idmint_core::{Snowflake, SnowflakeWords};
use idmint_registry::file::{FileRegistry, LeaseFile};
use idmint_registry::fixed::StaticRegistry;
use idmint_registry::{
    GeneratorSettings, KeeperConfig, KeeperGuard, LeaseState, NodeIdentity, WorkerKeeper,
    WorkerRegistry,
};
use jiff::Timestamp;
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;

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
    let layout = crate::functions::layout().map_err(|f| f.message)?;
    let kind = crate::guc_text(&crate::REGISTRY, "file");
    let worker = u32::try_from(crate::WORKER.get()).map_err(|e| e.to_string())?;
    // SAFETY: DataDir is set before any worker starts and never changes.
    let data_dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) }
        .to_string_lossy()
        .into_owned();
    let dir = std::path::Path::new(&data_dir).join("idmint");
    let registry: Arc<dyn WorkerRegistry> = match kind.as_str() {
        "file" => Arc::new(FileRegistry::open(&dir, worker).map_err(|e| e.to_string())?),
        "static" => Arc::new(
            StaticRegistry::new(worker)
                .with_mark_file(LeaseFile::open(&dir).map_err(|e| e.to_string())?),
        ),
        other => {
            shared
                .error
                .store(shared::code_index("registry_config"), Ordering::Release);
            return Err(format!(
                "idmint.registry = '{other}' is not supported here yet (file, static)"
            ));
        }
    };
    shared.registry.store(
        shared::REGISTRIES
            .iter()
            .position(|r| *r == kind)
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
    let node = NodeIdentity {
        host: hostname(),
        address: "127.0.0.1".to_owned(),
        port: pg_port(),
    };
    let settings = GeneratorSettings::new(layout);
    // Never dropped implicitly: a dropped guard would record a clean stop
    // from the keeper's own generator, which issued none of the shared IDs.
    let guard = loop {
        let start = runtime.block_on(WorkerKeeper::start(
            registry.clone(),
            node.clone(),
            settings.clone(),
            KeeperConfig::new(),
        ));
        match start {
            Ok(guard) => break ManuallyDrop::new(guard),
            Err(e) => {
                shared
                    .error
                    .store(shared::code_index(e.code()), Ordering::Release);
                shared.lease.store(shared::LEASE_FAILED, Ordering::Release);
                pgrx::log!("idmint keeper: can't start: {e}; trying again in 1 s");
                if !BackgroundWorker::wait_latch(Some(Duration::from_secs(1))) {
                    return Ok(());
                }
            }
        }
    };
    shared.error.store(0, Ordering::Release);
    let mut mirror: Option<(u64, Snowflake)> = None;
    while BackgroundWorker::wait_latch(Some(POLL)) {
        publish(shared, &guard, &layout, &mut mirror)?;
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
    layout: &idmint_core::Layout,
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
        let (datacenter, worker) = split(layout, claimed);
        let generator = Snowflake::builder(*layout)
            .with_datacenter(datacenter)
            .with_worker(worker)
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

/// (datacenter, worker) of a claimed ID over the whole node field, as the
/// keeper splits it.
fn split(layout: &idmint_core::Layout, claimed: u32) -> (u32, u32) {
    let bits = u32::from(layout.worker_bits());
    if bits >= 32 {
        (0, claimed)
    } else {
        (claimed >> bits, claimed & ((1 << bits) - 1))
    }
}

fn words(shared: &'static Shared) -> &'static SnowflakeWords {
    &shared.words
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

fn pg_port() -> u16 {
    // SAFETY: PostPortNumber is set from the configuration before workers start.
    u16::try_from(unsafe { pg_sys::PostPortNumber }).unwrap_or(5432)
}
