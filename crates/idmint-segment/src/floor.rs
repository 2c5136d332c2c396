//! What a node remembers of the segment store it issues from, so that a store
//! that forgets (a Redis restarted without persistence, a database restored
//! from an older backup) is refused instead of trusted.
//!
//! - [`StoreEpoch`]: a store's epoch marker, a random token the first idmint
//!   to use the store writes into it once (a Redis key beside the segment
//!   hashes; a row of `idmint_segment_epochs` for a SQL table). A store that
//!   was reset has lost it, or has a new one.
//! - [`FloorRecord`]: the epoch a node saw and, per key, its *floor*: the end
//!   of the highest segment it leased, so every ID it issued is below it.
//! - [`FloorFile`]: that record in the node's data directory
//!   (`segment-floors`), written ahead of use like the snowflake high-water
//!   mark: the allocator raises a key's floor to a segment's end, durably,
//!   before it hands out any ID of the segment. One write (and fsync) per
//!   leased segment, never per ID.
//!
//! # Invariants
//! - **Persist, then issue.** When the allocator hands out an ID of a
//!   segment, the file on disk already holds a floor at or above the
//!   segment's end.
//! - **Floors only rise.** [`FloorFile::raise`] never lowers a floor, and a
//!   write replaces the file atomically (temporary file, fsync, rename, fsync
//!   of the directory, as the worker lease file): a crash leaves the last
//!   acknowledged record whole. A temporary file found at open was never
//!   acknowledged and is discarded. A file that doesn't parse is an error,
//!   never read as "no floors" (that would be the guess that repeats IDs).
//! - **One holder.** [`FloorFile::open`] takes an exclusive lock on
//!   `segment-floors.lock` for as long as the file is open, so an operator's
//!   command can't write it under a running server.
//!
//! # What the floors can't know
//! A floor is what *this* node issued. A node whose last lease predates a
//! restored backup can't tell that other nodes leased past it, and a node
//! with no floor file (new, or its data directory lost) has nothing to
//! compare with: after a restore, raise every key above the highest floor
//! any node reports before the nodes serve again (docs/design.md, "when the
//! store forgets").

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Result, SegmentError};
use crate::store::{StoreEpoch, validate_key};

/// The floor file's name inside the data directory.
pub const FLOOR_FILE_NAME: &str = "segment-floors";
/// The lock file beside it.
const LOCK_NAME: &str = "segment-floors.lock";
/// The temporary file a write goes through.
const TEMP_NAME: &str = "segment-floors.tmp";
/// The first line of a floor file.
const HEADER: &str = "# idmint segment floors; replaced atomically, do not edit while idmint runs";
/// What a node remembers of a store: the store's epoch marker when the node
/// first used it, and per key a floor below which every ID it issued lies.
///
/// The segment allocator keeps one in a [`FloorFile`]; the Redis counter and
/// daily serial keep theirs in memory and hand them to the caller to keep
/// ([`RedisCounter::memory`](crate::redis::RedisCounter::memory)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloorRecord {
    /// The store's epoch marker as the node saw it; `None` before it saw one.
    pub epoch: Option<StoreEpoch>,
    /// Per key: every ID the node issued from it is below this.
    pub floors: BTreeMap<String, u64>,
}

impl FloorRecord {
    /// The floor of `key`, if the node issued from it.
    pub fn floor(&self, key: &str) -> Option<u64> {
        self.floors.get(key).copied()
    }

    /// Raises `key`'s floor to at least `floor`; true when it changed.
    pub fn raise(&mut self, key: &str, floor: u64) -> bool {
        match self.floors.get_mut(key) {
            Some(have) if *have >= floor => false,
            Some(have) => {
                *have = floor;
                true
            }
            None => {
                self.floors.insert(key.to_owned(), floor);
                true
            }
        }
    }

    /// The keys and floors, in key order.
    pub fn floor_list(&self) -> Vec<(String, u64)> {
        self.floors.iter().map(|(k, &f)| (k.clone(), f)).collect()
    }

    fn render(&self) -> String {
        let mut s = format!("{HEADER}\nversion=1\npid={}\n", std::process::id());
        if let Some(epoch) = &self.epoch {
            s.push_str(&format!("epoch={epoch}\n"));
        }
        for (key, floor) in &self.floors {
            s.push_str(&format!("floor={key} {floor}\n"));
        }
        // A file without this line was cut short.
        s.push_str("end\n");
        s
    }

