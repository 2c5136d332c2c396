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
        Cluster::start_with(name, "")
    }

    /// As [`Cluster::start`], with `settings` (lines of `postgresql.conf`,
    /// such as `idmint.config = '...'`) added before the restart that
    /// preloads the extension.
    pub fn start_with(name: &str, settings: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("wtp-idmint-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        script(&["start", d]);
        // Preloading takes a restart; the worker's mark persists into the data dir.
        let conf = dir.join("data/postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str("\nshared_preload_libraries = 'idmint'\n");
        text.push_str(settings);
        text.push('\n');
        std::fs::write(&conf, text).unwrap();
        let url = script(&["restart", d]);
        Cluster { dir, url }
    }

    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
    }

    /// The URL clients connect with (`postgres://postgres@127.0.0.1:PORT/postgres`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Adds `settings` to `postgresql.conf`, then a clean restart.
    pub fn restart_with(&self, settings: &str) {
        let conf = self.dir.join("data/postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(settings);
        text.push('\n');
        std::fs::write(&conf, text).unwrap();
        self.restart();
    }

    /// A clean restart: a fast shutdown (the keeper records a clean stop),
    /// then a start on the same port and data.
    pub fn restart(&self) {
        script(&["restart", self.dir.to_str().unwrap()]);
    }

    /// A start on the same port and data with `env` in the server's
    /// environment (libfaketime's variables), after [`Cluster::kill`].
    pub fn start_with_env(&self, env: &[(&str, &str)]) {
        let out = Command::new(repo().join("scripts/postgres"))
            .args(["restart", self.dir.to_str().unwrap()])
            .envs(env.iter().copied())
            .output()
            .expect("running scripts/postgres");
        assert!(
            out.status.success(),
            "scripts/postgres restart failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// SIGKILL to the postmaster and every process it started (backends,
    /// the keeper), as a machine's crash leaves them: no shutdown of any kind.
    pub fn kill(&self) {
        let pid_file = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).unwrap();
        let postmaster = pid_file.lines().next().unwrap().trim().to_owned();
        let mut pids = vec![postmaster.clone()];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid ...`: the fields after the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1));
            if ppid == Some(postmaster.as_str()) {
                pids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        // A child may exit by itself meanwhile (kill then fails for it):
        // what counts is that none is left, checked below.
        let _ = Command::new("kill")
            .arg("-KILL")
            .args(&pids)
            .stderr(std::process::Stdio::null())
            .status();
        // Gone before anything starts again on the same data: dead, then
        // reaped. The init process of a container may reap late, and
        // PostgreSQL's lock-file check counts a zombie postmaster as
        // running; one still unreaped after 10 s has its lock file removed,
        // as a reboot would.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let stats: Vec<String> = pids
                .iter()
                .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
                .collect();
            let alive = stats.iter().any(|s| !s.contains(") Z "));
            assert!(
                !alive || std::time::Instant::now() < deadline,
                "{pids:?} outlived SIGKILL"
            );
            if stats.is_empty() {
                break;
            }
            if !alive && std::time::Instant::now() >= deadline {
                std::fs::remove_file(self.dir.join("data/postmaster.pid")).unwrap();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `connections` connections at once each insert `rows` rows with
    /// `insert` (one parameter: `round`), one statement per row (one DEFAULT
    /// call per row, as an application does), in transactions of 5,000.
    pub fn insert(&self, connections: usize, rows: u64, insert: &str, round: i32) {
        std::thread::scope(|scope| {
            for _ in 0..connections {
                let mut c = self.client();
                scope.spawn(move || {
                    let stmt = c.prepare(insert).unwrap();
                    let mut left = rows;
                    while left > 0 {
                        let n = left.min(5_000);
                        let mut tx = c.transaction().unwrap();
                        for _ in 0..n {
                            tx.execute(&stmt, &[&round]).unwrap();
                        }
                        tx.commit().unwrap();
                        left -= n;
                    }
                });
            }
        });
    }

    /// `connections` connections at once each insert `rows` rows into
    /// `table` (columns `id` with the default, `round`), 1,000 rows a
    /// statement (`INSERT ... SELECT $1 FROM generate_series(1, n)`): one
    /// DEFAULT call per row still, from every backend at once, as a bulk load
    /// makes them; the client's round trips no longer bound the rate, so a
    /// million rows a cluster take seconds, not minutes.
    pub fn insert_bulk(&self, connections: usize, rows: u64, table: &str, round: i32) {
        let insert =
            format!("INSERT INTO {table} (round) SELECT $1 FROM generate_series(1, $2::int)");
        std::thread::scope(|scope| {
            for _ in 0..connections {
                let mut c = self.client();
                let insert = insert.as_str();
                scope.spawn(move || {
                    let stmt = c.prepare(insert).unwrap();
                    let mut left = rows;
                    while left > 0 {
                        let n = left.min(1_000);
                        c.execute(&stmt, &[&round, &(n as i32)]).unwrap();
                        left -= n;
                    }
                });
            }
        });
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
