//! The `file` registry, idmint's embedded default: one node, one worker ID, and a
//! lease file in the data directory holding the worker ID, its high-water mark
//! and the last reported time.
//!
//! Why a file at all: a single node still needs its mark to survive restarts, or
//! a restart with the clock behind repeats IDs. Why a lock: two processes sharing
//! one data directory would share one worker ID and one mark, and repeat each
//! other's IDs; the second one must fail at once, saying who holds the directory.
//!
//! Invariants:
//! - **One holder per directory.** [`LeaseFile::open`] takes an exclusive `flock`
//!   on `idmint.lock` and keeps it until the [`LeaseFile`] is dropped (or the
//!   process dies: the kernel drops the lock, so a crash never leaves a stale
//!   lock behind). The holder's pid is written into the lock file for the error
//!   message of the next one. The lock sits on its own file because the lease file
//!   is replaced by rename on every write, and a lock on a replaced file guards
//!   nothing.
//! - **Never backwards.** A write goes to `worker.lease.tmp`, is fsynced, renamed
//!   over `worker.lease`, and the directory is fsynced. Until the rename, the old
//!   file stays complete and valid, so a crash mid-write (a truncated or missing
//!   temp file) leaves the last acknowledged mark in place. A temp file found at
//!   open was never acknowledged, so it is discarded. A lease file that doesn't
//!   parse is an error, never read as "no mark" (that would be a guess, and the
//!   guess that goes backwards).
//! - **Lowered only by a clean stop.** The mark only rises while a node runs;
//!   when it stops cleanly, the keeper seals its generator and the file's mark
//!   becomes the last instant it really issued in (the same atomic replace),
//!   so a restart serves at once instead of waiting out the window. A crash
//!   never writes that record, and one cut short is not acknowledged: the
//!   window-ahead mark stays. Older binaries read the record as a mark, and
//!   start above it, which is safe.
//!
//! The same file keeps the marks of the [`fixed`](crate::fixed) registries when
//! they are given one.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;

use crate::error::{RegistryError, Result};
use crate::registry::{
    Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry, check_range,
};

/// The lock file's name inside the data directory.
const LOCK_NAME: &str = "idmint.lock";
/// The lease file's name inside the data directory.
const FILE_NAME: &str = "worker.lease";
/// The temp file a write goes through.
const TEMP_NAME: &str = "worker.lease.tmp";
/// The first line of a lease file.
const HEADER: &str = "# idmint worker lease; replaced atomically, do not edit while idmint runs";

/// What a lease file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The worker ID last claimed from this directory.
    pub worker: u32,
    /// What the next holder must start above (`None`: never persisted): the
    /// highest mark persisted, or after a clean stop the last instant that
    /// holder issued in.
    pub mark: Option<Timestamp>,
    /// The time the holder last reported.
    pub reported: Option<Timestamp>,
}

impl LeaseRecord {
    fn render(&self) -> String {
        let mut s = format!(
            "{HEADER}\nversion=1\nworker={}\npid={}\n",
            self.worker,
            std::process::id()
        );
        if let Some(mark) = self.mark {
            s.push_str(&format!("mark={mark}\n"));
        }
        if let Some(reported) = self.reported {
            s.push_str(&format!("reported={reported}\n"));
        }
        // A file without this line was cut short.
        s.push_str("end\n");
        s
    }

    fn parse(text: &str) -> std::result::Result<LeaseRecord, String> {
        let mut worker = None;
        let mut mark = None;
        let mut reported = None;
        let mut ended = false;
        let time = |key: &str, v: &str| {
            v.parse::<Timestamp>()
                .map_err(|e| format!("{key} {v:?} is not a timestamp: {e}"))
        };
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if ended {
                return Err(format!("line {line:?} after the end line"));
            }
            if line == "end" {
                ended = true;
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not key=value"))?;
            match key {
                "version" if value == "1" => {}
                "version" => return Err(format!("version {value:?} is not supported (1 is)")),
                "worker" => {
                    worker = Some(
                        value
                            .parse::<u32>()
                            .map_err(|_| format!("worker {value:?} is not a number"))?,
                    );
                }
                "pid" => {}
                "mark" => mark = Some(time(key, value)?),
                "reported" => reported = Some(time(key, value)?),
                _ => return Err(format!("unknown key {key:?}")),
            }
        }
        if !ended {
            return Err("the end line is missing (the file was cut short)".to_owned());
        }
        Ok(LeaseRecord {
            worker: worker.ok_or("the worker line is missing")?,
            mark,
            reported,
        })
    }
}