    pub(crate) fn parse(text: &str) -> std::result::Result<FloorRecord, String> {
        let mut record = FloorRecord::default();
        let mut ended = false;
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
            let (name, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not name=value"))?;
            match name {
                "version" if value == "1" => {}
                "version" => return Err(format!("version {value:?} is not supported (1 is)")),
                "pid" => {}
                "epoch" => {
                    record.epoch = Some(value.parse().map_err(|e| format!("{e}"))?);
                }
                "floor" => {
                    let (key, floor) = value
                        .split_once(' ')
                        .ok_or_else(|| format!("floor {value:?} is not \"KEY FLOOR\""))?;
                    validate_key(key).map_err(|e| e.to_string())?;
                    let floor = floor
                        .parse::<u64>()
                        .map_err(|_| format!("floor {floor:?} of key {key:?} is not a number"))?;
                    if record.floors.insert(key.to_owned(), floor).is_some() {
                        return Err(format!("key {key:?} has two floors"));
                    }
                }
                _ => return Err(format!("unknown name {name:?}")),
            }
        }
        if !ended {
            return Err("the end line is missing (the file was cut short)".to_owned());
        }
        Ok(record)
    }
}

/// A node's [`FloorRecord`] in its data directory, locked for this process.
///
/// - [`FloorFile::open`] takes the directory's floor lock; dropping the file
///   releases it (a crash too: the kernel drops the lock).
/// - [`FloorFile::raise`] and [`FloorFile::set_epoch`] are atomic and
///   durable: when they return `Ok`, the record survives a crash or power
///   loss; when they fail, the previous record is what the next open reads
///   (the record in memory keeps the new value: it only errs high).
/// - Reads ([`FloorFile::floor`], [`FloorFile::record`]) take a lock held for
///   a copy only, never across a write.
/// - Blocking file I/O: async callers write on a blocking thread (the
///   allocator does).
#[derive(Debug)]
pub struct FloorFile {
    dir: PathBuf,
    /// Holds the `flock` for as long as it is open.
    _lock: File,
    /// The record, ahead of or equal to the one on disk.
    record: Mutex<FloorRecord>,
    /// Serializes writes, so the file only ever moves forward.
    writing: Mutex<()>,
}

