//! What every surface shares: [`AppState`], built once by `start.rs` and
//! handed to the HTTP router, the RESP and gRPC listeners.
//!
//! It holds the parts IDs are made from (the worker handle, the clock, the
//! segment allocator, the key table) and what requests are checked and
//! counted against (tokens, limits, metrics). The state knows nothing of the
//! surfaces: they import it, never the other way round.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use idmint_core::uuid::UuidGenerator;
use idmint_core::{ClockBehind, Layout, Obfuscator, PublicIdCodec, SequenceExhausted};
use idmint_registry::WorkerHandle;
use idmint_segment::SegmentAllocator;

use crate::fleet::FleetView;
use crate::keys::{KeyMap, KeySpec, KeyTable};
use crate::listen::ConnectionLimits;
use crate::metrics::{IssuedCounter, Metrics};
use crate::monotonic::Monotonic;
use crate::tls::Tls;
use crate::tokens::{TinyidTokens, constant_time_eq};
use idmint_node::IdClock;
use idmint_node::config::{Secret, Strategy};

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
    pub tinyid_tokens: Option<Arc<TinyidTokens>>,
    pub max_count: u64,
    /// The node's metrics (`metrics.rs`): issued IDs are counted through
    /// [`AppState::count_issued`].
    pub metrics: Arc<Metrics>,
    /// `server.max_connections` and `server.read_timeout`, which every listener keeps.
    pub connections: ConnectionLimits,
    /// The registry's fleet, read at most every couple of seconds (`fleet.rs`).
    pub fleet: FleetView,
    /// `[tls]`: the certificate the listeners serve; `None`, all plain text.
    pub tls: Option<Arc<Tls>>,
    /// The timestamp oracle, when a key is declared `strategy = "monotonic"`.
    pub monotonic: Option<Arc<Monotonic>>,
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

    /// The layout IDs of `key` are read with, and its text (`/v1/decode`'s
    /// and gRPC `Decode`'s `key`): the oracle's layout for a monotonic key,
    /// the snowflake layout for any other name or none. Looks the name up
    /// without resolving it, so decoding never fixes an undeclared name's
    /// strategy.
    pub(crate) fn decode_layout(&self, key: Option<&str>) -> (&idmint_core::Layout, &str) {
        let monotonic = key
            .and_then(|k| self.keys.peek(k))
            .is_some_and(|spec| spec.strategy == idmint_node::config::Strategy::Monotonic);
        match (&self.monotonic, monotonic) {
            (Some(m), true) => (&m.layout, m.layout_text.as_str()),
            _ => (&self.layout, self.layout_text.as_str()),
        }
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

    /// Counts `n_ids` IDs of `key` made by `strategy` (one call per request,
    /// from `issue.rs`): under the key's own series when it is configured or a
    /// segment key the store just served, else under `key="*"` (an empty
    /// `key` is keyless, as `/v1/uuid`).
    #[inline]
    pub(crate) fn count_issued(&self, key: &str, strategy: Strategy, n_ids: u64) {
        self.metrics
            .count_issued(key, self.is_named(key, strategy), strategy, n_ids);
    }

    /// `key`'s issued counter, found once for a caller that issues for the
    /// same key many times (a RESP connection): adding to it skips the
    /// lookups [`AppState::count_issued`] makes.
    pub(crate) fn issued_counter(&self, key: &str, strategy: Strategy) -> IssuedCounter {
        self.metrics
            .issued_counter(key, self.is_named(key, strategy), strategy)
    }

    /// Whether `key` gets its own `idmint_ids_issued_total` series: segment keys
    /// and configured keys do; any other snowflake or UUID key counts as `other`.
    fn is_named(&self, key: &str, strategy: Strategy) -> bool {
        !key.is_empty() && (strategy == Strategy::Segment || self.keys.is_declared(key))
    }
}
