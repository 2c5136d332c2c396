//! End-to-end tests of the `idmint` binary: each test runs the built binary and
//! checks its stdout, stderr and exit code. Shared helpers live here; the tests
//! are grouped by subcommand.

mod api_doc;
mod bad_input;
mod bench;
mod bench_fleet;
mod client;
mod completions;
mod config;
mod decode;
mod generate;
mod guides;
mod layout;
mod obfuscate;
mod serve;
mod serve_claim_wait;
mod serve_cluster;
mod serve_fleet;
mod serve_grpc;
mod serve_grpc_python;
mod serve_ha;
mod serve_hostile;
mod serve_keys;
mod serve_logs;
mod serve_metrics;
mod serve_monotonic;
mod serve_openapi;
mod serve_outage;
mod serve_policies;
mod serve_resp;
mod serve_resp_clients;
mod serve_restart;
mod serve_segment_reset;
mod serve_status_page;
mod serve_tinyid;
mod serve_tls;
mod serve_uid_generator;

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `idmint` with `args` and no stdin.
pub fn idmint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idmint"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the idmint binary")
}

/// Runs `idmint` with `args`, the environment changed by `env` (a `None` value
/// removes the variable), and `stdin` on its standard input.
pub fn idmint_with(args: &[&str], env: &[(&str, Option<&str>)], stdin: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idmint"));
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for &(name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let mut child = command.spawn().expect("run the idmint binary");
    let mut input = child.stdin.take().expect("stdin is piped");
    // A child that fails before reading closes its end; that is not our failure.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child
        .wait_with_output()
        .expect("wait for the idmint binary")
}

/// Runs `idmint`, asserts it succeeded with nothing on stderr, and returns stdout.
#[track_caller]
pub fn ok(args: &[&str]) -> String {
    expect_ok(args, idmint(args))
}

/// Asserts `out`, the result of running `idmint args`, succeeded with nothing on
/// stderr, and returns stdout.
#[track_caller]
pub fn expect_ok(args: &[&str], out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "idmint {args:?} failed ({}): {stderr}",
        out.status
    );
    assert!(
        stderr.is_empty(),
        "idmint {args:?} wrote to stderr: {stderr}"
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Runs `idmint`, asserts it failed with an empty stdout and exactly one
/// `error: ...` line on stderr, and returns the exit code and that line.
#[track_caller]
pub fn fails(args: &[&str]) -> (i32, String) {
    expect_failure(args, idmint(args))
}

/// Asserts `out`, the result of running `idmint args`, failed with an empty
/// stdout and exactly one `error: ...` line on stderr; returns the exit code and
/// that line.
#[track_caller]
pub fn expect_failure(args: &[&str], out: Output) -> (i32, String) {
    let stderr = String::from_utf8(out.stderr).expect("stderr is UTF-8");
    assert!(
        !out.status.success(),
        "idmint {args:?} succeeded; stderr: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "idmint {args:?} wrote to stdout: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "idmint {args:?}: not one line: {stderr:?}"
    );
    assert!(
        stderr.starts_with("error: ") && stderr.ends_with('\n'),
        "{stderr:?}"
    );
    (
        out.status.code().expect("exited, not killed"),
        stderr.trim_end().to_owned(),
    )
}

/// The lines of `text` parsed as decimal integers.
#[track_caller]
pub fn integers(text: &str) -> Vec<u64> {
    text.lines()
        .map(|l| {
            l.parse()
                .unwrap_or_else(|_| panic!("not an integer: {l:?}"))
        })
        .collect()
}

/// True when every element is greater than the one before (so also no repeats).
pub fn strictly_increasing<T: Ord>(items: &[T]) -> bool {
    items.windows(2).all(|w| w[0] < w[1])
}
