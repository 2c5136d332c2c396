//! [`ZooKeeperMode::Forever`]: Meituan Leaf's scheme, one persistent
//! sequential znode per `ip:port` identity, whose sequence number is the
//! worker ID for good, plus Leaf's local cache of the worker ID and mark (see
//! the [parent module](super)'s docs for the contract).
//!
//! No lease: `renew` and `release` do nothing, because the ID belongs to its
//! identity for good. The mark is raised by a version-checked `setData`; the
//! cache file is written before ZooKeeper, so it never holds less.
//!
//! A clean stop's record sets the mark to the last tick issued, in the
//! opposite order, so that the cache still never holds less than
//! ZooKeeper: ZooKeeper first, then the cache. A crash between the two
//! leaves the cache at the window-ahead mark, which only makes the next
//! start wait as after a crash. Offline (a claim from the cache), the cache
//! alone: ZooKeeper holds at most the mark that claim started above, and the
//! recorded tick is past it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use zookeeper_client as zk;

use super::{
    CAS_ATTEMPTS, KIND, Session, backend, identity_lines, ms_to_ts, node_address, parse_record,
    read_children, split_address, with_ages,
};
use crate::error::{RegistryError, Result};
use crate::registry::{
    Claim, FLEET_RECENT, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry,
};
use crate::util::ceil_ms;

/// The token prefix of a claim served from the local cache while offline.
const OFFLINE: &str = "cache:";

/// How a cache write treats the mark already cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cached {
    Raise,
    Set,
}

/// The Forever protocol on one session (or offline, from the cache).
#[derive(Debug)]
pub(super) struct Forever {
    session: Session,
    /// Serializes cache read-modify-writes so the cached mark only rises
    /// (shared with the blocking tasks that do them).
    cache_lock: Arc<Mutex<()>>,
    /// When an offline session last tried to go online for a claim served
    /// from the cache ([`Forever::offline_claim_back_online`]).
    last_probe: Mutex<Option<std::time::Instant>>,
}

/// How often an offline registry holding a cached claim tries ZooKeeper.
const ONLINE_PROBE_EVERY: Duration = Duration::from_secs(5);
/// How long one such try may hold up the keeper's persist call.
const ONLINE_PROBE_LIMIT: Duration = Duration::from_secs(1);

impl Forever {
    pub(super) fn new(session: Session) -> Forever {
        Forever {
            session,
            cache_lock: Arc::new(Mutex::new(())),
            last_probe: Mutex::new(None),
        }
    }

    pub(super) fn session(&self) -> &Session {
        &self.session
    }

    /// A worker claimed from the cache while ZooKeeper was unreachable is
    /// registered there again once it answers ([`Forever::register_again`],
    /// which the keeper calls on the `LeaseLost` this returns), so ZooKeeper
    /// holds the marks the node persisted offline: otherwise a restart that
    /// lost its cache would start from ZooKeeper's older mark. Until then
    /// the cache alone holds the mark (written before this is called).
    ///
    /// An offline session is probed at most every [`ONLINE_PROBE_EVERY`]
    /// and for at most [`ONLINE_PROBE_LIMIT`]: the keeper waits for this
    /// call, and ZooKeeper being away must not slow the marks it persists
    /// locally.
    async fn offline_claim_back_online(&self, claim: &Claim) -> Result<()> {
        if self.session.is_offline() {
            {
                let mut last = self.last_probe.lock().unwrap_or_else(|e| e.into_inner());
                let now = std::time::Instant::now();
                if last.is_some_and(|at| now.duration_since(at) < ONLINE_PROBE_EVERY) {
                    return Ok(());
                }
                *last = Some(now);
            }
            let probe = tokio::time::timeout(ONLINE_PROBE_LIMIT, self.session.try_online());
            if !matches!(probe.await, Ok(true)) {
                return Ok(());
            }
        }
        Err(RegistryError::LeaseLost {
            registry: KIND,
            worker: claim.worker,
            reason: "claimed from the local cache while zookeeper was unreachable; \
                     zookeeper answers again, so the worker is registered there again"
                .to_owned(),
        })
    }

