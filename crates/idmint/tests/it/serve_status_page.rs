//! The status page in a real browser: headless Chromium (Debian's `chromium`,
//! installed by `scripts/deps`) loads `GET /`, shows the worker ID, and its
//! script redraws the throughput chart from `/v1/status` while IDs are issued.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::serve::{Served, client, get};

const CONFIG: &str = r#"
[snowflake]
worker = 7

[keys.sf]
strategy = "snowflake"
"#;

/// The text of the element with id `id` in `html`.
fn text_of(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let from = at + html[at..].find('>')? + 1;
    Some(html[from..from + html[from..].find('<')?].to_owned())
}

/// The chart's highest point: the rate that maps to the smallest y.
fn chart_has_a_rise(points: &str) -> bool {
    points
        .split_whitespace()
        .filter_map(|p| p.split(',').nth(1)?.parse::<f64>().ok())
        .any(|y| y < 134.0)
}

#[test]
fn serve_status_page_renders_in_chromium_and_its_chart_follows_the_load() {
    if !Browser::available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(CONFIG), &[]);
    let c = client();

    let (status, page) = get(&c, &server.url("/"));
    assert!(status.is_success());
    assert_eq!(text_of(&page, "worker-id").as_deref(), Some("7"));

    // The browser opens the page while nothing has been issued yet, so the
    // status embedded in the page has no throughput; then IDs are issued. A
    // rise in the chart can only come from the script's refreshes (every 2 s,
    // from /v1/status, which the server samples once a second).
    let browser = Browser::open(&server.url("/"), (1280, 900));
    let page = &browser.page;
    let first = page.eval("document.getElementById('chart-line').getAttribute('points')");
    assert!(!chart_has_a_rise(&first), "no load yet: {first:?}");
    let worker = page.eval("document.getElementById('worker-id').textContent");
    assert_eq!(worker, "7");

    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, url) = (stop.clone(), server.url("/v1/ids/sf?count=1000"));
        std::thread::spawn(move || {
            let c = client();
            while !stop.load(Ordering::Relaxed) {
                let _ = c.get(&url).send();
            }
        })
    };
    let mut points = String::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        points = page.eval("document.getElementById('chart-line').getAttribute('points')");
        if chart_has_a_rise(&points) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let updated = page.eval("document.getElementById('updated').textContent");
    drop(browser);
    assert!(
        chart_has_a_rise(&points),
        "the chart was redrawn with the load in it within 10 s: {points:?}"
    );
    assert!(updated.starts_with("updated "), "{updated:?}");
}

/// A headless Chromium (Debian's `chromium`) showing one page, driven over
/// the DevTools protocol; killed on drop.
pub(crate) struct Browser {
    child: std::process::Child,
    _profile: tempfile::TempDir,
    /// The page it shows.
    pub page: DevTools,
}

impl Browser {
    /// Whether Chromium is installed; under `CI=true` a missing one fails the
    /// test, elsewhere it prints a loud SKIPPED line.
    pub(crate) fn available() -> bool {
        let has_chromium = Command::new("chromium")
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success());
        idmint_testkit::require_service("chromium (Debian's chromium package)", has_chromium)
    }

    /// Opens `url` in a window of `size` (width, height) and waits until the
    /// status page has loaded.
    pub(crate) fn open(url: &str, size: (u32, u32)) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--window-size={},{}", size.0, size.1))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run chromium");
        let page = DevTools::attach(&mut child, url);
        Browser {
            child,
            _profile: profile,
            page,
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A page target of a headless Chromium, driven over the DevTools protocol.
pub(crate) struct DevTools {
    socket: std::cell::RefCell<tungstenite::WebSocket<std::net::TcpStream>>,
    next_id: std::cell::Cell<u64>,
}

impl DevTools {
    /// Reads the DevTools port from Chromium's stderr, finds the page showing
    /// `url`, and connects to it.
    fn attach(browser: &mut std::process::Child, url: &str) -> DevTools {
        use std::io::BufRead;
        let stderr = browser.stderr.take().unwrap();
        let mut lines = std::io::BufReader::new(stderr).lines();
        let endpoint = loop {
            let line = lines
                .next()
                .expect("chromium printed its DevTools address")
                .unwrap();
            if let Some(rest) = line.strip_prefix("DevTools listening on ws://") {
                break rest.split('/').next().unwrap().to_owned();
            }
        };
        // Keep draining stderr so Chromium never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let c = client();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let ws_url = loop {
            let targets: serde_json::Value = c
                .get(format!("http://{endpoint}/json/list"))
                .send()
                .unwrap()
                .json()
                .unwrap();
            let found = targets.as_array().unwrap().iter().find_map(|t| {
                (t["type"] == "page" && t["url"].as_str() == Some(url))
                    .then(|| t["webSocketDebuggerUrl"].as_str().unwrap().to_owned())
            });
            if let Some(ws) = found {
                break ws;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no page for {url}: {targets}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let (socket, _) = tungstenite::connect(ws_url.as_str()).expect("DevTools WebSocket");
        let tcp = match socket.get_ref() {
            tungstenite::stream::MaybeTlsStream::Plain(tcp) => tcp.try_clone().unwrap(),
            _ => unreachable!("loopback is plain TCP"),
        };
        let socket =
            tungstenite::WebSocket::from_raw_socket(tcp, tungstenite::protocol::Role::Client, None);
        let page = DevTools {
            socket: std::cell::RefCell::new(socket),
            next_id: std::cell::Cell::new(1),
        };
        // Wait until the status page itself (not the blank document before
        // navigation commits) has loaded and its script has run.
        let loaded = format!(
            "location.href === {url:?} && document.readyState === 'complete' \
             && document.getElementById('worker-id') !== null"
        );
        for _ in 0..100 {
            if page.eval(&loaded) == "true" {
                return page;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the page did not finish loading");
    }

    /// Evaluates `expression` in the page; its value as a string.
    pub(crate) fn eval(&self, expression: &str) -> String {
        let result = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": format!("String({expression})"), "returnByValue": true}),
        );
        result["result"]["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Writes a PNG of the whole page (beyond the window too) to `path`.
    pub(crate) fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine as _;
        let result = self.call(
            "Page.captureScreenshot",
            serde_json::json!({"format": "png", "captureBeyondViewport": true}),
        );
        let data = result["data"].as_str().expect("a screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64 PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Calls a DevTools method; its `result`.
    fn call(&self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let request = serde_json::json!({"id": id, "method": method, "params": params});
        let mut socket = self.socket.borrow_mut();
        socket
            .send(tungstenite::Message::text(request.to_string()))
            .unwrap();
        loop {
            let message = socket.read().expect("DevTools answers");
            let Ok(text) = message.to_text() else {
                continue;
            };
            let reply: serde_json::Value = serde_json::from_str(text).unwrap();
            if reply["id"] == id {
                assert!(reply["error"].is_null(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }
}
