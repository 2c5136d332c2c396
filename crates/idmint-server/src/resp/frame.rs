//! RESP on the wire: a bounded parser of what clients send (arrays of bulk
//! strings, and inline commands typed by hand) and an encoder that writes
//! replies straight into a connection's output buffer, as RESP2 or, for a
//! connection that asked with `HELLO 3`, RESP3 (where maps, sets, nulls and
//! verbatim strings have types of their own).
//!
//! # Why hand-written (and not `redis-protocol` or `redis`'s parser)
//! A server only ever *reads* one shape, `*N\r\n` then N `$len\r\n…\r\n`
//! (plus inline lines), and only *writes* a handful of reply types (RESP3's
//! maps, sets, `_` null and verbatim strings beside RESP2's five), each a
//! few lines below. What matters is the bounds: every length a client
//! declares is checked before anything is buffered or allocated for it, and
//! the parser borrows the connection's buffer (argument ranges, no copies,
//! no allocation per command once the range vector has grown). The
//! `redis-protocol` crate decodes any RESP2/RESP3 frame into owned or `Bytes`
//! values with its own (large, fixed) limits, and `redis`'s parser is
//! client-side (it reads replies, not requests); either would add a
//! dependency for the easy half and leave the limits to us anyway.
//!
//! # Invariants
//! - [`parse_request`] never panics and never reads past `buf`; every index
//!   is checked (unit tests feed it random bytes and every prefix of valid
//!   frames).
//! - `Ok(None)` (incomplete) is only returned while what is buffered could
//!   still become a frame within [`Limits`]; so a connection's unparsed bytes
//!   stay below about `max_frame + max_args * 24` bytes.
//! - Error messages never contain `\r` or `\n` ([`error`] replaces them).

use std::fmt;
use std::ops::Range;

/// Bounds on one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Longest bulk string (a key, an `ECHO` message), in bytes.
    pub max_bulk: usize,
    /// Most elements in one array (command name included).
    pub max_args: usize,
    /// Longest inline command line, in bytes (Redis's limit is 64 KiB too).
    pub max_inline: usize,
    /// Most bytes of bulk data in one request, all arguments together.
    pub max_frame: usize,
}

/// The limits the listener uses. idmint's commands take at most a key and a
/// count, so these are generous for every legitimate client and small
/// enough that one connection can't make the server buffer much.
pub(crate) const LIMITS: Limits = Limits {
    max_bulk: 64 * 1024,
    max_args: 1024,
    max_inline: 64 * 1024,
    max_frame: 1024 * 1024,
};

/// Longest `*N` or `$N` header line (digits and sign), as Redis.
const MAX_HEADER: usize = 20;

/// A request that breaks the protocol or the limits. The connection answers
/// `-ERR Protocol error: <this>` and closes, as Redis does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtocolError {
    /// `*N` with N not a number.
    BadArrayLength,
    /// `*N` with N above `max_args`.
    TooManyArgs(usize),
    /// An array element that isn't a bulk string (`$`).
    ExpectedBulk(u8),
    /// `$N` with N not a number (or negative).
    BadBulkLength,
    /// `$N` with N above `max_bulk`.
    BulkTooLong(usize),
    /// The arguments together above `max_frame`.
    FrameTooLong,
    /// A header or bulk string not ended by `\r\n`.
    MissingCrlf,
    /// An inline line longer than `max_inline`.
    InlineTooLong,
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ProtocolError::BadArrayLength => f.write_str("invalid multibulk length"),
            ProtocolError::TooManyArgs(n) => write!(
                f,
                "invalid multibulk length: {n} arguments, at most {} allowed",
                LIMITS.max_args
            ),
            ProtocolError::ExpectedBulk(b) => {
                write!(f, "expected '$', got '{}'", (b as char).escape_default())
            }
            ProtocolError::BadBulkLength => f.write_str("invalid bulk length"),
            ProtocolError::BulkTooLong(n) => write!(
                f,
                "invalid bulk length: {n} bytes, at most {} allowed",
                LIMITS.max_bulk
            ),
            ProtocolError::FrameTooLong => write!(
                f,
                "request too large: at most {} bytes of arguments",
                LIMITS.max_frame
            ),
            ProtocolError::MissingCrlf => f.write_str("expected '\\r\\n'"),
            ProtocolError::InlineTooLong => write!(
                f,
                "too big inline request: at most {} bytes",
                LIMITS.max_inline
            ),
        }
    }
}

