//! `idmint serve`: the server. Everything but the command line lives in
//! `idmint-server`; this module reads flags, loads the config, sets up logging
//! and signals, and hands over.
//!
//! Precedence, lowest first: the embedded defaults, `--config FILE`, the
//! `IDMINT_…` environment variables, then the flags `--data-dir`,
//! `--http-addr`, `--resp-addr` and `--grpc-addr`.
//!
//! With `[tls]` set, `SIGHUP` makes the server read its certificate and key
//! again (connections already open keep going); without it, `SIGHUP` keeps
//! its default action.
//!
//! # The ready file
//! `--ready-file FILE` is written (whole, by a rename) once the server
//! serves. Its first line is the HTTP address, alone, so a reader of one line
//! keeps working; each other listener follows on a line `NAME=ADDR`:
//!
//! ```text
//! 127.0.0.1:41237
//! resp=127.0.0.1:38911
//! grpc=127.0.0.1:40529
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use idmint_node::Config;
use idmint_server::{Server, TlsReload};

use super::bad_input;

/// Flags of `idmint serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The TOML config file (default: none, the embedded default: a `file`
    /// worker lease and a SQLite segment store in ./idmint-data, on loopback).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(flatten)]
    overrides: ConfigFlags,

    /// Once serving, write the addresses to this file, for scripts and tests
    /// that start the server on port 0: the HTTP address (`127.0.0.1:PORT`)
    /// on the first line, then `resp=ADDR` when RESP is on and `grpc=ADDR`
    /// when gRPC is on. Written whole (a temporary file renamed over it);
    /// a file left by an earlier run is removed first, and this one when the
    /// server exits, so the file names a server that is up.
    #[arg(long, value_name = "FILE")]
    ready_file: Option<PathBuf>,

    /// The log lines' format on stderr: `text` for people, or `json`, one
    /// object a line (`timestamp`, `level`, `fields.message`, `target`,
    /// `span`s), for log shippers.
    #[arg(
        long,
        value_name = "FORMAT",
        env = "IDMINT_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
}

/// The flags that override config keys, shared by `idmint serve` and
/// `idmint config check` so that both accept the same configs.
#[derive(Debug, Default, Args)]
pub struct ConfigFlags {
    /// The data directory (overrides server.data_dir).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Where HTTP listens (overrides server.http_addr; port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    http_addr: Option<SocketAddr>,

    /// Where the Redis-protocol listener (RESP2, and RESP3 after HELLO 3) listens (overrides
    /// server.resp_addr; off unless set; port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    resp_addr: Option<SocketAddr>,

    /// Where the gRPC listener (idmint.v1.IdService) listens (overrides
    /// server.grpc_addr; off unless set; port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    grpc_addr: Option<SocketAddr>,
}

impl ConfigFlags {
    /// Applies the flags given to `config`.
    pub fn apply(self, config: &mut Config) {
        if let Some(dir) = self.data_dir {
            config.server.data_dir = dir;
        }
        if let Some(addr) = self.http_addr {
            config.server.http_addr = addr;
        }
        if let Some(addr) = self.resp_addr {
            config.server.resp_addr = Some(addr);
        }
        if let Some(addr) = self.grpc_addr {
            config.server.grpc_addr = Some(addr);
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One line of text per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Runs the server until SIGTERM or SIGINT.
pub fn run(args: ServeArgs) -> Result<()> {
    init_logging(args.log_format);
    // Before anything can fail: a script waiting for the file must not read
    // the address of a server that is gone.
    let _ready_file = args
        .ready_file
        .as_deref()
        .map(ReadyFile::clear)
        .transpose()?;
    let overrides = args.overrides;
    let config = checked_config(args.config.as_deref(), |config| overrides.apply(config))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let server = Server::start(config).await.map_err(|e| {
            if e.is_config() {
                bad_input(format!("config: {e}"))
            } else {
                // Its message already ends with its cause's; the chain would
                // print the cause twice.
                anyhow::anyhow!("starting the server: {e}")
            }
        })?;
        // The task ends with the process; SIGHUP keeps its default (exit)
        // when TLS is off.
        if let Some(reload) = server.tls_reload() {
            reload_on_sighup(reload);
        }
        let stop = shutdown_signal();
        if let Some(path) = &args.ready_file {
            let mut text = format!("{}\n", server.local_addr());
            if let Some(addr) = server.resp_addr() {
                text.push_str(&format!("resp={addr}\n"));
            }
            if let Some(addr) = server.grpc_addr() {
                text.push_str(&format!("grpc={addr}\n"));
            }
            write_ready_file(path, &text)?;
        }
        server.serve(stop).await?;
        Ok(())
    })
}

/// The config `serve` runs on: the defaults, `file`, the `IDMINT_…`
/// environment, then `flags` (the command line's overrides), checked by
/// [`idmint_node::check`] (everything `start` checks before any I/O). `idmint
/// config check` loads through here too, so it accepts exactly what `serve`
/// accepts.
///
/// # Errors
/// Bad input (exit 2): one line naming the key and the file or variable its
/// value came from.
pub(super) fn checked_config(
    file: Option<&Path>,
    flags: impl FnOnce(&mut Config),
) -> Result<Config> {
    let mut config =
        Config::load(file, std::env::vars()).map_err(|e| bad_input(format!("config: {e}")))?;
    flags(&mut config);
    idmint_node::check(&config)
        .map_err(|e| bad_input(format!("config: {}", e.located(file, std::env::vars()))))?;
    // The certificate and key files too: local reads, no network.
    if let Some(tls) = &config.tls {
        idmint_server::check_tls_files(tls).map_err(|e| bad_input(format!("config: {e}")))?;
    }
    Ok(config)
}

/// Logs to stderr in `format`, filtered by `IDMINT_LOG` (or `RUST_LOG`),
/// `info` by default.
pub(crate) fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("IDMINT_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_owned());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Written whole (temporary file, then rename), so a reader never sees half an address.
fn write_ready_file(path: &Path, text: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("writing --ready-file {}", path.display()))
}

/// Owns `--ready-file`'s path for the run: clears a file left behind when
/// the run begins and removes the one it wrote when the run ends, also on a
/// failed start or a panic (a SIGKILL leaves it; the next run clears it).
struct ReadyFile(PathBuf);

impl ReadyFile {
    fn clear(path: &Path) -> Result<ReadyFile> {
        remove_if_there(path)
            .with_context(|| format!("removing the old --ready-file {}", path.display()))?;
        Ok(ReadyFile(path.to_owned()))
    }
}

impl Drop for ReadyFile {
    fn drop(&mut self) {
        if let Err(e) = remove_if_there(&self.0) {
            tracing::warn!(path = %self.0.display(), error = %e, "cannot remove --ready-file");
        }
    }
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Asks the server to read its TLS files again on every SIGHUP.
fn reload_on_sighup(reload: TlsReload) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP received: reloading the TLS certificate");
                        reload.request();
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; TLS files reload only when they change");
            }
        }
    }
    #[cfg(not(unix))]
    drop(reload);
}

/// Listens for SIGTERM and SIGINT (Ctrl-C) from the call on; the future
/// completes on the first.
///
/// Called before the ready file is written: a signal sent as soon as it
/// says the server is up must stop the server cleanly, not kill it (the
/// signal's default action). An `async fn` would listen only once first
/// polled, which `Server::serve` does after building the router.
#[cfg(unix)]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = int.recv() => tracing::info!("SIGINT received"),
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM and SIGINT; only Ctrl-C stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Completes on the first Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
