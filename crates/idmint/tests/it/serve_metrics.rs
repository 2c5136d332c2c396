//! `idmint serve`'s observability: `GET /metrics` (Prometheus text), the live
//! status page `GET /` and its data `GET /v1/status`, on the real binary.

use std::collections::BTreeMap;

use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::Value;

use crate::serve::{Served, client, get};

const CONFIG: &str = r#"
# Names declared nowhere are segment keys here: these tests ask for
# unknown segment keys.
[server]
undeclared_keys = "segment"

[snowflake]
worker = 7

[segment.keys.order]
step = 50
start = 1000

[keys.sf]
strategy = "snowflake"
"#;

/// One sample line of the text format: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the Prometheus text exposition format (0.0.4) strictly enough to
/// fail on anything malformed: every line is a `# HELP`/`# TYPE` comment or
/// `name{label="value",...} value`.
#[track_caller]
fn parse_prometheus(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let kind = words.next().unwrap();
            let name = words.next().unwrap_or("");
            assert!(
                matches!(kind, "HELP" | "TYPE") && is_name(name),
                "bad comment: {line:?}"
            );
            if kind == "TYPE" {
                let t = words.next().unwrap_or("");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                    "bad type: {line:?}"
                );
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a value after the series");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line:?}"));
                (name, parse_labels(body, line))
            }
        };
        assert!(is_name(name), "bad metric name: {line:?}");
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    samples
}

#[track_caller]
fn parse_labels(mut body: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    while !body.is_empty() {
        let (name, rest) = body
            .split_once("=\"")
            .unwrap_or_else(|| panic!("bad label: {line:?}"));
        assert!(is_name(name), "bad label name: {line:?}");
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => panic!("bad escape: {line:?}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("unclosed label value: {line:?}"),
            }
        };
        labels.insert(name.to_owned(), value);
        body = &rest[end + 1..];
        body = body.strip_prefix(',').unwrap_or(body);
    }
    labels
}

fn scrape(c: &Client, server: &Served) -> (String, Vec<Sample>) {
    let r = c.get(server.url("/metrics")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = r.text().unwrap();
    let samples = parse_prometheus(&text);
    (text, samples)
}

/// The value of the sample `name` whose labels include `labels`, if any.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

#[test]
fn serve_metrics_are_prometheus_text_and_count_issued_ids_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(CONFIG), &[]);
    let c = client();

    let (text, before) = scrape(&c, &server);
    assert_eq!(
        value(&before, "idmint_worker_id", &[("registry", "file")]),
        Some(7.0)
    );
    assert_eq!(
        value(&before, "idmint_worker_lease_held", &[("registry", "file")]),
        Some(1.0)
    );
    assert_eq!(value(&before, "idmint_ready", &[]), Some(1.0));
    assert!(value(&before, "idmint_clock_drift_seconds", &[]).is_some_and(|d| d.abs() < 60.0));
    let lead = value(&before, "idmint_snowflake_mark_lead_seconds", &[]).unwrap();
    assert!(lead > -60.0 && lead < 60.0, "{lead}");
    assert!(
        value(
            &before,
            "idmint_layout_seconds_left",
            &[("layout", "twitter")]
        )
        .unwrap()
            > 1e8
    );
    for name in [
        "idmint_snowflake_sequence_exhaustion_waits_total",
        "idmint_snowflake_clock_behind_total",
    ] {
        assert!(
            value(&before, name, &[]).is_some(),
            "{name} missing: {text}"
        );
    }
    let sf = [("key", "sf"), ("strategy", "snowflake")];
    let order = [("key", "order"), ("strategy", "segment")];
    let sf_before = value(&before, "idmint_ids_issued_total", &sf).unwrap_or(0.0);
    let order_before = value(&before, "idmint_ids_issued_total", &order).unwrap_or(0.0);

    // 100 snowflake IDs in one batch, 100 segment IDs in one batch and one by one.
    let (status, body) = get(&c, &server.url("/v1/ids/sf?count=100"));
    assert_eq!((status, body.lines().count()), (StatusCode::OK, 100));
    let (status, body) = get(&c, &server.url("/v1/ids/order?count=60"));
    assert_eq!((status, body.lines().count()), (StatusCode::OK, 60));
    for _ in 0..40 {
        let (status, _) = get(&c, &server.url("/api/segment/get/order"));
        assert_eq!(status, StatusCode::OK);
    }
    // A key nobody configured shares one series; a failure counts nothing.
    assert_eq!(
        get(&c, &server.url("/api/snowflake/get/whatever-1")).0,
        StatusCode::OK
    );
    assert_eq!(
        get(&c, &server.url("/v1/ids/no-such-key?count=5")).0,
        StatusCode::NOT_FOUND
    );

    let (text, after) = scrape(&c, &server);
    assert!(
        text.contains("# TYPE idmint_ids_issued_total counter"),
        "{text}"
    );
    assert_eq!(
        value(&after, "idmint_ids_issued_total", &sf).unwrap() - sf_before,
        100.0,
        "{text}"
    );
    assert_eq!(
        value(&after, "idmint_ids_issued_total", &order).unwrap() - order_before,
        100.0,
        "{text}"
    );
    assert_eq!(
        value(
            &after,
            "idmint_ids_issued_total",
            &[("key", "*"), ("strategy", "snowflake")]
        ),
        Some(1.0)
    );
    assert!(!text.contains("no-such-key"), "{text}");
    assert!(!text.contains("whatever-1"), "{text}");

    // Latency: a real histogram per route and status class.
    assert!(
        text.contains("# TYPE idmint_http_request_duration_seconds histogram"),
        "{text}"
    );
    let ids_ok = [("route", "/v1/ids/{key}"), ("status", "2xx")];
    assert_eq!(
        value(
            &after,
            "idmint_http_request_duration_seconds_count",
            &ids_ok
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &after,
            "idmint_http_request_duration_seconds_bucket",
            &[
                ("route", "/v1/ids/{key}"),
                ("status", "2xx"),
                ("le", "+Inf")
            ]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &after,
            "idmint_http_request_duration_seconds_count",
            &[("route", "/v1/ids/{key}"), ("status", "4xx")]
        ),
        Some(1.0)
    );
    assert!(
        value(
            &after,
            "idmint_http_request_duration_seconds_count",
            &[("route", "/api/segment/get/{key}"), ("status", "2xx")]
        )
        .is_some_and(|n| n >= 40.0)
    );

    // Segment gauges for the key in use: its buffers and step.
    let left = value(&after, "idmint_segment_ids_left", &[("key", "order")]).unwrap();
    assert!(left >= 1.0, "{text}");
    assert!(
        value(&after, "idmint_segment_step", &[("key", "order")]).unwrap() >= 50.0,
        "{text}"
    );
}

