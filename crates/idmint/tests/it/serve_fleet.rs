//! The fleet view end to end: three `idmint serve` processes on one etcd
//! list each other through `GET /v1/admin/fleet`, and the status page of one
//! of them draws the Fleet table in headless Chromium.
//!
//! etcd: the one `scripts/etcd start` left for the run (`IDMINT_TEST_ETCD_ENDPOINT`,
//! as `scripts/test` sets), else a private one started the same way
//! (`PrivateService`). Each test uses a cluster name of its own.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use idmint_testkit::{PrivateService, Service};
use reqwest::StatusCode;
use serde_json::Value;

use crate::serve::{Served, client, expect_error};
use crate::serve_status_page::Browser;

const TOKEN: &str = "fleet-admin-token";

/// Three servers on one etcd, and the etcd when it is private to the test.
struct Fleet {
    servers: Vec<Served>,
    _etcd: Option<PrivateService>,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// Starts three servers sharing an etcd cluster named after `test`;
    /// `None` (after a loud SKIPPED line) when etcd is not installed.
    fn start(test: &str) -> Option<Fleet> {
        let (endpoint, etcd) = match std::env::var("IDMINT_TEST_ETCD_ENDPOINT") {
            Ok(endpoint) => (endpoint, None),
            Err(_) => {
                let etcd = PrivateService::start(Service::Etcd)?;
                (etcd.address().to_owned(), Some(etcd))
            }
        };
        let unique = format!(
            "{test}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros()
        );
        let config = format!(
            r#"
[server]
admin_token = "{TOKEN}"

[snowflake]
registry = "etcd"

[snowflake.etcd]
endpoints = ["{endpoint}"]
cluster = "{unique}"
"#
        );
        let dir = tempfile::tempdir().unwrap();
        let servers = (0..3)
            .map(|i| Served::start(&dir.path().join(format!("node{i}")), Some(&config), &[]))
            .collect();
        Some(Fleet {
            servers,
            _etcd: etcd,
            _dir: dir,
        })
    }

    /// Each server's worker ID, from `/v1/admin/workers`.
    fn workers(&self) -> Vec<u64> {
        let c = client();
        self.servers
            .iter()
            .map(|s| {
                let v: Value = c
                    .get(s.url("/v1/admin/workers"))
                    .bearer_auth(TOKEN)
                    .send()
                    .unwrap()
                    .json()
                    .unwrap();
                v["workers"][0]["worker"].as_u64().unwrap()
            })
            .collect()
    }
}