    fn claim_from_cache(&self, address: &str) -> Result<Claim> {
        let reason = self.session.offline_reason().unwrap_or_default();
        match self.read_cache(address)? {
            Some(cached) => {
                tracing::warn!(worker = cached.worker, mark = ?cached.mark, "zookeeper unreachable: worker ID from the local cache");
                Ok(Claim {
                    worker: cached.worker,
                    stored_mark: cached.mark,
                    lease: None,
                    token: format!("{OFFLINE}{address}"),
                })
            }
            // Nothing to serve from: wait for ZooKeeper (a start retries
            // an unavailable registry, and each claim tries to go online).
            None => Err(RegistryError::unavailable(
                KIND,
                "claim",
                format!(
                    "zookeeper is unreachable ({reason}) and the cache has no worker for \
                     {address}"
                ),
            )),
        }
    }

    // ---- The local cache ----

    fn cache_path(&self, address: &str) -> Option<PathBuf> {
        let dir = self.session.config.cache_dir.as_ref()?;
        let name: String = format!("zk-{}-{address}", self.session.config.cluster)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Some(dir.join(format!("{name}.worker")))
    }

    fn read_cache(&self, address: &str) -> Result<Option<CacheRecord>> {
        match self.cache_path(address) {
            Some(path) => read_cache_at(&path),
            None => Ok(None),
        }
    }

    async fn write_cache(&self, address: &str, worker: u32, mark: Option<Timestamp>) -> Result<()> {
        self.store_cache(address, worker, mark, Cached::Raise).await
    }

    /// Writes the cache: `mark` or the cached one, whichever is higher
    /// (`Cached::Raise`, every persist: a concurrent writer may have stored
    /// a higher one), or `mark` as it is (`Cached::Set`, a clean stop's
    /// record only, after ZooKeeper's).
    ///
    /// The write and its two `fsync`s run on Tokio's blocking pool, not on
    /// the runtime's worker threads: on a busy disk they take a good part of
    /// a second, and the runtime's few workers also serve the node's IDs.
    /// A write whose caller stopped waiting still finishes (it only raises
    /// the mark).
    async fn store_cache(
        &self,
        address: &str,
        worker: u32,
        mark: Option<Timestamp>,
        how: Cached,
    ) -> Result<()> {
        let Some(path) = self.cache_path(address) else {
            return Ok(());
        };
        let lock = Arc::clone(&self.cache_lock);
        tokio::task::spawn_blocking(move || store_cache_at(&lock, &path, worker, mark, how))
            .await
            .map_err(|e| cache_error(format!("the cache write did not finish: {e}")))?
    }
}

/// The cache record at `path` (`None`: no file).
fn read_cache_at(path: &Path) -> Result<Option<CacheRecord>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cache_error(format!("read {}: {e}", path.display()))),
    };
    // A damaged cache is an error, never "no mark": that guess goes backwards.
    CacheRecord::parse(&text)
        .map(Some)
        .map_err(|e| cache_error(format!("{} is damaged: {e}", path.display())))
}

/// [`Forever::store_cache`]'s blocking part: under `lock`, the record is
/// written to a temporary file, synced, renamed over `path`, and the
/// directory synced.
fn store_cache_at(
    lock: &Mutex<()>,
    path: &Path,
    worker: u32,
    mark: Option<Timestamp>,
    how: Cached,
) -> Result<()> {
    let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    let mark = match how {
        Cached::Raise => read_cache_at(path)?
            .filter(|c| c.worker == worker)
            .and_then(|c| c.mark)
            .max(mark),
        Cached::Set => mark,
    };
    let record = CacheRecord { worker, mark };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| cache_error(format!("create {}: {e}", dir.display())))?;
    let temp = path.with_extension("worker.tmp");
    let write = || -> std::io::Result<()> {
        let mut file = fs::File::create(&temp)?;
        file.write_all(record.render().as_bytes())?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| cache_error(format!("write {}: {e}", path.display())))
}

