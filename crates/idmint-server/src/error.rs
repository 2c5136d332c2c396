//! [`ServerError`], why the server could not start or serve (public: the
//! binary reports it), each naming the step and the config key behind it:
//! the listeners and TLS here, the steps a node shares with `idmint-embed`
//! as `idmint_node::NodeError`. The failure type of issuing, `IssueError`,
//! and the list of error codes are `idmint-node`'s.

use std::net::SocketAddr;

use crate::tls::TlsError;
use idmint_node::{ConfigError, NodeError};

/// Why the server could not start or serve. Each names the step and the
/// config key behind it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP listener could not be bound.
    #[error("cannot listen on server.http_addr {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The RESP (Redis-protocol) listener could not be bound.
    #[error("cannot listen on server.resp_addr {addr}: {source}")]
    BindResp {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC listener could not be bound.
    #[error("cannot listen on server.grpc_addr {addr}: {source}")]
    BindGrpc {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A step a node shares with `idmint-embed` (the data directory, the
    /// registry, the segment store).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The TLS files (`[tls]`) can't be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Serving failed.
    #[error("serving HTTP failed: {0}")]
    Serve(std::io::Error),
}

impl ServerError {
    /// True when the configuration (rather than a backend) is at fault.
    pub fn is_config(&self) -> bool {
        match self {
            ServerError::Config(_) | ServerError::Tls(_) => true,
            ServerError::Node(e) => e.is_config(),
            _ => false,
        }
    }
}

// ---- Errors ----

/// The gRPC metadata key of the stable error code of a failed call (public
/// as `grpc::ERROR_CODE_METADATA`). Here, below both the gRPC surface that
/// writes it and the oracle's forwarder that reads it, so neither imports
/// the other.
pub const ERROR_CODE_METADATA: &str = "idmint-error-code";