/// The server's port (its `addr` is `127.0.0.1:PORT`).
fn port(server: &Served) -> u64 {
    server.addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// `/v1/admin/fleet` of `server` once it lists `n` nodes that reported (the
/// keeper reports with its first mark, then every 3 s).
fn fleet_of(server: &Served, n: usize) -> Value {
    let c = client();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = c
            .get(server.url("/v1/admin/fleet"))
            .bearer_auth(TOKEN)
            .send()
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().unwrap();
        let rows = body["fleet"].as_array().unwrap();
        if rows.len() == n && rows.iter().all(|r| r["reported"].is_string()) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet never listed {n} reporting nodes: {body}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn serve_three_nodes_on_one_etcd_list_each_other_in_the_fleet() {
    let Some(fleet) = Fleet::start("fleet-json") else {
        return;
    };
    let workers = fleet.workers();
    assert_eq!(
        workers.iter().collect::<BTreeSet<_>>().len(),
        3,
        "three distinct workers: {workers:?}"
    );
    let first = &fleet.servers[0];
    let body = fleet_of(first, 3);
    assert_eq!(body["registry"], "etcd");
    assert_eq!(body["worker"], workers[0]);
    assert!(
        body["offset_note"]
            .as_str()
            .unwrap()
            .contains("how long ago the node reported"),
        "{body}"
    );
    let rows = body["fleet"].as_array().unwrap();
    let listed: BTreeSet<u64> = rows.iter().map(|r| r["worker"].as_u64().unwrap()).collect();
    assert_eq!(listed, workers.iter().copied().collect(), "{body}");
    for (server, worker) in fleet.servers.iter().zip(&workers) {
        let row = rows.iter().find(|r| r["worker"] == *worker).unwrap();
        assert_eq!(row["address"], "127.0.0.1", "{row}");
        assert_eq!(row["port"].as_u64(), Some(port(server)), "{row}");
        assert!(row["host"].is_string(), "{row}");
        assert_eq!(row["live"], true, "{row}");
        // etcd's lease TTL is 10 s by default; TimeToLive counts whole seconds.
        let left = row["lease_left_ms"].as_u64().unwrap();
        assert!(left > 0 && left <= 10_000, "{row}");
        assert!(row["mark"].is_string(), "{row}");
        // Same machine, same clock: the offset is the report's age (reports
        // every 3 s) and no more.
        let offset = row["offset_ms"].as_f64().unwrap();
        assert!((-8_000.0..=1_000.0).contains(&offset), "{row}");
        assert_eq!(row["this_node"], *worker == workers[0], "{row}");
    }

    // Each node marks its own row.
    for (i, server) in fleet.servers.iter().enumerate().skip(1) {
        let body = fleet_of(server, 3);
        let mine: Vec<&Value> = body["fleet"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["this_node"] == true)
            .collect();
        assert_eq!(mine.len(), 1, "{body}");
        assert_eq!(mine[0]["worker"], workers[i], "{body}");
    }

    // One registry read per interval (2 s), shared: five requests in a row
    // see at most two reads (one interval may end between them).
    let reads: BTreeSet<String> = (0..5)
        .map(|_| fleet_of(first, 3)["read_at"].as_str().unwrap().to_owned())
        .collect();
    assert!(reads.len() <= 2, "{reads:?}");

    // Behind the admin token, like every admin route.
    let c = client();
    let response = c.get(first.url("/v1/admin/fleet")).send().unwrap();
    expect_error(response, StatusCode::UNAUTHORIZED, "unauthorized");
    let response = c
        .get(first.url("/v1/admin/fleet"))
        .bearer_auth("wrong")
        .send()
        .unwrap();
    expect_error(response, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[test]
fn serve_a_single_node_registry_lists_only_itself_and_no_token_means_no_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("[server]\nadmin_token = \"{TOKEN}\"\n\n[snowflake]\nworker = 5\n");
    let server = Served::start(&dir.path().join("data"), Some(&config), &[]);
    let body = fleet_of(&server, 1);
    assert_eq!(body["registry"], "file");
    let row = &body["fleet"][0];
    assert_eq!(row["worker"], 5, "{body}");
    assert_eq!(row["this_node"], true, "{body}");
    assert_eq!(row["lease_left_ms"], Value::Null, "no leases: {body}");
    assert_eq!(row["port"].as_u64(), Some(port(&server)), "{body}");

    let off = Served::start(&dir.path().join("off"), None, &[]);
    let response = client().get(off.url("/v1/admin/fleet")).send().unwrap();
    expect_error(response, StatusCode::FORBIDDEN, "admin_disabled");
}

#[test]
fn serve_status_page_shows_the_fleet_table_in_chromium() {
    if !Browser::available() {
        return;
    }
    let Some(fleet) = Fleet::start("fleet-page") else {
        return;
    };
    let workers = fleet.workers();
    let first = &fleet.servers[0];
    // All three have reported before the page opens.
    fleet_of(first, 3);
    let browser = Browser::open(&first.url("/"), (1280, 1400));
    let page = &browser.page;
    let asks = page.eval("document.getElementById('fleet-auth').hidden");
    assert_eq!(asks, "false", "without a token the page asks for one");

    // Type the admin token into the page's form, as an operator would: a
    // wrong one first, which the page says was refused.
    let submit = |token: &str| {
        page.eval(&format!(
            "(function () {{ document.getElementById('fleet-token').value = {token:?}; \
             document.getElementById('fleet-auth').requestSubmit(); return 'sent'; }})()"
        ))
    };
    submit("not-the-token");
    let message = "document.getElementById('fleet-message').textContent";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !page.eval(message).contains("refused") {
        assert!(Instant::now() < deadline, "{}", page.eval(message));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        page.eval("document.getElementById('fleet-auth').hidden"),
        "false"
    );
    submit(TOKEN);
    let rows_with_workers = "Array.from(document.querySelectorAll('#fleet tr'))\
        .filter(function (tr) { return tr.children.length === 6; }).length";
    let deadline = Instant::now() + Duration::from_secs(20);
    while page.eval(rows_with_workers) != "3" {
        assert!(
            Instant::now() < deadline,
            "the fleet table never showed three rows: {}",
            page.eval("document.getElementById('fleet-section').innerText")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // One page refresh later (every 2 s) the table is redrawn, not appended to.
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(page.eval(rows_with_workers), "3");

    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("serve_fleet")
        .join("status-page-fleet.png");
    page.eval("document.getElementById('fleet-section').scrollIntoView()");
    page.screenshot(&shot);
    let _ = writeln!(
        std::io::stderr(),
        "status page screenshot: {}",
        shot.display()
    );

    let highlighted = page.eval(
        "Array.from(document.querySelectorAll('#fleet tr.me'))\
         .map(function (tr) { return tr.children[1].textContent; }).join(',')",
    );
    assert_eq!(
        highlighted,
        workers[0].to_string(),
        "exactly this node's row is highlighted"
    );
    let tag = page.eval("document.querySelector('#fleet tr.me .tag').textContent");
    assert_eq!(tag, "this node");
    let table = page.eval("document.getElementById('fleet').innerText");
    for (server, worker) in fleet.servers.iter().zip(&workers) {
        assert!(
            table.contains(&format!("127.0.0.1:{})", port(server))),
            "{table}"
        );
        assert!(table.contains(&worker.to_string()), "{table}");
    }
    let message = page.eval("document.getElementById('fleet-message').textContent");
    assert_eq!(message, "", "no error shown: {message:?}");
    let meta = page.eval("document.getElementById('fleet-meta').textContent");
    assert!(meta.contains("etcd registry · 3 nodes"), "{meta:?}");
    let worker_cells: BTreeSet<String> = page
        .eval(
            "Array.from(document.querySelectorAll('#fleet tr'))\
             .map(function (tr) { return tr.children[1].textContent; }).join(',')",
        )
        .split(',')
        .map(str::to_owned)
        .collect();
    let expected: BTreeSet<String> = workers.iter().map(u64::to_string).collect();
    assert_eq!(worker_cells, expected);
}
