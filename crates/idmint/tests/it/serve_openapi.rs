//! The OpenAPI document (`GET /openapi.json`) checked by tools that are not
//! idmint's, against the real binary: `tests/openapi_python/check_openapi.py`
//! runs, in the virtual environment `scripts/pyenv` makes, PyPI's
//! `openapi-spec-validator` on the document, asks every documented path and
//! method (not 404, not 405; a documented status, content type and headers;
//! the body valid under its schema), and drives a client that
//! `openapi-python-client` generates from the document: IDs, decode, an admin
//! call, typed errors. Which routes the router has is
//! `api_doc.rs`'s check.

use std::path::Path;
use std::process::Command;

use reqwest::StatusCode;
use serde_json::Value;

use crate::serve::{Served, client, get};
use crate::serve_grpc_python::python;

const ADMIN: &str = "openapi-admin";
const KEY_TOKEN: &str = "openapi-key-token";

/// Keys the document's examples name (`order`, `sf`), and one with a token.
const CONFIG: &str = r#"
[segment.keys.order]
step = 100
start = 1000

[keys.sf]
strategy = "snowflake"

[keys.secret]
strategy = "snowflake"
token = "openapi-key-token"
"#;

/// Runs `check_openapi.py` against `server`; returns its JSON report,
/// failing with its stderr when it fails.
fn check_openapi(python: &str, server: &Served, workdir: &Path) -> Value {
    let program =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi_python/check_openapi.py");
    let out = Command::new(python)
        .arg(&program)
        .args([&server.url(""), ADMIN, KEY_TOKEN])
        .arg(workdir)
        .output()
        .expect("run check_openapi.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "check_openapi.py failed ({}): {stderr}\nserver log:\n{}",
        out.status,
        server.log()
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check_openapi.py printed no JSON ({e}): {stderr}"))
}

fn strings(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn serve_openapi_document_validates_answers_as_documented_and_generates_a_working_client() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(
        &dir.path().join("data"),
        Some(CONFIG),
        &[("IDMINT_ADMIN_TOKEN", ADMIN)],
    );
    let report = check_openapi(&python, &server, dir.path());
    assert_eq!(report["openapi"], "3.1.0", "{report}");
    assert_eq!(report["version"], env!("CARGO_PKG_VERSION"), "{report}");

    // Every operation was asked; the admin ones also without the token.
    let asked: Vec<&str> = report["asked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for expected in [
        "GET /api/snowflake/get/{key} 200",
        "GET /api/segment/get/{key} 200",
        "GET /v1/ids/{key} 200 application/json",
        "GET /v1/ids/{key} 200 application/octet-stream",
        "GET /v1/uuid 200 application/octet-stream",
        "POST /v1/admin/keys 201",
        "POST /v1/admin/keys 401 (no token)",
        "GET /openapi.json 200",
        "POST /tinyid/id/nextId 200",
    ] {
        assert!(asked.contains(&expected), "{expected:?} not in {asked:?}");
    }
    assert!(
        asked.len() >= 30,
        "only {} answers checked: {asked:?}",
        asked.len()
    );

    // The generated client got IDs of the segment key, in order after what
    // the document's walk took, and decoded a snowflake ID.
    let client_report = &report["client"];
    let order = &client_report["order"];
    assert_eq!(
        (&order["strategy"], &order["count"], &order["key"]),
        (
            &Value::from("segment"),
            &Value::from(3),
            &Value::from("order")
        ),
        "{report}"
    );
    let ids = strings(&order["ids"]);
    assert!(
        ids[0] >= 1000 && ids.windows(2).all(|w| w[1] == w[0] + 1),
        "{ids:?}"
    );
    let secret = strings(&client_report["secret"]["ids"]);
    assert_eq!(client_report["secret"]["strategy"], "snowflake", "{report}");
    assert!(secret[0] < secret[1], "{secret:?}");
    let decoded = &client_report["decoded"];
    assert_eq!(decoded["id"], secret[0].to_string(), "{report}");
    assert_eq!(decoded["layout"], "twitter", "{report}");
    // The same decode over plain HTTP.
    let (status, body) = get(&client(), &server.url(&format!("/v1/decode/{}", secret[0])));
    assert_eq!(status, StatusCode::OK, "{body}");
    let plain: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(&plain, decoded);

    // The key it created through the admin API serves from its start.
    assert_eq!(client_report["created"]["max_id"], "500", "{report}");
    assert_eq!(strings(&client_report["made"]), [500, 501], "{report}");
    let listed = client_report["listed"].as_array().unwrap();
    assert!(listed.contains(&Value::from("made")), "{listed:?}");

    // Typed errors, each the generated enum's member.
    let errors = &client_report["errors"];
    for (name, status, code) in [
        ("count_0", 400, "invalid_count"),
        ("bad_key", 400, "invalid_key"),
        ("wrong_key_token", 401, "unauthorized"),
        ("wrong_admin_token", 401, "unauthorized"),
    ] {
        assert_eq!(
            (&errors[name]["status"], &errors[name]["code"]),
            (&Value::from(status), &Value::from(code)),
            "{name}: {errors}"
        );
    }
}
