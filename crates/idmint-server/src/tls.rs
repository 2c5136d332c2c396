//! TLS on the listeners: one certificate for HTTP, gRPC and RESP, loaded and
//! checked at start, reloaded without dropping a connection.
//!
//! # One acceptor, three configurations
//! [`Tls`] holds the current [`Loaded`] set in an [`ArcSwap`]: the
//! certificate and key read from `tls.cert` and `tls.key`, the client CA
//! verifier (`tls.client_ca`, mutual TLS), and a rustls [`ServerConfig`] per
//! listener that differ only in ALPN (`http/1.1` for HTTP, `h2` for gRPC,
//! none for RESP, which has no ALPN name). Each handshake loads the current
//! set (one atomic load and an `Arc` clone): a reload swaps in a whole new
//! set, which new handshakes use, while connections already open keep the
//! session they made.
//!
//! # Reload
//! A task ([`TlsWatcher`], owned by the server) reloads when asked
//! ([`TlsReload::request`], which `idmint serve` calls on `SIGHUP`) and when
//! the modification time or size of one of the files changed (checked every
//! `tls.poll_interval`). The files followers forward to the oracle's leader
//! with (`monotonic.forward_*`, [`Forwarding`]) are part of the set: read,
//! checked and reloaded with it. A new set is checked as at start (readable, a
//! certificate, a key matching it, not expired); one that fails is logged,
//! counted in `idmint_tls_reload_failures_total` and shown on `/v1/status`,
//! and the old set keeps serving. Only that task reloads, so reloads never
//! race.
//!
//! # Handshakes
//! Each listener shakes hands inside the connection's own task, bounded by
//! `server.read_timeout` ([`accept`]), so a slow or silent client never holds
//! the accept loop. A client that sends plain text to a TLS port (its first
//! byte isn't a TLS handshake record's) is told so in its own protocol where
//! there is one (HTTP 400, a RESP error) and disconnected.
//!
//! # Crypto provider
//! rustls on `ring`, passed explicitly to every configuration (never the
//! process-wide default, which another library in the process could set):
//! `aws-lc-rs` would need cmake and nasm on every machine that builds idmint.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tonic::transport::server::{Connected, TcpConnectInfo};

use idmint_node::config::TlsSection;

/// Why the TLS files can't be used, naming the config key and the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file can't be read.
    #[error("cannot read {key} {path}: {source}")]
    Read {
        /// `tls.cert`, `tls.key` or `tls.client_ca`.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file was read but holds nothing usable: no certificate, no key, a
    /// PEM or certificate that doesn't parse.
    #[error("{key} {path}: {message}")]
    Invalid {
        /// `tls.cert`, `tls.key` or `tls.client_ca`.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The key is not the certificate's.
    #[error("tls.key {key} is not the private key of the certificate in tls.cert {cert}")]
    KeyMismatch {
        /// `tls.cert`.
        cert: PathBuf,
        /// `tls.key`.
        key: PathBuf,
    },
    /// The certificate's validity ended.
    #[error("tls.cert {path}: the certificate expired at {not_after}; renew it")]
    Expired {
        /// `tls.cert`.
        path: PathBuf,
        /// Its `notAfter`, RFC 3339.
        not_after: String,
    },
}

/// Reads and checks the files `section` names, as `Server::start` does,
/// without serving them: for a config check before a start or a deploy.
///
/// # Errors
/// As the start's: [`TlsError`] naming the key and file.
pub fn check_files(section: &TlsSection) -> Result<(), TlsError> {
    Tls::load(section, None).map(|_| ())
}

/// A listener that can speak TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Surface {
    Http,
    Grpc,
    Resp,
}

impl Surface {
    /// The listener's name in logs.
    fn name(self) -> &'static str {
        match self {
            Surface::Http => "HTTP",
            Surface::Grpc => "gRPC",
            Surface::Resp => "RESP",
        }
    }

    fn index(self) -> usize {
        match self {
            Surface::Http => 0,
            Surface::Grpc => 1,
            Surface::Resp => 2,
        }
    }

    /// The ALPN names the listener offers: HTTP/1.1 only on the HTTP port
    /// (it serves no HTTP/2), `h2` on gRPC's (gRPC clients insist on it), and
    /// none on RESP's.
    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Surface::Http => vec![b"http/1.1".to_vec()],
            Surface::Grpc => vec![b"h2".to_vec()],
            Surface::Resp => Vec::new(),
        }
    }
}

