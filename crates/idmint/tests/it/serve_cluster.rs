//! Three `idmint serve` processes sharing one PostgreSQL worker registry and
//! one PostgreSQL segment table: no ID is issued twice across them.
//!
//! Needs PostgreSQL at `postgres://postgres@127.0.0.1:5432/test` (or
//! `IDMINT_TEST_POSTGRES_URL`). When it is down the test prints `SKIPPED`, and
//! fails under `CI=true`.

use std::collections::HashSet;

use serde_json::Value;

use crate::serve::{Served, binary_ids, client, postgres_up, unique_suffix};

fn postgres_url() -> String {
    std::env::var("IDMINT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

#[test]
fn serve_three_servers_share_a_postgres_registry_and_segment_table() {
    if !postgres_up() {
        return;
    }
    let unique = unique_suffix();
    let url = postgres_url();
    let config = format!(
        r#"
[server]
admin_token = "t"

[snowflake]
registry = "sql"

[snowflake.sql]
url = "{url}"
cluster = "serve-it-{unique}"
table = "idmint_worker_it_{unique}"

[segment]
url = "{url}"
table = "alloc_it_{unique}"

[segment.keys.order]
step = 500

[keys.sf]
strategy = "snowflake"
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<Served> = (0..3)
        .map(|i| Served::start(&dir.path().join(format!("node{i}")), Some(&config), &[]))
        .collect();

    // Each holds its own worker ID.
    let c = client();
    let workers: HashSet<u64> = servers
        .iter()
        .map(|s| {
            let v: Value = c
                .get(s.url("/v1/admin/workers"))
                .bearer_auth("t")
                .send()
                .unwrap()
                .json()
                .unwrap();
            assert_eq!(v["workers"][0]["registry"], "sql");
            v["workers"][0]["worker"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(workers.len(), 3, "{workers:?}");

    // All three issue at once, from both strategies.
    for key in ["sf", "order"] {
        let all: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = servers
                .iter()
                .flat_map(|server| (0..2).map(move |_| server))
                .map(|server| {
                    s.spawn(move || {
                        let c = client();
                        let mut ids = Vec::new();
                        for n in [1, 7, 2000, 10_000, 1, 999] {
                            ids.extend(binary_ids(&c, server, key, n));
                        }
                        ids
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen = HashSet::new();
        for ids in &all {
            for &id in ids {
                assert!(id > 0 && id < 1 << 63);
                assert!(seen.insert(id), "{key}: duplicate {id} across servers");
            }
        }
        assert_eq!(seen.len(), 6 * (1 + 7 + 2000 + 10_000 + 1 + 999));
    }
}
