//! [`IssueError`], the one failure type of issuing (and of reading an ID):
//! a class each surface maps to its own status, a stable code (`key_not_found`,
//! `unavailable`, ...), a message naming the value, and a retry hint.
//!
//! It sits below the key table and the shared state, which fail with it too
//! (`wrong_strategy`), so that neither imports `issue.rs`.

use std::time::Duration;

use idmint_segment::SegmentError;

// ---- Errors ----

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
#[derive(Debug)]
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
}

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
            SegmentError::KeyExists { .. } => {
                IssueError::new(ErrorClass::Conflict, code, e.to_string())
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
