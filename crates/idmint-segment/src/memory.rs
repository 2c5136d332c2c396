//! [`MemoryStore`]: segment keys in the process's memory.
//!
//! For tests and for a single process that wants segment semantics (dense,
//! per-key increasing IDs) without a database. Nothing survives the process,
//! so IDs start over at each start: never use it where IDs are stored.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use jiff::Timestamp;

use crate::error::{Result, SegmentError};
use crate::store::{KeyInfo, MAX_ID, NewKey, SegmentGrant, SegmentStore};

/// Segment keys in the process's memory: for tests and single processes;
/// nothing survives the process, so never use it where IDs are stored.
///
/// # Examples
/// ```
/// use idmint_segment::{MemoryStore, NewKey, SegmentStore};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let store = MemoryStore::new();
/// store.create(&NewKey::new("order", 100)).await?;
/// let grant = store.fetch("order", None).await?;
/// assert_eq!((grant.start(), grant.max_id), (1, 101));
/// # Ok::<(), idmint_segment::SegmentError>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    keys: Mutex<BTreeMap<String, KeyInfo>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, KeyInfo>> {
        // Every critical section leaves the map consistent before it could panic.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl SegmentStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn fetch(&self, key: &str, step: Option<u64>) -> Result<SegmentGrant> {
        let mut keys = self.keys();
        let row = keys.get_mut(key).ok_or_else(|| SegmentError::NotFound {
            key: key.to_owned(),
        })?;
        let step = step.unwrap_or(row.step);
        let max_id = row
            .max_id
            .checked_add(step)
            .filter(|&m| m <= MAX_ID)
            .ok_or_else(|| SegmentError::Exhausted {
                key: key.to_owned(),
                max_id: row.max_id,
                step,
            })?;
        row.max_id = max_id;
        row.updated = Some(Timestamp::now());
        Ok(SegmentGrant {
            max_id,
            step,
            delta: row.delta,
            remainder: row.remainder,
        })
    }

    async fn describe(&self, key: &str) -> Result<Option<KeyInfo>> {
        Ok(self.keys().get(key).cloned())
    }

    async fn create(&self, key: &NewKey) -> Result<KeyInfo> {
        key.validate()?;
        let mut keys = self.keys();
        if keys.contains_key(key.key()) {
            return Err(SegmentError::KeyExists {
                key: key.key().to_owned(),
            });
        }
        let info = KeyInfo {
            key: key.key().to_owned(),
            max_id: key.start(),
            step: key.step(),
            delta: key.delta(),
            remainder: key.remainder(),
            description: key.description().to_owned(),
            updated: Some(Timestamp::now()),
        };
        keys.insert(info.key.clone(), info.clone());
        Ok(info)
    }

    async fn list(&self) -> Result<Vec<KeyInfo>> {
        Ok(self.keys().values().cloned().collect())
    }
}
