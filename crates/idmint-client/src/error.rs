//! The client's one error type, [`Error`], and what each failed attempt on one
//! server was ([`Failure`]).

use std::fmt;
use std::time::Duration;

/// Why a call failed. Never a made-up ID: every failure reaches the caller as
/// one of these.
///
/// - [`Error::Rejected`]: a server answered 4xx. The request itself is wrong
///   (an unknown key, a bad count), so it was **not** retried on another
///   server; [`Error::code`] is the server's code (`key_not_found`, ...).
/// - [`Error::Unavailable`]: every server was tried and none could serve
///   (refused connection, timeout, 503, a broken response). Transient: retry
///   after [`Error::retry_after`].
/// - [`Error::Protocol`]: a server answered 200 with a body that isn't the
///   IDs asked for (for example a UUID key, whose IDs are not integers).
/// - [`Error::InvalidInput`]: the client was built or called wrongly.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A server refused the request with a 4xx status. Not retried.
    Rejected {
        /// The server's base URL.
        server: String,
        /// The HTTP status (400, 404, ...).
        status: u16,
        /// The server's stable error code (`key_not_found`, `invalid_count`, ...).
        code: String,
        /// The server's message.
        message: String,
    },
    /// No server could serve the request; one [`Failure`] per attempt.
    Unavailable {
        /// What went wrong on each server tried, in the order tried.
        failures: Vec<Failure>,
        /// When a server may be back: the soonest of the servers' hints.
        retry_after: Option<Duration>,
    },
    /// A server answered success with a body that isn't what was asked.
    Protocol {
        /// The server's base URL.
        server: String,
        /// What was wrong with the body.
        message: String,
    },
    /// The client was built or called wrongly (no servers, a bad URL, a count of 0).
    InvalidInput {
        /// What was wrong.
        message: String,
    },
}

impl Error {
    /// A stable code: the server's own code for [`Error::Rejected`]
    /// (`key_not_found`, `invalid_count`, ...), else `unavailable`,
    /// `protocol` or `invalid_input`.
    pub fn code(&self) -> &str {
        match self {
            Error::Rejected { code, .. } => code,
            Error::Unavailable { .. } => "unavailable",
            Error::Protocol { .. } => "protocol",
            Error::InvalidInput { .. } => "invalid_input",
        }
    }

    /// True when trying again later may succeed ([`Error::Unavailable`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// True when the request or the client's setup is wrong: retrying won't help.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Error::Rejected { .. } | Error::InvalidInput { .. })
    }

    /// When to try again, for transient errors.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidInput {
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Rejected {
                server,
                status,
                code,
                message,
            } => write!(
                f,
                "{server} rejected the request ({status} {code}): {message}"
            ),
            Error::Unavailable { failures, .. } => {
                f.write_str("no server could serve the request")?;
                for (i, failure) in failures.iter().enumerate() {
                    f.write_str(if i == 0 { ": " } else { "; " })?;
                    write!(f, "{failure}")?;
                }
                Ok(())
            }
            Error::Protocol { server, message } => {
                write!(f, "unexpected response from {server}: {message}")
            }
            Error::InvalidInput { message } => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

/// One failed attempt on one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The server's base URL.
    pub server: String,
    /// What went wrong.
    pub reason: FailureReason,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.server, self.reason)
    }
}

/// What went wrong in one attempt; every kind sends the client to the next server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureReason {
    /// No connection (refused, unreachable, reset before an answer).
    Connect(String),
    /// No complete answer within the client's timeout.
    Timeout,
    /// The server answered 503 (or 429): it can't serve right now.
    Unavailable {
        /// The server's error code (`unavailable`, `not_ready`, ...).
        code: String,
        /// The server's message.
        message: String,
        /// The server's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// Another 5xx answer.
    ServerError {
        /// The HTTP status.
        status: u16,
        /// The server's error code, when the body had one.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The connection broke while the body was read.
    Body(String),
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::Connect(e) => write!(f, "can't connect: {e}"),
            FailureReason::Timeout => f.write_str("timed out"),
            FailureReason::Unavailable { code, message, .. } => {
                write!(f, "unavailable ({code}): {message}")
            }
            FailureReason::ServerError {
                status,
                code,
                message,
            } => write!(f, "server error ({status} {code}): {message}"),
            FailureReason::Body(e) => write!(f, "response broke off: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_classes() {
        let rejected = Error::Rejected {
            server: "http://a".into(),
            status: 404,
            code: "key_not_found".into(),
            message: "segment key \"x\" was not found".into(),
        };
        assert_eq!(rejected.code(), "key_not_found");
        assert!(!rejected.is_transient() && rejected.is_bad_input());
        assert_eq!(
            rejected.to_string(),
            "http://a rejected the request (404 key_not_found): segment key \"x\" was not found"
        );
        let down = Error::Unavailable {
            failures: vec![
                Failure {
                    server: "http://a".into(),
                    reason: FailureReason::Timeout,
                },
                Failure {
                    server: "http://b".into(),
                    reason: FailureReason::Unavailable {
                        code: "unavailable".into(),
                        message: "store down".into(),
                        retry_after: Some(Duration::from_secs(2)),
                    },
                },
            ],
            retry_after: Some(Duration::from_secs(2)),
        };
        assert_eq!(down.code(), "unavailable");
        assert!(down.is_transient() && !down.is_bad_input());
        assert_eq!(down.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(
            down.to_string(),
            "no server could serve the request: http://a: timed out; \
             http://b: unavailable (unavailable): store down"
        );
        assert_eq!(Error::invalid("count 0").code(), "invalid_input");
    }
}
