//! [`Load`]: client threads that ask nodes for IDs and record every reply.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use idmint_core::Layout;
use jiff::Timestamp;

use super::lock;
use super::node::{Node, NodeInfo, wait_for};

/// How a key's IDs are checked.
#[derive(Debug, Clone, Copy)]
pub enum KeyKind {
    /// Snowflake IDs of this layout: one fleet-wide ID space, decoded for the
    /// worker and time checks.
    Snowflake(Layout),
    /// Segment IDs: each key its own space.
    Segment,
    /// IDs of the timestamp oracle (`strategy = "monotonic"`) of this layout:
    /// one space for every monotonic key and node, checked for real-time
    /// order across all of them (linearizability).
    Monotonic(Layout),
}

/// One client stream: a thread that asks one node for one key, sequentially,
/// cycling through `counts` (1: `GET /v1/ids/KEY`, text; more: the binary body).
#[derive(Debug, Clone)]
pub struct Target {
    node: Arc<NodeInfo>,
    key: String,
    kind: KeyKind,
    counts: Vec<u64>,
}

impl Target {
    /// Snowflake IDs of `key` from `node`, one per request.
    pub fn snowflake(node: &Node, key: &str, layout: Layout) -> Target {
        Target {
            node: node.info(),
            key: key.to_owned(),
            kind: KeyKind::Snowflake(layout),
            counts: vec![1],
        }
    }

    /// Segment IDs of `key` from `node`, one per request.
    pub fn segment(node: &Node, key: &str) -> Target {
        Target {
            node: node.info(),
            key: key.to_owned(),
            kind: KeyKind::Segment,
            counts: vec![1],
        }
    }

    /// Monotonic IDs of `key` (the oracle's `layout`) from `node`, one per
    /// request.
    pub fn monotonic(node: &Node, key: &str, layout: Layout) -> Target {
        Target {
            node: node.info(),
            key: key.to_owned(),
            kind: KeyKind::Monotonic(layout),
            counts: vec![1],
        }
    }

    /// Cycles through these counts (`[1, 1, 100]`: two singles, then a batch).
    pub fn with_counts(mut self, counts: &[u64]) -> Target {
        if !counts.is_empty() {
            self.counts = counts.to_vec();
        }
        self
    }
}

/// Pacing and timeouts of a [`Load`].
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pause: Duration,
    error_pause: Duration,
    timeout: Duration,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions::new()
    }
}

impl LoadOptions {
    /// 1 ms between requests (the machine is shared), 20 ms after a failure,
    /// a 10 s request timeout (above the server's own bounds, about 3 s for a
    /// store call, so a typed error comes back before the client gives up).
    pub const fn new() -> LoadOptions {
        LoadOptions {
            pause: Duration::from_millis(1),
            error_pause: Duration::from_millis(20),
            timeout: Duration::from_secs(10),
        }
    }
}

/// One request's outcome.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The stream (index into the load's targets).
    pub stream: usize,
    /// The node's name.
    pub node: Arc<NodeInfo>,
    /// The key.
    pub key: String,
    /// Real time the request was sent.
    pub sent: Timestamp,
    /// Real time the response was read (or the request failed).
    pub received: Timestamp,
    /// [`Reply::sent`] on the monotonic clock (the order checks use these:
    /// a wall-clock step of the machine can't reorder them).
    pub sent_at: Instant,
    /// [`Reply::received`] on the monotonic clock.
    pub received_at: Instant,
    /// The node's clock offset (ms) when it last started ([`NodeInfo::offset_ms`]).
    pub offset_ms: i64,
    /// The IDs, or the error code.
    pub result: std::result::Result<Vec<u64>, String>,
}

/// One client stream: its target, what it recorded, and its counts.
#[derive(Debug)]
struct Stream {
    target: Target,
    replies: Mutex<Vec<Reply>>,
    ok: AtomicU64,
    errors: AtomicU64,
    /// IDs received.
    ids: AtomicU64,
    /// Set by [`Load::retire`]: the thread ends after its current request.
    retired: AtomicBool,
    /// When it was retired.
    ended: Mutex<Option<Timestamp>>,
}

#[derive(Debug)]
struct LoadShared {
    stop: AtomicBool,
    options: LoadOptions,
    streams: RwLock<Vec<Arc<Stream>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// Client threads hitting nodes, recording every reply. Streams can be added
/// while it runs ([`Load::add`]); stop it with [`Load::finish`] (dropping it
/// stops the threads too).
#[derive(Debug)]
pub struct Load {
    shared: Arc<LoadShared>,
}

impl Load {
    /// Starts one thread per target.
    pub fn start(targets: Vec<Target>, options: LoadOptions) -> Load {
        let load = Load {
            shared: Arc::new(LoadShared {
                stop: AtomicBool::new(false),
                options,
                streams: RwLock::new(Vec::new()),
                threads: Mutex::new(Vec::new()),
            }),
        };
        for target in targets {
            load.add(target);
        }
        load
    }

