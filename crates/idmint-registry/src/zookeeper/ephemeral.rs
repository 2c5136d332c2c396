//! [`ZooKeeperMode::Ephemeral`]: Twitter Snowflake's scheme, one ephemeral
//! znode per worker ID, so the ZooKeeper session is the lease (see the
//! [parent module](super)'s docs for the contract).
//!
//! Every step that acts on a claim first checks that our session still owns
//! the worker node ([`Ephemeral::owned_version`]); the mark is raised only in
//! one multi-op together with a version-checked write on that node, so a
//! holder that lost its session can never raise the mark a new holder
//! started from. A clean stop's record sets the mark to what the holder
//! issued in the same multi-op, under the same check.

use std::time::Instant;

use async_trait::async_trait;
use jiff::Timestamp;
use zookeeper_client as zk;

use super::{
    CAS_ATTEMPTS, KIND, NodeRecord, Session, backend, identity_lines, node_address,
    parse_mark_node, parse_record, read_children, split_address, with_ages,
};
use crate::error::{RegistryError, Result};
use crate::registry::{Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry};
use crate::util::{ceil_ms, distinct_below, sample_free};

/// How many free workers a claim tries before it lists the held ones again:
/// after losing that many to other claimers, its list is stale.
const CLAIM_TRIES: usize = 4;

/// How many peers' reports a start reads, at most: enough for the clock
/// check's median, O(1) in the fleet's size.
const PEER_SAMPLE: u32 = 64;

/// How [`Ephemeral::write_mark`] writes the mark.
#[derive(Debug, Clone, Copy)]
enum Write {
    /// A persist: only ever raised.
    Raise,
    /// A clean stop's record: set to what the holder issued
    /// ([`WorkerRegistry::record_clean_stop`]).
    CleanStop,
}

/// The Ephemeral protocol on one session (replaced when it ends).
#[derive(Debug)]
pub(super) struct Ephemeral {
    session: Session,
}

impl Ephemeral {
    pub(super) fn new(session: Session) -> Ephemeral {
        Ephemeral { session }
    }

    pub(super) fn session(&self) -> &Session {
        &self.session
    }

    /// Writes the mark with the report, in one multi-op with a
    /// version-checked write on our own worker node (the fence): raised
    /// for a persist, set for a clean stop's record.
    async fn write_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
        write: Write,
    ) -> Result<()> {
        let operation = match write {
            Write::Raise => "persist mark",
            Write::CleanStop => "record clean stop",
        };
        let client = self.client_for_lease(claim)?;
        let worker_path = self.session.worker_path(claim.worker);
        let mark_path = self.session.mark_path(claim.worker);
        self.session
            .call(operation, async {
                for _ in 0..CAS_ATTEMPTS {
                    let version = self.owned_version(&client, claim, operation).await?;
                    // Who holds the node stays in its data (the multi-op's
                    // version check fails if it changed since this read).
                    let (own_data, own_stat) = match client.get_data(&worker_path).await {
                        Ok(got) => got,
                        Err(zk::Error::NoNode) => {
                            return Err(self
                                .session
                                .lease_lost(claim.worker, "the worker node is gone"));
                        }
                        Err(e) => return Err(backend(operation, &e)),
                    };
                    if own_stat.version != version {
                        continue;
                    }
                    let held = parse_record(operation, claim.worker, &own_data)?;
                    let (old, mark_version) = match client.get_data(&mark_path).await {
                        Ok((data, stat)) => (
                            parse_mark_node(operation, claim.worker, &data)?,
                            Some(stat.version),
                        ),
                        Err(zk::Error::NoNode) => (None, None),
                        Err(e) => return Err(backend(operation, &e)),
                    };
                    let new_mark = match write {
                        Write::Raise => old.map_or(mark, |old| old.max(mark)),
                        Write::CleanStop => mark,
                    };
                    let mut multi = client.new_multi_writer();
                    let own = render_ephemeral_reported(&held, reported);
                    let mark_data = ceil_ms(new_mark).to_string();
                    let built = (|| {
                        multi.add_set_data(&worker_path, own.as_bytes(), Some(version))?;
                        match mark_version {
                            Some(v) => {
                                multi.add_set_data(&mark_path, mark_data.as_bytes(), Some(v))
                            }
                            None => multi.add_create(
                                &mark_path,
                                mark_data.as_bytes(),
                                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                            ),
                        }
                    })();
                    built.map_err(|e| backend(operation, &e))?;
                    match multi.commit().await {
                        Ok(_) => return Ok(()),
                        Err(e) => match zk::Error::from(e) {
                            // Our node or the mark changed in between: look again (a
                            // lost node then shows as LeaseLost).
                            zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode => {
                                continue;
                            }
                            zk::Error::SessionExpired => {
                                return Err(self
                                    .session
                                    .lease_lost(claim.worker, "the zookeeper session expired"));
                            }
                            e => return Err(backend(operation, &e)),
                        },
                    }
                }
                Err(RegistryError::Backend {
                    registry: KIND,
                    operation,
                    message: format!("{mark_path} kept changing over {CAS_ATTEMPTS} attempts"),
                })
            })
            .await
    }

    /// Reads our ephemeral node and checks this session owns it; returns its version.
    async fn owned_version(
        &self,
        client: &zk::Client,
        claim: &Claim,
        operation: &'static str,
    ) -> Result<i32> {
        let session = client.session_id().0;
        if claim.token != format!("{session:x}") {
            return Err(self.session.lease_lost(
                claim.worker,
                "the claim was made on another zookeeper session",
            ));
        }
        match client
            .check_stat(&self.session.worker_path(claim.worker))
            .await
        {
            Ok(Some(stat)) if stat.ephemeral_owner == session => Ok(stat.version),
            Ok(Some(stat)) => Err(self.session.lease_lost(
                claim.worker,
                format!(
                    "the worker node is owned by session {:#x}",
                    stat.ephemeral_owner
                ),
            )),
            Ok(None) => Err(self
                .session
                .lease_lost(claim.worker, "the worker node is gone")),
            Err(zk::Error::SessionExpired) => Err(self
                .session
                .lease_lost(claim.worker, "the zookeeper session expired")),
            Err(e) => Err(backend(operation, &e)),
        }
    }

    fn client_for_lease(&self, claim: &Claim) -> Result<zk::Client> {
        self.session.client().ok_or_else(|| {
            self.session
                .lease_lost(claim.worker, "the zookeeper session was closed")
        })
    }
}

