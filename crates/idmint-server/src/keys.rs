//! Every key's strategy, resolved once per run by one rule on every surface
//! ([`KeyTable`]): declared keys from config, the segment store's keys, and
//! `server.undeclared_keys` for any other name.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use idmint_node::config::{Strategy, UndeclaredKeys};
use idmint_node::{ErrorClass, IssueError};

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
        match self.undeclared.strategy() {
            None => KeySpec::new(Strategy::Segment, KeySource::Refused),
            Some(strategy) => self.remember(key, strategy),
        }
    }

    /// `key`'s spec on a route that names its strategy (Leaf's
    /// `/api/{snowflake,segment}/get`, Tinyid's): a name not known yet is
    /// served with `strategy` and remembered with it, like a first use on
    /// `/v1/ids` ([`KeyTable::spec`]); a name known with another strategy
    /// (declared, a segment key of the store or the admin API, or answered
    /// before) is refused.
    ///
    /// # Errors
    /// `wrong_strategy` (409) for a name known with another strategy.
    pub(crate) fn route_spec(&self, key: &str, strategy: Strategy) -> Result<KeySpec, IssueError> {
        let spec = match self.peek(key) {
            Some(spec) => spec,
            None if self.undeclared == UndeclaredKeys::Refuse => {
                return Ok(KeySpec::new(strategy, KeySource::Refused));
            }
            None => self.remember(key, strategy),
        };
        if spec.strategy == strategy {
            Ok(spec)
        } else {
            Err(self.conflict(key, spec, strategy))
        }
    }

    /// Why `key`, known as `spec`, can't be served as `asked`.
    fn conflict(&self, key: &str, spec: KeySpec, asked: Strategy) -> IssueError {
        let why = match spec.source {
            KeySource::Declared => format!("is declared {}", spec.strategy.name()),
            KeySource::Store => "is a segment key of the segment store".to_owned(),
            KeySource::Undeclared | KeySource::Refused => {
                format!("has been served as {} by this server", spec.strategy.name())
            }
        };
        IssueError::new(
            ErrorClass::Conflict,
            "wrong_strategy",
            format!(
                "key {key:?} {why}, not {}: a key keeps one strategy on every surface; ask \
                 /v1/ids/{key}, or the route of its strategy",
                asked.name()
            ),
        )
    }

    /// Remembers an undeclared `key` with `strategy` for the rest of the
    /// run (every strategy: a name served on any surface keeps its strategy
    /// on all of them), unless it became known meanwhile; returns its spec.
    #[cold]
    fn remember(&self, key: &str, strategy: Strategy) -> KeySpec {
        let spec = KeySpec::new(strategy, KeySource::Undeclared);
        if self.full.load(Ordering::Relaxed) {
            return spec;
        }
        let _one_writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let known = self.known.load_full();
        if let Some(existing) = known.get(key) {
            // Known since the lookup above (claimed, or served): that wins.
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
        if self.full.load(Ordering::Relaxed) {
            return Err(IssueError::new(
                ErrorClass::Conflict,
                "wrong_strategy",
                format!(
                    "key {key:?} may have been served with another strategy (this server \
                     answered more than {MAX_REMEMBERED} undeclared names and stopped \
                     remembering them): declare it in [segment.keys.{key}] and restart"
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

#[cfg(test)]
mod tests {
    use super::{KeyMap, KeySource, KeySpec, KeyTable, MAX_REMEMBERED, Strategy, UndeclaredKeys};

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
    fn refused_names_are_not_remembered_and_segment_names_stay_segment() {
        let keys = table(UndeclaredKeys::Refuse);
        assert_eq!(keys.spec("nope").source, KeySource::Refused);
        assert_eq!(keys.peek("nope"), None);
        assert_eq!(
            keys.route_spec("nope", Strategy::Snowflake).unwrap().source,
            KeySource::Refused
        );
        assert_eq!(keys.peek("nope"), None);
        assert!(keys.claim_segment("nope").unwrap());
        assert_eq!(keys.spec("nope").strategy, Strategy::Segment);

        // Served as a segment name, it stays one: the admin API then only
        // makes its row.
        let keys = table(UndeclaredKeys::Segment);
        let spec = keys.spec("later");
        assert_eq!(
            (spec.strategy, spec.source),
            (Strategy::Segment, KeySource::Undeclared)
        );
        assert_eq!(keys.peek("later"), Some(spec));
        assert!(!keys.claim_segment("later").unwrap());
        assert_eq!(
            keys.route_spec("later", Strategy::Snowflake)
                .unwrap_err()
                .code,
            "wrong_strategy"
        );
    }

    /// One name, one strategy, in every order across the surfaces: a route
    /// that names a strategy (Leaf's, Tinyid's), `/v1` (and gRPC, RESP)
    /// through `spec`, and the admin API through `claim_segment`.
    #[test]
    fn a_name_keeps_one_strategy_on_every_surface_in_every_order() {
        let keys = table(UndeclaredKeys::Snowflake);
        // Leaf's snowflake route first: the admin API can't make it a
        // segment key, Leaf's segment route refuses it, /v1 serves snowflake.
        assert_eq!(
            keys.route_spec("foo", Strategy::Snowflake)
                .unwrap()
                .strategy,
            Strategy::Snowflake
        );
        assert_eq!(
            keys.claim_segment("foo").unwrap_err().code,
            "wrong_strategy"
        );
        let err = keys.route_spec("foo", Strategy::Segment).unwrap_err();
        assert!(err.message.contains("served as snowflake"), "{err:?}");
        assert_eq!(keys.spec("foo").strategy, Strategy::Snowflake);

        // A segment key of the store or the admin API: Leaf's snowflake
        // route refuses it.
        assert!(keys.claim_segment("bar").unwrap());
        let err = keys.route_spec("bar", Strategy::Snowflake).unwrap_err();
        assert!(
            err.message.contains("segment key of the segment store"),
            "{err:?}"
        );
        let err = keys.route_spec("row", Strategy::Snowflake).unwrap_err();
        assert_eq!(err.code, "wrong_strategy");
        assert_eq!(
            keys.route_spec("row", Strategy::Segment).unwrap().strategy,
            Strategy::Segment
        );

        // /v1 first (undeclared names are snowflake here): the segment
        // route refuses it.
        assert_eq!(keys.spec("baz").strategy, Strategy::Snowflake);
        assert_eq!(
            keys.route_spec("baz", Strategy::Segment).unwrap_err().code,
            "wrong_strategy"
        );

        // Leaf's segment route first: /v1 serves it as segment, not as the
        // undeclared rule's snowflake.
        assert_eq!(
            keys.route_spec("qux", Strategy::Segment).unwrap().strategy,
            Strategy::Segment
        );
        assert_eq!(keys.spec("qux").strategy, Strategy::Segment);

        // Declared keys: refused on the other strategy's route, as before.
        let err = keys.route_spec("sf", Strategy::Segment).unwrap_err();
        assert!(err.message.contains("is declared snowflake"), "{err:?}");
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
}
