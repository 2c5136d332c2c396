//! Tinyid's HTTP routes on the real `idmint serve`: on MariaDB with Tinyid's
//! own DDL and sample rows (`idmint_testkit::tinyid`, from didi/tinyid
//! `tinyid-server/db.sql`), and beside a simulated Tinyid server taking
//! segments from the same rows.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use idmint_testkit::{MYSQL_URL, require_service, tinyid};
use reqwest::StatusCode;
use reqwest::blocking::Client;
use sqlx::mysql::MySqlPool;

use crate::serve::{Served, client};

/// Tinyid's sample token (`tiny_id_token` rows 1 and 2).
const TOKEN: &str = "0f673adf80504e2eaa552f5d791b644c";

/// A database of its own holding Tinyid's tables and sample rows (Tinyid's
/// table names are fixed, so concurrent tests can't share one database).
struct TinyidDb {
    name: String,
    url: String,
    pool: MySqlPool,
    rt: tokio::runtime::Runtime,
}

impl TinyidDb {
    /// `None` (after `require_service`) when MariaDB can't be reached.
    fn new(extra: &[&str]) -> Option<TinyidDb> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(3), MySqlPool::connect(MYSQL_URL)).await
        });
        let Ok(Ok(server)) = server else {
            require_service("MariaDB", false);
            return None;
        };
        let name = format!("tinyid_serve_{:016x}", fastrand_u64());
        let base = MYSQL_URL.rsplit_once('/').unwrap().0;
        let url = format!("{base}/{name}");
        let pool = rt.block_on(async {
            sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
                .execute(&server)
                .await
                .unwrap();
            server.close().await;
            let pool = MySqlPool::connect(&url).await.unwrap();
            for statement in tinyid::DB_SQL.iter().chain(extra) {
                sqlx::raw_sql(statement).execute(&pool).await.unwrap();
            }
            pool
        });
        Some(TinyidDb {
            name,
            url,
            pool,
            rt,
        })
    }

    /// idmint's config on this database's Tinyid tables.
    fn config(&self, more: &str) -> String {
        format!(
            "[segment]\nurl = \"{}\"\nschema = \"tinyid\"\n{more}",
            self.url
        )
    }

    /// `max_id, version` of `biz_type`'s row.
    fn row(&self, biz_type: &str) -> (i64, i64) {
        self.rt
            .block_on(
                sqlx::query_as("SELECT max_id, version FROM tiny_id_info WHERE biz_type = ?")
                    .bind(biz_type)
                    .fetch_one(&self.pool),
            )
            .unwrap()
    }
}

impl Drop for TinyidDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let pool = self.pool.clone();
        self.rt.block_on(async move {
            let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name}"))
                .execute(&pool)
                .await;
            pool.close().await;
        });
    }
}

/// A random u64 without a dependency: the std hasher's random keys.
fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// A Tinyid route's answer: status, content type, body.
fn call(
    c: &Client,
    server: &Served,
    post: bool,
    path_and_query: &str,
) -> (StatusCode, String, String) {
    let url = server.url(path_and_query);
    let request = if post {
        // As tinyid-client's TinyIdHttpUtils.post: POST, parameters in the
        // URL, an empty form body.
        c.post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("")
    } else {
        c.get(url)
    };
    let r = request.send().unwrap();
    let status = r.status();
    let ctype = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, ctype, r.text().unwrap())
}

fn simple_ids(body: &str) -> Vec<u64> {
    body.split(',').map(|s| s.parse().unwrap()).collect()
}

/// `nextSegmentIdSimple`'s five numbers, parsed as tinyid-client parses them.
fn segment_of(body: &str) -> (u64, u64, u64, u64, u64) {
    let v: Vec<u64> = body
        .split(',')
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{body:?}")))
        .collect();
    assert_eq!(v.len(), 5, "{body:?}");
    (v[0], v[1], v[2], v[3], v[4])
}

