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
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use idmint_core::clock::{Clock, MonotonicClock, WallClock};
use idmint_core::uuid::UuidGenerator;
use idmint_core::{
    ClockBehind, Id, IdBatch, Layout, Obfuscator, PublicId, PublicIdCodec, SequenceExhausted,
    TextFormat,
};
use idmint_registry::{LeaseState, WorkerHandle};
use idmint_segment::{SegmentAllocator, SegmentError};
use smallvec::{SmallVec, smallvec};

use crate::config::{ClockSource, Secret, Strategy, UndeclaredKeys};
use crate::listen::ConnectionLimits;

/// A map by key name, with a fast hasher: every request looks a key up in a
/// few of these, and SipHash was a sixth of a RESP `INCR`'s instructions.
/// HashDoS doesn't apply: the maps hold configured keys (and at most
/// `MAX_KEYS` counted ones); callers only look up, they never insert.
pub(crate) type KeyMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// What a key does: its strategy, fixed for the server's run (see
/// [`KeyTable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeySpec {
    pub strategy: Strategy,
    pub public: bool,
    pub source: KeySource,
}

/// Why a key has its strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// `[keys.<name>]` or `[segment.keys.<name>]`.
    Declared,
    /// A row the segment store held at start, or one created through the
    /// admin API: a segment key.
    Store,
    /// Declared nowhere: `server.undeclared_keys` chose the strategy.
    Undeclared,
    /// Declared nowhere under `server.undeclared_keys = "refuse"`: issuing
    /// fails with `unknown_key` (the strategy is meaningless).
    Refused,
}

impl KeySpec {
    /// A spec of `strategy`, not public.
    pub(crate) const fn new(strategy: Strategy, source: KeySource) -> KeySpec {
        KeySpec {
            strategy,
            public: false,
            source,
        }
    }
}

/// Undeclared names answered with a non-segment strategy that are
/// remembered (so the admin API can't turn one into a segment key); past
/// this, the admin API creates only names it has seen as segment keys.
const MAX_REMEMBERED: usize = 10_000;

/// Every key's strategy: one rule on every surface.
///
/// - A name resolves once per run and keeps its strategy: declared keys from
///   config; segment keys the store held at start or the admin API created;
///   any other name by `server.undeclared_keys` (or refused).
/// - [`KeyTable::spec`] is one atomic load and one map lookup for a name
///   seen before, with no store round-trip; the first request for an
///   undeclared snowflake or UUID name takes a mutex once to remember it.
/// - [`KeyTable::claim_segment`] (the admin API) refuses a name already
///   answered with another strategy: a key never switches strategy under a
///   running server, which would break its order.
pub(crate) struct KeyTable {
    known: ArcSwap<KeyMap<KeySpec>>,
    undeclared: UndeclaredKeys,
    /// One writer at a time: remembering a name and claiming one are
    /// read-check-write sequences on `known`.
    writer: std::sync::Mutex<()>,
    /// `MAX_REMEMBERED` was reached: undeclared names are still served, no
    /// longer remembered.
    full: AtomicBool,
}

impl fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyTable")
            .field("known", &self.known.load().len())
            .field("undeclared", &self.undeclared)
            .finish_non_exhaustive()
    }
}

impl KeyTable {
    /// A table of the `known` keys (declared, and the store's at start),
    /// giving other names `undeclared`.
    pub(crate) fn new(known: KeyMap<KeySpec>, undeclared: UndeclaredKeys) -> KeyTable {
        KeyTable {
            known: ArcSwap::from_pointee(known),
            undeclared,
            writer: std::sync::Mutex::new(()),
            full: AtomicBool::new(false),
        }
    }

    /// The rule for undeclared names.
    pub(crate) fn undeclared(&self) -> UndeclaredKeys {
        self.undeclared
    }

    /// `key`'s spec for `/v1/ids`, gRPC and RESP. An undeclared name gets
    /// `server.undeclared_keys` and, when that is not segment, is remembered
    /// with it for the rest of the run.
    #[inline]
    pub(crate) fn spec(&self, key: &str) -> KeySpec {
        if let Some(spec) = self.known.load().get(key) {
            return *spec;
        }
        self.first_use(key)
    }

