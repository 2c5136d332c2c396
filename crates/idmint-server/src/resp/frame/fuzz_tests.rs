//! Fuzz tests of [`parse_request`]: random bytes, valid frames (encoded with
//! this module's own [`array`] and [`bulk`]) and mutations of them (declared
//! lengths negative, huge, past `i64`, not digits; bytes flipped, dropped or
//! doubled), huge and nested arrays, inline commands.
//!
//! Every outcome is checked against the parser's promises: a parse returns
//! within [`BOUND`]; a whole request lies within the buffer and within the
//! limits; a request with anything after it parses the same; parsing bytes as
//! they arrive (every prefix) agrees with parsing them at once; an incomplete
//! request never keeps more than [`max_pending`] bytes waiting; declared
//! lengths over the limits are refused from their header, before any data;
//! error messages are one line.
//!
//! proptest stands in for cargo-fuzz, which needs a nightly toolchain this
//! project's machines cannot fetch. `scripts/fuzz` runs every `fuzz_` test
//! with a large `PROPTEST_CASES`.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

use super::*;

/// `cases` per test, unless `PROPTEST_CASES` says otherwise (`scripts/fuzz`).
fn cases(cases: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() {
        ProptestConfig::default()
    } else {
        ProptestConfig::with_cases(cases)
    }
}

/// The longest one parse may take: generous for a debug build on a busy
/// machine; the parser is linear in what it looks at.
const BOUND: Duration = Duration::from_millis(50);

/// Limits small enough that random input runs into every one of them.
const SMALL: Limits = Limits {
    max_bulk: 16,
    max_args: 4,
    max_inline: 32,
    max_frame: 40,
};

/// A parse's outcome with the arguments copied out: (bytes used, arguments).
type Parsed = Result<Option<(usize, Vec<Vec<u8>>)>, ProtocolError>;

/// Parses `buf`, failing the case when it takes longer than [`BOUND`] (a
/// slow parse is timed twice more and the fastest counts, so a scheduler
/// stall is not taken for a slow input), or when the argument vector grew
/// past what `max_args` arguments need.
fn parse(buf: &[u8], limits: &Limits) -> Result<Parsed, TestCaseError> {
    let mut args = Vec::new();
    let mut fastest = Duration::MAX;
    let mut outcome = Ok(None);
    for _ in 0..3 {
        let start = Instant::now();
        outcome = parse_request(buf, limits, &mut args);
        fastest = fastest.min(start.elapsed());
        if fastest <= BOUND {
            break;
        }
    }
    prop_assert!(
        fastest <= BOUND,
        "parse took {fastest:?} on {} bytes",
        buf.len()
    );
    prop_assert!(
        args.capacity() <= limits.max_args.next_power_of_two().max(4),
        "{} argument slots for at most {} arguments",
        args.capacity(),
        limits.max_args
    );
    Ok(outcome
        .map(|done| done.map(|n| (n, args.iter().map(|r| buf[r.clone()].to_vec()).collect()))))
}

/// The most bytes an incomplete request may keep buffered: an inline line up
/// to `max_inline`, or an array's header, `max_args` element headers with
/// their line ends, and `max_frame` bytes of data.
fn max_pending(limits: &Limits) -> usize {
    let header = 1 + MAX_HEADER + 2;
    limits
        .max_inline
        .max(header + limits.max_args * (header + 2) + limits.max_frame)
}

/// Checks one outcome against what `parse_request` promises for `buf`.
fn check_outcome(buf: &[u8], limits: &Limits, outcome: &Parsed) -> Result<(), TestCaseError> {
    match outcome {
        Ok(Some((n, args))) => {
            prop_assert!(*n > 0 && *n <= buf.len(), "used {n} of {} bytes", buf.len());
            prop_assert!(args.len() <= limits.max_args);
            if buf[0] == b'*' {
                prop_assert!(args.iter().all(|a| a.len() <= limits.max_bulk));
                prop_assert!(args.iter().map(Vec::len).sum::<usize>() <= limits.max_frame);
            } else {
                prop_assert!(
                    args.iter()
                        .all(|a| !a.is_empty()
                            && !a.iter().any(|b| matches!(b, b' ' | b'\t' | b'\n')))
                );
            }
            // What follows a whole request does not change it.
            let mut longer = buf[..*n].to_vec();
            prop_assert_eq!(&parse(&longer, limits)?, outcome);
            longer.extend_from_slice(b"*\r\n$-1x\r\n\0garbage");
            prop_assert_eq!(&parse(&longer, limits)?, outcome);
        }
        Ok(None) => prop_assert!(
            buf.len() <= max_pending(limits),
            "{} bytes left waiting, more than {}",
            buf.len(),
            max_pending(limits)
        ),
        Err(e) => {
            let message = e.to_string();
            prop_assert!(!message.is_empty());
            prop_assert!(!message.contains(['\r', '\n']), "{message:?}");
        }
    }
    Ok(())
}