impl FloorFile {
    /// Opens (creating it if needed) the data directory `dir`, locks its floor
    /// file and reads it; a directory without one has no floors yet.
    ///
    /// # Errors
    /// [`SegmentError::FloorFile`] when another process (or another
    /// `FloorFile` in this one) holds the lock, naming its pid; when the
    /// directory or files can't be created or read; when the file is damaged.
    pub fn open(dir: impl AsRef<Path>) -> Result<FloorFile> {
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
                return Err(SegmentError::FloorFile {
                    path: dir.join(FLOOR_FILE_NAME).display().to_string(),
                    operation: "lock",
                    message: format!(
                        "in use by another idmint process (pid {pid}); stop it first, or give \
                         each process its own data directory"
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
                "discarded a floor temp file left by an interrupted write"
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("remove stale temp file", &temp, &e)),
        }
        let path = dir.join(FLOOR_FILE_NAME);
        let record = match fs::read_to_string(&path) {
            Ok(text) => FloorRecord::parse(&text).map_err(|reason| SegmentError::FloorFile {
                path: path.display().to_string(),
                operation: "read",
                message: format!(
                    "the file is damaged: {reason}; restore it from a backup (removing it \
                     forgets what this node issued)"
                ),
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => FloorRecord::default(),
            Err(e) => return Err(io_error("read", &path, &e)),
        };
        Ok(FloorFile {
            dir,
            _lock: lock,
            record: Mutex::new(record),
            writing: Mutex::new(()),
        })
    }

    /// The floor file's path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FLOOR_FILE_NAME)
    }

    /// A copy of the record.
    pub fn record(&self) -> FloorRecord {
        lock(&self.record).clone()
    }

    /// The floor of `key`, if this node issued from it.
    pub fn floor(&self, key: &str) -> Option<u64> {
        lock(&self.record).floor(key)
    }

    /// The store epoch this node remembers.
    pub fn epoch(&self) -> Option<StoreEpoch> {
        lock(&self.record).epoch.clone()
    }

    /// Raises `key`'s floor to at least `floor` and writes the file; does
    /// nothing (no write) when it is that high already.
    ///
    /// # Errors
    /// [`SegmentError::FloorFile`] when the write fails; the file keeps the
    /// previous record.
    pub fn raise(&self, key: &str, floor: u64) -> Result<()> {
        let _writing = lock(&self.writing);
        let record = {
            let mut record = lock(&self.record);
            if !record.raise(key, floor) {
                return Ok(());
            }
            record.clone()
        };
        self.write(&record)
    }

    /// Remembers `epoch` as the store's and writes the file; does nothing
    /// when it is the one remembered.
    ///
    /// # Errors
    /// [`SegmentError::FloorFile`] when the write fails.
    pub fn set_epoch(&self, epoch: &StoreEpoch) -> Result<()> {
        let _writing = lock(&self.writing);
        let record = {
            let mut record = lock(&self.record);
            if record.epoch.as_ref() == Some(epoch) {
                return Ok(());
            }
            record.epoch = Some(epoch.clone());
            record.clone()
        };
        self.write(&record)
    }

    /// Replaces the file atomically and durably (temp file, fsync, rename,
    /// fsync of the directory).
    fn write(&self, record: &FloorRecord) -> Result<()> {
        let temp = self.dir.join(TEMP_NAME);
        let path = self.path();
        let write_temp = || -> io::Result<()> {
            let mut f = File::create(&temp)?;
            f.write_all(record.render().as_bytes())?;
            f.sync_all()
        };
        write_temp().map_err(|e| io_error("write temp file", &temp, &e))?;
        fs::rename(&temp, &path).map_err(|e| io_error("rename", &path, &e))?;
        // The rename is durable only once the directory entry is.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error("sync data directory", &self.dir, &e))
    }
}

fn io_error(operation: &'static str, path: &Path, e: &io::Error) -> SegmentError {
    SegmentError::FloorFile {
        path: path.display().to_string(),
        operation,
        message: e.to_string(),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // No critical section here can leave its data half-changed.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let mut record = FloorRecord {
            epoch: Some("e1".parse().unwrap()),
            ..FloorRecord::default()
        };
        assert!(record.raise("order", 301));
        assert!(record.raise("a:b.c", 7));
        assert!(!record.raise("order", 200), "never lowered");
        assert_eq!(record.floor("order"), Some(301));
        let text = record.render();
        assert_eq!(FloorRecord::parse(&text).unwrap(), record);

        let cut = text.replace("end\n", "");
        assert!(FloorRecord::parse(&cut).unwrap_err().contains("end line"));
        for bad in [
            "floor=order x\nend\n",
            "floor=or der 1\nend\n",
            "floor=order\nend\n",
            "floor=o 1\nfloor=o 2\nend\n",
            "epoch=two words\nend\n",
            "version=2\nend\n",
            "colour=blue\nend\n",
            "end\nfloor=o 1\n",
        ] {
            assert!(FloorRecord::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(FloorRecord::parse("end\n").unwrap(), FloorRecord::default());
    }

    #[test]
    fn a_file_keeps_floors_across_opens_and_only_raises_them() {
        let dir = tempfile::tempdir().unwrap();
        {
            let file = FloorFile::open(dir.path()).unwrap();
            assert_eq!(file.record(), FloorRecord::default());
            assert!(!file.path().exists(), "nothing written before a floor");
            file.raise("order", 1001).unwrap();
            file.raise("order", 501).unwrap();
            file.set_epoch(&"e1".parse().unwrap()).unwrap();
        }
        let file = FloorFile::open(dir.path()).unwrap();
        assert_eq!(file.floor("order"), Some(1001));
        assert_eq!(file.epoch().unwrap().as_str(), "e1");
        assert_eq!(file.floor("other"), None);
    }

    #[test]
    fn a_second_holder_is_refused_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let _first = FloorFile::open(dir.path()).unwrap();
        let err = FloorFile::open(dir.path()).unwrap_err();
        assert_eq!(err.code(), "floor_file_error");
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
    }

    #[test]
    fn a_damaged_file_is_refused_and_a_stale_temp_file_discarded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TEMP_NAME), "floor=order 99\n").unwrap();
        {
            let file = FloorFile::open(dir.path()).unwrap();
            assert_eq!(
                file.floor("order"),
                None,
                "the temp file was never acknowledged"
            );
        }
        assert!(!dir.path().join(TEMP_NAME).exists());
        std::fs::write(dir.path().join(FLOOR_FILE_NAME), "floor=order 5\n").unwrap();
        let err = FloorFile::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");
    }

    #[test]
    fn epochs_are_checked_and_unique() {
        let a = StoreEpoch::generate();
        assert!(a.as_str().len() <= 64, "{a}");
        assert_eq!(a.as_str().parse::<StoreEpoch>().unwrap(), a);
        assert_ne!(a, StoreEpoch::generate());
        for bad in ["", "a b", "é", &"x".repeat(65)] {
            assert_eq!(
                bad.parse::<StoreEpoch>().unwrap_err().code(),
                "invalid_spec",
                "{bad:?}"
            );
        }
    }
}
