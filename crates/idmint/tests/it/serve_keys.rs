//! One rule for a key's strategy on every surface (HTTP `/v1/ids`, gRPC,
//! RESP): declared keys, the store's segment keys, undeclared names by
//! `server.undeclared_keys` (snowflake by default, or refused), Leaf's
//! routes against a key declared with another strategy, and the admin API
//! never switching a name's strategy under a running server.

use std::path::Path;
use std::time::Duration;

use idmint_server::grpc::ERROR_CODE_METADATA;
use idmint_server::grpc::proto::GetIdsRequest;
use idmint_server::grpc::proto::id_service_client::IdServiceClient;
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::Value;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::serve::{Served, client, expect_error, get};

const ADMIN: &str = "admin-t";

fn start(data_dir: &Path, config: &str) -> Served {
    Served::start_with_args(
        data_dir,
        Some(config),
        &[("IDMINT_ADMIN_TOKEN", ADMIN)],
        &["--resp-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"],
    )
}

/// The gRPC address the server logged.
fn grpc_addr(server: &Served) -> String {
    let log = server.log();
    log.lines()
        .filter(|l| l.contains("listening for gRPC"))
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("addr=")))
        .unwrap_or_else(|| panic!("no gRPC address in the log: {log}"))
        .to_owned()
}

/// Asks every surface for one ID of `key`: the strategy `/v1/ids` and gRPC
/// report (or their error codes), and RESP's reply (an integer, or the
/// error code).
struct Surfaces {
    http: Client,
    grpc: IdServiceClient<Channel>,
    resp: redis::Connection,
    rt: tokio::runtime::Runtime,
}

impl Surfaces {
    fn new(server: &Served) -> Surfaces {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let addr = grpc_addr(server);
        let grpc = rt.block_on(async {
            let channel = Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .timeout(Duration::from_secs(30))
                .connect()
                .await
                .unwrap();
            IdServiceClient::new(channel)
        });
        let resp_addr = server.resp_addr.clone().unwrap();
        let resp = redis::Client::open(format!("redis://{resp_addr}/"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(30))
            .unwrap();
        Surfaces {
            http: client(),
            grpc,
            resp,
            rt,
        }
    }

    /// `/v1/ids/{key}`: `Ok(strategy)` or `Err(error code)`.
    fn http(&self, server: &Served, key: &str) -> Result<String, String> {
        let r = self
            .http
            .get(server.url(&format!("/v1/ids/{key}")))
            .header("accept", "application/json")
            .send()
            .unwrap();
        let ok = r.status() == StatusCode::OK;
        let v: Value = r.json().unwrap();
        if ok {
            Ok(v["strategy"].as_str().unwrap().to_owned())
        } else {
            Err(v["error"]["code"].as_str().unwrap().to_owned())
        }
    }

    /// `GetIds`: `Ok(strategy)` or `Err((grpc code, error code))`.
    fn grpc(&mut self, key: &str) -> Result<String, (Code, String)> {
        let request = GetIdsRequest {
            key: key.to_owned(),
            count: 1,
        };
        match self.rt.block_on(self.grpc.get_ids(request)) {
            Ok(r) => Ok(r.into_inner().strategy),
            Err(status) => {
                let code = status
                    .metadata()
                    .get(ERROR_CODE_METADATA)
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default();
                Err((status.code(), code))
            }
        }
    }

    /// `INCR key`: `Ok(id)` or `Err(error code)`.
    fn resp(&mut self, key: &str) -> Result<u64, String> {
        redis::cmd("INCR")
            .arg(key)
            .query::<u64>(&mut self.resp)
            .map_err(|e| e.code().unwrap_or("?").to_owned())
    }
}

fn create_key(c: &Client, server: &Served, key: &str) -> (StatusCode, Value) {
    let r = c
        .post(server.url("/v1/admin/keys"))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"key": key, "step": 100}))
        .send()
        .unwrap();
    (r.status(), r.json().unwrap())
}

/// Snowflake IDs are far above any segment's: the time sits in the high bits.
const SNOWFLAKE_FLOOR: u64 = 1 << 40;

