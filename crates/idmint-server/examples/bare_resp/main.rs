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
use std::sync::atomic::AtomicU64;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod reply;
use reply::answer;

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:6380".to_owned());
    let mut runtime = match std::env::args().nth(2).as_deref() {
        Some("current-thread") => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    runtime.enable_all().build()?.block_on(async move {
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
        answer(&mut input, &mut out, &counter);
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
    }
}
