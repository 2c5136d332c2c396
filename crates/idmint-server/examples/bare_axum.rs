//! The baseline of the HTTP benchmark (`scripts/bench-http`): a bare axum
//! handler returning a constant, on the same runtime settings as `idmint
//! serve` (tokio's multi-thread runtime, one worker per core). idmint's
//! single-ID endpoint is measured against it in the same run.
//!
//! `cargo run --release -p idmint-server --example bare_axum -- 127.0.0.1:8081`

use axum::Router;
use axum::routing::get;

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".to_owned());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let app = Router::new().route(
                "/api/snowflake/get/{key}",
                get(|| async { "1050118621198921728" }),
            );
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            println!("{}", listener.local_addr()?);
            axum::serve(listener, app).await
        })
}