#[async_trait]
impl WorkerRegistry for Ephemeral {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        let client = self.session.live_client("claim").await?;
        let address = node_address(node);
        let dir = format!("{}/workers", self.session.config.root());
        let session = client.session_id().0;
        self.session.call("claim", async {
            let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
            loop {
                let held = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend("list workers", &e))?;
                let held: std::collections::HashSet<u32> =
                    held.iter().filter_map(|c| c.parse().ok()).filter(|w| *w < range).collect();
                if held.len() as u64 >= u64::from(range) {
                    return Err(RegistryError::Exhausted {
                        registry: KIND,
                        in_use: held.len() as u64,
                        range: u64::from(range),
                    });
                }
                // A few free IDs drawn at random spread concurrent claimers
                // over the space (the first free ones from a random start
                // would make them queue behind each other), and after losing
                // those the claimer lists again rather than trying stale IDs.
                for worker in sample_free(range, &held, CLAIM_TRIES) {
                    let data = render_ephemeral(&address, &node.host);
                    let before = Instant::now();
                    let path = self.session.worker_path(worker);
                    // Armed until the claim is handed on: a claim cancelled
                    // (the keeper's timeout) or failed after the create
                    // would otherwise leave the node to this live session,
                    // holding the worker for as long as the process runs.
                    let mut orphan = DeleteOwnedOnDrop {
                        client: Some(client.clone()),
                        path: path.clone(),
                        session,
                    };
                    match client.create(&path, data.as_bytes(), &options).await {
                        Ok(_) => {
                            let stored_mark = match client.get_data(&self.session.mark_path(worker)).await {
                                Ok((data, _)) => parse_mark_node("claim", worker, &data)?,
                                Err(zk::Error::NoNode) => None,
                                Err(e) => return Err(backend("read mark", &e)),
                            };
                            let ttl = client.session_timeout();
                            tracing::info!(worker, ?stored_mark, session = %format!("{session:#x}"), "claimed ephemeral worker ID on zookeeper");
                            orphan.client = None;
                            return Ok(Claim {
                                worker,
                                stored_mark,
                                lease: Some(Lease {
                                    ttl,
                                    valid_until: before + ttl,
                                }),
                                token: format!("{session:x}"),
                            });
                        }
                        Err(zk::Error::NodeExists) => {
                            // Someone else's node: not ours to delete.
                            orphan.client = None;
                            continue;
                        }
                        Err(zk::Error::SessionExpired) => {
                            return Err(self.session.lease_lost(worker, "the zookeeper session expired"));
                        }
                        Err(e) => return Err(backend("create worker node", &e)),
                    }
                }
                // Every ID that looked free was taken meanwhile: look again.
            }
        })
        .await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        let client = self.client_for_lease(claim)?;
        let before = Instant::now();
        self.session
            .call("renew", self.owned_version(&client, claim, "renew"))
            .await?;
        let ttl = client.session_timeout();
        Ok(Some(Lease {
            ttl,
            valid_until: before + ttl,
        }))
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.write_mark(claim, mark, reported, Write::Raise).await
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.write_mark(claim, high, reported, Write::CleanStop)
            .await
    }

    /// The reports of up to [`PEER_SAMPLE`] live peers, drawn at random:
    /// one listing of the worker nodes (names only), then their data read
    /// at once. A start in a fleet of 1,000 that read every peer's report
    /// one after another took over the 2 s call timeout when the fleet
    /// started together (591 of 1,000 starts refused); a random sample
    /// gives the clock check's median as well (etcd and Redis do the same).
    /// Each report's age is told by the leader's clock ([`with_ages`]).
    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        const OP: &str = "list peers";
        let client = self.session.live_client(OP).await?;
        let dir = format!("{}/workers", self.session.config.root());
        self.session
            .call(OP, async {
                let mut children: Vec<(u32, String)> = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend(OP, &e))?
                    .into_iter()
                    .filter_map(|child| Some((child.parse::<u32>().ok()?, child)))
                    .filter(|(worker, _)| *worker != claim.worker)
                    .collect();
                if children.len() > PEER_SAMPLE as usize {
                    let picked = distinct_below(children.len() as u32, PEER_SAMPLE);
                    children = picked
                        .into_iter()
                        .map(|i| children[i as usize].clone())
                        .collect();
                }
                // This node's own worker node is read in the same batch:
                // its mtime (its claim, or its last report) is the
                // leader's clock at a write this node made anyway.
                let mut names: Vec<String> = children.iter().map(|(_, c)| c.clone()).collect();
                names.push(claim.worker.to_string());
                let mut read = read_children(&client, OP, &dir, &names).await?;
                let own = read.pop().flatten().map(|(_, stat)| stat.mtime);
                let mut found = Vec::new();
                for ((worker, _), node) in children.into_iter().zip(read) {
                    let Some((data, stat)) = node else {
                        continue;
                    };
                    if let Some(reported) = parse_record(OP, worker, &data)?.reported {
                        found.push((PeerReport::new(worker, reported), stat.mtime));
                    }
                }
                let mut peers = with_ages(found, own);
                peers.sort_by_key(|p| p.worker);
                Ok(peers)
            })
            .await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        const OP: &str = "list fleet";
        let client = self.session.live_client(OP).await?;
        let dir = format!("{}/workers", self.session.config.root());
        self.session
            .call(OP, async {
                let children = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend(OP, &e))?;
                let mut rows = Vec::new();
                for child in children {
                    let Ok(worker) = child.parse::<u32>() else {
                        continue;
                    };
                    let data = match client.get_data(&format!("{dir}/{child}")).await {
                        Ok((data, _)) => data,
                        // Its session ended since the listing.
                        Err(zk::Error::NoNode) => continue,
                        Err(e) => return Err(backend(OP, &e)),
                    };
                    let record = parse_record(OP, worker, &data)?;
                    let mut row = FleetMember::new(worker);
                    if let Some((a, port)) = record.address.as_deref().and_then(split_address) {
                        row.address = Some(a);
                        row.port = Some(port);
                    }
                    row.host = record.host;
                    row.live = true;
                    row.reported = record.reported;
                    row.mark = match client.get_data(&self.session.mark_path(worker)).await {
                        Ok((data, _)) => parse_mark_node(OP, worker, &data)?,
                        Err(zk::Error::NoNode) => None,
                        Err(e) => return Err(backend(OP, &e)),
                    };
                    rows.push(row);
                }
                rows.sort_by_key(|r| r.worker);
                Ok(rows)
            })
            .await
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let Some(client) = self.session.client() else {
            return Ok(());
        };
        self.session.call("release", async {
            let version = match self.owned_version(&client, claim, "release").await {
                Ok(v) => v,
                Err(RegistryError::LeaseLost { reason, .. }) => {
                    // Not ours any more: nothing to give back, the new holder's node stays.
                    tracing::warn!(worker = claim.worker, %reason, "released a zookeeper worker that was already gone");
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            match client.delete(&self.session.worker_path(claim.worker), Some(version)).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(e) => Err(backend("release", &e)),
            }
        })
        .await
    }
}