#[test]
fn serve_status_page_and_json_show_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(CONFIG), &[]);
    let c = client();
    assert_eq!(
        get(&c, &server.url("/v1/ids/order?count=10")).0,
        StatusCode::OK
    );
    assert_eq!(get(&c, &server.url("/v1/ids/sf?count=5")).0, StatusCode::OK);

    let r = c.get(server.url("/")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let html = r.text().unwrap();
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(html.contains(r#"<dd id="w-id">7</dd>"#), "{html}");
    assert!(html.contains("fetch(\"/v1/status\""), "{html}");
    // No external assets.
    assert!(!html.contains("src=\"http"), "{html}");
    assert!(!html.contains("href=\"http"), "{html}");
    // The embedded first status is the JSON `/v1/status` serves.
    let embedded = html
        .split(r#"<script id="initial-status" type="application/json">"#)
        .nth(1)
        .and_then(|rest| rest.split("</script>").next())
        .unwrap();
    let embedded: Value = serde_json::from_str(embedded).unwrap();
    assert_eq!(embedded["worker"]["id"], 7);

    let s: Value = c
        .get(server.url("/v1/status"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert!(s["node"].as_str().unwrap().contains("127.0.0.1:"), "{s}");
    assert!(s["uptime_seconds"].as_f64().is_some());
    let w = &s["worker"];
    assert_eq!(w["id"], 7);
    assert_eq!(w["registry"], "file");
    assert_eq!(w["lease"], "held");
    assert_eq!(w["held"], true);
    assert_eq!(w["ready"], true);
    assert!(s["mark"]["mark"].as_str().unwrap().ends_with('Z'), "{s}");
    assert!(
        s["mark"]["persisted"].as_str().unwrap().ends_with('Z'),
        "{s}"
    );
    assert!(s["clock"]["drift_ms"].as_f64().unwrap().abs() < 60_000.0);
    let layout = &s["layout"];
    assert_eq!(layout["name"], "twitter");
    assert!(
        layout["runs_out_at"].as_str().unwrap().starts_with("2080-"),
        "{s}"
    );
    assert_eq!(layout["runs_out_within_a_year"], false);

    let segments = s["segments"].as_array().unwrap();
    let order = segments.iter().find(|k| k["key"] == "order").unwrap();
    assert_eq!(order["current"]["first"], "1000", "{order}");
    assert!(order["current"]["left"].is_string(), "{order}");
    assert!(order["ids_left"].as_str().unwrap().parse::<u64>().unwrap() >= 1);
    assert!(order["step"].as_u64().unwrap() >= 50);

    assert_eq!(s["issued"]["total"], "15", "{s}");
    assert!(s["throughput"]["ids_per_second"].as_f64().is_some());
    assert!(s["throughput"]["history"].is_array());
}

#[test]
fn serve_status_warns_when_the_layout_runs_out_within_a_year() {
    // 35 bits of milliseconds (398 days), with the epoch set so they end in 100 days.
    let span_ms: i64 = 1 << 35;
    let epoch = jiff::Timestamp::from_millisecond(
        jiff::Timestamp::now().as_millisecond() - span_ms + 100 * 86_400_000,
    )
    .unwrap();
    let config = format!("[snowflake]\nlayout = \"time=35,node=10,sequence=12,epoch={epoch}\"\n");
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(&config), &[]);
    let c = client();
    let s: Value = c
        .get(server.url("/v1/status"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(s["layout"]["runs_out_within_a_year"], true, "{s}");
    let days = s["layout"]["days_left"].as_f64().unwrap();
    assert!((98.0..=100.0).contains(&days), "{days}");
    let (status, html) = get(&c, &server.url("/"));
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("runs out on"),
        "the page has the warning text"
    );
}