/// The lease file of a data directory, locked for this process.
///
/// - Opening takes the directory's lock ([`LeaseFile::open`]); dropping releases it.
/// - [`LeaseFile::write`] is atomic and durable: when it returns `Ok`, the record
///   survives a crash or power loss; when it fails or the process dies during it,
///   the previous record is what a later [`LeaseFile::read`] sees.
/// - Blocking file I/O: async callers run it on a blocking thread (the registries
///   in this crate do).
#[derive(Debug)]
pub struct LeaseFile {
    dir: PathBuf,
    /// Holds the `flock` for as long as it is open.
    _lock: File,
}

impl LeaseFile {
    /// Opens (creating it if needed) the data directory `dir` and locks it.
    ///
    /// Discards a temp file left by a write that a crash interrupted: it was never
    /// acknowledged.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Config`] when another process (or another `LeaseFile` in
    /// this one) holds the directory, naming its pid; [`RegistryError::Backend`]
    /// when the directory or lock file can't be created.
    pub fn open(dir: impl AsRef<Path>) -> Result<LeaseFile> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io_error("create data directory", &dir, &e))?;
        let lock_path = dir.join(LOCK_NAME);
        // No truncation before the lock is ours: the file holds the holder's pid.
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| io_error("open lock file", &lock_path, &e))?;
        match fs4::FileExt::try_lock(&lock) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let pid = holder
                    .trim()
                    .strip_prefix("pid=")
                    .unwrap_or("unknown")
                    .to_owned();
                return Err(RegistryError::Config {
                    registry: "file",
                    message: format!(
                        "data directory {} is in use by another idmint process (pid {pid}); \
                         give each process its own data directory",
                        dir.display()
                    ),
                });
            }
            Err(fs4::TryLockError::Error(e)) => return Err(io_error("lock", &lock_path, &e)),
        }
        let write_pid = |lock: &mut File| -> io::Result<()> {
            lock.set_len(0)?;
            lock.seek(SeekFrom::Start(0))?;
            lock.write_all(format!("pid={}\n", std::process::id()).as_bytes())
        };
        write_pid(&mut lock).map_err(|e| io_error("write lock file", &lock_path, &e))?;
        let temp = dir.join(TEMP_NAME);
        match fs::remove_file(&temp) {
            Ok(()) => tracing::warn!(
                path = %temp.display(),
                "discarded a lease temp file left by an interrupted write"
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("remove stale temp file", &temp, &e)),
        }
        Ok(LeaseFile { dir, _lock: lock })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lease file's path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// Reads the record; `None` when there is no lease file yet.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Backend`] when the file can't be read or doesn't parse.
    /// A damaged file is never taken for a missing one: that would forget the mark.
    pub fn read(&self) -> Result<Option<LeaseRecord>> {
        let path = self.path();
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("read lease file", &path, &e)),
        };
        LeaseRecord::parse(&text)
            .map(Some)
            .map_err(|reason| RegistryError::Backend {
                registry: "file",
                operation: "read lease file",
                message: format!(
                    "lease file {} is damaged: {reason}; restore it from a backup, or remove \
                     it only if no ID of this worker can be later than the current time",
                    path.display()
                ),
            })
    }

    /// Replaces the record atomically and durably (temp file, fsync, rename, fsync
    /// of the directory).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Backend`] on an I/O failure; the previous record stays.
    pub fn write(&self, record: &LeaseRecord) -> Result<()> {
        let temp = self.dir.join(TEMP_NAME);
        let path = self.path();
        let write_temp = || -> io::Result<()> {
            let mut f = File::create(&temp)?;
            f.write_all(record.render().as_bytes())?;
            f.sync_all()
        };
        write_temp().map_err(|e| io_error("write lease temp file", &temp, &e))?;
        fs::rename(&temp, &path).map_err(|e| io_error("rename lease file", &path, &e))?;
        // The rename is durable only once the directory entry is.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error("sync data directory", &self.dir, &e))
    }
}

