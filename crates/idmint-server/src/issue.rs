//! Issuing IDs for a key, whatever the surface asking (HTTP, RESP): the
//! key's strategy resolved from config, IDs made by the snowflake worker, the
//! segment allocator or the UUID generator, and public keys' IDs obfuscated.
//!
//! Failures are [`IssueError`]s: a stable code (`key_not_found`,
//! `unavailable`, ...), a message naming the value, a class, and a retry hint.
//! Each surface maps them to its own form: an HTTP status and JSON body in
//! `http.rs`, a `-CODE message` error reply in `resp.rs`.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idmint_core::clock::MonotonicClock;
use idmint_core::uuid::UuidGenerator;
use idmint_core::{Id, IdBatch, Layout, Obfuscator, PublicId, PublicIdCodec, TextFormat};
use idmint_registry::{LeaseState, WorkerHandle};
use idmint_segment::{SegmentAllocator, SegmentError};

use crate::config::{Secret, Strategy};

/// What a configured key does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeySpec {
    pub strategy: Strategy,
    pub public: bool,
}

/// Everything the surfaces (HTTP handlers, RESP connections) share.
pub(crate) struct AppState {
    pub worker: WorkerHandle,
    pub layout: Layout,
    pub layout_text: String,
    pub clock: Arc<MonotonicClock>,
    pub segments: SegmentAllocator,
    pub uuids: UuidGenerator,
    pub keys: HashMap<String, KeySpec>,
    pub obfuscator: Option<Obfuscator>,
    pub codec: PublicIdCodec,
    pub admin_token: Option<Secret>,
    /// `keys.<name>.token`: the keys whose ID requests need a token.
    pub key_tokens: HashMap<String, Secret>,
    pub max_count: u64,
    /// The node's metrics (`metrics.rs`): issued IDs are counted in [`issue`].
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("layout", &self.layout_text)
            .field("keys", &self.keys)
            .field("max_count", &self.max_count)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// The spec of `key`: as configured, else a segment key looked up in the store.
    pub(crate) fn spec(&self, key: &str) -> KeySpec {
        self.keys.get(key).copied().unwrap_or(KeySpec {
            strategy: Strategy::Segment,
            public: false,
        })
    }

    /// The token `key`'s ID requests need, if it has one.
    pub(crate) fn token_for(&self, key: &str) -> Option<&Secret> {
        self.key_tokens.get(key)
    }

