//! `idmint serve --grpc-addr`: the gRPC surface of the real binary, driven by
//! the tonic client generated from the same proto (`idmint_server::grpc::proto`):
//! every RPC, every error path next to what HTTP answers for the same input,
//! streams (ends, cancels, backpressure, shutdown), concurrent clients, and
//! `idmint bench --target grpc://`.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use idmint_server::grpc::proto::id_service_client::IdServiceClient;
use idmint_server::grpc::proto::{DecodeRequest, GetIdsRequest, GetIdsResponse, StreamIdsRequest};
use idmint_server::grpc::{ERROR_CODE_METADATA, RETRY_AFTER_METADATA};
use reqwest::StatusCode;
use serde_json::Value;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status, Streaming};

use crate::serve::{OBFUSCATION_KEY, Served, client, get, spawn_with_args};

const KEYS: &str = r#"
[server]
max_count = 1000
# Names declared nowhere are segment keys here: these tests ask for
# unknown segment keys.
undeclared_keys = "segment"

[segment.keys.order]
step = 100
start = 1000

[keys.sf]
strategy = "snowflake"

[keys.bp]
strategy = "snowflake"

[keys.u4]
strategy = "uuid4"

[keys.u7]
strategy = "uuid7"

[keys.pub]
strategy = "snowflake"
public = true

[keys.locked]
strategy = "snowflake"
token = "grpc-s3cret"

[obfuscation]
format = "base32"
"#;

const ADMIN_TOKEN: &str = "admin-s3cret";

/// A server with the gRPC listener on a free port, `KEYS` configured.
fn start(data_dir: &Path) -> Served {
    Served::start_with_args(
        data_dir,
        Some(KEYS),
        &[
            ("IDMINT_OBFUSCATION_KEY", OBFUSCATION_KEY),
            ("IDMINT_ADMIN_TOKEN", ADMIN_TOKEN),
        ],
        &["--grpc-addr", "127.0.0.1:0"],
    )
}

/// The gRPC address the server logged (`listening for gRPC ... addr=ADDR`).
pub(crate) fn grpc_addr(server: &Served) -> String {
    let log = server.log();
    log.lines()
        .filter(|l| l.contains("listening for gRPC"))
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("addr=")))
        .unwrap_or_else(|| panic!("no gRPC address in the log: {log}"))
        .to_owned()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A client on its own HTTP/2 connection.
async fn connect(addr: &str) -> IdServiceClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    IdServiceClient::new(channel).max_decoding_message_size(64 << 20)
}

fn ids_request(key: &str, count: u64) -> GetIdsRequest {
    GetIdsRequest {
        key: key.to_owned(),
        count,
    }
}

fn stream_request(key: &str, count_per_message: u64, total: u64) -> StreamIdsRequest {
    StreamIdsRequest {
        key: key.to_owned(),
        count_per_message,
        total,
    }
}

/// `request` with `authorization: Bearer <token>`.
fn with_token<T>(request: T, token: &str) -> Request<T> {
    let mut request = Request::new(request);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

async fn get_ids(c: &mut IdServiceClient<Channel>, key: &str, count: u64) -> GetIdsResponse {
    c.get_ids(ids_request(key, count))
        .await
        .unwrap()
        .into_inner()
}

/// Asserts a failed call: its gRPC code and the stable code in the metadata;
/// returns the stable code.
#[track_caller]
fn expect_status<T: std::fmt::Debug>(result: Result<T, Status>, code: Code) -> String {
    let status = result.expect_err("a failed call");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(!status.message().is_empty(), "{status:?}");
    status
        .metadata()
        .get(ERROR_CODE_METADATA)
        .unwrap_or_else(|| panic!("no {ERROR_CODE_METADATA}: {status:?}"))
        .to_str()
        .unwrap()
        .to_owned()
}

/// The error code HTTP answers for `GET /v1/ids/{key}?count=N`.
fn http_error_code(server: &Served, path: &str) -> String {
    let (status, body) = get(&client(), &server.url(path));
    assert!(status.is_client_error(), "{path}: {status} {body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    body["error"]["code"].as_str().unwrap().to_owned()
}

/// Reads a stream to its end: the messages, or the status that ended it.
async fn drain(stream: &mut Streaming<GetIdsResponse>) -> (Vec<GetIdsResponse>, Option<Status>) {
    let mut messages = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(m)) => messages.push(m),
            Ok(None) => return (messages, None),
            Err(status) => return (messages, Some(status)),
        }
    }
}