fn io_error(operation: &'static str, path: &Path, e: &io::Error) -> RegistryError {
    RegistryError::Backend {
        registry: "file",
        operation,
        message: format!("{}: {e}", path.display()),
    }
}

/// Where a single-node registry takes its worker ID from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WorkerSource {
    /// A fixed value (config, a StatefulSet ordinal).
    Fixed(u32),
    /// The low bits of an IPv4 address: the address modulo the range.
    Ipv4(std::net::Ipv4Addr),
}

/// The shared machinery of the registries that need no coordinator (`file`,
/// `static`, `host`, `k8s`): one worker ID, claimed once at a time in this process,
/// with marks in a [`LeaseFile`] or, without one, in memory.
///
/// With a shared registry ([`LocalWorker::with_shared`]) the worker ID is also
/// claimed there with [`WorkerRegistry::claim_worker`] (the collision check):
/// a second node with the same ID fails its claim with
/// [`RegistryError::WorkerTaken`]. The shared claim's lease is this claim's
/// lease; marks are persisted to both stores and a claim starts above the
/// higher of the two; peers and the fleet listing are the shared registry's.
#[derive(Debug)]
pub(crate) struct LocalWorker {
    kind: &'static str,
    source: WorkerSource,
    inner: Arc<Mutex<LocalInner>>,
    shared: Option<Arc<dyn WorkerRegistry>>,
}

#[derive(Debug)]
struct LocalInner {
    file: Option<LeaseFile>,
    /// The highest mark persisted (read from the file at claim).
    mark: Option<Timestamp>,
    reported: Option<Timestamp>,
    /// The token of the claim held now.
    token: Option<String>,
    /// The claim in the shared registry that goes with it.
    shared_claim: Option<Claim>,
    /// The worker last claimed and who claimed it, for
    /// [`WorkerRegistry::fleet`]: kept in memory only, since the directory lock
    /// means the holder is always this process (and the lease file's format
    /// stays what older binaries read).
    holder: Option<(u32, NodeIdentity)>,
    claims: u64,
}

fn lock(m: &Mutex<LocalInner>) -> MutexGuard<'_, LocalInner> {
    // Every critical section leaves the data consistent before anything can panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Gives a local claim back unless disarmed: a claim whose shared half failed,
/// or whose caller gave up waiting (a timeout drops the future mid-claim), must
/// not keep the one-claim-at-a-time slot taken.
struct PendingClaim<'a> {
    inner: &'a Mutex<LocalInner>,
    token: Option<String>,
}

impl PendingClaim<'_> {
    fn disarm(mut self, shared_claim: Claim) {
        let mut inner = lock(self.inner);
        if inner.token == self.token {
            inner.shared_claim = Some(shared_claim);
        }
        self.token = None;
    }
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            let mut inner = lock(self.inner);
            if inner.token.as_deref() == Some(token.as_str()) {
                inner.token = None;
                inner.shared_claim = None;
            }
        }
    }
}

impl LocalWorker {
    pub(crate) fn new(kind: &'static str, source: WorkerSource) -> Self {
        LocalWorker {
            kind,
            source,
            inner: Arc::new(Mutex::new(LocalInner {
                file: None,
                mark: None,
                reported: None,
                token: None,
                shared_claim: None,
                holder: None,
                claims: 0,
            })),
            shared: None,
        }
    }

    /// Keeps the marks in `file` too.
    pub(crate) fn with_file(self, file: LeaseFile) -> Self {
        lock(&self.inner).file = Some(file);
        self
    }

