//! The process's table of live workers: no two live generators in one
//! process may issue from overlapping ID spaces (one layout, one worker ID),
//! or they repeat each other's IDs, every one of them.
//!
//! Uniqueness across processes is the registry's job (or, with a fixed
//! worker, the caller's); inside one process it is this table's. Every
//! [`crate::Generator`] takes an entry when it is made (a fixed worker) or
//! when its keeper claims a worker ID (a leased one, on every claim,
//! re-claims included: [`CheckedRegistry`]), and gives it back when it can
//! no longer issue: its last reference dropped after `close()`, or its
//! claim released or lost.
//!
//! # After a generator ends
//!
//! A worker ID given back may be taken again at once, in the same tick: the
//! new generator's sequence would start from 0 again and repeat what the old
//! one issued in that tick (or ahead of the clock, borrowing). So the table
//! keeps, per ID space given back, the latest time its generator issued at
//! (its last tick, and at least the time it was given back), and the next
//! generator on an overlapping space starts strictly after it: a fixed one
//! with `with_start_after`, a leased one with its claim's stored mark raised
//! to it (the keeper starts above the stored mark). One record per space,
//! the latest kept.
//!
//! # What "overlapping" means
//!
//! Not a preset's name: what decides an ID's bits. Below the time field sit
//! `low_bits = node_bits + sequence_bits`; the time field's width and the
//! layout's cap on ID bits only decide where the layout runs out, never
//! where a bit goes. Two generators can make the same ID at the same instant
//! only if their epochs, units and `low_bits` agree (their ticks then agree
//! and sit at the same shift); then each one holds some bits of the low part
//! fixed (its node field: datacenter and worker, and the rollback counter
//! unless the `rollback-bits` policy moves it), and the rest (the sequence)
//! takes every value. So they overlap exactly when their fixed bits agree
//! wherever both fix one: `twitter` with datacenter 1, worker 2 and `leaf`
//! with worker 34 do; `twitter` and `sonyflake` never meet (other epoch and
//! unit).
//!
//! # Fork
//!
//! A forked child starts with a copy of this table, and of its lock, which
//! a thread of the parent may have held at the fork: that thread doesn't
//! exist in the child, so the lock would stay held for good. So there is one
//! table per fork generation ([`crate::fork`]): a child makes its own, empty
//! one on first use and never touches its parent's. The parent's entries are
//! not the child's to release (its generators never issue there), and must
//! not block it: the parent's worker IDs are another process's, which is
//! the caller's or the registry's to keep apart, as for any two processes.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use idmint_core::FieldOrder;
use idmint_registry::{
    Claim, FleetMember, Lease, NodeIdentity, PeerReport, RegistryError, WorkerRegistry,
};
use jiff::Timestamp;

use crate::fork;

/// What two generators' IDs must share to be able to be equal: the epoch,
/// the unit, and how many bits lie below the time field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Space {
    epoch_ms: i64,
    unit_nanos: u128,
    low_bits: u8,
}

/// The bits of the low part (below the time field) a generator holds
/// fixed: `width` bits from `shift`, equal to `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fixed {
    shift: u8,
    width: u8,
    value: u64,
}

/// The IDs one generator can make, as the table compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdSpace {
    space: Space,
    fixed: Fixed,
}

impl IdSpace {
    /// The IDs of a generator of `layout` whose node field (datacenter in
    /// its high bits, worker in its low bits) is `node`. `rollback_moves`:
    /// the `rollback-bits` policy, which sets the rollback counter above the
    /// node field; otherwise that counter stays 0.
    pub(crate) fn new(layout: &idmint_core::Layout, node: u64, rollback_moves: bool) -> IdSpace {
        let low_bits = layout.node_bits() + layout.sequence_bits();
        let shift = match layout.order() {
            FieldOrder::TimeNodeSequence => layout.sequence_bits(),
            FieldOrder::TimeSequenceNode => 0,
        };
        let width = if rollback_moves {
            layout.datacenter_bits() + layout.worker_bits()
        } else {
            layout.node_bits()
        };
        IdSpace {
            space: Space {
                epoch_ms: layout.epoch().as_millisecond(),
                unit_nanos: layout.unit().as_nanos(),
                low_bits,
            },
            fixed: Fixed {
                shift,
                width,
                value: node,
            },
        }
    }

    /// Whether a generator of `self` and one of `other` can make one ID.
    fn overlaps(&self, other: &IdSpace) -> bool {
        if self.space != other.space {
            return false;
        }
        let (a, b) = (self.fixed, other.fixed);
        let lo = a.shift.max(b.shift);
        let hi = (a.shift + a.width).min(b.shift + b.width);
        if lo >= hi {
            return true; // no bit fixed by both: the sequences meet
        }
        let bits = |f: Fixed| (f.value >> (lo - f.shift)) & mask(hi - lo);
        bits(a) == bits(b)
    }
}

