//! What the extension runs with: an idmint [`Config`], read once.
//!
//! - **`idmint.config` set:** the file it names, read as `idmint serve
//!   --config FILE` reads it (`idmint_node::load_checked`: the file, then the
//!   postmaster's `IDMINT_…` environment variables over it, then the
//!   server's checks). Its `[snowflake]` section (layout, policies, clock,
//!   registry: file, static, host, k8s, sql, redis, etcd, zookeeper) and its
//!   `[obfuscation]` section are used; the listeners and keys are not.
//!   `server.data_dir` left at its default means `$PGDATA/idmint`.
//! - **`idmint.config` unset:** the embedded default, built from
//!   `idmint.registry` (`file` or `static`), `idmint.worker` and
//!   `idmint.layout`, with its data in `$PGDATA/idmint`, and checked by the
//!   same `idmint_node::check`.
//!
//! Loaded in the postmaster (`_PG_init`), so that a bad config is logged
//! once at start and every backend and the keeper inherit the same
//! settings by fork: they can't disagree on the layout, even if the file
//! changes while the server runs. A settings error is kept, not raised: the
//! server starts, and every call fails with it (`invalid_config`).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use idmint_core::clock::Clock;
use idmint_core::{Layout, Obfuscator, Snowflake, SnowflakeBuilder};
use idmint_node::IdClock;
use idmint_node::config::{Config, RegistryKind};
use pgrx::pg_sys;

use crate::error::Failure;

/// The settings every process of the cluster runs with.
pub(crate) struct Settings {
    /// Where they came from, for messages: `idmint.config = '...'` or the GUCs.
    pub(crate) source: String,
    /// The whole config (from the file, or built from the GUCs).
    pub(crate) config: Config,
    /// `snowflake.layout`, parsed.
    pub(crate) layout: Layout,
    /// `[obfuscation]`'s permutation; `None` without `obfuscation.key`.
    pub(crate) obfuscator: Option<Obfuscator>,
}

impl Settings {
    /// A generator builder for `(datacenter, worker)` with the config's
    /// clock and policies: what the keeper's generator is built with.
    pub(crate) fn builder(&self, datacenter: u32, worker: u32) -> SnowflakeBuilder {
        let sf = &self.config.snowflake;
        Snowflake::builder(self.layout)
            .with_datacenter(datacenter)
            .with_worker(worker)
            .with_clock(self.clock())
            .with_clock_behind(sf.clock_behind)
            .with_sequence_exhausted(sf.sequence_exhausted)
            .with_sequence_start(sf.sequence_start)
    }

    /// A new clock of `snowflake.clock`'s kind.
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        IdClock::new(self.config.snowflake.clock).shared()
    }

    /// The registry's name (`file`, `etcd`, ...).
    pub(crate) fn registry(&self) -> &'static str {
        self.config.snowflake.registry.name()
    }
}

static SETTINGS: OnceLock<Result<Settings, Failure>> = OnceLock::new();

/// The settings, loaded on first use (in the postmaster when preloaded).
///
/// # Errors
/// `invalid_config` (or the layout's code) naming the setting or the
/// config key that is wrong, and where its value came from.
pub(crate) fn settings() -> Result<&'static Settings, Failure> {
    SETTINGS.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Settings, Failure> {
    let path = crate::guc_text(&crate::CONFIG, "");
    let (source, config) = if path.is_empty() {
        (
            "the idmint.registry, idmint.worker and idmint.layout settings".to_owned(),
            from_gucs()?,
        )
    } else {
        let source = format!("idmint.config = '{path}'");
        let mut config = idmint_node::load_checked(Some(PathBuf::from(&path).as_path()))
            .map_err(|e| Failure::new("invalid_config", format!("{source}: {e}")))?;
        if config.server.data_dir == Config::default().server.data_dir {
            config.server.data_dir = default_data_dir();
        }
        (source, config)
    };
    let layout = config
        .layout()
        .map_err(|e| Failure::new("invalid_config", format!("{source}: {e}")))?;
    let obfuscator = config
        .obfuscation
        .obfuscator()
        .map_err(|e| Failure::new("invalid_config", format!("{source}: {e}")))?;
    Ok(Settings {
        source,
        config,
        layout,
        obfuscator,
    })
}

/// The embedded default's config, from the GUCs, checked as a file would be.
fn from_gucs() -> Result<Config, Failure> {
    let kind = crate::guc_text(&crate::REGISTRY, "file");
    let registry = match kind.as_str() {
        "file" => RegistryKind::File,
        "static" => RegistryKind::Static,
        other => {
            return Err(Failure::new(
                "invalid_config",
                format!(
                    "idmint.registry = '{other}' is not file or static; name an idmint config \
                     file in idmint.config for the sql, redis, etcd and zookeeper registries"
                ),
            ));
        }
    };
    let layout = crate::guc_text(&crate::LAYOUT, "twitter");
    // Refused by the layout's own parser first, with its code (as before).
    layout.parse::<Layout>().map_err(Failure::from)?;
    let mut config = Config::default();
    config.snowflake.registry = registry;
    config.snowflake.layout = layout;
    config.snowflake.worker = Some(u32::try_from(crate::WORKER.get()).unwrap_or(0));
    config.server.data_dir = default_data_dir();
    idmint_node::check(&config).map_err(|e| {
        Failure::new(
            "invalid_config",
            format!("idmint.registry, idmint.worker, idmint.layout: {e}"),
        )
    })?;
    Ok(config)
}

/// `$PGDATA/idmint`: the file registry's lease, the marks.
fn default_data_dir() -> PathBuf {
    // SAFETY: DataDir is set before shared_preload_libraries load and never changes.
    let data_dir = unsafe { pg_sys::DataDir };
    if data_dir.is_null() {
        return PathBuf::from("idmint");
    }
    // SAFETY: a NUL-terminated string PostgreSQL owns for the process's life.
    let text = unsafe { std::ffi::CStr::from_ptr(data_dir) }.to_string_lossy();
    PathBuf::from(text.as_ref()).join("idmint")
}