    /// Registers the worker ID in `shared` at every claim.
    pub(crate) fn with_shared(self, shared: Arc<dyn WorkerRegistry>) -> Self {
        LocalWorker {
            shared: Some(shared),
            ..self
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        self.kind
    }

    pub(crate) fn worker_for(&self, range: u32) -> Result<u32> {
        let worker = match self.source {
            WorkerSource::Fixed(w) => w,
            WorkerSource::Ipv4(ip) => {
                check_range(self.kind, range)?;
                u32::from(ip) % range
            }
        };
        if worker >= range {
            return Err(self.config(format!(
                "worker {worker}{} is out of range 0..{range} for this layout",
                self.derived_from()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            )));
        }
        Ok(worker)
    }

    /// How the worker ID was derived, when it was (`from address 10.1.2.3`).
    fn derived_from(&self) -> Option<String> {
        match self.source {
            WorkerSource::Fixed(_) => None,
            WorkerSource::Ipv4(ip) => Some(format!("from address {ip}")),
        }
    }

    fn config(&self, message: String) -> RegistryError {
        RegistryError::config(self.kind, message)
    }

    /// Runs `f` on the state, on a blocking thread when there is a file to touch.
    async fn with_inner<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut LocalInner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = self.inner.clone();
        let has_file = lock(&inner).file.is_some();
        if !has_file {
            return f(&mut lock(&inner));
        }
        let kind = self.kind;
        tokio::task::spawn_blocking(move || f(&mut lock(&inner)))
            .await
            .map_err(|e| RegistryError::Backend {
                registry: kind,
                operation,
                message: e.to_string(),
            })?
    }

    fn check_token(kind: &'static str, inner: &LocalInner, claim: &Claim) -> Result<()> {
        if inner.token.as_deref() != Some(claim.token.as_str()) {
            return Err(RegistryError::LeaseLost {
                registry: kind,
                worker: claim.worker,
                reason: "the claim was released".to_owned(),
            });
        }
        Ok(())
    }

    /// The shared claim that goes with `claim`, after checking `claim` is held.
    fn shared_claim(&self, claim: &Claim) -> Result<Option<Claim>> {
        let inner = lock(&self.inner);
        Self::check_token(self.kind, &inner, claim)?;
        Ok(inner.shared_claim.clone())
    }

    /// The shared registry says the claim is gone: so is the local one, and the
    /// keeper's next claim may take the slot again.
    fn forget(&self, claim: &Claim) {
        let mut inner = lock(&self.inner);
        if inner.token.as_deref() == Some(claim.token.as_str()) {
            inner.token = None;
            inner.shared_claim = None;
        }
    }