/// Bytes arriving one read at a time: every prefix parses as incomplete, or
/// exactly as the whole buffer does (a whole request once it is all there; an
/// error once the bytes that make it one are).
fn check_incremental(buf: &[u8], limits: &Limits, whole: &Parsed) -> Result<(), TestCaseError> {
    for cut in 0..buf.len() {
        let prefix = parse(&buf[..cut], limits)?;
        match (whole, &prefix) {
            (_, Ok(None)) => {}
            (Ok(Some((n, _))), _) if cut >= *n => prop_assert_eq!(&prefix, whole),
            (Err(_), Err(_)) => prop_assert_eq!(&prefix, whole, "at byte {}", cut),
            _ => prop_assert!(
                false,
                "the first {cut} bytes parse as {prefix:?}, all {} as {whole:?}",
                buf.len()
            ),
        }
    }
    Ok(())
}

/// Parses `buf` whole and byte by byte, checks both, and gives the outcome.
fn checked(buf: &[u8], limits: &Limits) -> Result<Parsed, TestCaseError> {
    let whole = parse(buf, limits)?;
    check_outcome(buf, limits, &whole)?;
    check_incremental(buf, limits, &whole)?;
    Ok(whole)
}

/// As [`checked`], for input whose outcome the caller doesn't predict.
fn check(buf: &[u8], limits: &Limits) -> Result<(), TestCaseError> {
    checked(buf, limits).map(drop)
}

/// A request as a client sends it: an array of bulk strings.
fn encode(command: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    array(&mut out, command.len());
    for arg in command {
        bulk(&mut out, arg);
    }
    out
}

fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let arg = prop_oneof![
        "[A-Za-z.:_-]{1,12}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..20),
    ];
    prop::collection::vec(arg, 1..6)
}

/// A declared length a client could write instead of the true one.
fn bad_length() -> impl Strategy<Value = String> {
    prop_oneof![
        select(
            &[
                "-1",
                "-2",
                "-0",
                "0",
                "",
                "+5",
                " 5",
                "5 ",
                "1a",
                "0x10",
                "00000000000000000005",
                "000000000000000000005",
                "65536",
                "65537",
                "1024",
                "1025",
                "1048577",
                "1000000000",
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "-9223372036854775809",
                "99999999999999999999",
                "18446744073709551616",
                "111111111111111111111111111111",
            ][..]
        )
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        (0u64..70_000).prop_map(|n| n.to_string()),
    ]
}

/// One byte-level edit of an encoded request.
#[derive(Debug, Clone)]
enum Edit {
    /// Write this instead of the digits after the n-th `*` or `$`.
    Length(usize, String),
    /// Flip a bit of a byte.
    Flip(usize, u8),
    /// Drop a byte.
    Drop(usize),
    /// Insert a byte.
    Insert(usize, u8),
    /// Double a stretch of bytes (a CRLF, a header, an element).
    Double(usize, usize),
    /// Cut the buffer here.
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<usize>(), bad_length()).prop_map(|(at, len)| Edit::Length(at, len)),
        1 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Edit::Flip(at, bit)),
        1 => any::<usize>().prop_map(Edit::Drop),
        1 => (any::<usize>(), select(&b"*$\r\n-:+ 0\0"[..])).prop_map(|(at, b)| Edit::Insert(at, b)),
        1 => (any::<usize>(), 1usize..12).prop_map(|(at, n)| Edit::Double(at, n)),
        1 => any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(frame: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut buf = frame.to_vec();
    for edit in edits {
        let len = buf.len();
        let at = |p: usize| p % (len + 1);
        match edit {
            Edit::Length(n, text) => {
                let headers: Vec<usize> = (0..len)
                    .filter(|&i| matches!(buf[i], b'*' | b'$'))
                    .collect();
                if let Some(&start) = headers.get(n % headers.len().max(1)) {
                    let start = start + 1;
                    let end = buf[start..]
                        .iter()
                        .position(|&b| b == b'\r')
                        .map_or(len, |i| start + i);
                    buf.splice(start..end, text.bytes());
                }
            }
            Edit::Flip(p, bit) => {
                if len > 0 {
                    buf[p % len] ^= 1 << bit;
                }
            }
            Edit::Drop(p) => {
                if len > 0 {
                    buf.remove(p % len);
                }
            }
            Edit::Insert(p, b) => buf.insert(at(*p), *b),
            Edit::Double(p, n) => {
                let start = at(*p);
                let end = (start + n).min(len);
                let copy = buf[start..end].to_vec();
                buf.splice(end..end, copy);
            }
            Edit::Truncate(p) => buf.truncate(at(*p)),
        }
    }
    buf
}

fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![Just(LIMITS), Just(SMALL)]
}

