//! `idmint layout`: a layout's bits and capacity, and when it runs out; with no
//! layout (or `--list`), a table of the presets.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use idmint_core::{FieldOrder, Layout};

use super::bad_input;
use super::plan::{Plan, PlanInput, Reuse};
use jiff::Timestamp;
use serde::Serialize;

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("plan").args(["lease_ttl", "never_reused"]).multiple(false))]
pub struct LayoutArgs {
    /// A preset (twitter, leaf, baidu, sonyflake, discord, instagram, js53, tso) or a
    /// spec such as `twitter,epoch=2024-01-01` or
    /// `time=40,unit=10ms,epoch=2024-01-01,worker=8,sequence=12`; omit to list the presets.
    #[arg(value_name = "NAME_OR_SPEC")]
    layout: Option<String>,

    /// List the presets.
    #[arg(long, conflicts_with = "layout")]
    list: bool,

    /// Print JSON (an object for one layout, an array for the list).
    #[arg(long)]
    json: bool,

    /// Plan the worker space for a leased registry (etcd, Redis, ZooKeeper,
    /// SQL `lease`) whose leases last this long (`10s`): how many nodes fit,
    /// and whether `--fleet` does at `--restarts-per-hour`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "never_reused")]
    lease_ttl: Option<Duration>,

    /// Plan for a registry that never hands a worker ID out again (SQL
    /// `disposable`, `uid-generator`): how long the IDs last.
    #[arg(long)]
    never_reused: bool,

    /// The number of nodes running at once, for the plan.
    #[arg(long, value_name = "NODES")]
    fleet: Option<u64>,

    /// Node starts an hour (restarts, rollouts, autoscaling), for the plan
    /// (default 0).
    #[arg(long, value_name = "N", value_parser = super::plan::parse_rate)]
    restarts_per_hour: Option<f64>,
}

/// Seconds in a mean Gregorian year.
const SECS_PER_YEAR: f64 = 365.2425 * 86_400.0;

/// Everything `layout` reports about one layout; also its JSON form.
#[derive(Debug, Serialize)]
struct LayoutReport {
    preset: Option<&'static str>,
    text: String,
    time_bits: u8,
    usable_time_bits: u8,
    datacenter_bits: u8,
    worker_bits: u8,
    rollback_bits: u8,
    sequence_bits: u8,
    order: &'static str,
    max_bits: u8,
    unit: String,
    unit_ms: u128,
    epoch: String,
    ids_per_second_per_worker: f64,
    ids_per_tick: u64,
    workers: u64,
    max_datacenter: u32,
    max_worker: u32,
    /// `None` when the layout runs past the year 9999.
    runs_out_at: Option<String>,
    ran_out: bool,
    /// Years from now to the run-out; negative once it has passed.
    years_left: Option<f64>,
    /// The worker-space plan, when asked for (`--lease-ttl`, `--never-reused`).
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<Plan>,
}

impl LayoutReport {
    fn new(layout: &Layout, now: Timestamp) -> LayoutReport {
        let end = layout.runs_out_at();
        let years_left = end.map(|end| {
            (end.as_millisecond() - now.as_millisecond()) as f64 / 1000.0 / SECS_PER_YEAR
        });
        LayoutReport {
            preset: layout.preset_name(),
            text: layout.to_string(),
            time_bits: layout.time_bits(),
            usable_time_bits: layout.usable_time_bits(),
            datacenter_bits: layout.datacenter_bits(),
            worker_bits: layout.worker_bits(),
            rollback_bits: layout.rollback_bits(),
            sequence_bits: layout.sequence_bits(),
            order: layout.order().as_str(),
            max_bits: layout.max_bits(),
            unit: unit_text(layout.unit()),
            unit_ms: layout.unit().as_millis(),
            epoch: layout.epoch().to_string(),
            ids_per_second_per_worker: layout.ids_per_second_per_worker(),
            ids_per_tick: layout.ids_per_tick(),
            workers: layout.workers(),
            max_datacenter: layout.max_datacenter(),
            max_worker: layout.max_worker(),
            runs_out_at: end.map(|t| t.to_string()),
            ran_out: end.is_some_and(|end| end <= now),
            years_left,
            plan: None,
        }
    }

    /// `2080-07-10T17:30:30.208Z (in 54.2 years)` or
    /// `ran out on 2024-11-20T13:24:16Z (1.5 years ago)`.
    fn run_out_text(&self, date_only: bool) -> String {
        let (Some(at), Some(years)) = (&self.runs_out_at, self.years_left) else {
            return "after the year 9999".to_owned();
        };
        let at = if date_only { &at[..10] } else { at };
        if self.ran_out {
            format!("ran out on {at} ({} ago)", years_text(-years))
        } else {
            format!("{at} (in {})", years_text(years))
        }
    }

    fn human(&self) -> String {
        let mut s = String::new();
        let mut line = |label: &str, value: &dyn std::fmt::Display| {
            let _ = writeln!(s, "{label:<18}{value}");
        };
        line("layout", &self.preset.unwrap_or("custom"));
        line("text", &self.text);
        if self.usable_time_bits < self.time_bits {
            line(
                "time bits",
                &format!(
                    "{} ({} usable: IDs stay below 2^{})",
                    self.time_bits, self.usable_time_bits, self.max_bits
                ),
            );
        } else {
            line("time bits", &self.time_bits);
        }
        line("datacenter bits", &self.datacenter_bits);
        line("worker bits", &self.worker_bits);
        line("rollback bits", &self.rollback_bits);
        line("sequence bits", &self.sequence_bits);
        line("order", &self.order);
        line(
            "max bits",
            &format!("{} (IDs below 2^{})", self.max_bits, self.max_bits),
        );
        line("time unit", &self.unit);
        line("epoch", &self.epoch);
        line(
            "IDs/s per worker",
            &rate_text(self.ids_per_second_per_worker),
        );
        line("IDs per tick", &grouped(self.ids_per_tick));
        line(
            "workers",
            &format!(
                "{} (datacenter 0..={}, worker 0..={})",
                grouped(self.workers),
                self.max_datacenter,
                self.max_worker
            ),
        );
        line("runs out", &self.run_out_text(false));
        if let Some(plan) = &self.plan {
            for (label, value) in plan.lines() {
                line(label, &value);
            }
            for warning in &plan.warnings {
                line("warning", warning);
            }
        }
        s
    }
}