fn mask(width: u8) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// One live generator's entry.
#[derive(Debug)]
struct Entry {
    id: u64,
    ids: IdSpace,
    holder: String,
}

/// The table of one fork generation.
#[derive(Debug)]
struct Table {
    generation: u64,
    state: Mutex<State>,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    live: Vec<Entry>,
    /// Per ID space given back, the latest time an ID of it was issued at.
    ended: Vec<(IdSpace, Timestamp)>,
}

impl Table {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The tables: the current generation's, made on first use in each process.
static TABLE: ArcSwapOption<Table> = ArcSwapOption::const_empty();

/// This process's table (a forked child's own, new one).
fn table() -> Arc<Table> {
    loop {
        let generation = fork::generation();
        let current = TABLE.load_full();
        if let Some(table) = &current
            && table.generation == generation
        {
            return table.clone();
        }
        let fresh = Arc::new(Table {
            generation,
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(0),
        });
        let before = TABLE.compare_and_swap(&current, Some(fresh.clone()));
        let swapped = match (&*before, &current) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if swapped {
            return fresh;
        }
        // Another thread made this generation's table first: use it.
    }
}

/// A live generator's entry in the table, given back on drop.
#[derive(Debug)]
pub(crate) struct InUse {
    table: Arc<Table>,
    id: u64,
    ids: IdSpace,
    /// The time of the generator's last ID, once known ([`InUse::ended_at`]).
    last: Mutex<Option<Timestamp>>,
}

impl InUse {
    /// Records the time of the generator's last ID (its last tick): the
    /// next generator on this space starts after it, and after the time
    /// this entry is given back.
    pub(crate) fn ended_at(&self, last: Timestamp) {
        let mut slot = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some(slot.map_or(last, |t| t.max(last)));
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        // A parent's entry in a forked child belongs to the parent's table,
        // whose lock may be held for good there: left alone.
        if self.table.generation != fork::generation() {
            return;
        }
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).take();
        let ended = last.map_or_else(Timestamp::now, |t| t.max(Timestamp::now()));
        let mut state = self.table.state();
        state.live.retain(|e| e.id != self.id);
        match state.ended.iter_mut().find(|(ids, _)| *ids == self.ids) {
            Some((_, at)) => *at = (*at).max(ended),
            None => state.ended.push((self.ids, ended)),
        }
    }
}

/// Why an entry was refused: the live generator it overlaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// The generator refused.
    pub(crate) wanted: String,
    /// The live one it overlaps.
    pub(crate) holder: String,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} would repeat the IDs of a live generator in this process, {}: one layout and \
             one worker ID make the same IDs; share that generator, close() it first, or give \
             each its own worker ID (a registry-backed generator, from a config, claims one)",
            self.wanted, self.holder
        )
    }
}

/// Enters a generator of `ids`, described as `holder`, unless a live one
/// overlaps it; with the time it must start after, if a generator that
/// overlapped it has ended in this process.
pub(crate) fn enter(ids: IdSpace, holder: String) -> Result<(InUse, Option<Timestamp>), Conflict> {
    let table = table();
    let mut state = table.state();
    if let Some(other) = state.live.iter().find(|e| e.ids.overlaps(&ids)) {
        return Err(Conflict {
            wanted: holder,
            holder: other.holder.clone(),
        });
    }
    let start_after = state
        .ended
        .iter()
        .filter(|(ended, _)| ended.overlaps(&ids))
        .map(|(_, at)| *at)
        .max();
    let id = table.next_id.fetch_add(1, Ordering::Relaxed);
    state.live.push(Entry { id, ids, holder });
    drop(state);
    let in_use = InUse {
        table,
        id,
        ids,
        last: Mutex::new(None),
    };
    Ok((in_use, start_after))
}

/// A layout as the messages name it: the preset, or the full text form.
pub(crate) fn layout_name(layout: &idmint_core::Layout) -> String {
    layout
        .preset_name()
        .map_or_else(|| layout.to_string(), str::to_owned)
}

/// The registry a leased generator's keeper claims through: the config's
/// own, with every claim (the first and each re-claim) entered in the
/// process's table before any ID is issued from it.
///
/// A claim that overlaps a live generator of this process is released and
/// refused with [`RegistryError::WorkerTaken`]: the keeper's start fails
/// with it (the generator is refused), a re-claim is retried later as after
/// any refused claim (the generator issues nothing meanwhile, and says why
/// in its status). A new claim replaces the entry of the one before: the
/// keeper claims again only once the old claim is lost, after it stopped
/// the old generator.
#[derive(Debug)]
pub(crate) struct CheckedRegistry {
    inner: Arc<dyn WorkerRegistry>,
    layout: idmint_core::Layout,
    /// `snowflake.datacenter`: claims then cover the worker part only.
    datacenter: Option<u32>,
    rollback_moves: bool,
    state: Mutex<Checked>,
}

