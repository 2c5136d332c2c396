//! `idmint serve` through outages of what it depends on (docs/design.md §1.6 and
//! §2 "Taking a sick node out of rotation"): the worker registry (a private
//! etcd, Redis, ZooKeeper or PostgreSQL) and the segment store (a private
//! PostgreSQL) are stopped under load and started again.
//!
//! What must hold, seen from outside the real binary:
//! - IDs keep coming while it is safe (within the lease, from the buffers);
//! - then every request is a 503 with `Retry-After` and a JSON error, never a
//!   200 and never an ID of 0 or less, on HTTP; RESP answers an error reply;
//! - `/readyz` says not ready, and why, while `/healthz` stays 200;
//! - once the service is back the node recovers by itself, and every ID after
//!   is above every ID before (no duplicate across the whole run);
//! - the log has a line for each notable event, not one per request.
//!
//! A service whose software is missing skips its test loudly (fails under
//! `CI=true`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use idmint_testkit::{PrivateService, Service};
use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::Value;

use crate::serve::Served;

/// The lease every registry is configured with: short, so the outage shows
/// within a few seconds (etcd grants no less than 2 s).
const LEASE_TTL: &str = "2s";

/// An HTTP client whose timeout is short enough to notice a hung server.
fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

/// One answer, as the load or a probe saw it.
#[derive(Debug)]
struct Answer {
    at: Instant,
    status: StatusCode,
    retry_after: Option<String>,
    content_type: String,
    body: String,
}

