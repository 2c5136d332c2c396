//! [`SegmentError`]: what can go wrong leasing segments and issuing from them.

use std::time::Duration;

/// Everything that can go wrong in `idmint-segment`.
///
/// No function in this crate answers a failure with a sentinel ID (Leaf's `-1`,
/// `-2`, `-3`, Tinyid's `null`): every failure is one of these, and
/// [`SegmentError::code`] gives a stable code for wire formats.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentError {
    /// The key has no row in the store.
    #[error("unknown segment key {key:?}: create it first (admin API or the store's table)")]
    NotFound {
        /// The key asked for.
        key: String,
    },

    /// A key to create exists already.
    #[error("segment key {key:?} already exists")]
    KeyExists {
        /// The key.
        key: String,
    },

    /// A key to create that the store had before and lost (its row was
    /// deleted or evicted, or restored away while its ledger entry stayed):
    /// created again from its start, it would hand out IDs it issued
    /// before. Nothing is created.
    #[error(
        "segment key {key:?} existed in the {store} store and is gone (deleted, evicted or \
         restored away): created again from its start it could repeat IDs it issued; nothing \
         was created. Raise it above every ID it issued: idmint segment raise {key} --above N"
    )]
    KeyForgotten {
        /// The store kind.
        store: &'static str,
        /// The key.
        key: String,
    },

    /// A key name that can't be a key.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The name given, shortened if long.
        key: String,
        /// Why it is not a key.
        reason: String,
    },

    /// A key's settings (step, start, delta, remainder, ...) that don't make sense.
    #[error("invalid {field}: {reason}")]
    InvalidSpec {
        /// The setting that is wrong.
        field: &'static str,
        /// Why, naming the offending value.
        reason: String,
    },

    /// A requested number of IDs is zero or above the allowed maximum.
    #[error("count {count} is out of range: ask for 1..={max} IDs")]
    InvalidCount {
        /// The count asked for.
        count: u64,
        /// The largest count allowed.
        max: u64,
    },

    /// Nothing is buffered for the key and the store can't give more right now.
    #[error("segment key {key:?} is unavailable: {reason}; retry in {retry_after:?}")]
    Unavailable {
        /// The key.
        key: String,
        /// What failed (the store's error, or a wait that ran out).
        reason: String,
        /// When trying again makes sense.
        retry_after: Duration,
    },

    /// The key's counter would pass the largest ID (2^63 − 1).
    #[error(
        "segment key {key:?} has run out of IDs: max_id {max_id} plus step {step} passes \
         2^63 - 1; start a new key"
    )]
    Exhausted {
        /// The key.
        key: String,
        /// The key's `max_id` now.
        max_id: u64,
        /// The step that would not fit.
        step: u64,
    },

    /// The store handed out a segment at or below one it handed out before:
    /// someone lowered `max_id`. Issuing from it could repeat IDs, so it is refused.
    #[error(
        "{store} store went backwards for key {key:?}: new segment starts at {start}, \
         below the end {previous_end} of one already issued from; restore max_id to at \
         least {previous_end}"
    )]
    StoreWentBackwards {
        /// The store kind.
        store: &'static str,
        /// The key.
        key: String,
        /// Where the new segment starts.
        start: u64,
        /// Where the previous one ended.
        previous_end: u64,
    },

    /// The store holds less for a key than this node has issued from it: the
    /// key is missing, or its next segment would start below the node's floor
    /// (the end of the highest segment it leased, kept in its floor file).
    /// The store was reset or restored from an older backup; issuing would
    /// repeat IDs, so nothing is issued or created, and the store is left as
    /// it was.
    #[error(
        "key {key:?} is below this node's floor in the {store} store: {}, but this node \
         may have issued IDs up to {} (floor {floor}); nothing was issued. The store was reset or \
         restored: raise the key above every ID issued (for a segment key: idmint segment raise \
         {key} --above {})",
        found_text(*.found),
        .floor.saturating_sub(1),
        .floor.saturating_sub(1)
    )]
    KeyBelowFloor {
        /// The store kind.
        store: &'static str,
        /// The key.
        key: String,
        /// This node's floor: every ID it issued from the key is below it.
        floor: u64,
        /// Where the store would issue from next (its `max_id`, or the start
        /// of the segment it offered); `None` when it has no such key.
        found: Option<u64>,
    },

    /// The store's epoch marker is missing or is not the one this node
    /// remembers, while the node's floor file names keys it issued: the store
    /// was reset (or is another store). Nothing is issued or created.
    #[error(
        "the {store} store was reset: its epoch marker is {}, but this node {}issued \
         from {}; nothing was issued or created. Raise each key above every ID issued (for \
         segment keys: idmint segment raise KEY --above N, with this node's data directory, \
         which also adopts the store's epoch)",
        .found.as_deref().map_or_else(|| "missing".to_owned(), |e| format!("{e:?}")),
        .remembered.as_deref().map_or_else(String::new, |e| format!("remembers epoch {e:?} and ")),
        floors_text(.floors)
    )]
    StoreReset {
        /// The store kind.
        store: &'static str,
        /// The epoch this node remembers (its floor file's); `None` when it
        /// remembers keys only.
        remembered: Option<String>,
        /// The store's epoch now; `None` when it has none.
        found: Option<String>,
        /// The keys this node issued from, with their floors.
        floors: Vec<(String, u64)>,
    },

    /// This node's floor file (in its data directory) can't be opened, read
    /// or written.
    #[error("segment floor file {path}: {operation} failed: {message}")]
    FloorFile {
        /// The file.
        path: String,
        /// What was being done.
        operation: &'static str,
        /// Why, naming the offending value.
        message: String,
    },

    /// A store or Redis call did not answer in time.
    #[error("{store} store: {operation} timed out after {after:?}")]
    Timeout {
        /// The store kind (`sqlite`, `postgres`, `mysql`, `redis`, ...).
        store: &'static str,
        /// What was being done.
        operation: &'static str,
        /// The timeout.
        after: Duration,
    },

    /// The store failed or refused.
    #[error("{store} store: {operation} failed: {message}")]
    Backend {
        /// The store kind.
        store: &'static str,
        /// What was being done.
        operation: &'static str,
        /// The backend's error, as text.
        message: String,
    },

    /// A daily serial's counter would need more digits than its width.
    #[error(
        "daily serial {key:?} for {day} is full: counter {counter} needs more than {width} \
         digits; widen the counter"
    )]
    SerialOverflow {
        /// The serial's key.
        key: String,
        /// The day, `YYYYMMDD`.
        day: String,
        /// The counter value that did not fit.
        counter: u64,
        /// The configured width.
        width: u32,
    },

    /// A configuration that can't work (bad URL, table name, layout, ...).
    #[error("invalid segment configuration: {0}")]
    Config(String),

    /// An error from `idmint-core` (a layout, an ID, a run).
    #[error(transparent)]
    Core(#[from] idmint_core::Error),
}