#[async_trait]
impl WorkerRegistry for Forever {
    fn kind(&self) -> &'static str {
        KIND
    }

    /// The ID is this `ip:port`'s for good. With a cache directory, the
    /// cache holds every mark before ZooKeeper does, so a restart is safe
    /// without ZooKeeper and issuing may go on through its outage; without
    /// one, ZooKeeper is the only record, and the node stops at its mark
    /// as a leased one does.
    fn reassigns_workers(&self) -> bool {
        self.session.config.cache_dir.is_none()
    }

    /// The cache, as a persist writes it first.
    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<()> {
        if self.session.config.cache_dir.is_some() {
            // `write_cache` raises: the higher of `mark` and the cached one.
            self.write_cache(&claim_address(claim), claim.worker, Some(mark))
                .await?;
        }
        Ok(())
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        let address = node_address(node);
        if !self.session.try_online().await {
            return self.claim_from_cache(&address);
        }
        let client = self.session.live_client("claim").await?;
        let dir = self.session.forever_dir();
        let prefix = format!("{address}-");
        let (path, worker, data) = self
            .session
            .call("claim", async {
                if let Some((seq, path)) = find_mine(&client, &dir, &prefix).await? {
                    let (data, _) = client
                        .get_data(&path)
                        .await
                        .map_err(|e| backend("read forever node", &e))?;
                    return Ok((path, seq, data));
                }
                let data = render_forever(&address, Some(&node.host), Timestamp::now(), None);
                let options =
                    zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
                let (_, seq) = client
                    .create(&format!("{dir}/{prefix}"), data.as_bytes(), &options)
                    .await
                    .map_err(|e| backend("create forever node", &e))?;
                let seq = seq.into_i64();
                let path = format!("{dir}/{prefix}{}", zk_seq(seq));
                Ok((path, seq, data.into_bytes()))
            })
            .await?;
        if worker >= i64::from(range) {
            // Never used: give the node back so the listing counts only real workers.
            let _ = self
                .session
                .call("delete forever node", async {
                    client
                        .delete(&path, None)
                        .await
                        .map_err(|e| backend("delete forever node", &e))
                })
                .await;
            let in_use = self
                .session
                .call("list forever nodes", async {
                    client
                        .list_children(&dir)
                        .await
                        .map_err(|e| backend("list forever nodes", &e))
                })
                .await
                .map_or(u64::from(range), |c| c.len() as u64);
            return Err(RegistryError::Exhausted {
                registry: KIND,
                in_use: in_use.min(u64::from(range)),
                range: u64::from(range),
            });
        }
        let worker = u32::try_from(worker).expect("below a u32 range");
        let record = parse_record("claim", worker, &data)?;
        let cached = self.read_cache(&address)?.filter(|c| c.worker == worker);
        let stored_mark = record.mark.max(cached.and_then(|c| c.mark));
        self.write_cache(&address, worker, stored_mark).await?;
        tracing::info!(worker, ?stored_mark, %path, "claimed forever worker ID on zookeeper");
        Ok(Claim {
            worker,
            stored_mark,
            lease: None,
            token: path,
        })
    }

    async fn renew(&self, _claim: &Claim) -> Result<Option<Lease>> {
        Ok(None)
    }

    /// The mark set to `high` (see the module docs): ZooKeeper's node first,
    /// by a version-checked `setData`, then the cache; offline, the cache.
    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let address = claim_address(claim);
        if !claim.token.starts_with(OFFLINE) {
            let client = self.session.live_client("record clean stop").await?;
            let path = claim.token.clone();
            self.session
                .call(
                    "record clean stop",
                    set_node_mark(
                        &client,
                        "record clean stop",
                        &path,
                        &address,
                        claim.worker,
                        reported,
                        |_| Ok(Some(high)),
                    ),
                )
                .await?;
        }
        self.store_cache(&address, claim.worker, Some(high), Cached::Set)
            .await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let address = claim_address(claim);
        // The cache first: it must never hold less than ZooKeeper. The
        // keeper's `persist_local` has usually written this mark already;
        // then there is nothing to sync again.
        let cached = self
            .read_cache(&address)?
            .filter(|c| c.worker == claim.worker)
            .and_then(|c| c.mark);
        if self.session.config.cache_dir.is_some() && cached < Some(mark) {
            self.write_cache(&address, claim.worker, Some(mark)).await?;
        }
        if claim.token.starts_with(OFFLINE) {
            return self.offline_claim_back_online(claim).await;
        }
        let client = self.session.live_client("persist mark").await?;
        let path = claim.token.clone();
        self.session
            .call(
                "persist mark",
                set_node_mark(
                    &client,
                    "persist mark",
                    &path,
                    &address,
                    claim.worker,
                    reported,
                    |stored| Ok(stored.max(Some(mark))),
                ),
            )
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        if self.session.is_offline() {
            tracing::warn!("zookeeper unreachable: no peers to check the clock against");
            return Ok(Vec::new());
        }
        let client = self.session.live_client("list peers").await?;
        let dir = self.session.forever_dir();
        let nodes = self
            .session
            .call("list peers", async {
                let children = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend("list peers", &e))?;
                let (seqs, names): (Vec<i64>, Vec<String>) = children
                    .into_iter()
                    .filter_map(|child| {
                        let seq = child.rsplit_once('-').and_then(|(_, s)| parse_seq(s))?;
                        Some((seq, child))
                    })
                    .unzip();
                let read = read_children(&client, "list peers", &dir, &names).await?;
                Ok(seqs
                    .into_iter()
                    .zip(read)
                    .filter_map(|(seq, found)| {
                        let (data, stat) = found?;
                        Some((seq, data, stat.mtime))
                    })
                    .collect::<Vec<_>>())
            })
            .await?;
        // Liveness by ZooKeeper's own modification times, not our clock.
        let newest = nodes.iter().map(|n| n.2).max().unwrap_or(0);
        let window = i64::try_from(self.session.config.peer_window.as_millis()).unwrap_or(i64::MAX);
        let mut found = Vec::new();
        for (seq, data, mtime) in nodes {
            let Ok(worker) = u32::try_from(seq) else {
                continue;
            };
            if worker == claim.worker || newest.saturating_sub(mtime) > window {
                continue;
            }
            if let Some(reported) = parse_record("list peers", worker, &data)?.reported {
                found.push((PeerReport::new(worker, reported), mtime));
            }
        }
        // Every node's mtime was read, this node's own among them: the
        // newest is the leader's clock at the latest write ([`with_ages`]).
        let mut peers = with_ages(found, Some(newest));
        peers.sort_by_key(|p| p.worker);
        Ok(peers)
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        const OP: &str = "list fleet";
        let client = self.session.live_client(OP).await?;
        let dir = self.session.forever_dir();
        let nodes = self
            .session
            .call(OP, async {
                let children = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend(OP, &e))?;
                let mut nodes = Vec::with_capacity(children.len());
                for child in children {
                    let Some((address, seq)) = child.rsplit_once('-') else {
                        continue;
                    };
                    let Some(worker) = parse_seq(seq).and_then(|s| u32::try_from(s).ok()) else {
                        continue;
                    };
                    match client.get_data(&format!("{dir}/{child}")).await {
                        Ok((data, stat)) => {
                            nodes.push((worker, address.to_owned(), data, stat.mtime));
                        }
                        Err(zk::Error::NoNode) => {}
                        Err(e) => return Err(backend(OP, &e)),
                    }
                }
                Ok(nodes)
            })
            .await?;
        let newest = nodes.iter().map(|n| n.3).max().unwrap_or(0);
        let window = i64::try_from(self.session.config.peer_window.as_millis()).unwrap_or(i64::MAX);
        let recent = i64::try_from(FLEET_RECENT.as_millis()).unwrap_or(i64::MAX);
        let mut rows = Vec::new();
        for (worker, address, data, mtime) in nodes {
            let age = newest.saturating_sub(mtime);
            if age > recent.max(window) {
                continue;
            }
            let record = parse_record(OP, worker, &data)?;
            let mut row = FleetMember::new(worker);
            if let Some((a, port)) = split_address(&address) {
                row.address = Some(a);
                row.port = Some(port);
            }
            row.host = record.host;
            row.live = age <= window;
            row.reported = record.reported;
            row.mark = record.mark;
            rows.push(row);
        }
        rows.sort_by_key(|r| r.worker);
        Ok(rows)
    }

    async fn release(&self, _claim: &Claim) -> Result<()> {
        // A forever worker ID belongs to its identity for good; the mark stays.
        Ok(())
    }

    /// Registers on ZooKeeper a worker that was claimed from the cache while
    /// it was unreachable: this identity's node must exist with the cached
    /// worker ID as its sequence and a mark at or below `mark` (the highest
    /// this holding persisted); its mark is then raised to `mark`, and the
    /// claim's token becomes the node's path.
    ///
    /// Anything else is `LeaseLost`, and the keeper fences and claims anew:
    /// a node missing or with another sequence means ZooKeeper no longer
    /// records this identity's worker ID (restored from an older backup, or
    /// cleared), so another identity may be given it; a higher mark means
    /// another process wrote as this identity.
    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim> {
        let address = node_address(node);
        let lost = |reason: String| RegistryError::LeaseLost {
            registry: KIND,
            worker: claim.worker,
            reason,
        };
        let client = self.session.live_client("register again").await?;
        let dir = self.session.forever_dir();
        let prefix = format!("{address}-");
        let path = self
            .session
            .call("register again", async {
                let (seq, path) = find_mine(&client, &dir, &prefix)
                    .await?
                    .ok_or_else(|| lost(format!("zookeeper has no node for {address}")))?;
                if seq != i64::from(claim.worker) {
                    return Err(lost(format!(
                        "zookeeper gives {address} worker {seq}, the cache gave {}",
                        claim.worker
                    )));
                }
                set_node_mark(
                    &client,
                    "register again",
                    &path,
                    &address,
                    claim.worker,
                    Timestamp::now(),
                    |stored| match stored {
                        Some(stored) if stored > mark => Err(lost(format!(
                            "zookeeper's mark {stored} is above this holding's {mark}"
                        ))),
                        _ => Ok(Some(mark)),
                    },
                )
                .await?;
                Ok(path)
            })
            .await?;
        self.write_cache(&address, claim.worker, Some(mark)).await?;
        tracing::info!(worker = claim.worker, %path, "worker claimed from the cache is registered on zookeeper again");
        Ok(Claim {
            worker: claim.worker,
            stored_mark: Some(
                Timestamp::from_millisecond(ceil_ms(mark))
                    .expect("a mark rounded up to a millisecond"),
            ),
            lease: None,
            token: path,
        })
    }
}

