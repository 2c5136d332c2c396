//! The one error type of the embedded layer: idmint's stable code, a message
//! and the retry hint, which every binding turns into its language's
//! exception or error value as it is.

use std::fmt;
use std::time::Duration;

use idmint_node::{ConfigError, ErrorClass, IssueError, NodeError};
use idmint_registry::RegistryError;

use crate::workers::Conflict;

/// Every stable error code a binding can report, in the server's order
/// (`idmint_node::ERROR_CODES`, grouped as docs/api.md's tables are),
/// then the two only an in-process generator has: `closed` (a call after
/// `close()`) and `forked` (a generator used in a forked child). Each
/// binding's constants (Python `ErrorCode`, Node `ErrorCode`, Java
/// `IdmintException` constants, Go `Code…`) are generated from it, and
/// `crates/idmint-embed/tests/it/error_codes.rs` fails when one differs.
pub fn error_codes() -> impl Iterator<Item = &'static str> {
    idmint_node::ERROR_CODES
        .iter()
        .chain(&["closed", "forked"])
        .copied()
}

/// Everything that can fail here, with the stable code the server sends for
/// the same failure (docs/api.md, "Error codes").
///
/// - [`Error::code`]: `clock_behind`, `mark_reached`, `key_not_found`,
///   `unavailable`, `invalid_layout_text`, `workers_exhausted`, ...;
///   `worker_taken` also for a generator whose layout and worker ID overlap
///   a live one's in this process (`workers.rs`); and the two of the
///   embedded layer alone, `closed` (a call after `close`) and `forked` (a
///   fixed-worker generator used in a forked child).
/// - [`Error::message`]: what went wrong, naming the value; it may change
///   between releases, the code never does.
/// - [`Error::retry_after`]: how long to wait before trying again, for the
///   failures that pass (the server's `Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: Kind,
    message: String,
    retry_after: Option<Duration>,
    /// The class of the error it came from: the caller's input or
    /// configuration is at fault.
    bad_input: bool,
}

