//! The one integration-test binary of `idmint-registry`: each registry against
//! the real service it talks to, with shared helpers in `support`.
//!
//! - `contract`: the registry contract, written once; each backend's module
//!   (`etcd`, `redis`, `sql`, `zookeeper`) runs it and adds what only that
//!   backend does.
//! - `redis_ha`: the `redis` registry through Redis Sentinel and on a Redis
//!   Cluster, started by the project's scripts, through failovers that lose
//!   writes.
//! - `outage`: lease loss while running, against private instances of each
//!   service (`services`) that the tests stop and start again.
//! - `file` and `keeper`: the embedded default and the keeper, against files
//!   and an in-memory registry.
//! - `leader`: the timestamp oracle's election, in memory and on etcd,
//!   PostgreSQL and Redis.
//! - `uid_generator`: the `sql` registry's uid-generator mode on uid-generator's
//!   own `WORKER_NODE` table (MariaDB and PostgreSQL).
//! - `sim`: a deterministic simulation of a whole fleet of keepers and oracle
//!   campaigns on simulated time, over an in-memory registry that injects
//!   faults.

mod contract;
mod etcd;
mod file;
mod keeper;
mod leader;
mod outage;
mod redis;
mod redis_ha;
mod services;
mod sim;
mod sql;
mod support;
mod uid_generator;
mod zookeeper;
