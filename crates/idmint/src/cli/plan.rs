//! Worker-space planning: how many nodes a layout's worker IDs hold under a
//! registry's lease TTL, and when a fleet's restarts can use them up.
//! `idmint layout --lease-ttl` and `idmint config check --fleet` print it;
//! docs/design.md ("Sizing the worker space") gives the reasoning.
//!
//! The model, per kind of registry:
//! - **Leased, reused** (etcd, Redis, ZooKeeper, SQL `lease`): a node that
//!   dies without releasing keeps its worker ID until its lease expires, up
//!   to one TTL. At `r` restarts an hour, `r · TTL / 3600` workers are held
//!   by dead nodes on average, so a fleet of `n` needs `n + r · TTL / 3600`.
//!   A burst (a rolling restart, a mass kill) needs room for every node that
//!   is replaced within one TTL: a start that finds none free waits for a
//!   lease to expire (`snowflake.claim_wait`), it doesn't fail.
//! - **Never reused** (SQL `disposable`, `uid-generator`): every start takes
//!   a new worker ID for good, so the space lasts `(workers − used) / r` hours
//!   and then every start fails.
//! - **Fixed** (`file`, `static`, `host`, `k8s`): one ID per node, chosen by
//!   config or the host; the fleet must fit, churn uses nothing.

use std::time::Duration;

use serde::Serialize;

/// How a registry hands worker IDs out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reuse {
    /// Free again once a dead holder's lease expires.
    Leased,
    /// A new ID on every start, never handed out again.
    Never,
    /// Chosen per node, not claimed.
    Fixed,
}

/// What the planner is told.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput {
    /// Worker IDs the registry hands out.
    pub workers: u64,
    pub reuse: Reuse,
    /// The lease TTL (`Leased` only).
    pub lease_ttl: Option<Duration>,
    /// Nodes running at once.
    pub fleet: Option<u64>,
    /// Node starts per hour (restarts, rollouts, autoscaling).
    pub restarts_per_hour: Option<f64>,
}

/// What the planner says.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub workers: u64,
    pub reuse: Reuse,
    pub lease_ttl_seconds: Option<f64>,
    /// Workers held by dead nodes on average at the given churn.
    pub held_by_dead: Option<f64>,
    /// The largest fleet that fits at the given churn.
    pub max_fleet: u64,
    /// Hours until a never-reusing registry runs out at the given churn.
    pub hours_left: Option<f64>,
    pub fleet: Option<u64>,
    pub restarts_per_hour: Option<f64>,
    /// One line each; empty when the fleet fits with room.
    pub warnings: Vec<String>,
}

/// Below this share of free workers, a mass restart waits for leases.
const HEADROOM: f64 = 0.2;

impl Plan {
    pub fn new(input: PlanInput) -> Plan {
        let churn = input.restarts_per_hour.unwrap_or(0.0);
        let ttl = input.lease_ttl.filter(|_| input.reuse == Reuse::Leased);
        let held_by_dead = ttl.map(|ttl| churn * ttl.as_secs_f64() / 3600.0);
        let w = input.workers;
        let max_fleet = match input.reuse {
            Reuse::Leased => (w as f64 - held_by_dead.unwrap_or(0.0)).floor().max(0.0) as u64,
            Reuse::Never | Reuse::Fixed => w,
        };
        let used = input.fleet.unwrap_or(0).min(w);
        let hours_left =
            (input.reuse == Reuse::Never && churn > 0.0).then(|| (w - used) as f64 / churn);
        let mut warnings = Vec::new();
        if let Some(n) = input.fleet {
            if n > w {
                warnings.push(format!(
                    "a fleet of {n} nodes is larger than the {w} worker IDs: {} nodes can never start; give the layout more worker bits",
                    n - w
                ));
            } else if input.reuse == Reuse::Leased && n > max_fleet {
                warnings.push(format!(
                    "{n} nodes plus the {:.1} workers that dead nodes hold at {churn} restarts an hour \
                     (each for up to one lease TTL) exceed the {w} worker IDs: starts will wait; \
                     shorten the lease TTL or add worker bits",
                    held_by_dead.unwrap_or(0.0)
                ));
            } else if input.reuse == Reuse::Leased && ((w - n) as f64) < HEADROOM * n as f64 {
                warnings.push(format!(
                    "only {} of {w} worker IDs are free for {n} nodes (under {}%): after a mass restart \
                     or a fast rollout, replacements wait up to one lease TTL for a dead node's worker",
                    w - n,
                    (HEADROOM * 100.0) as u32
                ));
            }
        }
        if let Some(hours) = hours_left
            && hours < 24.0 * 365.0
        {
            warnings.push(format!(
                "this registry never reuses a worker ID: at {churn} starts an hour the {} free IDs last {}, \
                 then every start fails; use a leased registry (sql mode \"lease\", etcd, Redis, ZooKeeper ephemeral)",
                w - used,
                span_text(hours)
            ));
        }
        Plan {
            workers: w,
            reuse: input.reuse,
            lease_ttl_seconds: ttl.map(|t| t.as_secs_f64()),
            held_by_dead,
            max_fleet,
            hours_left,
            fleet: input.fleet,
            restarts_per_hour: input.restarts_per_hour,
            warnings,
        }
    }