/// `Result` with [`SegmentError`].
pub type Result<T, E = SegmentError> = std::result::Result<T, E>;

impl SegmentError {
    /// A stable, machine-readable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            SegmentError::NotFound { .. } => "key_not_found",
            SegmentError::KeyExists { .. } => "key_exists",
            SegmentError::KeyForgotten { .. } => "key_forgotten",
            SegmentError::InvalidKey { .. } => "invalid_key",
            SegmentError::InvalidSpec { .. } => "invalid_spec",
            SegmentError::InvalidCount { .. } => "invalid_count",
            SegmentError::Unavailable { .. } => "unavailable",
            SegmentError::Exhausted { .. } => "key_exhausted",
            SegmentError::StoreWentBackwards { .. } => "store_went_backwards",
            SegmentError::KeyBelowFloor { .. } => "key_below_floor",
            SegmentError::StoreReset { .. } => "store_reset",
            SegmentError::FloorFile { .. } => "floor_file_error",
            SegmentError::Timeout { .. } => "store_timeout",
            SegmentError::Backend { .. } => "store_error",
            SegmentError::SerialOverflow { .. } => "serial_overflow",
            SegmentError::Config(_) => "invalid_config",
            SegmentError::Core(e) => e.code(),
        }
    }

    /// True for errors caused by the caller's input.
    pub fn is_bad_input(&self) -> bool {
        match self {
            SegmentError::InvalidKey { .. }
            | SegmentError::InvalidSpec { .. }
            | SegmentError::InvalidCount { .. }
            | SegmentError::Config(_) => true,
            SegmentError::Core(e) => e.is_bad_input(),
            _ => false,
        }
    }

    /// True for errors that may go away by themselves (a store that is down or
    /// slow); [`SegmentError::retry_after`] says when to try again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SegmentError::Unavailable { .. }
                | SegmentError::Timeout { .. }
                | SegmentError::Backend { .. }
        )
    }

    /// When to try again, for transient errors.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SegmentError::Unavailable { retry_after, .. } => Some(*retry_after),
            SegmentError::Timeout { .. } | SegmentError::Backend { .. } => {
                Some(Duration::from_secs(1))
            }
            _ => None,
        }
    }
}

/// What a store holds for a key, for [`SegmentError::KeyBelowFloor`].
fn found_text(found: Option<u64>) -> String {
    match found {
        Some(next) => format!("it would issue from {next}"),
        None => "it has no such key".to_owned(),
    }
}

/// The first few keys and floors, for [`SegmentError::StoreReset`].
fn floors_text(floors: &[(String, u64)]) -> String {
    const SHOWN: usize = 5;
    let mut text: Vec<String> = floors
        .iter()
        .take(SHOWN)
        .map(|(key, floor)| format!("{key:?} (floor {floor})"))
        .collect();
    if floors.len() > SHOWN {
        text.push(format!("{} more", floors.len() - SHOWN));
    }
    if text.is_empty() {
        return "no key".to_owned();
    }
    text.join(", ")
}
