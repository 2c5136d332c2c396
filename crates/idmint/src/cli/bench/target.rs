//! The surfaces' clients: a [`Target`] parsed from its URL, the TLS files
//! it is reached with, and one worker's [`Conn`] to it (HTTP through
//! `idmint-client`, the Redis protocol, gRPC).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use idmint_server::grpc::proto::GetIdsRequest;
use idmint_server::grpc::proto::id_service_client::IdServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::BenchArgs;
use crate::cli::bad_input;

/// The TLS files of a TLS target, read.
#[derive(Clone, Default)]
pub(super) struct TlsFiles {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    pub(super) fn read(args: &BenchArgs) -> Result<TlsFiles> {
        let read = |flag: &str, path: &Path| {
            std::fs::read(path).map_err(|e| bad_input(format!("{flag} {}: {e}", path.display())))
        };
        let ca = args
            .tls_ca
            .as_deref()
            .map(|p| read("--tls-ca", p))
            .transpose()?;
        let identity = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some((read("--tls-cert", cert)?, read("--tls-key", key)?)),
            _ => None,
        };
        Ok(TlsFiles { ca, identity })
    }

    pub(super) fn any(&self) -> bool {
        self.ca.is_some() || self.identity.is_some()
    }
}

/// A server to load, by URL scheme.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// `http://ADDR[/prefix]` or `https://…`: the HTTP API.
    Http(String),
    /// `resp://ADDR`: the Redis protocol; `tls` for `rediss://`.
    Resp { addr: String, tls: bool },
    /// `grpc://ADDR`: gRPC (HTTP/2); `tls` for `grpcs://`.
    Grpc { addr: String, tls: bool },
}

impl Target {
    /// Whether the target is reached over TLS.
    pub(super) fn is_tls(&self) -> bool {
        match self {
            Target::Http(url) => url.starts_with("https://"),
            Target::Resp { tls, .. } | Target::Grpc { tls, .. } => *tls,
        }
    }

    pub(super) fn parse(text: &str) -> Result<Target> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            bad_input(format!(
                "target {text:?} has no scheme: use http://ADDR, resp://ADDR or grpc://ADDR \
                 (https://, rediss://, grpcs:// over TLS)"
            ))
        })?;
        if rest.is_empty() {
            return Err(bad_input(format!("target {text:?} has no address")));
        }
        let addr = rest.trim_end_matches('/').to_owned();
        match scheme {
            "http" | "https" => Ok(Target::Http(text.to_owned())),
            "resp" | "redis" => Ok(Target::Resp { addr, tls: false }),
            "rediss" => Ok(Target::Resp { addr, tls: true }),
            "grpc" => Ok(Target::Grpc { addr, tls: false }),
            "grpcs" => Ok(Target::Grpc { addr, tls: true }),
            other => Err(bad_input(format!(
                "target {text:?}: unknown scheme {other:?}; use http://, resp:// or grpc:// \
                 (https://, rediss://, grpcs:// over TLS)"
            ))),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Http(url) => f.write_str(url),
            Target::Resp { addr, tls } => {
                write!(f, "{}://{addr}", if *tls { "rediss" } else { "resp" })
            }
            Target::Grpc { addr, tls } => {
                write!(f, "{}://{addr}", if *tls { "grpcs" } else { "grpc" })
            }
        }
    }
}

/// One worker's connection to a target.
pub(super) enum Conn {
    Http(idmint_client::Client),
    Resp(redis::aio::MultiplexedConnection),
    Grpc(IdServiceClient<Channel>),
}

impl Conn {
    /// A connection for one worker; `shared` is the HTTP client all workers
    /// share (its pool opens a connection per worker in flight).
    pub(super) async fn connect(
        target: &Target,
        shared: Option<&idmint_client::Client>,
        tls: &TlsFiles,
    ) -> Result<Conn> {
        match target {
            Target::Http(_) => Ok(Conn::Http(
                shared.expect("an HTTP target has a client").clone(),
            )),
            Target::Resp { addr, tls: false } => {
                let client = redis::Client::open(format!("redis://{addr}/"))
                    .with_context(|| format!("RESP target {addr}"))?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .with_context(|| format!("connecting to {addr}"))?;
                Ok(Conn::Resp(conn))
            }
            Target::Resp { addr, tls: true } => {
                let certificates = redis::TlsCertificates {
                    client_tls: tls.identity.clone().map(|(client_cert, client_key)| {
                        redis::ClientTlsConfig {
                            client_cert,
                            client_key,
                        }
                    }),
                    root_cert: tls.ca.clone(),
                };
                let client =
                    redis::Client::build_with_tls(format!("rediss://{addr}/"), certificates)
                        .map_err(|e| bad_input(format!("RESP TLS target {addr}: {e}")))?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .with_context(|| format!("connecting to {addr} over TLS"))?;
                Ok(Conn::Resp(conn))
            }
            Target::Grpc {
                addr,
                tls: with_tls,
            } => {
                let scheme = if *with_tls { "https" } else { "http" };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
                    .map_err(|e| bad_input(format!("gRPC target {addr}: {e}")))?
                    .timeout(Duration::from_secs(30));
                if *with_tls {
                    let mut config = ClientTlsConfig::new();
                    match &tls.ca {
                        Some(ca) => config = config.ca_certificate(Certificate::from_pem(ca)),
                        None => config = config.with_webpki_roots(),
                    }
                    if let Some((cert, key)) = &tls.identity {
                        config = config.identity(Identity::from_pem(cert, key));
                    }
                    endpoint = endpoint
                        .tls_config(config)
                        .map_err(|e| bad_input(format!("gRPC TLS target {addr}: {e}")))?;
                }
                let channel = endpoint
                    .connect()
                    .await
                    .with_context(|| format!("connecting to {addr}"))?;
                // A batch of 100,000 IDs is 800 kB; public IDs add their text.
                Ok(Conn::Grpc(
                    IdServiceClient::new(channel).max_decoding_message_size(GRPC_MAX_MESSAGE),
                ))
            }
        }
    }

