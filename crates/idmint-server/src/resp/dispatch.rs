//! Command dispatch: one request's command looked up (`resp/commands.rs`),
//! its arity checked, and run; what runs where is in the sibling files
//! (`ids.rs` issues, `transaction.rs` queues and runs `MULTI`/`EXEC`,
//! `session.rs` answers the connection's own commands).

use std::ops::Range;

use super::commands::{self, Command, command};
use super::frame;
use super::{Connection, Flow, shown, wrong_arity};

const WATCH_REFUSED: &str = "WATCH is not supported: every read of an idmint key issues a new ID, \
     so there is no value to watch; use MULTI/EXEC without WATCH";

impl Connection {
    /// Runs one request whose arguments are `args`, ranges of `input`
    /// relative to `base`.
    pub(super) async fn execute(
        &mut self,
        input: &[u8],
        base: usize,
        args: &[Range<usize>],
    ) -> Flow {
        let arg = |i: usize| -> &[u8] {
            args.get(i)
                .and_then(|r| input.get(base + r.start..base + r.end))
                .unwrap_or_default()
        };
        let n_args = args.len();
        let name = arg(0);
        match command(name) {
            Command::Incr | Command::Get if n_args == 2 => {
                self.issue(arg(1), None).await;
            }
            Command::Batch if n_args == 3 => {
                self.issue(arg(1), Some(arg(2))).await;
            }
            Command::IncrBy if n_args == 3 => {
                // Boxed: its future is larger than INCR's, which shouldn't
                // pay for it.
                Box::pin(self.incr_by(arg(1), arg(2))).await;
            }
            Command::Auth if n_args == 2 || n_args == 3 => match self.auth(arg(n_args - 1)) {
                Ok(()) => frame::simple(&mut self.out, "OK"),
                Err((code, message)) => frame::error(&mut self.out, code, message),
            },
            Command::Ping if n_args <= 2 => match n_args {
                1 => frame::simple(&mut self.out, "PONG"),
                _ => frame::bulk(&mut self.out, arg(1)),
            },
            Command::Echo if n_args == 2 => frame::bulk(&mut self.out, arg(1)),
            Command::Info => {
                let sections: Vec<&[u8]> = (1..n_args).map(arg).collect();
                let info = self.info(&sections);
                frame::verbatim(&mut self.out, info.as_bytes(), self.proto);
            }
            Command::Quit => {
                frame::simple(&mut self.out, "OK");
                return Flow::Close;
            }
            Command::Hello => {
                let options: Vec<&[u8]> = (1..n_args).map(arg).collect();
                self.hello(&options);
            }
            Command::Client if n_args >= 2 => {
                let rest: Vec<&[u8]> = (2..n_args).map(arg).collect();
                self.client(arg(1), &rest);
            }
            Command::Select if n_args == 2 => {
                if arg(1) == b"0" {
                    frame::simple(&mut self.out, "OK");
                } else {
                    frame::error(&mut self.out, "ERR", "DB index is out of range");
                }
            }
            Command::Commands => {
                let sub = arg(1);
                let names: Vec<&[u8]> = (2..n_args).map(arg).collect();
                if n_args == 1 {
                    commands::write_all_info(&mut self.out, self.proto);
                } else if sub.eq_ignore_ascii_case(b"COUNT") && n_args == 2 {
                    frame::integer(&mut self.out, commands::SPECS.len() as i64);
                } else if sub.eq_ignore_ascii_case(b"INFO") && names.is_empty() {
                    // Redis 7: no names, every command.
                    commands::write_all_info(&mut self.out, self.proto);
                } else if sub.eq_ignore_ascii_case(b"INFO") {
                    commands::write_info(&mut self.out, names.into_iter(), self.proto);
                } else if sub.eq_ignore_ascii_case(b"DOCS") {
                    commands::write_docs(&mut self.out, &names, self.proto);
                } else if sub.eq_ignore_ascii_case(b"LIST") && n_args == 2 {
                    commands::write_list(&mut self.out);
                } else {
                    let message = format!(
                        "unknown subcommand or wrong number of arguments for '{}': \
                         COMMAND serves COUNT, INFO, DOCS and LIST",
                        shown(sub)
                    );
                    frame::error(&mut self.out, "ERR", &message);
                }
            }
            Command::Config if n_args == 3 && arg(1).eq_ignore_ascii_case(b"GET") => {
                // `redis-benchmark` asks for `save` and `appendonly` at start.
                let param = arg(2);
                let value: Option<(&[u8], &[u8])> = if param.eq_ignore_ascii_case(b"save") {
                    Some((b"save", b""))
                } else if param.eq_ignore_ascii_case(b"appendonly") {
                    Some((b"appendonly", b"no"))
                } else {
                    None
                };
                frame::map(&mut self.out, usize::from(value.is_some()), self.proto);
                if let Some((name, value)) = value {
                    frame::bulk(&mut self.out, name);
                    frame::bulk(&mut self.out, value);
                }
            }
            Command::Config => {
                let message = format!(
                    "unknown subcommand or wrong number of arguments for '{}': only CONFIG GET is served",
                    shown(arg(1))
                );
                frame::error(&mut self.out, "ERR", &message);
            }
            Command::Multi if n_args == 1 => {
                self.multi = Some(Box::default());
                frame::simple(&mut self.out, "OK");
            }
            Command::Exec if n_args == 1 => {
                frame::error(&mut self.out, "ERR", "EXEC without MULTI");
            }
            Command::Discard if n_args == 1 => {
                frame::error(&mut self.out, "ERR", "DISCARD without MULTI");
            }
            Command::Watch if n_args >= 2 => frame::error(&mut self.out, "ERR", WATCH_REFUSED),
            Command::Unwatch if n_args == 1 => frame::simple(&mut self.out, "OK"),
            Command::Reset if n_args == 1 => {
                self.reset();
                frame::simple(&mut self.out, "RESET");
            }
            Command::Unknown => {
                let message = format!("unknown command '{}'", shown(name));
                frame::error(&mut self.out, "ERR", &message);
            }
            _ => {
                let message = wrong_arity(name);
                frame::error(&mut self.out, "ERR", &message);
            }
        }
        Flow::Continue
    }
}