/// What the status page and the metrics say of the certificate in use.
#[derive(Debug, Clone)]
pub(crate) struct CertInfo {
    /// The subject's distinguished name.
    pub subject: String,
    /// The serial number, hex bytes joined by `:` (as `openssl x509 -serial`
    /// shows it, lower case).
    pub serial: String,
    /// `notAfter`, seconds since the Unix epoch.
    pub not_after: i64,
    /// When this set was loaded.
    pub loaded_at: jiff::Timestamp,
}

/// One loaded set: a configuration per listener, and what it serves.
struct Loaded {
    configs: [Arc<ServerConfig>; 3],
    cert: CertInfo,
    /// What followers forward to the oracle's leader with
    /// (`monotonic.forward_*`), when configured; read and reloaded with the
    /// rest.
    forward: Option<Forwarding>,
}

/// The client side of forwarding to the oracle's leader over TLS: the
/// config made from `monotonic.forward_ca` (and `forward_cert`/`forward_key`),
/// and which load it came from, so the forwarder sees a reload.
#[derive(Debug, Clone)]
pub(crate) struct Forwarding {
    /// Changes with every load that read the files.
    pub generation: u64,
    /// The tonic client config.
    pub config: tonic::transport::ClientTlsConfig,
}

/// The files of [`Forwarding`].
#[derive(Debug, Clone)]
pub(crate) struct ForwardFiles {
    /// `monotonic.forward_ca`.
    pub ca: PathBuf,
    /// `monotonic.forward_cert` and `monotonic.forward_key`.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// The files' modification times and sizes, to see them change.
/// Per file: its modification time, length and inode. The inode is what
/// tells a file renamed into place from the one before it when both were
/// written within one tick of the kernel's coarse file clock with the same
/// length (a renewed certificate usually has the old one's length).
type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

/// The TLS state the listeners share. See the [module docs](self).
pub(crate) struct Tls {
    files: Files,
    /// Which listeners use TLS, by [`Surface::index`].
    enabled: [bool; 3],
    poll_interval: Duration,
    current: ArcSwap<Loaded>,
    stamp: Mutex<Stamp>,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    /// The last failed reload's time and error, cleared by a good one.
    last_error: Mutex<Option<(jiff::Timestamp, String)>>,
    /// Wakes the watcher for a reload (`SIGHUP`).
    wake: tokio::sync::Notify,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Tls {
    /// Reads and checks the files `section` names.
    ///
    /// # Errors
    /// [`TlsError`] naming the key and file: unreadable, no certificate or
    /// key in it, a key not the certificate's, an expired certificate, a
    /// client CA file without a usable CA certificate.
    pub(crate) fn load(
        section: &TlsSection,
        forward: Option<ForwardFiles>,
    ) -> Result<Tls, TlsError> {
        // `Config::validate` refuses these first, with the config's words.
        let missing = |key: &'static str| TlsError::Invalid {
            key,
            path: PathBuf::from("(unset)"),
            message: "[tls] needs this file".to_owned(),
        };
        let files = Files {
            cert: section.cert.clone().ok_or_else(|| missing("tls.cert"))?,
            key: section.key.clone().ok_or_else(|| missing("tls.key"))?,
            client_ca: section.client_ca.clone(),
            forward,
        };
        let stamp = files.stamp();
        let loaded = files.read()?;
        Ok(Tls {
            files,
            enabled: [section.http, section.grpc, section.resp],
            poll_interval: section.poll_interval,
            current: ArcSwap::from_pointee(loaded),
            stamp: Mutex::new(stamp),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            last_error: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// The acceptor for `surface`'s next handshake, with the set in use now
    /// (listeners ask only when [`Tls::enabled`] says they speak TLS).
    pub(crate) fn acceptor(&self, surface: Surface) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current.load().configs[surface.index()].clone())
    }

    /// Whether `surface` speaks TLS.
    pub(crate) fn enabled(&self, surface: Surface) -> bool {
        self.enabled[surface.index()]
    }

    /// What followers forward to the leader with now, when configured:
    /// a reload (`SIGHUP`, or the files changed) brings a new generation.
    pub(crate) fn forwarding(&self) -> Option<Forwarding> {
        self.current.load().forward.clone()
    }

    /// The certificate in use.
    pub(crate) fn cert(&self) -> CertInfo {
        self.current.load().cert.clone()
    }

    /// Good reloads and failed ones since start.
    pub(crate) fn reload_counts(&self) -> (u64, u64) {
        (
            self.reloads.load(Ordering::Relaxed),
            self.reload_failures.load(Ordering::Relaxed),
        )
    }

    /// The last failed reload, unless a good one came after it.
    pub(crate) fn last_error(&self) -> Option<(jiff::Timestamp, String)> {
        lock(&self.last_error).clone()
    }

    /// Reads the files again and swaps the new set in; on failure keeps the
    /// old one, logs and counts the failure. Called by the watcher only.
    fn reload(&self, why: &str) {
        *lock(&self.stamp) = self.files.stamp();
        match self.files.read() {
            Ok(loaded) => {
                tracing::info!(
                    why,
                    subject = %loaded.cert.subject,
                    serial = %loaded.cert.serial,
                    "TLS certificate reloaded; new connections use it"
                );
                self.current.store(Arc::new(loaded));
                self.reloads.fetch_add(1, Ordering::Relaxed);
                *lock(&self.last_error) = None;
            }
            Err(e) => {
                tracing::error!(why, error = %e, "TLS reload failed; still serving the previous certificate");
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                *lock(&self.last_error) = Some((jiff::Timestamp::now(), e.to_string()));
            }
        }
    }

    /// Starts the task that reloads on request and when the files change.
    pub(crate) fn spawn_watcher(self: &Arc<Self>) -> TlsWatcher {
        let tls = self.clone();
        TlsWatcher(tokio::spawn(async move {
            let mut every = tokio::time::interval(tls.poll_interval);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                tokio::select! {
                    () = tls.wake.notified() => tls.reload("requested (SIGHUP)"),
                    _ = every.tick() => {
                        let now = tls.files.stamp();
                        if now != *lock(&tls.stamp) {
                            tls.reload("the files changed");
                        }
                    }
                }
            }
        }))
    }
}

/// The file's inode number where the platform has one.
#[cfg(unix)]
fn inode(metadata: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(metadata)
}

/// The file's inode number where the platform has one.
#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// The files `[tls]` names.
#[derive(Debug)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    forward: Option<ForwardFiles>,
}