/// Parses one request at the start of `buf`.
///
/// Returns `Ok(Some(n))` when the first `n` bytes are a whole request; its
/// arguments (command name first) are then in `args` as ranges of `buf`. An
/// empty `args` is a request with nothing in it (a blank inline line, `*0`),
/// which Redis skips too. `Ok(None)`: not whole yet, read more.
///
/// # Errors
/// [`ProtocolError`] when the bytes can't become a valid request within `limits`.
pub(crate) fn parse_request(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    args.clear();
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_array(buf, limits, args),
        Some(_) => parse_inline(buf, limits, args),
    }
}

fn parse_array(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    let Some((header, mut at)) = header_line(buf, 1)? else {
        return Ok(None);
    };
    let n = parse_int(header).ok_or(ProtocolError::BadArrayLength)?;
    if n <= 0 {
        // `*0` and `*-1`: nothing to do (Redis skips them).
        return Ok(Some(at));
    }
    let n = usize::try_from(n).map_err(|_| ProtocolError::BadArrayLength)?;
    if n > limits.max_args {
        return Err(ProtocolError::TooManyArgs(n));
    }
    let mut total = 0usize;
    for _ in 0..n {
        let Some(&first) = buf.get(at) else {
            return Ok(None);
        };
        if first != b'$' {
            return Err(ProtocolError::ExpectedBulk(first));
        }
        let Some((header, data_at)) = header_line(buf, at + 1)? else {
            return Ok(None);
        };
        let len = parse_int(header)
            .and_then(|len| usize::try_from(len).ok())
            .ok_or(ProtocolError::BadBulkLength)?;
        if len > limits.max_bulk {
            return Err(ProtocolError::BulkTooLong(len));
        }
        total += len;
        if total > limits.max_frame {
            return Err(ProtocolError::FrameTooLong);
        }
        let end = data_at + len;
        match buf.get(end..end + 2) {
            None => return Ok(None),
            Some(b"\r\n") => {}
            Some(_) => return Err(ProtocolError::MissingCrlf),
        }
        args.push(data_at..end);
        at = end + 2;
    }
    Ok(Some(at))
}

/// The header line starting at `at` (after its `*` or `$`), and where the
/// next line starts; `None` when its `\r\n` hasn't arrived.
fn header_line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = buf.get(at..).unwrap_or_default();
    let window = &rest[..rest.len().min(MAX_HEADER + 2)];
    match window.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(cr) if window[cr] == b'\n' => Err(ProtocolError::MissingCrlf),
        Some(cr) => match window.get(cr + 1) {
            Some(b'\n') => Ok(Some((&window[..cr], at + cr + 2))),
            Some(_) => Err(ProtocolError::MissingCrlf),
            None => Ok(None),
        },
        None if window.len() >= MAX_HEADER + 2 => Err(ProtocolError::MissingCrlf),
        None => Ok(None),
    }
}

/// A decimal integer as RESP writes them: an optional `-`, then 1 to 19
/// digits; nothing else (no `+`, no spaces).
fn parse_int(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        value = value.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if negative { -value } else { value })
}

/// An inline command: one line, arguments split on spaces and tabs. Quoting
/// (`"a b"`) is not supported: clients send arrays; inline is for people
/// typing `PING` or `INCR order` into telnet or netcat.
fn parse_inline(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[..buf.len().min(limits.max_inline + 1)];
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        return if window.len() > limits.max_inline {
            Err(ProtocolError::InlineTooLong)
        } else {
            Ok(None)
        };
    };
    let line_end = if newline > 0 && buf[newline - 1] == b'\r' {
        newline - 1
    } else {
        newline
    };
    let mut at = 0;
    while at < line_end {
        if matches!(buf[at], b' ' | b'\t') {
            at += 1;
            continue;
        }
        let start = at;
        while at < line_end && !matches!(buf[at], b' ' | b'\t') {
            at += 1;
        }
        if args.len() == limits.max_args {
            return Err(ProtocolError::TooManyArgs(args.len() + 1));
        }
        args.push(start..at);
    }
    Ok(Some(newline + 1))
}

// ---- Replies ----

