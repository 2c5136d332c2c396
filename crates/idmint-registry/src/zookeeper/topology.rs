//! What a ZooKeeper ensemble looks like from a connect string, for `idmint
//! config check`: each server's mode (leader, follower, standalone) by the
//! `srvr` four-letter word, which ZooKeeper allows by default. Read-only and
//! bounded; a server that doesn't answer is reported as such.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One server of the connect string and what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReport {
    /// `host:port` as the connect string names it.
    pub address: String,
    /// `leader`, `follower`, `observer`, `standalone`; or why it could not
    /// be read.
    pub mode: Result<String, String>,
}

/// The servers of a connect string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperTopology {
    /// In the connect string's order.
    pub servers: Vec<ServerReport>,
}

impl ZooKeeperTopology {
    /// A line per server: `10.0.0.1:2181: leader`.
    pub fn lines(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| match &s.mode {
                Ok(mode) => format!("{}: {mode}", s.address),
                Err(why) => format!("{}: unreachable ({why})", s.address),
            })
            .collect()
    }

    /// Where one lost server stops the ensemble or a node.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let modes: Vec<&str> = self
            .servers
            .iter()
            .filter_map(|s| s.mode.as_deref().ok())
            .collect();
        if modes.contains(&"standalone") {
            warnings.push(
                "a standalone server: when it is down or restarting, ephemeral nodes stop \
                 at their mark and no node starts; run an ensemble of 3 or 5"
                    .to_owned(),
            );
        } else if self.servers.len() == 1 {
            warnings.push(
                "the connect string names one server of the ensemble: when it is down, \
                 this node can't reach the others; list every server"
                    .to_owned(),
            );
        }
        if !modes.is_empty() && !modes.iter().any(|m| *m == "leader" || *m == "standalone") {
            warnings.push("no listed server answered as the leader".to_owned());
        }
        if modes.is_empty() {
            warnings.push("no server answered".to_owned());
        }
        warnings
    }
}

/// Asks each server of `connect` (`h1:2181,h2:2181[/chroot]`) for its mode,
/// giving each `bound`.
pub async fn read_topology(connect: &str, bound: Duration) -> ZooKeeperTopology {
    let hosts = connect.split('/').next().unwrap_or_default();
    let mut servers = Vec::new();
    for address in hosts.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let mode = match tokio::time::timeout(bound, srvr(address)).await {
            Ok(Ok(text)) => mode_of(&text)
                .map(str::to_owned)
                .ok_or_else(|| format!("no Mode line in its srvr answer: {text:?}")),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {bound:?}")),
        };
        servers.push(ServerReport {
            address: address.to_owned(),
            mode,
        });
    }
    ZooKeeperTopology { servers }
}

/// The `srvr` four-letter word's answer (the server closes the connection
/// after it).
async fn srvr(address: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(address).await?;
    stream.write_all(b"srvr").await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}

/// The mode a `srvr` answer names (`Mode: follower`).
fn mode_of(answer: &str) -> Option<&str> {
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(address: &str, mode: Result<&str, &str>) -> ServerReport {
        ServerReport {
            address: address.to_owned(),
            mode: mode.map(str::to_owned).map_err(str::to_owned),
        }
    }

    #[test]
    fn modes_are_read_and_a_lone_server_is_warned_about() {
        assert_eq!(
            mode_of("Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0/0\nMode: follower\n"),
            Some("follower")
        );
        assert_eq!(
            mode_of("This ZooKeeper instance is not currently serving"),
            None
        );
        let lone = ZooKeeperTopology {
            servers: vec![server("a:2181", Ok("standalone"))],
        };
        assert_eq!(lone.lines(), ["a:2181: standalone"]);
        assert!(lone.warnings()[0].contains("a standalone server"));
        let ensemble = ZooKeeperTopology {
            servers: vec![
                server("a:2181", Ok("follower")),
                server("b:2181", Ok("leader")),
                server("c:2181", Err("refused")),
            ],
        };
        assert!(ensemble.warnings().is_empty(), "{:?}", ensemble.warnings());
        assert_eq!(ensemble.lines()[2], "c:2181: unreachable (refused)");
        let one_listed = ZooKeeperTopology {
            servers: vec![server("a:2181", Ok("follower"))],
        };
        let warnings = one_listed.warnings();
        assert!(warnings[0].contains("names one server"), "{warnings:?}");
        assert!(warnings[1].contains("no listed server answered as the leader"));
        let none = ZooKeeperTopology {
            servers: vec![server("a:2181", Err("refused"))],
        };
        assert!(none.warnings().contains(&"no server answered".to_owned()));
    }
}
