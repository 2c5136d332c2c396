//! The checks run on every ID the simulated fleet issues.
//!
//! **No ID issued twice.** A snowflake ID carries its worker, so two IDs can
//! only be equal if one worker made both. Per worker, the checker keeps one
//! range `[lo, hi]` per *holding* (a node process's generator between two
//! claims: node, incarnation, keeper generation) and no list of IDs:
//! - within a holding, IDs must strictly increase (each generator promises
//!   it, and the keeper promises it across re-claims for the whole process);
//! - the ranges of one worker's holdings must be disjoint.
//!
//! Together these say no ID was issued twice: equal IDs in one holding would
//! break the first, in two holdings the second. The second is stronger than
//! uniqueness, and the keeper promises it too: a new holder starts above
//! every mark an earlier holder persisted, and no holder issues past a mark
//! it persisted, so one worker's holdings follow each other in ID order. It
//! costs a `BTreeMap` lookup per ID and memory per holding, not per ID, so
//! 1,000 nodes can run for a simulated day.
//!
//! **Monotonic keys never go back.** Oracle reservations are synchronous
//! calls made one after another, so "above every one completed before it
//! began" is "above every ID reserved so far".

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use idmint_core::{IdBatch, Layout};

/// A run of one generator: the IDs of a node process between two claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub node: usize,
    pub incarnation: u32,
    pub generation: u64,
}

impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} (incarnation {}, generation {})",
            self.node, self.incarnation, self.generation
        )
    }
}

/// A broken promise.
#[derive(Debug, Clone)]
pub struct Violation {
    pub message: String,
    /// The nodes involved, for the trace.
    pub nodes: Vec<usize>,
    pub worker: Option<u32>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The last IDs a range took, to name an exact duplicate.
const RECENT: usize = 16;

#[derive(Debug)]
struct Range {
    holding: Holding,
    hi: u64,
    recent: [u64; RECENT],
    n: usize,
}

impl Range {
    fn has(&self, lo: u64, id: u64) -> bool {
        id == lo || id == self.hi || self.recent[..self.n.min(RECENT)].contains(&id)
    }
}

#[derive(Debug, Default)]
struct Owner {
    last: Option<u64>,
    /// (worker, generation, lo) of the range the process issues into.
    current: Option<(u32, u64, u64)>,
}

#[derive(Debug)]
pub struct Checker {
    layout: Layout,
    /// Per worker, its holdings' ranges by their lowest ID.
    books: HashMap<u32, BTreeMap<u64, Range>>,
    owners: HashMap<(usize, u32), Owner>,
    oracle_last: Option<(u64, usize)>,
    pub ids: u64,
    pub holdings: u64,
    /// New holdings of a worker another node held before.
    pub takeovers: u64,
    pub reserved: u64,
}

impl Checker {
    pub fn new(layout: Layout) -> Checker {
        Checker {
            layout,
            books: HashMap::new(),
            owners: HashMap::new(),
            oracle_last: None,
            ids: 0,
            holdings: 0,
            takeovers: 0,
            reserved: 0,
        }
    }

    /// The worker an ID of the fleet's layout was made by.
    pub fn worker_of(&self, id: u64) -> u32 {
        self.layout
            .decode(id)
            .expect("an ID of the fleet's layout")
            .worker
    }

    /// Checks and records one snowflake ID issued by `h`.
    pub fn snowflake(&mut self, h: Holding, id: u64) -> Result<(), Violation> {
        let worker = self.worker_of(id);
        self.ids += 1;
        let owner = self.owners.entry((h.node, h.incarnation)).or_default();
        if let Some(last) = owner.last.filter(|&last| id <= last) {
            return Err(Violation {
                message: format!(
                    "{h} issued {id} (worker {worker}) after {last}: one process's IDs went back"
                ),
                nodes: vec![h.node],
                worker: Some(worker),
            });
        }
        owner.last = Some(id);
        let book = self.books.entry(worker).or_default();
        let lo = match owner.current {
            Some((w, g, lo)) if w == worker && g == h.generation => lo,
            _ => {
                if let Some((&plo, p)) = book.range(..=id).next_back()
                    && p.hi >= id
                {
                    return Err(clash(worker, h, id, id, plo, p));
                }
                if book.values().any(|r| r.holding.node != h.node) {
                    self.takeovers += 1;
                }
                book.insert(
                    id,
                    Range {
                        holding: h,
                        hi: id,
                        recent: [id; RECENT],
                        n: 1,
                    },
                );
                owner.current = Some((worker, h.generation, id));
                self.holdings += 1;
                return Ok(());
            }
        };
        if let Some((&slo, s)) = book.range(lo + 1..).next()
            && slo <= id
        {
            return Err(clash(worker, h, lo, id, slo, s));
        }
        let r = book.get_mut(&lo).expect("the owner's range");
        r.hi = id;
        r.recent[r.n % RECENT] = id;
        r.n += 1;
        Ok(())
    }

    /// Checks and records one oracle reservation by `node`.
    pub fn oracle(&mut self, node: usize, batch: &IdBatch) -> Result<(), Violation> {
        for id in batch.iter() {
            let id = id.get();
            if let Some((last, by)) = self.oracle_last.filter(|&(last, _)| id <= last) {
                return Err(Violation {
                    message: format!(
                        "the oracle went back: node {node} reserved {id}, but node {by} had \
                         already reserved {last} before this call began"
                    ),
                    nodes: vec![node, by],
                    worker: None,
                });
            }
            self.oracle_last = Some((id, node));
            self.reserved += 1;
        }
        Ok(())
    }
}

/// `h`'s ID `id` (its range starting at `own_lo`) meets `other`'s range.
fn clash(worker: u32, h: Holding, own_lo: u64, id: u64, lo: u64, other: &Range) -> Violation {
    let what = if other.has(lo, id) {
        format!(
            "ID {id} issued twice: by {h} and earlier by {}",
            other.holding
        )
    } else if (lo..=other.hi).contains(&id) {
        format!(
            "{h} issued {id}, inside {}'s range {lo}..={}: two holdings of worker {worker} \
             interleave (a duplicate, or one about to happen)",
            other.holding, other.hi
        )
    } else {
        format!(
            "{h} issued {id}: its range {own_lo}..={id} spans {}'s range {lo}..={}: two \
             holdings of worker {worker} interleave (a duplicate, or one about to happen)",
            other.holding, other.hi
        )
    };
    Violation {
        message: format!("worker {worker}: {what}"),
        nodes: vec![h.node, other.holding.node],
        worker: Some(worker),
    }
}
