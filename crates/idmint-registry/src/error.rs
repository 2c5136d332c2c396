//! [`RegistryError`]: what can go wrong claiming, renewing and persisting.

use std::time::Duration;

use jiff::Timestamp;

/// Everything that can go wrong in `idmint-registry`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Every worker ID of the range is held.
    #[error(
        "all {in_use} worker IDs of the {registry} registry are in use (range 0..{range}); \
         release idle workers, wait for expired leases, or use a layout with more worker bits"
    )]
    Exhausted {
        /// The registry kind.
        registry: &'static str,
        /// How many are held.
        in_use: u64,
        /// The size of the range.
        range: u64,
    },

    /// The registry's store lost, or may have lost, what it was told
    /// (leases, marks): a Redis restarted without persistence, failed over,
    /// or came back from an older snapshot. No claim is granted until every
    /// earlier holder has stopped issuing and every clock has passed what
    /// they persisted; retry after `retry_after`.
    #[error(
        "{registry} registry: claims are held for {retry_after:?} more, until no earlier \
         holder can still issue: {reason}"
    )]
    Held {
        /// The registry kind.
        registry: &'static str,
        /// How long the hold still lasts.
        retry_after: Duration,
        /// What the registry found.
        reason: String,
    },

    /// A remote call did not answer in time.
    #[error("{registry} registry: {operation} timed out after {after:?}")]
    Timeout {
        /// The registry kind.
        registry: &'static str,
        /// What was being done (`claim`, `renew`, `persist mark`, ...).
        operation: &'static str,
        /// The timeout.
        after: Duration,
    },

    /// The backend failed or refused.
    #[error("{registry} registry: {operation} failed: {message}")]
    Backend {
        /// The registry kind.
        registry: &'static str,
        /// What was being done.
        operation: &'static str,
        /// The backend's error, as text.
        message: String,
    },

    /// The coordinator can't answer now, though it may in a moment: nothing
    /// listens, the connection broke, or it is between leaders or failing
    /// over (etcd's `leader changed`, a ZooKeeper connection loss). Nothing
    /// was changed; the same call may succeed when tried again, so a start
    /// waits on it instead of failing ([`RegistryError::is_transient`]).
    #[error("{registry} registry: {operation} failed, the coordinator is unavailable: {message}")]
    Unavailable {
        /// The registry kind.
        registry: &'static str,
        /// What was being done.
        operation: &'static str,
        /// The backend's error, as text.
        message: String,
    },

    /// The lease on the worker ID is gone (expired, revoked, or taken by another node).
    #[error("{registry} registry: lease on worker {worker} lost: {reason}")]
    LeaseLost {
        /// The registry kind.
        registry: &'static str,
        /// The worker ID.
        worker: u32,
        /// Why.
        reason: String,
    },

    /// A worker ID this node was given or derived itself (`static`, `host`, `k8s`,
    /// `file`) is held by another node in the shared registry it is registered in:
    /// two nodes would issue the same IDs.
    #[error(
        "{registry} registry: worker {worker}{} of node {node} is already held by node {holder}; \
         two nodes were configured with or derived the same worker ID: give each node its own",
        origin.as_deref().map(|o| format!(" ({o})")).unwrap_or_default()
    )]
    WorkerTaken {
        /// The shared registry's kind.
        registry: &'static str,
        /// The worker ID.
        worker: u32,
        /// The node that asked for it.
        node: String,
        /// The node that holds it, as the registry knows it.
        holder: String,
        /// Where this node's worker ID came from (`host registry, from address
        /// 10.1.2.3`), when a fixed registry asked.
        origin: Option<String>,
    },

    /// The registry can't do what was asked (claiming a given worker ID in a
    /// registry that assigns IDs itself, for one).
    #[error("{registry} registry: {operation} is not supported{}", reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Unsupported {
        /// The registry kind.
        registry: &'static str,
        /// What was asked.
        operation: &'static str,
        /// Why not, when there is more to say.
        reason: Option<String>,
    },

    /// The local clock is behind the worker's stored high-water mark by more than allowed.
    #[error(
        "clock reads {now}, {behind:?} behind worker {worker}'s stored high-water mark {mark} \
         (at most {allowed:?} is waited out); fix the clock before starting"
    )]
    ClockBehindMark {
        /// The worker ID.
        worker: u32,
        /// What the clock read.
        now: Timestamp,
        /// The stored mark.
        mark: Timestamp,
        /// How far behind.
        behind: Duration,
        /// The configured wait.
        allowed: Duration,
    },

    /// The local clock is too far from the median of live peers' reported times.
    #[error(
        "clock is off by {offset_ms} ms from the median of {peers} live peers' reported times \
         (threshold {threshold:?}); fix the clock before starting"
    )]
    ClockSkew {
        /// Local time minus the median of the peers' clocks (each report's
        /// time plus its age where the registry tells it), in milliseconds.
        offset_ms: i64,
        /// How many peers reported.
        peers: usize,
        /// The threshold.
        threshold: Duration,
    },

    /// The registry's configuration is wrong (a worker out of range, no ordinal in
    /// the hostname, a data directory already locked, ...).
    #[error("{registry} registry: {message}")]
    Config {
        /// The registry kind.
        registry: &'static str,
        /// What is wrong.
        message: String,
    },

    /// A core error (layout, generator).
    #[error(transparent)]
    Core(#[from] idmint_core::Error),

    /// A call only the oracle's leader serves reached a node that does not
    /// lead (or whose lease's fence has passed): ask the leader, or wait for
    /// the election to find one.
    #[error(
        "this node is not the oracle's leader{}",
        leader.as_deref().map_or_else(
            || "; no leader is known yet: retry shortly".to_owned(),
            |l| format!("; the leader is {l}"),
        )
    )]
    NotLeader {
        /// The leader's `address:port` as this node knows it.
        leader: Option<String>,
    },
}

