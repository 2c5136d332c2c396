//! A baseline of the Redis-protocol benchmark (`scripts/bench-resp`): the
//! least a tokio server can do per command. It answers every command with the
//! next value of one atomic counter (`CONFIG GET` with an empty value, so
//! redis-benchmark's start-up probe passes), and checks nothing else. It runs
//! on the same runtime settings as `idmint serve` (tokio's multi-thread
//! runtime, one worker per core) and writes each read's replies in one write,
//! as idmint's RESP listener does.
//!
//! With it in the same run as redis-server and idmint, the table separates
//! what idmint's own code costs (idmint against this) from what the runtime
//! and the kernel cost on this machine (this against redis-server).
//!
//! `cargo run --release -p idmint-server --example bare_resp -- 127.0.0.1:6380`
//! (add `current-thread` for tokio's one-thread runtime, which leaves the
//! other core to the client: `scripts/bench-resp-probes` measures both).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:6380".to_owned());
    let mut runtime = match std::env::args().nth(2).as_deref() {
        Some("current-thread") => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    runtime
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            println!("{}", listener.local_addr()?);
            let counter = Arc::new(AtomicU64::new(0));
            loop {
                let (stream, _) = listener.accept().await?;
                stream.set_nodelay(true)?;
                tokio::spawn(serve(stream, counter.clone()));
            }
        })
}

async fn serve(mut stream: TcpStream, counter: Arc<AtomicU64>) -> std::io::Result<()> {
    let mut input = Vec::with_capacity(16 * 1024);
    let mut out = Vec::with_capacity(16 * 1024);
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        input.extend_from_slice(&buf[..n]);
        let mut at = 0;
        while let Some((end, is_config)) = command_end(&input[at..]) {
            if is_config {
                // redis-benchmark asks for `save` and `appendonly`: a name and
                // an empty value each time is enough.
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
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
    }
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
