//! One batch request, failed over across the server list.
//!
//! Each server has a "down until" instant. A server that refused a
//! connection, timed out, broke off a response or answered 5xx is put down
//! for the client's back-off; a 503 with `Retry-After` is put down for that
//! long instead. A request tries the servers that are up first, starting
//! with the one that answered last, then those that are down, soonest back
//! first; so as long as one server answers, the call succeeds. A 4xx answer
//! ends the request at once: the request is wrong, not the server.
//!
//! Uniqueness does not depend on any of this: every ID comes from a server
//! that issued it once. A request whose answer was lost (timeout, broken
//! body) loses those IDs (a gap), and the next server issues others.

use std::collections::HashSet;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use crate::error::{Error, Failure, FailureReason};

/// The binary body type: little-endian `u64`s back to back.
const OCTET_STREAM: &str = "application/octet-stream";

/// A server of the list and when it may be tried again.
#[derive(Debug)]
struct ServerState {
    base: Url,
    /// The base URL as given back in errors (no trailing slash).
    name: String,
    down_until: Mutex<Option<Instant>>,
}

/// The servers, the HTTP client, and the fail-over state.
#[derive(Debug)]
pub(crate) struct Transport {
    http: reqwest::Client,
    servers: Vec<ServerState>,
    /// The server that answered last: tried first.
    preferred: AtomicUsize,
    backoff: Duration,
    max_batch: u64,
    /// Keys the servers said are `monotonic` (`X-Idmint-Strategy`), or the
    /// builder named: never prefetched.
    monotonic: Mutex<HashSet<String>>,
}

/// Parses a server address: `http://host:port[/prefix]` or `host:port`.
pub(crate) fn parse_server(text: &str) -> Result<Url, Error> {
    let text = text.trim();
    let with_scheme = if text.contains("://") {
        text.to_owned()
    } else {
        format!("http://{text}")
    };
    let mut url = Url::parse(&with_scheme)
        .map_err(|e| Error::invalid(format!("server address {text:?} is not a URL: {e}")))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(Error::invalid(format!(
            "server address {text:?}: only http:// and https:// are supported"
        )));
    }
    if url.host().is_none() || url.cannot_be_a_base() {
        return Err(Error::invalid(format!(
            "server address {text:?} has no host"
        )));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(Error::invalid(format!(
            "server address {text:?} has a query or fragment"
        )));
    }
    // A base path (a reverse proxy's prefix) keeps no trailing slash.
    let path = url.path().trim_end_matches('/').to_owned();
    url.set_path(&path);
    Ok(url)
}

/// The `Retry-After` header as a duration (delay-seconds form only; an
/// HTTP date is ignored, and the client's back-off applies).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The IDs of a binary body, checked against the count asked for and the
/// `X-Idmint-Count` header.
pub(crate) fn decode_ids(
    body: &[u8],
    header_count: Option<&str>,
    n: u64,
) -> Result<Vec<u64>, String> {
    if !body.len().is_multiple_of(8) {
        return Err(format!(
            "a body of {} bytes is not a whole number of 64-bit IDs (a UUID key?)",
            body.len()
        ));
    }
    let got = (body.len() / 8) as u64;
    if let Some(header) = header_count
        && header.trim().parse::<u64>().ok() != Some(got)
    {
        return Err(format!(
            "X-Idmint-Count says {header:?} but the body holds {got} IDs"
        ));
    }
    if got != n {
        return Err(format!("asked for {n} IDs, got {got}"));
    }
    Ok(body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
        .collect())
}

/// The `{"error":{"code","message"}}` of an error body, or the status and the
/// body text when it is something else.
fn error_of(status: StatusCode, body: &[u8]) -> (String, String) {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Inner,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        code: String,
        message: String,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(b) => (b.error.code, b.error.message),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text: String = text.trim().chars().take(200).collect();
            let code = status
                .canonical_reason()
                .unwrap_or("error")
                .to_ascii_lowercase()
                .replace(' ', "_");
            (
                code,
                if text.is_empty() {
                    status.to_string()
                } else {
                    text
                },
            )
        }
    }
}

/// What TLS trusts and presents (see `ClientBuilder::tls_ca_pem`).
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// The CA certificate(s) to trust instead of the built-in roots.
    pub ca_pem: Option<Vec<u8>>,
    /// The client certificate and key for mutual TLS.
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the private key.
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca_pem.is_some())
            .field("client_identity", &self.identity_pem.is_some())
            .finish()
    }
}

/// How one attempt ended.
enum Attempt {
    Ids(Vec<u64>),
    /// Stop here: the caller gets this error.
    Fatal(Error),
    /// Try the next server; come back to this one after the hint.
    Next(FailureReason, Option<Duration>),
}