    pub(super) async fn next_ids(&mut self, key: &str, n: u64) -> Result<Vec<u64>> {
        match self {
            Conn::Http(client) => Ok(client.next_ids(key, n).await?),
            Conn::Resp(conn) if n == 1 => {
                let id: u64 = redis::cmd("INCR").arg(key).query_async(conn).await?;
                Ok(vec![id])
            }
            Conn::Resp(conn) => Ok(redis::cmd("IDMINT.BATCH")
                .arg(key)
                .arg(n)
                .query_async(conn)
                .await?),
            Conn::Grpc(client) => {
                let request = GetIdsRequest {
                    key: key.to_owned(),
                    count: n,
                };
                let ids = client
                    .get_ids(request)
                    .await
                    .map_err(grpc_error)?
                    .into_inner()
                    .ids;
                if ids.len() as u64 != n {
                    return Err(anyhow!(
                        "asked {key:?} for {n} integer IDs over gRPC, got {} (a UUID key?)",
                        ids.len()
                    ));
                }
                Ok(ids)
            }
        }
    }
}

/// The largest gRPC message the bench accepts (tonic's default is 4 MiB).
const GRPC_MAX_MESSAGE: usize = 64 << 20;

/// A failed gRPC call as one line: the stable code idmint puts in the
/// metadata, then the message.
fn grpc_error(status: tonic::Status) -> anyhow::Error {
    let code = status
        .metadata()
        .get(idmint_server::grpc::ERROR_CODE_METADATA)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| format!("{:?}", status.code()), str::to_owned);
    anyhow!("{code}: {}", status.message())
}

/// The shared HTTP client of one HTTP target (its pool opens a connection
/// per worker in flight); `None` for the other protocols.
pub(super) fn http_client(
    args: &BenchArgs,
    target: &Target,
    tls: &TlsFiles,
) -> Result<Option<idmint_client::Client>> {
    let Target::Http(url) = target else {
        return Ok(None);
    };
    let mut builder = idmint_client::Client::builder()
        .servers([url.as_str()])
        .prefetch(args.prefetch)
        .timeout(Duration::from_secs(30));
    if let Some(ca) = &tls.ca {
        builder = builder.tls_ca_pem(ca.clone());
    }
    if let Some((cert, key)) = &tls.identity {
        builder = builder.tls_client_pem(cert.clone(), key.clone());
    }
    Ok(Some(
        builder
            .build()
            .map_err(|e| bad_input(format!("target: {e}")))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_by_scheme() {
        assert!(matches!(
            Target::parse("http://127.0.0.1:1").unwrap(),
            Target::Http(_)
        ));
        match Target::parse("resp://127.0.0.1:6380/").unwrap() {
            Target::Resp { addr, tls: false } => assert_eq!(addr, "127.0.0.1:6380"),
            other => panic!("{other:?}"),
        }
        match Target::parse("grpc://127.0.0.1:50051/").unwrap() {
            Target::Grpc { addr, tls: false } => assert_eq!(addr, "127.0.0.1:50051"),
            other => panic!("{other:?}"),
        }
        for (text, shown) in [
            ("https://127.0.0.1:1", "https://127.0.0.1:1"),
            ("rediss://127.0.0.1:6380/", "rediss://127.0.0.1:6380"),
            ("grpcs://127.0.0.1:50051", "grpcs://127.0.0.1:50051"),
        ] {
            let target = Target::parse(text).unwrap();
            assert!(target.is_tls(), "{text}");
            assert_eq!(target.to_string(), shown);
        }
        assert!(!Target::parse("http://127.0.0.1:1").unwrap().is_tls());
        for bad in ["127.0.0.1:1", "grpc://", "ftp://h", "http://"] {
            let e = Target::parse(bad).unwrap_err();
            assert!(crate::cli::is_bad_input(&e), "{bad}: {e}");
        }
    }
}