/// Where an error came from; the code is read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A failure to issue or to read an ID, with the server's code.
    Refused(&'static str),
    /// The worker registry's failure (a claim, the clock checks at start).
    Registry(&'static str),
    /// A configuration (file, options) that can't work.
    Config,
    /// The generator or allocator was closed.
    Closed,
    /// A generator with a fixed worker used in a forked child.
    Forked,
    /// A generator whose IDs would repeat a live one's in this process:
    /// the registry's `worker_taken`, for one process.
    InUse,
    /// The runtime's threads could not be started, or a binding caught a
    /// panic (`internal`).
    Runtime,
}

impl Error {
    /// The stable, machine-readable code (see the type's docs).
    pub fn code(&self) -> &'static str {
        match &self.kind {
            Kind::Refused(code) | Kind::Registry(code) => code,
            Kind::Config => "invalid_config",
            Kind::Closed => "closed",
            Kind::Forked => "forked",
            Kind::InUse => "worker_taken",
            Kind::Runtime => "internal",
        }
    }

    /// What went wrong, naming the offending value.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// How long to wait before a retry may succeed; `None` when retrying the
    /// same call can't help (bad input, a closed generator).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// True when the caller's input or configuration is at fault: the
    /// class of the error this one came from (`IssueError`'s, the
    /// registry's), never a list of codes.
    pub fn is_bad_input(&self) -> bool {
        self.bad_input
    }

    /// A refusal with the server's `code`, for a check of this layer's own
    /// (a count, a setting that is no byte).
    pub(crate) fn refused(code: &'static str, message: String, bad_input: bool) -> Error {
        Error {
            kind: Kind::Refused(code),
            message,
            retry_after: None,
            bad_input,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error {
            kind: Kind::Config,
            message: message.into(),
            retry_after: None,
            bad_input: true,
        }
    }

    pub(crate) fn closed(what: &str) -> Error {
        Error {
            kind: Kind::Closed,
            message: format!("this {what} was closed: make a new one"),
            retry_after: None,
            bad_input: false,
        }
    }

    pub(crate) fn forked(worker: u32) -> Error {
        Error {
            kind: Kind::Forked,
            message: format!(
                "this generator was made before the process forked, with the fixed worker ID \
                 {worker}, which the parent still issues with; a child can't claim another: \
                 make a generator with the child's own worker ID, or one from a config with a \
                 shared registry (it claims anew in each child)"
            ),
            retry_after: None,
            bad_input: false,
        }
    }

    pub(crate) fn worker_taken(conflict: &Conflict) -> Error {
        Error {
            kind: Kind::InUse,
            message: conflict.to_string(),
            retry_after: None,
            bad_input: false,
        }
    }

    /// A panic a binding caught at its boundary (`catch_unwind`'s payload):
    /// `internal`, with the panic's message; the one wording every binding
    /// reports a bug of idmint's in.
    pub fn panicked(payload: &(dyn std::any::Any + Send)) -> Error {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Error {
            kind: Kind::Runtime,
            message: format!("idmint panicked (a bug: please report it): {what}"),
            retry_after: None,
            bad_input: false,
        }
    }

    pub(crate) fn runtime(e: &std::io::Error) -> Error {
        Error {
            kind: Kind::Runtime,
            message: format!("cannot start idmint's runtime threads: {e}"),
            retry_after: None,
            bad_input: false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message)
    }
}

impl std::error::Error for Error {}

impl From<IssueError> for Error {
    fn from(r: IssueError) -> Error {
        Error {
            kind: Kind::Refused(r.code),
            message: r.message,
            retry_after: r.retry_after,
            bad_input: r.class == ErrorClass::BadInput,
        }
    }
}

impl From<idmint_core::Error> for Error {
    /// The core's code, with the server's retry hint.
    fn from(e: idmint_core::Error) -> Error {
        IssueError::from(e).into()
    }
}

impl From<idmint_segment::SegmentError> for Error {
    /// The allocator's code, with the server's retry hints.
    fn from(e: idmint_segment::SegmentError) -> Error {
        IssueError::from(e).into()
    }
}

impl From<RegistryError> for Error {
    /// The registry's code; a held claim's own wait as the retry hint, 1 s
    /// for the failures that pass by themselves (a timeout, an outage, every
    /// worker ID taken, a lease lost), none for the rest.
    fn from(e: RegistryError) -> Error {
        let retry_after = match &e {
            RegistryError::Held { retry_after, .. } => Some(*retry_after),
            RegistryError::Timeout { .. }
            | RegistryError::Unavailable { .. }
            | RegistryError::Backend { .. }
            | RegistryError::Exhausted { .. }
            | RegistryError::LeaseLost { .. } => Some(Duration::from_secs(1)),
            _ => None,
        };
        let bad_input = match &e {
            RegistryError::Config { .. } => true,
            RegistryError::Core(core) => core.is_bad_input(),
            _ => false,
        };
        Error {
            kind: Kind::Registry(e.code()),
            message: e.to_string(),
            retry_after,
            bad_input,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::config(e.to_string())
    }
}

impl From<NodeError> for Error {
    /// A backend that failed to open: the segment store's or the registry's
    /// code (a config at fault, or a data directory that can't be made, is
    /// `invalid_config`).
    fn from(e: NodeError) -> Error {
        if e.is_config() || matches!(e, NodeError::DataDir { .. }) {
            return Error::config(e.to_string());
        }
        let message = e.to_string();
        let mut error = match e {
            NodeError::Segment { source, .. } => Error::from(source),
            NodeError::Registry { source, .. } => Error::from(source),
            _ => Error {
                kind: Kind::Refused("internal"),
                message: String::new(),
                retry_after: None,
                bad_input: false,
            },
        };
        // The step's own words (`segment store (opening segment.url …): …`).
        error.message = message;
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_servers() {
        let e = Error::from(idmint_core::Error::InvalidCount { count: 0, max: 9 });
        assert_eq!(e.code(), "invalid_count");
        assert!(e.is_bad_input());
        assert_eq!(e.retry_after(), None);
        let e = Error::from(idmint_segment::SegmentError::NotFound {
            key: "x".to_owned(),
        });
        assert_eq!(e.code(), "key_not_found");
        assert_eq!(Error::closed("generator").code(), "closed");
        assert_eq!(Error::forked(7).code(), "forked");
        assert!(Error::forked(7).message().contains("worker ID 7"));
        assert_eq!(
            Error::config("x").to_string(),
            "invalid_config: x",
            "Display is the code, then the message"
        );
    }

    #[test]
    fn bad_input_is_the_class_of_the_source() {
        let core = |e: idmint_core::Error| Error::from(e).is_bad_input();
        assert!(core(idmint_core::Error::InvalidCount { count: 0, max: 9 }));
        assert!(Error::config("x").is_bad_input());
        assert!(!Error::closed("generator").is_bad_input());
        let unavailable = Error::from(idmint_segment::SegmentError::Unavailable {
            key: "k".to_owned(),
            retry_after: Duration::from_millis(5),
            reason: "down".to_owned(),
        });
        assert!(!unavailable.is_bad_input());
    }

    #[test]
    fn a_panic_is_internal_with_its_message() {
        let e = Error::panicked(&"boom");
        assert_eq!(e.code(), "internal");
        assert_eq!(
            e.message(),
            "idmint panicked (a bug: please report it): boom"
        );
        let e = Error::panicked(&7_u8);
        assert!(e.message().ends_with("a panic without a message"), "{e}");
    }
}