/// The `ip:port` identity a claim was made for (its node's name, or the
/// offline token's).
fn claim_address(claim: &Claim) -> String {
    claim
        .token
        .strip_prefix(OFFLINE)
        .map(str::to_owned)
        .or_else(|| address_of_path(&claim.token))
        .unwrap_or_default()
}

/// This identity's node under `dir` (children named `{prefix}{seq}`), as
/// `(seq, path)`: the lowest sequence wins if a race once created two.
async fn find_mine(client: &zk::Client, dir: &str, prefix: &str) -> Result<Option<(i64, String)>> {
    let children = client
        .list_children(dir)
        .await
        .map_err(|e| backend("list forever nodes", &e))?;
    Ok(children
        .iter()
        .filter_map(|c| Some((parse_seq(c.strip_prefix(prefix)?)?, c)))
        .min()
        .map(|(seq, name)| (seq, format!("{dir}/{name}"))))
}

/// Sets the mark in the node at `path` to what `decide` makes of the stored
/// one, by a version-checked `setData` retried on a conflict (so a mark
/// written meanwhile is seen by `decide`, never overwritten blind).
async fn set_node_mark(
    client: &zk::Client,
    operation: &'static str,
    path: &str,
    address: &str,
    worker: u32,
    reported: Timestamp,
    mut decide: impl FnMut(Option<Timestamp>) -> Result<Option<Timestamp>>,
) -> Result<()> {
    for _ in 0..CAS_ATTEMPTS {
        let (data, stat) = client
            .get_data(path)
            .await
            .map_err(|e| backend(operation, &e))?;
        let record = parse_record(operation, worker, &data)?;
        let mark = decide(record.mark)?;
        let data = render_forever(address, record.host.as_deref(), reported, mark);
        match client
            .set_data(path, data.as_bytes(), Some(stat.version))
            .await
        {
            Ok(_) => return Ok(()),
            Err(zk::Error::BadVersion) => continue,
            Err(e) => return Err(backend(operation, &e)),
        }
    }
    Err(RegistryError::Backend {
        registry: KIND,
        operation,
        message: format!("{path} kept changing over {CAS_ATTEMPTS} compare-and-set attempts"),
    })
}

