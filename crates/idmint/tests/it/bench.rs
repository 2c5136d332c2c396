//! `idmint bench`: against a real `idmint serve` (HTTP, with and without
//! prefetch, and RESP) and in process; the figures are printed, every ID is
//! checked, and the exit code says so.

use crate::serve::Served;
use crate::{expect_failure, ok};

const KEYS: &str = "[server]\nundeclared_keys = \"segment\"\n\n[keys.sf]\nstrategy = \"snowflake\"\n\n[segment.keys.order]\nstep = 1000\n";

/// Asserts a report block has the figures and found no duplicate; returns
/// the number of IDs it counted.
#[track_caller]
pub(crate) fn check_report(out: &str) -> u64 {
    for label in [
        "target ",
        "concurrency ",
        "duration ",
        "calls ",
        "throughput ",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(label)),
            "no {label:?}: {out}"
        );
    }
    let latency = out.lines().find(|l| l.starts_with("latency ")).unwrap();
    for p in ["p50 ", "p99 ", "p99.9 ", "max "] {
        assert!(latency.contains(p), "{latency}");
    }
    assert!(
        out.lines().any(|l| l.starts_with("duplicates    0 (all ")),
        "{out}"
    );
    assert!(out.contains(" (0 failed)"), "{out}");
    let ids: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("ids "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(ids > 0, "{out}");
    ids
}

#[test]
fn bench_against_http_prints_figures_and_no_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(KEYS), &[]);
    let target = server.url("");
    for (key, extra) in [
        ("sf", &[][..]),
        ("order", &["--batch", "50"][..]),
        ("sf", &["--prefetch", "1000"][..]),
    ] {
        let mut args = vec![
            "bench",
            "--target",
            &target,
            "--key",
            key,
            "--concurrency",
            "4",
            "--duration",
            "700ms",
        ];
        args.extend(extra);
        let out = ok(&args);
        check_report(&out);
        assert!(out.contains(&format!("key {key}")), "{out}");
    }
}

#[test]
fn bench_against_resp_prints_figures_and_no_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some(KEYS),
        &[],
        &["--resp-addr", "127.0.0.1:0"],
    );
    let target = format!("resp://{}", server.resp_addr.as_deref().unwrap());
    for batch in ["1", "100"] {
        let out = ok(&[
            "bench",
            "--target",
            &target,
            "--key",
            "order",
            "--batch",
            batch,
            "--concurrency",
            "3",
            "--duration",
            "500ms",
        ]);
        check_report(&out);
    }
}

#[test]
fn bench_in_process_runs_snowflake_and_segment() {
    let out = ok(&[
        "bench",
        "--in-process",
        "--concurrency",
        "2",
        "--duration",
        "300ms",
    ]);
    let blocks: Vec<&str> = out.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{out}");
    assert!(blocks[0].contains("in-process snowflake"), "{out}");
    assert!(blocks[1].contains("in-process segment"), "{out}");
    for block in blocks {
        check_report(block);
    }
    let out = ok(&[
        "bench",
        "--in-process",
        "--strategy",
        "segment",
        "--batch",
        "1000",
        "--duration",
        "200ms",
    ]);
    assert_eq!(check_report(&out) % 1000, 0, "{out}");
}

/// A run shows a live line (time, IDs so far, rate) on a terminal only: run
/// under a pseudo-terminal (`script` from util-linux) it draws it; piped, the
/// output is the report alone and stderr stays empty.
#[test]
fn bench_shows_live_progress_on_a_terminal_only() {
    let bin = env!("CARGO_BIN_EXE_idmint");
    let run = "bench --in-process --strategy snowflake --concurrency 1 --duration 1500ms";
    let tty = std::process::Command::new("script")
        .args(["-qec", &format!("{bin} {run}"), "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs a command under a pseudo-terminal");
    let seen = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{seen}");
    assert!(
        seen.contains("IDs so far"),
        "no live line on a terminal: {seen}"
    );
    assert!(seen.contains("in-process snowflake"), "{seen}");

    let piped = std::process::Command::new(bin)
        .args(run.split(' '))
        .output()
        .unwrap();
    assert!(piped.status.success());
    assert!(
        piped.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert!(!String::from_utf8_lossy(&piped.stdout).contains("IDs so far"));
}

#[test]
fn bench_failures_exit_non_zero() {
    // A key the server doesn't know: every call fails, and the run fails.
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(KEYS), &[]);
    let target = server.url("");
    let args = [
        "bench",
        "--target",
        &target,
        "--key",
        "nope",
        "--duration",
        "200ms",
    ];
    let out = crate::idmint(&args);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("first error"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("key_not_found"), "{stderr}");

    // Bad targets and flags are bad input (exit 2).
    for args in [
        &["bench", "--target", "grpc://127.0.0.1:1", "--prefetch", "5"][..],
        &["bench", "--target", "127.0.0.1:1"][..],
        &["bench", "--target", "resp://127.0.0.1:1", "--prefetch", "5"][..],
    ] {
        let (code, line) = expect_failure(args, crate::idmint(args));
        assert_eq!(code, 2, "{args:?}: {line}");
    }
    // clap's usage errors exit 2 too.
    for args in [
        &["bench"][..],
        &["bench", "--in-process", "--target", "http://h:1"][..],
        &["bench", "--in-process", "--duration", "0s"][..],
    ] {
        assert_eq!(crate::idmint(args).status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn bench_check_order_passes_on_a_monotonic_key_and_catches_disorder() {
    // One node on the file registry is its own oracle: every connection's
    // IDs, single and in batches, come in real-time order.
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(
        &dir.path().join("mono"),
        Some("[keys.seq]\nstrategy = \"monotonic\"\n"),
        &[],
    );
    let target = server.url("");
    for batch in ["1", "100"] {
        let out = ok(&[
            "bench",
            "--target",
            &target,
            "--key",
            "seq",
            "--check-order",
            "--batch",
            batch,
            "--concurrency",
            "4",
            "--duration",
            "600ms",
        ]);
        check_report(&out);
        assert!(
            out.lines()
                .any(|l| l.starts_with("order         0 violations")),
            "{out}"
        );
    }

    // Two nodes sharing one segment store, one connection each: each node
    // hands out its own segment, so a call to the node on the lower segment
    // that begins after a call to the other ended gets a lower ID. Unique
    // IDs, but not in real-time order.
    let store = dir.path().join("shared-segments.db");
    let config = format!(
        "[segment]\nurl = \"sqlite://{}\"\n[segment.keys.order]\nstep = 1000\n[keys.order]\nstrategy = \"segment\"\n",
        store.display()
    );
    let nodes: Vec<Served> = ["a", "b"]
        .iter()
        .map(|name| Served::start(&dir.path().join(name), Some(&config), &[]))
        .collect();
    let targets = format!("{},{}", nodes[0].url(""), nodes[1].url(""));
    let args = [
        "bench",
        "--target",
        &targets,
        "--key",
        "order",
        "--check-order",
        "--concurrency",
        "2",
        "--duration",
        "700ms",
    ];
    let out = crate::idmint(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("connections spread over 2 targets"),
        "{stdout}"
    );
    assert!(stdout.contains("duplicates    0 (all "), "{stdout}");
    assert!(
        stdout.contains("violations !!! IDS OUT OF REAL-TIME ORDER"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("out of real-time order"), "{stderr}");

    // Order can't be checked on prefetched IDs.
    let args = [
        "bench",
        "--target",
        &target,
        "--check-order",
        "--prefetch",
        "10",
    ];
    assert_eq!(crate::idmint(&args).status.code(), Some(2));
}
