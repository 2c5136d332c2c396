//! `idmint`: the one binary. It parses the command line, hands it to [`cli::run`],
//! and turns an error into one line on stderr and an exit code:
//!
//! - `0`: success, and also a closed stdout (`idmint gen --count 1000000 | head -3`);
//! - `1`: a failure while running (I/O, a clock that went back too far);
//! - `2`: bad input (an unknown preset, a worker out of range, a malformed ID,
//!   a count of 0, a layout that has run out). clap's usage errors exit 2 too.

mod cli;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if cli::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // Not eprintln!: it panics when stderr is closed, and nothing here may panic.
            let _ = writeln!(std::io::stderr(), "error: {err:#}");
            ExitCode::from(if cli::is_bad_input(&err) { 2 } else { 1 })
        }
    }
}