impl Answer {
    fn of(response: Response) -> Answer {
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
        };
        let retry_after = header("retry-after");
        let content_type = header("content-type").unwrap_or_default();
        let status = response.status();
        Answer {
            at: Instant::now(),
            status,
            retry_after,
            content_type,
            body: response.text().unwrap(),
        }
    }

    /// The IDs of a 200 text body, each checked to be a positive 63-bit ID.
    #[track_caller]
    fn ids(&self) -> Vec<u64> {
        assert_eq!(self.status, StatusCode::OK, "{self:?}");
        let ids = crate::integers(&self.body);
        assert!(!ids.is_empty(), "{self:?}");
        for &id in &ids {
            assert!(id > 0 && id < 1 << 63, "not an ID: {id}");
        }
        ids
    }

    /// Asserts a 503 with a `Retry-After` of whole seconds and a JSON error;
    /// returns its code.
    #[track_caller]
    fn unavailable(&self) -> String {
        assert_eq!(self.status, StatusCode::SERVICE_UNAVAILABLE, "{self:?}");
        let after: u64 = self
            .retry_after
            .as_deref()
            .unwrap_or_else(|| panic!("a 503 without Retry-After: {self:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("Retry-After is not seconds: {self:?}"));
        assert!(after >= 1, "{self:?}");
        assert!(
            self.content_type.starts_with("application/json"),
            "{self:?}"
        );
        let body: Value = serde_json::from_str(&self.body).unwrap();
        let code = body["error"]["code"].as_str().unwrap_or_default();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(!code.is_empty() && !message.is_empty(), "{body}");
        code.to_owned()
    }
}

/// GET `url` and keep what came back.
fn fetch(c: &Client, url: &str) -> Answer {
    Answer::of(c.get(url).send().unwrap())
}

/// Asks for IDs on a thread of its own, one request every few milliseconds,
/// until finished; every answer is kept.
struct Load {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Vec<Answer>>>,
    thread: JoinHandle<()>,
}

impl Load {
    fn start(url: String) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let (flag, log) = (stop.clone(), answers.clone());
        let thread = std::thread::spawn(move || {
            let c = client();
            while !flag.load(Ordering::Relaxed) {
                let answer = fetch(&c, &url);
                log.lock().unwrap().push(answer);
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        Load {
            stop,
            answers,
            thread,
        }
    }

    /// How many answers had `status` so far.
    fn count(&self, status: StatusCode) -> usize {
        let answers = self.answers.lock().unwrap();
        answers.iter().filter(|a| a.status == status).count()
    }

    /// Waits (up to `within`) until `n` answers had `status`.
    #[track_caller]
    fn wait_for(&self, status: StatusCode, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.count(status) < n {
            assert!(
                Instant::now() < deadline,
                "the load did not see {n} × {status} within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn finish(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the load thread does not panic");
        Arc::try_unwrap(self.answers)
            .map_err(|_| "the load thread is gone")
            .unwrap()
            .into_inner()
            .unwrap()
    }
}

/// Polls `url` until it answers `status` (up to `within`).
#[track_caller]
fn poll_until(c: &Client, url: &str, status: StatusCode, within: Duration) -> Answer {
    let deadline = Instant::now() + within;
    loop {
        let answer = fetch(c, url);
        if answer.status == status {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not answer {status} within {within:?}; last: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One RESP command over raw TCP; the reply's first line.
fn resp(addr: &str, args: &[&str]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        let n = s.read(&mut byte).unwrap();
        assert_eq!(n, 1, "closed after {reply:?}");
        reply.push(byte[0]);
    }
    String::from_utf8(reply).unwrap().trim_end().to_owned()
}

/// The lines of `log` that contain `text`.
fn lines_with<'a>(log: &'a str, text: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(text)).collect()
}

/// The server's log once it has a line containing `text` (up to 5 s: the
/// lease watcher looks every 250 ms).
#[track_caller]
fn log_once_it_has(server: &Served, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = server.log();
        if log.contains(text) {
            return log;
        }
        assert!(Instant::now() < deadline, "no {text:?} in the log: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The scenario of the module docs for a worker registry: `registry` is the
/// `[snowflake]` registry config for the private service at the address given.
fn lease_lost_then_back(service: Service, registry: impl Fn(&str) -> String) {
    let Some(coordinator) = PrivateService::start(service) else {
        return;
    };
    let name = coordinator.name();
    let config = format!(
        "[snowflake]\nwindow = \"1s\"\n{}\n\n[keys.sf]\nstrategy = \"snowflake\"\n",
        registry(coordinator.address())
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some(&config),
        &[],
        &["--resp-addr", "127.0.0.1:0"],
    );
    let resp_addr = server.resp_addr.clone().expect("RESP is on");
    let c = client();
    let ready = fetch(&c, &server.url("/readyz"));
    assert_eq!(ready.status, StatusCode::OK, "{name}: {ready:?}");
    assert!(resp(&resp_addr, &["INCR", "sf"]).starts_with(':'));

    let load = Load::start(server.url("/v1/ids/sf?count=10"));
    load.wait_for(StatusCode::OK, 50, Duration::from_secs(20));

    // The coordinator goes away: the node stops issuing before its lease
    // could be handed to another, and says why.
    let stopping = Instant::now();
    coordinator.stop();
    let not_ready = poll_until(
        &c,
        &server.url("/readyz"),
        StatusCode::SERVICE_UNAVAILABLE,
        Duration::from_secs(15),
    );
    assert_eq!(not_ready.unavailable(), "not_ready", "{name}");
    let metrics = fetch(&c, &server.url("/metrics")).body;
    assert!(metrics.contains("\nidmint_ready 0\n"), "{name}: {metrics}");
    load.wait_for(StatusCode::SERVICE_UNAVAILABLE, 1, Duration::from_secs(15));
    // Down: every surface refuses, typed, with a retry hint.
    for path in ["/v1/ids/sf?count=10", "/v1/ids/sf", "/api/snowflake/get/sf"] {
        let answer = fetch(&c, &server.url(path));
        let code = answer.unavailable();
        assert_eq!(code, "mark_reached", "{name} {path}: {answer:?}");
        assert!(answer.body.contains("paused"), "{name}: {answer:?}");
    }
    // The reason names the worker's lease or store and what failed.
    let ready = fetch(&c, &server.url("/readyz"));
    ready.unavailable();
    assert!(ready.body.contains("worker"), "{name}: {ready:?}");
    assert_eq!(fetch(&c, &server.url("/healthz")).status, StatusCode::OK);
    for args in [&["INCR", "sf"][..], &["IDMINT.BATCH", "sf", "5"]] {
        let reply = resp(&resp_addr, args);
        assert!(reply.starts_with("-MARK_REACHED "), "{name}: {reply}");
    }
    std::thread::sleep(Duration::from_millis(300));

    // Back: the node recovers by itself, within about a second of the
    // coordinator answering again (issue 32: a node that can't reach it
    // asks again about every 0.5 s, and a lost lease is claimed again
    // within a check interval).
    let restarting = Instant::now();
    coordinator.restart();
    let back = Instant::now();
    let ready_again = poll_until(
        &c,
        &server.url("/readyz"),
        StatusCode::OK,
        Duration::from_secs(30),
    );
    let resumed = ready_again.at.saturating_duration_since(back);
    // The gauge says what /readyz says. A coordinator just back on a loaded
    // machine may time one renewal out (CI saw readiness flap for a moment
    // right after /readyz said ready), so it is read until it agrees.
    let agreed = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = fetch(&c, &server.url("/metrics")).body;
        if metrics.contains("\nidmint_ready 1\n") {
            break;
        }
        assert!(Instant::now() < agreed, "{name}: {metrics}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Generous, for a loaded 2-core machine: the goal is 1 s. The private
    // Redis runs without persistence and comes back empty: a new epoch,
    // whose hold (lease TTL 2 s + window 1 s) a node whose lease ran out
    // meanwhile waits out before it claims again (it can't register again:
    // docs/design.md, "When the coordinator forgets").
    let hold = if matches!(service, Service::Redis) {
        Duration::from_secs(3)
    } else {
        Duration::ZERO
    };
    assert!(
        resumed < hold + Duration::from_secs(3),
        "{name}: ready again {resumed:?} after it answered again"
    );
    let ok_before = load.count(StatusCode::OK);
    load.wait_for(StatusCode::OK, ok_before + 20, Duration::from_secs(15));
    assert!(resp(&resp_addr, &["INCR", "sf"]).starts_with(':'));
    let answers = load.finish();

    // Every answer was IDs or a proper 503; the IDs only ever increased.
    let mut ids = Vec::new();
    let mut first_refusal = None;
    let mut last_served_while_stopping = None;
    let mut after_restart = 0;
    for a in &answers {
        if a.status == StatusCode::OK {
            let got = a.ids();
            assert!(
                first_refusal.is_none() || a.at > restarting,
                "{name}: a 200 while the coordinator was down, after a 503: {a:?}"
            );
            if a.at > stopping && first_refusal.is_none() {
                last_served_while_stopping = Some(a.at);
            }
            if a.at > restarting {
                after_restart += 1;
            }
            ids.extend(got);
        } else {
            assert!(a.at > stopping, "{name}: refused before the stop: {a:?}");
            assert_eq!(a.unavailable(), "mark_reached", "{name}");
            first_refusal.get_or_insert(a.at);
        }
    }
    assert!(
        crate::strictly_increasing(&ids),
        "{name}: IDs repeated or went back across the outage"
    );
    let last_served = last_served_while_stopping
        .unwrap_or_else(|| panic!("{name}: no ID between the stop and the lease's end"));
    assert!(after_restart >= 20, "{name}: {after_restart} answers after");
    let first_refusal = first_refusal.expect("refused while down");

    // The log: the loss and the recovery each a line naming the worker and
    // the lease's state, not a line per refused request.
    let log = log_once_it_has(&server, "worker lease held");
    let lost = lines_with(&log, "worker lease lost: not issuing snowflake IDs");
    let held = lines_with(&log, "worker lease held").len();
    for line in &lost {
        assert!(line.contains(" ERROR "), "{name}: {line}");
        assert!(
            line.contains("worker=") && line.contains("lease="),
            "{name}: {line}"
        );
    }
    let refused = answers.len()
        - answers
            .iter()
            .filter(|a| a.status == StatusCode::OK)
            .count();
    // A node that asks again soon enough may renew before its lease's
    // fence (a short outage): then its store was failing, and it says so.
    let failing = lines_with(&log, "worker store failing").len();
    assert!(!lost.is_empty() || failing > 0, "{name}: {log}");
    // The keeper retries (and says so) a few times a second while down;
    // a line per refused request would be hundreds a second.
    let outage = (ready_again.at - stopping).as_secs_f64();
    let bound = 20 + (8.0 * outage) as usize;
    assert!(
        lost.len() <= 4 && log.lines().count() <= bound,
        "{name}: {} lines of loss, {} in all (at most {bound}) for {refused} refusals: {log}",
        lost.len(),
        log.lines().count()
    );
    let lost = lost.len();
    eprintln!(
        "{name} outage: IDs for {:?} after the stop began, refused {:?} after it; \
         {refused} refusals; ready again {:?} after the restart began, {resumed:?} after \
         the {name} answered again; {} IDs; log lines: {lost} lost, {held} held, {} in all",
        last_served - stopping,
        first_refusal - stopping,
        ready_again.at - restarting,
        ids.len(),
        log.lines().count(),
    );
}

#[test]
fn serve_outage_etcd_lease_lost_is_503_then_recovers() {
    lease_lost_then_back(Service::Etcd, |endpoint| {
        format!(
            "registry = \"etcd\"\n[snowflake.etcd]\nendpoints = [\"{endpoint}\"]\n\
             lease_ttl = \"{LEASE_TTL}\"\n"
        )
    });
}

#[test]
fn serve_outage_redis_lease_lost_is_503_then_recovers() {
    lease_lost_then_back(Service::Redis, |url| {
        format!(
            "registry = \"redis\"\n[snowflake.redis]\nurl = \"{url}\"\nlease_ttl = \"{LEASE_TTL}\"\n"
        )
    });
}

#[test]
fn serve_outage_zookeeper_lease_lost_is_503_then_recovers() {
    lease_lost_then_back(Service::ZooKeeper, |connect| {
        format!(
            "registry = \"zookeeper\"\n[snowflake.zookeeper]\nconnect = \"{connect}\"\n\
             session_timeout = \"{LEASE_TTL}\"\n"
        )
    });
}

#[test]
fn serve_outage_postgres_registry_lease_lost_is_503_then_recovers() {
    lease_lost_then_back(Service::Postgres, |url| {
        format!(
            "registry = \"sql\"\n[snowflake.sql]\nurl = \"{url}\"\nlease_ttl = \"{LEASE_TTL}\"\n"
        )
    });
}

/// `GET /v1/admin/keys`'s entry for `key`.
fn key_status(c: &Client, server: &Served, key: &str) -> Value {
    let listed: Value = c
        .get(server.url("/v1/admin/keys"))
        .bearer_auth("t")
        .send()
        .unwrap()
        .json()
        .unwrap();
    listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == key)
        .cloned()
        .unwrap_or_else(|| panic!("no {key} in {listed}"))
}

fn number(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap()
}

#[test]
fn serve_outage_segment_store_down_serves_the_buffers_then_503() {
    let Some(pg) = PrivateService::start(Service::Postgres) else {
        return;
    };
    // A fixed step (max_step = step), so what is buffered is known exactly.
    let config = format!(
        "[server]\nadmin_token = \"t\"\n\n[segment]\nurl = \"{}\"\nmax_step = 100\n\n\
         [segment.keys.order]\nstep = 100\nstart = 1\n",
        pg.address()
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some(&config),
        &[],
        &["--resp-addr", "127.0.0.1:0"],
    );
    let resp_addr = server.resp_addr.clone().expect("RESP is on");
    let c = client();
    // A batch, then single IDs past the preload share of the segment in use.
    let mut issued = fetch(&c, &server.url("/v1/ids/order?count=150")).ids();
    for _ in 0..20 {
        issued.extend(fetch(&c, &server.url("/v1/ids/order")).ids());
    }
    assert_eq!(issued, (1..=170).collect::<Vec<_>>());

    // Wait for the preloader: the current segment and the next one buffered.
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        let status = key_status(&c, &server, "order");
        if status["next"].is_object() && status["loading"] == false {
            break status;
        }
        assert!(Instant::now() < deadline, "no next segment: {status}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let left = status["current"]["left"].as_u64().unwrap();
    let next = &status["next"];
    let next_len = number(&next["last"]) - number(&next["first"]) + 1;
    assert!(left > 0 && next_len == 100, "{status}");
    let buffered = left + next_len;

    pg.stop();
    // Exactly the buffered IDs come, in order, from both routes; then 503s
    // on both, each within the store's timeout (3 s), not after a hang.
    let routes = ["/v1/ids/order", "/api/segment/get/order"];
    let mut refused_on = None;
    let mut slowest = Duration::ZERO;
    for i in 0..buffered + 1 {
        let route = routes[i as usize % 2];
        let asked = Instant::now();
        let answer = fetch(&c, &server.url(route));
        if answer.status == StatusCode::OK {
            issued.extend(answer.ids());
        } else {
            slowest = asked.elapsed();
            assert_eq!(answer.unavailable(), "unavailable", "{answer:?}");
            refused_on = Some(i as usize % 2);
            break;
        }
    }
    let refused_on = refused_on.expect("a refusal once the buffers ran out");
    assert_eq!(issued, (1..=170 + buffered).collect::<Vec<_>>());
    let asked = Instant::now();
    let answer = fetch(&c, &server.url(routes[1 - refused_on]));
    slowest = slowest.max(asked.elapsed());
    assert_eq!(answer.unavailable(), "unavailable", "{answer:?}");
    assert!(answer.body.contains("order"), "{answer:?}");
    assert!(
        slowest < Duration::from_secs(5),
        "a refusal took {slowest:?}"
    );
    let reply = resp(&resp_addr, &["INCR", "order"]);
    assert!(reply.starts_with("-UNAVAILABLE "), "{reply}");
    // The worker lease is not the store's: the node stays ready and alive.
    assert_eq!(fetch(&c, &server.url("/readyz")).status, StatusCode::OK);
    assert_eq!(fetch(&c, &server.url("/healthz")).status, StatusCode::OK);

    // Back: IDs resume above everything issued.
    let restarting = Instant::now();
    pg.restart();
    let answer = poll_until(
        &c,
        &server.url("/v1/ids/order?count=10"),
        StatusCode::OK,
        Duration::from_secs(30),
    );
    let resumed_after = restarting.elapsed();
    let after = answer.ids();
    let max_before = *issued.last().unwrap();
    assert!(after[0] > max_before, "{after:?} after {max_before}");
    assert!(crate::strictly_increasing(&after));
    let reply = resp(&resp_addr, &["INCR", "order"]);
    let next: u64 = reply.strip_prefix(':').unwrap().parse().unwrap();
    assert!(next > after[after.len() - 1], "{reply}");

    // The log: each failed fetch is a line naming the key, the store and why.
    let log = server.log();
    let failed = lines_with(&log, "segment lease failed");
    assert!(!failed.is_empty(), "{log}");
    for line in &failed {
        assert!(
            line.contains(" WARN ") && line.contains("key=order") && line.contains("postgres"),
            "{line}"
        );
    }
    let failed = failed.len();
    eprintln!(
        "segment store outage: {buffered} buffered IDs served, then 503 (slowest refusal \
         {slowest:?}); IDs again {resumed_after:?} after the restart began; {failed} log \
         lines of failed leases"
    );
}
