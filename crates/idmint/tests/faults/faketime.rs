//! [`FakeClock`]: a shifted wall clock for one `idmint serve` process, through
//! libfaketime's time file.
//!
//! The process runs with `LD_PRELOAD` set to libfaketime and
//! `FAKETIME_TIMESTAMP_FILE` naming a file that holds the offset (`-10.000`
//! seconds, libfaketime's relative form). `FAKETIME_NO_CACHE=1` makes every
//! clock read look at the file again, so [`FakeClock::set_offset`] steps the
//! clock of a running process, and `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves the
//! monotonic clock alone: only the wall clock steps, as a real NTP step would.
//!
//! The file is rewritten whole (a temporary file, then a rename), so the process
//! never reads half an offset.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Where Debian's `libfaketime` package puts the library; others are searched
/// for when it is not there. The `MT` build: the plain one guards its file
/// reads with a process-wide flag, and a thread that reads the clock while
/// another re-reads the file gets the real time. idmint serves on several
/// threads, and the full suite saw such unshifted reads under load.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A wall-clock offset for the processes that run with its [`FakeClock::env`].
///
/// Cheap to clone: clones share the offset and the file.
#[derive(Debug, Clone)]
pub struct FakeClock {
    file: PathBuf,
    library: PathBuf,
    offset_ms: Arc<AtomicI64>,
}

impl FakeClock {
    /// A clock at offset zero whose time file lives in `dir` (created if missing).
    ///
    /// # Errors
    /// When libfaketime is not installed (`scripts/deps` installs it) or the
    /// file can't be written.
    pub fn new(dir: &Path) -> Result<FakeClock> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let clock = FakeClock {
            file: dir.join("faketime.rc"),
            library: find_library()?,
            offset_ms: Arc::new(AtomicI64::new(0)),
        };
        clock.set_offset_ms(0)?;
        Ok(clock)
    }

    /// The offset from real time now, in milliseconds (negative: behind).
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }

    /// Sets the offset from real time to `offset_ms` milliseconds (negative:
    /// behind). A running process under this clock sees its wall clock step at
    /// its next read.
    ///
    /// # Errors
    /// When the time file can't be written.
    pub fn set_offset_ms(&self, offset_ms: i64) -> Result<()> {
        let sign = if offset_ms < 0 { '-' } else { '+' };
        let abs = offset_ms.unsigned_abs();
        let text = format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000);
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &self.file))
            .with_context(|| format!("writing {}", self.file.display()))?;
        self.offset_ms.store(offset_ms, Ordering::SeqCst);
        Ok(())
    }

    /// Sets the offset to `behind` (backward) of real time.
    ///
    /// # Errors
    /// As [`FakeClock::set_offset_ms`].
    pub fn set_behind(&self, behind: Duration) -> Result<()> {
        self.set_offset_ms(-millis(behind))
    }

    /// The environment a process needs to run under this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".to_owned(), self.library.display().to_string()),
            (
                "FAKETIME_TIMESTAMP_FILE".to_owned(),
                self.file.display().to_string(),
            ),
            ("FAKETIME_NO_CACHE".to_owned(), "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
        ]
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// libfaketime's shared object: Debian's path, else the first found under
/// the usual library directories.
fn find_library() -> Result<PathBuf> {
    let known = Path::new(LIBFAKETIME);
    if known.exists() {
        return Ok(known.to_owned());
    }
    for root in ["/usr/lib", "/usr/local/lib", "/lib"] {
        if let Some(found) = search(Path::new(root), 3) {
            return Ok(found);
        }
    }
    bail!("libfaketimeMT.so.1 is not installed (scripts/deps installs the faketime package)")
}

fn search(dir: &Path, depth: u32) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut subdirs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == "libfaketimeMT.so.1") {
            return Some(path);
        }
        if depth > 0 && path.is_dir() {
            subdirs.push(path);
        }
    }
    subdirs.into_iter().find_map(|d| search(&d, depth - 1))
}