impl Files {
    /// The files' current stamps (`None` for one that can't be read).
    fn stamp(&self) -> Stamp {
        let forward = self.forward.as_ref();
        [
            Some(&self.cert),
            Some(&self.key),
            self.client_ca.as_ref(),
            forward.map(|f| &f.ca),
            forward.and_then(|f| f.identity.as_ref().map(|(cert, _)| cert)),
            forward.and_then(|f| f.identity.as_ref().map(|(_, key)| key)),
        ]
        .into_iter()
        .flatten()
        .map(|p| {
            std::fs::metadata(p)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len(), inode(&m))))
        })
        .collect()
    }

    /// Reads and checks the files into a new set.
    fn read(&self) -> Result<Loaded, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = read_certs("tls.cert", &self.cert)?;
        let leaf = chain.first().ok_or_else(|| TlsError::Invalid {
            key: "tls.cert",
            path: self.cert.clone(),
            message: "no CERTIFICATE block in the PEM file".to_owned(),
        })?;
        let cert = cert_info(leaf, &self.cert)?;
        let now = jiff::Timestamp::now().as_second();
        if cert.not_after < now {
            return Err(TlsError::Expired {
                path: self.cert.clone(),
                not_after: timestamp_text(cert.not_after),
            });
        }
        let key_bytes = read_file("tls.key", &self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| TlsError::Invalid {
            key: "tls.key",
            path: self.key.clone(),
            message: match e {
                rustls_pki_types::pem::Error::NoItemsFound => {
                    "no PRIVATE KEY block (PKCS#8, RSA or EC) in the PEM file".to_owned()
                }
                e => format!("not a readable PEM private key: {e}"),
            },
        })?;
        let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                cert: self.cert.clone(),
                key: self.key.clone(),
            },
            e => TlsError::Invalid {
                key: "tls.key",
                path: self.key.clone(),
                message: format!("the key can't be used: {e}"),
            },
        })?;
        let resolver: Arc<dyn ResolvesServerCert> = Arc::new(OneCert(Arc::new(certified)));
        let verifier = match &self.client_ca {
            None => None,
            Some(path) => Some(client_verifier(path, provider.clone())?),
        };
        let config = |surface: Surface| -> Result<Arc<ServerConfig>, TlsError> {
            let builder = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| TlsError::Invalid {
                    key: "tls.cert",
                    path: self.cert.clone(),
                    message: format!("no TLS version the crypto provider supports: {e}"),
                })?;
            let builder = match &verifier {
                Some(v) => builder.with_client_cert_verifier(v.clone()),
                None => builder.with_no_client_auth(),
            };
            let mut config = builder.with_cert_resolver(resolver.clone());
            config.alpn_protocols = surface.alpn();
            Ok(Arc::new(config))
        };
        Ok(Loaded {
            configs: [
                config(Surface::Http)?,
                config(Surface::Grpc)?,
                config(Surface::Resp)?,
            ],
            cert,
            forward: self.forward.as_ref().map(read_forwarding).transpose()?,
        })
    }
}

