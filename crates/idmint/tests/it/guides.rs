//! The migration guides (`docs/migrate/*.md`) run: every guide's ```` ```sh ````
//! blocks, joined in order into one script, run under `bash -euo pipefail`
//! (and `-x`, so a failure shows its line)
//! in a fresh temporary directory with the freshly built `idmint` first on
//! `PATH`, against the machine's MariaDB, PostgreSQL and Redis. A guide's
//! checks are `test`/`[ ]` lines, so a wrong answer fails its test, which is
//! named after the guide.
//!
//! Each guide's Chinese twin (`docs/zh-CN/migrate/`, same file name) must
//! have the very same `sh` blocks in the same order, so the two can't drift
//! apart; so must `README.md` and `README.zh-CN.md`.
//!
//! A guide whose services are missing prints SKIPPED (and fails under
//! `CI=true`), like every test that needs a service.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use idmint_testkit::require_service;

/// How long one guide's script may run.
const TIMEOUT: Duration = Duration::from_secs(120);

/// What a guide's script talks to, besides `idmint`.
#[derive(Debug, Clone, Copy)]
enum Needs {
    /// MariaDB (or MySQL) on 127.0.0.1:3306, user root, and the `mysql` client.
    MariaDb,
    /// PostgreSQL on 127.0.0.1:5432, user postgres, and `psql`.
    Postgres,
    /// Redis on 127.0.0.1:6379 and `redis-cli`.
    Redis,
    /// `redis-cli` alone, to talk to idmint's Redis-protocol listener.
    RedisCli,
}

impl Needs {
    fn name(self) -> &'static str {
        match self {
            Needs::MariaDb => "MariaDB (127.0.0.1:3306) and the mysql client",
            Needs::Postgres => "PostgreSQL (127.0.0.1:5432) and psql",
            Needs::Redis => "Redis (127.0.0.1:6379) and redis-cli",
            Needs::RedisCli => "redis-cli",
        }
    }

    fn available(self) -> bool {
        let (port, tool) = match self {
            Needs::MariaDb => (3306, "mysql"),
            Needs::Postgres => (5432, "psql"),
            Needs::Redis => (6379, "redis-cli"),
            Needs::RedisCli => return on_path("redis-cli"),
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok() && on_path(tool)
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The body of every ```` ```sh ```` block of `markdown`, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in markdown.lines() {
        match &mut open {
            None if line.trim_end() == "```sh" => open = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(open.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(open.is_none(), "a ```sh block is never closed");
    blocks
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Asserts that `english` and its Chinese twin `chinese` have the same `sh`
/// blocks, in the same order.
#[track_caller]
fn assert_same_sh_blocks(english: &Path, chinese: &Path) -> Vec<String> {
    assert!(
        chinese.is_file(),
        "{} has no Chinese twin: {} is missing",
        english.display(),
        chinese.display()
    );
    let ours = sh_blocks(&read(english));
    let theirs = sh_blocks(&read(chinese));
    assert_eq!(
        ours.len(),
        theirs.len(),
        "{} has {} ```sh blocks, {} has {}",
        english.display(),
        ours.len(),
        chinese.display(),
        theirs.len()
    );
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(
            a,
            b,
            "```sh block {} differs between {} and {}",
            i + 1,
            english.display(),
            chinese.display()
        );
    }
    ours
}

/// Runs the guide `docs/migrate/{file}`: checks its twin, then its script.
fn run_guide(file: &str, needs: &[Needs]) {
    let root = repo_root();
    let guide = root.join("docs/migrate").join(file);
    let blocks = assert_same_sh_blocks(&guide, &root.join("docs/zh-CN/migrate").join(file));
    assert!(!blocks.is_empty(), "{file} has no ```sh block to run");
    for &need in needs {
        if !require_service(need.name(), need.available()) {
            return;
        }
    }

    let dir = tempfile::Builder::new()
        .prefix("idmint-guide-")
        .tempdir()
        .unwrap();
    let script = dir.path().join("guide.sh");
    std::fs::write(&script, blocks.concat()).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_idmint")).parent().unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .unwrap_or_default(),
        ),
    )
    .unwrap();
    let log = dir.path().join("output.log");
    let out = std::fs::File::create(&log).unwrap();
    let err = out.try_clone().unwrap();
    let mut command = Command::new("bash");
    // `-x` too: a failing guide's output shows the line that failed.
    command
        .args(["-euxo", "pipefail"])
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: whatever it leaves behind (a server it
        // started in the background) is stopped with it.
        .process_group(0);
    for (name, _) in std::env::vars() {
        if name.starts_with("IDMINT_") {
            command.env_remove(name);
        }
    }
    let mut child = command.spawn().expect("run bash");
    let group = child.id().to_string();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > TIMEOUT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
    let mut output = String::new();
    std::fs::File::open(&log)
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    match status {
        Some(status) if status.success() => {}
        Some(status) => panic!("docs/migrate/{file} failed ({status}); its output:\n{output}"),
        None => panic!("docs/migrate/{file} ran past {TIMEOUT:?}; its output:\n{output}"),
    }
}

/// One test per guide, and the list [`every_guide_has_its_test`] checks.
macro_rules! guides {
    ($($test:ident: $file:literal needs [$($need:ident),*];)*) => {
        const GUIDES: &[&str] = &[$($file),*];
        $(
            #[test]
            fn $test() {
                run_guide($file, &[$(Needs::$need),*]);
            }
        )*
    };
}