#[test]
fn serve_tinyid_routes_answer_as_tinyid() {
    // A token for a key with no row, and a declared snowflake key, to see
    // their failures.
    let extra = ["INSERT INTO tiny_id_token (token, biz_type) VALUES \
         ('0f673adf80504e2eaa552f5d791b644c', 'ghost'), ('0f673adf80504e2eaa552f5d791b644c', 'sf')"];
    let Some(db) = TinyidDb::new(&extra) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = db.config("\n[keys.sf]\nstrategy = \"snowflake\"\n");
    let server = Served::start(&dir.path().join("data"), Some(&config), &[]);
    let c = client();
    let q = |route: &str, params: &str| format!("/tinyid/id/{route}?{params}");

    // Row `test` has max_id 1: Tinyid's first ID is 2, and so is idmint's.
    let (status, ctype, body) = call(
        &c,
        &server,
        false,
        &q("nextIdSimple", &format!("bizType=test&token={TOKEN}")),
    );
    assert_eq!((status, body.as_str()), (StatusCode::OK, "2"));
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let (_, _, body) = call(
        &c,
        &server,
        true,
        &q(
            "nextIdSimple",
            &format!("bizType=test&token={TOKEN}&batchSize=3"),
        ),
    );
    assert_eq!(body, "3,4,5");
    let (status, ctype, body) = call(
        &c,
        &server,
        false,
        &q("nextId", &format!("bizType=test&token={TOKEN}")),
    );
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("application/json"), "{ctype}");
    assert_eq!(body, r#"{"data":[6],"code":200,"message":""}"#);
    // POST with the parameters in a form body.
    let r = c
        .post(server.url("/tinyid/id/nextId"))
        .form(&[("bizType", "test"), ("token", TOKEN), ("batchSize", "2")])
        .send()
        .unwrap();
    assert_eq!(
        r.text().unwrap(),
        r#"{"data":[7,8],"code":200,"message":""}"#
    );
    // An empty batchSize is Spring's null: one ID.
    let (_, _, body) = call(
        &c,
        &server,
        false,
        &q(
            "nextIdSimple",
            &format!("bizType=test&token={TOKEN}&batchSize="),
        ),
    );
    assert_eq!(body, "9");
    // test_odd: delta 2, remainder 1.
    let (_, _, body) = call(
        &c,
        &server,
        false,
        &q(
            "nextIdSimple",
            &format!("bizType=test_odd&token={TOKEN}&batchSize=4"),
        ),
    );
    assert_eq!(simple_ids(&body), [3, 5, 7, 9]);

    // A whole segment for the client: (currentId, maxId], the row's step,
    // loadingId at 20 %, above everything the buffers hold.
    let (max_before, version_before) = db.row("test");
    let (status, _, body) = call(
        &c,
        &server,
        true,
        &q(
            "nextSegmentIdSimple",
            &format!("token={TOKEN}&bizType=test"),
        ),
    );
    assert_eq!(status, StatusCode::OK);
    let (current, loading, max, delta, remainder) = segment_of(&body);
    assert_eq!(current as i64, max_before, "{body}");
    assert_eq!(
        (max - current, loading - current),
        (100_000, 20_000),
        "{body}"
    );
    assert_eq!((delta, remainder), (1, 0));
    assert_eq!(db.row("test"), (max as i64, version_before + 1));
    let (status, ctype, body) = call(
        &c,
        &server,
        false,
        &q("nextSegmentId", &format!("bizType=test_odd&token={TOKEN}")),
    );
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("application/json"), "{ctype}");
    let (odd_max, _) = db.row("test_odd");
    let expected = format!(
        r#"{{"data":{{"maxId":{odd_max},"loadingId":{},"currentId":{},"delta":2,"remainder":1}},"code":200,"message":""}}"#,
        odd_max - 100_000 + 20_000,
        odd_max - 100_000
    );
    assert_eq!(body, expected);
    // The buffers carry on below the client's segment, never inside it.
    let (_, _, body) = call(
        &c,
        &server,
        false,
        &q("nextIdSimple", &format!("bizType=test&token={TOKEN}")),
    );
    let next: u64 = body.parse().unwrap();
    assert!(
        next == 10 || next > max,
        "{next} is inside the client's segment ({current}, {max}]"
    );

    // Token failures: Tinyid's own body, nothing issued.
    let token_err = r#"{"data":null,"code":5,"message":"token is error"}"#;
    for params in [
        "bizType=test&token=wrong".to_owned(),
        "bizType=test".to_owned(),
        format!("token={TOKEN}"),
        format!("bizType=&token={TOKEN}"),
        format!("bizType=nope&token={TOKEN}"),
    ] {
        for route in ["nextId", "nextSegmentId"] {
            let (status, _, body) = call(&c, &server, false, &q(route, &params));
            assert_eq!(
                (status, body.as_str()),
                (StatusCode::OK, token_err),
                "{route}?{params}"
            );
        }
        for route in ["nextIdSimple", "nextSegmentIdSimple"] {
            let (status, _, body) = call(&c, &server, true, &q(route, &params));
            assert_eq!(
                (status, body.as_str()),
                (StatusCode::OK, ""),
                "{route}?{params}"
            );
        }
    }

    // Bad batch sizes: code 6, 400, an empty Simple body; nothing issued.
    for size in ["0", "-1", "99999999999999999999", "abc", "1.5"] {
        let params = format!("bizType=test&token={TOKEN}&batchSize={size}");
        let (status, _, body) = call(&c, &server, false, &q("nextId", &params));
        assert_eq!(status, StatusCode::BAD_REQUEST, "{size}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (&v["data"], &v["code"]),
            (&serde_json::Value::Null, &serde_json::json!(6)),
            "{body}"
        );
        assert!(
            v["message"].as_str().unwrap().contains("batchSize"),
            "{body}"
        );
        assert!(
            body.starts_with(r#"{"data":null,"code":6,"message":"#),
            "{body}"
        );
        let (status, _, body) = call(&c, &server, false, &q("nextIdSimple", &params));
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::BAD_REQUEST, ""),
            "{size}"
        );
    }
    // A parameter given twice is refused too.
    let (status, _, body) = call(
        &c,
        &server,
        false,
        &q(
            "nextIdSimple",
            &format!("bizType=test&bizType=test&token={TOKEN}"),
        ),
    );
    assert_eq!((status, body.as_str()), (StatusCode::BAD_REQUEST, ""));
    let (_, _, body) = call(
        &c,
        &server,
        false,
        &q("nextIdSimple", &format!("bizType=test&token={TOKEN}")),
    );
    assert_eq!(
        body.parse::<u64>().unwrap(),
        next + 1,
        "a failed request issued IDs"
    );

    // A token for a key without a row: Tinyid's code 6, with idmint's message.
    let (status, _, body) = call(
        &c,
        &server,
        false,
        &q("nextId", &format!("bizType=ghost&token={TOKEN}")),
    );
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.starts_with(r#"{"data":null,"code":6,"message":"#),
        "{body}"
    );
    assert!(body.contains("ghost"), "{body}");
    let (_, _, body) = call(
        &c,
        &server,
        false,
        &q(
            "nextSegmentIdSimple",
            &format!("bizType=ghost&token={TOKEN}"),
        ),
    );
    assert_eq!(body, "");
    // A key declared snowflake is not served as a segment key.
    let (status, _, body) = call(
        &c,
        &server,
        false,
        &q("nextId", &format!("bizType=sf&token={TOKEN}")),
    );
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body.contains("snowflake") && body.contains("\"code\":6"),
        "{body}"
    );
}

