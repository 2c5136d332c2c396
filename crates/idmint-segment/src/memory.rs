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
use crate::store::StoreEpoch;
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
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    keys: BTreeMap<String, KeyInfo>,
    /// Every key the store ever had.
    ledger: std::collections::BTreeSet<String>,
    epoch: Option<StoreEpoch>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Forgets every key and the epoch marker, as a Redis without persistence
    /// does when it restarts (for tests of what follows).
    pub fn reset(&self) {
        *self.state() = State::default();
    }

    /// Deletes `key`'s row only, its ledger entry kept (for tests: a row
    /// deleted by hand, or evicted); `false` when there is no such key.
    pub fn delete_key(&self, key: &str) -> bool {
        self.state().keys.remove(key).is_some()
    }

    /// Forgets the epoch marker only, keys kept (for tests: someone deleted
    /// the marker by hand, or another store was swapped in with the same
    /// keys).
    pub fn forget_epoch(&self) {
        self.state().epoch = None;
    }

    /// Sets `key`'s `max_id` (for tests: a store restored from an older
    /// backup); `false` when there is no such key.
    pub fn set_max_id(&self, key: &str, max_id: u64) -> bool {
        match self.state().keys.get_mut(key) {
            Some(row) => {
                row.max_id = max_id;
                true
            }
            None => false,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the state consistent before it could panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn insert(keys: &mut BTreeMap<String, KeyInfo>, key: &NewKey) -> KeyInfo {
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
        info
    }
}

#[async_trait]
impl SegmentStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn fetch_above(&self, key: &str, step: Option<u64>, floor: u64) -> Result<SegmentGrant> {
        let mut state = self.state();
        let row = state
            .keys
            .get_mut(key)
            .ok_or_else(|| SegmentError::NotFound {
                key: key.to_owned(),
            })?;
        if row.max_id < floor {
            return Err(SegmentError::KeyBelowFloor {
                store: "memory",
                key: key.to_owned(),
                floor,
                found: Some(row.max_id),
            });
        }
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
        Ok(self.state().keys.get(key).cloned())
    }

    async fn create(&self, key: &NewKey) -> Result<KeyInfo> {
        key.validate()?;
        let mut state = self.state();
        if state.keys.contains_key(key.key()) {
            return Err(SegmentError::KeyExists {
                key: key.key().to_owned(),
            });
        }
        if state.ledger.contains(key.key()) {
            return Err(SegmentError::KeyForgotten {
                store: self.kind(),
                key: key.key().to_owned(),
            });
        }
        state.ledger.insert(key.key().to_owned());
        Ok(MemoryStore::insert(&mut state.keys, key))
    }

    async fn list(&self) -> Result<Vec<KeyInfo>> {
        Ok(self.state().keys.values().cloned().collect())
    }

    async fn raise(&self, key: &NewKey) -> Result<KeyInfo> {
        let mut state = self.state();
        match state.keys.get_mut(key.key()) {
            Some(row) => {
                if row.max_id < key.start() {
                    row.max_id = key.start();
                    row.updated = Some(Timestamp::now());
                }
                Ok(row.clone())
            }
            None => {
                key.validate()?;
                state.ledger.insert(key.key().to_owned());
                Ok(MemoryStore::insert(&mut state.keys, key))
            }
        }
    }

    fn keeps_ledger(&self) -> bool {
        true
    }

    async fn remember_keys(&self) -> Result<()> {
        let mut state = self.state();
        let State { keys, ledger, .. } = &mut *state;
        ledger.extend(keys.keys().cloned());
        Ok(())
    }

    fn keeps_epoch(&self) -> bool {
        true
    }

    async fn epoch(&self) -> Result<Option<StoreEpoch>> {
        Ok(self.state().epoch.clone())
    }

    async fn init_epoch(&self, epoch: &StoreEpoch) -> Result<StoreEpoch> {
        Ok(self
            .state()
            .epoch
            .get_or_insert_with(|| epoch.clone())
            .clone())
    }
}