impl Transport {
    pub(crate) fn new(
        servers: Vec<Url>,
        timeout: Duration,
        backoff: Duration,
        max_batch: u64,
        tls: &TlsOptions,
    ) -> Result<Transport, Error> {
        let mut http = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(timeout)
            .connect_timeout(timeout);
        if let Some(ca) = &tls.ca_pem {
            let ca = reqwest::Certificate::from_pem(ca)
                .map_err(|e| Error::invalid(format!("the TLS CA is not a PEM certificate: {e}")))?;
            // Only this CA: a server certificate from any other is refused.
            http = http.tls_built_in_root_certs(false).add_root_certificate(ca);
        }
        if let Some((cert, key)) = &tls.identity_pem {
            let mut pem = cert.clone();
            pem.push(b'\n');
            pem.extend_from_slice(key);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                Error::invalid(format!(
                    "the TLS client certificate and key are not a usable PEM pair: {e}"
                ))
            })?;
            http = http.identity(identity);
        }
        let http = http
            .build()
            .map_err(|e| Error::invalid(format!("can't build the HTTP client: {e}")))?;
        let servers = servers
            .into_iter()
            .map(|base| ServerState {
                name: base.as_str().trim_end_matches('/').to_owned(),
                base,
                down_until: Mutex::new(None),
            })
            .collect();
        Ok(Transport {
            http,
            servers,
            preferred: AtomicUsize::new(0),
            backoff,
            max_batch,
            monotonic: Mutex::new(HashSet::new()),
        })
    }

    /// Records `key` as monotonic: its IDs are never prefetched.
    pub(crate) fn set_monotonic(&self, key: &str) {
        self.monotonic
            .lock()
            .expect("not poisoned")
            .insert(key.to_owned());
    }

    /// Whether `key` is monotonic, as a server said or the builder named.
    pub(crate) fn is_monotonic(&self, key: &str) -> bool {
        self.monotonic.lock().expect("not poisoned").contains(key)
    }

    pub(crate) fn max_batch(&self) -> u64 {
        self.max_batch
    }

    /// The servers' base URLs, in the configured order.
    pub(crate) fn server_names(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().map(|s| s.name.as_str())
    }

    /// The order to try the servers in: those up, starting with the
    /// preferred one, then those down, soonest back first.
    fn order(&self, now: Instant) -> Vec<usize> {
        let n = self.servers.len();
        let start = self.preferred.load(Ordering::Relaxed) % n.max(1);
        let mut up = Vec::with_capacity(n);
        let mut down = Vec::new();
        for idx in (start..n).chain(0..start) {
            match *self.servers[idx].down_until.lock().expect("not poisoned") {
                Some(until) if until > now => down.push((until, idx)),
                _ => up.push(idx),
            }
        }
        down.sort();
        up.extend(down.into_iter().map(|(_, idx)| idx));
        up
    }

    /// `n` IDs of `key` (`n` at most the max batch), from the first server
    /// that can give them.
    pub(crate) async fn fetch(&self, key: &str, n: u64) -> Result<Vec<u64>, Error> {
        debug_assert!(n >= 1 && n <= self.max_batch);
        let mut failures = Vec::new();
        let mut soonest: Option<Instant> = None;
        for idx in self.order(Instant::now()) {
            let server = &self.servers[idx];
            match self.attempt(server, key, n).await {
                Attempt::Ids(ids) => {
                    *server.down_until.lock().expect("not poisoned") = None;
                    self.preferred.store(idx, Ordering::Relaxed);
                    return Ok(ids);
                }
                Attempt::Fatal(e) => return Err(e),
                Attempt::Next(reason, hint) => {
                    let until = Instant::now() + hint.unwrap_or(self.backoff);
                    *server.down_until.lock().expect("not poisoned") = Some(until);
                    soonest = Some(soonest.map_or(until, |s| s.min(until)));
                    failures.push(Failure {
                        server: server.name.clone(),
                        reason,
                    });
                }
            }
        }
        Err(Error::Unavailable {
            failures,
            retry_after: soonest.map(|s| s.saturating_duration_since(Instant::now())),
        })
    }

    async fn attempt(&self, server: &ServerState, key: &str, n: u64) -> Attempt {
        let mut url = server.base.clone();
        url.path_segments_mut()
            .expect("checked: the base URL has a path")
            .pop_if_empty()
            .extend(["v1", "ids", key]);
        url.query_pairs_mut().append_pair("count", &n.to_string());
        let response = match self.http.get(url).header(ACCEPT, OCTET_STREAM).send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Attempt::Next(FailureReason::Timeout, None),
            Err(e) => return Attempt::Next(FailureReason::Connect(error_chain(&e)), None),
        };
        let status = response.status();
        let headers = response.headers().clone();
        let body = match response.bytes().await {
            Ok(b) => b,
            Err(e) if e.is_timeout() => return Attempt::Next(FailureReason::Timeout, None),
            Err(e) => return Attempt::Next(FailureReason::Body(error_chain(&e)), None),
        };
        if status.is_success() {
            let content_type = headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !content_type.starts_with(OCTET_STREAM) {
                return Attempt::Fatal(Error::Protocol {
                    server: server.name.clone(),
                    message: format!("expected {OCTET_STREAM}, got {content_type:?}"),
                });
            }
            if headers
                .get("x-idmint-strategy")
                .is_some_and(|v| v.as_bytes() == b"monotonic")
            {
                self.set_monotonic(key);
            }
            let count = headers.get("x-idmint-count").and_then(|v| v.to_str().ok());
            return match decode_ids(&body, count, n) {
                Ok(ids) => Attempt::Ids(ids),
                Err(message) => Attempt::Fatal(Error::Protocol {
                    server: server.name.clone(),
                    message,
                }),
            };
        }
        let (code, message) = error_of(status, &body);
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            let hint = retry_after(&headers);
            return Attempt::Next(
                FailureReason::Unavailable {
                    code,
                    message,
                    retry_after: hint,
                },
                hint,
            );
        }
        if status.is_client_error() {
            return Attempt::Fatal(Error::Rejected {
                server: server.name.clone(),
                status: status.as_u16(),
                code,
                message,
            });
        }
        // Another 5xx, or a status no idmint server sends: this server's trouble.
        Attempt::Next(
            FailureReason::ServerError {
                status: status.as_u16(),
                code,
                message,
            },
            None,
        )
    }
}

