//! What a fleet run changes in the config: the registry's cluster, one per
//! fleet size, and its address when the delay proxy stands before it.

use std::net::SocketAddr;

use idmint_node::Config;
use idmint_node::config::{RegistryKind, Secret};

/// Makes `config`'s registry claim in `cluster`; returns the variable that
/// does the same for an `idmint serve` process.
pub(super) fn set_cluster(config: &mut Config, cluster: &str) -> Option<&'static str> {
    let sf = &mut config.snowflake;
    let (field, var) = match sf.registry {
        RegistryKind::Etcd => (&mut sf.etcd.cluster, "IDMINT_SNOWFLAKE__ETCD__CLUSTER"),
        RegistryKind::Redis => (&mut sf.redis.cluster, "IDMINT_SNOWFLAKE__REDIS__CLUSTER"),
        RegistryKind::Sql => (&mut sf.sql.cluster, "IDMINT_SNOWFLAKE__SQL__CLUSTER"),
        RegistryKind::Zookeeper => (
            &mut sf.zookeeper.cluster,
            "IDMINT_SNOWFLAKE__ZOOKEEPER__CLUSTER",
        ),
        _ => return None,
    };
    *field = cluster.to_owned();
    Some(var)
}

/// Points `config`'s registry at `to` instead (the delay proxy).
pub(super) fn redirect(config: &mut Config, to: SocketAddr) {
    let sf = &mut config.snowflake;
    match sf.registry {
        RegistryKind::Etcd => sf.etcd.endpoints = vec![format!("http://{to}")],
        RegistryKind::Redis => {
            sf.redis.url = Secret::new(with_authority(sf.redis.url.expose(), to))
        }
        RegistryKind::Sql => {
            if let Some(url) = &sf.sql.url {
                sf.sql.url = Some(Secret::new(with_authority(url.expose(), to)));
            }
        }
        RegistryKind::Zookeeper => {
            let chroot = sf
                .zookeeper
                .connect
                .find('/')
                .map(|i| sf.zookeeper.connect[i..].to_owned());
            sf.zookeeper.connect = format!("{to}{}", chroot.unwrap_or_default());
        }
        _ => {}
    }
}

/// `url` with its host and port replaced by `to` (user and path kept).
fn with_authority(url: &str, to: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    format!("{scheme}://{user}{to}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_keeps_the_user_and_the_path() {
        let to: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(
            with_authority("postgres://postgres@127.0.0.1:5432/test", to),
            "postgres://postgres@127.0.0.1:4000/test"
        );
        assert_eq!(
            with_authority("redis://127.0.0.1/", to),
            "redis://127.0.0.1:4000/"
        );
        assert_eq!(
            with_authority("mysql://root:pw@db/test?x=1", to),
            "mysql://root:pw@127.0.0.1:4000/test?x=1"
        );
    }
}