/// What the local cache file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CacheRecord {
    worker: u32,
    mark: Option<Timestamp>,
}

impl CacheRecord {
    fn render(&self) -> String {
        let mut s = format!("# idmint zookeeper worker cache\nworker={}\n", self.worker);
        if let Some(mark) = self.mark {
            s.push_str(&format!("mark={}\n", ceil_ms(mark)));
        }
        s.push_str("end\n");
        s
    }

    fn parse(text: &str) -> std::result::Result<CacheRecord, String> {
        let mut worker = None;
        let mut mark = None;
        let mut ended = false;
        for line in text.lines() {
            match line.split_once('=') {
                Some(("worker", v)) => {
                    worker = Some(
                        v.parse::<u32>()
                            .map_err(|_| format!("worker {v:?} is not a number"))?,
                    )
                }
                Some(("mark", v)) => {
                    mark = Some(
                        ms_to_ts(v)
                            .ok_or_else(|| format!("mark {v:?} is not unix milliseconds"))?,
                    )
                }
                _ if line == "end" => ended = true,
                _ => {}
            }
        }
        if !ended {
            return Err("it was cut short (no end line)".to_owned());
        }
        Ok(CacheRecord {
            worker: worker.ok_or("it has no worker line")?,
            mark,
        })
    }
}

