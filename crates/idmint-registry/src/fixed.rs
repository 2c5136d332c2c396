//! Registries that need no coordinator: the worker ID comes from config
//! ([`StaticRegistry`]), from the host's private IPv4 address ([`HostRegistry`],
//! sonyflake's scheme), or from a Kubernetes StatefulSet ordinal ([`K8sRegistry`]).
//!
//! Why they exist: many fleets already give each node a unique number, and a
//! coordinator is one more thing to run. What they can't do alone: see each
//! other. Nothing stops two nodes configured with (or deriving) the same number;
//! the operator's assignment is the exclusion, so alone they have no leases and
//! report no peers.
//!
//! The collision check: where a shared registry is reachable too (Redis, etcd,
//! SQL), `with_shared_registry` registers the worker ID there at every claim
//! ([`WorkerRegistry::claim_worker`](crate::WorkerRegistry::claim_worker)). A
//! second node with the same ID then fails at start with
//! [`RegistryError::WorkerTaken`] naming both nodes; the claim gets the shared
//! registry's lease, marks and peers.
//!
//! Marks: each takes an optional [`LeaseFile`] (the `file` registry's lease file,
//! in the node's data directory) with `with_mark_file`. With it, the mark
//! survives restarts and the data directory is locked against a second process.
//! Without it, marks are kept in memory only: a restart with the clock behind is
//! then guarded by nothing but the generator's clock policy (the classic
//! Twitter behaviour). Servers always give them a mark file.

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};

use crate::error::{RegistryError, Result};
use crate::file::{LeaseFile, LocalWorker, WorkerSource};

macro_rules! local_registry {
    ($name:ident) => {
        impl $name {
            /// Keeps the worker's marks in `file` (a locked data directory's lease
            /// file), so they survive restarts.
            pub fn with_mark_file(self, file: LeaseFile) -> $name {
                $name {
                    local: self.local.with_file(file),
                }
            }
        }

        crate::file::local_worker_registry!($name);
    };
}

/// The `static` registry: the worker ID from config, checked against the
/// layout's range at claim.
///
/// # Examples
///
/// ```
/// use idmint_registry::{NodeIdentity, WorkerRegistry, fixed::StaticRegistry};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let node = NodeIdentity { host: "a".into(), address: "10.0.0.1".into(), port: 8080 };
/// let registry = StaticRegistry::new(9);
/// let err = registry.claim(&node, 8).await.unwrap_err();
/// assert_eq!(err.to_string(), "static registry: worker 9 is out of range 0..8 for this layout");
/// assert_eq!(registry.claim(&node, 1024).await?.worker, 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StaticRegistry {
    local: LocalWorker,
}

impl StaticRegistry {
    /// A registry that hands out `worker`, marks in memory.
    pub fn new(worker: u32) -> StaticRegistry {
        StaticRegistry {
            local: LocalWorker::new("static", WorkerSource::Fixed(worker)),
        }
    }
}

local_registry!(StaticRegistry);

/// The `host` registry: the worker ID from the low bits of the node's private
/// IPv4 address, as sonyflake does (its default takes the low 16 bits).
///
/// The worker is the address modulo the range (for the power-of-two ranges of
/// layouts, exactly its low bits). Two hosts whose addresses agree in those bits
/// collide: use it only where the subnet is no larger than the range (a /16 for
/// 16 worker bits), or add a shared registry
/// ([`HostRegistry::with_shared_registry`]), which turns a collision into an
/// error at start.
///
/// It never looks at the network itself: the address comes from the caller (config)
/// or from resolving the host name ([`HostRegistry::from_hostname`]).
#[derive(Debug)]
pub struct HostRegistry {
    local: LocalWorker,
}

