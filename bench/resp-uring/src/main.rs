//! A bare Redis-protocol responder on io_uring: the baseline that asks
//! whether a different I/O model lets a server beat redis-server by more on
//! this machine than tokio's epoll does (`scripts/bench-resp-probes`).
//!
//! It does what `crates/idmint-server/examples/bare_resp/` does (every
//! command answered with the next value of one atomic counter, `CONFIG` with
//! an empty value) on monoio's io_uring driver, thread per core: each thread
//! runs its own ring and accepts on its own `SO_REUSEPORT` listener.
//!
//! `cargo run --release --manifest-path bench/resp-uring/Cargo.toml -- 127.0.0.1:6390 2`
//! (a fixed address, since every thread binds it; then the thread count).
//! It prints the address once every thread listens.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Barrier};

use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{ListenerOpts, TcpListener, TcpStream};

// The same reply step as the tokio baseline, so the two differ only in I/O.
#[path = "../../../crates/idmint-server/examples/bare_resp/reply.rs"]
mod reply;
use reply::answer;

fn main() {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:6390".to_owned())
        .parse()
        .expect("an address like 127.0.0.1:6390");
    let threads: usize = args
        .next()
        .map_or(2, |t| t.parse().expect("a thread count"));
    let counter = Arc::new(AtomicU64::new(0));
    let listening = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (counter, listening) = (counter.clone(), listening.clone());
            std::thread::spawn(move || {
                let mut runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                    .with_entries(1024)
                    .build()
                    .expect("an io_uring runtime (is io_uring enabled?)");
                runtime.block_on(async move {
                    let opts = ListenerOpts::new().reuse_port(true);
                    let listener = TcpListener::bind_with_config(addr, &opts).expect("bind");
                    listening.wait();
                    loop {
                        // An accept error ends the thread; main reports it.
                        let (stream, _) = listener.accept().await?;
                        stream.set_nodelay(true)?;
                        monoio::spawn(serve(stream, counter.clone()));
                    }
                })
            })
        })
        .collect();
    listening.wait();
    println!("{addr}");
    for handle in handles {
        let ended: std::io::Result<()> = handle.join().expect("a responder thread");
        if let Err(e) = ended {
            eprintln!("resp-uring: {e}");
        }
    }
}

/// One connection: read what has arrived, answer every whole command in it
/// with one write, as idmint's RESP listener and the tokio baseline do.
async fn serve(mut stream: TcpStream, counter: Arc<AtomicU64>) -> std::io::Result<()> {
    let mut input: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    // io_uring owns the buffer while a read is in flight, so it is moved in
    // and handed back.
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        buf.clear();
        let (read, back) = stream.read(buf).await;
        buf = back;
        if read? == 0 {
            return Ok(());
        }
        input.extend_from_slice(&buf);
        answer(&mut input, &mut out, &counter);
        if !out.is_empty() {
            let (written, back) = stream.write_all(out).await;
            out = back;
            written?;
            out.clear();
        }
    }
}