/// A metric's value from `GET /metrics`: the first sample whose name is
/// `name` and whose labels include every one of `labels` (`key="sf"`).
fn metric(server: &Served, name: &str, labels: &[&str]) -> Option<f64> {
    let (status, text) = get(&client(), &server.url("/metrics"));
    assert_eq!(status, StatusCode::OK);
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
}

/// Polls `read` until it gives the same value twice, `gap` apart (at most
/// 30 s); returns that value.
#[track_caller]
fn settled(gap: Duration, mut read: impl FnMut() -> f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = read();
    loop {
        std::thread::sleep(gap);
        let now = read();
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "still moving after 30 s: {now}");
        last = now;
    }
}

/// Polls `read` (at most 30 s) until it gives `want`.
#[track_caller]
fn reaches(want: f64, mut read: impl FnMut() -> f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = read();
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{now}, not {want}, after 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_grpc_address_is_logged_and_in_the_ready_file() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, ready, log) = spawn_with_args(
        &dir.path().join("data"),
        None,
        &[],
        &["--grpc-addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0"],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        match std::fs::read_to_string(&ready) {
            Ok(text) if text.ends_with('\n') => break text,
            _ => {
                assert!(child.try_wait().unwrap().is_none(), "exited before serving");
                assert!(Instant::now() < deadline, "not serving after 60 s");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let grpc = lines[1..]
        .iter()
        .find_map(|l| l.strip_prefix("grpc="))
        .unwrap_or_else(|| panic!("no grpc= line: {text}"));
    let addr: std::net::SocketAddr = grpc.parse().unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    assert!(lines[1..].iter().any(|l| l.starts_with("resp=")), "{text}");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("listening for gRPC") && l.contains(&format!("addr={grpc}"))),
        "{log}"
    );
}