impl HostRegistry {
    /// Uses `address`, which must be private (RFC 1918, or link-local as sonyflake
    /// allows).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Config`] when the address is not private.
    pub fn from_ipv4(address: Ipv4Addr) -> Result<HostRegistry> {
        if !is_private(address) {
            return Err(RegistryError::Config {
                registry: "host",
                message: format!(
                    "address {address} is not a private IPv4 address \
                     (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 169.254.0.0/16)"
                ),
            });
        }
        Ok(HostRegistry {
            local: LocalWorker::new("host", WorkerSource::Ipv4(address)),
        })
    }

    /// Resolves `hostname` (through the system resolver: `/etc/hosts`, then DNS)
    /// and uses its first private IPv4 address.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Config`] when the name doesn't resolve or has no private
    /// IPv4 address.
    pub fn from_hostname(hostname: &str) -> Result<HostRegistry> {
        let config = |message: String| RegistryError::Config {
            registry: "host",
            message,
        };
        let addrs = (hostname, 0)
            .to_socket_addrs()
            .map_err(|e| config(format!("host name {hostname:?} does not resolve: {e}")))?;
        let v4: Vec<Ipv4Addr> = addrs
            .filter_map(|a| match a.ip() {
                IpAddr::V4(ip) => Some(ip),
                IpAddr::V6(_) => None,
            })
            .collect();
        let private = v4.iter().copied().find(|ip| is_private(*ip));
        match private {
            Some(ip) => HostRegistry::from_ipv4(ip),
            None => Err(config(format!(
                "host name {hostname:?} has no private IPv4 address (resolved to {v4:?}); \
                 configure the address or use another registry"
            ))),
        }
    }

    /// [`HostRegistry::from_hostname`] with this machine's host name.
    ///
    /// # Errors
    ///
    /// As [`HostRegistry::from_hostname`], and [`RegistryError::Config`] when the
    /// host name can't be read.
    pub fn from_local_hostname() -> Result<HostRegistry> {
        HostRegistry::from_hostname(&local_hostname("host")?)
    }
}

local_registry!(HostRegistry);

/// Private in sonyflake's sense: RFC 1918 ranges plus link-local.
fn is_private(ip: Ipv4Addr) -> bool {
    ip.is_private() || ip.is_link_local()
}

fn local_hostname(registry: &'static str) -> Result<String> {
    hostname::get()
        .map_err(|e| RegistryError::Config {
            registry,
            message: format!("cannot read the host name: {e}"),
        })?
        .into_string()
        .map_err(|raw| RegistryError::Config {
            registry,
            message: format!("host name {raw:?} is not UTF-8"),
        })
}

/// The `k8s` registry: the worker ID is the StatefulSet ordinal at the end of the
/// pod's host name (`idmint-3` → 3).
///
/// A StatefulSet gives each pod a stable, unique ordinal however often its IP
/// changes, which is exactly what a worker ID needs (the "IP is not fixed under
/// Kubernetes" problem of IP-based schemes). Give the pods a persistent volume
/// for the data directory's mark file so marks survive rescheduling.
#[derive(Debug)]
pub struct K8sRegistry {
    local: LocalWorker,
}

impl K8sRegistry {
    /// Takes the ordinal from `hostname`; it is checked against the layout's range
    /// at claim.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Config`] when the name doesn't end in `-<ordinal>`.
    pub fn from_hostname(hostname: &str) -> Result<K8sRegistry> {
        Ok(K8sRegistry {
            local: LocalWorker::new("k8s", WorkerSource::Fixed(parse_ordinal(hostname)?)),
        })
    }

    /// [`K8sRegistry::from_hostname`] with this pod's host name.
    ///
    /// # Errors
    ///
    /// As [`K8sRegistry::from_hostname`], and [`RegistryError::Config`] when the
    /// host name can't be read.
    pub fn from_local_hostname() -> Result<K8sRegistry> {
        K8sRegistry::from_hostname(&local_hostname("k8s")?)
    }
}

local_registry!(K8sRegistry);