/// A Tinyid segment `(old, new]` (the numbers `≡ remainder mod delta`).
#[derive(Debug, Clone, Copy)]
struct Lease {
    key: &'static str,
    old: u64,
    new: u64,
    delta: u64,
    remainder: u64,
}

impl Lease {
    fn ids(self) -> impl Iterator<Item = (&'static str, u64)> {
        (self.old + 1..=self.new)
            .filter(move |id| id % self.delta == self.remainder)
            .map(move |id| (self.key, id))
    }

    fn contains(self, key: &str, id: u64) -> bool {
        key == self.key && id > self.old && id <= self.new
    }
}

/// Tinyid's `getNextSegmentId`, re-implemented on its own statements
/// (`idmint_testkit::tinyid`): read, compute `max_id + step`, `updateMaxId`
/// with the optimistic lock, again on a lost race.
async fn tinyid_next_segment(pool: &MySqlPool, key: &'static str) -> (Lease, u32) {
    let mut lost = 0;
    loop {
        let (id, max_id, step, delta, remainder, version): (i64, i64, i32, i32, i32, i64) =
            sqlx::query_as(tinyid::QUERY_BY_BIZ_TYPE)
                .bind(key)
                .fetch_one(pool)
                .await
                .unwrap();
        let new_max = max_id + i64::from(step);
        let updated = sqlx::query(tinyid::UPDATE_MAX_ID)
            .bind(new_max)
            .bind(id)
            .bind(max_id)
            .bind(version)
            .bind(key)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected();
        if updated == 1 {
            let lease = Lease {
                key,
                old: max_id as u64,
                new: new_max as u64,
                delta: delta as u64,
                remainder: remainder as u64,
            };
            return (lease, lost);
        }
        lost += 1;
    }
}

