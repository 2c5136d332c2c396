//! One idmint node without its network surfaces: what `idmint serve` and an
//! embedded generator (`idmint-embed`, which every language binding wraps)
//! share, so that both open, check and refuse alike.
//!
//! - The configuration ([`config`]): a TOML file overlaid by `IDMINT_…`
//!   variables ([`Config::load`]), and [`check`], the checks a start runs
//!   before any I/O ([`load_checked`]: both, once).
//! - Opening ([`open`]): the worker registry, the oracle's leader registry,
//!   the segment store and allocator, with the settings each is opened with.
//! - The node's identity and data directory ([`node_identity`],
//!   [`process_identity`], [`create_data_dir`]), and the clock IDs are made
//!   from ([`IdClock`]).
//! - Failing: [`NodeError`] (a start), [`IssueError`] (issuing: a class, a
//!   stable code, a message, a retry hint), and [`ERROR_CODES`], the one
//!   list of stable codes every surface and binding reports; [`MarkWait`],
//!   the one wait of a snowflake call at the high-water mark.
//!
//! Architecture Invariant: nothing here listens, serves or speaks TLS;
//! `idmint-server` (the surfaces) and `idmint-embed` (the bindings) sit on
//! this crate, and neither the bindings nor embed depend on the server.
//! With the `etcd` feature off, the etcd registry is refused at [`check`]
//! and nothing of gRPC is compiled.

#![deny(missing_docs)]

mod check;
mod clock;
pub mod config;
mod error;
mod identity;
mod mark;
pub mod open;

pub use check::{check, load_checked};
pub use clock::IdClock;
pub use config::{Config, ConfigError};
pub use error::{ERROR_CODES, ErrorClass, IssueError, MARK_POLL, MARK_WAIT, NodeError};
pub use identity::{advertised_address, create_data_dir, node_identity, process_identity};
pub use mark::MarkWait;
