//! The commands the RESP listener knows: their names, arities and the facts
//! `COMMAND`, `COMMAND INFO` and `COMMAND DOCS` report about them, in the
//! shapes redis-server 7 uses (clients such as redis-py and node-redis parse
//! these replies, and read key positions from them).
//!
//! The arity here is also what a command queued in `MULTI` is checked
//! against, so a transaction with a malformed command is refused whole at
//! `EXEC` (`-EXECABORT`), as Redis refuses it.

use super::frame::{self, Proto};

/// A command of the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Command {
    Incr,
    Get,
    Batch,
    IncrBy,
    Ping,
    Echo,
    Info,
    Quit,
    Hello,
    Client,
    Select,
    Commands,
    Config,
    Auth,
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    Reset,
    Unknown,
}

/// What `COMMAND INFO` and `COMMAND DOCS` say about a command.
pub(super) struct Spec {
    pub name: &'static str,
    pub command: Command,
    /// Redis's arity: `n` exactly `n` arguments (the name included), `-n`
    /// at least `n`.
    pub arity: i64,
    pub flags: &'static [&'static str],
    /// The first key's position, the last's (`-1`: the last argument), and
    /// the step between keys; all 0 for a command without keys.
    pub keys: (i64, i64, i64),
    pub acl: &'static [&'static str],
    pub group: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
}

const KEY: (i64, i64, i64) = (1, 1, 1);
const NO_KEYS: (i64, i64, i64) = (0, 0, 0);
const CONNECTION: &[&str] = &[
    "noscript",
    "loading",
    "stale",
    "fast",
    "no_auth",
    "allow_busy",
];
const TRANSACTION: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];

/// Every command, in the order they are looked up: the most frequent first,
/// so the hot `INCR` is found at the first comparison.
pub(super) const SPECS: [Spec; 20] = [
    Spec {
        name: "incr",
        command: Command::Incr,
        arity: 2,
        flags: &["write", "denyoom", "fast"],
        keys: KEY,
        acl: &["@write", "@string", "@fast"],
        group: "string",
        summary: "Issues the key's next ID, made by the key's strategy",
        complexity: "O(1)",
    },
    Spec {
        name: "get",
        command: Command::Get,
        arity: 2,
        flags: &["write", "fast"],
        keys: KEY,
        acl: &["@write", "@string", "@fast"],
        group: "string",
        summary: "Issues the key's next ID, as INCR does",
        complexity: "O(1)",
    },
    Spec {
        name: "idmint.batch",
        command: Command::Batch,
        arity: 3,
        flags: &["write", "denyoom"],
        keys: KEY,
        acl: &["@write", "@string"],
        group: "string",
        summary: "Issues the key's next N IDs, as an array",
        complexity: "O(N) where N is the number of IDs",
    },
    Spec {
        name: "incrby",
        command: Command::IncrBy,
        arity: 3,
        flags: &["write", "denyoom", "fast"],
        keys: KEY,
        acl: &["@write", "@string", "@fast"],
        group: "string",
        summary: "Reserves the segment key's next N IDs as one run and returns the last",
        complexity: "O(1)",
    },
    Spec {
        name: "ping",
        command: Command::Ping,
        arity: -1,
        flags: &["fast"],
        keys: NO_KEYS,
        acl: &["@fast", "@connection"],
        group: "connection",
        summary: "Returns the server's liveliness response",
        complexity: "O(1)",
    },
    Spec {
        name: "echo",
        command: Command::Echo,
        arity: 2,
        flags: &["fast"],
        keys: NO_KEYS,
        acl: &["@fast", "@connection"],
        group: "connection",
        summary: "Returns the given string",
        complexity: "O(1)",
    },
    Spec {
        name: "info",
        command: Command::Info,
        arity: -1,
        flags: &["loading", "stale"],
        keys: NO_KEYS,
        acl: &["@slow", "@dangerous"],
        group: "server",
        summary: "Returns information and statistics about the server",
        complexity: "O(1)",
    },
    Spec {
        name: "quit",
        command: Command::Quit,
        arity: -1,
        flags: CONNECTION,
        keys: NO_KEYS,
        acl: &["@fast", "@connection"],
        group: "connection",
        summary: "Closes the connection",
        complexity: "O(1)",
    },
    Spec {
        name: "hello",
        command: Command::Hello,
        arity: -1,
        flags: CONNECTION,
        keys: NO_KEYS,
        acl: &["@fast", "@connection"],
        group: "connection",
        summary: "Handshakes with the server: protocol 2 or 3, AUTH, SETNAME",
        complexity: "O(1)",
    },
    Spec {
        name: "client",
        command: Command::Client,
        arity: -2,
        flags: &["noscript", "loading", "stale"],
        keys: NO_KEYS,
        acl: &["@slow", "@connection"],
        group: "connection",
        summary: "SETNAME, GETNAME, SETINFO, ID, INFO of the connection",
        complexity: "O(1)",
    },
    Spec {
        name: "select",
        command: Command::Select,
        arity: 2,
        flags: &["loading", "stale", "fast"],
        keys: NO_KEYS,
        acl: &["@fast", "@connection"],
        group: "connection",
        summary: "Selects database 0, the only one",
        complexity: "O(1)",
    },
    Spec {
        name: "command",
        command: Command::Commands,
        arity: -1,
        flags: &["loading", "stale"],
        keys: NO_KEYS,
        acl: &["@slow", "@connection"],
        group: "server",
        summary: "Returns detailed information about the server's commands",
        complexity: "O(N) where N is the number of commands",
    },
    Spec {
        name: "config",
        command: Command::Config,
        arity: -2,
        flags: &["noscript", "loading", "stale"],
        keys: NO_KEYS,
        acl: &["@slow"],
        group: "server",
        summary: "CONFIG GET of save and appendonly, for benchmarks",
        complexity: "O(1)",
    },
    Spec {
        name: "auth",
        command: Command::Auth,
        arity: -2,
        flags: CONNECTION,
        keys: NO_KEYS,
        acl: &["@fast", "@connection"],
        group: "connection",
        summary: "Unlocks the keys whose token is the password",
        complexity: "O(N) where N is the number of keys with a token",
    },
    Spec {
        name: "multi",
        command: Command::Multi,
        arity: 1,
        flags: TRANSACTION,
        keys: NO_KEYS,
        acl: &["@fast", "@transaction"],
        group: "transactions",
        summary: "Starts a transaction",
        complexity: "O(1)",
    },
    Spec {
        name: "exec",
        command: Command::Exec,
        arity: 1,
        flags: &["noscript", "loading", "stale", "skip_slowlog"],
        keys: NO_KEYS,
        acl: &["@slow", "@transaction"],
        group: "transactions",
        summary: "Runs the commands queued in the transaction",
        complexity: "Depends on the queued commands",
    },
    Spec {
        name: "discard",
        command: Command::Discard,
        arity: 1,
        flags: TRANSACTION,
        keys: NO_KEYS,
        acl: &["@fast", "@transaction"],
        group: "transactions",
        summary: "Discards the transaction: nothing queued is run",
        complexity: "O(N) where N is the number of queued commands",
    },
    Spec {
        name: "watch",
        command: Command::Watch,
        arity: -2,
        flags: TRANSACTION,
        keys: (1, -1, 1),
        acl: &["@fast", "@transaction"],
        group: "transactions",
        summary: "Refused: every read of an idmint key issues an ID, so there is no value to watch",
        complexity: "O(1)",
    },
    Spec {
        name: "unwatch",
        command: Command::Unwatch,
        arity: 1,
        flags: TRANSACTION,
        keys: NO_KEYS,
        acl: &["@fast", "@transaction"],
        group: "transactions",
        summary: "Forgets watched keys (there never are any)",
        complexity: "O(1)",
    },
    Spec {
        name: "reset",
        command: Command::Reset,
        arity: 1,
        flags: CONNECTION,
        keys: NO_KEYS,
        acl: &["@fast", "@connection"],
        group: "connection",
        summary: "Resets the connection: RESP2, no transaction, no AUTH, no name",
        complexity: "O(1)",
    },
];