/// Tinyid's own clients ask for its shipped `batch.size.max` (100000) and
/// more: idmint serves up to it and clamps a larger `batchSize` to it, as
/// Tinyid's `checkBatchSize` does (its `/v1` routes still refuse).
#[test]
fn serve_tinyid_clamps_batch_size_as_tinyid() {
    let Some(db) = TinyidDb::new(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(&db.config("")), &[]);
    let c = client();
    let q = |route: &str, params: &str| format!("/tinyid/id/{route}?{params}");
    let mut last = 1;
    for size in ["100000", "150000"] {
        let (status, _, body) = call(
            &c,
            &server,
            false,
            &q(
                "nextId",
                &format!("bizType=test&token={TOKEN}&batchSize={size}"),
            ),
        );
        assert_eq!(status, StatusCode::OK, "{size}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let ids: Vec<u64> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), 100_000, "batchSize={size}");
        assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "batchSize={size}");
        assert_eq!(ids[0], last + 1, "batchSize={size}");
        last = *ids.last().unwrap();
    }
    let (_, _, body) = call(
        &c,
        &server,
        true,
        &q(
            "nextIdSimple",
            &format!("bizType=test&token={TOKEN}&batchSize=150000"),
        ),
    );
    assert_eq!(simple_ids(&body).len(), 100_000);
}

