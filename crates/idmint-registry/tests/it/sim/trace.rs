//! What happened, for a failing seed's report: a ring of the last events
//! (compact values, formatted only when printed) and a digest of every event
//! of the run, which two runs of one seed must agree on.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Mutex;

use super::rng::mix;

/// How many events the ring keeps.
const KEEP: usize = 200_000;

/// One event, at true time `at` (nanoseconds since the start).
#[derive(Debug, Clone)]
pub struct Event {
    pub at: u64,
    pub node: usize,
    pub what: What,
}

#[derive(Debug, Clone)]
pub enum What {
    /// A registry call as the registry saw it: `reg` is `workers` or
    /// `oracle`, `worker` the worker it concerned, `outcome` what it did.
    Call {
        reg: &'static str,
        op: &'static str,
        worker: Option<u32>,
        outcome: String,
    },
    Fault(String),
    Started {
        incarnation: u32,
        worker: u32,
    },
    StartFailed(String),
    Issued {
        worker: u32,
        generation: u64,
        id: u64,
    },
    Refused(&'static str),
    Reserved {
        first: u64,
        last: u64,
    },
}

impl What {
    fn digest(&self) -> u64 {
        match self {
            What::Call {
                reg,
                op,
                worker,
                outcome,
            } => mix(&[
                1,
                text(reg),
                text(op),
                worker.map_or(u64::MAX, u64::from),
                text(outcome),
            ]),
            What::Fault(s) => mix(&[2, text(s)]),
            What::Started {
                incarnation,
                worker,
            } => mix(&[3, u64::from(*incarnation), u64::from(*worker)]),
            What::StartFailed(e) => mix(&[4, text(e)]),
            What::Issued {
                worker,
                generation,
                id,
            } => mix(&[5, u64::from(*worker), *generation, *id]),
            What::Refused(code) => mix(&[6, text(code)]),
            What::Reserved { first, last } => mix(&[7, *first, *last]),
        }
    }

    /// The worker the event concerns, if one.
    pub fn worker(&self) -> Option<u32> {
        match self {
            What::Call {
                reg: "workers",
                worker,
                ..
            } => *worker,
            What::Started { worker, .. } | What::Issued { worker, .. } => Some(*worker),
            _ => None,
        }
    }
}

/// A stable hash of `s` (FNV-1a).
pub fn text(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} node {:>4}  ", clock_text(self.at), self.node)?;
        match &self.what {
            What::Call {
                reg,
                op,
                worker,
                outcome,
            } => {
                write!(f, "{reg} {op}")?;
                if let Some(w) = worker {
                    write!(f, " worker {w}")?;
                }
                write!(f, ": {outcome}")
            }
            What::Fault(s) => write!(f, "FAULT {s}"),
            What::Started {
                incarnation,
                worker,
            } => write!(f, "started (incarnation {incarnation}) as worker {worker}"),
            What::StartFailed(e) => write!(f, "start failed: {e}"),
            What::Issued {
                worker,
                generation,
                id,
            } => write!(f, "issued {id} (worker {worker}, generation {generation})"),
            What::Refused(code) => write!(f, "issue refused: {code}"),
            What::Reserved { first, last } => write!(f, "oracle reserved {first}..={last}"),
        }
    }
}

/// True time as `hh:mm:ss.mmm`.
pub fn clock_text(ns: u64) -> String {
    let ms = ns / 1_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

#[derive(Debug, Default)]
pub struct Trace(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    ring: VecDeque<Event>,
    digest: u64,
    count: u64,
    /// Each node's last event's hash, to leave repeats out of the digest.
    last: HashMap<usize, u64>,
}

impl Trace {
    /// Records an event. The digest leaves out an event identical to the
    /// node's event before it (same time, same call, same outcome): tokio's
    /// `select!` picks among ready branches with an RNG that can't be seeded
    /// (short of `--cfg tokio_unstable`), so a keeper task sometimes wakes
    /// once more at the same instant and repeats its last call. The repeat
    /// changes nothing (its fault is decided by the same coordinates, and
    /// the registry's answer is the same), so two runs of a seed agree on
    /// everything else.
    pub fn push(&self, at: u64, node: usize, what: What) {
        let mut t = self.0.lock().unwrap();
        let h = mix(&[at, what.digest()]);
        if t.last.insert(node, h) != Some(h) {
            t.digest = mix(&[t.digest, node as u64, h]);
            t.count += 1;
        }
        if t.ring.len() == KEEP {
            t.ring.pop_front();
        }
        t.ring.push_back(Event { at, node, what });
    }

    /// The digest of every event so far, and how many there were.
    pub fn digest(&self) -> (u64, u64) {
        let t = self.0.lock().unwrap();
        (t.digest, t.count)
    }

    /// The last `n` kept events that concern one of `nodes` or `worker`.
    pub fn about(&self, nodes: &[usize], worker: Option<u32>, n: usize) -> Vec<Event> {
        let t = self.0.lock().unwrap();
        let mut out: Vec<Event> = t
            .ring
            .iter()
            .rev()
            .filter(|e| nodes.contains(&e.node) || (worker.is_some() && e.what.worker() == worker))
            .take(n)
            .cloned()
            .collect();
        out.reverse();
        out
    }

    /// Writes every kept event to `path`, one a line.
    pub fn write_to(&self, path: &str) -> std::io::Result<()> {
        use std::io::Write;
        let t = self.0.lock().unwrap();
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for e in &t.ring {
            writeln!(out, "{e}")?;
        }
        out.flush()
    }
}