#[test]
fn serve_grpc_get_ids_issues_each_keys_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let rt = runtime();
    let mut c = rt.block_on(connect(&grpc_addr(&server)));

    // Segment: dense and increasing, shared with HTTP's allocator.
    let first = rt.block_on(get_ids(&mut c, "order", 5));
    assert_eq!(
        (first.key.as_str(), first.strategy.as_str(), first.public),
        ("order", "segment", false)
    );
    assert_eq!(first.ids, [1000, 1001, 1002, 1003, 1004]);
    assert!(first.public_ids.is_empty() && first.uuids.is_empty());
    assert_eq!(
        get(&client(), &server.url("/api/segment/get/order")).1,
        "1005"
    );
    assert_eq!(rt.block_on(get_ids(&mut c, "order", 1)).ids, [1006]);

    // Snowflake: one, then a full batch, strictly increasing, below 2^63.
    let one = rt.block_on(get_ids(&mut c, "sf", 1));
    assert_eq!(one.strategy, "snowflake");
    assert_eq!(one.ids.len(), 1);
    let batch = rt.block_on(get_ids(&mut c, "sf", 1000)).ids;
    assert_eq!(batch.len(), 1000);
    assert!(crate::strictly_increasing(&batch) && batch[0] > one.ids[0]);
    assert!(batch[999] < 1 << 63);

    // UUIDs: 16 bytes each, the version in the 13th hex digit, no integers.
    for (key, version) in [("u4", 4), ("u7", 7)] {
        let r = rt.block_on(get_ids(&mut c, key, 100));
        assert_eq!(r.strategy, key.replace('u', "uuid"));
        assert!(r.ids.is_empty() && r.public_ids.is_empty());
        assert_eq!(r.uuids.len(), 100);
        let uuids: HashSet<u128> = r
            .uuids
            .iter()
            .map(|b| u128::from_be_bytes(b.as_slice().try_into().unwrap()))
            .collect();
        assert_eq!(uuids.len(), 100);
        assert!(uuids.iter().all(|u| (u >> 76) & 0xf == version), "{key}");
    }

    // Public: obfuscated integers, and the same IDs in the configured text
    // form (Crockford base32), index for index.
    let public = rt.block_on(get_ids(&mut c, "pub", 1000));
    assert!(public.public);
    assert_eq!(public.ids.len(), 1000);
    assert_eq!(public.ids.iter().collect::<HashSet<_>>().len(), 1000);
    assert!(!crate::strictly_increasing(&public.ids));
    assert_eq!(public.public_ids.len(), 1000);
    for (id, text) in public.ids.iter().zip(&public.public_ids) {
        assert_eq!(crockford::decode(text).unwrap(), *id, "{text}");
    }
    // The internal ID behind one is this node's snowflake, of now.
    let revealed: Value = client()
        .post(server.url("/v1/admin/reveal"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"id": public.public_ids[0]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let internal: u64 = revealed["id"].as_str().unwrap().parse().unwrap();
    let decoded = rt
        .block_on(c.decode(DecodeRequest {
            id: internal,
            ..Default::default()
        }))
        .unwrap()
        .into_inner();
    assert_eq!(decoded.worker, 0);
    assert!(
        (jiff::Timestamp::now().as_millisecond() - decoded.unix_ms).abs() < 60_000,
        "{decoded:?}"
    );

    // Every ID counted, as for HTTP.
    let issued = metric(&server, "idmint_ids_issued_total", &["key=\"sf\""]).unwrap();
    assert_eq!(issued, 1001.0);
    let calls = metric(
        &server,
        "idmint_grpc_request_duration_seconds_count",
        &["method=\"GetIds\"", "code=\"ok\""],
    )
    .unwrap();
    assert_eq!(calls, 7.0);
}

#[test]
fn serve_grpc_decode_answers_what_http_answers() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let rt = runtime();
    let mut c = rt.block_on(connect(&grpc_addr(&server)));
    let ids = rt.block_on(get_ids(&mut c, "sf", 3)).ids;
    for id in ids.into_iter().chain([0, 1, (1 << 63) - 1]) {
        let d = rt
            .block_on(c.decode(DecodeRequest {
                id,
                ..Default::default()
            }))
            .unwrap()
            .into_inner();
        let (status, body) = get(&client(), &server.url(&format!("/v1/decode/{id}")));
        assert_eq!(status, StatusCode::OK, "{body}");
        let h: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(h["id"], d.id.to_string());
        assert_eq!(h["layout"], d.layout);
        assert_eq!(h["time"], d.time);
        assert_eq!(h["unix_ms"], d.unix_ms);
        assert_eq!(h["tick"], d.tick);
        assert_eq!(h["datacenter"], d.datacenter);
        assert_eq!(h["worker"], d.worker);
        assert_eq!(h["rollback"], d.rollback);
        assert_eq!(h["sequence"], d.sequence);
    }
    // Not IDs: above 2^63 - 1.
    for id in [1 << 63, u64::MAX] {
        let code = expect_status(
            rt.block_on(c.decode(DecodeRequest {
                id,
                ..Default::default()
            })),
            Code::InvalidArgument,
        );
        assert_eq!(code, "invalid_id");
        assert_eq!(code, http_error_code(&server, &format!("/v1/decode/{id}")));
    }
}

/// gRPC `Decode` takes the key the ID came from, as `/v1/decode/{id}?key=`
/// does: a monotonic key's IDs are read with the oracle's `tso` layout.
#[test]
fn serve_grpc_decode_reads_a_keys_ids_with_its_layout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some("[keys.seq]\nstrategy = \"monotonic\"\n"),
        &[],
        &["--grpc-addr", "127.0.0.1:0"],
    );
    let rt = runtime();
    let mut c = rt.block_on(connect(&grpc_addr(&server)));
    let id = rt.block_on(get_ids(&mut c, "seq", 1)).ids[0];
    let with_key = rt
        .block_on(c.decode(DecodeRequest {
            id,
            key: "seq".to_owned(),
        }))
        .unwrap()
        .into_inner();
    assert_eq!(with_key.layout, "tso");
    assert!(
        (jiff::Timestamp::now().as_millisecond() - with_key.unix_ms).abs() < 60_000,
        "{with_key:?}"
    );
    let (status, body) = get(&client(), &server.url(&format!("/v1/decode/{id}?key=seq")));
    assert_eq!(status, StatusCode::OK, "{body}");
    let h: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (h["layout"].as_str(), h["unix_ms"].as_i64()),
        (Some("tso"), Some(with_key.unix_ms))
    );
    // Without the key: the snowflake layout, as over HTTP.
    let plain = rt
        .block_on(c.decode(DecodeRequest {
            id,
            ..Default::default()
        }))
        .unwrap()
        .into_inner();
    assert_eq!(plain.layout, "twitter");
    // A malformed key is refused as over HTTP.
    let code = expect_status(
        rt.block_on(c.decode(DecodeRequest {
            id,
            key: "no such/key".to_owned(),
        })),
        Code::InvalidArgument,
    );
    assert_eq!(
        code,
        http_error_code(&server, &format!("/v1/decode/{id}?key=no%20such%2Fkey"))
    );
}

