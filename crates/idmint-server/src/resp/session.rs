//! The connection's own commands: `AUTH`, `HELLO`, `CLIENT`, `INFO` and
//! `RESET`, what clients send at connect or to reset.

use std::sync::atomic::Ordering;

use super::frame::{self, Proto};
use super::{Connection, shown};

impl Connection {
    /// `AUTH [user] token`: unlocks the keys whose token this is. An error is
    /// (code, message).
    pub(super) fn auth(&mut self, token: &[u8]) -> Result<(), (&'static str, &'static str)> {
        if self.state.key_tokens.is_empty() {
            return Err((
                "ERR",
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            ));
        }
        let keys = self.state.keys_with_token(token);
        if keys.is_empty() {
            return Err((
                "WRONGPASS",
                "invalid username-password pair or user is disabled.",
            ));
        }
        for key in keys {
            if !self.authorized.contains(&key) {
                self.authorized.push(key);
            }
        }
        Ok(())
    }

    /// `INFO [section ...]`: the named sections (`server`, `idmint`,
    /// `stats`), all of them for none or `default`, `all`, `everything`;
    /// unknown names add nothing.
    pub(super) fn info(&self, sections: &[&[u8]]) -> String {
        let wants = |section: &str| info_wants(sections, section);
        let stats = &self.stats;
        let mut info = String::new();
        if wants("server") {
            info += &format!(
                "# Server\r\n\
                 idmint_version:{version}\r\n\
                 resp_protocols:2,3\r\n\
                 process_id:{pid}\r\n\
                 tcp_port:{port}\r\n\
                 uptime_in_seconds:{uptime}\r\n",
                version = env!("CARGO_PKG_VERSION"),
                pid = std::process::id(),
                port = stats.addr.port(),
                uptime = stats.started.elapsed().as_secs(),
            );
        }
        if wants("idmint") {
            let status = self.state.worker.status();
            if !info.is_empty() {
                info += "\r\n";
            }
            info += &format!(
                "# Idmint\r\n\
                 registry:{registry}\r\n\
                 worker:{worker}\r\n\
                 lease:{lease}\r\n\
                 layout:{layout}\r\n\
                 max_count:{max_count}\r\n",
                registry = status.registry,
                worker = status.worker,
                lease = status.lease.name(),
                layout = self.state.layout_text,
                max_count = self.state.max_count,
            );
        }
        if wants("stats") {
            if !info.is_empty() {
                info += "\r\n";
            }
            info += &format!(
                "# Stats\r\n\
                 connected_clients:{open}\r\n\
                 total_connections_received:{total}\r\n\
                 total_commands_processed:{commands}\r\n\
                 ids_issued:{ids}\r\n",
                open = stats.connections_open.load(Ordering::Relaxed),
                total = stats.connections_total.load(Ordering::Relaxed),
                // This read's own commands and IDs are added after it.
                commands = stats.commands.load(Ordering::Relaxed) + self.n_commands,
                ids = stats.ids_issued.load(Ordering::Relaxed) + self.n_ids,
            );
        }
        info
    }

    /// `HELLO [protover [AUTH user password] [SETNAME name]]`: switches to
    /// RESP2 or RESP3 and answers the server's facts (a map in RESP3). A
    /// failing option changes nothing.
    pub(super) fn hello(&mut self, options: &[&[u8]]) {
        let Hello { proto, token, name } = match parse_hello(options, self.proto) {
            Ok(hello) => hello,
            Err((code, message)) => return frame::error(&mut self.out, code, &message),
        };
        if let Some(token) = token
            && let Err((code, message)) = self.auth(token)
        {
            return frame::error(&mut self.out, code, message);
        }
        if let Some(name) = name {
            self.name = (!name.is_empty()).then(|| name.to_vec());
        }
        self.proto = proto;
        let version = env!("CARGO_PKG_VERSION").as_bytes();
        let fields: [(&[u8], &[u8]); 7] = [
            (b"server", b"idmint"),
            (b"version", version),
            (b"proto", b""),
            (b"id", b""),
            (b"mode", b"standalone"),
            (b"role", b"master"),
            (b"modules", b""),
        ];
        frame::map(&mut self.out, fields.len(), proto);
        for (field, value) in fields {
            frame::bulk(&mut self.out, field);
            match field {
                b"proto" => frame::integer(&mut self.out, proto.number()),
                b"id" => frame::integer(&mut self.out, self.id),
                b"modules" => frame::array(&mut self.out, 0),
                _ => frame::bulk(&mut self.out, value),
            }
        }
    }