    /// The human lines (label, value).
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        let mut lines = Vec::new();
        match self.reuse {
            Reuse::Leased => {
                let ttl = self.lease_ttl_seconds.unwrap_or(0.0);
                lines.push((
                    "worker reuse",
                    format!("after a dead node's lease expires (up to {ttl}s)"),
                ));
                let churn = self.restarts_per_hour.unwrap_or(0.0);
                lines.push((
                    "fleet that fits",
                    format!(
                        "{} nodes at {churn} restarts an hour ({:.1} workers held by dead nodes on average)",
                        self.max_fleet,
                        self.held_by_dead.unwrap_or(0.0)
                    ),
                ));
            }
            Reuse::Never => {
                lines.push((
                    "worker reuse",
                    "never: every start takes a new ID".to_owned(),
                ));
                if let Some(hours) = self.hours_left {
                    lines.push((
                        "IDs last",
                        format!(
                            "{} at {} starts an hour",
                            span_text(hours),
                            self.restarts_per_hour.unwrap_or(0.0)
                        ),
                    ));
                }
            }
            Reuse::Fixed => {
                lines.push((
                    "worker reuse",
                    "fixed per node (config or host): up to one node per worker ID".to_owned(),
                ));
            }
        }
        lines
    }
}

/// A `--restarts-per-hour` value: a finite number, 0 or more.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate >= 0.0 => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a number of starts an hour (0 or more)"
        )),
    }
}

fn span_text(hours: f64) -> String {
    if hours < 48.0 {
        format!("{hours:.1} hours")
    } else if hours < 24.0 * 730.0 {
        format!("{:.0} days", hours / 24.0)
    } else {
        format!("{:.1} years", hours / 24.0 / 365.2425)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(workers: u64, ttl_s: u64, fleet: u64, churn: f64) -> Plan {
        Plan::new(PlanInput {
            workers,
            reuse: Reuse::Leased,
            lease_ttl: Some(Duration::from_secs(ttl_s)),
            fleet: Some(fleet),
            restarts_per_hour: Some(churn),
        })
    }

    #[test]
    fn leased_space_counts_what_dead_nodes_hold_for_a_ttl() {
        // 3,600 restarts an hour with a 10 s TTL: 10 workers held by the dead.
        let plan = leased(1024, 10, 800, 3600.0);
        assert_eq!(plan.held_by_dead, Some(10.0));
        assert_eq!(plan.max_fleet, 1014);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
        let tight = leased(1024, 10, 1020, 3600.0);
        assert!(
            tight.warnings[0].contains("starts will wait"),
            "{:?}",
            tight.warnings
        );
        let full = leased(1024, 10, 1000, 0.0);
        assert!(
            full.warnings[0].contains("under 20%"),
            "{:?}",
            full.warnings
        );
        let over = leased(256, 5, 300, 0.0);
        assert!(
            over.warnings[0].contains("44 nodes can never start"),
            "{:?}",
            over.warnings
        );
    }

    #[test]
    fn never_reused_space_runs_out_in_hours_of_churn() {
        let plan = Plan::new(PlanInput {
            workers: 1024,
            reuse: Reuse::Never,
            lease_ttl: None,
            fleet: Some(24),
            restarts_per_hour: Some(10.0),
        });
        assert_eq!(plan.hours_left, Some(100.0));
        assert!(
            plan.warnings[0].contains("1000 free IDs last 4 days"),
            "{:?}",
            plan.warnings
        );
    }
}