#[test]
fn serve_grpc_errors_carry_the_http_apis_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let rt = runtime();
    let mut c = rt.block_on(connect(&grpc_addr(&server)));

    for (key, count, grpc_code, path) in [
        ("sf", 0, Code::InvalidArgument, "/v1/ids/sf?count=0"),
        ("sf", 1001, Code::InvalidArgument, "/v1/ids/sf?count=1001"),
        (
            "order",
            1_000_000_000_000,
            Code::InvalidArgument,
            "/v1/ids/order?count=1000000000000",
        ),
        ("nope", 1, Code::NotFound, "/v1/ids/nope"),
        ("bad key!", 1, Code::InvalidArgument, "/v1/ids/bad%20key!"),
        ("", 1, Code::InvalidArgument, "/v1/ids/%20"),
        ("locked", 1, Code::Unauthenticated, "/v1/ids/locked"),
    ] {
        let result = rt.block_on(c.get_ids(ids_request(key, count)));
        let code = expect_status(result, grpc_code);
        assert_eq!(code, http_error_code(&server, path), "{key:?} {count}");
        // The same checks guard a stream, before it starts.
        let result = rt.block_on(c.stream_ids(stream_request(key, count, 0)));
        assert_eq!(expect_status(result, grpc_code), code, "{key:?} {count}");
    }
    let status = rt.block_on(c.get_ids(ids_request("sf", 1001))).unwrap_err();
    assert!(status.message().contains("1..=1000"), "{status:?}");
    assert!(status.metadata().get(RETRY_AFTER_METADATA).is_none());

    // A key's token: missing or wrong is refused, the right one served.
    let wrong = rt.block_on(c.get_ids(with_token(ids_request("locked", 1), "nope")));
    assert_eq!(expect_status(wrong, Code::Unauthenticated), "unauthorized");
    let wrong = rt.block_on(c.stream_ids(with_token(stream_request("locked", 1, 1), "x")));
    assert_eq!(expect_status(wrong, Code::Unauthenticated), "unauthorized");
    let right = rt
        .block_on(c.get_ids(with_token(ids_request("locked", 10), "grpc-s3cret")))
        .unwrap()
        .into_inner();
    assert_eq!(right.ids.len(), 10);
    let mut stream = rt
        .block_on(c.stream_ids(with_token(stream_request("locked", 5, 12), "grpc-s3cret")))
        .unwrap()
        .into_inner();
    let (messages, end) = rt.block_on(drain(&mut stream));
    assert!(end.is_none(), "{end:?}");
    assert_eq!(
        messages.iter().map(|m| m.ids.len()).collect::<Vec<_>>(),
        [5, 5, 2]
    );
    // A key without a token ignores one.
    assert_eq!(
        rt.block_on(c.get_ids(with_token(ids_request("sf", 1), "whatever")))
            .unwrap()
            .into_inner()
            .ids
            .len(),
        1
    );

    // Failures issued nothing, and the token never shows in the log.
    assert_eq!(
        metric(&server, "idmint_ids_issued_total", &["key=\"locked\""]),
        Some(22.0)
    );
    assert!(!server.log().contains("grpc-s3cret"));
    let failed = metric(
        &server,
        "idmint_grpc_request_duration_seconds_count",
        &["method=\"GetIds\"", "code=\"unauthenticated\""],
    );
    assert_eq!(failed, Some(2.0));
}

#[test]
fn serve_grpc_streams_end_after_total_with_increasing_ids() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let rt = runtime();
    let mut c = rt.block_on(connect(&grpc_addr(&server)));

    for (key, per, total, sizes) in [
        ("sf", 1000, 10_000, vec![1000; 10]),
        ("sf", 1000, 2500, vec![1000, 1000, 500]),
        ("order", 7, 20, vec![7, 7, 6]),
        ("sf", 1000, 1, vec![1]),
    ] {
        let mut stream = rt
            .block_on(c.stream_ids(stream_request(key, per, total)))
            .unwrap()
            .into_inner();
        let (messages, end) = rt.block_on(drain(&mut stream));
        assert!(end.is_none(), "{end:?}");
        assert_eq!(
            messages.iter().map(|m| m.ids.len()).collect::<Vec<_>>(),
            sizes,
            "{key} {per} {total}"
        );
        assert!(messages.iter().all(|m| m.key == key && !m.public));
        let ids: Vec<u64> = messages.into_iter().flat_map(|m| m.ids).collect();
        assert!(crate::strictly_increasing(&ids), "{key} {per} {total}");
    }
    // A stream of UUIDs.
    let mut stream = rt
        .block_on(c.stream_ids(stream_request("u7", 50, 120)))
        .unwrap()
        .into_inner();
    let (messages, end) = rt.block_on(drain(&mut stream));
    assert!(end.is_none(), "{end:?}");
    let uuids: HashSet<Vec<u8>> = messages.into_iter().flat_map(|m| m.uuids).collect();
    assert_eq!(uuids.len(), 120);

    reaches(0.0, || {
        metric(&server, "idmint_grpc_streams_open", &[]).unwrap()
    });
}

