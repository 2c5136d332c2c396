//! [`SqlMode::Lease`]: worker IDs `0..range` of a cluster are rows `(CLUSTER,
//! WORKER)`, taken over by a compare-and-set once their lease expired or
//! created on first use, and renewed by a heartbeat. See the [parent
//! module](super)'s docs for why each claim is atomic, how the token
//! fences a stale holder, and how the epoch fences every holder when the
//! database forgot.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_sql::{Bind, is_retryable, is_unique_violation};
use jiff::Timestamp;

use super::{
    Base, NODE_TYPE_ACTUAL, REGISTRY, SqlMode, backend_error, mark_to_us_ceil, new_token,
    recent_us, timestamp_from_us, token_epoch, worker_u32,
};
use crate::error::{RegistryError, Result};
use crate::registry::{Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry};
use crate::util::{random_u64, registration_suffix};

/// How many expired candidates one claim attempt reads at once.
const CANDIDATE_BATCH: i64 = 32;

/// Lease mode on its table.
#[derive(Debug)]
pub(super) struct Leased {
    pub(super) base: Base,
}

/// What an insert of a new worker row did.
enum Inserted {
    Won(Claim),
    /// The row exists (someone created it first), or a transient error:
    /// look again.
    Taken,
    /// The epoch condition refused it: the epoch moved.
    Refused,
}

impl Leased {
    /// A claim of any free worker ID in `epoch`; `None` when the epoch moved
    /// under it (check it again).
    async fn claim_any(
        &self,
        node: &NodeIdentity,
        range: u32,
        epoch: String,
    ) -> Result<Option<Claim>> {
        const OP: &str = "claim";
        let cluster = self.base.config.cluster.as_str();
        let range_i = i64::from(range);
        loop {
            let candidates = self
                .base
                .fetch_ints(
                    &self.base.sql.lease_candidates,
                    &[
                        Bind::Text(cluster),
                        Bind::Int(range_i),
                        Bind::Int(CANDIDATE_BATCH),
                    ],
                )
                .await;
            let candidates = match candidates {
                Ok(c) => c,
                Err(e) if is_retryable(&e) => continue,
                Err(e) => return Err(backend_error(OP)(e)),
            };
            // Start at a random candidate so concurrent claimers spread out
            // instead of all racing for the lowest expired ID.
            let start = if candidates.is_empty() {
                0
            } else {
                (random_u64() % candidates.len() as u64) as usize
            };
            for &worker in candidates[start..].iter().chain(&candidates[..start]) {
                if let Some(claim) = self.take_row(node, worker, &epoch).await? {
                    return Ok(Some(claim));
                }
            }
            if !candidates.is_empty() {
                // Every candidate went to someone else, or the epoch
                // condition refused them all: look again, in this epoch
                // only if it still stands.
                if !self.base.epoch_current(&epoch).await? {
                    return Ok(None);
                }
                continue;
            }
            let max = match self
                .base
                .fetch_opt_int(&self.base.sql.lease_max, &[Bind::Text(cluster)])
                .await
            {
                Ok(m) => m.flatten(),
                Err(e) if is_retryable(&e) => continue,
                Err(e) => return Err(backend_error(OP)(e)),
            };
            let next = max.map_or(0, |m| m + 1);
            if next >= range_i {
                let in_use = self
                    .base
                    .fetch_ints(
                        &self.base.sql.lease_in_use,
                        &[Bind::Text(cluster), Bind::Int(range_i)],
                    )
                    .await
                    .map_err(backend_error(OP))?;
                return Err(RegistryError::Exhausted {
                    registry: REGISTRY,
                    in_use: in_use.first().copied().unwrap_or(0).max(0) as u64,
                    range: u64::from(range),
                });
            }
            match self.insert_row(node, next, &epoch).await? {
                Inserted::Won(claim) => return Ok(Some(claim)),
                Inserted::Refused => return Ok(None),
                // Someone else created this number first: look again.
                Inserted::Taken => {}
            }
        }
    }

    /// One compare-and-set takeover of `worker`'s row, whose lease must be free
    /// or expired, in `epoch`. `None`: not taken (held, or lost again at
    /// once, or a transient error, or the epoch condition refused it): look
    /// again.
    async fn take_row(
        &self,
        node: &NodeIdentity,
        worker: i64,
        epoch: &str,
    ) -> Result<Option<Claim>> {
        const OP: &str = "claim";
        let cluster = self.base.config.cluster.as_str();
        let token = new_token(epoch);
        let [e_table, e_cluster, e_id] = self.base.guard_binds(&token);
        let before = Instant::now();
        let taken = self
            .base
            .exec_rows(
                &self.base.sql.lease_take,
                &[
                    Bind::Text(&token),
                    Bind::Int(self.base.ttl_us()),
                    Bind::Text(&node.host),
                    Bind::Text(&node.port.to_string()),
                    Bind::Text(&node.address),
                    Bind::Text(cluster),
                    Bind::Int(worker),
                    e_table,
                    e_cluster,
                    e_id,
                ],
            )
            .await;
        match taken {
            Ok(1) => {}
            Ok(_) => return Ok(None),
            Err(e) if is_retryable(&e) => return Ok(None),
            Err(e) => return Err(backend_error(OP)(e)),
        }
        // The row is ours and only the token holder can change its mark, so
        // this read sees the mark every earlier holder left.
        let mark = self
            .base
            .fetch_opt_int(
                &self.base.sql.lease_mark,
                &[Bind::Text(cluster), Bind::Int(worker), Bind::Text(&token)],
            )
            .await
            .map_err(backend_error(OP))?;
        // `None`: lost again already (a TTL shorter than a round trip).
        let Some(mark_us) = mark else {
            return Ok(None);
        };
        Ok(Some(Claim {
            worker: worker_u32(worker)?,
            stored_mark: mark_us.map(timestamp_from_us).transpose()?,
            lease: Some(self.base.lease_from(before)),
            token,
        }))
    }

