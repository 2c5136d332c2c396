//! idmint's server: configuration, start-up and the HTTP API.
//!
//! [`Server::start`] does the I/O of starting, in this order, each step named
//! in its error: bind the HTTP listener (its port names this node to the
//! registry) and the RESP and gRPC listeners when configured, claim the worker ID through the registry's
//! [`WorkerKeeper`](idmint_registry::WorkerKeeper) (which persists the first
//! high-water mark before any ID may be issued), open the segment store and
//! create the keys declared in config, and start the segment preloader.
//! [`Server::serve`] answers HTTP (and RESP, gRPC) until the shutdown future completes, then
//! stops accepting, lets in-flight requests finish (bounded by
//! `server.shutdown_grace`), and releases the worker claim.
//!
//! Background tasks (the keeper, the segment preloader, the lease watcher) are
//! each owned by a guard the [`Server`] holds; none starts before
//! [`Server::start`] and none outlives [`Server::serve`].
//!
//! The HTTP surface is in `http.rs`; its error bodies are
//! `{"error": {"code": "...", "message": "..."}}` with stable codes, and its
//! OpenAPI 3.1 document (`GET /openapi.json`) is generated from its handlers
//! (`http/openapi.rs`).
//! The Redis-protocol (RESP2) surface, on its own port when
//! `server.resp_addr` is set, is in `resp.rs`; the gRPC surface
//! (`idmint.v1.IdService`, from `proto/idmint/v1/idmint.proto`), on its own
//! port when `server.grpc_addr` is set, in [`grpc`]. All issue IDs through
//! `issue.rs`, which issues by the key's strategy (resolved by the key table,
//! `keys.rs`) and fails with an `IssueError` (`error.rs`) that each surface
//! maps to those codes.
//! With `[tls]`, every listener speaks TLS from one certificate (`tls.rs`),
//! reloaded through [`TlsReload`] and when its files change.
//!
//! The start-up steps are in `start.rs`; the key table and the counting
//! wrappers around the backends `idmint-node` opens in `backends.rs`;
//! the sockets and connection limits every listener shares in `listen.rs`;
//! the state every surface shares (`AppState`) in `state.rs`, with
//! readiness (`ready.rs`) and token checks (`tokens.rs`)
//! beside it; the metrics recorder in `metrics.rs` and the parts that feed it
//! in `metrics/`. Imports point one way: surfaces → issuing → state → the
//! parts it holds; nothing below imports what is above it.
//!
//! The node underneath (the config, opening the registry, the segment store
//! and the oracle, the start's checks, the issue errors and their codes) is
//! `idmint-node`, which `idmint-embed` (the in-process layer of the language
//! bindings) shares: an embedded generator is opened and refuses exactly as
//! this server does, without compiling any of this crate.

#![deny(missing_docs)]

mod backends;
mod durability;
mod error;
mod fleet;
pub mod grpc;
mod http;
mod issue;
mod keys;
mod listen;
mod metrics;
mod monotonic;
#[doc(hidden)]
pub mod proto;
mod ready;
mod resp;
mod sql_topology;
mod start;
mod state;
mod status;
mod tls;
mod tokens;

pub use durability::{
    DurabilityWarning, TopologyReport, cluster_topologies, coordinator_warnings, redis_topologies,
};
pub use error::ServerError;
pub use sql_topology::{SqlTopology, sql_topology};
pub use start::{Server, run};
pub use tls::{TlsError, TlsReload, check_files as check_tls_files};