/// The StatefulSet ordinal of a pod host name: the decimal number after the last
/// `-` (`idmint-3` → 3, `web-idmint-12.idmint.default.svc` → 12: only the first
/// label counts).
///
/// # Errors
///
/// [`RegistryError::Config`] naming the host name when there is no ordinal.
pub fn parse_ordinal(hostname: &str) -> Result<u32> {
    let label = hostname.split('.').next().unwrap_or_default();
    let ordinal = label
        .rsplit_once('-')
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    ordinal
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| RegistryError::Config {
            registry: "k8s",
            message: format!(
                "host name {hostname:?} has no StatefulSet ordinal (expected a name like \
                 \"idmint-3\"); run idmint as a StatefulSet or use another registry"
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{NodeIdentity, WorkerRegistry};
    use jiff::Timestamp;

    fn node() -> NodeIdentity {
        NodeIdentity {
            host: "h".into(),
            address: "10.0.0.1".into(),
            port: 1,
        }
    }

    #[test]
    fn ordinals_come_from_the_end_of_the_first_label() {
        assert_eq!(parse_ordinal("idmint-3").unwrap(), 3);
        assert_eq!(parse_ordinal("my-id-service-12").unwrap(), 12);
        assert_eq!(
            parse_ordinal("idmint-7.idmint.default.svc.cluster.local").unwrap(),
            7
        );
        for bad in [
            "idmint",
            "idmint-",
            "idmint-x3",
            "idmint-3a",
            "",
            "idmint-99999999999",
        ] {
            let err = parse_ordinal(bad).unwrap_err();
            assert!(matches!(err, RegistryError::Config { .. }));
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[tokio::test]
    async fn static_and_k8s_workers_are_range_checked_at_claim() {
        let s = StaticRegistry::new(8);
        let err = s.claim(&node(), 8).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "static registry: worker 8 is out of range 0..8 for this layout"
        );
        assert_eq!(s.claim(&node(), 9).await.unwrap().worker, 8);

        let k = K8sRegistry::from_hostname("idmint-40").unwrap();
        let err = k.claim(&node(), 32).await.unwrap_err();
        assert!(
            err.to_string().contains("worker 40 is out of range 0..32"),
            "{err}"
        );
        let claim = k.claim(&node(), 1024).await.unwrap();
        assert_eq!(
            (claim.worker, claim.stored_mark, claim.lease),
            (40, None, None)
        );
    }

    #[tokio::test]
    async fn one_claim_at_a_time_and_marks_kept_in_memory_across_claims() {
        let s = StaticRegistry::new(1);
        let a = s.claim(&node(), 4).await.unwrap();
        assert!(s.claim(&node(), 4).await.is_err());
        let mark: Timestamp = "2026-11-21T00:00:03Z".parse().unwrap();
        s.persist_mark(&a, mark, mark).await.unwrap();
        s.release(&a).await.unwrap();
        assert!(matches!(
            s.persist_mark(&a, mark, mark).await,
            Err(RegistryError::LeaseLost { .. })
        ));
        let b = s.claim(&node(), 4).await.unwrap();
        assert_eq!(b.stored_mark, Some(mark));
    }

    #[tokio::test]
    async fn host_workers_are_the_low_bits_of_a_private_address() {
        let h = HostRegistry::from_ipv4(Ipv4Addr::new(10, 1, 2, 3)).unwrap();
        assert_eq!(h.claim(&node(), 1 << 16).await.unwrap().worker, 0x0203);
        let h = HostRegistry::from_ipv4(Ipv4Addr::new(192, 168, 7, 200)).unwrap();
        assert_eq!(h.claim(&node(), 256).await.unwrap().worker, 200);
        let err = HostRegistry::from_ipv4(Ipv4Addr::new(8, 8, 8, 8)).unwrap_err();
        assert!(
            err.to_string().contains("8.8.8.8 is not a private"),
            "{err}"
        );
    }
}