    /// Creates `worker`'s row, held by `node`, in `epoch`.
    async fn insert_row(&self, node: &NodeIdentity, worker: i64, epoch: &str) -> Result<Inserted> {
        let token = new_token(epoch);
        let [e_table, e_cluster, e_id] = self.base.guard_binds(&token);
        let before = Instant::now();
        let inserted = self
            .base
            .exec_rows(
                &self.base.sql.lease_insert,
                &[
                    Bind::Text(&self.base.config.cluster),
                    Bind::Int(worker),
                    Bind::Text(&node.host),
                    Bind::Text(&node.port.to_string()),
                    Bind::Text(&node.address),
                    Bind::Int(NODE_TYPE_ACTUAL),
                    Bind::Text(&token),
                    Bind::Int(self.base.ttl_us()),
                    e_table,
                    e_cluster,
                    e_id,
                ],
            )
            .await;
        match inserted {
            Ok(0) => Ok(Inserted::Refused),
            Ok(_) => Ok(Inserted::Won(Claim {
                worker: worker_u32(worker)?,
                stored_mark: None,
                lease: Some(self.base.lease_from(before)),
                token,
            })),
            Err(e) if is_unique_violation(&e) || is_retryable(&e) => Ok(Inserted::Taken),
            Err(e) => Err(backend_error("claim")(e)),
        }
    }

    /// Takes `worker`'s row if its lease is free, or creates it if there is none,
    /// in `epoch`; names the holder when it is held. `None` when the epoch
    /// moved under it.
    async fn claim_given(
        &self,
        node: &NodeIdentity,
        worker: u32,
        epoch: String,
    ) -> Result<Option<Claim>> {
        let worker_i = i64::from(worker);
        loop {
            if let Some(claim) = self.take_row(node, worker_i, &epoch).await? {
                return Ok(Some(claim));
            }
            // Not taken: held by someone, or there is no row yet.
            let holder = match self
                .base
                .fetch_texts3(
                    &self.base.sql.lease_holder,
                    &[Bind::Text(&self.base.config.cluster), Bind::Int(worker_i)],
                )
                .await
            {
                Ok(h) => h,
                Err(e) if is_retryable(&e) => continue,
                Err(e) => return Err(backend_error("claim")(e)),
            };
            if let Some((host, address, port)) = holder {
                return Err(RegistryError::WorkerTaken {
                    registry: REGISTRY,
                    worker,
                    node: node.to_string(),
                    holder: format!("{host} ({address}:{port})"),
                    origin: None,
                });
            }
            // Not held: free, or refused by the epoch condition.
            if !self.base.epoch_current(&epoch).await? {
                return Ok(None);
            }
            match self.insert_row(node, worker_i, &epoch).await? {
                Inserted::Won(claim) => return Ok(Some(claim)),
                Inserted::Refused => return Ok(None),
                // The row appeared or was freed meanwhile: look again.
                Inserted::Taken => {}
            }
        }
    }
}