    pub(crate) async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        let worker = self.worker_for(range)?;
        let mut claim = self.claim_local(worker, node.clone()).await?;
        let Some(shared) = &self.shared else {
            return Ok(claim);
        };
        let pending = PendingClaim {
            inner: &self.inner,
            token: Some(claim.token.clone()),
        };
        let held = shared
            .claim_worker(node, worker, range)
            .await
            .map_err(|e| match e {
                RegistryError::WorkerTaken {
                    registry,
                    worker,
                    node,
                    holder,
                    origin: None,
                } => RegistryError::WorkerTaken {
                    registry,
                    worker,
                    node,
                    holder,
                    origin: Some(match self.derived_from() {
                        Some(d) => format!("{} registry, {d}", self.kind),
                        None => format!("{} registry", self.kind),
                    }),
                },
                e => e,
            })?;
        claim.stored_mark = claim.stored_mark.max(held.stored_mark);
        claim.lease = held.lease;
        pending.disarm(held);
        Ok(claim)
    }

    async fn claim_local(&self, worker: u32, node: NodeIdentity) -> Result<Claim> {
        let kind = self.kind;
        self.with_inner("claim", move |inner| {
            if inner.token.is_some() {
                return Err(RegistryError::Config {
                    registry: kind,
                    message: format!(
                        "worker {worker} is already claimed in this process; \
                         a single-node registry hands out one claim at a time"
                    ),
                });
            }
            if let Some(file) = &inner.file {
                // The file's mark is a lower bound whatever worker wrote it:
                // starting above it is always safe.
                if let Some(record) = file.read()? {
                    inner.mark = inner.mark.max(record.mark);
                    inner.reported = inner.reported.max(record.reported);
                }
                file.write(&LeaseRecord {
                    worker,
                    mark: inner.mark,
                    reported: inner.reported,
                })?;
            }
            inner.claims += 1;
            let token = format!("{kind}-{}-{}", std::process::id(), inner.claims);
            inner.token = Some(token.clone());
            inner.shared_claim = None;
            inner.holder = Some((worker, node));
            Ok(Claim {
                worker,
                stored_mark: inner.mark,
                lease: None,
                token,
            })
        })
        .await
    }

    pub(crate) async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        let held = self.shared_claim(claim)?;
        match (&self.shared, held) {
            (Some(shared), Some(held)) => {
                let renewed = shared.renew(&held).await;
                if let Err(RegistryError::LeaseLost { .. }) = &renewed {
                    self.forget(claim);
                }
                renewed
            }
            _ => Ok(None),
        }
    }

    pub(crate) async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.write_mark(claim, mark, reported, MarkWrite::Raise)
            .await
    }

    /// A clean stop: the file's mark becomes `high` (one atomic replace, so
    /// a crash leaves either the window-ahead mark or this record), then the
    /// shared registry's. A crash between the two leaves the shared one
    /// higher, and a claim starts above the higher of the two: the wait of
    /// a crash, never too little.
    pub(crate) async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.write_mark(claim, high, reported, MarkWrite::CleanStop)
            .await
    }

    /// Writes the mark to the file, then to the shared registry: both must
    /// hold it before it counts (the file for this node's restarts, the
    /// shared registry for whoever holds the ID next). `how` says whether
    /// it only raises the stored mark (a persist) or replaces it (a clean
    /// stop's record).
    async fn write_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
        how: MarkWrite,
    ) -> Result<()> {
        let kind = self.kind;
        let local = claim.clone();
        self.with_inner(how.operation(), move |inner| {
            Self::check_token(kind, inner, &local)?;
            let record = LeaseRecord {
                worker: local.worker,
                mark: match how {
                    MarkWrite::Raise | MarkWrite::Local => inner.mark.max(Some(mark)),
                    MarkWrite::CleanStop => Some(mark),
                },
                reported: inner.reported.max(Some(reported)),
            };
            if let Some(file) = &inner.file {
                file.write(&record)?;
            }
            inner.mark = record.mark;
            inner.reported = record.reported;
            Ok(())
        })
        .await?;
        if let (Some(shared), Some(held)) = (&self.shared, self.shared_claim(claim)?) {
            let written = match how {
                MarkWrite::Local => return Ok(()),
                MarkWrite::Raise => shared.persist_mark(&held, mark, reported).await,
                MarkWrite::CleanStop => shared.record_clean_stop(&held, mark, reported).await,
            };
            if let Err(RegistryError::LeaseLost { .. }) = &written {
                self.forget(claim);
            }
            written?;
        }
        Ok(())
    }

    /// The mark to the lease file alone: what this node's restart reads.
    pub(crate) async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<()> {
        let reported = lock(&self.inner).reported.unwrap_or(Timestamp::MIN);
        self.write_mark(claim, mark, reported, MarkWrite::Local)
            .await
    }

    pub(crate) async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        match (&self.shared, self.shared_claim(claim)?) {
            (Some(shared), Some(held)) => shared.peers(&held).await,
            _ => Ok(Vec::new()),
        }
    }

    /// The shared registry's fleet when there is one (that is where the other
    /// nodes are); otherwise this node alone, from the lease file when there
    /// is one (what is durably stored) or from memory. No row before the first
    /// claim of a registry without a lease file.
    pub(crate) async fn fleet(&self) -> Result<Vec<FleetMember>> {
        if let Some(shared) = &self.shared {
            return shared.fleet().await;
        }
        self.with_inner("list fleet", |inner| {
            let stored = match &inner.file {
                Some(file) => file.read()?,
                None => None,
            };
            let held = inner.token.is_some();
            let mut row = match (stored, &inner.holder) {
                (Some(record), _) => {
                    let mut row = FleetMember::new(record.worker);
                    row.mark = record.mark;
                    row.reported = record.reported;
                    row
                }
                (None, Some((worker, _))) => {
                    let mut row = FleetMember::new(*worker);
                    row.mark = inner.mark;
                    row.reported = inner.reported;
                    row
                }
                (None, None) => return Ok(Vec::new()),
            };
            row.live = held;
            if let (true, Some((_, node))) = (held, &inner.holder) {
                row = row.with_node(node);
            }
            Ok(vec![row])
        })
        .await
    }

    pub(crate) async fn release(&self, claim: &Claim) -> Result<()> {
        let held = {
            let mut inner = lock(&self.inner);
            if inner.token.as_deref() != Some(claim.token.as_str()) {
                return Ok(());
            }
            inner.token = None;
            inner.shared_claim.take()
        };
        match (&self.shared, held) {
            (Some(shared), Some(held)) => shared.release(&held).await,
            _ => Ok(()),
        }
    }
}

