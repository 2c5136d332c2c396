//! What an etcd cluster looks like from the endpoints a config lists, for
//! `idmint config check`: its members, which one leads, and what makes it
//! fragile (a single member, members the config doesn't list, members that
//! don't answer). Read-only: one member list and one status per endpoint,
//! each bounded.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

/// One member as the cluster lists it, and what its endpoint answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberReport {
    /// The member's name.
    pub name: String,
    /// Its client URLs.
    pub client_urls: Vec<String>,
    /// Whether it leads (as the answering endpoints' status says).
    pub leader: bool,
    /// Whether one of the config's endpoints is this member's.
    pub listed: bool,
}

/// The cluster behind a config's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTopology {
    /// The members, as the first endpoint that answered lists them; empty
    /// when none answered.
    pub members: Vec<MemberReport>,
    /// The endpoints that did not answer, with why.
    pub unreachable: Vec<(String, String)>,
    /// The etcd version the first answering endpoint runs.
    pub version: Option<String>,
}

impl EtcdTopology {
    /// A line per member: `m1 at http://10.0.0.1:2379: leader`.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                format!(
                    "member {} at {}: {}{}",
                    m.name,
                    m.client_urls.join(" "),
                    if m.leader { "leader" } else { "follower" },
                    if m.listed { "" } else { " (not in the config)" }
                )
            })
            .collect();
        if let Some(version) = &self.version {
            lines.push(format!("etcd {version}, {} member(s)", self.members.len()));
        }
        for (endpoint, why) in &self.unreachable {
            lines.push(format!("{endpoint}: unreachable ({why})"));
        }
        lines
    }

    /// Where one lost member (or the config) stops the cluster or a node.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.members.is_empty() {
            warnings.push("no endpoint answered".to_owned());
            return warnings;
        }
        if self.members.len() == 1 {
            warnings.push(
                "a single member: when it is down or restarting, leased nodes stop at \
                 their mark and no node starts; run 3 or 5 members"
                    .to_owned(),
            );
        } else if self.members.len().is_multiple_of(2) {
            warnings.push(format!(
                "{} members: an even count tolerates no more failures than one fewer",
                self.members.len()
            ));
        }
        let unlisted: Vec<&str> = self
            .members
            .iter()
            .filter(|m| !m.listed)
            .map(|m| m.name.as_str())
            .collect();
        if !unlisted.is_empty() && self.members.len() > 1 {
            warnings.push(format!(
                "members {} are not in snowflake.etcd.endpoints: a node reaches the \
                 cluster only through the members it lists; list every member",
                unlisted.join(", ")
            ));
        }
        if !self.members.iter().any(|m| m.leader) {
            warnings.push("no member answered as the leader".to_owned());
        }
        warnings
    }
}

/// Reads the cluster behind `endpoints`, giving each call `bound`.
pub async fn read_topology(endpoints: &[String], bound: Duration) -> EtcdTopology {
    let options = ConnectOptions::new()
        .with_connect_timeout(bound)
        .with_timeout(bound);
    let mut topology = EtcdTopology {
        members: Vec::new(),
        unreachable: Vec::new(),
        version: None,
    };
    let mut ids = Vec::new();
    let mut leaders = Vec::new();
    for endpoint in endpoints {
        let asked = async {
            let mut client = Client::connect([endpoint], Some(options.clone())).await?;
            let status = client.status().await?;
            let members = client.member_list().await?;
            Ok::<_, etcd_client::Error>((status, members))
        };
        match tokio::time::timeout(bound, asked).await {
            Ok(Ok((status, members))) => {
                leaders.push(status.leader());
                if topology.version.is_some() {
                    continue;
                }
                topology.version = Some(status.version().to_owned());
                for member in members.members() {
                    ids.push(member.id());
                    let client_urls = member.client_urls().to_vec();
                    let listed = client_urls
                        .iter()
                        .any(|u| endpoints.iter().any(|e| same_url(e, u)));
                    topology.members.push(MemberReport {
                        name: if member.name().is_empty() {
                            format!("{:x}", member.id())
                        } else {
                            member.name().to_owned()
                        },
                        client_urls,
                        leader: false,
                        listed,
                    });
                }
            }
            Ok(Err(e)) => topology.unreachable.push((endpoint.clone(), e.to_string())),
            Err(_) => topology
                .unreachable
                .push((endpoint.clone(), format!("no answer within {bound:?}"))),
        }
    }
    for (member, id) in topology.members.iter_mut().zip(ids) {
        member.leader = leaders.contains(&id);
    }
    topology
}

/// Whether two endpoint URLs name the same place (a trailing `/` aside).
fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, leader: bool, listed: bool) -> MemberReport {
        MemberReport {
            name: name.to_owned(),
            client_urls: vec![format!("http://{name}:2379")],
            leader,
            listed,
        }
    }

    #[test]
    fn a_single_member_an_even_count_and_unlisted_members_are_warned_about() {
        let one = EtcdTopology {
            members: vec![member("m1", true, true)],
            unreachable: Vec::new(),
            version: Some("3.4.23".to_owned()),
        };
        assert_eq!(one.warnings().len(), 1, "{:?}", one.warnings());
        assert!(one.warnings()[0].contains("a single member"));
        assert_eq!(
            one.lines(),
            [
                "member m1 at http://m1:2379: leader",
                "etcd 3.4.23, 1 member(s)"
            ]
        );
        let three = EtcdTopology {
            members: vec![
                member("m1", false, true),
                member("m2", true, true),
                member("m3", false, false),
            ],
            unreachable: vec![("http://m4:2379".to_owned(), "refused".to_owned())],
            version: Some("3.4.23".to_owned()),
        };
        let warnings = three.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("members m3 are not in"),
            "{warnings:?}"
        );
        assert!(three.lines()[2].ends_with("(not in the config)"));
        assert_eq!(three.lines()[4], "http://m4:2379: unreachable (refused)");
        let two = EtcdTopology {
            members: vec![member("a", false, true), member("b", false, true)],
            unreachable: Vec::new(),
            version: None,
        };
        let warnings = two.warnings();
        assert!(
            warnings.iter().any(|w| w.contains("an even count")),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("no member answered as the leader"))
        );
        let none = EtcdTopology {
            members: Vec::new(),
            unreachable: Vec::new(),
            version: None,
        };
        assert_eq!(none.warnings(), ["no endpoint answered"]);
        assert!(same_url("http://a:1/", "http://a:1"));
    }
}