/// Reads and checks the forwarding files: a CA with at least one
/// certificate, and an identity whose certificate file has one.
fn read_forwarding(files: &ForwardFiles) -> Result<Forwarding, TlsError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    static GENERATION: AtomicU64 = AtomicU64::new(1);
    let nonempty = |key: &'static str, path: &Path| -> Result<Vec<u8>, TlsError> {
        if read_certs(key, path)?.is_empty() {
            return Err(TlsError::Invalid {
                key,
                path: path.to_owned(),
                message: "no CERTIFICATE block in the PEM file".to_owned(),
            });
        }
        read_file(key, path)
    };
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(nonempty(
        "monotonic.forward_ca",
        &files.ca,
    )?));
    if let Some((cert, key)) = &files.identity {
        config = config.identity(Identity::from_pem(
            nonempty("monotonic.forward_cert", cert)?,
            read_file("monotonic.forward_key", key)?,
        ));
    }
    Ok(Forwarding {
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        config,
    })
}

/// The one certificate this server serves, whatever the client asks for.
#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

fn read_file(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate in a PEM file, in order.
fn read_certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_file(key, path)?;
    CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            key,
            path: path.to_owned(),
            message: format!("not a readable PEM file: {e}"),
        })
}

/// Subject, serial and `notAfter` of a certificate.
fn cert_info(der: &CertificateDer<'_>, path: &Path) -> Result<CertInfo, TlsError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| TlsError::Invalid {
        key: "tls.cert",
        path: path.to_owned(),
        message: format!("the first certificate is not valid X.509: {e}"),
    })?;
    Ok(CertInfo {
        subject: cert.subject().to_string(),
        serial: cert.raw_serial_as_string(),
        not_after: cert.validity().not_after.timestamp(),
        loaded_at: jiff::Timestamp::now(),
    })
}

fn timestamp_text(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| format!("{secs} s"), |t| t.to_string())
}

/// The verifier of client certificates: required, chained to a CA of `path`.
fn client_verifier(
    path: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let invalid = |message: String| TlsError::Invalid {
        key: "tls.client_ca",
        path: path.to_owned(),
        message,
    };
    let mut roots = RootCertStore::empty();
    for cert in read_certs("tls.client_ca", path)? {
        roots
            .add(cert)
            .map_err(|e| invalid(format!("a certificate is not a usable CA: {e}")))?;
    }
    if roots.is_empty() {
        return Err(invalid("no CERTIFICATE block in the PEM file".to_owned()));
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| invalid(format!("cannot verify clients with it: {e}")))
}

