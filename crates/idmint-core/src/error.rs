//! The one error type of `idmint-core`.
//!
//! Every failure reaches the caller as an [`Error`] that names what went wrong and,
//! where there is one, what to do about it. No function in this crate returns a
//! sentinel ID (Leaf's `-1`/`-2`/`-3`) or swallows a failure and carries on.

use std::time::Duration;

use jiff::Timestamp;

/// Everything that can go wrong in `idmint-core`.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a
/// catch-all arm. [`Error::code`] gives a stable, machine-readable code for each
/// variant, for servers that map errors onto wire formats.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A layout's fields do not make a valid layout.
    #[error("invalid layout: {field} {reason}")]
    InvalidLayout {
        /// The field that is wrong (`time`, `sequence`, `epoch`, ...).
        field: &'static str,
        /// Why it is wrong, naming the offending value.
        reason: String,
    },

    /// The text form of a layout could not be parsed.
    #[error("invalid layout text {part:?}: {reason}")]
    InvalidLayoutText {
        /// The part of the text that is wrong.
        part: String,
        /// Why it is wrong.
        reason: String,
    },

    /// The text form of a setting (a clock policy, a duration) could not be parsed.
    #[error("invalid {what} {text:?}: {reason}")]
    InvalidText {
        /// What the text was meant to be (`duration`, `clock_behind policy`, ...).
        what: &'static str,
        /// The text as given.
        text: String,
        /// Why it is wrong, and what would be right.
        reason: String,
    },

    /// A node field (datacenter, worker, rollback) is outside the layout's range.
    #[error("{field} {value} is out of range for this layout (0..={max})")]
    NodeOutOfRange {
        /// `datacenter`, `worker` or `rollback`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest value the layout can hold.
        max: u64,
    },

    /// A generator setting is invalid (a zero bound, a policy the layout can't support).
    #[error("invalid generator config: {0}")]
    InvalidConfig(String),

    /// The layout has no room left for the current time.
    ///
    /// Decoding IDs of the layout still works; only generation stops.
    #[error(
        "layout ran out at {ran_out_at}: its time field cannot hold later times; \
         use a later epoch or more time bits (and migrate before the next run-out)"
    )]
    LayoutExhausted {
        /// The first instant the layout cannot represent.
        ran_out_at: Timestamp,
    },

    /// The clock reads a time before the layout's epoch.
    #[error("clock reads {now}, before the layout's epoch {epoch}")]
    ClockBeforeEpoch {
        /// What the clock read.
        now: Timestamp,
        /// The layout's epoch.
        epoch: Timestamp,
    },

    /// The clock is behind the last issued time by more than the clock policy absorbs.
    #[error(
        "clock is {behind:?} behind the last issued ID's time, more than the {policy} policy \
         absorbs ({allowed:?}); not issuing until the clock catches up"
    )]
    ClockBehind {
        /// How far behind the clock is.
        behind: Duration,
        /// The policy in force (`fail`, `wait`, `borrow`, `history`, ...).
        policy: &'static str,
        /// How much the policy absorbs.
        allowed: Duration,
    },

    /// Under the `rollback-bits` policy, every rollback counter value is in use for
    /// the time the clock now reads.
    #[error(
        "all {counters} rollback counter values have issued IDs at or after the current time; \
         wait for the clock to pass {retry_after}, or carve more rollback bits"
    )]
    RollbackExhausted {
        /// How many counter values the layout has.
        counters: u64,
        /// When the next counter value becomes usable.
        retry_after: Timestamp,
    },

    /// Issuing would pass the persisted high-water mark.
    #[error(
        "would issue an ID at {wanted}, past the persisted high-water mark {mark}; \
         the mark must be persisted further before issuing (is the worker store reachable?)"
    )]
    MarkReached {
        /// The persisted-until time.
        mark: Timestamp,
        /// The time the generator wanted to issue at.
        wanted: Timestamp,
    },

    /// A requested number of IDs is zero or above the allowed maximum.
    #[error("count {count} is out of range: ask for 1..={max} IDs")]
    InvalidCount {
        /// The count asked for.
        count: u64,
        /// The largest count allowed.
        max: u64,
    },

    /// An [`IdRun`](crate::IdRun) or [`IdBatch`](crate::IdBatch) built from
    /// parts that don't make one (an empty run, IDs past the largest, runs out
    /// of order).
    #[error("invalid run: {0}")]
    InvalidRun(String),

    /// The text or number given is not an ID of the layout.
    #[error("invalid ID {input:?}: {reason}")]
    InvalidId {
        /// The input, shortened if long.
        input: String,
        /// Why it is not an ID.
        reason: String,
    },

    /// The cached generator's ring is empty and the take policy gave up.
    #[error(
        "cached ring is empty after waiting {waited:?}: demand is above what the layout \
         can issue within the allowed lead of {max_lead:?}"
    )]
    RingEmpty {
        /// How long the take waited.
        waited: Duration,
        /// The configured bound on the lead over the clock.
        max_lead: Duration,
    },

    /// An obfuscation key is malformed. The message never contains the key.
    #[error("invalid obfuscation key: {reason}")]
    InvalidKey {
        /// What is wrong with it (its length, the position of a bad character).
        reason: String,
    },

    /// An obfuscator's settings (width, key-ID bits, key IDs) do not fit together,
    /// or a text format is unknown.
    #[error("invalid obfuscator config: {0}")]
    InvalidObfuscator(String),

    /// A public ID, as a number or as text, is not one that can be revealed or read.
    #[error("invalid public ID {input:?}: {reason}")]
    InvalidPublicId {
        /// The input, shortened if long.
        input: String,
        /// Why it is not a public ID.
        reason: String,
    },

    /// A public ID's key-ID bits name a key the obfuscator does not have.
    #[error(
        "public ID {public} was made with key ID {key_id}, which has no key here; \
         configure that key to reveal it"
    )]
    UnknownKeyId {
        /// The public ID.
        public: u64,
        /// The key ID read from its top bits.
        key_id: u8,
    },

    /// A public ID could not be written in a text form.
    #[error("cannot write public ID {public} as {format}: {reason}")]
    EncodeFailed {
        /// The public ID.
        public: u64,
        /// The text form (`sqids`).
        format: &'static str,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// A stable, machine-readable code for the variant, such as `clock_behind`.
    ///
    /// Servers put this in their wire errors; it never changes for a variant.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidLayout { .. } => "invalid_layout",
            Error::InvalidLayoutText { .. } => "invalid_layout_text",
            Error::InvalidText { .. } => "invalid_text",
            Error::NodeOutOfRange { .. } => "node_out_of_range",
            Error::InvalidConfig(_) => "invalid_config",
            Error::LayoutExhausted { .. } => "layout_exhausted",
            Error::ClockBeforeEpoch { .. } => "clock_before_epoch",
            Error::ClockBehind { .. } => "clock_behind",
            Error::RollbackExhausted { .. } => "rollback_exhausted",
            Error::MarkReached { .. } => "mark_reached",
            Error::InvalidCount { .. } => "invalid_count",
            Error::InvalidRun(_) => "invalid_run",
            Error::InvalidId { .. } => "invalid_id",
            Error::RingEmpty { .. } => "ring_empty",
            Error::InvalidKey { .. } => "invalid_key",
            Error::InvalidObfuscator(_) => "invalid_obfuscator",
            Error::InvalidPublicId { .. } => "invalid_public_id",
            Error::UnknownKeyId { .. } => "unknown_key_id",
            Error::EncodeFailed { .. } => "encode_failed",
        }
    }

    /// True for failures that go away by themselves: retrying later may succeed.
    ///
    /// Clock trouble, an unpersisted mark and an empty ring are transient;
    /// bad input and an exhausted layout are not.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::ClockBehind { .. }
                | Error::RollbackExhausted { .. }
                | Error::MarkReached { .. }
                | Error::RingEmpty { .. }
        )
    }

    /// True for errors caused by the caller's input (layouts, IDs, counts, config,
    /// obfuscation keys and settings, public IDs).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidLayout { .. }
                | Error::InvalidLayoutText { .. }
                | Error::InvalidText { .. }
                | Error::NodeOutOfRange { .. }
                | Error::InvalidConfig(_)
                | Error::InvalidCount { .. }
                | Error::InvalidId { .. }
                | Error::InvalidRun(_)
                | Error::InvalidKey { .. }
                | Error::InvalidObfuscator(_)
                | Error::InvalidPublicId { .. }
                | Error::UnknownKeyId { .. }
        )
    }

    pub(crate) fn invalid_id(input: &str, reason: impl Into<String>) -> Error {
        Error::InvalidId {
            input: shorten(input),
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid_public_id(input: &str, reason: impl Into<String>) -> Error {
        Error::InvalidPublicId {
            input: shorten(input),
            reason: reason.into(),
        }
    }
}

/// `input` as quoted in an error: cut at 64 bytes (on a character boundary).
fn shorten(input: &str) -> String {
    const MAX: usize = 64;
    if input.len() > MAX {
        let mut end = MAX;
        while !input.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &input[..end])
    } else {
        input.to_owned()
    }
}

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
