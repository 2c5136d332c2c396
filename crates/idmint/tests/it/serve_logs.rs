//! `idmint serve --log-format`: text for people, JSON lines for log shippers.

use super::idmint_with;
use super::serve::Served;

#[test]
fn serve_json_logs_are_one_object_a_line_from_start_to_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start_with_args(dir.path(), None, &[], &["--log-format", "json"]);
    let (status, log) = server.terminate();
    assert!(status.success(), "{status}: {log}");

    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 2, "too few log lines: {log}");
    let mut messages = Vec::new();
    for line in lines {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line:?}"));
        for field in ["timestamp", "level", "target"] {
            assert!(event[field].is_string(), "no {field} in {line}");
        }
        let message = event["fields"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no fields.message in {line}"));
        messages.push(message.to_owned());
    }
    // The start and the drain are both there, as JSON.
    assert!(
        messages.iter().any(|m| m.contains("listening for HTTP")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("stopped")),
        "{messages:?}"
    );
}

#[test]
fn serve_log_format_from_the_environment_and_refusing_unknown_formats() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(dir.path(), None, &[("IDMINT_LOG_FORMAT", "json")]);
    let (_, log) = server.terminate();
    let first = log.lines().next().expect("a log line");
    assert!(first.starts_with('{'), "not JSON: {first:?}");

    let args = ["serve", "--log-format", "xml"];
    let out = idmint_with(&args, &[], "");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("xml") && stderr.contains("json") && stderr.contains("text"),
        "the error names the bad value and the choices: {stderr}"
    );
}
