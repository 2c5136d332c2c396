//! [`SqlMode::Disposable`] (uid-generator's `WORKER_NODE` scheme on idmint's
//! table): every start inserts a row and the worker ID is its auto-increment
//! `ID`, never reused, so there is no lease; reports only refresh a liveness
//! deadline for the peers check. See the [parent module](super)'s docs.

use async_trait::async_trait;
use idmint_sql::Bind;
use jiff::Timestamp;

use super::{
    Base, NODE_TYPE_ACTUAL, REGISTRY, SqlMode, backend_error, new_token, recent_us, row_ids_only,
    worker_u32,
};
use crate::error::{RegistryError, Result};
use crate::registry::{Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry};

/// Disposable mode on its table.
#[derive(Debug)]
pub(super) struct Disposable {
    pub(super) base: Base,
}

impl Disposable {
    /// Inserts a disposable row and returns its `ID`; `None` when the epoch
    /// condition refused it.
    async fn insert_disposable(
        &self,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Option<i64>, sqlx::Error> {
        self.base
            .insert_returning_id(&self.base.sql.disposable_insert, binds)
            .await
    }

    /// A new row in `epoch`; `None` when the epoch moved under it.
    async fn claim_row(
        &self,
        node: &NodeIdentity,
        range: u32,
        epoch: String,
    ) -> Result<Option<Claim>> {
        const OP: &str = "claim";
        let port = node.port.to_string();
        let token = new_token(&epoch);
        let [e_table, e_cluster, e_id] = self.base.guard_binds(&token);
        let id = self
            .insert_disposable(&[
                Bind::Text(&self.base.config.cluster),
                Bind::Text(&node.host),
                Bind::Text(&port),
                Bind::Text(&node.address),
                Bind::Int(NODE_TYPE_ACTUAL),
                Bind::Text(&token),
                Bind::Int(self.base.ttl_us()),
                e_table,
                e_cluster,
                e_id,
            ])
            .await
            .map_err(backend_error(OP))?;
        let Some(id) = id else {
            return Ok(None);
        };
        if id >= i64::from(range) || id < 0 {
            // The row stays (IDs are never reused) but must not look alive.
            self.base
                .exec_rows(
                    &self.base.sql.disposable_release,
                    &[Bind::Int(id), Bind::Text(&token)],
                )
                .await
                .map_err(backend_error(OP))?;
            let in_use = self
                .base
                .fetch_ints(
                    &self.base.sql.disposable_in_use,
                    &[Bind::Int(i64::from(range))],
                )
                .await
                .map_err(backend_error(OP))?;
            return Err(RegistryError::Exhausted {
                registry: REGISTRY,
                in_use: in_use.first().copied().unwrap_or(0).max(0) as u64,
                range: u64::from(range),
            });
        }
        Ok(Some(Claim {
            worker: worker_u32(id)?,
            stored_mark: None,
            lease: None,
            token,
        }))
    }
}

#[async_trait]
impl WorkerRegistry for Disposable {
    fn kind(&self) -> &'static str {
        REGISTRY
    }

    /// A row's `ID` is never given again (a failover to a replica that
    /// lost rows aside, which the epoch catches: see the parent module).
    fn reassigns_workers(&self) -> bool {
        false
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        debug_assert_eq!(self.base.config.mode, SqlMode::Disposable);
        let claim = self
            .base
            .claim_in_epoch(|epoch| self.claim_row(node, range, epoch));
        self.base.timed("claim", claim).await
    }

    async fn claim_worker(&self, _node: &NodeIdentity, _worker: u32, _range: u32) -> Result<Claim> {
        Err(row_ids_only("disposable"))
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        self.base
            .renew_by_id(&self.base.sql.disposable_renew, claim)
            .await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let ttl = Bind::Int(self.base.ttl_us());
        self.base
            .persist(
                &self.base.sql.disposable_persist,
                ttl,
                claim,
                mark,
                reported,
            )
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        let cluster = Bind::Text(&self.base.config.cluster);
        let worker = Bind::Int(i64::from(claim.worker));
        self.base
            .peers(&self.base.sql.disposable_peers, &[cluster, worker])
            .await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        let cluster = Bind::Text(&self.base.config.cluster);
        let rows = self
            .base
            .fleet_rows(
                &self.base.sql.disposable_fleet,
                &[cluster, Bind::Int(recent_us())],
            )
            .await?;
        rows.into_iter()
            .map(|row| Base::fleet_member(row, false))
            .collect()
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let binds = [Bind::Int(i64::from(claim.worker)), Bind::Text(&claim.token)];
        self.base
            .release(&self.base.sql.disposable_release, claim, &binds)
            .await
    }
}