#[test]
fn serve_grpc_stream_stops_when_the_client_cancels_or_stops_reading() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let addr = grpc_addr(&server);
    let rt = runtime();
    let mut c = rt.block_on(connect(&addr));
    let open = || metric(&server, "idmint_grpc_streams_open", &[]).unwrap_or(-1.0);
    let issued = |key: &str| {
        metric(
            &server,
            "idmint_ids_issued_total",
            &[&format!("key=\"{key}\"")],
        )
        .unwrap_or(0.0)
    };

    // A stream with no end: a few messages, then the client cancels.
    let mut stream = rt
        .block_on(c.stream_ids(stream_request("sf", 100, 0)))
        .unwrap()
        .into_inner();
    let mut last = 0;
    for _ in 0..5 {
        let m = rt.block_on(stream.message()).unwrap().unwrap();
        assert_eq!(m.ids.len(), 100);
        assert!(m.ids[0] > last);
        last = m.ids[99];
    }
    assert_eq!(open(), 1.0);
    drop(stream);
    reaches(0.0, open);
    // Nothing more is issued for it, and the server serves others.
    let after_cancel = settled(Duration::from_millis(300), || issued("sf"));
    assert!(after_cancel >= 500.0, "{after_cancel}");
    let more = rt.block_on(get_ids(&mut c, "sf", 10)).ids;
    assert!(more[0] > last);
    assert_eq!(issued("sf"), after_cancel + 10.0);

    // A client that stops reading holds the server back (HTTP/2 flow
    // control): issuing stalls after a bounded amount, far below what the
    // layout allows in the time (4,096,000 a second).
    let mut reader = rt.block_on(connect(&addr));
    let mut stalled = rt
        .block_on(reader.stream_ids(stream_request("bp", 1000, 0)))
        .unwrap()
        .into_inner();
    assert_eq!(
        rt.block_on(stalled.message()).unwrap().unwrap().ids.len(),
        1000
    );
    let held = settled(Duration::from_millis(500), || issued("bp"));
    assert!((1000.0..2_000_000.0).contains(&held), "{held}");
    assert_eq!(open(), 1.0);
    // Reading again lets it go on: the stream was paused, not ended.
    let mut got = 1000;
    while (got as f64) < held + 5000.0 {
        got += rt.block_on(stalled.message()).unwrap().unwrap().ids.len();
    }
    assert!(issued("bp") > held);
    drop(stalled);
    reaches(0.0, open);
}