    #[cold]
    fn first_use(&self, key: &str) -> KeySpec {
        let spec = match self.undeclared.strategy() {
            None => return KeySpec::new(Strategy::Segment, KeySource::Refused),
            Some(strategy) => KeySpec::new(strategy, KeySource::Undeclared),
        };
        // An undeclared segment name needs no memory: created later, it is
        // a segment key still.
        if spec.strategy == Strategy::Segment || self.full.load(Ordering::Relaxed) {
            return spec;
        }
        let _one_writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let known = self.known.load_full();
        if let Some(existing) = known.get(key) {
            // Claimed as a segment key since the lookup above: that wins.
            return *existing;
        }
        if known.len() >= MAX_REMEMBERED {
            self.full.store(true, Ordering::Relaxed);
            return spec;
        }
        let mut next = KeyMap::clone(&known);
        next.insert(key.to_owned(), spec);
        self.known.store(Arc::new(next));
        spec
    }

    /// `key`'s spec if it is known (declared, a store key, or an undeclared
    /// name remembered), without resolving it.
    pub(crate) fn peek(&self, key: &str) -> Option<KeySpec> {
        self.known.load().get(key).copied()
    }

    /// Whether `key` is declared in config.
    pub(crate) fn is_declared(&self, key: &str) -> bool {
        self.peek(key)
            .is_some_and(|spec| spec.source == KeySource::Declared)
    }

    /// Every known key, for listings.
    pub(crate) fn snapshot(&self) -> Arc<KeyMap<KeySpec>> {
        self.known.load_full()
    }

    /// Makes `key` a segment key (the admin API, before creating its row):
    /// `Ok(true)` when it was not one yet (undo with [`KeyTable::forget`] if
    /// the row can't be made), `Ok(false)` when it is one already.
    ///
    /// # Errors
    /// `wrong_strategy` (409) when `key` is declared with, or was already
    /// answered with, another strategy; also when too many undeclared names
    /// were answered to tell.
    pub(crate) fn claim_segment(&self, key: &str) -> Result<bool, IssueError> {
        let _one_writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let known = self.known.load_full();
        match known.get(key) {
            Some(spec) if spec.strategy == Strategy::Segment => return Ok(false),
            Some(spec) => {
                let why = match spec.source {
                    KeySource::Declared => {
                        format!("is declared {} in [keys.{key}]", spec.strategy.name())
                    }
                    _ => format!(
                        "has been served as {} by this server (server.undeclared_keys = \"{}\")",
                        spec.strategy.name(),
                        self.undeclared.name()
                    ),
                };
                return Err(IssueError::new(
                    ErrorClass::Conflict,
                    "wrong_strategy",
                    format!(
                        "key {key:?} {why}: a key never changes strategy under a running \
                         server; declare it in [segment.keys.{key}] and restart, or pick another name"
                    ),
                ));
            }
            None => {}
        }
        let answered_otherwise = self
            .undeclared
            .strategy()
            .is_some_and(|s| s != Strategy::Segment);
        if answered_otherwise && self.full.load(Ordering::Relaxed) {
            return Err(IssueError::new(
                ErrorClass::Conflict,
                "wrong_strategy",
                format!(
                    "key {key:?} may have been served as {} (this server answered more than \
                     {MAX_REMEMBERED} undeclared names and stopped remembering them): declare it \
                     in [segment.keys.{key}] and restart",
                    self.undeclared.name()
                ),
            ));
        }
        let mut next = KeyMap::clone(&known);
        next.insert(
            key.to_owned(),
            KeySpec::new(Strategy::Segment, KeySource::Store),
        );
        self.known.store(Arc::new(next));
        Ok(true)
    }

    /// Undoes a [`KeyTable::claim_segment`] whose row could not be made: the
    /// name was never served as a segment key.
    pub(crate) fn forget(&self, key: &str) {
        let _one_writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = KeyMap::clone(&self.known.load());
        if next.get(key).is_some_and(|s| s.source == KeySource::Store) {
            next.remove(key);
            self.known.store(Arc::new(next));
        }
    }
}