impl RegistryError {
    /// A [`RegistryError::Config`] of `registry`: every backend's settings
    /// checks and refusals at connect build theirs here.
    pub(crate) fn config(registry: &'static str, message: impl Into<String>) -> Self {
        RegistryError::Config {
            registry,
            message: message.into(),
        }
    }

    /// A [`RegistryError::Backend`] of `registry` failing at `operation`,
    /// with the backend's error as text.
    pub(crate) fn backend(
        registry: &'static str,
        operation: &'static str,
        message: impl ToString,
    ) -> Self {
        RegistryError::Backend {
            registry,
            operation,
            message: message.to_string(),
        }
    }

    /// A [`RegistryError::Unavailable`] of `registry` failing at `operation`.
    pub(crate) fn unavailable(
        registry: &'static str,
        operation: &'static str,
        message: impl ToString,
    ) -> Self {
        RegistryError::Unavailable {
            registry,
            operation,
            message: message.to_string(),
        }
    }

    /// Whether trying the same call again later may succeed with nothing
    /// changed by anyone: the coordinator timed out or was unavailable.
    /// What a start waits on ([`RegistryError::Held`] and
    /// [`RegistryError::Exhausted`] are waited on too, by the keeper, for
    /// reasons of their own); anything else (a refusal, bad settings, a
    /// lost lease) is an answer.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            RegistryError::Timeout { .. } | RegistryError::Unavailable { .. }
        )
    }

    /// A stable, machine-readable code for the variant.
    pub fn code(&self) -> &'static str {
        match self {
            RegistryError::Exhausted { .. } => "workers_exhausted",
            RegistryError::Held { .. } => "registry_held",
            RegistryError::Timeout { .. } => "registry_timeout",
            RegistryError::Backend { .. } => "registry_backend",
            RegistryError::Unavailable { .. } => "registry_unavailable",
            RegistryError::LeaseLost { .. } => "lease_lost",
            RegistryError::WorkerTaken { .. } => "worker_taken",
            RegistryError::Unsupported { .. } => "registry_unsupported",
            RegistryError::ClockBehindMark { .. } => "clock_behind_mark",
            RegistryError::ClockSkew { .. } => "clock_skew",
            RegistryError::Config { .. } => "registry_config",
            RegistryError::Core(e) => e.code(),
            RegistryError::NotLeader { .. } => "not_leader",
        }
    }
}

/// A `Result` whose error is [`RegistryError`].
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