    /// The keys whose token is `given` (compared in constant time).
    pub(crate) fn keys_with_token(&self, given: &[u8]) -> Vec<String> {
        self.key_tokens
            .iter()
            .filter(|(_, token)| constant_time_eq(given, token.expose().as_bytes()))
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// Compares `given` with `secret` in time that depends only on the secret's
/// length (not on where they differ, nor on the given length).
pub(crate) fn constant_time_eq(given: &[u8], secret: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != secret.len());
    for (i, s) in secret.iter().enumerate() {
        diff |= given.get(i).copied().unwrap_or(0) ^ s;
    }
    std::hint::black_box(diff) == 0
}

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

// ---- Issuing ----

/// IDs ready to render.
pub(crate) enum Issued {
    /// Integer IDs, already obfuscated when `public`.
    Ints { values: Vec<u64>, public: bool },
    /// UUIDs.
    Uuids(Vec<u128>),
}

impl Issued {
    /// How many IDs.
    pub(crate) fn len(&self) -> usize {
        match self {
            Issued::Ints { values, .. } => values.len(),
            Issued::Uuids(values) => values.len(),
        }
    }
}

/// Checks that `key` is a well-formed key name.
pub(crate) fn check_key(key: &str) -> Result<(), IssueError> {
    Ok(idmint_segment::validate_key(key)?)
}

/// A requested count: a whole number from 1 to `max` (`server.max_count`).
pub(crate) fn parse_count(text: &str, max: u64) -> Result<u64, IssueError> {
    let n: u64 = text.trim().parse().map_err(|_| {
        IssueError::bad_input(
            "invalid_count",
            format!("count {text:?} is not a whole number: ask for 1..={max} IDs"),
        )
    })?;
    if n == 0 || n > max {
        return Err(IssueError::bad_input(
            "invalid_count",
            format!("count {n} is out of range: ask for 1..={max} IDs (server.max_count)"),
        ));
    }
    Ok(n)
}

/// `n` snowflake IDs from the worker. A `MarkReached` while the lease is held
/// means the keeper is persisting the next window: waited out briefly (the
/// keeper was nudged) before answering unavailable.
async fn snowflakes(state: &Arc<AppState>, n: u64) -> Result<Vec<u64>, IssueError> {
    // Read the clock only once the mark holds a call back, not per ID.
    let mut deadline = None;
    loop {
        let result: idmint_core::Result<Vec<u64>> = if n == 1 {
            state.worker.next_id().map(|id| vec![id.get()])
        } else if n <= state.layout.ids_per_tick() {
            state.worker.next_ids(n).map(|b| flatten(&b))
        } else {
            // A batch longer than a tick waits for ticks: off the async workers.
            let worker = state.worker.clone();
            tokio::task::spawn_blocking(move || worker.next_ids(n).map(|b| flatten(&b)))
                .await
                .map_err(|e| IssueError::internal(e.to_string()))?
        };
        match result {
            Err(idmint_core::Error::MarkReached { .. })
                if Instant::now()
                    < *deadline
                        .get_or_insert_with(|| Instant::now() + Duration::from_millis(250))
                    && state.worker.status().lease == LeaseState::Held =>
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(e @ idmint_core::Error::MarkReached { .. }) => {
                let status = state.worker.status();
                let why = status
                    .not_ready_reason()
                    .unwrap_or_else(|| "the high-water mark is being persisted".to_owned());
                return Err(IssueError::unavailable(
                    e.code(),
                    format!("snowflake IDs are paused: {why}"),
                    Duration::from_secs(1),
                ));
            }
            other => return other.map_err(IssueError::from),
        }
    }
}

fn flatten(batch: &IdBatch) -> Vec<u64> {
    let mut out = Vec::with_capacity(usize::try_from(batch.len()).unwrap_or(0));
    out.extend(batch.iter().map(Id::get));
    out
}

async fn segment_ids(state: &AppState, key: &str, n: u64) -> Result<Vec<u64>, IssueError> {
    if n == 1 {
        let id = state.segments.next_id(key).await?;
        Ok(vec![id.get()])
    } else {
        let batch = state.segments.next_ids(key, n).await?;
        Ok(flatten(&batch))
    }
}

/// Makes `n` IDs of `key` per its spec; public keys' IDs obfuscated. The
/// caller has checked `key` ([`check_key`]) and `n` (1 to `max_count`).
pub(crate) async fn issue(
    state: &Arc<AppState>,
    key: &str,
    spec: KeySpec,
    n: u64,
) -> Result<Issued, IssueError> {
    let values = match spec.strategy {
        Strategy::Snowflake => snowflakes(state, n).await?,
        Strategy::Segment => segment_ids(state, key, n).await?,
        Strategy::Uuid4 | Strategy::Uuid7 => {
            let v7 = spec.strategy == Strategy::Uuid7;
            let uuids = make_uuids(&state.uuids, v7, n);
            crate::metrics::count_issued(state, key, spec.strategy, n);
            return Ok(Issued::Uuids(uuids));
        }
    };
    crate::metrics::count_issued(state, key, spec.strategy, n);
    if !spec.public {
        return Ok(Issued::Ints {
            values,
            public: false,
        });
    }
    let obfuscate = {
        let state = state.clone();
        move || -> Result<Vec<u64>, IssueError> {
            let obfuscator = state.obfuscator.as_ref().ok_or_else(|| {
                IssueError::new(
                    ErrorClass::Internal,
                    "obfuscation_disabled",
                    "public key without an obfuscation key",
                )
            })?;
            values
                .into_iter()
                .map(|v| Ok(obfuscator.obfuscate(Id::new(v)?).map(PublicId::get)?))
                .collect()
        }
    };
    let values = if n > 1000 {
        tokio::task::spawn_blocking(obfuscate)
            .await
            .map_err(|e| IssueError::internal(e.to_string()))??
    } else {
        obfuscate()?
    };
    Ok(Issued::Ints {
        values,
        public: true,
    })
}

/// `n` UUIDs, version 7 or 4.
pub(crate) fn make_uuids(generator: &UuidGenerator, v7: bool, n: u64) -> Vec<u128> {
    (0..n)
        .map(|_| {
            if v7 {
                generator.next_v7().as_u128()
            } else {
                generator.next_v4().as_u128()
            }
        })
        .collect()
}

// ---- Text forms ----

/// An integer ID as text: decimal, or a public ID in the configured form.
pub(crate) fn text_of(state: &AppState, value: u64, public: bool) -> Result<String, IssueError> {
    if public {
        Ok(state.codec.encode(PublicId::new(value))?)
    } else {
        Ok(itoa::Buffer::new().format(value).to_owned())
    }
}

/// True when public IDs are written as decimal integers (so a surface with an
/// integer type, like RESP, can send them as integers).
pub(crate) fn public_ids_are_decimal(state: &AppState) -> bool {
    state.codec.format() == TextFormat::Decimal
}

/// A UUID in its hyphenated form.
pub(crate) fn uuid_text(value: u128) -> String {
    idmint_core::uuid::Uuid::from_u128(value)
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cre", b"s3cret"));
        assert!(!constant_time_eq(b"s3crett", b"s3cret"));
        assert!(!constant_time_eq(b"s3creT", b"s3cret"));
        assert!(!constant_time_eq(b"", b"s3cret"));
    }
}
