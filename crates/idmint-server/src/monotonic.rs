//! The `monotonic` strategy: IDs from the cluster's timestamp oracle
//! (`idmint_registry::leader`), strictly increasing across every node.
//!
//! On the leader a request is one reservation from the oracle's generator.
//! On a follower it is forwarded to the leader over gRPC (`Reserve`); the
//! requests that arrive while a forward is in flight wait for the next one and
//! go together, as one call for the sum of their counts (PD's follower proxy
//! and client batching). Nothing is prefetched: IDs held back on a follower
//! would come out below IDs the leader issued after them.
//!
//! # Why a batch keeps the order
//! Every request in a forwarded call began before the call was sent, and the
//! leader's reservation for the call is above everything returned before the
//! call reached it. So each request's IDs are above every ID returned before
//! it began; requests of one call overlap in time, so their order among each
//! other is free.
//!
//! # No leader
//! While no leader is known (an election, a leader that stopped answering),
//! a request waits for one up to `monotonic.leader_wait`, then fails with
//! `503 no_leader` and a retry hint. A forward that fails because the node
//! asked no longer leads, or can't be reached, makes the campaign read the
//! registry at once. A forward that timed out may still have reserved IDs on
//! the leader; they are never handed out (a gap, never a repeat).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idmint_core::{Id, IdBatch, IdRun, Layout};
use idmint_registry::{Oracle, RegistryError};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::metrics::scrape::OracleReadings;
use crate::proto::ReserveRequest;
use crate::proto::id_service_client::IdServiceClient;
use crate::tls::Tls;
use idmint_node::IssueError;
use idmint_node::config::Secret;

/// How long a reservation on the leader waits for the keeper to persist the
/// next window before answering unavailable.
const MARK_WAIT: Duration = Duration::from_millis(250);

/// The oracle as the surfaces use it.
#[derive(Debug)]
pub(crate) struct Monotonic {
    oracle: Oracle,
    /// Forwards to the leader; `None` on a node that is its own oracle (the
    /// file registry).
    forwarder: Option<Forwarder>,
    leader_wait: Duration,
    /// `monotonic.layout`, and its name: what `/v1/decode/{id}?key=` reads
    /// a monotonic key's IDs with.
    pub layout: Layout,
    pub layout_text: String,
    /// Counts, for metrics: IDs reserved here as leader, and forwarded.
    pub reserved_here: AtomicU64,
    pub forwarded: AtomicU64,
}

impl Monotonic {
    pub(crate) fn new(
        oracle: Oracle,
        forwarder: Option<Forwarder>,
        leader_wait: Duration,
        layout: Layout,
    ) -> Monotonic {
        Monotonic {
            oracle,
            forwarder,
            leader_wait,
            layout,
            layout_text: layout
                .preset_name()
                .map_or_else(|| layout.to_string(), str::to_owned),
            reserved_here: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
        }
    }

    /// The oracle (role, leader, status).
    pub(crate) fn oracle(&self) -> &Oracle {
        &self.oracle
    }

    /// What a `/metrics` scrape reads of the oracle.
    pub(crate) fn readings(&self) -> OracleReadings {
        OracleReadings {
            status: self.oracle.status(),
            reserved_here: self.reserved_here.load(Ordering::Relaxed),
            forwarded: self.forwarded.load(Ordering::Relaxed),
        }
    }

    /// The oracle as `/readyz` and `/v1/status` show it: this node's role,
    /// the leader and its term, the window the leader may issue up to, and
    /// how the elections went as this node saw them. IDs and times as strings.
    pub(crate) fn snapshot(&self) -> serde_json::Value {
        let s = self.oracle.status();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        serde_json::json!({
            "role": s.role.name(),
            "leader": s.leader.as_ref().map(|l| grpc_addr(&l.node.address, l.node.port)),
            "leader_host": s.leader.as_ref().map(|l| l.node.host.clone()),
            "term": s.leader.as_ref().and_then(|l| l.term).map(|t| t.to_string()),
            "term_ms": s.leader.as_ref().and_then(|l| l.term).map(|t| t.as_millisecond().to_string()),
            "mark": s.mark.map(|t| t.to_string()),
            "window_left_ms": s.mark.map(|m| {
                let now = jiff::Timestamp::now();
                ms(Duration::try_from(m.duration_since(now)).unwrap_or_default())
            }),
            "leader_changes": s.leader_changes,
            "last_failover_ms": s.last_failover.map(ms),
            "leaderless_ms": s.leaderless_for.map(ms),
            "reserved_here": self.reserved_here.load(Ordering::Relaxed).to_string(),
            "forwarded": self.forwarded.load(Ordering::Relaxed).to_string(),
            "last_error": s.last_error,
        })
    }