/// Everything the surfaces (HTTP handlers, RESP connections) share.
pub(crate) struct AppState {
    pub worker: WorkerHandle,
    pub layout: Layout,
    pub layout_text: String,
    pub clock: IdClock,
    /// `snowflake.clock_behind` and `snowflake.sequence_exhausted`: what the
    /// generator absorbs of a clock behind its last ID, for `/readyz`.
    pub clock_policy: (ClockBehind, SequenceExhausted),
    /// Until when (nanoseconds on [`AppState::clock`]) snowflake IDs fail
    /// because the clock went back beyond the policy: the last such failure's
    /// verdict, for `/readyz`.
    pub clock_failed_until: AtomicI64,
    pub segments: SegmentAllocator,
    pub uuids: UuidGenerator,
    pub keys: KeyTable,
    pub obfuscator: Option<Obfuscator>,
    pub codec: PublicIdCodec,
    pub admin_token: Option<Secret>,
    /// `keys.<name>.token`: the keys whose ID requests need a token.
    pub key_tokens: KeyMap<Secret>,
    /// Tinyid's `tiny_id_token`, which Tinyid's routes check instead of
    /// `key_tokens` when the store is Tinyid's table.
    pub tinyid_tokens: Option<Arc<crate::http::tinyid::TinyidTokens>>,
    pub max_count: u64,
    /// The node's metrics (`metrics.rs`): issued IDs are counted in [`issue`].
    pub metrics: Arc<crate::metrics::Metrics>,
    /// `server.max_connections` and `server.read_timeout`, which every listener keeps.
    pub connections: ConnectionLimits,
    /// The registry's fleet, read at most every couple of seconds (`fleet.rs`).
    pub fleet: crate::fleet::FleetView,
    /// `[tls]`: the certificate the listeners serve; `None`, all plain text.
    pub tls: Option<Arc<crate::tls::Tls>>,
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
    /// The spec of `key` on `/v1/ids`, gRPC and RESP ([`KeyTable::spec`]).
    #[inline]
    pub(crate) fn spec(&self, key: &str) -> KeySpec {
        self.keys.spec(key)
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

/// The clock snowflake IDs are made from (`snowflake.clock`), as the
/// surfaces report it.
#[derive(Debug, Clone)]
pub(crate) enum IdClock {
    /// The wall clock read once at start, advanced by the monotonic clock.
    Monotonic(Arc<MonotonicClock>),
    /// The raw wall clock.
    Wall(Arc<WallClock>),
}

impl IdClock {
    /// The clock `source` names, anchored now.
    pub(crate) fn new(source: ClockSource) -> IdClock {
        match source {
            ClockSource::Monotonic => IdClock::Monotonic(Arc::new(MonotonicClock::new())),
            ClockSource::Wall => IdClock::Wall(Arc::new(WallClock)),
        }
    }

    /// The clock itself, for the generator (no dispatch on its hot path).
    pub(crate) fn shared(&self) -> Arc<dyn Clock> {
        match self {
            IdClock::Monotonic(c) => c.clone(),
            IdClock::Wall(c) => c.clone(),
        }
    }

    /// Which clock this is.
    pub(crate) fn source(&self) -> ClockSource {
        match self {
            IdClock::Monotonic(_) => ClockSource::Monotonic,
            IdClock::Wall(_) => ClockSource::Wall,
        }
    }

    /// The wall clock minus this clock, in nanoseconds: how far a wall-clock
    /// step (or slew) has moved the wall clock away from the time IDs carry.
    /// Always 0 for the wall clock, which IDs follow step for step.
    pub(crate) fn drift(&self) -> i64 {
        match self {
            IdClock::Monotonic(c) => c.drift(),
            IdClock::Wall(_) => 0,
        }
    }
}

impl Clock for IdClock {
    fn now_nanos(&self) -> i64 {
        match self {
            IdClock::Monotonic(c) => c.now_nanos(),
            IdClock::Wall(c) => c.now_nanos(),
        }
    }
}

/// Why the clock keeps the node out of rotation, if it does (docs/design.md §2
/// "Taking a sick node out of rotation"): snowflake IDs fail, or would fail,
/// because the clock reads further behind the last issued ID than the clock
/// policy absorbs. Clears by itself once the clock catches up (or is set
/// right).
///
/// Two readings, the first that applies:
/// - a failure seen: the last `clock_behind` or `rollback_exhausted` error
///   said until when IDs fail ([`note_clock_failure`]); this covers
///   `rollback-bits` with every counter value in use and a `history` ring
///   run dry, which only issuing can tell;
/// - the clock against the last issued ID, without waiting for a request:
///   `fail` absorbs nothing, `wait` its bound, `borrow` its lead, `history:N`
///   N ticks, and `sequence_exhausted = "borrow:…"` its lead on top (the
///   generator may run that far ahead of a clock that did not move).
///   `rollback-bits` absorbs any step back while a counter value is free.
pub(crate) fn clock_not_ready(state: &AppState) -> Option<String> {
    let (policy, exhausted) = state.clock_policy;
    let source = state.clock.source().name();
    let now = state.clock.now_nanos();
    let until = state.clock_failed_until.load(Ordering::Acquire);
    if now < until {
        return Some(format!(
            "snowflake IDs fail for {:.3} ms more: the {source} clock went back further than \
             snowflake.clock_behind = \"{}\" absorbs",
            (until - now) as f64 / 1e6,
            policy.name(),
        ));
    }
    let absorbed = match policy {
        ClockBehind::Wait { max } => max,
        ClockBehind::Borrow { max_lead } => max_lead,
        ClockBehind::History { ticks } => state.layout.unit().saturating_mul(ticks),
        ClockBehind::RollbackBits => return None,
        _ => Duration::ZERO,
    };
    let absorbed = match exhausted {
        SequenceExhausted::Borrow { max_lead } => absorbed.max(max_lead),
        _ => absorbed,
    };
    let behind = state.worker.generator().lead();
    (behind > absorbed).then(|| {
        format!(
            "the {source} clock is {:.3} ms behind the last issued ID; \
             snowflake.clock_behind = \"{}\" absorbs {:.3} ms",
            behind.as_secs_f64() * 1e3,
            policy.name(),
            absorbed.as_secs_f64() * 1e3,
        )
    })
}

/// Why the node should take no traffic, or `None` when it is ready: the
/// worker lease's verdict, then the clock's ([`clock_not_ready`]). `/readyz`
/// answers from it, and the gRPC health service follows it.
pub(crate) fn not_ready_reason(state: &AppState) -> Option<String> {
    state
        .worker
        .status()
        .not_ready_reason()
        .or_else(|| clock_not_ready(state))
}

/// Records until when snowflake IDs fail after a clock error (`error`'s own
/// verdict: the time the clock must reach), for [`clock_not_ready`].
fn note_clock_failure(state: &AppState, error: &idmint_core::Error) {
    let now = state.clock.now_nanos();
    let until = match error {
        idmint_core::Error::ClockBehind { behind, .. } => {
            now.saturating_add(i64::try_from(behind.as_nanos()).unwrap_or(i64::MAX))
        }
        idmint_core::Error::RollbackExhausted { retry_after, .. } => {
            i64::try_from(retry_after.as_nanosecond()).unwrap_or(i64::MAX)
        }
        _ => return,
    };
    state.clock_failed_until.fetch_max(until, Ordering::AcqRel);
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

/// The spec of `key` on a route that names its `strategy` (Leaf's
/// `/api/{snowflake,segment}/get/{key}`, Tinyid's segment routes): that
/// strategy for any name (refused under `undeclared_keys = "refuse"` when
/// unknown), public only when declared public with it.
///
/// # Errors
/// `wrong_strategy` (409) naming the key and its strategy when the key is
/// declared with another one.
pub(crate) fn route_spec(
    state: &AppState,
    key: &str,
    strategy: Strategy,
) -> Result<KeySpec, IssueError> {
    match state.keys.peek(key) {
        Some(spec) if spec.source == KeySource::Declared && spec.strategy != strategy => {
            Err(IssueError::new(
                ErrorClass::Conflict,
                "wrong_strategy",
                format!(
                    "key {key:?} is declared {}, not {}: ask /v1/ids/{key}, or the route of its \
                     strategy",
                    spec.strategy.name(),
                    strategy.name()
                ),
            ))
        }
        Some(spec) => Ok(KeySpec {
            strategy,
            public: spec.public && spec.strategy == strategy,
            source: spec.source,
        }),
        // "refuse" means only known keys, on these routes too.
        None if state.keys.undeclared() == UndeclaredKeys::Refuse => {
            Ok(KeySpec::new(strategy, KeySource::Refused))
        }
        None => Ok(KeySpec::new(strategy, KeySource::Undeclared)),
    }
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

/// Integer IDs. One is held inline, so a single-ID request (the hot path of
/// every surface) makes no allocation for it.
pub(crate) type Ints = SmallVec<[u64; 1]>;

/// IDs ready to render.
pub(crate) enum Issued {
    /// Integer IDs, already obfuscated when `public`.
    Ints { values: Ints, public: bool },
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
    // Digits only, as IDs are read: no sign (`str::parse` takes `+5`).
    let digits = text.trim();
    let n = Some(digits)
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u64>().ok())
        .ok_or_else(|| {
            let shown: String = text.chars().take(40).collect();
            let more = if shown.len() < text.len() { "…" } else { "" };
            IssueError::bad_input(
                "invalid_count",
                format!("count {shown:?}{more} is not a whole number: ask for 1..={max} IDs"),
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
async fn snowflakes(state: &Arc<AppState>, n: u64) -> Result<Ints, IssueError> {
    // Read the clock only once the mark holds a call back, not per ID.
    let mut deadline = None;
    loop {
        let result: idmint_core::Result<Ints> = if n == 1 {
            state.worker.next_id().map(|id| smallvec![id.get()])
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
            Err(e) => {
                note_clock_failure(state, &e);
                return Err(IssueError::from(e));
            }
            Ok(ids) => return Ok(ids),
        }
    }
}

fn flatten(batch: &IdBatch) -> Ints {
    let mut out = Vec::with_capacity(usize::try_from(batch.len()).unwrap_or(0));
    out.extend(batch.iter().map(Id::get));
    Ints::from_vec(out)
}

async fn segment_ids(state: &AppState, key: &str, n: u64) -> Result<Ints, IssueError> {
    if n == 1 {
        let id = state.segments.next_id(key).await?;
        Ok(smallvec![id.get()])
    } else {
        let batch = state.segments.next_ids(key, n).await?;
        Ok(flatten(&batch))
    }
}

/// Makes `n` IDs of `key` per its spec; public keys' IDs obfuscated; counts
/// them in the metrics. The caller has checked `key` ([`check_key`]) and `n`
/// (1 to `max_count`).
pub(crate) async fn issue(
    state: &Arc<AppState>,
    key: &str,
    spec: KeySpec,
    n: u64,
) -> Result<Issued, IssueError> {
    let issued = issue_uncounted(state, key, spec, n).await?;
    crate::metrics::count_issued(state, key, spec.strategy, issued.len() as u64);
    Ok(issued)
}

/// [`issue`] without counting: for a caller that counts with an
/// [`IssuedCounter`](crate::metrics::IssuedCounter) it holds.
pub(crate) async fn issue_uncounted(
    state: &Arc<AppState>,
    key: &str,
    spec: KeySpec,
    n: u64,
) -> Result<Issued, IssueError> {
    if spec.source == KeySource::Refused {
        return Err(refused(key));
    }
    let values = match spec.strategy {
        Strategy::Snowflake => snowflakes(state, n).await?,
        Strategy::Segment => segment_ids(state, key, n).await?,
        Strategy::Uuid4 | Strategy::Uuid7 => {
            let v7 = spec.strategy == Strategy::Uuid7;
            return Ok(Issued::Uuids(make_uuids(&state.uuids, v7, n)));
        }
    };
    if !spec.public {
        return Ok(Issued::Ints {
            values,
            public: false,
        });
    }
    let obfuscate = {
        let state = state.clone();
        move || -> Result<Ints, IssueError> {
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

/// The error for a name declared nowhere under `undeclared_keys = "refuse"`.
pub(crate) fn refused(key: &str) -> IssueError {
    IssueError::new(
        ErrorClass::NotFound,
        "unknown_key",
        format!(
            "unknown key {key:?}: it is declared nowhere and server.undeclared_keys = \
             \"refuse\"; declare it in [keys.{key}] or [segment.keys.{key}], or create it \
             through the admin API"
        ),
    )
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
    use super::{
        KeyMap, KeySource, KeySpec, KeyTable, MAX_REMEMBERED, Strategy, UndeclaredKeys,
        constant_time_eq, parse_count,
    };

    fn table(undeclared: UndeclaredKeys) -> KeyTable {
        let mut known = KeyMap::default();
        known.insert(
            "sf".to_owned(),
            KeySpec::new(Strategy::Snowflake, KeySource::Declared),
        );
        known.insert(
            "row".to_owned(),
            KeySpec::new(Strategy::Segment, KeySource::Store),
        );
        KeyTable::new(known, undeclared)
    }

    #[test]
    fn a_name_keeps_the_strategy_it_was_first_answered_with() {
        let keys = table(UndeclaredKeys::Snowflake);
        assert_eq!(keys.spec("sf").source, KeySource::Declared);
        assert_eq!(keys.spec("row").strategy, Strategy::Segment);
        let spec = keys.spec("order");
        assert_eq!(
            (spec.strategy, spec.source),
            (Strategy::Snowflake, KeySource::Undeclared)
        );
        assert_eq!(keys.peek("order"), Some(spec), "remembered");
        // Answered as snowflake, or declared so: never a segment key now.
        for name in ["order", "sf"] {
            let e = keys.claim_segment(name).unwrap_err();
            assert_eq!(e.code, "wrong_strategy");
            assert!(e.message.contains(name), "{}", e.message);
        }
        assert_eq!(keys.spec("order").strategy, Strategy::Snowflake);
        // A fresh name becomes a segment key, on every lookup from then on.
        assert!(keys.claim_segment("fresh").unwrap());
        assert_eq!(keys.spec("fresh").strategy, Strategy::Segment);
        assert!(!keys.claim_segment("fresh").unwrap());
        assert!(!keys.claim_segment("row").unwrap());
        // A claim whose row could not be made is undone; a store key is not.
        keys.forget("fresh");
        assert_eq!(keys.peek("fresh"), None);
        assert!(!keys.is_declared("order") && keys.is_declared("sf"));
    }

    #[test]
    fn refused_and_segment_rules_remember_nothing() {
        let keys = table(UndeclaredKeys::Refuse);
        assert_eq!(keys.spec("nope").source, KeySource::Refused);
        assert_eq!(keys.peek("nope"), None);
        assert!(keys.claim_segment("nope").unwrap());
        assert_eq!(keys.spec("nope").strategy, Strategy::Segment);

        let keys = table(UndeclaredKeys::Segment);
        let spec = keys.spec("later");
        assert_eq!(
            (spec.strategy, spec.source),
            (Strategy::Segment, KeySource::Undeclared)
        );
        assert_eq!(keys.peek("later"), None);
        assert!(keys.claim_segment("later").unwrap());
    }

    #[test]
    fn past_the_memory_bound_names_are_served_but_not_made_segment_keys() {
        let keys = table(UndeclaredKeys::Uuid7);
        for i in 0..MAX_REMEMBERED + 5 {
            assert_eq!(keys.spec(&format!("k{i}")).strategy, Strategy::Uuid7);
        }
        assert!(keys.snapshot().len() <= MAX_REMEMBERED);
        let e = keys.claim_segment("never-seen").unwrap_err();
        assert_eq!(e.code, "wrong_strategy");
        assert!(e.message.contains("stopped remembering"), "{}", e.message);
    }

    #[test]
    fn counts_are_digits_only_and_in_range() {
        assert_eq!(parse_count("5", 10).unwrap(), 5);
        assert_eq!(parse_count(" 10 ", 10).unwrap(), 10);
        for bad in [
            "+5",
            "-1",
            "0",
            "11",
            "",
            " ",
            "1e3",
            "0x5",
            "5.0",
            "٣",
            "99999999999999999999",
        ] {
            let e = parse_count(bad, 10).unwrap_err();
            assert_eq!(e.code, "invalid_count", "{bad:?}");
            assert!(e.message.contains("1..=10"), "{}", e.message);
        }
        // A huge bad count is quoted in part, not whole.
        let e = parse_count(&"x".repeat(1 << 20), 10).unwrap_err();
        assert!(e.message.len() < 200, "{}", e.message.len());
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cre", b"s3cret"));
        assert!(!constant_time_eq(b"s3crett", b"s3cret"));
        assert!(!constant_time_eq(b"s3creT", b"s3cret"));
        assert!(!constant_time_eq(b"", b"s3cret"));
    }
}