/// The command `name` (any case).
#[inline]
pub(super) fn command(name: &[u8]) -> Command {
    SPECS
        .iter()
        .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
        .map_or(Command::Unknown, |spec| spec.command)
}

/// The spec of `command`.
pub(super) fn spec(command: Command) -> Option<&'static Spec> {
    SPECS.iter().find(|spec| spec.command == command)
}

impl Spec {
    /// True when `n_args` arguments (the name included) fit the arity.
    pub(super) fn arity_fits(&self, n_args: usize) -> bool {
        let n = i64::try_from(n_args).unwrap_or(i64::MAX);
        if self.arity >= 0 {
            n == self.arity
        } else {
            n >= -self.arity
        }
    }

    /// The spec as one `COMMAND INFO` element: name, arity, flags, first key,
    /// last key, step, ACL categories, tips, key specs, subcommands.
    fn write_info(&self, out: &mut Vec<u8>, proto: Proto) {
        frame::array(out, 10);
        frame::bulk(out, self.name.as_bytes());
        frame::integer(out, self.arity);
        frame::set(out, self.flags.len(), proto);
        for flag in self.flags {
            frame::simple(out, flag);
        }
        frame::integer(out, self.keys.0);
        frame::integer(out, self.keys.1);
        frame::integer(out, self.keys.2);
        frame::set(out, self.acl.len(), proto);
        for category in self.acl {
            frame::simple(out, category);
        }
        frame::array(out, 0); // tips
        frame::array(out, 0); // key specs: the legacy positions above say it all
        frame::array(out, 0); // subcommands
    }

