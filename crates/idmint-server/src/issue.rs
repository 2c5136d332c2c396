//! Issuing IDs for a key, whatever the surface asking (HTTP, RESP): the
//! key's strategy resolved from config, IDs made by the snowflake worker, the
//! segment allocator or the UUID generator, and public keys' IDs obfuscated.
//!
//! Failures are [`IssueError`]s (`error.rs`): a stable code (`key_not_found`,
//! `unavailable`, ...), a message naming the value, a class, and a retry hint.
//! Each surface maps them to its own form: an HTTP status and JSON body in
//! `http.rs`, a `-CODE message` error reply in `resp.rs`.
//!
//! What issuing reads lives below it: the key table (`keys.rs`), the shared
//! state (`state.rs`), readiness (`ready.rs`); the count of issued IDs goes
//! through [`AppState::count_issued`], so this module imports no metrics.

use std::sync::Arc;

use idmint_core::uuid::UuidGenerator;
use idmint_core::{Id, IdBatch, PublicId, TextFormat};
use smallvec::{SmallVec, smallvec};

use crate::keys::{KeySource, KeySpec};
use crate::ready::note_clock_failure;
use crate::state::AppState;
use idmint_node::config::Strategy;
use idmint_node::{ErrorClass, IssueError, MarkWait};

/// The spec of `key` on a route that names its `strategy` (Leaf's
/// `/api/{snowflake,segment}/get/{key}`, Tinyid's segment routes): a name
/// not known yet is served with that strategy and keeps it for the run
/// (refused under `undeclared_keys = "refuse"`); see
/// [`KeyTable::route_spec`](crate::keys::KeyTable::route_spec).
///
/// # Errors
/// `wrong_strategy` (409) naming the key and its strategy when the key is
/// known with another one (declared, a store key, or served before).
pub(crate) fn route_spec(
    state: &AppState,
    key: &str,
    strategy: Strategy,
) -> Result<KeySpec, IssueError> {
    state.keys.route_spec(key, strategy)
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
    let mut wait = MarkWait::new();
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
            Err(e @ idmint_core::Error::MarkReached { .. }) => {
                tokio::time::sleep(wait.pause(&e, &state.worker)?).await;
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

/// `n` IDs of the timestamp oracle: here on the leader, forwarded elsewhere.
async fn monotonic_ids(state: &AppState, n: u64) -> Result<Ints, IssueError> {
    let Some(monotonic) = &state.monotonic else {
        // Declared keys start the oracle; nothing else resolves to monotonic.
        return Err(IssueError::internal("monotonic key without an oracle"));
    };
    let batch = monotonic.ids(n).await?;
    Ok(flatten(&batch))
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
    state.count_issued(key, spec.strategy, issued.len() as u64);
    Ok(issued)
}

/// [`issue`] without counting: for a caller that counts with an
/// [`IssuedCounter`](crate::metrics::IssuedCounter) it holds
/// ([`AppState::issued_counter`]).
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
        Strategy::Monotonic => monotonic_ids(state, n).await?,
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
    use super::parse_count;

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
}