/// The `file` registry: worker ID from config (default 0), marks in the data
/// directory's lease file, the directory locked for this process.
///
/// - No leases: the lock is the exclusion, and it lasts as long as the registry.
///   With a shared registry ([`FileRegistry::with_shared_registry`]) the worker
///   ID is also claimed there, leased, so two nodes configured with one worker
///   ID can't both run.
/// - No peers: it is a single-node registry, so the clock check at start compares
///   only against the stored mark (and the shared registry's peers, with one).
///
/// # Examples
///
/// ```
/// use idmint_registry::file::FileRegistry;
///
/// let dir = std::env::temp_dir().join(format!("idmint-doc-{}", std::process::id()));
/// let registry = FileRegistry::open(&dir, 0)?;
/// // A second open of the same directory fails fast while the first is held.
/// assert!(FileRegistry::open(&dir, 0).is_err());
/// drop(registry);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FileRegistry {
    local: LocalWorker,
}

impl FileRegistry {
    /// Opens and locks the data directory `dir`; claims will hand out `worker`.
    ///
    /// # Errors
    ///
    /// Those of [`LeaseFile::open`]: the directory is in use, or can't be created.
    pub fn open(dir: impl AsRef<Path>, worker: u32) -> Result<FileRegistry> {
        Ok(FileRegistry::with_file(LeaseFile::open(dir)?, worker))
    }

    /// A registry over an already opened lease file.
    pub fn with_file(file: LeaseFile, worker: u32) -> FileRegistry {
        FileRegistry {
            local: LocalWorker::new("file", WorkerSource::Fixed(worker)).with_file(file),
        }
    }
}

