//! HTTP latency (`idmint_http_request_duration_seconds{route,status}`): each
//! route's histograms, and the tower layer that times the routed requests
//! ([`LatencyLayer`]). The front service in `http/conn.rs` records its own
//! routes with [`record_latency`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::MatchedPath;
use axum::http::StatusCode;
use axum::response::Response;
use metrics::{Histogram, Recorder};

use super::{HTTP_LATENCY, METADATA, Metrics, key, label, lock};

impl Metrics {
    /// The latency histograms of `route`, one per status class (1xx to 5xx).
    pub(crate) fn route_histograms(&self, route: &str) -> Arc<[Histogram; 5]> {
        match self.latency.load().get(route) {
            Some(h) => h.clone(),
            None => self.insert_route(route),
        }
    }

    #[cold]
    fn insert_route(&self, route: &str) -> Arc<[Histogram; 5]> {
        let _one_writer = lock(&self.latency_insert);
        let current = self.latency.load_full();
        if let Some(h) = current.get(route) {
            return h.clone();
        }
        let histograms: Arc<[Histogram; 5]> = Arc::new(std::array::from_fn(|class| {
            self.recorder.register_histogram(
                &key(
                    HTTP_LATENCY,
                    vec![
                        label("route", route),
                        label("status", format!("{}xx", class + 1)),
                    ],
                ),
                &METADATA,
            )
        }));
        let mut next = HashMap::clone(&current);
        next.insert(route.into(), histograms.clone());
        self.latency.store(Arc::new(next));
        histograms
    }
}

/// The HTTP latency layer: times each request to its response head and
/// records it under the matched route (`route="unmatched"` for the fallback)
/// and status class.
///
/// Written by hand rather than with `axum::middleware::from_fn`, which boxes
/// every request's future and clones the boxed inner service per request:
/// under callgrind that was 7 of the 31 allocations of a single-ID request.
/// Here the future wraps the inner one in place, and each route's histograms
/// are looked up once, on its first request.
#[derive(Clone)]
pub(crate) struct LatencyLayer {
    metrics: Arc<Metrics>,
}

impl LatencyLayer {
    pub(crate) fn new(metrics: Arc<Metrics>) -> LatencyLayer {
        LatencyLayer { metrics }
    }
}

impl<S> tower_layer::Layer<S> for LatencyLayer {
    type Service = Latency<S>;

    fn layer(&self, inner: S) -> Latency<S> {
        Latency {
            inner,
            metrics: self.metrics.clone(),
            histograms: Arc::default(),
        }
    }
}

/// [`LatencyLayer`]'s service around one route (axum layers each route).
#[derive(Clone)]
pub(crate) struct Latency<S> {
    inner: S,
    metrics: Arc<Metrics>,
    /// This route's histograms, found on its first request.
    histograms: Arc<OnceLock<Arc<[Histogram; 5]>>>,
}

impl<S, B> tower_service::Service<axum::http::Request<B>> for Latency<S>
where
    S: tower_service::Service<axum::http::Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = LatencyFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        let histograms = self
            .histograms
            .get_or_init(|| {
                let route = req.extensions().get::<MatchedPath>();
                let route = route.map_or("unmatched", MatchedPath::as_str);
                self.metrics.route_histograms(route)
            })
            .clone();
        LatencyFuture {
            started: Instant::now(),
            inner: self.inner.call(req),
            histograms,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner response future, timed.
    pub(crate) struct LatencyFuture<F> {
        #[pin]
        inner: F,
        started: Instant,
        histograms: Arc<[Histogram; 5]>,
    }
}

impl<F, E> Future for LatencyFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        if let Ok(response) = &result {
            record_latency(this.histograms, response.status(), this.started.elapsed());
        }
        Poll::Ready(result)
    }
}

/// Records one request's latency in the histogram of its status class.
pub(crate) fn record_latency(histograms: &[Histogram; 5], status: StatusCode, elapsed: Duration) {
    let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
    histograms[class].record(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new("test (127.0.0.1:1)".to_owned())
    }

    #[test]
    fn latency_is_a_histogram_per_route_and_class() {
        let m = metrics();
        let route = m.route_histograms("/v1/ids/{key}");
        record_latency(&route, StatusCode::OK, Duration::from_micros(300));
        record_latency(&route, StatusCode::NOT_FOUND, Duration::from_millis(2));
        m.handle.run_upkeep();
        let text = m.handle.render();
        assert!(
            text.contains(
                r#"idmint_http_request_duration_seconds_bucket{route="/v1/ids/{key}",status="2xx",le="0.0005"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"idmint_http_request_duration_seconds_count{route="/v1/ids/{key}",status="4xx"} 1"#
            ),
            "{text}"
        );
    }
}