#[test]
fn serve_grpc_concurrent_clients_get_unique_ids() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let addr = grpc_addr(&server);
    let rt = runtime();
    const PER_CLIENT: usize = 50_000;
    let per_client: Vec<Vec<u64>> = rt.block_on(async {
        let mut tasks = Vec::new();
        for client_no in 0..4 {
            let addr = addr.clone();
            tasks.push(tokio::spawn(async move {
                let mut c = connect(&addr).await;
                let mut ids = Vec::with_capacity(PER_CLIENT);
                match client_no {
                    // Single IDs, then batches.
                    0 => {
                        for _ in 0..2000 {
                            ids.extend(get_ids(&mut c, "sf", 1).await.ids);
                        }
                        while ids.len() < PER_CLIENT {
                            ids.extend(get_ids(&mut c, "sf", 1000).await.ids);
                        }
                    }
                    1 => {
                        while ids.len() < PER_CLIENT {
                            ids.extend(get_ids(&mut c, "sf", 500).await.ids);
                        }
                    }
                    // Streams, one with a short last message.
                    _ => {
                        let per = if client_no == 2 { 1000 } else { 777 };
                        let mut stream = c
                            .stream_ids(stream_request("sf", per, PER_CLIENT as u64))
                            .await
                            .unwrap()
                            .into_inner();
                        let (messages, end) = drain(&mut stream).await;
                        assert!(end.is_none(), "{end:?}");
                        ids.extend(messages.into_iter().flat_map(|m| m.ids));
                    }
                }
                ids
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    });
    let mut all = HashSet::new();
    for (i, ids) in per_client.iter().enumerate() {
        assert_eq!(ids.len(), PER_CLIENT, "client {i}");
        assert!(crate::strictly_increasing(ids), "client {i}");
        all.extend(ids.iter().copied());
    }
    assert_eq!(all.len(), 4 * PER_CLIENT, "duplicates across clients");
    assert!(all.iter().all(|&id| id > 0 && id < 1 << 63));
}

#[test]
fn serve_grpc_sigterm_ends_open_streams_and_releases_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some("[server]\nshutdown_grace = \"30s\"\n\n[keys.sf]\nstrategy = \"snowflake\"\n"),
        &[],
        &["--grpc-addr", "127.0.0.1:0"],
    );
    let addr = grpc_addr(&server);
    let rt = runtime();
    let mut c = rt.block_on(connect(&addr));
    let mut stream = rt
        .block_on(c.stream_ids(stream_request("sf", 100, 0)))
        .unwrap()
        .into_inner();
    rt.block_on(stream.message()).unwrap().unwrap();
    // Keep reading while the server stops.
    let reading = rt.spawn(async move { drain(&mut stream).await });
    let (status, log) = server.terminate();
    assert!(status.success(), "{status}: {log}");
    let (messages, end) = rt.block_on(reading).unwrap();
    let end = end.expect("the stream ends with a status");
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");
    assert_eq!(
        end.metadata().get(ERROR_CODE_METADATA).unwrap(),
        "shutting_down"
    );
    assert!(end.metadata().get(RETRY_AFTER_METADATA).is_some());
    assert!(messages.iter().all(|m| m.ids.len() == 100));
    // The stream ended by itself, not at the grace's end.
    assert!(log.contains("gRPC: no new connections"), "{log}");
    assert!(!log.contains("after the shutdown grace"), "{log}");
    assert!(log.contains("worker claim released"), "{log}");
}

#[test]
fn serve_grpc_bench_reports_no_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let target = format!("grpc://{}", grpc_addr(&server));
    for (key, batch) in [("sf", "1"), ("order", "1"), ("sf", "1000")] {
        let out = crate::ok(&[
            "bench",
            "--target",
            &target,
            "--key",
            key,
            "--batch",
            batch,
            "--concurrency",
            "3",
            "--duration",
            "500ms",
        ]);
        let n = crate::bench::check_report(&out);
        assert!(
            out.contains(&target) && out.contains(&format!("key {key}")),
            "{out}"
        );
        let issued = metric(
            &server,
            "idmint_ids_issued_total",
            &[&format!("key=\"{key}\"")],
        );
        assert!(issued.unwrap() >= n as f64, "{out}");
    }
    // A key the server doesn't have: the calls fail, and so does the run.
    let out = crate::idmint(&[
        "bench",
        "--target",
        &target,
        "--key",
        "nope",
        "--duration",
        "200ms",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("key_not_found"));
}

#[test]
fn grpc_connections_count_against_max_connections() {
    let dir = tempfile::tempdir().unwrap();
    let config = KEYS.replace("[server]\n", "[server]\nmax_connections = 2\n");
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some(&config),
        &[("IDMINT_OBFUSCATION_KEY", OBFUSCATION_KEY)],
        &["--grpc-addr", "127.0.0.1:0"],
    );
    let addr = grpc_addr(&server);
    runtime().block_on(async {
        // Two clients hold the two slots (each call proves it was accepted).
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut c = connect(&addr).await;
            c.get_ids(ids_request("sf", 1)).await.unwrap();
            held.push(c);
        }
        // A third waits: its connection is not accepted while both are held.
        let third = tokio::spawn({
            let addr = addr.clone();
            async move {
                let mut c = connect(&addr).await;
                c.get_ids(ids_request("sf", 1)).await.unwrap().into_inner()
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !third.is_finished(),
            "a third gRPC connection was served past max_connections = 2"
        );
        drop(held.pop());
        let answer = tokio::time::timeout(Duration::from_secs(10), third)
            .await
            .expect("the waiting client is let in once a slot frees")
            .unwrap();
        assert_eq!(answer.ids.len(), 1);
    });
}