/// A simulated Tinyid server and idmint (over HTTP, `nextId` and
/// `nextSegmentId`) take segments from the same rows at once: no ID twice
/// across both sides, and each side's IDs lie in its own segments.
#[test]
fn serve_tinyid_shares_rows_with_a_running_tinyid() {
    // Small steps: the rows move often, so the two sides race for them.
    let Some(db) = TinyidDb::new(&["UPDATE tiny_id_info SET step = 1000"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = db.config("max_step = 1000\npreload_share = 0.2\n");
    let server = Arc::new(Served::start(&dir.path().join("data"), Some(&config), &[]));
    let keys = ["test", "test_odd"];

    // Tinyid: 4 tasks × 30 segments, alternating keys.
    let tinyid_tasks: Vec<_> = (0..4)
        .map(|t| {
            let pool = db.pool.clone();
            db.rt.spawn(async move {
                let mut leases = Vec::new();
                let mut lost = 0;
                for i in 0..30 {
                    let (lease, l) = tinyid_next_segment(&pool, keys[(t + i) % 2]).await;
                    leases.push(lease);
                    lost += l;
                }
                (leases, lost)
            })
        })
        .collect();
    // idmint: 4 clients × 25 batches of 1,000 over HTTP, and 10 segments
    // handed to clients through nextSegmentIdSimple.
    let idmint_threads: Vec<_> = (0..4)
        .map(|t| {
            let server = server.clone();
            std::thread::spawn(move || {
                let c = client();
                let mut ids = Vec::new();
                let mut segments = Vec::new();
                for i in 0..25 {
                    let key = keys[(t + i) % 2];
                    let path = format!(
                        "/tinyid/id/nextIdSimple?bizType={key}&token={TOKEN}&batchSize=1000"
                    );
                    let (status, _, body) = call(&c, &server, false, &path);
                    assert_eq!(status, StatusCode::OK, "{body}");
                    ids.extend(simple_ids(&body).into_iter().map(|id| (key, id)));
                    if i % 10 == 0 {
                        let path =
                            format!("/tinyid/id/nextSegmentIdSimple?bizType={key}&token={TOKEN}");
                        let (status, _, body) = call(&c, &server, true, &path);
                        assert_eq!(status, StatusCode::OK, "{body}");
                        let (current, _, max, delta, remainder) = segment_of(&body);
                        segments.push(Lease {
                            key,
                            old: current,
                            new: max,
                            delta,
                            remainder,
                        });
                    }
                }
                (ids, segments)
            })
        })
        .collect();

    let mut tinyid_leases = Vec::new();
    let mut races = 0;
    for task in tinyid_tasks {
        let (leases, lost) = db.rt.block_on(task).unwrap();
        tinyid_leases.extend(leases);
        races += lost;
    }
    let mut idmint_ids = Vec::new();
    let mut client_segments = Vec::new();
    for thread in idmint_threads {
        let (ids, segments) = thread.join().unwrap();
        idmint_ids.extend(ids);
        client_segments.extend(segments);
    }

    // No number in two of the segments handed out (Tinyid's, clients').
    let mut seen: HashSet<(&str, u64)> = HashSet::new();
    let mut n_tinyid = 0;
    for lease in tinyid_leases.iter().chain(&client_segments) {
        for id in lease.ids() {
            n_tinyid += 1;
            assert!(seen.insert(id), "{id:?} is in two segments");
        }
    }
    // idmint's own IDs: in none of those, each once, each in a segment the
    // row handed out (every number up to its final max_id is in one).
    let finals: Vec<(&str, u64)> = keys.iter().map(|k| (*k, db.row(k).0 as u64)).collect();
    for &(key, id) in &idmint_ids {
        assert!(seen.insert((key, id)), "{key} {id} issued twice");
        let max = finals.iter().find(|(k, _)| *k == key).unwrap().1;
        assert!(
            id >= 2 && id <= max,
            "{key} {id} is outside every segment of the row"
        );
        assert!(
            !tinyid_leases.iter().any(|l| l.contains(key, id)),
            "{key} {id}"
        );
        if key == "test_odd" {
            assert_eq!(id % 2, 1);
        }
    }
    let total = seen.len();
    eprintln!(
        "tinyid sharing over HTTP: {} IDs by idmint's nextId, {n_tinyid} in segments of \
         simulated Tinyid servers and idmint's nextSegmentId ({races} lost races), {total} in all",
        idmint_ids.len()
    );
    assert_eq!(idmint_ids.len(), 100_000);
    assert!(total >= 100_000, "{total}");
}

/// On idmint's own table, Tinyid's routes check `keys.<name>.token`, and a
/// key without one is open.
#[test]
fn serve_tinyid_routes_on_idmints_own_table() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[segment.keys.order]\nstep = 100\n\n[segment.keys.open]\nstep = 10\n\n\
                  [keys.order]\nstrategy = \"segment\"\ntoken = \"tk\"\n";
    let server = Served::start(&dir.path().join("data"), Some(config), &[]);
    let c = client();
    let (_, _, body) = call(
        &c,
        &server,
        false,
        "/tinyid/id/nextIdSimple?bizType=order&token=tk&batchSize=2",
    );
    assert_eq!(body, "1,2");
    let (status, _, body) = call(
        &c,
        &server,
        false,
        "/tinyid/id/nextId?bizType=order&token=nope",
    );
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::OK,
            r#"{"data":null,"code":5,"message":"token is error"}"#
        )
    );
    let (_, _, body) = call(
        &c,
        &server,
        false,
        "/tinyid/id/nextIdSimple?bizType=open&token=anything",
    );
    assert_eq!(body, "1");
    // idmint's segments are [max_id − step, max_id): as Tinyid's (currentId,
    // maxId] they are the same numbers, above what /v1/ids hands out.
    let (_, _, body) = call(
        &c,
        &server,
        true,
        "/tinyid/id/nextSegmentIdSimple?bizType=order&token=tk",
    );
    let (current, loading, max, delta, remainder) = segment_of(&body);
    assert_eq!(
        (max - current, loading - current, delta, remainder),
        (100, 20, 1, 0),
        "{body}"
    );
    let r = c
        .get(server.url("/v1/ids/order?count=200"))
        .bearer_auth("tk")
        .send()
        .unwrap();
    let ids: Vec<u64> = r
        .text()
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids[0], 3);
    assert!(
        ids.iter().all(|id| *id <= current || *id > max),
        "{ids:?} overlaps ({current}, {max}]"
    );
}
