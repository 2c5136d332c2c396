//! Issuing over RESP: `INCR`/`GET`, `IDMINT.BATCH` and `INCRBY` runs,
//! through the key a connection last issued for (checked once, counted
//! before each write).

use std::time::Duration;

use super::frame;
use super::{Connection, LastKey, shown};
use crate::issue::{self, Issued};
use crate::keys::KeySpec;
use crate::state::AppState;
use idmint_node::config::Strategy;
use idmint_node::{ErrorClass, IssueError};

/// Tries of an `INCRBY` run before answering unavailable: a retry takes the
/// run from one segment unless another node leases in between again.
const INCRBY_TRIES: u32 = 3;

impl Connection {
    /// `INCR`/`GET` (`count` None: one ID, not in an array) and `IDMINT.BATCH`.
    pub(super) async fn issue(&mut self, key: &[u8], count: Option<&[u8]>) {
        let mark = self.out.len();
        match self.try_issue(key, count).await {
            Ok(n) => self.n_ids += n,
            Err(e) => {
                // Nothing half written: an array header without its elements.
                self.out.truncate(mark);
                frame::error(&mut self.out, &e.code.to_ascii_uppercase(), &e.message);
            }
        }
    }

    async fn try_issue(&mut self, key: &[u8], count: Option<&[u8]>) -> Result<u64, IssueError> {
        let last = match &mut self.last_key {
            Some(last) if last.key.as_bytes() == key => last,
            slot => slot.insert(resolve(&self.state, &self.authorized, key)?),
        };
        let n = match count {
            None => 1,
            Some(text) => {
                let text = String::from_utf8_lossy(text);
                issue::parse_count(&text, self.state.max_count)?
            }
        };
        let issued = issue::issue_uncounted(&self.state, &last.key, last.spec, n).await?;
        last.pending += issued.len() as u64;
        if count.is_some() {
            frame::array(&mut self.out, issued.len());
        }
        let n_issued = issued.len() as u64;
        match issued {
            Issued::Ints { values, public } => {
                let as_integers = !public || issue::public_ids_are_decimal(&self.state);
                for value in values {
                    match i64::try_from(value) {
                        Ok(v) if as_integers => frame::integer(&mut self.out, v),
                        _ => {
                            let text = issue::text_of(&self.state, value, public)?;
                            frame::bulk(&mut self.out, text.as_bytes());
                        }
                    }
                }
            }
            Issued::Uuids(values) => {
                for value in values {
                    frame::bulk(&mut self.out, issue::uuid_text(value).as_bytes());
                }
            }
        }
        Ok(n_issued)
    }

    /// `INCRBY key n`: see the module docs.
    pub(super) async fn incr_by(&mut self, key: &[u8], count: &[u8]) {
        // `INCRBY key 1` is `INCR key` for every strategy (redis-py's
        // `incr()` sends it): a run of one ID is always contiguous.
        let n = match incr_by_count(count, self.state.max_count) {
            Ok(1) => return self.issue(key, None).await,
            Ok(n) => n,
            Err(e) => {
                return frame::error(&mut self.out, &e.code.to_ascii_uppercase(), &e.message);
            }
        };
        match self.try_incr_by(key, n).await {
            Ok(n) => self.n_ids += n,
            Err(e) => frame::error(&mut self.out, &e.code.to_ascii_uppercase(), &e.message),
        }
    }

    /// `INCRBY key n` for `n` > 1.
    async fn try_incr_by(&mut self, key: &[u8], n: u64) -> Result<u64, IssueError> {
        let last = match &mut self.last_key {
            Some(last) if last.key.as_bytes() == key => last,
            slot => slot.insert(resolve(&self.state, &self.authorized, key)?),
        };
        incr_by_fits(&last.key, last.spec)?;
        let mut made = 0;
        for _ in 0..INCRBY_TRIES {
            let issued = issue::issue_uncounted(&self.state, &last.key, last.spec, n).await?;
            let Issued::Ints { values, .. } = issued else {
                return Err(IssueError::internal("a segment key answered UUIDs"));
            };
            last.pending += n;
            made += n;
            // The key's stride, once its segments are leased: 1 but for
            // keys with a `delta`.
            let delta = self.state.segments.key(&last.key).await?.status().delta;
            if values.windows(2).all(|w| w[1] == w[0] + delta) {
                let last_id = values.last().copied().unwrap_or_default();
                let last_id = i64::try_from(last_id)
                    .map_err(|_| IssueError::internal(format!("ID {last_id} passes 2^63")))?;
                frame::integer(&mut self.out, last_id);
                return Ok(made);
            }
            // The run crossed into a segment that doesn't follow the last
            // (another node leased the numbers between): a client reading
            // `last - n + 1 ..= last` would take IDs that aren't its own.
            // These are dropped, a gap that is never issued, and the run is
            // taken again, from one segment this time (leases are sized for
            // the run).
            tracing::warn!(key = %last.key, n, first = values.first().copied().unwrap_or_default(),
                last = values.last().copied().unwrap_or_default(),
                "INCRBY run not contiguous across segments; dropped and taken again");
        }
        Err(IssueError::unavailable(
            "not_contiguous",
            format!(
                "INCRBY {} {n}: no contiguous run of {n} IDs in {INCRBY_TRIES} tries \
                 (other nodes lease the key's segments in between); retry, or ask \
                 IDMINT.BATCH for the IDs themselves",
                last.key
            ),
            Duration::from_millis(100),
        ))
    }
}