pub fn run(args: LayoutArgs) -> Result<()> {
    let now = Timestamp::now();
    let text = match args.layout {
        Some(text) if !args.list => text,
        _ => return list(args.json, now),
    };
    let layout: Layout = text.parse()?;
    let mut report = LayoutReport::new(&layout, now);
    let reuse = match (args.lease_ttl, args.never_reused) {
        (Some(_), _) => Some(Reuse::Leased),
        (None, true) => Some(Reuse::Never),
        (None, false) if args.fleet.is_some() || args.restarts_per_hour.is_some() => {
            return Err(bad_input(
                "--fleet and --restarts-per-hour plan a registry: add --lease-ttl DURATION \
                 (a leased one) or --never-reused",
            ));
        }
        (None, false) => None,
    };
    report.plan = reuse.map(|reuse| {
        Plan::new(PlanInput {
            workers: layout.workers(),
            reuse,
            lease_ttl: args.lease_ttl,
            fleet: args.fleet,
            restarts_per_hour: args.restarts_per_hour,
        })
    });
    let mut out = io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).context("writing to stdout")?;
        writeln!(out).context("writing to stdout")?;
    } else {
        out.write_all(report.human().as_bytes())
            .context("writing to stdout")?;
    }
    out.flush().context("writing to stdout")
}

fn list(json: bool, now: Timestamp) -> Result<()> {
    let reports: Vec<LayoutReport> = Layout::PRESETS
        .iter()
        .map(|(_, layout)| LayoutReport::new(layout, now))
        .collect();
    let mut out = io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &reports).context("writing to stdout")?;
        writeln!(out).context("writing to stdout")?;
        return out.flush().context("writing to stdout");
    }
    let header = [
        "NAME",
        "TIME",
        "UNIT",
        "DC",
        "WORKER",
        "SEQ",
        "ORDER",
        "IDS/S/WORKER",
        "WORKERS",
        "EPOCH",
        "RUNS OUT",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    for (r, (_, layout)) in reports.iter().zip(Layout::PRESETS) {
        rows.push(vec![
            r.preset.unwrap_or("custom").to_owned(),
            r.usable_time_bits.to_string(),
            r.unit.clone(),
            r.datacenter_bits.to_string(),
            r.worker_bits.to_string(),
            r.sequence_bits.to_string(),
            match layout.order() {
                FieldOrder::TimeNodeSequence => "tns",
                FieldOrder::TimeSequenceNode => "tsn",
            }
            .to_owned(),
            rate_text(r.ids_per_second_per_worker),
            grouped(r.workers),
            r.epoch.clone(),
            r.run_out_text(true),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text.push_str(
        "\nTIME is the usable time bits; ORDER tns = time·node·sequence, tsn = time·sequence·node.\n\
         Override any field: idmint layout 'twitter,epoch=2024-01-01,datacenter=0'\n",
    );
    out.write_all(text.as_bytes())
        .context("writing to stdout")?;
    out.flush().context("writing to stdout")
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    idmint_core::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// `1ms`, `10ms`, `1s`: the text form's spelling.
fn unit_text(unit: Duration) -> String {
    let ms = unit.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `54.2 years`, `1 year`, `3 days`: one decimal above a year.
fn years_text(years: f64) -> String {
    if years >= 1.0 {
        format!("{years:.1} years")
    } else {
        let days = (years * 365.2425).floor() as u64;
        if days == 1 {
            "1 day".to_owned()
        } else {
            format!("{days} days")
        }
    }
}

/// An IDs-per-second figure: whole numbers grouped, fractions to one decimal.
fn rate_text(rate: f64) -> String {
    if rate.fract() == 0.0 && rate < u64::MAX as f64 {
        grouped(rate as u64)
    } else {
        format!("{rate:.1}")
    }
}

/// `4096000` as `4,096,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(4_096_000), "4,096,000");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(rate_text(25_600.0), "25,600");
        assert_eq!(rate_text(4096.0 / 7.0 * 1000.0), "585142.9");
        assert_eq!(unit_text(Duration::from_millis(10)), "10ms");
        assert_eq!(unit_text(Duration::from_secs(2)), "2s");
        assert_eq!(years_text(54.23), "54.2 years");
        assert_eq!(years_text(2.0 / 365.2425), "2 days");
    }

    #[test]
    fn run_out_reads_forward_or_back() {
        let now: Timestamp = "2026-05-20T00:00:00Z".parse().unwrap();
        let baidu = LayoutReport::new(&Layout::BAIDU, now);
        assert!(baidu.ran_out);
        assert_eq!(
            baidu.run_out_text(false),
            "ran out on 2024-11-20T13:24:16Z (1.5 years ago)"
        );
        let twitter = LayoutReport::new(&Layout::TWITTER, now);
        assert!(!twitter.ran_out);
        assert_eq!(twitter.run_out_text(true), "2080-07-10 (in 54.1 years)");
    }
}