#[async_trait]
impl WorkerRegistry for Leased {
    fn kind(&self) -> &'static str {
        REGISTRY
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        debug_assert_eq!(self.base.config.mode, SqlMode::Lease);
        let claim = self
            .base
            .claim_in_epoch(|epoch| self.claim_any(node, range, epoch));
        self.base.timed("claim", claim).await
    }

    async fn claim_worker(&self, node: &NodeIdentity, worker: u32, _range: u32) -> Result<Claim> {
        let claim = self
            .base
            .claim_in_epoch(|epoch| self.claim_given(node, worker, epoch));
        self.base.timed("claim", claim).await
    }

    /// One statement takes the row (free, or still the old token's, its
    /// mark not above `mark`) in the current epoch, raising its mark; a
    /// second creates it when the database lost it. Both carry the epoch
    /// condition of renewals (the server and the epoch, not the hold: the
    /// hold waits for this holder).
    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim> {
        const OP: &str = "register again";
        let register = async {
            let epoch = self.base.check_epoch(OP, false).await?;
            if token_epoch(&claim.token) == Some(epoch.id.as_str()) {
                return Err(self
                    .base
                    .lease_lost(claim, "register again: the lease was lost within its epoch"));
            }
            // The same token on every try (see `registration_suffix`).
            let token = format!(
                "{}/{}",
                epoch.id,
                registration_suffix(&claim.token, &epoch.id)
            );
            let mark_us = mark_to_us_ceil(mark);
            self.base.note_mark(mark_us);
            let cluster = self.base.config.cluster.as_str();
            let worker = i64::from(claim.worker);
            let port = node.port.to_string();
            let [e_table, e_cluster, e_id] = self.base.guard_binds(&token);
            let before = Instant::now();
            let taken = self
                .base
                .exec_rows(
                    &self.base.sql.lease_register,
                    &[
                        Bind::Text(&token),
                        Bind::Int(self.base.ttl_us()),
                        Bind::Text(&node.host),
                        Bind::Text(&port),
                        Bind::Text(&node.address),
                        Bind::Int(mark_us),
                        Bind::Int(mark_us),
                        Bind::Text(cluster),
                        Bind::Int(worker),
                        Bind::Text(&claim.token),
                        Bind::Text(&token),
                        Bind::Int(mark_us),
                        e_table,
                        e_cluster,
                        e_id,
                    ],
                )
                .await
                .map_err(backend_error(OP))?;
            if taken == 0 {
                let [e_table, e_cluster, e_id] = self.base.guard_binds(&token);
                let inserted = self
                    .base
                    .exec_rows(
                        &self.base.sql.lease_register_insert,
                        &[
                            Bind::Text(cluster),
                            Bind::Int(worker),
                            Bind::Text(&node.host),
                            Bind::Text(&port),
                            Bind::Text(&node.address),
                            Bind::Int(NODE_TYPE_ACTUAL),
                            Bind::Text(&token),
                            Bind::Int(self.base.ttl_us()),
                            Bind::Int(mark_us),
                            e_table,
                            e_cluster,
                            e_id,
                        ],
                    )
                    .await;
                match inserted {
                    Ok(1) => {}
                    // The row is there: held by another token, or a higher
                    // mark is stored.
                    Err(e) if is_unique_violation(&e) => {
                        return Err(self.base.lease_lost(
                            claim,
                            "register again: the new epoch shows the worker held by another \
                             node, or a higher mark than this holding's stored",
                        ));
                    }
                    // The epoch moved again meanwhile: an answer a retry changes.
                    Ok(_) => {
                        return Err(RegistryError::backend(
                            REGISTRY,
                            OP,
                            "the registry's epoch changed again during the registration",
                        ));
                    }
                    Err(e) => return Err(backend_error(OP)(e)),
                }
            }
            tracing::info!(
                worker = claim.worker,
                epoch = %epoch.id,
                "registered the worker again in the sql registry's new epoch"
            );
            Ok(Claim {
                worker: claim.worker,
                stored_mark: Some(timestamp_from_us(mark_us)?),
                lease: Some(self.base.lease_from(before)),
                token,
            })
        };
        self.base.timed(OP, register).await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        let before = Instant::now();
        let [e_table, e_cluster, e_id] = self.base.guard_binds(&claim.token);
        let rows = self
            .base
            .exec(
                "renew",
                &self.base.sql.lease_renew,
                &[
                    Bind::Int(self.base.ttl_us()),
                    Bind::Text(&self.base.config.cluster),
                    Bind::Int(i64::from(claim.worker)),
                    Bind::Text(&claim.token),
                    e_table,
                    e_cluster,
                    e_id,
                ],
            )
            .await?;
        self.base.renewed(claim, rows).await?;
        Ok(Some(self.base.lease_from(before)))
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let cluster = Bind::Text(&self.base.config.cluster);
        self.base
            .persist(&self.base.sql.lease_persist, cluster, claim, mark, reported)
            .await
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let cluster = Bind::Text(&self.base.config.cluster);
        self.base
            .record_stop(&self.base.sql.lease_stop, cluster, claim, high, reported)
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        let cluster = Bind::Text(&self.base.config.cluster);
        let worker = Bind::Int(i64::from(claim.worker));
        self.base
            .peers(&self.base.sql.lease_peers, &[cluster, worker])
            .await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        let cluster = Bind::Text(&self.base.config.cluster);
        let rows = self
            .base
            .fleet_rows(
                &self.base.sql.lease_fleet,
                &[cluster, Bind::Int(recent_us())],
            )
            .await?;
        rows.into_iter()
            .map(|row| {
                let left_us = row.4.unwrap_or(0);
                let mut member = Base::fleet_member(row, false)?;
                member.lease_left = Some(Duration::from_micros(left_us.max(0).unsigned_abs()));
                Ok(member)
            })
            .collect()
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let binds = [
            Bind::Text(&self.base.config.cluster),
            Bind::Int(i64::from(claim.worker)),
            Bind::Text(&claim.token),
        ];
        self.base
            .release(&self.base.sql.lease_release, claim, &binds)
            .await
    }
}
