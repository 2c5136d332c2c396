//! The reply step both bare RESP responders share (this example and
//! `bench/resp-uring`, which includes this file by path): whole commands in,
//! replies out, no I/O.

use std::sync::atomic::{AtomicU64, Ordering};

/// Answers every whole command at the front of `input` (removing it) by
/// appending its reply to `out`: the next value of `counter`, or for `CONFIG`
/// a name and an empty value (redis-benchmark asks for `save` and
/// `appendonly` at start-up; that is enough). A command still arriving stays
/// in `input`.
pub fn answer(input: &mut Vec<u8>, out: &mut Vec<u8>, counter: &AtomicU64) {
    let mut at = 0;
    while let Some((end, is_config)) = command_end(&input[at..]) {
        if is_config {
            out.extend_from_slice(b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
        } else {
            let id = counter.fetch_add(1, Ordering::Relaxed) + 1;
            out.push(b':');
            out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        at += end;
    }
    input.drain(..at);
}

/// The length of the whole multibulk command at the front of `buf`, and
/// whether it is `CONFIG`; `None` until it has all arrived. Malformed input
/// ends the connection by never completing, which a baseline may do.
fn command_end(buf: &[u8]) -> Option<(usize, bool)> {
    let (args, mut at) = number_line(buf, b'*')?;
    let mut is_config = false;
    for i in 0..args {
        let (len, after) = number_line(&buf[at..], b'$')?;
        let start = at + after;
        let end = start + len + 2;
        if buf.len() < end {
            return None;
        }
        if i == 0 {
            is_config = buf[start..start + len].eq_ignore_ascii_case(b"CONFIG");
        }
        at = end;
    }
    Some((at, is_config))
}

/// `<tag><digits>\r\n` at the front of `buf`: the number and the bytes it took.
fn number_line(buf: &[u8], tag: u8) -> Option<(usize, usize)> {
    if buf.first() != Some(&tag) {
        return None;
    }
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let digits = std::str::from_utf8(&buf[1..nl.checked_sub(1)?]).ok()?;
    Some((digits.parse().ok()?, nl + 1))
}
