//! The standard services beside `idmint.v1.IdService` on the gRPC listener:
//! `grpc.health.v1.Health`, which Kubernetes gRPC probes and load balancers
//! ask, and server reflection (v1 and v1alpha), through which grpcurl and
//! other generic clients list and call the services without the proto file.
//!
//! # Health follows readiness
//! The overall service `""` and `idmint.v1.IdService` are `SERVING` exactly
//! while `GET /readyz` answers 200: both read `ready::not_ready_reason` (the
//! worker lease, then the clock). A follower task reads it every
//! [`FOLLOW_PERIOD`] and reports each change, so `Check` answers the latest
//! verdict and `Watch` streams every change. When the server stops, both turn
//! `NOT_SERVING` and open `Watch` streams end right after saying so, so a
//! watcher neither holds the shutdown up nor misses why its stream ended.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt, stream};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;
use tonic::server::NamedService;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::health_check_response::ServingStatus as WireStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::{HealthReporter, HealthService};
use tonic_reflection::server::{v1, v1alpha};

use super::proto::id_service_server::IdServiceServer;
use crate::ready;
use crate::state::AppState;

/// How often the follower reads readiness: well under any probe's period,
/// and a read costs a status copy and a clock read.
const FOLLOW_PERIOD: Duration = Duration::from_millis(100);

/// The names the health service answers for: the server as a whole (`""`)
/// and the ID service.
fn service_names() -> [&'static str; 2] {
    ["", <IdServiceServer<super::Service> as NamedService>::NAME]
}

/// The health service, its statuses set from readiness now, and the guard of
/// the task that keeps them following it until `stop` turns true.
pub(super) async fn health(
    state: Arc<AppState>,
    stop: watch::Receiver<bool>,
) -> (HealthServer<FollowsReadiness>, AbortOnDropHandle<()>) {
    let reporter = HealthReporter::new();
    let serving = report(&reporter, &state, None).await;
    let service = FollowsReadiness {
        inner: HealthService::from_health_reporter(reporter.clone()),
        stop: stop.clone(),
    };
    let follower = tokio::spawn(follow(state, reporter, serving, stop));
    (HealthServer::new(service), AbortOnDropHandle::new(follower))
}

/// Reports readiness when it differs from `last` (`None`: always), and
/// returns it (true: serving).
async fn report(reporter: &HealthReporter, state: &AppState, last: Option<bool>) -> bool {
    let reason = ready::not_ready_reason(state);
    let serving = reason.is_none();
    if last != Some(serving) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        if last.is_some() {
            tracing::info!(
                status = %status,
                reason = reason.as_deref().unwrap_or(""),
                "gRPC health changed"
            );
        }
        for name in service_names() {
            reporter.set_service_status(name, status).await;
        }
    }
    serving
}

/// Keeps the statuses on readiness until `stop`; then `NOT_SERVING`, sent
/// even when unchanged, so every open `Watch` gets a last message and ends.
async fn follow(
    state: Arc<AppState>,
    reporter: HealthReporter,
    mut serving: bool,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(FOLLOW_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => serving = report(&reporter, &state, Some(serving)).await,
            () = crate::listen::stopped(&mut stop) => break,
        }
    }
    for name in service_names() {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
}

/// tonic-health's service, with `Watch` streams that end once the server
/// stops (after their `NOT_SERVING`): a watch never ends by itself, and
/// would otherwise hold the shutdown up for the whole grace.
pub(super) struct FollowsReadiness {
    inner: HealthService,
    stop: watch::Receiver<bool>,
}

/// What `Watch` answers.
type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for FollowsReadiness {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.inner.check(request).await
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let statuses = self.inner.watch(request).await?.into_inner();
        let stop = self.stop.clone();
        // Checks `ended` before polling again: the end comes with no message.
        let until_stopped = stream::unfold(
            (statuses, stop, false),
            |(mut statuses, stop, ended)| async move {
                if ended {
                    return None;
                }
                let message = statuses.next().await?;
                let not_serving =
                    matches!(&message, Ok(m) if m.status == WireStatus::NotServing as i32);
                let ended = *stop.borrow() && not_serving;
                Some((message, (statuses, stop, ended)))
            },
        );
        Ok(Response::new(Box::pin(until_stopped)))
    }
}

/// The reflection services, v1 and v1alpha (grpcurl asks v1 first, older
/// clients v1alpha), over the ID service's and the health service's file
/// descriptors (and reflection's own).
///
/// # Errors
/// When a descriptor set built into the binary does not decode.
pub(super) fn reflection() -> Result<
    (
        v1::ServerReflectionServer<impl v1::ServerReflection>,
        v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>,
    ),
    tonic_reflection::server::Error,
> {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(super::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflection_is_built_from_the_descriptors_in_the_binary() {
        reflection().expect("the built-in descriptor sets decode");
    }

    #[test]
    fn health_answers_for_the_server_and_the_id_service() {
        assert_eq!(service_names(), ["", "idmint.v1.IdService"]);
    }
}
