//! The secrets requests are checked against, below every surface: a
//! comparison that takes the same time wherever two values differ
//! ([`constant_time_eq`]), and Tinyid's tokens ([`TinyidTokens`]), read from
//! its `tiny_id_token` table at start and again every minute.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use idmint_segment::sql::{SqlSegmentStore, TinyidToken};
use tokio::task::JoinHandle;

/// Compares `given` with `secret` in time that depends only on the secret's
/// length (not on where they differ, nor on the given length).
pub(crate) fn constant_time_eq(given: &[u8], secret: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != secret.len());
    for (i, s) in secret.iter().enumerate() {
        diff |= given.get(i).copied().unwrap_or(0) ^ s;
    }
    std::hint::black_box(diff) == 0
}

/// Tinyid's tokens, by business type: what `tiny_id_token` held when last read.
#[derive(Debug, Default)]
pub(crate) struct TinyidTokens {
    by_biz_type: ArcSwap<HashMap<String, Vec<String>>>,
}

impl TinyidTokens {
    /// Tokens from `rows`.
    pub(crate) fn new(rows: Vec<TinyidToken>) -> TinyidTokens {
        let tokens = TinyidTokens::default();
        tokens.replace(rows);
        tokens
    }

    fn replace(&self, rows: Vec<TinyidToken>) {
        let mut map: HashMap<String, Vec<String>> = HashMap::new();
        for row in rows {
            map.entry(row.biz_type).or_default().push(row.token);
        }
        self.by_biz_type.store(Arc::new(map));
    }

    /// Tinyid's `canVisit`: some row gives `token` access to `biz_type`
    /// (tokens compared in constant time).
    pub(crate) fn can_visit(&self, biz_type: &str, token: &str) -> bool {
        let map = self.by_biz_type.load();
        map.get(biz_type).is_some_and(|tokens| {
            tokens.iter().fold(false, |ok, t| {
                ok | constant_time_eq(token.as_bytes(), t.as_bytes())
            })
        })
    }
}

/// Owns the task that re-reads `tiny_id_token` every minute (Tinyid's
/// `@Scheduled(cron = "0 0/1 * * * ?")`); stops it when dropped. A failed
/// read keeps the tokens read before.
#[derive(Debug)]
pub(crate) struct TokenRefresher(JoinHandle<()>);

impl TokenRefresher {
    /// The refresh period.
    pub(crate) const PERIOD: Duration = Duration::from_secs(60);

    pub(crate) fn spawn(store: Arc<SqlSegmentStore>, tokens: Arc<TinyidTokens>) -> TokenRefresher {
        TokenRefresher(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Self::PERIOD);
            tick.tick().await;
            loop {
                tick.tick().await;
                match store.tinyid_tokens().await {
                    Ok(rows) => {
                        tracing::debug!(tokens = rows.len(), "tiny_id_token read");
                        tokens.replace(rows);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading tiny_id_token failed; keeping the tokens read before");
                    }
                }
            }
        }))
    }
}

impl Drop for TokenRefresher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::{TinyidToken, TinyidTokens, constant_time_eq};

    fn row(token: &str, biz_type: &str) -> TinyidToken {
        TinyidToken {
            token: token.to_owned(),
            biz_type: biz_type.to_owned(),
        }
    }

    #[test]
    fn a_token_opens_the_biz_types_its_rows_name() {
        let tokens = TinyidTokens::new(vec![row("t1", "a"), row("t1", "b"), row("t2", "b")]);
        assert!(tokens.can_visit("a", "t1") && tokens.can_visit("b", "t1"));
        assert!(tokens.can_visit("b", "t2"));
        assert!(!tokens.can_visit("a", "t2"));
        assert!(!tokens.can_visit("c", "t1"));
        assert!(!tokens.can_visit("a", "t"));
        assert!(!tokens.can_visit("a", "t11"));
        tokens.replace(vec![row("t3", "a")]);
        assert!(!tokens.can_visit("a", "t1") && tokens.can_visit("a", "t3"));
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
