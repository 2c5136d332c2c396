//! The checks a start runs before any I/O: [`check`], which `idmint serve`,
//! `idmint config check` and an embedded generator or allocator all run, so
//! a config is refused in the same words wherever it is used.

use std::path::Path;

use idmint_core::{Layout, Snowflake};
use idmint_registry::RegistryError;
use idmint_registry::check_given_worker;
use idmint_registry::fixed::{HostRegistry, K8sRegistry};
use idmint_segment::SegmentError;

use crate::config::{Config, ConfigError, RegistryKind};
#[cfg(feature = "etcd")]
use crate::open::etcd_config;
#[cfg(feature = "etcd")]
use crate::open::leader_etcd_config;
use crate::open::{
    StoreSettings, generator_settings, keeper_config, leader_redis_config, leader_sql_config,
    leader_zookeeper_config, oracle_keeper_config, redis_registry_config, segment_config,
    sql_registry_config, store_settings, zookeeper_config,
};

/// Loads a config as `idmint serve` does (the file at `path`, then the
/// `IDMINT_…` environment variables over it) and runs [`check`] once, its
/// error located in the file or variable the value came from. What an
/// embedded generator, allocator or public-ID codec opens a config with.
///
/// # Errors
/// [`ConfigError`] naming the key, and where its value came from.
pub fn load_checked(path: Option<&Path>) -> Result<Config, ConfigError> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let config = Config::load(path, env.clone())?;
    check(&config).map_err(|e| e.located(path, env))?;
    Ok(config)
}

/// Checks everything a start (`idmint serve`'s `Server::start`, an embedded
/// generator's or allocator's open) can check before any I/O:
/// [`Config::validate`], then what the worker registry, the keeper and
/// the segment store would refuse when opened, on the settings built by
/// the same functions a start opens them with (`open.rs`). A start runs it first;
/// `idmint serve` and `idmint config check` run it before anything else,
/// so a config that passes the check fails at start only for what needs
/// the network, the data directory or the clock.
///
/// Not checked here: what only a connection, the data directory or the
/// clock tells (a URL's host, credentials, the tables, a lock held by
/// another process, a clock behind the stored mark).
///
/// # Errors
/// [`ConfigError::Invalid`] naming the key (or the section, for a
/// backend's setting) that is wrong.
pub fn check(config: &Config) -> Result<(), ConfigError> {
    config.validate()?;
    let invalid = |key: &str, message: String| ConfigError::Invalid {
        key: key.to_owned(),
        origin: crate::config::CHECKED.to_owned(),
        message,
    };
    let registry = |key: &'static str| move |e: RegistryError| invalid(key, e.to_string());
    let sf = &config.snowflake;
    let kind = sf.registry;
    let layout = config.layout()?;
    let now = jiff::Timestamp::now();
    check_not_run_out("snowflake.layout", &sf.layout, layout, now)?;
    if config.has_monotonic_keys() {
        check_not_run_out(
            "monotonic.layout",
            &config.monotonic.layout,
            config.monotonic_layout()?,
            now,
        )?;
    }
    if let Some(dc) = sf.datacenter {
        // The core's own check, as the keeper meets it when building the generator.
        Snowflake::builder(layout)
            .with_datacenter(dc)
            .build()
            .map_err(|e| invalid("snowflake.datacenter", e.to_string()))?;
    }
    if let Some(worker) = sf.worker {
        // Config::validate allows a worker ID with these two only.
        let range = generator_settings(config, layout).range();
        check_given_worker(kind.name(), worker, range).map_err(registry("snowflake.worker"))?;
    }
    keeper_config(config)
        .validate(kind.name())
        .map_err(registry("snowflake.window"))?;
    match kind {
        RegistryKind::File | RegistryKind::Static => {}
        RegistryKind::Host => {
            // Without an address the host name is resolved: I/O, left to start.
            if let Some(address) = sf.host.address {
                HostRegistry::from_ipv4(address).map_err(registry("snowflake.host.address"))?;
            }
        }
        RegistryKind::K8s => {
            if let Some(hostname) = &sf.k8s.hostname {
                K8sRegistry::from_hostname(hostname).map_err(registry("snowflake.k8s.hostname"))?;
            }
        }
        RegistryKind::Sql => sql_registry_config(config)
            .validate()
            .map_err(registry("snowflake.sql"))?,
        RegistryKind::Redis => redis_registry_config(config)
            .validate()
            .map_err(registry("snowflake.redis"))?,
        #[cfg(feature = "etcd")]
        RegistryKind::Etcd => etcd_config(config)
            .validate()
            .map_err(registry("snowflake.etcd"))?,
        #[cfg(not(feature = "etcd"))]
        RegistryKind::Etcd => {
            return Err(registry("snowflake.registry")(crate::open::without_etcd()));
        }
        RegistryKind::Zookeeper => zookeeper_config(config)
            .validate()
            .map_err(registry("snowflake.zookeeper"))?,
    }
    if config.has_monotonic_keys() {
        let name = kind.name();
        oracle_keeper_config(config)
            .validate(name)
            .map_err(registry("monotonic"))?;
        match kind {
            RegistryKind::Sql => leader_sql_config(config).validate(),
            RegistryKind::Redis => leader_redis_config(config).validate(),
            #[cfg(feature = "etcd")]
            RegistryKind::Etcd => leader_etcd_config(config).validate(),
            RegistryKind::Zookeeper => leader_zookeeper_config(config).validate(),
            _ => Ok(()),
        }
        .map_err(registry("monotonic.lease_ttl"))?;
    }
    let segment = |key: &'static str| move |e: SegmentError| invalid(key, e.to_string());
    segment_config(config).check().map_err(segment("segment"))?;
    match store_settings(config) {
        StoreSettings::Redis { config, .. } => {
            config.validate().map_err(segment("segment.key_prefix"))?;
        }
        StoreSettings::Sql(config) => config.validate().map_err(segment("segment.table"))?,
    }
    Ok(())
}

/// Refuses a layout that has run out at `now`: every ID it could make would
/// overflow its time bits (uid-generator's default layout ran out on
/// 2024-11-20 and went on issuing negative IDs).
fn check_not_run_out(
    key: &str,
    text: &str,
    layout: Layout,
    now: jiff::Timestamp,
) -> Result<(), ConfigError> {
    match layout.runs_out_at() {
        Some(end) if end <= now => Err(ConfigError::Invalid {
            key: key.to_owned(),
            origin: crate::config::CHECKED.to_owned(),
            message: format!(
                "layout {text:?} ran out at {end}: it can't issue an ID; use a later epoch \
                 or more time bits (`idmint layout` shows when a layout runs out)"
            ),
        }),
        _ => Ok(()),
    }
}
