//! The server's two failure types:
//! - [`ServerError`], why the server could not start or serve (public: the
//!   binary reports it), each naming the step and the config key behind it;
//! - [`IssueError`], the one failure type of issuing (and of reading an ID):
//!   a class each surface maps to its own status, a stable code
//!   (`key_not_found`, `unavailable`, ...), a message naming the value, and a
//!   retry hint.
//!
//! They sit below everything that fails with them: the start-up steps and
//! the backends they open, the key table and the shared state
//! (`wrong_strategy`), so that none of those imports `start.rs` or `issue.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use idmint_registry::{RegistryError, WorkerStatus};
use idmint_segment::SegmentError;

use crate::config::ConfigError;
use crate::tls::TlsError;

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
    /// The data directory could not be created.
    #[error("cannot create server.data_dir {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The worker registry failed (unreachable, exhausted, clock checks, ...).
    #[error("snowflake worker registry ({registry}): {source}")]
    Registry {
        /// `snowflake.registry`.
        registry: &'static str,
        /// The registry's error.
        source: RegistryError,
    },
    /// The segment store failed (unreachable, bad URL, a declared key that can't be made).
    #[error("segment store ({what}): {source}")]
    Segment {
        /// What was being done.
        what: String,
        /// The store's error.
        source: SegmentError,
    },
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
            ServerError::Registry { source, .. } => {
                matches!(source, RegistryError::Config { .. })
            }
            ServerError::Segment { source, .. } => source.is_bad_input(),
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

/// Every stable error code, grouped as docs/api.md's error-code tables are:
/// the values of the `code` enum in the OpenAPI document (`http/openapi.rs`).
/// Some never come over HTTP (docs/api.md says "none"), but a client that
/// reads the enum strictly must accept every code any surface reports.
/// `crates/idmint/tests/it/api_doc.rs` holds this list to the codes the code
/// answers and to docs/api.md's tables.
pub const ERROR_CODES: &[&str] = &[
    // Requests
    "not_found",
    "method_not_allowed",
    "invalid_path",
    "invalid_query",
    "invalid_count",
    "invalid_key",
    "invalid_id",
    "invalid_version",
    "invalid_json",
    "invalid_body",
    "body_too_large",
    "unauthorized",
    "admin_disabled",
    "noauth",
    "not_contiguous",
    "not_ready",
    "internal",
    // Keys and strategies
    "unknown_key",
    "wrong_strategy",
    "obfuscation_disabled",
    // Snowflake IDs
    "mark_reached",
    "clock_behind",
    "rollback_exhausted",
    "layout_exhausted",
    "clock_before_epoch",
    "ring_empty",
    "invalid_run",
    // Segment keys
    "key_not_found",
    "key_exists",
    "key_forgotten",
    "invalid_spec",
    "unavailable",
    "key_below_floor",
    "store_reset",
    "key_exhausted",
    "store_went_backwards",
    "floor_file_error",
    "store_timeout",
    "store_error",
    "timeout",
    "serial_overflow",
    "invalid_config",
    // Monotonic keys
    "no_leader",
    "not_leader",
    "no_oracle",
    "shutting_down",
    // Worker registry
    "workers_exhausted",
    "registry_held",
    "registry_timeout",
    "registry_backend",
    "registry_unavailable",
    "registry_unsupported",
    "registry_config",
    "lease_lost",
    "worker_taken",
    "clock_behind_mark",
    "clock_skew",
    // Configuration and layouts
    "invalid_layout",
    "invalid_layout_text",
    "invalid_text",
    "node_out_of_range",
    "invalid_obfuscator",
    "invalid_public_id",
    "unknown_key_id",
    "encode_failed",
];

/// What kind of failure an [`IssueError`] is; each surface picks its status from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// The caller's input is wrong (a bad key, count or ID).
    BadInput,
    /// The key does not exist.
    NotFound,
    /// The thing to create exists already.
    Conflict,
    /// A token is missing or wrong.
    Unauthorized,
    /// Can't serve right now (lease, store); retry after `retry_after`.
    Unavailable,
    /// A failure of this server.
    Internal,
}

/// A failure to issue (or to read an ID), with a stable code.
#[derive(Debug, Clone)]
pub(crate) struct IssueError {
    pub class: ErrorClass,
    pub code: &'static str,
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl IssueError {
    pub(crate) fn new(class: ErrorClass, code: &'static str, message: impl Into<String>) -> Self {
        IssueError {
            class,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn bad_input(code: &'static str, message: impl Into<String>) -> Self {
        IssueError::new(ErrorClass::BadInput, code, message)
    }

    pub(crate) fn unavailable(
        code: &'static str,
        message: impl Into<String>,
        after: Duration,
    ) -> Self {
        IssueError {
            retry_after: Some(after),
            ..IssueError::new(ErrorClass::Unavailable, code, message)
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        IssueError::new(ErrorClass::Internal, "internal", message)
    }

    /// Snowflake IDs refused at the high-water mark once the wait for it
    /// ([`MARK_WAIT`]) is over, or at once when the lease is not held:
    /// `mark_reached`, with why (the lease's state, the store's failure),
    /// and a retry in 1 s.
    pub(crate) fn paused(e: &idmint_core::Error, status: &WorkerStatus) -> Self {
        let why = status
            .not_ready_reason()
            .unwrap_or_else(|| "the high-water mark is being persisted".to_owned());
        IssueError::unavailable(
            e.code(),
            format!("snowflake IDs are paused: {why}"),
            Duration::from_secs(1),
        )
    }
}

/// How long a snowflake call that met the high-water mark waits for the
/// keeper to persist the next window (while the lease is held) before it is
/// refused with [`IssueError::paused`]; the server and `idmint-embed` alike.
pub(crate) const MARK_WAIT: Duration = Duration::from_millis(250);

/// How often that wait looks again.
pub(crate) const MARK_POLL: Duration = Duration::from_millis(2);

impl From<idmint_core::Error> for IssueError {
    fn from(e: idmint_core::Error) -> Self {
        let code = e.code();
        if e.is_bad_input() {
            IssueError::bad_input(code, e.to_string())
        } else if e.is_transient() {
            IssueError::unavailable(code, e.to_string(), Duration::from_secs(1))
        } else {
            IssueError::new(ErrorClass::Internal, code, e.to_string())
        }
    }
}

impl From<SegmentError> for IssueError {
    fn from(e: SegmentError) -> Self {
        let code = e.code();
        match &e {
            SegmentError::NotFound { .. } => {
                IssueError::new(ErrorClass::NotFound, code, e.to_string())
            }
            SegmentError::KeyExists { .. } | SegmentError::KeyForgotten { .. } => {
                IssueError::new(ErrorClass::Conflict, code, e.to_string())
            }
            // The store forgot what this node issued: no ID until an
            // operator raises the key. Another node may still serve; a
            // retry here sooner than a few seconds only adds load.
            SegmentError::KeyBelowFloor { .. } | SegmentError::StoreReset { .. } => {
                IssueError::unavailable(code, e.to_string(), Duration::from_secs(5))
            }
            _ if e.is_bad_input() => IssueError::bad_input(code, e.to_string()),
            _ if e.is_transient() => IssueError::unavailable(
                code,
                e.to_string(),
                e.retry_after().unwrap_or(Duration::from_secs(1)),
            ),
            _ => IssueError::new(ErrorClass::Internal, code, e.to_string()),
        }
    }
}