proptest! {
    #![proptest_config(cases(4000))]

    #[test]
    fn fuzz_resp_random_bytes(
        buf in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..96),
            prop::collection::vec(select(&b"*$:+-\r\n0123456789 \taZ"[..]), 0..96),
        ],
        limits in limits(),
    ) {
        check(&buf, &limits)?;
    }

    /// Valid requests, pipelined, parse to the commands that were encoded,
    /// one after the other, whole or byte by byte.
    #[test]
    fn fuzz_resp_frames_round_trip(commands in prop::collection::vec(command(), 1..4)) {
        let frames: Vec<Vec<u8>> = commands.iter().map(|c| encode(c)).collect();
        let mut buf = frames.concat();
        for (command, frame) in commands.iter().zip(&frames) {
            let parsed = checked(&buf, &LIMITS)?;
            prop_assert_eq!(parsed, Ok(Some((frame.len(), command.clone()))));
            buf.drain(..frame.len());
        }
        prop_assert!(buf.is_empty());
    }

    /// Inline commands split on runs of spaces and tabs.
    #[test]
    fn fuzz_resp_inline_round_trip(
        words in prop::collection::vec("[A-Za-z0-9.:_-]{1,10}", 1..6),
        blanks in prop::collection::vec("[ \t]{1,3}", 6),
        lead in "[ \t]{0,2}",
        crlf in any::<bool>(),
    ) {
        let mut line = lead.clone();
        for (word, blank) in words.iter().zip(&blanks) {
            line.push_str(word);
            line.push_str(blank);
        }
        line.push_str(if crlf { "\r\n" } else { "\n" });
        let expected: Vec<Vec<u8>> = words.iter().map(|w| w.clone().into_bytes()).collect();
        prop_assert_eq!(checked(line.as_bytes(), &LIMITS)?, Ok(Some((line.len(), expected))));
    }

    /// Valid requests with byte-level edits: whatever comes out keeps the
    /// parser's promises.
    #[test]
    fn fuzz_resp_mutated_frames(
        command in command(),
        edits in prop::collection::vec(edit(), 1..4),
        limits in limits(),
    ) {
        let buf = apply(&encode(&command), &edits);
        check(&buf, &limits)?;
    }

    /// A declared length past a limit is refused from its header alone: the
    /// data never has to arrive, so nothing is buffered or allocated for it.
    #[test]
    fn fuzz_resp_declared_lengths_refused_before_data(
        declared in prop_oneof![0u64..200_000, any::<u64>()],
        limits in limits(),
    ) {
        let bulk = format!("*1\r\n${declared}\r\n");
        let expected = match usize::try_from(declared) {
            Ok(len) if declared <= i64::MAX as u64 && len > limits.max_bulk => {
                Err(ProtocolError::BulkTooLong(len))
            }
            _ if declared > i64::MAX as u64 => Err(ProtocolError::BadBulkLength),
            _ => Ok(None),
        };
        prop_assert_eq!(parse(bulk.as_bytes(), &limits)?, expected);

        let args = format!("*{declared}\r\n");
        let expected = match usize::try_from(declared) {
            _ if declared > i64::MAX as u64 => Err(ProtocolError::BadArrayLength),
            Ok(0) => Ok(Some((args.len(), vec![]))),
            Ok(n) if n > limits.max_args => Err(ProtocolError::TooManyArgs(n)),
            _ => Ok(None),
        };
        prop_assert_eq!(parse(args.as_bytes(), &limits)?, expected);
    }

    /// Arguments that fit one by one but not together are refused at the
    /// header of the one that passes `max_frame`, before its data.
    #[test]
    fn fuzz_resp_frame_total_refused_before_data(lens in prop::collection::vec(0usize..=16, 1..=4)) {
        let mut buf = format!("*{}\r\n", lens.len()).into_bytes();
        let mut total = 0;
        for &len in &lens {
            buf.extend_from_slice(format!("${len}\r\n").as_bytes());
            total += len;
            if total > SMALL.max_frame {
                prop_assert_eq!(parse(&buf, &SMALL)?, Err(ProtocolError::FrameTooLong));
                return Ok(());
            }
            buf.extend(std::iter::repeat_n(b'x', len));
            buf.extend_from_slice(b"\r\n");
        }
        let parsed = checked(&buf, &SMALL)?;
        prop_assert_eq!(parsed.map(|done| done.map(|(n, _)| n)), Ok(Some(buf.len())));
    }

    /// Huge arrays: up to `max_args` empty strings parse, one more is refused
    /// at the header. Nested arrays are not requests.
    #[test]
    fn fuzz_resp_huge_and_nested_arrays(n in 0usize..=1100, depth in 2usize..64) {
        let mut buf = format!("*{n}\r\n").into_bytes();
        for _ in 0..n {
            buf.extend_from_slice(b"$0\r\n\r\n");
        }
        let parsed = parse(&buf, &LIMITS)?;
        check_outcome(&buf, &LIMITS, &parsed)?;
        if n > LIMITS.max_args {
            prop_assert_eq!(parsed, Err(ProtocolError::TooManyArgs(n)));
        } else {
            prop_assert_eq!(parsed, Ok(Some((buf.len(), vec![Vec::new(); n]))));
        }

        let nested = "*1\r\n".repeat(depth) + "$4\r\nPING\r\n";
        let parsed = checked(nested.as_bytes(), &LIMITS)?;
        prop_assert_eq!(parsed, Err(ProtocolError::ExpectedBulk(b'*')));
    }
}