    /// `n` IDs: reserved here when this node leads, else forwarded to the
    /// leader; waiting up to `monotonic.leader_wait` for one.
    pub(crate) async fn ids(&self, n: u64) -> Result<IdBatch, IssueError> {
        let deadline = Instant::now() + self.leader_wait;
        let mut changes = self.oracle.subscribe();
        loop {
            match self.reserve_here(n).await {
                Err(Reserve::NotLeader) => {}
                Err(Reserve::Failed(e)) => return Err(e),
                Ok(batch) => return Ok(batch),
            }
            let remote = self.oracle.leader().filter(|l| !l.is_self);
            if let (Some(leader), Some(forwarder)) = (remote, &self.forwarder) {
                let addr = grpc_addr(&leader.node.address, leader.node.port);
                match forwarder.reserve(addr, n, deadline).await {
                    Ok(batch) => {
                        self.forwarded.fetch_add(n, Ordering::Relaxed);
                        return Ok(batch);
                    }
                    Err(Forward::Failed(e)) => return Err(e),
                    Err(Forward::NoLeader(why)) => {
                        tracing::debug!(error = %why, "forward to the oracle's leader failed");
                        self.oracle.refresh();
                    }
                }
            }
            // Wait for the campaign to learn of a leader (or a new one), and
            // look again at least every poll-ish interval: a leader that
            // stopped answering does not change what the registry says.
            let now = Instant::now();
            if now >= deadline {
                return Err(self.no_leader());
            }
            let pause = (deadline - now).min(Duration::from_millis(50));
            let _ = tokio::time::timeout(pause, changes.changed()).await;
        }
    }

    /// `n` IDs reserved on this node as the leader (the `Reserve` RPC, and
    /// the leader's own requests). A `MarkReached` while the keeper persists
    /// the next window is waited out briefly.
    pub(crate) async fn reserve_here(&self, n: u64) -> Result<IdBatch, Reserve> {
        let mut deadline = None;
        loop {
            match self.oracle.reserve(n) {
                Ok(batch) => {
                    self.reserved_here.fetch_add(n, Ordering::Relaxed);
                    return Ok(batch);
                }
                Err(RegistryError::NotLeader { .. }) => return Err(Reserve::NotLeader),
                Err(RegistryError::Core(idmint_core::Error::MarkReached { .. }))
                    if std::time::Instant::now()
                        < *deadline
                            .get_or_insert_with(|| std::time::Instant::now() + MARK_WAIT) =>
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(RegistryError::Core(e @ idmint_core::Error::MarkReached { .. })) => {
                    return Err(Reserve::Failed(IssueError::unavailable(
                        e.code(),
                        format!(
                            "monotonic IDs are paused: the leader's mark can't be persisted: {e}"
                        ),
                        Duration::from_secs(1),
                    )));
                }
                Err(RegistryError::Core(e)) => return Err(Reserve::Failed(IssueError::from(e))),
                Err(e) => return Err(Reserve::Failed(IssueError::internal(e.to_string()))),
            }
        }
    }

    /// The error after `monotonic.leader_wait` without a leader.
    pub(crate) fn no_leader(&self) -> IssueError {
        let status = self.oracle.status();
        let why = match (status.leader, status.last_error) {
            (Some(l), _) => format!("the leader {} does not answer", l.node),
            (None, Some(e)) => format!("no leader is known: {e}"),
            (None, None) => "no leader is known: an election is under way".to_owned(),
        };
        IssueError::unavailable(
            "no_leader",
            format!(
                "monotonic IDs are paused for {:?} (monotonic.leader_wait): {why}",
                self.leader_wait
            ),
            Duration::from_secs(1),
        )
    }
}

/// Why a reservation on this node did not happen.
#[derive(Debug)]
pub(crate) enum Reserve {
    /// This node does not lead (or its lease's fence passed).
    NotLeader,
    /// It leads but could not reserve.
    Failed(IssueError),
}

/// Why a forward did not bring IDs.
#[derive(Debug, Clone)]
enum Forward {
    /// The node asked does not lead, can't be reached, or did not answer in
    /// time: look for the leader again.
    NoLeader(String),
    /// The leader answered with an error that another try won't change (a
    /// count out of range, a wrong token).
    Failed(IssueError),
}