    /// `CLIENT SETNAME|GETNAME|SETINFO|ID|INFO`: what clients send at
    /// connect; `TRACKING` and `CACHING` are refused with why.
    pub(super) fn client(&mut self, sub: &[u8], rest: &[&[u8]]) {
        let is = |name: &[u8]| sub.eq_ignore_ascii_case(name);
        if is(b"SETNAME") && rest.len() == 1 {
            if valid_client_name(rest[0]) {
                self.name = (!rest[0].is_empty()).then(|| rest[0].to_vec());
                frame::simple(&mut self.out, "OK");
            } else {
                frame::error(&mut self.out, "ERR", BAD_CLIENT_NAME);
            }
        } else if is(b"GETNAME") && rest.is_empty() {
            match &self.name {
                Some(name) => frame::bulk(&mut self.out, name),
                None => frame::null(&mut self.out, self.proto),
            }
        } else if is(b"SETINFO") && rest.len() == 2 {
            let attr = rest[0];
            if !attr.eq_ignore_ascii_case(b"lib-name") && !attr.eq_ignore_ascii_case(b"lib-ver") {
                let message = format!("Unrecognized option '{}'", shown(attr));
                frame::error(&mut self.out, "ERR", &message);
            } else if !valid_client_name(rest[1]) {
                let message = format!(
                    "{} cannot contain spaces, newlines or special characters.",
                    shown(attr).to_ascii_lowercase()
                );
                frame::error(&mut self.out, "ERR", &message);
            } else {
                let value = (!rest[1].is_empty()).then(|| rest[1].to_vec());
                if attr.eq_ignore_ascii_case(b"lib-name") {
                    self.lib.0 = value;
                } else {
                    self.lib.1 = value;
                }
                frame::simple(&mut self.out, "OK");
            }
        } else if is(b"ID") && rest.is_empty() {
            frame::integer(&mut self.out, self.id);
        } else if is(b"INFO") && rest.is_empty() {
            let info = self.client_info();
            frame::verbatim(&mut self.out, info.as_bytes(), self.proto);
        } else if is(b"TRACKING") || is(b"CACHING") {
            frame::error(
                &mut self.out,
                "ERR",
                "client-side caching is not supported: idmint keys have no value to cache, \
                 every read issues a new ID",
            );
        } else {
            let message = format!(
                "unknown subcommand or wrong number of arguments for 'client|{}': \
                 CLIENT serves SETNAME, GETNAME, SETINFO, ID and INFO",
                shown(sub).to_ascii_lowercase()
            );
            frame::error(&mut self.out, "ERR", &message);
        }
    }

    /// `CLIENT INFO`: Redis's fields that mean something here, one line.
    fn client_info(&self) -> String {
        let text = |value: &Option<Vec<u8>>| {
            value
                .as_deref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        format!(
            "id={id} addr={addr} name={name} age={age} db=0 multi={multi} resp={resp} \
             lib-name={lib_name} lib-ver={lib_ver}\n",
            id = self.id,
            addr = self.peer,
            name = text(&self.name),
            age = self.opened.elapsed().as_secs(),
            multi = self.multi.as_ref().map_or(-1, |m| m.queued.len() as i64),
            resp = self.proto.number(),
            lib_name = text(&self.lib.0),
            lib_ver = text(&self.lib.1),
        )
    }

    /// `RESET`: the connection as it was new: RESP2, no transaction, no keys
    /// unlocked, no name.
    pub(super) fn reset(&mut self) {
        self.multi = None;
        self.proto = Proto::Resp2;
        self.authorized.clear();
        // It holds a key that passed the token check.
        self.last_key = None;
        self.name = None;
    }
}

/// A `HELLO`'s options.
#[derive(Debug, PartialEq, Eq)]
struct Hello<'a> {
    proto: Proto,
    /// `AUTH user password`'s password: a key's token.
    token: Option<&'a [u8]>,
    /// `SETNAME name`, checked.
    name: Option<&'a [u8]>,
}