pub(super) fn render_forever(
    address: &str,
    host: Option<&str>,
    reported: Timestamp,
    mark: Option<Timestamp>,
) -> String {
    let mut s = format!(
        "{}reported={}\n",
        identity_lines(address, host),
        reported.as_millisecond()
    );
    if let Some(mark) = mark {
        s.push_str(&format!("mark={}\n", ceil_ms(mark)));
    }
    s
}

/// `ip:port` from a forever node path `.../forever/{ip:port}-{seq}`.
pub(super) fn address_of_path(path: &str) -> Option<String> {
    let name = path.rsplit('/').next()?;
    Some(name.rsplit_once('-')?.0.to_owned())
}

pub(super) fn parse_seq(raw: &str) -> Option<i64> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

/// ZooKeeper's rendering of a sequence number (ten digits, or nineteen past i32).
pub(super) fn zk_seq(seq: i64) -> String {
    if seq <= i64::from(i32::MAX) {
        format!("{seq:010}")
    } else {
        format!("{seq:019}")
    }
}

fn cache_error(message: String) -> RegistryError {
    RegistryError::Backend {
        registry: KIND,
        operation: "local cache",
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_records_round_trip_and_cut_files_are_errors() {
        let record = CacheRecord {
            worker: 7,
            mark: Timestamp::from_millisecond(1_700_000_000_123).ok(),
        };
        assert_eq!(CacheRecord::parse(&record.render()).unwrap(), record);
        let cut = record.render().replace("end\n", "");
        assert!(CacheRecord::parse(&cut).is_err());
    }
}