/// `address:port` as a gRPC URL's authority (IPv6 in brackets).
fn grpc_addr(address: &str, port: u16) -> String {
    if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// One request waiting to be forwarded.
struct Pending {
    leader: String,
    n: u64,
    deadline: Instant,
    reply: oneshot::Sender<Result<IdBatch, Forward>>,
}

/// Forwards monotonic requests to the leader, combining those that wait
/// together into one `Reserve` call. The task it starts ends when the
/// forwarder is dropped.
#[derive(Debug)]
pub(crate) struct Forwarder {
    queue: mpsc::UnboundedSender<Pending>,
    task: JoinHandle<()>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Forwarder {
    /// Starts the forwarding task. `max_count` caps one call's sum (the
    /// leader's `server.max_count`); `token` is sent as the bearer token when
    /// the cluster has an admin token; with `tls`, calls go over TLS
    /// (`https://`), trusting `monotonic.forward_ca` and presenting
    /// `forward_cert`'s identity as the TLS set in force has them: after a
    /// reload (`SIGHUP`, or the files changed) the next call connects anew
    /// with the new files.
    pub(crate) fn spawn(max_count: u64, token: Option<Secret>, tls: Option<Arc<Tls>>) -> Forwarder {
        let (queue, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(
            Batcher {
                requests,
                max_count,
                token,
                tls,
                client: None,
                held: None,
            }
            .run(),
        );
        Forwarder { queue, task }
    }

    async fn reserve(&self, leader: String, n: u64, deadline: Instant) -> Result<IdBatch, Forward> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            leader,
            n,
            deadline,
            reply,
        };
        if self.queue.send(pending).is_err() {
            return Err(Forward::Failed(IssueError::internal(
                "the oracle's forwarding task has stopped",
            )));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Forward::Failed(IssueError::internal(
                "the oracle's forwarding task has stopped",
            )))
        })
    }
}

/// The forwarding task's state.
struct Batcher {
    requests: mpsc::UnboundedReceiver<Pending>,
    max_count: u64,
    token: Option<Secret>,
    tls: Option<Arc<Tls>>,
    /// The client of the leader last forwarded to, by address and by the
    /// generation of the forwarding TLS files it was made with (0: plain).
    client: Option<(String, u64, IdServiceClient<Channel>)>,
    /// A request taken from the queue that did not fit the last call.
    held: Option<Pending>,
}

impl Batcher {
    async fn run(mut self) {
        loop {
            let first = match self.held.take() {
                Some(p) => p,
                None => match self.requests.recv().await {
                    Some(p) => p,
                    None => return,
                },
            };
            let mut batch = vec![first];
            let mut total = batch[0].n;
            // Everything queued for the same leader that fits one call.
            while let Ok(p) = self.requests.try_recv() {
                if p.leader != batch[0].leader || total + p.n > self.max_count {
                    self.held = Some(p);
                    break;
                }
                total += p.n;
                batch.push(p);
            }
            self.forward(batch, total).await;
        }
    }