/// Implements [`WorkerRegistry`] for a registry whose claims, marks and releases
/// are all its `local: LocalWorker`'s (the file registry and the fixed ones:
/// `static`, `host`, `k8s`), and gives it `with_shared_registry`.
macro_rules! local_worker_registry {
    ($name:ident) => {
        impl $name {
            /// Also claims the worker ID in `shared`, a registry other nodes use
            /// too (Redis, etcd, SQL): the collision check. A second node with the
            /// same worker ID then fails at start with
            /// [`RegistryError::WorkerTaken`](crate::RegistryError::WorkerTaken),
            /// naming both nodes, instead of issuing the first one's IDs.
            ///
            /// The claim takes the shared registry's lease (the keeper renews it and
            /// stops issuing when it runs out), marks go to both stores, a claim
            /// starts above the higher of the two, and the clock check at start
            /// compares with the shared registry's live peers. A shared registry
            /// that can't claim a given ID fails the claim with
            /// [`RegistryError::Unsupported`](crate::RegistryError::Unsupported).
            pub fn with_shared_registry(
                self,
                shared: std::sync::Arc<dyn crate::registry::WorkerRegistry>,
            ) -> $name {
                $name {
                    local: self.local.with_shared(shared),
                }
            }
        }

        #[async_trait::async_trait]
        impl crate::registry::WorkerRegistry for $name {
            fn kind(&self) -> &'static str {
                self.local.kind()
            }

            /// The worker ID is this node's own (configured or derived);
            /// a shared registry's claim only checks that no other node
            /// uses it, and marks go to the lease file first.
            fn reassigns_workers(&self) -> bool {
                false
            }

            async fn persist_local(
                &self,
                claim: &crate::registry::Claim,
                mark: jiff::Timestamp,
            ) -> crate::error::Result<()> {
                self.local.persist_local(claim, mark).await
            }

            async fn claim(
                &self,
                node: &crate::registry::NodeIdentity,
                range: u32,
            ) -> crate::error::Result<crate::registry::Claim> {
                self.local.claim(node, range).await
            }

            async fn renew(
                &self,
                claim: &crate::registry::Claim,
            ) -> crate::error::Result<Option<crate::registry::Lease>> {
                self.local.renew(claim).await
            }

            async fn persist_mark(
                &self,
                claim: &crate::registry::Claim,
                mark: jiff::Timestamp,
                reported: jiff::Timestamp,
            ) -> crate::error::Result<()> {
                self.local.persist_mark(claim, mark, reported).await
            }

            async fn record_clean_stop(
                &self,
                claim: &crate::registry::Claim,
                high: jiff::Timestamp,
                reported: jiff::Timestamp,
            ) -> crate::error::Result<()> {
                self.local.record_clean_stop(claim, high, reported).await
            }

            async fn peers(
                &self,
                claim: &crate::registry::Claim,
            ) -> crate::error::Result<Vec<crate::registry::PeerReport>> {
                self.local.peers(claim).await
            }

            async fn release(&self, claim: &crate::registry::Claim) -> crate::error::Result<()> {
                self.local.release(claim).await
            }

            async fn fleet(&self) -> crate::error::Result<Vec<crate::registry::FleetMember>> {
                self.local.fleet().await
            }
        }
    };
}
pub(crate) use local_worker_registry;

local_worker_registry!(FileRegistry);

/// How a mark write treats the stored mark.
#[derive(Debug, Clone, Copy)]
enum MarkWrite {
    /// A persist: the stored mark only rises.
    Raise,
    /// A persist to the lease file alone
    /// ([`WorkerRegistry::persist_local`](crate::WorkerRegistry::persist_local)).
    Local,
    /// A clean stop's record: the mark becomes what was really issued.
    CleanStop,
}

impl MarkWrite {
    fn operation(self) -> &'static str {
        match self {
            MarkWrite::Raise => "persist mark",
            MarkWrite::Local => "persist mark locally",
            MarkWrite::CleanStop => "record clean stop",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let full = LeaseRecord {
            worker: 7,
            mark: Some(ts("2026-11-21T00:00:03.123456789Z")),
            reported: Some(ts("2026-11-21T00:00:00Z")),
        };
        assert_eq!(LeaseRecord::parse(&full.render()), Ok(full));
        let empty = LeaseRecord {
            worker: 0,
            mark: None,
            reported: None,
        };
        assert_eq!(LeaseRecord::parse(&empty.render()), Ok(empty));

        let text = full.render();
        let cut = &text[..text.len() - 8];
        let err = LeaseRecord::parse(cut).unwrap_err();
        assert!(err.contains("cut short") || err.contains("not"), "{err}");
        assert!(LeaseRecord::parse("").unwrap_err().contains("cut short"));
        let bad = text.replace("worker=7", "worker=seven");
        assert!(LeaseRecord::parse(&bad).unwrap_err().contains("\"seven\""));
        let future = text.replace("version=1", "version=2");
        assert!(LeaseRecord::parse(&future).unwrap_err().contains("version"));
    }

    #[test]
    fn writes_replace_the_record_and_a_damaged_file_is_never_read_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let file = LeaseFile::open(dir.path()).unwrap();
        assert_eq!(file.read().unwrap(), None);
        let record = LeaseRecord {
            worker: 1,
            mark: Some(ts("2026-11-21T00:00:03Z")),
            reported: None,
        };
        file.write(&record).unwrap();
        assert_eq!(file.read().unwrap(), Some(record));
        assert!(!dir.path().join(TEMP_NAME).exists());

        fs::write(file.path(), "worker=1\nmark=2026-").unwrap();
        let err = file.read().unwrap_err();
        assert!(err.to_string().contains("is damaged"), "{err}");
    }
}