    /// Adds a stream (a node started later, say); returns its index.
    pub fn add(&self, target: Target) -> usize {
        let stream = Arc::new(Stream {
            target,
            replies: Mutex::new(Vec::new()),
            ok: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            ids: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            ended: Mutex::new(None),
        });
        let idx = {
            let mut streams = self
                .shared
                .streams
                .write()
                .unwrap_or_else(|p| p.into_inner());
            streams.push(stream.clone());
            streams.len() - 1
        };
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("load-{idx}"))
            .spawn(move || run_stream(idx, &stream, &shared))
            .expect("spawn a load thread");
        self.shared
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(thread);
        idx
    }

    /// Adds a stream per target.
    pub fn add_all(&self, targets: impl IntoIterator<Item = Target>) {
        for target in targets {
            self.add(target);
        }
    }

    /// The streams of `node` (all with `None`) still running.
    fn streams_of(&self, node: Option<&str>) -> Vec<Arc<Stream>> {
        self.all_streams()
            .into_iter()
            .filter(|s| node.is_none_or(|n| s.target.node.name() == n))
            .filter(|s| !s.retired.load(Ordering::SeqCst))
            .collect()
    }

    fn all_streams(&self) -> Vec<Arc<Stream>> {
        self.shared
            .streams
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Ends the streams of `node`: each stops after the request it is making
    /// (a node about to be killed for good, say; its service gap then ends
    /// here). What they recorded stays in the record; [`Load::add`] starts
    /// new ones.
    pub fn retire(&self, node: &str) {
        let now = Timestamp::now();
        for stream in self.streams_of(Some(node)) {
            stream.retired.store(true, Ordering::SeqCst);
            *lock(&stream.ended) = Some(now);
        }
    }

    /// IDs received so far, on every stream.
    pub fn ids_received(&self) -> u64 {
        self.all_streams()
            .iter()
            .map(|s| s.ids.load(Ordering::Relaxed))
            .sum()
    }

    /// Waits until `total` IDs were received in all, polling every 50 ms.
    ///
    /// # Errors
    /// When they don't come within `within`.
    pub fn wait_ids(&self, total: u64, within: Duration) -> Result<()> {
        wait_for(within, Duration::from_millis(50), || {
            Ok((self.ids_received() >= total).then_some(()))
        })
        .with_context(|| format!("{total} IDs in all (had {})", self.ids_received()))
    }

    /// Failed replies so far on the streams of `node` (all with `None`).
    pub fn error_count(&self, node: Option<&str>) -> u64 {
        self.streams_of(node)
            .iter()
            .map(|s| s.errors.load(Ordering::Relaxed))
            .sum()
    }

    /// Waits until every stream of `node` (every stream with `None`) had `n`
    /// more successful replies, polling every 10 ms.
    ///
    /// # Errors
    /// When they don't come within `within`.
    pub fn wait_ok(&self, node: Option<&str>, n: u64, within: Duration) -> Result<()> {
        let streams = self.streams_of(node);
        let base: Vec<u64> = streams
            .iter()
            .map(|s| s.ok.load(Ordering::Relaxed))
            .collect();
        wait_for(within, Duration::from_millis(10), || {
            Ok(streams
                .iter()
                .zip(&base)
                .all(|(s, b)| s.ok.load(Ordering::Relaxed) >= b + n)
                .then_some(()))
        })
        .with_context(|| format!("{n} more replies from {}", node.unwrap_or("every node")))
    }

    /// Waits for the next failed reply on the streams of `node` whose code is
    /// one of `codes` (any code when empty); returns the code.
    ///
    /// # Errors
    /// When none comes within `within`.
    pub fn wait_error(
        &self,
        node: Option<&str>,
        codes: &[&str],
        within: Duration,
    ) -> Result<String> {
        let streams = self.streams_of(node);
        let seen: Vec<usize> = streams.iter().map(|s| lock(&s.replies).len()).collect();
        wait_for(within, Duration::from_millis(10), || {
            for (s, &from) in streams.iter().zip(&seen) {
                let replies = lock(&s.replies);
                let found = replies[from..].iter().find_map(|r| match &r.result {
                    Err(code) if codes.is_empty() || codes.contains(&code.as_str()) => {
                        Some(code.clone())
                    }
                    _ => None,
                });
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        })
        .with_context(|| format!("an error {codes:?} from {}", node.unwrap_or("any node")))
    }

    /// The replies so far (a copy), for checks made while the load runs.
    pub fn snapshot(&self) -> Vec<Reply> {
        self.all_streams()
            .iter()
            .flat_map(|s| lock(&s.replies).clone())
            .collect()
    }

    fn stop_threads(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for thread in threads {
            let _ = thread.join();
        }
    }

    /// Stops the threads and hands over what they recorded.
    pub fn finish(self) -> Record {
        self.stop_threads();
        let finished = Timestamp::now();
        let streams = self.all_streams();
        Record {
            kinds: streams.iter().map(|s| s.target.kind).collect(),
            streams: streams
                .iter()
                .map(|s| std::mem::take(&mut *lock(&s.replies)))
                .collect(),
            ends: streams
                .iter()
                .map(|s| lock(&s.ended).unwrap_or(finished))
                .collect(),
            finished,
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn run_stream(idx: usize, stream: &Stream, shared: &LoadShared) {
    let options = shared.options;
    let Ok(client) = reqwest::blocking::Client::builder()
        .timeout(options.timeout)
        .connect_timeout(options.timeout)
        .build()
    else {
        return;
    };
    let target = &stream.target;
    let mut round = 0usize;
    while !shared.stop.load(Ordering::SeqCst) && !stream.retired.load(Ordering::SeqCst) {
        let count = target.counts[round % target.counts.len()];
        round += 1;
        let sent = Timestamp::now();
        let sent_at = Instant::now();
        let result = request(&client, target, count);
        let received_at = Instant::now();
        let received = Timestamp::now();
        let ok = result.is_ok();
        if let Ok(ids) = &result {
            stream.ids.fetch_add(ids.len() as u64, Ordering::Relaxed);
        }
        lock(&stream.replies).push(Reply {
            stream: idx,
            node: target.node.clone(),
            key: target.key.clone(),
            sent,
            received,
            sent_at,
            received_at,
            offset_ms: target.node.offset_ms(),
            result,
        });
        if ok {
            stream.ok.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(options.pause);
        } else {
            stream.errors.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(options.error_pause);
        }
    }
}

/// One request: the IDs, or the error's code.
fn request(
    client: &reqwest::blocking::Client,
    target: &Target,
    count: u64,
) -> std::result::Result<Vec<u64>, String> {
    let addr = target.node.addr();
    let mut url = format!("http://{addr}/v1/ids/{}", target.key);
    if count > 1 {
        let _ = write!(url, "?count={count}");
    }
    let response = client
        .get(&url)
        .header("accept", "application/octet-stream")
        .send()
        .map_err(|e| transport_code(&e))?;
    let status = response.status();
    let body = response.bytes().map_err(|e| transport_code(&e))?;
    if !status.is_success() {
        return Err(serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("http_{}", status.as_u16())));
    }
    let ids: Vec<u64> = body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let well_formed = body.len() % 8 == 0
        && ids.len() as u64 == count
        && ids.iter().all(|&id| id > 0 && id < 1 << 63);
    if well_formed {
        Ok(ids)
    } else {
        Err("bad_body".to_owned())
    }
}

fn transport_code(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "io"
    }
    .to_owned()
}

/// Everything a [`Load`] recorded, per stream in request order.
#[derive(Debug)]
pub struct Record {
    /// How each stream's IDs are checked.
    pub kinds: Vec<KeyKind>,
    /// The replies of each stream, in order.
    pub streams: Vec<Vec<Reply>>,
    /// When it was finished.
    pub finished: Timestamp,
    /// When each stream ended: retired ([`Load::retire`]), or finished.
    pub ends: Vec<Timestamp>,
}

impl Record {
    /// Every reply, stream by stream.
    pub fn replies(&self) -> impl Iterator<Item = &Reply> {
        self.streams.iter().flatten()
    }

    /// The snowflake IDs `node` handed out, with the reply each came in.
    pub fn snowflake_ids_of<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = (u64, &'a Reply)> + 'a {
        self.streams
            .iter()
            .zip(&self.kinds)
            .filter(|(_, k)| matches!(k, KeyKind::Snowflake(_)))
            .flat_map(|(s, _)| s)
            .filter(move |r| r.node.name() == node)
            .filter_map(|r| r.result.as_ref().ok().map(|ids| (ids, r)))
            .flat_map(|(ids, r)| ids.iter().map(move |&id| (id, r)))
    }

    /// The layout of the snowflake streams (the first one's).
    pub fn layout(&self) -> Option<Layout> {
        self.kinds.iter().find_map(|k| match k {
            KeyKind::Snowflake(l) => Some(*l),
            KeyKind::Segment | KeyKind::Monotonic(_) => None,
        })
    }
}
