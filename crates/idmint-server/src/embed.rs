//! What `idmint-embed` (the in-process layer every language binding wraps)
//! takes from the server, so that a generator or segment allocator made in
//! another program's process is opened exactly as `idmint serve` opens its
//! own: the same config types, the same functions, the same error codes.
//!
//! - Opening: [`open_registry`], [`generator_settings`], [`id_clock`],
//!   [`keeper_config`] and [`lease_ttl`] (what `start.rs` claims a worker
//!   with);
//!   [`open_segment_allocator`] and [`prepare_segments`] (what it opens the
//!   segment store with and does before serving it). [`Server::check`]
//!   (`crate::Server::check`) validates a config as `idmint serve` does.
//! - Refusing: [`Refusal`] is what a surface sends for a failure to issue
//!   (the stable code, the message, the retry hint), built by the server's
//!   own mapping; [`Refusal::paused`] and [`MARK_WAIT`]/[`MARK_POLL`] are its
//!   answer when a snowflake call meets the high-water mark.
//!
//! Nothing here is used by the server itself: it is the API boundary for
//! what runs the server's nodes without its listeners: `idmint-embed`, and
//! the binary's fleet harness (`idmint bench fleet`), whose in-process nodes
//! claim as a server does.
//!
//! [`Server::check`]: crate::Server::check

use std::sync::Arc;
use std::time::Duration;

use idmint_core::Clock;
use idmint_registry::WorkerStatus;
use idmint_segment::SegmentError;

pub use crate::backends::{
    generator_settings, keeper_config, lease_ttl, open_registry, open_segment_allocator,
    prepare_segments,
};
use crate::clock::IdClock;
use crate::config::Config;
use crate::error::IssueError;

/// The clock snowflake IDs are made from (`snowflake.clock`: the wall clock
/// read once and advanced by the monotonic clock, or the raw wall clock),
/// anchored now, as `start.rs` gives it to the keeper's generator.
pub fn id_clock(config: &Config) -> Arc<dyn Clock> {
    IdClock::new(config.snowflake.clock).shared()
}

/// How long a snowflake call that met the high-water mark waits, while the
/// lease is held, for the keeper to persist the next window, before it is
/// refused with [`Refusal::paused`] (the server's own bound).
pub const MARK_WAIT: Duration = crate::error::MARK_WAIT;

/// How often that wait looks again.
pub const MARK_POLL: Duration = crate::error::MARK_POLL;

/// A failure to issue as the server reports it: the stable code
/// (docs/api.md), a message naming the value, and how long to wait before
/// a retry, where a retry can help.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// The stable code (`mark_reached`, `key_not_found`, `unavailable`, ...).
    pub code: &'static str,
    /// What went wrong, naming the value.
    pub message: String,
    /// When to retry (the HTTP `Retry-After`), for failures that pass.
    pub retry_after: Option<Duration>,
}

impl Refusal {
    /// A snowflake call refused at the high-water mark `e`: what the server
    /// answers once [`MARK_WAIT`] is over, or at once when `status` says the
    /// lease is not held (`mark_reached`, with the lease's state or the
    /// store's failure, retry in 1 s).
    pub fn paused(e: &idmint_core::Error, status: &WorkerStatus) -> Refusal {
        IssueError::paused(e, status).into()
    }
}

impl From<IssueError> for Refusal {
    fn from(e: IssueError) -> Refusal {
        Refusal {
            code: e.code,
            message: e.message,
            retry_after: e.retry_after,
        }
    }
}

impl From<idmint_core::Error> for Refusal {
    /// The core's code; a retry in 1 s for transient failures (the clock,
    /// the mark), as the server answers them.
    fn from(e: idmint_core::Error) -> Refusal {
        IssueError::from(e).into()
    }
}

impl From<SegmentError> for Refusal {
    /// The allocator's code, with the server's retry hints (5 s for a store
    /// that forgot, the allocator's hint for an outage).
    fn from(e: SegmentError) -> Refusal {
        IssueError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_the_codes_and_hints_of_the_server() {
        let unavailable = Refusal::from(SegmentError::Unavailable {
            key: "order".to_owned(),
            retry_after: Duration::from_millis(300),
            reason: "store down".to_owned(),
        });
        assert_eq!(unavailable.code, "unavailable");
        assert_eq!(unavailable.retry_after, Some(Duration::from_millis(300)));
        let missing = Refusal::from(SegmentError::NotFound {
            key: "nope".to_owned(),
        });
        assert_eq!((missing.code, missing.retry_after), ("key_not_found", None));
        let bad = Refusal::from(idmint_core::Error::InvalidCount { count: 0, max: 5 });
        assert_eq!((bad.code, bad.retry_after), ("invalid_count", None));
    }
}
