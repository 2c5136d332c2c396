//! The operator's fix after a store forgot ([`raise_key`], behind `idmint
//! segment raise`): raise a key above every ID issued and, with the node's
//! floor file, let the node serve again.

use crate::error::{Result, SegmentError};
use crate::floor::FloorFile;
use crate::store::StoreEpoch;
use crate::store::{KeyInfo, MAX_ID, NewKey, SegmentStore, validate_key};

/// What [`raise_key`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    /// The key's `max_id` before (`None`: it was missing and was created).
    pub before: Option<u64>,
    /// The start asked for: `above + 1`, or the node's floor when higher.
    pub target: u64,
    /// The key's row afterwards (`max_id` is where it issues from next).
    pub info: KeyInfo,
    /// The store epoch the floor file adopted, when it adopted one.
    pub epoch_adopted: Option<StoreEpoch>,
    /// What still keeps the node from starting: keys of its floor file the
    /// store holds below their floor (or not at all), and declared keys the
    /// store lacks. The epoch is adopted only once this is empty.
    pub still_below: Vec<StillBelow>,
}

/// A key that still keeps a node from starting after [`raise_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StillBelow {
    /// The key.
    pub key: String,
    /// The node's floor for it (`None`: a declared key it never issued from).
    pub floor: Option<u64>,
    /// The store's `max_id` for it (`None`: missing).
    pub found: Option<u64>,
}

/// Raises `key` so that every ID it issues from now on is above `above`, and
/// above this node's floor when `floors` is given: the store's `max_id`
/// becomes at least `above + 1` (never lower than it was; a missing key is
/// created as `key` describes it, its start replaced).
///
/// With `floors` (the node's data directory, opened while the node is
/// stopped), the node is made ready to start again when the store is
/// whole: once every key of its floor file is at or above its floor and
/// every key in `declared` exists, it adopts the store's epoch marker,
/// writing a new one into a store that has none (after a deliberate reset,
/// this is how the marker comes back). Until then nothing is adopted, and
/// [`Raised::still_below`] says what is missing: a store that forgot one key
/// forgot them all, and a key declared but missing may have been issued by
/// other nodes. The floor file is written on the calling thread.
///
/// # Errors
/// [`SegmentError::InvalidKey`] and [`SegmentError::InvalidSpec`] for a bad
/// key, step or `above` (bad input); the store's errors; and
/// [`SegmentError::FloorFile`] when the floor file can't be written.
pub async fn raise_key(
    store: &dyn SegmentStore,
    floors: Option<&FloorFile>,
    key: NewKey,
    above: u64,
    declared: &[String],
) -> Result<Raised> {
    validate_key(key.key())?;
    if above >= MAX_ID {
        return Err(SegmentError::InvalidSpec {
            field: "above",
            reason: format!("{above} leaves no ID above it (the largest is {MAX_ID})"),
        });
    }
    let floor = floors.and_then(|f| f.floor(key.key()));
    let target = (above + 1).max(floor.unwrap_or(0));
    let key = key.with_start(target);
    key.validate()?;
    let before = store.describe(key.key()).await?.map(|info| info.max_id);
    let info = store.raise(&key).await?;
    let mut raised = Raised {
        before,
        target,
        info,
        epoch_adopted: None,
        still_below: Vec::new(),
    };
    let Some(floors) = floors else {
        return Ok(raised);
    };
    let stored: std::collections::HashMap<String, u64> = store
        .list()
        .await?
        .into_iter()
        .map(|info| (info.key, info.max_id))
        .collect();
    let record = floors.record();
    for (name, &floor) in &record.floors {
        let found = stored.get(name).copied();
        if found.is_none_or(|max_id| max_id < floor) {
            raised.still_below.push(StillBelow {
                key: name.clone(),
                floor: Some(floor),
                found,
            });
        }
    }
    for name in declared {
        if !stored.contains_key(name) && !record.floors.contains_key(name) {
            raised.still_below.push(StillBelow {
                key: name.clone(),
                floor: None,
                found: None,
            });
        }
    }
    if !raised.still_below.is_empty() || !store.keeps_epoch() {
        return Ok(raised);
    }
    let epoch = match store.epoch().await? {
        Some(epoch) => epoch,
        None => store.init_epoch(&StoreEpoch::generate()).await?,
    };
    if record.epoch.as_ref() != Some(&epoch) {
        floors.set_epoch(&epoch)?;
        raised.epoch_adopted = Some(epoch);
    }
    Ok(raised)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    #[tokio::test]
    async fn raises_above_the_floor_and_adopts_the_epoch_once_the_store_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let floors = FloorFile::open(dir.path()).unwrap();
        floors.set_epoch(&StoreEpoch::generate()).unwrap();
        floors.raise("a", 301).unwrap();
        floors.raise("b", 51).unwrap();
        let store = MemoryStore::new();
        let declared = ["a".to_owned(), "c".to_owned()];

        // Asked for above 100; the node's floor 301 is higher.
        let raised = raise_key(&store, Some(&floors), NewKey::new("a", 10), 100, &declared)
            .await
            .unwrap();
        assert_eq!(
            (raised.before, raised.target, raised.info.max_id),
            (None, 301, 301)
        );
        let pending: Vec<&str> = raised.still_below.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(
            pending,
            ["b", "c"],
            "b below its floor, c declared but missing"
        );
        assert_eq!(raised.epoch_adopted, None);
        assert_eq!(store.epoch().await.unwrap(), None, "no epoch while pending");

        raise_key(&store, Some(&floors), NewKey::new("b", 10), 0, &declared)
            .await
            .unwrap();
        let raised = raise_key(&store, Some(&floors), NewKey::new("c", 10), 0, &declared)
            .await
            .unwrap();
        assert!(raised.still_below.is_empty(), "{:?}", raised.still_below);
        let adopted = raised.epoch_adopted.unwrap();
        assert_eq!(store.epoch().await.unwrap(), Some(adopted.clone()));
        assert_eq!(floors.epoch(), Some(adopted));
        assert_eq!(store.describe("b").await.unwrap().unwrap().max_id, 51);

        // Never lowers; without floors only the store moves.
        let raised = raise_key(&store, None, NewKey::new("a", 10), 5, &[])
            .await
            .unwrap();
        assert_eq!((raised.before, raised.info.max_id), (Some(301), 301));
        let raised = raise_key(&store, None, NewKey::new("a", 10), 999, &[])
            .await
            .unwrap();
        assert_eq!(raised.info.max_id, 1000);
    }

    #[tokio::test]
    async fn bad_input_changes_nothing() {
        let store = MemoryStore::new();
        for (key, above) in [
            (NewKey::new("a b", 10), 5),
            (NewKey::new("a", 0), 5),
            (NewKey::new("a", 10), MAX_ID),
            (NewKey::new("a", 10), MAX_ID - 5),
        ] {
            let err = raise_key(&store, None, key, above, &[]).await.unwrap_err();
            assert!(err.is_bad_input(), "{err}");
        }
        assert!(store.list().await.unwrap().is_empty());
    }
}