    /// The spec as one `COMMAND DOCS` value: a map of summary, since, group,
    /// complexity.
    fn write_docs(&self, out: &mut Vec<u8>, proto: Proto) {
        frame::map(out, 4, proto);
        for (field, value) in [
            ("summary", self.summary),
            ("since", "1.0.0"),
            ("group", self.group),
            ("complexity", self.complexity),
        ] {
            frame::bulk(out, field.as_bytes());
            frame::bulk(out, value.as_bytes());
        }
    }
}

/// `COMMAND`: every command's info.
pub(super) fn write_all_info(out: &mut Vec<u8>, proto: Proto) {
    frame::array(out, SPECS.len());
    for spec in &SPECS {
        spec.write_info(out, proto);
    }
}

/// `COMMAND INFO name...`: each named command's info, a null for a name
/// that isn't a command.
pub(super) fn write_info<'a>(
    out: &mut Vec<u8>,
    names: impl ExactSizeIterator<Item = &'a [u8]>,
    proto: Proto,
) {
    frame::array(out, names.len());
    for name in names {
        match spec(command(name)) {
            Some(spec) => spec.write_info(out, proto),
            // Redis answers a null array element; RESP2 clients read `*-1`.
            None => frame::null_array(out, proto),
        }
    }
}

/// `COMMAND DOCS [name...]`: a map from command name to its docs; all
/// commands without names, names that aren't commands left out.
pub(super) fn write_docs(out: &mut Vec<u8>, names: &[&[u8]], proto: Proto) {
    let specs: Vec<&Spec> = if names.is_empty() {
        SPECS.iter().collect()
    } else {
        names
            .iter()
            .filter_map(|name| spec(command(name)))
            .collect()
    };
    frame::map(out, specs.len(), proto);
    for spec in specs {
        frame::bulk(out, spec.name.as_bytes());
        spec.write_docs(out, proto);
    }
}

/// `COMMAND LIST`: every command's name.
pub(super) fn write_list(out: &mut Vec<u8>) {
    frame::array(out, SPECS.len());
    for spec in &SPECS {
        frame::bulk(out, spec.name.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_one_spec_and_names_are_lowercase() {
        for spec in &SPECS {
            assert_eq!(command(spec.name.as_bytes()), spec.command, "{}", spec.name);
            assert_eq!(
                command(spec.name.to_ascii_uppercase().as_bytes()),
                spec.command
            );
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            assert_eq!(
                SPECS.iter().filter(|s| s.command == spec.command).count(),
                1,
                "{}",
                spec.name
            );
        }
        assert_eq!(command(b"INCR"), Command::Incr);
        assert_eq!(command(b"nosuch"), Command::Unknown);
        assert!(spec(Command::Unknown).is_none());
    }

    #[test]
    fn arity_is_exact_or_a_minimum() {
        let incr = spec(Command::Incr).unwrap();
        assert!(incr.arity_fits(2) && !incr.arity_fits(1) && !incr.arity_fits(3));
        let ping = spec(Command::Ping).unwrap();
        assert!(ping.arity_fits(1) && ping.arity_fits(2));
        let client = spec(Command::Client).unwrap();
        assert!(!client.arity_fits(1) && client.arity_fits(3));
    }

    #[test]
    fn command_info_has_redis_7_shape_in_both_protocols() {
        // Byte for byte what redis-server 7.0 answers for INCR, but for the
        // key specs (empty here) and a null for an unknown name.
        let mut out = Vec::new();
        write_info(
            &mut out,
            [&b"incr"[..], b"nosuch"].into_iter(),
            Proto::Resp3,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "*2\r\n*10\r\n$4\r\nincr\r\n:2\r\n~3\r\n+write\r\n+denyoom\r\n+fast\r\n\
                 :1\r\n:1\r\n:1\r\n~3\r\n+@write\r\n+@string\r\n+@fast\r\n*0\r\n*0\r\n*0\r\n"
            ),
            "{text:?}"
        );
        assert!(text.ends_with("*0\r\n_\r\n"), "{text:?}");
        let mut out = Vec::new();
        write_info(&mut out, [&b"PING"[..]].into_iter(), Proto::Resp2);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("*1\r\n*10\r\n$4\r\nping\r\n:-1\r\n*1\r\n+fast\r\n"),
            "{text:?}"
        );
    }

    #[test]
    fn command_docs_is_a_map_by_name() {
        let mut out = Vec::new();
        write_docs(&mut out, &[b"incr", b"nosuch"], Proto::Resp3);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("%1\r\n$4\r\nincr\r\n%4\r\n$7\r\nsummary\r\n"),
            "{text:?}"
        );
        let mut out = Vec::new();
        write_docs(&mut out, &[b"incr"], Proto::Resp2);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("*2\r\n$4\r\nincr\r\n*8\r\n$7\r\nsummary\r\n"),
            "{text:?}"
        );
        let mut out = Vec::new();
        write_docs(&mut out, &[], Proto::Resp3);
        assert!(out.starts_with(format!("%{}\r\n", SPECS.len()).as_bytes()));
    }
}