guides! {
    guide_leaf: "leaf.md" needs [MariaDb];
    guide_sonyflake: "sonyflake.md" needs [RedisCli];
    guide_redis_incr: "redis-incr.md" needs [Redis];
    guide_auto_increment: "auto-increment.md" needs [MariaDb, Postgres];
    guide_tinyid: "tinyid.md" needs [MariaDb];
    guide_uid_generator: "uid-generator.md" needs [MariaDb];
}

/// A guide added to `docs/migrate/` without a test above would never run.
#[test]
fn every_guide_has_its_test() {
    let dir = repo_root().join("docs/migrate");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md") && name != "README.md")
        .collect();
    found.sort();
    let mut listed: Vec<String> = GUIDES.iter().map(|&g| g.to_owned()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "docs/migrate/ and the guides! list in tests/it/guides.rs differ"
    );
    let index = read(&dir.join("README.md"));
    for guide in &found {
        assert!(
            index.contains(&format!("({guide})")),
            "docs/migrate/README.md doesn't link {guide}"
        );
    }
    assert!(
        repo_root().join("docs/zh-CN/migrate/README.md").is_file(),
        "docs/zh-CN/migrate/README.md is missing"
    );
}

/// The READMEs' commands (quick start and the rest) are the same in both
/// languages.
#[test]
fn readme_and_its_chinese_twin_have_the_same_commands() {
    let root = repo_root();
    let blocks = assert_same_sh_blocks(&root.join("README.md"), &root.join("README.zh-CN.md"));
    assert!(!blocks.is_empty());
}

#[test]
fn sh_blocks_are_found_in_order_and_other_fences_are_not() {
    let text = "# t\n```sh\necho 1\n```\n\n```toml\n[a]\n```\n```sh\necho 2\necho 3\n```\n";
    assert_eq!(sh_blocks(text), ["echo 1\n", "echo 2\necho 3\n"]);
}

/// The README's quick start, run as a new user runs it: every `curl` line of
/// its section, in order, against one real server (started as the section
/// says, with the admin token), each answered with a 2xx (`curl -f`), and a
/// line's `# N` comment, when it is a number, is its answer. One name used
/// as a snowflake key and then created as a segment key on the same server
/// fails here with 409 `wrong_strategy`.
#[test]
fn readme_quick_start_runs_against_one_server() {
    let readme = read(&repo_root().join("README.md"));
    let start = readme
        .find("\n## Quick start")
        .expect("a Quick start section");
    let rest = &readme[start + 1..];
    let section = &rest[..rest[1..].find("\n## ").map_or(rest.len(), |end| end + 1)];
    let lines: Vec<String> = sh_blocks(section)
        .iter()
        .flat_map(|block| block.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| line.starts_with("curl "))
        .collect();
    assert!(
        lines.len() >= 5,
        "too few curl lines in the quick start: {lines:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let server = crate::serve::Served::start(
        &dir.path().join("data"),
        None,
        &[("IDMINT_ADMIN_TOKEN", "s3cret")],
    );
    for line in &lines {
        let (command, comment) = match line.split_once(" #") {
            Some((command, comment)) => (command.trim_end(), comment.trim()),
            None => (line.as_str(), ""),
        };
        let command = command
            .replacen("curl ", "curl -sS -f --max-time 30 ", 1)
            .replace("localhost:8080", &server.addr);
        let out = Command::new("bash")
            .args(["-c", &command])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{line}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        if !comment.is_empty() && comment.bytes().all(|b| b.is_ascii_digit()) {
            assert_eq!(stdout.trim(), comment, "{line}");
        }
    }
}

/// What the READMEs say `idmint config check` connects to is what it does:
/// it asks each Redis about its persistence unless `--offline`
/// (`cli/config.rs`; `config_check_warns_when_redis_can_forget` runs it),
/// so neither README may say it makes no connection.
#[test]
fn readmes_say_config_check_asks_redis_unless_offline() {
    for (file, offline) in [("README.md", "--offline"), ("README.zh-CN.md", "--offline")] {
        let text = read(&repo_root().join(file));
        let at = text
            .find("`idmint config check FILE`")
            .unwrap_or_else(|| panic!("{file} doesn't describe config check"));
        let paragraph = &text[at..at + text[at..].find("\n\n").unwrap_or(text.len() - at)];
        assert!(paragraph.contains(offline), "{file}: {paragraph}");
        for wrong in ["no connections", "不建立任何连接"] {
            assert!(!paragraph.contains(wrong), "{file}: {paragraph}");
        }
    }
}

/// Figures that change with every build stay out of the READMEs' prose: the
/// binary's size is measured in BENCHMARKS.md, not written here.
#[test]
fn readmes_state_no_binary_size() {
    for file in ["README.md", "README.zh-CN.md"] {
        let text = read(&repo_root().join(file));
        for line in text.lines() {
            let sized = line
                .split_whitespace()
                .zip(line.split_whitespace().skip(1))
                .any(|(n, unit)| {
                    n.trim_start_matches('(').parse::<f64>().is_ok()
                        && unit.starts_with("MB")
                        && (line.contains("stripped") || line.contains("剥离"))
                });
            assert!(!sized, "{file}: {line}");
        }
    }
}

/// `idmint segment raise` can't know the step of a key the store lost that
/// no config declares (made through the admin API or in the table): it
/// refuses without `--step` (`serve_segment_reset.rs`). Every place that
/// shows the command says so.
#[test]
fn docs_of_segment_raise_say_when_it_needs_a_step() {
    for file in [
        "README.md",
        "README.zh-CN.md",
        "docs/operating.md",
        "docs/zh-CN/operating.md",
    ] {
        let text = read(&repo_root().join(file));
        assert!(text.contains("idmint segment raise"), "{file}");
        assert!(
            text.contains("--step N"),
            "{file} doesn't say when --step is needed"
        );
    }
}