/// Owns the reload task; stops it when dropped.
#[derive(Debug)]
pub(crate) struct TlsWatcher(JoinHandle<()>);

impl Drop for TlsWatcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Asks a running server to read its TLS files again (what `SIGHUP` does
/// to `idmint serve`). Cheap to clone.
#[derive(Debug, Clone)]
pub struct TlsReload(pub(crate) Arc<Tls>);

impl TlsReload {
    /// Wakes the reload task: the files are read and checked, and swapped
    /// in if good (see the module docs of `tls.rs`). Returns at once.
    pub fn request(&self) {
        self.0.wake.notify_one();
    }
}

// ---- Handshakes ----

/// The first byte of a TLS record carrying a handshake message: every
/// ClientHello starts with it.
const TLS_HANDSHAKE: u8 = 0x16;

/// [`accept`] within `timeout` (`server.read_timeout`), in the connection's
/// own task, so a slow or silent client holds its slot for at most that and
/// never the accept loop. `None`, with the reason logged at debug level, when
/// the handshake failed or took too long.
pub(crate) async fn accept_within(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    plain_reply: &[u8],
    timeout: Duration,
    peer: std::net::SocketAddr,
    surface: Surface,
) -> Option<MaybeTls> {
    let listener = surface.name();
    match tokio::time::timeout(timeout, accept(acceptor, stream, plain_reply)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "{listener} TLS handshake failed; closing");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "{listener} TLS handshake not done within the read timeout; closing");
            None
        }
    }
}

/// Shakes hands with the client on `stream`. A client whose first byte
/// isn't a TLS record's is sent `plain_reply` (when not empty), in its own
/// protocol, and refused. The caller bounds the time (`server.read_timeout`).
///
/// # Errors
/// The connection failed, the client spoke plain text, or the handshake
/// failed (a client certificate missing or from another CA, no common
/// version or cipher, ...).
pub(crate) async fn accept(
    acceptor: tokio_rustls::TlsAcceptor,
    mut stream: TcpStream,
    plain_reply: &[u8],
) -> io::Result<MaybeTls> {
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed before the TLS handshake",
        ));
    }
    if first[0] != TLS_HANDSHAKE {
        if !plain_reply.is_empty() {
            // Take what was sent, so closing doesn't reset the connection
            // before the client reads the reply.
            let mut sent = [0u8; 4096];
            let _ = stream.try_read(&mut sent);
            stream.write_all(plain_reply).await?;
            let _ = stream.shutdown().await;
        }
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "plain text on a TLS port",
        ));
    }
    let tls = acceptor.accept(stream).await?;
    Ok(MaybeTls::Tls(Box::new(tls)))
}

/// A client connection, plain or TLS. An enum, not a trait object: the
/// plain path pays one match per read or write, no allocation, no dynamic
/// call. The TLS stream is boxed (it holds rustls's buffers), so the plain
/// variant stays small.
#[derive(Debug)]
pub(crate) enum MaybeTls {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl MaybeTls {
    /// Writes as much of `buf` as can go without waiting, like
    /// [`TcpStream::try_write`]: the bytes taken (0 when the socket is
    /// full). Over TLS, taken bytes may still sit encrypted in rustls's
    /// buffer: [`MaybeTls::wants_flush`] says so, and `flush` sends them.
    pub(crate) fn try_write_now(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            MaybeTls::Plain(s) => match s.try_write(buf) {
                Ok(n) => Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                Err(e) => Err(e),
            },
            MaybeTls::Tls(s) => {
                // Polled with a waker that does nothing: whatever can't go now
                // is written later by an awaited write, which registers the
                // real waker.
                let mut cx = Context::from_waker(Waker::noop());
                let mut taken = 0;
                while taken < buf.len() {
                    match Pin::new(&mut **s).poll_write(&mut cx, &buf[taken..]) {
                        Poll::Ready(Ok(0)) | Poll::Pending => break,
                        Poll::Ready(Ok(n)) => taken += n,
                        Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Poll::Ready(Err(e)) => return Err(e),
                    }
                }
                if let Poll::Ready(Err(e)) = Pin::new(&mut **s).poll_flush(&mut cx)
                    && e.kind() != io::ErrorKind::WouldBlock
                {
                    return Err(e);
                }
                Ok(taken)
            }
        }
    }