/// `+text\r\n`; `text` is one of this module's constants, never client input.
pub(crate) fn simple(out: &mut Vec<u8>, text: &str) {
    out.push(b'+');
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `-CODE message\r\n`, with any `\r` or `\n` in the message made a space so
/// the reply stays one line.
pub(crate) fn error(out: &mut Vec<u8>, code: &str, message: &str) {
    out.push(b'-');
    out.extend(
        code.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    if !message.is_empty() {
        out.push(b' ');
        out.extend(
            message
                .bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    }
    out.extend_from_slice(b"\r\n");
}

/// `:n\r\n`.
pub(crate) fn integer(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `$len\r\nbytes\r\n`.
pub(crate) fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// The protocol a connection speaks: RESP2 until it asks `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Resp2,
    Resp3,
}

impl Proto {
    /// The number `HELLO` and `CLIENT INFO` report.
    pub(crate) fn number(self) -> i64 {
        match self {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        }
    }
}

/// A null: RESP2's null bulk string `$-1`, RESP3's `_`.
pub(crate) fn null(out: &mut Vec<u8>, proto: Proto) {
    out.extend_from_slice(match proto {
        Proto::Resp2 => b"$-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// A null array (`EXEC` of an aborted transaction): RESP2's `*-1`, RESP3's `_`.
pub(crate) fn null_array(out: &mut Vec<u8>, proto: Proto) {
    out.extend_from_slice(match proto {
        Proto::Resp2 => b"*-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// A map of `n` pairs: RESP3's `%n`, in RESP2 an array of `2n` elements
/// (field, value, field, value...). The caller writes the pairs after it.
pub(crate) fn map(out: &mut Vec<u8>, n: usize, proto: Proto) {
    match proto {
        Proto::Resp2 => array(out, 2 * n),
        Proto::Resp3 => {
            out.push(b'%');
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// A set of `n` elements: RESP3's `~n`, in RESP2 an array.
pub(crate) fn set(out: &mut Vec<u8>, n: usize, proto: Proto) {
    match proto {
        Proto::Resp2 => array(out, n),
        Proto::Resp3 => {
            out.push(b'~');
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Text meant for people (`INFO`, `CLIENT INFO`): RESP3's verbatim string
/// `=len\r\ntxt:...`, in RESP2 a bulk string.
pub(crate) fn verbatim(out: &mut Vec<u8>, text: &[u8], proto: Proto) {
    match proto {
        Proto::Resp2 => bulk(out, text),
        Proto::Resp3 => {
            out.push(b'=');
            out.extend_from_slice(itoa::Buffer::new().format(text.len() + 4).as_bytes());
            out.extend_from_slice(b"\r\ntxt:");
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// `*n\r\n`; the caller writes the `n` elements after it.
pub(crate) fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parse's outcome with the arguments copied out: (bytes used, arguments).
    type Parsed = Result<Option<(usize, Vec<Vec<u8>>)>, ProtocolError>;

    fn parse(buf: &[u8]) -> Parsed {
        parse_with(buf, &LIMITS)
    }

    fn parse_with(buf: &[u8], limits: &Limits) -> Parsed {
        let mut args = Vec::new();
        Ok(parse_request(buf, limits, &mut args)?
            .map(|n| (n, args.iter().map(|r| buf[r.clone()].to_vec()).collect())))
    }

    fn strings(items: &[&str]) -> Vec<Vec<u8>> {
        items.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn arrays_of_bulk_strings_parse_and_every_prefix_is_incomplete() {
        let frame = b"*2\r\n$4\r\nINCR\r\n$5\r\norder\r\n";
        assert_eq!(
            parse(frame).unwrap(),
            Some((frame.len(), strings(&["INCR", "order"])))
        );
        for cut in 0..frame.len() {
            assert_eq!(parse(&frame[..cut]).unwrap(), None, "prefix {cut}");
        }
        // Two pipelined: the first is parsed, the rest left.
        let mut two = frame.to_vec();
        two.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(parse(&two).unwrap().unwrap().0, frame.len());
        // Binary-safe and empty bulk strings.
        let odd = b"*3\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n$0\r\n\r\n";
        assert_eq!(
            parse(odd).unwrap(),
            Some((
                odd.len(),
                vec![b"ECHO".to_vec(), b"a\r\nb".to_vec(), vec![]]
            ))
        );
        // Empty and null arrays are skipped.
        assert_eq!(parse(b"*0\r\n").unwrap(), Some((4, vec![])));
        assert_eq!(parse(b"*-1\r\n").unwrap(), Some((5, vec![])));
    }

    #[test]
    fn inline_commands_split_on_blanks() {
        assert_eq!(
            parse(b"INCR  order\r\n").unwrap(),
            Some((13, strings(&["INCR", "order"])))
        );
        assert_eq!(parse(b"PING\n").unwrap(), Some((5, strings(&["PING"]))));
        assert_eq!(parse(b"\r\n").unwrap(), Some((2, vec![])));
        assert_eq!(parse(b"PING").unwrap(), None);
    }

    #[test]
    fn malformed_requests_are_errors() {
        let cases: &[(&[u8], ProtocolError)] = &[
            (b"*x\r\n", ProtocolError::BadArrayLength),
            (b"*+1\r\n", ProtocolError::BadArrayLength),
            (b"*\r\n", ProtocolError::BadArrayLength),
            (b"*99999999999999999999\r\n", ProtocolError::BadArrayLength),
            (b"*1\r\n:1\r\n", ProtocolError::ExpectedBulk(b':')),
            (b"*1\r\n$x\r\n", ProtocolError::BadBulkLength),
            (b"*1\r\n$-1\r\n", ProtocolError::BadBulkLength),
            (b"*1\r\n$4\r\nPINGxx", ProtocolError::MissingCrlf),
            (b"*1\n", ProtocolError::MissingCrlf),
            (b"*1\rx", ProtocolError::MissingCrlf),
            (b"*111111111111111111111111", ProtocolError::MissingCrlf),
        ];
        for (input, expected) in cases {
            assert_eq!(
                parse(input),
                Err(*expected),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn limits_are_checked_before_the_data_arrives() {
        let small = Limits {
            max_bulk: 8,
            max_args: 3,
            max_inline: 16,
            max_frame: 12,
        };
        // Only the headers: the error comes without the data being sent.
        assert_eq!(
            parse_with(b"*4\r\n", &small),
            Err(ProtocolError::TooManyArgs(4))
        );
        assert_eq!(
            parse_with(b"*1\r\n$9\r\n", &small),
            Err(ProtocolError::BulkTooLong(9))
        );
        assert_eq!(
            parse_with(b"*2\r\n$8\r\n12345678\r\n$5\r\n", &small),
            Err(ProtocolError::FrameTooLong)
        );
        assert_eq!(
            parse_with(&[b'A'; 17], &small),
            Err(ProtocolError::InlineTooLong)
        );
        assert_eq!(parse_with(&[b'A'; 16], &small), Ok(None));
        assert_eq!(
            parse_with(b"a b c d\r\n", &small),
            Err(ProtocolError::TooManyArgs(4))
        );
        assert!(parse_with(b"*3\r\n$8\r\n12345678\r\n$4\r\n1234\r\n$0\r\n\r\n", &small).is_ok());
        // The real limits.
        let huge = format!("*1\r\n${}\r\n", LIMITS.max_bulk + 1);
        assert_eq!(
            parse(huge.as_bytes()),
            Err(ProtocolError::BulkTooLong(LIMITS.max_bulk + 1))
        );
    }

    #[test]
    fn random_bytes_never_panic() {
        // A small xorshift: deterministic, no dependency.
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = b"*$:+-\r\n0123456789 aZ";
        let mut args = Vec::new();
        for _ in 0..50_000 {
            let len = (next() % 40) as usize;
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if r % 4 == 0 {
                        r as u8
                    } else {
                        alphabet[(r >> 8) as usize % alphabet.len()]
                    }
                })
                .collect();
            if let Ok(Some(n)) = parse_request(&buf, &LIMITS, &mut args) {
                assert!(n <= buf.len());
                assert!(args.iter().all(|r| r.end <= n));
            }
        }
    }

    #[test]
    fn replies_encode_as_resp2() {
        let mut out = Vec::new();
        simple(&mut out, "PONG");
        integer(&mut out, -42);
        bulk(&mut out, b"hi");
        null(&mut out, Proto::Resp2);
        array(&mut out, 2);
        error(&mut out, "UNAVAILABLE", "a\r\nb");
        assert_eq!(
            out,
            b"+PONG\r\n:-42\r\n$2\r\nhi\r\n$-1\r\n*2\r\n-UNAVAILABLE a  b\r\n"
        );
    }

    #[test]
    fn typed_replies_encode_per_protocol() {
        // As redis-server 7 writes them (`HELLO 3` then `CLIENT GETNAME`,
        // `CONFIG GET save`, `COMMAND INFO`'s flags, `INFO`).
        let encode = |proto: Proto| {
            let mut out = Vec::new();
            null(&mut out, proto);
            null_array(&mut out, proto);
            map(&mut out, 1, proto);
            bulk(&mut out, b"save");
            bulk(&mut out, b"");
            set(&mut out, 1, proto);
            simple(&mut out, "fast");
            verbatim(&mut out, b"a:1", proto);
            out
        };
        assert_eq!(
            encode(Proto::Resp2),
            b"$-1\r\n*-1\r\n*2\r\n$4\r\nsave\r\n$0\r\n\r\n*1\r\n+fast\r\n$3\r\na:1\r\n"
        );
        assert_eq!(
            encode(Proto::Resp3),
            b"_\r\n_\r\n%1\r\n$4\r\nsave\r\n$0\r\n\r\n~1\r\n+fast\r\n=7\r\ntxt:a:1\r\n"
        );
    }
}

#[cfg(test)]
mod fuzz_tests;