#[test]
fn serve_keys_one_rule_on_every_surface_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[segment.keys.order]\nstep = 100\n\n[keys.sf]\nstrategy = \"snowflake\"\n\n\
                  [keys.u7]\nstrategy = \"uuid7\"\n";
    let server = start(&data, config);
    let mut s = Surfaces::new(&server);
    let c = client();

    // Declared keys keep their strategy; an undeclared name is snowflake
    // (the embedded default's rule), the same on each surface.
    for (key, strategy) in [
        ("order", "segment"),
        ("sf", "snowflake"),
        ("u7", "uuid7"),
        ("anything", "snowflake"),
    ] {
        assert_eq!(s.http(&server, key).as_deref(), Ok(strategy), "{key}");
        assert_eq!(s.grpc(key).as_deref(), Ok(strategy), "{key}");
    }
    assert!(s.resp("anything").unwrap() > SNOWFLAKE_FLOOR);
    assert!(s.resp("other-name").unwrap() > SNOWFLAKE_FLOOR);
    assert!(s.resp("order").unwrap() < 1000);

    // Leaf's routes name their strategy: any undeclared name is served by
    // it; a key declared with another strategy is a typed error.
    let (status, body) = get(&c, &server.url("/api/snowflake/get/anything"));
    assert_eq!(status, StatusCode::OK);
    assert!(body.parse::<u64>().unwrap() > SNOWFLAKE_FLOOR);
    let r = c.get(server.url("/api/segment/get/sf")).send().unwrap();
    let message = expect_error(r, StatusCode::CONFLICT, "wrong_strategy");
    assert!(
        message.contains("\"sf\"") && message.contains("snowflake"),
        "{message}"
    );
    let r = c
        .get(server.url("/api/snowflake/get/order"))
        .send()
        .unwrap();
    let message = expect_error(r, StatusCode::CONFLICT, "wrong_strategy");
    assert!(
        message.contains("\"order\"") && message.contains("segment"),
        "{message}"
    );
    let r = c.get(server.url("/api/segment/get/no-row")).send().unwrap();
    expect_error(r, StatusCode::NOT_FOUND, "key_not_found");

    // The admin API makes a fresh name a segment key, on every surface at
    // once; a name already answered as snowflake can't become one.
    let (status, body) = create_key(&c, &server, "fresh");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(s.http(&server, "fresh").as_deref(), Ok("segment"));
    assert_eq!(s.grpc("fresh").as_deref(), Ok("segment"));
    assert_eq!(s.resp("fresh"), Ok(3));
    for served in ["anything", "other-name", "sf"] {
        let (status, body) = create_key(&c, &server, served);
        assert_eq!(status, StatusCode::CONFLICT, "{served}: {body}");
        assert_eq!(body["error"]["code"], "wrong_strategy", "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(served),
            "{body}"
        );
        assert_eq!(
            s.http(&server, served).as_deref(),
            Ok("snowflake"),
            "{served}"
        );
    }
    let (_, body) = get_json(&c, &server, "/v1/admin/keys");
    assert_eq!(body["undeclared_keys"], "snowflake", "{body}");

    // After a restart the key the admin API made is still a segment key:
    // the store's keys are segment keys.
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let server = start(&data, config);
    let mut s = Surfaces::new(&server);
    assert_eq!(s.http(&server, "fresh").as_deref(), Ok("segment"));
    assert_eq!(s.grpc("fresh").as_deref(), Ok("segment"));
    assert!(s.resp("fresh").unwrap() < 1000);
}

/// One name, one strategy per run, in every order across the surfaces
/// (issue: a name served as snowflake on Leaf's route could then be made a
/// segment key through the admin API, and an admin-made segment key was
/// served as snowflake on Leaf's route). Whichever surface answers a name
/// first fixes its strategy: Leaf's and Tinyid's routes (which name one),
/// `/v1`, gRPC and RESP (by `server.undeclared_keys`), and the admin API.
#[test]
fn serve_keys_one_name_one_strategy_in_every_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), "");
    let mut s = Surfaces::new(&server);
    let c = client();
    let conflict = |path: &str| {
        let r = c.get(server.url(path)).send().unwrap();
        let status = r.status();
        let body = r.text().unwrap();
        assert_eq!(status, StatusCode::CONFLICT, "{path}: {body}");
        body
    };
    let tinyid = |key: &str| format!("/tinyid/id/nextId?bizType={key}&batchSize=2");

    // Leaf's snowflake route first: never a segment key after.
    let (status, body) = get(&c, &server.url("/api/snowflake/get/foo"));
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = create_key(&c, &server, "foo");
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "wrong_strategy", "{body}");
    assert!(conflict("/api/segment/get/foo").contains("wrong_strategy"));
    assert!(conflict(&tinyid("foo")).contains("served as snowflake"));
    assert_eq!(s.http(&server, "foo").as_deref(), Ok("snowflake"));
    assert_eq!(s.grpc("foo").as_deref(), Ok("snowflake"));

    // The admin API first: Leaf's snowflake route refuses the segment key.
    let (status, body) = create_key(&c, &server, "bar");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(conflict("/api/snowflake/get/bar").contains("wrong_strategy"));
    assert_eq!(s.http(&server, "bar").as_deref(), Ok("segment"));
    let (status, body) = get(&c, &server.url("/api/segment/get/bar"));
    assert_eq!(
        (status, body.parse::<u64>().ok()),
        (StatusCode::OK, Some(2))
    );

    // /v1, gRPC and RESP first (undeclared names are snowflake): the
    // segment routes refuse them.
    assert_eq!(s.http(&server, "v1-first").as_deref(), Ok("snowflake"));
    assert_eq!(s.grpc("grpc-first").as_deref(), Ok("snowflake"));
    assert!(s.resp("resp-first").unwrap() > SNOWFLAKE_FLOOR);
    for key in ["v1-first", "grpc-first", "resp-first"] {
        assert!(conflict(&format!("/api/segment/get/{key}")).contains("wrong_strategy"));
        assert!(conflict(&tinyid(key)).contains("served as snowflake"));
        let (status, _) = create_key(&c, &server, key);
        assert_eq!(status, StatusCode::CONFLICT, "{key}");
    }

    // Leaf's segment route first, for a name with no row yet: it stays a
    // segment name on /v1, gRPC and RESP (not the undeclared rule's
    // snowflake), and the admin API makes its row.
    let r = c
        .get(server.url("/api/segment/get/seg-first"))
        .send()
        .unwrap();
    expect_error(r, StatusCode::NOT_FOUND, "key_not_found");
    assert_eq!(
        s.http(&server, "seg-first"),
        Err("key_not_found".to_owned())
    );
    assert_eq!(s.resp("seg-first"), Err("KEY_NOT_FOUND".to_owned()));
    assert!(conflict("/api/snowflake/get/seg-first").contains("wrong_strategy"));
    let (status, body) = create_key(&c, &server, "seg-first");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(s.grpc("seg-first").as_deref(), Ok("segment"));
}