/// `INCRBY`'s count: a whole number from 1 to `max` (`server.max_count`).
pub(super) fn incr_by_count(text: &[u8], max: u64) -> Result<u64, IssueError> {
    let text = String::from_utf8_lossy(text);
    if let Some(digits) = text.strip_prefix('-')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(IssueError::bad_input(
            "invalid_count",
            format!("INCRBY count {text} is negative: ask for 1..={max} IDs (server.max_count)"),
        ));
    }
    issue::parse_count(&text, max)
}

/// Whether `INCRBY` of more than one ID can answer for `key`: only a segment
/// key hands out IDs as one run a client can count back from the last; a
/// public key's IDs are obfuscated, snowflake and UUID IDs aren't
/// consecutive.
pub(super) fn incr_by_fits(key: &str, spec: KeySpec) -> Result<(), IssueError> {
    let why = match spec.strategy {
        Strategy::Segment if !spec.public => return Ok(()),
        Strategy::Segment => "is public: its IDs are obfuscated, not one run".to_owned(),
        other => format!(
            "is a {} key: its IDs are not one contiguous run",
            other.name()
        ),
    };
    Err(IssueError::bad_input(
        "not_contiguous",
        format!(
            "INCRBY needs a segment key and key {key:?} {why}; \
             ask IDMINT.BATCH {key} <n> for its next IDs"
        ),
    ))
}

/// Checks `key` and its token (`authorized`: the keys AUTH unlocked).
pub(super) fn checked_key<'k>(
    state: &AppState,
    authorized: &[String],
    key: &'k [u8],
) -> Result<&'k str, IssueError> {
    let key = std::str::from_utf8(key).map_err(|_| {
        IssueError::bad_input("invalid_key", format!("key {:?} is not UTF-8", shown(key)))
    })?;
    issue::check_key(key)?;
    if state.token_for(key).is_some() && !authorized.iter().any(|k| k == key) {
        return Err(IssueError::new(
            ErrorClass::Unauthorized,
            "noauth",
            format!("Authentication required: key {key:?} needs AUTH <token> first"),
        ));
    }
    Ok(key)
}

/// Checks `key` and its token (`authorized`: the keys AUTH unlocked), and
/// looks up what issuing for it needs.
fn resolve(state: &AppState, authorized: &[String], key: &[u8]) -> Result<LastKey, IssueError> {
    let key = checked_key(state, authorized, key)?;
    let spec = state.spec(key);
    Ok(LastKey {
        key: key.to_owned(),
        spec,
        counter: state.issued_counter(key, spec.strategy),
        pending: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incrby_counts_are_positive_and_runs_need_a_private_segment_key() {
        assert_eq!(incr_by_count(b"7", 10).unwrap(), 7);
        for bad in [&b"0"[..], b"-1", b"11", b"x", b"", b"+3", b"1.0"] {
            let e = incr_by_count(bad, 10).unwrap_err();
            assert_eq!(e.code, "invalid_count", "{bad:?}");
        }
        assert!(
            incr_by_count(b"-4", 10)
                .unwrap_err()
                .message
                .contains("negative")
        );
        let spec = |strategy, public| KeySpec {
            strategy,
            public,
            source: crate::keys::KeySource::Declared,
        };
        assert!(incr_by_fits("k", spec(Strategy::Segment, false)).is_ok());
        for (strategy, public) in [
            (Strategy::Segment, true),
            (Strategy::Snowflake, false),
            (Strategy::Uuid7, false),
            (Strategy::Uuid4, false),
        ] {
            let e = incr_by_fits("k", spec(strategy, public)).unwrap_err();
            assert_eq!(e.code, "not_contiguous");
            assert!(e.message.contains("IDMINT.BATCH k"), "{}", e.message);
        }
    }
}
