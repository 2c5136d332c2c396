//! Worker-ID registries and high-water-mark persistence for idmint.
//!
//! A snowflake generator is safe only while no other generator uses its worker ID
//! and it never issues below what it issued before a restart. This crate gives
//! both: a [`WorkerRegistry`] hands out worker IDs (with leases where the backend
//! has them) and stores each worker's high-water mark, and a [`WorkerKeeper`]
//! persists the mark ahead of the generator and fences it when the
//! lease or the store is lost.
//!
//! The generators themselves live in `idmint-core` and do no I/O; this crate
//! talks to them only through `advance_mark` and `with_start_after`.
//!
//! # Features
//! - `etcd` (off by default): the etcd registry ([`etcd`]). Its client's
//!   build script generates etcd's gRPC code with `protoc`, so a build with
//!   it needs one: on `PATH`, or named by the `PROTOC` variable (the
//!   `protoc-bin-vendored` crate ships one). Every other registry builds with
//!   a Rust toolchain alone. idmint's server turns it on.

#![deny(missing_docs)]

mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod file;
pub mod fixed;
pub mod keeper;
pub mod leader;
pub mod redis;
mod registry;
pub mod sql;
mod util;
pub mod zookeeper;

pub use error::{RegistryError, Result};
pub use keeper::{
    GeneratorSettings, KeeperConfig, KeeperGuard, LeaseState, WorkerHandle, WorkerKeeper,
    WorkerStatus,
};
pub use leader::{Campaign, CampaignConfig, CampaignGuard, LeaderInfo, Oracle, OracleStatus, Role};
pub use registry::{
    Claim, FLEET_RECENT, FleetMember, Lease, NodeIdentity, PeerReport, ReportRevision,
    WorkerRegistry, check_given_worker,
};