    /// Whether bytes taken by [`MaybeTls::try_write_now`] still wait in a
    /// buffer (TLS only) for a `flush`.
    pub(crate) fn wants_flush(&self) -> bool {
        match self {
            MaybeTls::Plain(_) => false,
            MaybeTls::Tls(s) => s.get_ref().1.wants_write(),
        }
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            MaybeTls::Plain(s) => s,
            MaybeTls::Tls(s) => s.get_ref().0,
        }
    }
}

impl Connected for MaybeTls {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp().connect_info()
    }
}

impl AsyncRead for MaybeTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MaybeTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use idmint_testkit::tls::TestCa;

    use super::*;

    /// A `[tls]` section serving `cert` and `key`.
    fn section(cert: &Path, key: &Path) -> TlsSection {
        TlsSection {
            cert: Some(cert.to_owned()),
            key: Some(key.to_owned()),
            ..TlsSection::default()
        }
    }

    fn load_err(section: &TlsSection) -> String {
        match Tls::load(section, None) {
            Ok(_) => panic!("loaded {section:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_tls_section_loads_from_file_and_env_with_defaults() {
        use idmint_node::config::Config;
        assert!(Config::load(None, vars(&[])).unwrap().tls.is_none());

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("idmint.toml");
        std::fs::write(
            &file,
            "[tls]\ncert = \"s.pem\"\nkey = \"s.key\"\nresp = false\n",
        )
        .unwrap();
        let config = Config::load(Some(&file), vars(&[])).unwrap();
        config.validate().unwrap();
        let tls = config.tls.unwrap();
        // Read from the file's folder, as every relative path in a config file.
        assert_eq!(tls.cert, Some(dir.path().join("s.pem")));
        assert_eq!((tls.http, tls.grpc, tls.resp), (true, true, false));
        assert_eq!(tls.poll_interval, Duration::from_secs(5));
        assert!(tls.client_ca.is_none());

        let config = Config::load(
            None,
            vars(&[
                ("IDMINT_TLS__CERT", "/etc/idmint/s.pem"),
                ("IDMINT_TLS__KEY", "/etc/idmint/s.key"),
                ("IDMINT_TLS__CLIENT_CA", "/etc/idmint/ca.pem"),
                ("IDMINT_TLS__POLL_INTERVAL", "1s"),
            ]),
        )
        .unwrap();
        config.validate().unwrap();
        let tls = config.tls.unwrap();
        assert_eq!(
            tls.client_ca.as_deref(),
            Some(Path::new("/etc/idmint/ca.pem"))
        );
        assert_eq!(tls.poll_interval, Duration::from_secs(1));

        // No key, or a zero interval: named by the check.
        for (text, named) in [
            ("[tls]\ncert = \"s.pem\"\n", "tls.key"),
            ("[tls]\nkey = \"s.key\"\n", "tls.cert"),
            (
                "[tls]\ncert = \"a\"\nkey = \"b\"\npoll_interval = \"0s\"\n",
                "tls.poll_interval",
            ),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = Config::load(Some(&file), vars(&[]))
                .unwrap()
                .validate()
                .unwrap_err();
            assert!(e.to_string().contains(named), "{text}: {e}");
        }
        // An unknown key is refused when loading.
        std::fs::write(&file, "[tls]\ncertificate = \"s.pem\"\n").unwrap();
        let e = Config::load(Some(&file), vars(&[])).unwrap_err();
        assert!(e.to_string().contains("tls"), "{e}");
    }

    #[test]
    fn bad_files_are_refused_naming_the_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (cert, key) = ca.server(1).write(dir.path(), "server");
        let (_, other_key) = ca.server(2).write(dir.path(), "other");
        let (expired, expired_key) = ca.expired_server(3).write(dir.path(), "expired");
        let nowhere = dir.path().join("nowhere.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();

        let e = load_err(&section(&expired, &expired_key));
        assert!(
            e.starts_with(&format!("tls.cert {}: ", expired.display())),
            "{e}"
        );
        assert!(e.contains("expired at 2020-01-01T00:00:00Z"), "{e}");

        let e = load_err(&section(&cert, &other_key));
        assert!(
            e.contains(&format!("tls.key {}", other_key.display())),
            "{e}"
        );
        assert!(e.contains("is not the private key"), "{e}");

        let e = load_err(&section(&nowhere, &key));
        assert!(
            e.starts_with(&format!("cannot read tls.cert {}", nowhere.display())),
            "{e}"
        );
        let e = load_err(&section(&cert, &nowhere));
        assert!(e.starts_with("cannot read tls.key"), "{e}");

        // A key where the certificate should be, and the other way round.
        let e = load_err(&section(&key, &key));
        assert!(
            e.contains("tls.cert") && e.contains("no CERTIFICATE"),
            "{e}"
        );
        let e = load_err(&section(&cert, &cert));
        assert!(e.contains("tls.key") && e.contains("no PRIVATE KEY"), "{e}");

        let mut with_ca = section(&cert, &key);
        with_ca.client_ca = Some(empty.clone());
        let e = load_err(&with_ca);
        assert!(
            e.starts_with(&format!("tls.client_ca {}", empty.display())),
            "{e}"
        );

        let good = Tls::load(&section(&cert, &key), None).unwrap();
        assert_eq!(good.cert().serial, "01");
        assert_eq!(good.cert().subject, "CN=idmint test server 1");
    }

    #[test]
    fn listeners_are_switched_one_by_one_and_get_their_alpn() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = TestCa::new("test CA").server(1).write(dir.path(), "s");
        let mut s = section(&cert, &key);
        s.resp = false;
        let tls = Tls::load(&s, None).unwrap();
        assert!(!tls.enabled(Surface::Resp));
        assert!(tls.enabled(Surface::Http) && tls.enabled(Surface::Grpc));
        let alpn = |surface: Surface| {
            tls.current.load().configs[surface.index()]
                .alpn_protocols
                .clone()
        };
        assert_eq!(alpn(Surface::Http), [b"http/1.1".to_vec()]);
        assert_eq!(alpn(Surface::Grpc), [b"h2".to_vec()]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changed_files_are_reloaded_and_a_bad_change_keeps_the_old_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (cert, key) = ca.server(1).write(dir.path(), "server");
        let mut s = section(&cert, &key);
        s.poll_interval = Duration::from_millis(20);
        let tls = Arc::new(Tls::load(&s, None).unwrap());
        let _watcher = tls.spawn_watcher();

        // Written whole, then moved into place (the key first).
        let (new_cert, new_key) = ca.server(2).write(dir.path(), "new");
        std::fs::rename(&new_key, &key).unwrap();
        std::fs::rename(&new_cert, &cert).unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while tls.cert().serial != "02" {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "no reload: serial {}", tls.cert().serial);
        assert_eq!(tls.reload_counts().1, 0);

        // A certificate file that is no longer one: counted, the old one kept.
        std::fs::write(&cert, "garbage").unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while tls.reload_counts().1 == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "the bad file was not noticed");
        assert_eq!(tls.cert().serial, "02");
        let (_, error) = tls.last_error().unwrap();
        assert!(error.contains("tls.cert"), "{error}");

        // A request (SIGHUP's) reloads though nothing changed since.
        let third = ca.server(3);
        let (third_cert, third_key) = third.write(dir.path(), "third");
        std::fs::rename(&third_key, &key).unwrap();
        std::fs::rename(&third_cert, &cert).unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while tls.cert().serial != "03" {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "no reload of the third certificate");
        assert!(tls.last_error().is_none());
        let reloads = tls.reload_counts().0;
        TlsReload(tls.clone()).request();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while tls.reload_counts().0 == reloads {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "a request did not reload");
        assert_eq!(tls.cert().serial, "03");
    }
}
