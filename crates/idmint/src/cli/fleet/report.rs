//! One fleet size's figures ([`Report`]): what each phase measured, the
//! checks after each, the failures, and the text for people (the JSON is
//! the struct's).

use std::time::Duration;

use anyhow::Result;
use idmint_node::Config;
use idmint_node::config::RegistryKind;
use serde::Serialize;

use super::coordinator::Usage;
use super::inproc;
use super::starts::{StartFigures, ms};

#[derive(Debug, Serialize)]
pub(super) struct Steady {
    pub(super) seconds: f64,
    pub(super) writes_per_node_s: Option<f64>,
    pub(super) reads_per_node_s: Option<f64>,
    pub(super) failed_calls: Option<u64>,
    /// The coordinator's own counters, per node and second.
    pub(super) coordinator: Usage,
    pub(super) nodes_memory_mib: Option<f64>,
}

/// What a fault in the steady state cost (`--steady-fault`).
#[derive(Debug, Serialize)]
pub(super) struct Fault {
    pub(super) command: String,
    pub(super) command_ok: bool,
    pub(super) command_output: String,
    /// How long the command ran.
    pub(super) command_ms: f64,
    /// How long the nodes were probed after it began.
    pub(super) watched_s: f64,
    /// The longest time a node went without issuing (probed every 100 ms),
    /// the longest over nodes and its 99th percentile.
    pub(super) longest_gap_ms: f64,
    pub(super) longest_gap_p99_ms: f64,
    /// Nodes that refused at least one probe.
    pub(super) nodes_refused: usize,
    /// Nodes holding another worker ID than before the fault.
    pub(super) workers_changed: usize,
    /// Registry calls that failed or timed out from the fault to the end.
    pub(super) failed_calls: u64,
    /// What broke a promise (a repeated ID).
    pub(super) error: Option<String>,
}

#[derive(Debug, Serialize)]
pub(super) struct Kill {
    pub(super) killed: usize,
    pub(super) bound_ms: f64,
    pub(super) replacements: StartFigures,
}

#[derive(Debug, Serialize)]
pub(super) struct Oracle {
    pub(super) key: String,
    pub(super) followers: usize,
    pub(super) leader_lease_ttl_ms: f64,
    /// From the leader's kill to each follower's first ID.
    pub(super) first_ids: StartFigures,
}

#[derive(Debug, Serialize)]
pub(super) struct Roll {
    pub(super) workers: u32,
    pub(super) batch: usize,
    pub(super) took_s: f64,
    pub(super) replacements: StartFigures,
}

/// One fleet size's figures.
#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub(super) registry: String,
    pub(super) mode: &'static str,
    pub(super) nodes: usize,
    pub(super) lease_ttl_ms: f64,
    pub(super) delay_ms: Option<f64>,
    pub(super) connections: Option<usize>,
    pub(super) start: Option<StartFigures>,
    pub(super) steady: Option<Steady>,
    pub(super) fault: Option<Fault>,
    /// Nodes joining the running fleet one at a time.
    pub(super) join: Option<StartFigures>,
    pub(super) kill: Option<Kill>,
    pub(super) roll: Option<Roll>,
    pub(super) oracle: Option<Oracle>,
    /// Nodes that refused to issue when checked (their keeper waiting on
    /// the coordinator), by phase.
    pub(super) paused: Vec<String>,
    /// Nodes that issued with a worker ID another node was still issuing
    /// with (a takeover; the IDs differ, by the marks), by phase.
    pub(super) takeovers: Vec<String>,
    pub(super) failures: Vec<String>,
}

/// A coordinator's rates divided among `nodes`.
pub(super) fn per_node(mut usage: Usage, nodes: usize) -> Usage {
    for rate in usage.rates.values_mut() {
        *rate /= nodes.max(1) as f64;
    }
    usage
}

impl Report {
    pub(super) fn new(
        config: &Config,
        mode: &'static str,
        nodes: usize,
        ttl: Duration,
        delay: Option<Duration>,
    ) -> Report {
        let sf = &config.snowflake;
        let registry = match sf.registry {
            RegistryKind::Sql => {
                let url = sf
                    .sql
                    .url
                    .as_ref()
                    .map(|u| u.expose().to_owned())
                    .unwrap_or_default();
                let db = url.split(':').next().unwrap_or("sql");
                format!("sql ({db})")
            }
            kind => kind.name().to_owned(),
        };
        Report {
            registry,
            mode,
            nodes,
            lease_ttl_ms: ms(ttl),
            delay_ms: delay.map(ms),
            connections: None,
            start: None,
            steady: None,
            fault: None,
            join: None,
            kill: None,
            roll: None,
            oracle: None,
            paused: Vec::new(),
            takeovers: Vec::new(),
            failures: Vec::new(),
        }
    }

    pub(super) fn check(&mut self, phase: &str, result: Result<inproc::Check>) {
        match result {
            Ok(check) => {
                if check.paused > 0 {
                    self.paused
                        .push(format!("{} after the {phase}", check.paused));
                }
                if check.shared_workers > 0 {
                    self.takeovers
                        .push(format!("{} after the {phase}", check.shared_workers));
                }
            }
            Err(e) => self.failures.push(format!("after the {phase}: {e:#}")),
        }
    }