#[derive(Debug, Default)]
struct Checked {
    /// The current claim's entry.
    in_use: Option<InUse>,
    /// The ID space of the claim released last, for [`CheckedRegistry::forget`].
    ended: Option<IdSpace>,
    /// The last claim refused, for the start's error.
    refused: Option<Conflict>,
}

impl CheckedRegistry {
    pub(crate) fn new(
        inner: Arc<dyn WorkerRegistry>,
        layout: idmint_core::Layout,
        datacenter: Option<u32>,
        rollback_moves: bool,
    ) -> CheckedRegistry {
        CheckedRegistry {
            inner,
            layout,
            datacenter,
            rollback_moves,
            state: Mutex::new(Checked::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, Checked> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The claim refused last, if the last claim was refused here.
    pub(crate) fn refused(&self) -> Option<Conflict> {
        self.state().refused.clone()
    }

    /// Gives back the current claim's entry: for `close()`, once the
    /// keeper has stopped the generator (even when the release in the
    /// registry didn't finish in time), its last ID made at `last`.
    pub(crate) fn forget(&self, last: Timestamp) {
        let mut state = self.state();
        if let Some(in_use) = state.in_use.take() {
            in_use.ended_at(last);
        } else if let Some(ids) = state.ended.take() {
            // Released in the registry already (the keeper's last step),
            // given back then: the last tick is recorded by a short-lived
            // entry of its own, unless a live generator has the space now.
            drop(state);
            if let Ok((in_use, _)) = enter(ids, String::new()) {
                in_use.ended_at(last);
            }
        }
    }

    /// Enters `claim` in the table (its stored mark raised to the last ID
    /// of a generator that had the worker ID in this process), or releases
    /// it and refuses it.
    async fn admit(&self, mut claim: Claim, node: &NodeIdentity) -> Result<Claim, RegistryError> {
        let value = match self.datacenter {
            Some(dc) => (u64::from(dc) << self.layout.worker_bits()) | u64::from(claim.worker),
            None => u64::from(claim.worker),
        };
        let ids = IdSpace::new(&self.layout, value, self.rollback_moves);
        let holder = format!(
            "the generator leased from the {} registry with worker ID {} of layout {}",
            self.inner.kind(),
            claim.worker,
            layout_name(&self.layout)
        );
        let refused = {
            let mut state = self.state();
            // The claim before this one is lost (its generator stopped)
            // or was never made.
            state.in_use = None;
            match enter(ids, holder) {
                Ok((in_use, start_after)) => {
                    state.in_use = Some(in_use);
                    state.ended = None;
                    state.refused = None;
                    if let Some(after) = start_after {
                        claim.stored_mark = Some(claim.stored_mark.map_or(after, |m| m.max(after)));
                    }
                    return Ok(claim);
                }
                Err(conflict) => {
                    state.refused = Some(conflict.clone());
                    conflict
                }
            }
        };
        let _ = self.inner.release(&claim).await;
        Err(RegistryError::WorkerTaken {
            registry: self.inner.kind(),
            worker: claim.worker,
            node: node.to_string(),
            holder: refused.holder,
            origin: Some("in this process".to_owned()),
        })
    }
}

#[async_trait]
impl WorkerRegistry for CheckedRegistry {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn reassigns_workers(&self) -> bool {
        self.inner.reassigns_workers()
    }

    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<(), RegistryError> {
        self.inner.persist_local(claim, mark).await
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim, RegistryError> {
        let claim = self.inner.claim(node, range).await?;
        self.admit(claim, node).await
    }

    async fn claim_worker(
        &self,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
    ) -> Result<Claim, RegistryError> {
        let claim = self.inner.claim_worker(node, worker, range).await?;
        self.admit(claim, node).await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>, RegistryError> {
        self.inner.renew(claim).await
    }

    /// Forwarded: the same worker, already admitted, kept in a new epoch.
    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim, RegistryError> {
        self.inner.register_again(node, claim, mark).await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.inner.persist_mark(claim, mark, reported).await
    }

    /// Forwarded: the trait's default persists the tick as a mark, which
    /// never lowers the window-ahead one, so close() would cost the next
    /// open the window again.
    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.inner.record_clean_stop(claim, high, reported).await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>, RegistryError> {
        self.inner.peers(claim).await
    }

    async fn release(&self, claim: &Claim) -> Result<(), RegistryError> {
        let released = self.inner.release(claim).await;
        // Released by the keeper: stopped (close), or a claim it gave up
        // before issuing from it. Given back now (`InUse`'s drop records
        // the time); close adds the generator's last tick (`forget`).
        let mut state = self.state();
        if let Some(in_use) = state.in_use.take() {
            state.ended = Some(in_use.ids);
        }
        released
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>, RegistryError> {
        self.inner.fleet().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(layout: &str, node: u64) -> IdSpace {
        IdSpace::new(&layout.parse().unwrap(), node, false)
    }

    #[test]
    fn overlap_is_decided_by_the_bits_not_the_name() {
        let twitter = ids("twitter", 1);
        assert!(twitter.overlaps(&ids("twitter", 1)));
        assert!(!twitter.overlaps(&ids("twitter", 2)));
        // leaf is twitter's epoch with one 10-bit node field: datacenter 1,
        // worker 2 of twitter is leaf's worker 34.
        assert!(ids("twitter", 34).overlaps(&ids("leaf", 34)));
        assert!(!ids("twitter", 34).overlaps(&ids("leaf", 2)));
        // The same fields spelled out, and a narrower time field or ID cap,
        // move no bit.
        let spelled = "time=41,unit=1ms,epoch=2010-11-04T01:42:54.657Z,worker=10,sequence=12";
        assert!(ids(spelled, 34).overlaps(&ids("twitter", 34)));
        assert!(
            ids(
                "time=40,unit=1ms,epoch=2010-11-04T01:42:54.657Z,worker=10,sequence=12",
                1
            )
            .overlaps(&ids("twitter", 1))
        );
        // Another epoch, another unit: the ticks differ at every instant.
        assert!(!ids("twitter,epoch=2024-01-01", 1).overlaps(&ids("twitter", 1)));
        assert!(!ids("twitter", 1).overlaps(&ids("sonyflake", 1)));
        // Another split of the same low bits: twitter's worker 1 fixes bits
        // 12..22 to 1; a node field of 11 bits over an 11-bit sequence with
        // value 2 or 3 fixes bits 11..22 to 2 or 3, whose bits 12..22 are 1.
        let other_split = |n| {
            ids(
                "time=41,unit=1ms,epoch=2010-11-04T01:42:54.657Z,worker=11,sequence=11",
                n,
            )
        };
        assert!(ids("twitter", 1).overlaps(&other_split(2)));
        assert!(ids("twitter", 1).overlaps(&other_split(3)));
        assert!(!ids("twitter", 1).overlaps(&other_split(4)));
        // sequence · node (sonyflake's order) against node · sequence: the
        // node of one lands in the other's sequence.
        let tsn = "time=41,unit=1ms,epoch=2010-11-04T01:42:54.657Z,worker=10,sequence=12,\
                   order=time-sequence-node";
        assert!(ids(tsn, 5).overlaps(&ids("twitter", 7)));
        // A layout with no node field: every generator of it meets every
        // other.
        assert!(ids("tso", 0).overlaps(&ids("tso", 0)));
    }

    #[test]
    fn a_moving_rollback_counter_covers_every_value_above_the_node() {
        let layout: idmint_core::Layout = "leaf,rollback=2".parse().unwrap();
        // leaf with 2 rollback bits: 8 worker bits; worker 3 with the
        // counter at 1 is node field 3 + 256, which leaf's worker 259 is.
        let moving = IdSpace::new(&layout, 3, true);
        let still = IdSpace::new(&layout, 3, false);
        assert!(moving.overlaps(&ids("leaf", 259)));
        assert!(!still.overlaps(&ids("leaf", 259)));
        assert!(still.overlaps(&ids("leaf", 3)));
    }

    #[test]
    fn entries_are_given_back_on_drop() {
        let space = IdSpace::new(&"discord,epoch=2031-03-04".parse().unwrap(), 9, false);
        let (first, after) = enter(space, "first".to_owned()).unwrap();
        assert_eq!(after, None);
        let refused = enter(space, "second".to_owned()).unwrap_err();
        assert_eq!(refused.holder, "first");
        assert!(refused.to_string().contains("second would repeat"));
        // Its last ID ahead of the clock (a borrowing policy): the next one
        // starts after it.
        let ahead = Timestamp::now() + jiff::SignedDuration::from_secs(2);
        first.ended_at(ahead);
        drop(first);
        let (again, after) = enter(space, "third".to_owned()).unwrap();
        assert_eq!(after, Some(ahead));
        drop(again);
        let (_, after) = enter(space, "fourth".to_owned()).unwrap();
        assert!(after.unwrap() >= ahead);
    }
}
