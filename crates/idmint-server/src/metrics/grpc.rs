//! gRPC latency (`idmint_grpc_request_duration_seconds{method,code}`) and
//! the `StreamIds` calls open now, which `grpc.rs` records.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use metrics::{Histogram, Recorder};

use super::{GRPC_LATENCY, METADATA, Metrics, key, label, lock};

impl Metrics {
    /// Records a gRPC call's latency under its method and outcome (`ok` or the
    /// status code's name).
    pub(crate) fn record_grpc_latency(
        &self,
        method: &'static str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        if let Some(h) = self.grpc_latency.load().get(&(method, outcome)) {
            h.record(elapsed.as_secs_f64());
            return;
        }
        self.insert_grpc(method, outcome)
            .record(elapsed.as_secs_f64());
    }

    #[cold]
    fn insert_grpc(&self, method: &'static str, outcome: &'static str) -> Histogram {
        let _one_writer = lock(&self.grpc_latency_insert);
        let current = self.grpc_latency.load_full();
        if let Some(h) = current.get(&(method, outcome)) {
            return h.clone();
        }
        let histogram = self.recorder.register_histogram(
            &key(
                GRPC_LATENCY,
                vec![label("method", method), label("code", outcome)],
            ),
            &METADATA,
        );
        let mut next = HashMap::clone(&current);
        next.insert((method, outcome), histogram.clone());
        self.grpc_latency.store(Arc::new(next));
        histogram
    }

    /// A `StreamIds` call opened.
    pub(crate) fn grpc_stream_opened(&self) {
        self.grpc_streams_open.fetch_add(1, Ordering::Relaxed);
    }

    /// A `StreamIds` call ended (finished, failed or cancelled).
    pub(crate) fn grpc_stream_closed(&self) {
        self.grpc_streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}