fn get_json(c: &Client, server: &Served, path: &str) -> (StatusCode, Value) {
    let r = c.get(server.url(path)).bearer_auth(ADMIN).send().unwrap();
    (r.status(), r.json().unwrap())
}

#[test]
fn serve_keys_undeclared_names_refused_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[server]\nundeclared_keys = \"refuse\"\n\n[segment.keys.order]\nstep = 100\n\n\
                  [keys.sf]\nstrategy = \"snowflake\"\n";
    let server = start(&dir.path().join("data"), config);
    let mut s = Surfaces::new(&server);
    let c = client();

    assert_eq!(s.http(&server, "nope"), Err("unknown_key".to_owned()));
    assert_eq!(
        s.grpc("nope"),
        Err((Code::NotFound, "unknown_key".to_owned()))
    );
    assert_eq!(s.resp("nope"), Err("UNKNOWN_KEY".to_owned()));
    let r = c.get(server.url("/v1/ids/nope")).send().unwrap();
    let message = expect_error(r, StatusCode::NOT_FOUND, "unknown_key");
    assert!(
        message.contains("\"nope\"") && message.contains("refuse"),
        "{message}"
    );
    // Leaf's routes refuse unknown names too.
    for route in ["snowflake", "segment"] {
        let r = c
            .get(server.url(&format!("/api/{route}/get/nope")))
            .send()
            .unwrap();
        expect_error(r, StatusCode::NOT_FOUND, "unknown_key");
    }
    // Declared keys are served as ever.
    assert_eq!(s.http(&server, "sf").as_deref(), Ok("snowflake"));
    assert_eq!(get(&c, &server.url("/api/segment/get/order")).1, "1");
    assert_eq!(s.grpc("order").as_deref(), Ok("segment"));
    assert!(s.resp("order").unwrap() < 1000);

    // A refused name was never served: the admin API can make it a segment key.
    let (status, body) = create_key(&c, &server, "nope");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(s.http(&server, "nope").as_deref(), Ok("segment"));
    assert_eq!(s.grpc("nope").as_deref(), Ok("segment"));
    // (a new RESP connection: a connection keeps the spec of the key it last used)
    let mut fresh = Surfaces::new(&server);
    assert_eq!(fresh.resp("nope"), Ok(3));
}

#[test]
fn serve_keys_undeclared_names_are_segment_keys_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[server]\nundeclared_keys = \"segment\"\n\n[keys.sf]\nstrategy = \"snowflake\"\n";
    let server = start(&dir.path().join("data"), config);
    let mut s = Surfaces::new(&server);
    let c = client();
    assert_eq!(s.http(&server, "later"), Err("key_not_found".to_owned()));
    assert_eq!(
        s.grpc("later"),
        Err((Code::NotFound, "key_not_found".to_owned()))
    );
    assert_eq!(s.resp("later"), Err("KEY_NOT_FOUND".to_owned()));
    let (status, body) = create_key(&c, &server, "later");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(s.http(&server, "later").as_deref(), Ok("segment"));
    assert_eq!(s.grpc("later").as_deref(), Ok("segment"));
    assert_eq!(s.resp("later"), Ok(3));
}

/// A bad `server.undeclared_keys` stops the start, naming the key.
#[test]
fn serve_keys_bad_undeclared_rule_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    crate::serve::assert_start_refused(
        dir.path(),
        &[(
            Some("[server]\nundeclared_keys = \"random\"\n"),
            &[],
            "server.undeclared_keys",
        )],
    );
}
