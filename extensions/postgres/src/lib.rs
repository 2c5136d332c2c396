//! idmint inside PostgreSQL: `CREATE EXTENSION idmint;` with
//! `shared_preload_libraries = 'idmint'`.
//!
//! - **One generator per cluster.** The core's [`Snowflake`] keeps its state
//!   in two words ([`SnowflakeWords`]) that live here in shared memory; every
//!   backend builds its own `Snowflake` over them (its own clock, the same
//!   layout, node and policies), so all backends together are one generator:
//!   one compare-and-swap per ID, no lock.
//! - **Leased like any node's worker.** A background worker ([`worker`]) runs
//!   the registry's `WorkerKeeper`, as `idmint serve` does: it claims the
//!   worker, persists the high-water mark ahead, renews, fences. It copies
//!   into shared memory what backends may issue: the node, the mark (raised
//!   only after the keeper persisted it, pulled back when the keeper fences),
//!   the start above the registry's stored mark.
//! - **Backends refuse rather than guess.** Before the keeper is ready a call
//!   waits up to [`READY_WAIT`] and then fails; past the mark, or fenced, it
//!   fails. Every failure is an ERROR with a SQLSTATE and idmint's stable code
//!   in the DETAIL ([`error`]).
//!
//! [`Snowflake`]: idmint_core::Snowflake
//! [`SnowflakeWords`]: idmint_core::SnowflakeWords

use std::ffi::CStr;
use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, pg_shmem_init};

use crate::shared::SHARED;

mod error;
mod functions;
mod public;
mod settings;
mod shared;
mod worker;

pgrx::pg_module_magic!();

/// How long a backend waits for the keeper's first mark before it fails with
/// `not_ready` (a restart after a crash waits up to the keeper's window, 3 s or
/// 6 s on etcd and ZooKeeper `ephemeral`, for the clock to pass the stored
/// mark).
pub const READY_WAIT: Duration = Duration::from_secs(10);

/// `idmint.config`: an idmint config file (the one `idmint serve --config`
/// reads); set, its `[snowflake]` and `[obfuscation]` sections are used and
/// `idmint.registry`, `idmint.worker` and `idmint.layout` are not read.
pub(crate) static CONFIG: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);

/// `idmint.layout`: the layout's text form, as `idmint serve`'s `[snowflake] layout`.
pub(crate) static LAYOUT: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(Some(c"twitter"));

/// `idmint.registry`: `file` (the default: a file registry in the data
/// directory, as `idmint serve` has) or `static` (the worker `idmint.worker`
/// names, its mark kept in the same file).
pub(crate) static REGISTRY: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(Some(c"file"));

/// `idmint.worker`: the worker ID (the whole node field), 0 by default.
pub(crate) static WORKER: GucSetting<i32> = GucSetting::<i32>::new(0);

/// The text of a string GUC.
pub(crate) fn guc_text(setting: &GucSetting<Option<std::ffi::CString>>, default: &str) -> String {
    setting
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| default.to_owned())
}

/// Registers the settings, the shared memory and the background worker.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: read-only check of a PostgreSQL global in the postmaster.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    define_gucs();
    if !preloading {
        // Loaded by CREATE EXTENSION or a function call without preloading:
        // no shared memory, no worker. The functions say so.
        return;
    }
    // Read once here, in the postmaster: every backend and the keeper
    // inherit the same settings by fork. A bad config does not stop the
    // server; it is logged, and every call fails with it.
    match settings::settings() {
        Ok(s) => pgrx::log!(
            "idmint: settings from {}: registry {}, layout {}",
            s.source,
            s.registry(),
            s.config.snowflake.layout
        ),
        Err(f) => pgrx::warning!(
            "idmint: {} (idmint error code: {}); idmint issues no ID until this is fixed and the server restarted",
            f.message,
            f.code
        ),
    }
    pg_shmem_init!(SHARED = shared::Shared::new());
    shared::PRELOADED.store(true, std::sync::atomic::Ordering::Release);
    BackgroundWorkerBuilder::new("idmint keeper")
        .set_type("idmint keeper")
        .set_library("idmint")
        .set_function("idmint_keeper_main")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::PostmasterStart)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

fn define_gucs() {
    fn string(
        name: &'static CStr,
        short: &'static CStr,
        setting: &'static GucSetting<Option<std::ffi::CString>>,
    ) {
        GucRegistry::define_string_guc(
            name,
            short,
            c"",
            setting,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    string(
        c"idmint.config",
        c"An idmint config file (as idmint serve --config reads); its [snowflake] and [obfuscation] sections are used.",
        &CONFIG,
    );
    string(
        c"idmint.layout",
        c"The ID layout (twitter, leaf, or a spec such as time=41,...).",
        &LAYOUT,
    );
    string(
        c"idmint.registry",
        c"Without idmint.config, where the worker ID comes from: file (default) or static.",
        &REGISTRY,
    );
    GucRegistry::define_int_guc(
        c"idmint.worker",
        c"The worker ID (the node field); with registry = file, the one the file registry holds.",
        c"",
        &WORKER,
        0,
        i32::MAX,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}