/// A new ephemeral node's data: who holds it. No `reported=` line: a holder
/// reports with its first persisted mark, by its generator's clock, and until
/// then is no peer to compare clocks with.
fn render_ephemeral(address: &str, host: &str) -> String {
    identity_lines(address, Some(host))
}

/// A report on an ephemeral node: its identity lines (as `held` has them),
/// then the time.
pub(super) fn render_ephemeral_reported(held: &NodeRecord, reported: Timestamp) -> String {
    let identity = held
        .address
        .as_deref()
        .map(|a| identity_lines(a, held.host.as_deref()))
        .unwrap_or_default();
    format!("{identity}reported={}\n", reported.as_millisecond())
}

/// Deletes a worker node this session created, when dropped armed: the claim
/// that created it was cancelled or failed before handing it on. On a task
/// of its own (a drop can't wait); the node is deleted only if this session
/// still owns it, so another session's node is never touched.
struct DeleteOwnedOnDrop {
    /// `Some` while armed.
    client: Option<zk::Client>,
    path: String,
    session: i64,
}

impl Drop for DeleteOwnedOnDrop {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (path, session) = (std::mem::take(&mut self.path), self.session);
        runtime.spawn(async move {
            if let Ok(Some(stat)) = client.check_stat(&path).await
                && stat.ephemeral_owner == session
            {
                let deleted = client.delete(&path, Some(stat.version)).await;
                tracing::debug!(%path, ?deleted, "deleted the node of a cancelled zookeeper claim");
            }
        });
    }
}
