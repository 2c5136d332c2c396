//! The `redis` crate against idmint, with its default settings (RESP2,
//! `redis::pipe()` for a pipeline, `.atomic()` for MULTI/EXEC). Returns the
//! same JSON object as the other languages' programs print, for
//! `serve_resp_clients.rs` to check. (Included by that test with `#[path]`.)

use std::collections::BTreeMap;

use redis::{Commands, Connection};
use serde_json::{Value, json};

fn strings(values: Vec<i64>) -> Vec<String> {
    values.into_iter().map(|v| v.to_string()).collect()
}

fn incr(con: &mut Connection, key: &str) -> String {
    con.incr::<_, _, i64>(key, 1).unwrap().to_string()
}

/// Runs the client against `host:port`; `token` is the `secret` key's token.
pub fn run(host: &str, port: u16, token: &str) -> Value {
    let url = format!("redis://{host}:{port}/");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut out = BTreeMap::new();
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).unwrap();
    out.insert("client_info", json!(info));
    let seg: Vec<String> = (0..3).map(|_| incr(&mut con, "order")).collect();
    let sf: Vec<String> = (0..3).map(|_| incr(&mut con, "sf")).collect();
    out.insert("incr_segment", json!(seg));
    out.insert("incr_snowflake", json!(sf));

    let before = incr(&mut con, "order");
    let last = con.incr::<_, _, i64>("order", 10).unwrap().to_string();
    let after = incr(&mut con, "order");
    out.insert(
        "incrby",
        json!({"before": before, "last": last, "after": after, "n": "10"}),
    );

    let mut pipe = redis::pipe();
    for _ in 0..20 {
        pipe.incr("order", 1);
    }
    let piped: Vec<i64> = pipe.query(&mut con).unwrap();
    out.insert("pipeline", json!(strings(piped)));
    let mut tx = redis::pipe();
    tx.atomic();
    for _ in 0..20 {
        tx.incr("order", 1);
    }
    let queued: Vec<i64> = tx.query(&mut con).unwrap();
    out.insert("transaction", json!(strings(queued)));

    let before = incr(&mut con, "order");
    redis::cmd("MULTI").exec(&mut con).unwrap();
    for _ in 0..2 {
        let queued: String = redis::cmd("INCR").arg("order").query(&mut con).unwrap();
        assert_eq!(queued, "QUEUED");
    }
    redis::cmd("DISCARD").exec(&mut con).unwrap();
    let after = incr(&mut con, "order");
    out.insert("discard", json!({"before": before, "after": after}));

    // No pool in the crate's default features: a connection per thread.
    let pooled: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut con = client.get_connection().unwrap();
                    (0..50).map(|_| incr(&mut con, "order")).collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    out.insert("pool", json!(pooled));

    let noauth = match con.incr::<_, _, i64>("secret", 1) {
        Ok(_) => "no error".to_owned(),
        Err(e) => e.to_string(),
    };
    out.insert("noauth", json!(noauth));
    let authed = redis::Client::open(format!("redis://:{token}@{host}:{port}/")).unwrap();
    let mut authed = authed.get_connection().unwrap();
    let ids: Vec<String> = (0..2).map(|_| incr(&mut authed, "secret")).collect();
    out.insert("auth", json!(ids));
    json!(out)
}
