//! `idmint gen`.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use idmint_core::Layout;
use idmint_core::uuid::Uuid;

use crate::{integers, ok, strictly_increasing};

#[test]
fn default_is_one_twitter_snowflake_id_for_worker_0() {
    let ids = integers(&ok(&["gen"]));
    assert_eq!(ids.len(), 1);
    let d = Layout::TWITTER.decode(ids[0]).unwrap();
    assert_eq!((d.datacenter, d.worker), (0, 0));
    let age = jiff::Timestamp::now().as_millisecond() - d.time.as_millisecond();
    assert!((0..60_000).contains(&age), "made {age} ms ago");
}

#[test]
fn snowflake_ids_are_unique_and_increasing() {
    let ids = integers(&ok(&[
        "gen",
        "--count",
        "200000",
        "--worker",
        "7",
        "--datacenter",
        "3",
    ]));
    assert_eq!(ids.len(), 200_000);
    assert!(strictly_increasing(&ids));
    for id in [ids[0], ids[199_999]] {
        let d = Layout::TWITTER.decode(id).unwrap();
        assert_eq!((d.datacenter, d.worker), (3, 7));
    }
}

#[test]
fn snowflake_honours_the_layout() {
    let ids = integers(&ok(&[
        "gen",
        "-n",
        "5000",
        "--layout",
        "sonyflake",
        "--worker",
        "513",
    ]));
    assert_eq!(ids.len(), 5000);
    assert!(strictly_increasing(&ids));
    assert!(
        ids.iter()
            .all(|&id| Layout::SONYFLAKE.decode(id).unwrap().worker == 513)
    );
    let ids = integers(&ok(&[
        "gen",
        "-n",
        "100",
        "--layout",
        "baidu,epoch=2024-01-01",
        "--worker",
        "4000000",
    ]));
    let layout: Layout = "baidu,epoch=2024-01-01".parse().unwrap();
    assert!(
        ids.iter()
            .all(|&id| layout.decode(id).unwrap().worker == 4_000_000)
    );
}

#[test]
fn cached_ids_are_unique_and_increasing() {
    let ids = integers(&ok(&[
        "gen",
        "--strategy",
        "cached",
        "--count",
        "200000",
        "--worker",
        "9",
    ]));
    assert_eq!(ids.len(), 200_000);
    assert!(strictly_increasing(&ids));
    assert!(
        ids.iter()
            .all(|&id| Layout::TWITTER.decode(id).unwrap().worker == 9)
    );
}

#[test]
fn hex_ids_read_back() {
    let lines: Vec<String> = ok(&["gen", "-n", "1000", "--format", "hex", "--worker", "5"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 1000);
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| {
            assert!(
                l.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{l:?}"
            );
            u64::from_str_radix(l, 16).unwrap()
        })
        .collect();
    assert!(strictly_increasing(&ids));
    assert!(
        ids.iter()
            .all(|&id| Layout::TWITTER.decode(id).unwrap().worker == 5)
    );
    // The decode subcommand reads the hex form back to the same ID.
    let json = ok(&["decode", "--format", "hex", &lines[0], "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["id"], ids[0].to_string());
    let json = ok(&[
        "decode",
        "--format",
        "hex",
        &format!("0x{}", lines[1]),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["id"], ids[1].to_string());
}

#[test]
fn base32_ids_read_back() {
    let lines: Vec<String> = ok(&["gen", "-n", "1000", "--format", "base32", "--worker", "6"])
        .lines()
        .map(str::to_owned)
        .collect();
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| crockford::decode(l).unwrap())
        .collect();
    assert_eq!(ids.len(), 1000);
    assert!(strictly_increasing(&ids));
    assert!(
        ids.iter()
            .all(|&id| Layout::TWITTER.decode(id).unwrap().worker == 6)
    );
    let json = ok(&[
        "decode",
        "--format",
        "base32",
        &lines[0].to_lowercase(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["id"], ids[0].to_string());
    assert_eq!(v["worker"], 6);
}

fn uuids(args: &[&str]) -> Vec<Uuid> {
    ok(args)
        .lines()
        .map(|l| {
            assert_eq!(l.len(), 36, "hyphenated form: {l:?}");
            assert_eq!(l, l.to_lowercase());
            Uuid::parse_str(l).unwrap()
        })
        .collect()
}

#[test]
fn uuid_v7_is_the_default_and_increases() {
    let ids = uuids(&["gen", "--strategy", "uuid", "-n", "20000"]);
    assert_eq!(ids.len(), 20_000);
    assert!(ids.iter().all(|u| u.get_version_num() == 7));
    assert!(strictly_increasing(&ids));
    let ids = uuids(&[
        "gen",
        "--strategy",
        "uuid",
        "--uuid-version",
        "v7",
        "-n",
        "3",
    ]);
    assert!(strictly_increasing(&ids));
}

#[test]
fn uuid_v4_is_random_and_unique() {
    let ids = uuids(&[
        "gen",
        "--strategy",
        "uuid",
        "--uuid-version",
        "4",
        "-n",
        "20000",
    ]);
    assert!(ids.iter().all(|u| u.get_version_num() == 4));
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 20_000);
    assert!(!strictly_increasing(&ids), "random, so not sorted");
}

#[test]
fn uuid_v1_has_version_1() {
    let ids = uuids(&[
        "gen",
        "--strategy",
        "uuid",
        "--uuid-version",
        "1",
        "-n",
        "1000",
    ]);
    assert!(ids.iter().all(|u| u.get_version_num() == 1));
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 1000);
}

#[test]
fn name_based_uuids_match_known_vectors() {
    let out = ok(&[
        "gen",
        "--strategy",
        "uuid",
        "--uuid-version",
        "5",
        "--namespace",
        "dns",
        "--name",
        "www.example.com",
    ]);
    assert_eq!(out, "2ed6657d-e927-568b-95e1-2665a8aea6a2\n");
    let out = ok(&[
        "gen",
        "--strategy",
        "uuid",
        "--uuid-version",
        "3",
        "--namespace",
        "DNS",
        "--name",
        "www.example.com",
        "--name",
        "www.example.com",
    ]);
    assert_eq!(out, "5df41881-3aed-3515-88a7-2f4a814cf09e\n".repeat(2));
}

/// `idmint gen ... | head -3`: the reader goes away; idmint exits 0 and says nothing.
#[test]
fn broken_pipe_exits_0_silently() {
    for args in [
        &["gen", "--count", "1000000"][..],
        &["gen", "--strategy", "uuid", "--count", "1000000"][..],
        &["gen", "--count", "1000000", "--format", "base32"][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idmint"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        for _ in 0..3 {
            let mut line = String::new();
            assert!(reader.read_line(&mut line).unwrap() > 0);
        }
        drop(reader);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", out.status);
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A write failure other than a closed pipe is a runtime error: exit 1.
#[test]
fn unwritable_stdout_exits_1() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return; // not Linux; nothing to check
    };
    let out = Command::new(env!("CARGO_BIN_EXE_idmint"))
        .args(["gen", "-n", "10"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("error: writing to stdout: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1);
}
