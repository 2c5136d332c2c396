//! Who a node is to the registry, and its data directory: the identity a
//! server claims as (its listener's address and port) and the one an
//! embedded process claims as (its process ID in the port field), from one
//! host-name lookup and one reading of `snowflake.advertise_address`.

use std::net::SocketAddr;

use idmint_registry::NodeIdentity;

use crate::config::Config;
use crate::error::NodeError;

/// Who a server listening at `addr` claims as: the host name, the address
/// peers reach it by ([`advertised_address`]) and the listener's port.
pub fn node_identity(config: &Config, addr: SocketAddr) -> NodeIdentity {
    let host = host_name();
    NodeIdentity {
        address: advertised_address(config, addr, &host),
        host,
        port: addr.port(),
    }
}

/// Who an embedded process claims as: the host name, the address
/// (`snowflake.advertise_address`, else the host name), and the process ID in
/// the port field (its low 16 bits: registries store a port number), so each
/// process on a host is a node of its own in the registry's listing.
pub fn process_identity(config: &Config) -> NodeIdentity {
    let host = host_name();
    NodeIdentity {
        address: config
            .snowflake
            .advertise_address
            .clone()
            .unwrap_or_else(|| host.clone()),
        host,
        port: (std::process::id() & 0xffff) as u16,
    }
}

/// The address peers reach a listener bound at `addr` by:
/// `snowflake.advertise_address` when set, else the listener's own IP, or
/// the host name when it listens on every address.
pub fn advertised_address(config: &Config, addr: SocketAddr, host: &str) -> String {
    match &config.snowflake.advertise_address {
        Some(a) => a.clone(),
        None if addr.ip().is_unspecified() => host.to_owned(),
        None => addr.ip().to_string(),
    }
}

/// This host's name, `localhost` when it has none that reads as text.
fn host_name() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Creates `server.data_dir` (a server at start; an embedded allocator for
/// the default segment store's SQLite file).
///
/// # Errors
/// [`NodeError::DataDir`] naming the directory.
pub fn create_data_dir(config: &Config) -> Result<(), NodeError> {
    let data_dir = &config.server.data_dir;
    std::fs::create_dir_all(data_dir).map_err(|source| NodeError::DataDir {
        path: data_dir.display().to_string(),
        source,
    })
}
