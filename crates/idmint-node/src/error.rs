//! A node's two failure types:
//! - [`NodeError`], why a node could not start (the server's `ServerError`
//!   wraps it; `idmint-embed` reports it), each naming the step and the
//!   config key behind it;
//! - [`IssueError`], the one failure type of issuing (and of reading an ID):
//!   a class each surface maps to its own status, a stable code
//!   (`key_not_found`, `unavailable`, ...), a message naming the value, and a
//!   retry hint.
//!
//! Both are here, below the server and `idmint-embed`, so that the network
//! surfaces and the bindings report a failure with one class, one code and
//! one retry hint.

use std::time::Duration;

use idmint_registry::{RegistryError, WorkerStatus};
use idmint_segment::SegmentError;

use crate::config::ConfigError;

/// Why a node could not start: the steps `idmint serve` and an embedded
/// generator share (the config, the data directory, the registry, the
/// segment store). Each names the step and the config key behind it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
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
}

impl NodeError {
    /// True when the configuration (rather than a backend) is at fault.
    pub fn is_config(&self) -> bool {
        match self {
            NodeError::Config(_) => true,
            NodeError::Registry { source, .. } => {
                matches!(source, RegistryError::Config { .. })
            }
            NodeError::Segment { source, .. } => source.is_bad_input(),
            NodeError::DataDir { .. } => false,
        }
    }
}

// ---- Errors ----

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
pub enum ErrorClass {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueError {
    /// What kind of failure it is.
    pub class: ErrorClass,
    /// The stable code (docs/api.md).
    pub code: &'static str,
    /// What went wrong, naming the value.
    pub message: String,
    /// When to retry (the HTTP `Retry-After`), for failures that pass.
    pub retry_after: Option<Duration>,
}

impl IssueError {
    /// A failure of `class` with `code`.
    pub fn new(class: ErrorClass, code: &'static str, message: impl Into<String>) -> Self {
        IssueError {
            class,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The caller's input is wrong.
    pub fn bad_input(code: &'static str, message: impl Into<String>) -> Self {
        IssueError::new(ErrorClass::BadInput, code, message)
    }

    /// Can't serve now; retry `after`.
    pub fn unavailable(code: &'static str, message: impl Into<String>, after: Duration) -> Self {
        IssueError {
            retry_after: Some(after),
            ..IssueError::new(ErrorClass::Unavailable, code, message)
        }
    }

    /// A failure of this node (`internal`).
    pub fn internal(message: impl Into<String>) -> Self {
        IssueError::new(ErrorClass::Internal, "internal", message)
    }

    /// Snowflake IDs refused at the high-water mark once the wait for it
    /// ([`MARK_WAIT`]) is over, or at once when the lease is not held:
    /// `mark_reached`, with why (the lease's state, the store's failure),
    /// and a retry in 1 s.
    pub fn paused(e: &idmint_core::Error, status: &WorkerStatus) -> Self {
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
pub const MARK_WAIT: Duration = Duration::from_millis(250);

/// How often that wait looks again.
pub const MARK_POLL: Duration = Duration::from_millis(2);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_the_codes_and_hints_of_the_server() {
        let unavailable = IssueError::from(SegmentError::Unavailable {
            key: "order".to_owned(),
            retry_after: Duration::from_millis(300),
            reason: "store down".to_owned(),
        });
        assert_eq!(unavailable.code, "unavailable");
        assert_eq!(unavailable.retry_after, Some(Duration::from_millis(300)));
        let missing = IssueError::from(SegmentError::NotFound {
            key: "nope".to_owned(),
        });
        assert_eq!((missing.code, missing.retry_after), ("key_not_found", None));
        let bad = IssueError::from(idmint_core::Error::InvalidCount { count: 0, max: 5 });
        assert_eq!((bad.code, bad.retry_after), ("invalid_count", None));
    }
}