    /// One `Reserve` call for `total` IDs, split among `batch` in order.
    async fn forward(&mut self, batch: Vec<Pending>, total: u64) {
        let leader = batch[0].leader.clone();
        let deadline = batch
            .iter()
            .map(|p| p.deadline)
            .max()
            .unwrap_or_else(Instant::now);
        let result = self.call(&leader, total, deadline).await;
        match result {
            Ok(runs) => {
                let mut runs = runs.into_iter();
                let mut current: Option<(u64, u64)> = None;
                for p in batch {
                    let _ = p.reply.send(take(&mut runs, &mut current, p.n));
                }
            }
            Err(e) => {
                if matches!(e, Forward::NoLeader(_)) {
                    // A client of a node that does not lead is of no more use.
                    self.client = None;
                }
                for p in batch {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }

    async fn call(
        &mut self,
        leader: &str,
        total: u64,
        deadline: Instant,
    ) -> Result<Vec<(u64, u64)>, Forward> {
        let forwarding = self.tls.as_ref().and_then(|t| t.forwarding());
        let generation = forwarding.as_ref().map_or(0, |f| f.generation);
        let client = match &self.client {
            Some((addr, made_with, client)) if addr == leader && *made_with == generation => {
                client.clone()
            }
            _ => {
                let scheme = if forwarding.is_some() {
                    "https"
                } else {
                    "http"
                };
                let bad = |e: tonic::transport::Error| {
                    Forward::NoLeader(format!("leader address {leader:?}: {e}"))
                };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{leader}"))
                    .map_err(bad)?
                    .tcp_nodelay(true)
                    .connect_timeout(Duration::from_secs(1));
                if let Some(f) = forwarding {
                    endpoint = endpoint.tls_config(f.config).map_err(bad)?;
                }
                let client = IdServiceClient::new(endpoint.connect_lazy());
                self.client = Some((leader.to_owned(), generation, client.clone()));
                client
            }
        };
        let mut client = client;
        let mut request = tonic::Request::new(ReserveRequest { count: total });
        if let Some(token) = &self.token
            && let Ok(v) = format!("Bearer {}", token.expose()).parse()
        {
            request.metadata_mut().insert("authorization", v);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = tokio::time::timeout(left, client.reserve(request)).await;
        let response = match answer {
            Err(_) => {
                return Err(Forward::NoLeader(format!(
                    "{leader} did not answer in time"
                )));
            }
            Ok(Err(status)) => return Err(status_to_forward(leader, &status)),
            Ok(Ok(r)) => r.into_inner(),
        };
        if response.firsts.len() != response.counts.len()
            || response.counts.iter().sum::<u64>() != total
        {
            return Err(Forward::Failed(IssueError::internal(format!(
                "the leader {leader} answered a reservation of {total} IDs with {} runs of {} IDs",
                response.firsts.len(),
                response.counts.iter().sum::<u64>()
            ))));
        }
        Ok(response.firsts.into_iter().zip(response.counts).collect())
    }
}

/// What a failed `Reserve` call means for the requests in it.
fn status_to_forward(leader: &str, status: &tonic::Status) -> Forward {
    let code = status
        .metadata()
        .get(crate::error::ERROR_CODE_METADATA)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match status.code() {
        tonic::Code::Unavailable
        | tonic::Code::DeadlineExceeded
        | tonic::Code::Cancelled
        | tonic::Code::Unknown => {
            Forward::NoLeader(format!("{leader}: {} ({code})", status.message()))
        }
        _ => Forward::Failed(IssueError::internal(format!(
            "the leader {leader} refused a forwarded reservation: {} ({code})",
            status.message()
        ))),
    }
}

/// The next `n` IDs of `runs` (with `current` the rest of a run partly
/// taken), as a batch.
fn take(
    runs: &mut impl Iterator<Item = (u64, u64)>,
    current: &mut Option<(u64, u64)>,
    mut n: u64,
) -> Result<IdBatch, Forward> {
    let mut batch = IdBatch::new();
    let bad = |e: idmint_core::Error| Forward::Failed(IssueError::internal(e.to_string()));
    while n > 0 {
        let (first, count) = match current.take().or_else(|| runs.next()) {
            Some(run) => run,
            None => {
                return Err(Forward::Failed(IssueError::internal(
                    "the leader's reservation ran short",
                )));
            }
        };
        let here = count.min(n);
        batch
            .try_push(IdRun::try_new(Id::new(first).map_err(bad)?, here, 1).map_err(bad)?)
            .map_err(bad)?;
        if here < count {
            *current = Some((first + here, count - here));
        }
        n -= here;
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_split_in_order() {
        let runs = vec![(100u64, 5u64), (200, 3)];
        let mut it = runs.into_iter();
        let mut cur = None;
        let ids = |b: IdBatch| b.iter().map(Id::get).collect::<Vec<_>>();
        assert_eq!(
            ids(take(&mut it, &mut cur, 2).ok().unwrap()),
            vec![100, 101]
        );
        assert_eq!(
            ids(take(&mut it, &mut cur, 4).ok().unwrap()),
            vec![102, 103, 104, 200]
        );
        assert_eq!(
            ids(take(&mut it, &mut cur, 2).ok().unwrap()),
            vec![201, 202]
        );
        assert!(take(&mut it, &mut cur, 1).is_err());
    }

    #[test]
    fn ipv6_addresses_get_brackets() {
        assert_eq!(grpc_addr("10.0.0.1", 7), "10.0.0.1:7");
        assert_eq!(grpc_addr("::1", 7), "[::1]:7");
        assert_eq!(grpc_addr("idmint-0.idmint", 7), "idmint-0.idmint:7");
    }
}
