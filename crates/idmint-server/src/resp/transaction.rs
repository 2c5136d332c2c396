//! Transactions: `MULTI`, the commands queued after it (checked as they are
//! queued, run at `EXEC`), `EXEC` and `DISCARD`. Nothing is issued before
//! `EXEC`.

use std::ops::Range;

use super::commands::{self, Command, command};
use super::frame;
use super::ids::{checked_key, incr_by_count, incr_by_fits};
use super::{Connection, FLUSH_AT, Flow, MAX_QUEUED_BYTES, shown, wrong_arity};
use crate::issue;
use idmint_node::IssueError;

impl Connection {
    /// A request while a transaction is open: `EXEC`, `DISCARD`, `QUIT` and
    /// `RESET` run at once; anything else is checked and queued (`+QUEUED`),
    /// or refused, which makes `EXEC` refuse the whole transaction.
    pub(super) async fn queue(&mut self, input: &[u8], base: usize, args: &[Range<usize>]) -> Flow {
        let arg = |i: usize| -> &[u8] {
            args.get(i)
                .and_then(|r| input.get(base + r.start..base + r.end))
                .unwrap_or_default()
        };
        let name = arg(0);
        let cmd = command(name);
        match cmd {
            Command::Exec if args.len() == 1 => return self.exec().await,
            Command::Discard if args.len() == 1 => {
                // Nothing queued ran, so nothing was issued.
                self.multi = None;
                frame::simple(&mut self.out, "OK");
                return Flow::Continue;
            }
            Command::Quit | Command::Reset => return self.execute(input, base, args).await,
            Command::Multi => {
                frame::error(&mut self.out, "ERR", "MULTI calls can not be nested");
                return Flow::Continue;
            }
            Command::Watch => {
                frame::error(&mut self.out, "ERR", "WATCH inside MULTI is not allowed");
                return Flow::Continue;
            }
            _ => {}
        }
        let values: Vec<&[u8]> = (0..args.len()).map(arg).collect();
        match self.check_queued(cmd, &values) {
            Ok(()) => {
                let start = args.first().map_or(0, |r| r.start);
                let end = args.last().map_or(0, |r| r.end);
                let bytes = input[base + start..base + end].to_vec();
                let ranges = args
                    .iter()
                    .map(|r| r.start - start..r.end - start)
                    .collect();
                let Some(multi) = &mut self.multi else {
                    return Flow::Continue;
                };
                if multi.bytes + bytes.len() > MAX_QUEUED_BYTES {
                    multi.failed = true;
                    let message = format!(
                        "transaction too large: at most {MAX_QUEUED_BYTES} bytes of queued \
                         commands; EXEC will refuse it"
                    );
                    frame::error(&mut self.out, "ERR", &message);
                } else {
                    multi.bytes += bytes.len();
                    multi.queued.push((bytes, ranges));
                    frame::simple(&mut self.out, "QUEUED");
                }
            }
            Err((code, message)) => {
                if let Some(multi) = &mut self.multi {
                    multi.failed = true;
                }
                frame::error(&mut self.out, &code, &message);
            }
        }
        Flow::Continue
    }

    /// What `EXEC` would refuse to run, checked when a command is queued: an
    /// unknown command, a wrong arity, and for the issuing commands a bad
    /// key, a key that needs `AUTH`, a bad count, or `INCRBY` of a key that
    /// can't answer it. So a transaction either runs every command or none
    /// (what can still fail at `EXEC` is the store or the clock).
    fn check_queued(&self, cmd: Command, args: &[&[u8]]) -> Result<(), (String, String)> {
        let name = args.first().copied().unwrap_or_default();
        let Some(spec) = commands::spec(cmd) else {
            return Err(("ERR".into(), format!("unknown command '{}'", shown(name))));
        };
        if !spec.arity_fits(args.len()) {
            return Err(("ERR".into(), wrong_arity(name)));
        }
        let issue_error = |e: IssueError| (e.code.to_ascii_uppercase(), e.message);
        match cmd {
            Command::Incr | Command::Get | Command::Batch | Command::IncrBy => {
                let key =
                    checked_key(&self.state, &self.authorized, args[1]).map_err(issue_error)?;
                if cmd == Command::Batch {
                    let text = String::from_utf8_lossy(args[2]);
                    issue::parse_count(&text, self.state.max_count).map_err(issue_error)?;
                } else if cmd == Command::IncrBy {
                    let n = incr_by_count(args[2], self.state.max_count).map_err(issue_error)?;
                    if n > 1 {
                        incr_by_fits(key, self.state.spec(key)).map_err(issue_error)?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `EXEC`: every queued command's reply, in one array; or `-EXECABORT`
    /// when one failed to queue (nothing runs, nothing is issued).
    pub(super) async fn exec(&mut self) -> Flow {
        let Some(multi) = self.multi.take() else {
            return Flow::Continue;
        };
        if multi.failed {
            frame::error(
                &mut self.out,
                "EXECABORT",
                "Transaction discarded because of previous errors.",
            );
            return Flow::Continue;
        }
        frame::array(&mut self.out, multi.queued.len());
        for (bytes, ranges) in &multi.queued {
            // QUIT, MULTI, EXEC are never queued: every command continues.
            self.execute(bytes, 0, ranges).await;
            // A transaction of large batches is written as it runs, as a
            // pipeline is; and when the client is gone, the rest isn't run,
            // so no more IDs are issued that no one will read.
            if self.out.len() >= FLUSH_AT
                && let Err(e) = self.write_out().await
            {
                tracing::debug!(peer = %self.peer, error = %e, "RESP write failed during EXEC");
                return Flow::Close;
            }
        }
        Flow::Continue
    }
}