/// An error with its sources, `a: b: c` (reqwest's own `Display` hides the cause).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn server_addresses_are_parsed_and_checked() {
        assert_eq!(
            parse_server("127.0.0.1:8080").unwrap().as_str(),
            "http://127.0.0.1:8080/"
        );
        assert_eq!(
            parse_server("http://h:1/idmint/").unwrap().as_str(),
            "http://h:1/idmint"
        );
        assert_eq!(
            parse_server("https://h:1").unwrap().as_str(),
            "https://h:1/"
        );
        for bad in ["http://", "ftp://h", "http://h:1/?a=b", "not a url at all"] {
            let e = parse_server(bad).unwrap_err();
            assert_eq!(e.code(), "invalid_input", "{bad}: {e}");
        }
    }

    #[test]
    fn retry_after_takes_seconds_and_ignores_dates() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn binary_bodies_are_checked() {
        let body: Vec<u8> = [5u64, 6, 1 << 62]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(decode_ids(&body, Some("3"), 3).unwrap(), [5, 6, 1 << 62]);
        assert_eq!(decode_ids(&body, None, 3).unwrap(), [5, 6, 1 << 62]);
        assert!(decode_ids(&body, Some("4"), 3).is_err());
        assert!(decode_ids(&body, Some("3"), 2).is_err());
        assert!(
            decode_ids(&body[..20], None, 3)
                .unwrap_err()
                .contains("20 bytes")
        );
    }

    #[test]
    fn error_bodies_are_read() {
        let body = br#"{"error":{"code":"key_not_found","message":"no key x"}}"#;
        assert_eq!(
            error_of(StatusCode::NOT_FOUND, body),
            ("key_not_found".into(), "no key x".into())
        );
        assert_eq!(
            error_of(StatusCode::BAD_GATEWAY, b"upstream died"),
            ("bad_gateway".into(), "upstream died".into())
        );
    }

    #[test]
    fn servers_up_come_first_starting_with_the_preferred() {
        let urls = ["http://a", "http://b", "http://c", "http://d"]
            .iter()
            .map(|s| parse_server(s).unwrap())
            .collect();
        let t = Transport::new(
            urls,
            Duration::from_secs(1),
            Duration::from_secs(1),
            10,
            &TlsOptions::default(),
        )
        .unwrap();
        let now = Instant::now();
        assert_eq!(t.order(now), [0, 1, 2, 3]);
        t.preferred.store(2, Ordering::Relaxed);
        assert_eq!(t.order(now), [2, 3, 0, 1]);
        *t.servers[3].down_until.lock().unwrap() = Some(now + Duration::from_secs(5));
        *t.servers[0].down_until.lock().unwrap() = Some(now + Duration::from_secs(2));
        assert_eq!(t.order(now), [2, 1, 0, 3]);
        // Once its hint has passed, a server is up again.
        assert_eq!(t.order(now + Duration::from_secs(3)), [2, 0, 1, 3]);
        assert_eq!(t.order(now + Duration::from_secs(6)), [2, 3, 0, 1]);
    }
}
