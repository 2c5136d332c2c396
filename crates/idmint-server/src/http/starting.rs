//! What the HTTP port answers while the node starts.
//!
//! The listener is bound before the worker claim (its port is part of the
//! node's identity), and a claim can wait: for a dead node's lease to expire
//! when every worker ID is taken, or for a registry's hold after its store
//! forgot. Meanwhile probes would only see a connection that never answers.
//! [`answer_while_starting`] answers instead: `GET /healthz` 200 (the process
//! is alive), and every other request, `/readyz` included, 503 `not_ready`
//! with what the start waits for and a `Retry-After`, in the same error body
//! as once the node runs. One request per connection, no keep-alive, and the
//! listener's TLS when it has one. The real server takes the listener over
//! when the start is done.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

use super::conn::shake_hands;
use super::error::ApiError;
use crate::tls::{Surface, Tls};

/// What the start is doing, as `/readyz` says it meanwhile.
#[derive(Debug)]
pub(crate) struct StartProgress {
    doing: Mutex<String>,
}

impl StartProgress {
    pub(crate) fn new(doing: impl Into<String>) -> StartProgress {
        StartProgress {
            doing: Mutex::new(doing.into()),
        }
    }

    pub(crate) fn set(&self, doing: impl Into<String>) {
        *self.doing.lock().unwrap_or_else(|p| p.into_inner()) = doing.into();
    }

    fn get(&self) -> String {
        self.doing.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Answers on `listener` until dropped (it never completes): run it beside
/// a start step with `tokio::select!`. Connections still open when it is
/// dropped are closed.
pub(crate) async fn answer_while_starting(
    listener: &TcpListener,
    tls: Option<&Arc<Tls>>,
    read_timeout: Duration,
    progress: &Arc<StartProgress>,
) -> std::convert::Infallible {
    let tls = tls.filter(|t| t.enabled(Surface::Http));
    let mut connections = FuturesUnordered::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let acceptor = tls.map(|t| t.acceptor(Surface::Http));
                let progress = progress.clone();
                connections.push(async move {
                    let Some(stream) = shake_hands(acceptor, stream, read_timeout, peer).await
                    else {
                        return;
                    };
                    let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                        let response = answer(request.uri().path(), &progress.get());
                        async move { Ok::<_, std::convert::Infallible>(response) }
                    });
                    let connection = http1::Builder::new()
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service);
                    let _ = tokio::time::timeout(read_timeout, connection).await;
                });
            }
            Some(()) = connections.next(), if !connections.is_empty() => {}
        }
    }
}

fn answer(path: &str, doing: &str) -> Response {
    if path == "/healthz" {
        return axum::Json(json!({"status": "ok"})).into_response();
    }
    ApiError::unavailable(
        "not_ready",
        format!("the node is starting: {doing}"),
        Duration::from_secs(1),
    )
    .into_response()
}
