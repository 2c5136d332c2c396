//! `idmint layout`.

use idmint_core::Layout;

use crate::ok;

fn field<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(label).filter(|rest| rest.starts_with("  ")))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{out}"))
        .trim()
}

#[test]
fn twitter_report() {
    let out = ok(&["layout", "twitter"]);
    assert_eq!(field(&out, "layout"), "twitter");
    assert_eq!(field(&out, "text"), Layout::TWITTER.to_string());
    assert_eq!(field(&out, "time bits"), "41");
    assert_eq!(field(&out, "datacenter bits"), "5");
    assert_eq!(field(&out, "worker bits"), "5");
    assert_eq!(field(&out, "rollback bits"), "0");
    assert_eq!(field(&out, "sequence bits"), "12");
    assert_eq!(field(&out, "order"), "time-node-sequence");
    assert_eq!(field(&out, "time unit"), "1ms");
    assert_eq!(field(&out, "epoch"), "2010-11-04T01:42:54.657Z");
    assert_eq!(field(&out, "IDs/s per worker"), "4,096,000");
    assert_eq!(field(&out, "IDs per tick"), "4,096");
    assert_eq!(
        field(&out, "workers"),
        "1,024 (datacenter 0..=31, worker 0..=31)"
    );
    let end = Layout::TWITTER.runs_out_at().unwrap().to_string();
    let runs_out = field(&out, "runs out");
    assert!(
        runs_out.starts_with(&format!("{end} (in ")) && runs_out.ends_with(" years)"),
        "{runs_out}"
    );
}

#[test]
fn baidu_reports_that_it_ran_out() {
    let out = ok(&["layout", "baidu"]);
    let runs_out = field(&out, "runs out");
    assert!(
        runs_out.starts_with("ran out on 2024-11-20T13:24:16Z ("),
        "{runs_out}"
    );
    assert!(runs_out.ends_with(" ago)"), "{runs_out}");
    let v: serde_json::Value = serde_json::from_str(&ok(&["layout", "baidu", "--json"])).unwrap();
    assert_eq!(v["runs_out_at"], "2024-11-20T13:24:16Z");
    assert_eq!(v["ran_out"], true);
    assert!(v["years_left"].as_f64().unwrap() < 0.0);
}

#[test]
fn discord_reports_usable_time_bits() {
    let out = ok(&["layout", "discord"]);
    assert!(field(&out, "time bits").starts_with("42 (41 usable"));
}

#[test]
fn json_report() {
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["layout", "sonyflake", "--json"])).unwrap();
    assert_eq!(v["preset"], "sonyflake");
    assert_eq!(v["text"], Layout::SONYFLAKE.to_string());
    assert_eq!(v["ids_per_second_per_worker"], 25_600.0);
    assert_eq!(v["workers"], 65_536);
    assert_eq!(v["order"], "time-sequence-node");
    assert_eq!(v["unit"], "10ms");
    assert_eq!(v["ran_out"], false);
}

#[test]
fn custom_spec_report() {
    let out = ok(&["layout", "twitter,epoch=2024-01-01,datacenter=0"]);
    assert_eq!(field(&out, "layout"), "custom");
    assert_eq!(field(&out, "worker bits"), "10");
    assert_eq!(field(&out, "epoch"), "2024-01-01T00:00:00Z");
}

#[test]
fn list_shows_every_preset() {
    for args in [&["layout"][..], &["layout", "--list"][..]] {
        let out = ok(args);
        assert!(out.starts_with("NAME "), "{out}");
        for (name, _) in Layout::PRESETS {
            assert!(
                out.lines().any(|l| l.starts_with(&format!("{name} "))),
                "{name} missing:\n{out}"
            );
        }
    }
    let v: serde_json::Value = serde_json::from_str(&ok(&["layout", "--list", "--json"])).unwrap();
    assert_eq!(v.as_array().unwrap().len(), Layout::PRESETS.len());
}

#[test]
fn layout_plans_the_worker_space_for_a_lease_ttl_and_a_fleet() {
    // 256 workers, 5 s leases: the fleet of 256 on one etcd.
    let args = [
        "layout",
        "twitter,datacenter=0,worker=8",
        "--lease-ttl",
        "5s",
        "--fleet",
        "200",
        "--restarts-per-hour",
        "720",
    ];
    let out = ok(&args);
    assert_eq!(
        field(&out, "fleet that fits"),
        "255 nodes at 720 restarts an hour (1.0 workers held by dead nodes on average)"
    );
    assert!(!out.contains("warning"), "200 of 256 leaves room:\n{out}");
    let full = ok(&[
        "layout",
        "twitter,datacenter=0,worker=8",
        "--lease-ttl",
        "5s",
        "--fleet",
        "256",
    ]);
    assert!(
        field(&full, "warning").contains("only 0 of 256 worker IDs are free"),
        "{full}"
    );
    let never = ok(&[
        "layout",
        "twitter",
        "--never-reused",
        "--fleet",
        "24",
        "--restarts-per-hour",
        "10",
    ]);
    assert_eq!(field(&never, "IDs last"), "4 days at 10 starts an hour");
    assert!(
        field(&never, "warning").contains("never reuses a worker ID"),
        "{never}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["layout", "twitter", "--lease-ttl", "10s", "--json"])).unwrap();
    assert_eq!(json["plan"]["max_fleet"], 1024);
    let (code, err) = crate::fails(&["layout", "twitter", "--fleet", "3"]);
    assert_eq!(
        code, 2,
        "a fleet needs --lease-ttl or --never-reused: {err}"
    );
    // A value clap refuses: its usual three lines, exit 2, naming the value.
    let out = crate::idmint(&[
        "layout",
        "twitter",
        "--lease-ttl",
        "5s",
        "--restarts-per-hour=-1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("\"-1\" is not a number of starts an hour"),
        "{err}"
    );
}
