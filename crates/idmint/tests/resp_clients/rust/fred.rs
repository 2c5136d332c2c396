//! The `fred` crate against idmint, with its default settings (RESP2, a
//! `Pool`, `pipeline()` and `multi()` as fred sends them). Returns the same
//! JSON object as the other languages' programs print, for
//! `serve_resp_clients.rs` to check. (Included by that test with `#[path]`.)

use std::collections::BTreeMap;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use serde_json::{Value, json};

fn strings(values: Vec<i64>) -> Vec<String> {
    values.into_iter().map(|v| v.to_string()).collect()
}

async fn incr(client: &Client, key: &str) -> String {
    client.incr::<i64, _>(key).await.unwrap().to_string()
}

/// Runs the client against `host:port`; `token` is the `secret` key's token.
pub async fn run(host: &str, port: u16, token: &str) -> Value {
    let config = Config::from_url(&format!("redis://{host}:{port}")).unwrap();
    let client = Builder::from_config(config.clone()).build().unwrap();
    client.init().await.unwrap();
    let mut out = BTreeMap::new();
    let info: String = client
        .custom(
            CustomCommand::new_static("CLIENT", ClusterHash::FirstKey, false),
            vec!["INFO"],
        )
        .await
        .unwrap();
    out.insert("client_info", json!(info));
    let mut seg = Vec::new();
    let mut sf = Vec::new();
    for _ in 0..3 {
        seg.push(incr(&client, "order").await);
        sf.push(incr(&client, "sf").await);
    }
    out.insert("incr_segment", json!(seg));
    out.insert("incr_snowflake", json!(sf));

    let before = incr(&client, "order").await;
    let last: i64 = client.incr_by("order", 10).await.unwrap();
    let after = incr(&client, "order").await;
    out.insert(
        "incrby",
        json!({"before": before, "last": last.to_string(), "after": after, "n": "10"}),
    );

    let pipe = client.pipeline();
    for _ in 0..20 {
        let () = pipe.incr("order").await.unwrap();
    }
    let piped: Vec<i64> = pipe.all().await.unwrap();
    out.insert("pipeline", json!(strings(piped)));
    let tx = client.multi();
    for _ in 0..20 {
        let () = tx.incr("order").await.unwrap();
    }
    let queued: Vec<i64> = tx.exec(true).await.unwrap();
    out.insert("transaction", json!(strings(queued)));

    // DISCARD on a connection of its own, by raw commands.
    let solo = Builder::from_config(config.clone()).build().unwrap();
    solo.init().await.unwrap();
    let before = incr(&solo, "order").await;
    let cmd = |name: &'static str| CustomCommand::new_static(name, ClusterHash::FirstKey, false);
    let _: String = solo
        .custom(cmd("MULTI"), Vec::<String>::new())
        .await
        .unwrap();
    for _ in 0..2 {
        let queued: String = solo
            .custom(cmd("INCR"), vec!["order".to_owned()])
            .await
            .unwrap();
        assert_eq!(queued, "QUEUED");
    }
    let _: String = solo
        .custom(cmd("DISCARD"), Vec::<String>::new())
        .await
        .unwrap();
    let after = incr(&solo, "order").await;
    solo.quit().await.unwrap();
    out.insert("discard", json!({"before": before, "after": after}));

    let pool = Builder::from_config(config.clone()).build_pool(4).unwrap();
    pool.init().await.unwrap();
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.incr::<i64, _>("order").await.unwrap().to_string() })
        })
        .collect();
    let mut pooled = Vec::new();
    for task in tasks {
        pooled.push(task.await.unwrap());
    }
    pool.quit().await.unwrap();
    out.insert("pool", json!(pooled));

    let noauth = match client.incr::<i64, _>("secret").await {
        Ok(_) => "no error".to_owned(),
        Err(e) => e.to_string(),
    };
    out.insert("noauth", json!(noauth));
    let mut with_token = config;
    with_token.password = Some(token.to_owned());
    let authed = Builder::from_config(with_token).build().unwrap();
    authed.init().await.unwrap();
    let ids = vec![incr(&authed, "secret").await, incr(&authed, "secret").await];
    authed.quit().await.unwrap();
    client.quit().await.unwrap();
    out.insert("auth", json!(ids));
    json!(out)
}