/// Parses `HELLO`'s options (`protover [AUTH user password] [SETNAME name]`);
/// `current` is the protocol when no version is given. An error is (code,
/// message), as Redis words them.
fn parse_hello<'a>(
    options: &[&'a [u8]],
    current: Proto,
) -> Result<Hello<'a>, (&'static str, String)> {
    let mut hello = Hello {
        proto: current,
        token: None,
        name: None,
    };
    if let Some(&version) = options.first() {
        hello.proto = match version {
            b"2" => Proto::Resp2,
            b"3" => Proto::Resp3,
            v if !v.is_empty() && v.len() < 20 && v.iter().all(u8::is_ascii_digit) => {
                return Err((
                    "NOPROTO",
                    format!(
                        "unsupported protocol version {}: this server speaks 2 and 3",
                        shown(v)
                    ),
                ));
            }
            _ => {
                return Err((
                    "ERR",
                    "Protocol version is not an integer or out of range".to_owned(),
                ));
            }
        };
    }
    let mut at = 1;
    while at < options.len() {
        let option = options[at];
        let left = options.len() - at - 1;
        if option.eq_ignore_ascii_case(b"AUTH") && left >= 2 {
            hello.token = Some(options[at + 2]);
            at += 3;
        } else if option.eq_ignore_ascii_case(b"SETNAME") && left >= 1 {
            hello.name = Some(options[at + 1]);
            at += 2;
        } else {
            return Err((
                "ERR",
                format!("Syntax error in HELLO option '{}'", shown(option)),
            ));
        }
    }
    if hello.name.is_some_and(|name| !valid_client_name(name)) {
        return Err(("ERR", BAD_CLIENT_NAME.to_owned()));
    }
    Ok(hello)
}

/// Whether `INFO` with the `asked` sections shows `section`: every section
/// for none, `default`, `all` or `everything`; names in any case.
fn info_wants(asked: &[&[u8]], section: &str) -> bool {
    asked.is_empty()
        || asked.iter().any(|asked| {
            [section, "default", "all", "everything"]
                .iter()
                .any(|name| name.as_bytes().eq_ignore_ascii_case(asked))
        })
}

const BAD_CLIENT_NAME: &str = "Client names cannot contain spaces, newlines or special characters.";

/// Redis's rule: printable ASCII, no spaces.
fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|b| (b'!'..=b'~').contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_takes_a_version_auth_and_setname() {
        fn parse(text: &str) -> Result<Hello<'_>, (&'static str, String)> {
            let options: Vec<&[u8]> = text.split(' ').skip(1).map(str::as_bytes).collect();
            parse_hello(&options, Proto::Resp2)
        }
        assert_eq!(parse("HELLO").unwrap().proto, Proto::Resp2);
        assert_eq!(
            parse_hello(&[], Proto::Resp3).unwrap().proto,
            Proto::Resp3,
            "no version keeps the protocol"
        );
        let hello = parse("HELLO 3 AUTH default tok SETNAME app").unwrap();
        assert_eq!(
            hello,
            Hello {
                proto: Proto::Resp3,
                token: Some(b"tok"),
                name: Some(b"app"),
            }
        );
        let hello = parse("HELLO 2 setname app auth u t").unwrap();
        assert_eq!((hello.proto, hello.token), (Proto::Resp2, Some(&b"t"[..])));
        assert_eq!(parse("HELLO 4").unwrap_err().0, "NOPROTO");
        assert_eq!(parse("HELLO 99999999999999999999999").unwrap_err().0, "ERR");
        assert_eq!(
            parse("HELLO three").unwrap_err().1,
            "Protocol version is not an integer or out of range"
        );
        for bad in ["HELLO 3 AUTH u", "HELLO 3 SETNAME", "HELLO 3 FOO bar"] {
            let (code, message) = parse(bad).unwrap_err();
            assert_eq!(code, "ERR", "{bad}");
            assert!(
                message.starts_with("Syntax error in HELLO option"),
                "{bad}: {message}"
            );
        }
        assert_eq!(
            parse_hello(&[b"3", b"SETNAME", b"a\nb"], Proto::Resp2)
                .unwrap_err()
                .1,
            BAD_CLIENT_NAME
        );
    }

    #[test]
    fn info_sections_are_chosen_by_name() {
        assert!(info_wants(&[], "stats"));
        assert!(info_wants(&[b"Server"], "server"));
        assert!(!info_wants(&[b"server"], "stats"));
        assert!(info_wants(&[b"server", b"STATS"], "stats"));
        for all in [&b"default"[..], b"all", b"everything"] {
            assert!(info_wants(&[all], "idmint"));
        }
        assert!(!info_wants(&[b"nosuch"], "server"));
    }

    #[test]
    fn client_names_are_printable_ascii_without_spaces() {
        assert!(valid_client_name(b"redis-py(8.1.0)"));
        assert!(valid_client_name(b""));
        for bad in [&b"a b"[..], b"a\nb", b"\x7f", "é".as_bytes()] {
            assert!(!valid_client_name(bad), "{bad:?}");
        }
    }
}
