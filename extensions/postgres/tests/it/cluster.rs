//! A private cluster with the extension preloaded: `scripts/postgres start`,
//! then `shared_preload_libraries = 'idmint'` and a restart. Stopped (and its
//! directory removed) on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Cluster {
    dir: PathBuf,
    url: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script(args: &[&str]) -> String {
    let out = Command::new(repo().join("scripts/postgres"))
        .args(args)
        .output()
        .expect("running scripts/postgres");
    assert!(
        out.status.success(),
        "scripts/postgres {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

impl Cluster {
    /// A new cluster in a fresh directory under /tmp named after `name`.
    pub fn start(name: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("wtp-idmint-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        script(&["start", d]);
        // Preloading takes a restart; the worker's mark persists into the data dir.
        let conf = dir.join("data/postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str("\nshared_preload_libraries = 'idmint'\n");
        std::fs::write(&conf, text).unwrap();
        let url = script(&["restart", d]);
        Cluster { dir, url }
    }

    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
    }

    /// A clean restart: a fast shutdown (the keeper records a clean stop),
    /// then a start on the same port and data.
    pub fn restart(&self) {
        script(&["restart", self.dir.to_str().unwrap()]);
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }

    /// A crash: `pg_ctl stop -m immediate` (no shutdown checkpoint, the
    /// keeper gets no clean stop), then a start on the same port and data.
    pub fn crash_and_restart(&self) {
        let pg_ctl = "/usr/lib/postgresql/15/bin/pg_ctl";
        let data = self.dir.join("data");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", pg_ctl]);
            c
        } else {
            Command::new(pg_ctl)
        };
        let out = cmd
            .args([
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl stop -m immediate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        script(&["restart", self.dir.to_str().unwrap()]);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/postgres"))
            .args(["stop", self.dir.to_str().unwrap()])
            .status();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
