//! The oracle's fail-over, measured from the followers' side: every process
//! node serves a `monotonic` key, one of them leads (the timestamp oracle)
//! and the others forward to it. The leader is SIGKILLed, and each follower
//! asks for an ID until one comes back: the time from the kill to that ID
//! is its fail-over time, as its clients see it.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::Value;
use tokio::task::JoinSet;

use super::procs::Processes;
use super::starts::Starts;

/// How often a follower asks again.
const POLL: Duration = Duration::from_millis(20);

/// What the fail-over measured.
pub struct Failover {
    /// Followers that forwarded before the kill.
    pub followers: usize,
    /// Each follower's time from the kill to its first ID.
    pub recovered: Starts,
}

/// Finds the leader, checks every follower forwards, kills the leader and
/// times each follower's first ID after it, for up to `within`.
pub async fn failover(fleet: &mut Processes, key: &str, within: Duration) -> Result<Failover> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()?;
    let addrs = fleet.addrs();
    let leader = find_leader(&client, &addrs).await?;
    let followers: Vec<String> = addrs.into_iter().filter(|a| *a != leader).collect();
    for addr in &followers {
        if !issues(&client, addr, key).await {
            return Err(anyhow!(
                "follower {addr} gets no ID of monotonic key {key:?} before the kill"
            ));
        }
    }
    let killed_at = Instant::now();
    tokio::task::block_in_place(|| fleet.kill_at(&leader));
    let mut set = JoinSet::new();
    for addr in &followers {
        let (client, key, addr) = (client.clone(), key.to_owned(), addr.clone());
        set.spawn(async move {
            loop {
                if issues(&client, &addr, &key).await {
                    return Ok(killed_at.elapsed());
                }
                if killed_at.elapsed() > within {
                    return Err(format!("{addr} got no ID within {within:?} of the kill"));
                }
                tokio::time::sleep(POLL).await;
            }
        });
    }
    let mut recovered = Starts::default();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(took)) => recovered.took.push(took),
            Ok(Err(e)) => recovered.refused.push(e),
            Err(e) => recovered
                .refused
                .push(format!("the follower's task failed: {e}")),
        }
    }
    Ok(Failover {
        followers: followers.len(),
        recovered,
    })
}

/// The one node whose status says it leads, once all agree (up to 30 s).
async fn find_leader(client: &reqwest::Client, addrs: &[String]) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut leaders = Vec::new();
        for addr in addrs {
            let status: Option<Value> = async {
                client
                    .get(format!("http://{addr}/v1/status"))
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()
            }
            .await;
            if status.is_some_and(|s| s["monotonic"]["role"] == "leader") {
                leaders.push(addr.clone());
            }
        }
        if let [leader] = leaders.as_slice() {
            return Ok(leader.clone());
        }
        if Instant::now() > deadline {
            return Err(anyhow!(
                "no single oracle leader after 30 s ({} nodes say they lead); does the \
                 config have a `monotonic` key?",
                leaders.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `addr` answers an ID of `key`.
async fn issues(client: &reqwest::Client, addr: &str, key: &str) -> bool {
    client
        .get(format!("http://{addr}/v1/ids/{key}?count=1"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}