    pub(super) fn refusals(&self) -> Vec<String> {
        let phases = [
            ("start", self.start.as_ref()),
            ("join", self.join.as_ref()),
            ("replacement", self.kill.as_ref().map(|k| &k.replacements)),
            (
                "rolling restart",
                self.roll.as_ref().map(|r| &r.replacements),
            ),
            (
                "oracle follower",
                self.oracle.as_ref().map(|o| &o.first_ids),
            ),
        ];
        phases
            .into_iter()
            .filter_map(|(phase, f)| {
                let f = f?;
                (f.refused > 0).then(|| {
                    format!(
                        "{} {phase} start(s) refused, e.g. {}",
                        f.refused,
                        f.refusals.first().map(String::as_str).unwrap_or("?")
                    )
                })
            })
            .collect()
    }

    /// The report for people.
    pub(super) fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = write!(
            out,
            "fleet of {} {} nodes on {} (lease TTL {:.0?}",
            self.nodes,
            if self.mode == "processes" {
                "process"
            } else {
                self.mode
            },
            self.registry,
            Duration::from_secs_f64(self.lease_ttl_ms / 1000.0)
        );
        match self.connections {
            Some(c) => {
                let _ = write!(out, ", {c} registry clients");
            }
            None if self.mode == "in-process" => out.push_str(", a session per node"),
            None => {}
        }
        if let Some(d) = self.delay_ms {
            let _ = write!(out, ", coordinator delayed {d:.0} ms each way");
        }
        out.push_str(")\n");
        if let Some(s) = &self.start {
            let _ = writeln!(out, "  start         {}", s.text());
        }
        if let Some(s) = &self.steady {
            let _ = write!(out, "  steady {:>4.0} s", s.seconds);
            if let (Some(w), Some(r)) = (s.writes_per_node_s, s.reads_per_node_s) {
                let _ = write!(
                    out,
                    " registry calls per node: {w:.3} writes/s, {r:.3} reads/s, {} failed;",
                    s.failed_calls.unwrap_or(0)
                );
            }
            let _ = writeln!(out);
            let c = &s.coordinator;
            let _ = write!(out, "                coordinator:");
            match c.cpu_percent {
                Some(cpu) => {
                    let _ = write!(out, " CPU {cpu:.1} % of a core,");
                }
                None => out.push_str(" CPU unknown,"),
            }
            match c.memory_mib {
                Some(m) => {
                    let _ = write!(out, " {m:.1} MiB;");
                }
                None => out.push_str(" memory unknown;"),
            }
            for (name, rate) in &c.rates {
                let _ = write!(out, " {name} {rate:.3}/s,");
            }
            if c.rates.is_empty() {
                out.push_str(" no counters of its own");
            } else {
                out.pop();
                out.push_str(" per node");
            }
            out.push('\n');
            if let Some(m) = s.nodes_memory_mib {
                let _ = writeln!(
                    out,
                    "                nodes: {m:.0} MiB in all, {:.1} MiB each",
                    m / self.nodes as f64
                );
            }
        }
        if let Some(f) = &self.fault {
            let _ = writeln!(
                out,
                "  fault         `{}` ({}, {:.0} ms{}); over {:.1} s after it: longest gap {:.0} ms \
                 (p99 over nodes {:.0} ms), {} nodes refused once or more, {} hold another \
                 worker, {} failed registry calls",
                f.command,
                if f.command_ok { "ok" } else { "FAILED" },
                f.command_ms,
                if f.command_output.is_empty() {
                    String::new()
                } else {
                    format!(": {}", f.command_output)
                },
                f.watched_s,
                f.longest_gap_ms,
                f.longest_gap_p99_ms,
                f.nodes_refused,
                f.workers_changed,
                f.failed_calls
            );
        }
        if let Some(j) = &self.join {
            let _ = writeln!(out, "  join          one at a time: {}", j.text());
        }
        if let Some(o) = &self.oracle {
            let _ = writeln!(
                out,
                "  oracle        leader of {:?} killed (lease TTL {:.0} ms); {} followers' first IDs: {}",
                o.key,
                o.leader_lease_ttl_ms,
                o.followers,
                o.first_ids.text()
            );
        }
        if let Some(k) = &self.kill {
            let _ = writeln!(
                out,
                "  kill          {} killed at once; replacements {} (bound {:.0} ms: {})",
                k.killed,
                k.replacements.text(),
                k.bound_ms,
                match k.replacements.within_bound {
                    Some(true) => "met",
                    _ => "MISSED",
                }
            );
        }
        if let Some(r) = &self.roll {
            let _ = writeln!(
                out,
                "  roll          {} workers, batches of {}: {} in {:.1} s",
                r.workers,
                r.batch,
                r.replacements.text(),
                r.took_s
            );
        }
        if !self.paused.is_empty() {
            let _ = writeln!(
                out,
                "  paused        nodes refusing to issue when checked: {}",
                self.paused.join(", ")
            );
        }
        if !self.takeovers.is_empty() {
            let _ = writeln!(
                out,
                "  takeovers     nodes issuing on a worker ID another node still issued on: {}",
                self.takeovers.join(", ")
            );
        }
        for f in &self.failures {
            let _ = writeln!(out, "  FAILED        {f}");
        }
        out
    }
}
