//! `idmint decode`.

use idmint_core::{IdParts, Layout};

use crate::ok;

/// Discord's documented example: 175928847299117063 was made at
/// 2016-04-30T11:18:25.796Z by internal worker 1, process 0, increment 7.
#[test]
fn discord_example() {
    let out = ok(&["decode", "175928847299117063", "--layout", "discord"]);
    let expected = [
        ("id", "175928847299117063"),
        ("layout", "discord"),
        ("time", "2016-04-30T11:18:25.796Z"),
        ("raw", "tick 41944705796 (unix ms 1462015105796)"),
        ("datacenter", "1"),
        ("worker", "0"),
        ("rollback", "0"),
        ("sequence", "7"),
    ];
    let lines: Vec<(&str, &str)> = out
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k, v.trim_start())
        })
        .collect();
    assert_eq!(lines, expected);
}

#[test]
fn json_is_one_object_with_the_id_as_a_string() {
    let out = ok(&[
        "decode",
        "175928847299117063",
        "--layout",
        "discord",
        "--json",
    ]);
    assert_eq!(out.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["id"], "175928847299117063");
    assert_eq!(v["time"], "2016-04-30T11:18:25.796Z");
    assert_eq!(v["unix_ms"], 1_462_015_105_796u64);
    assert_eq!(v["tick"], 41_944_705_796u64);
    assert_eq!(
        (
            &v["datacenter"],
            &v["worker"],
            &v["sequence"],
            &v["rollback"]
        ),
        (&1.into(), &0.into(), &7.into(), &0.into())
    );
    assert_eq!(v["layout"], "discord");
}

#[test]
fn twitter_is_the_default_layout() {
    // Twitter's API documentation example tweet, 2018-10-10T20:19:24Z.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["decode", "1050118621198921728", "--json"])).unwrap();
    assert_eq!(v["time"], "2018-10-10T20:19:24.211Z");
    assert_eq!((&v["datacenter"], &v["worker"]), (&10.into(), &27.into()));
}

#[test]
fn layouts_that_ran_out_still_decode() {
    let b = Layout::BAIDU;
    let last = b
        .compose(IdParts {
            tick: b.ticks() - 1,
            worker: 7,
            sequence: 3,
            ..Default::default()
        })
        .unwrap();
    let out = ok(&["decode", &last.to_string(), "--layout", "baidu", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["time"], "2024-11-20T13:24:15Z");
    assert_eq!((&v["worker"], &v["sequence"]), (&7.into(), &3.into()));
}

/// IDs as uid-generator makes them (`BitsAllocator.allocate`: `deltaSeconds <<
/// 35 | workerId << 13 | sequence`, seconds from its default `epochSeconds`,
/// 1463673600), and the ID its README prints, made with the bits its README
/// configures (29 · 21 · 13, `epochStr` "2016-09-20", here at UTC+8).
#[test]
fn uid_generator_ids_decode_to_what_uid_generator_put_in() {
    let made = ((1_577_836_800u64 - 1_463_673_600) << 35) | (1234 << 13) | 56;
    let out = ok(&["decode", &made.to_string(), "--layout", "baidu", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["time"], "2020-01-01T00:00:00Z");
    assert_eq!((&v["worker"], &v["sequence"]), (&1234.into(), &56.into()));

    let readme = "time=29,unit=1s,epoch=2016-09-20T00:00:00+08:00,worker=21,sequence=13";
    let out = ok(&["decode", "180363646902239241", "--layout", readme, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The README prints "2017-01-19 12:15:46" in the JVM's zone (UTC+8).
    assert_eq!(v["time"], "2017-01-19T04:15:46Z");
    assert_eq!((&v["worker"], &v["sequence"]), (&4.into(), &9.into()));
}

#[test]
fn custom_layouts_are_named_by_their_text() {
    let spec = "time=40,unit=10ms,epoch=2024-01-01,worker=8,sequence=12";
    let layout: Layout = spec.parse().unwrap();
    let id = layout
        .compose(IdParts {
            tick: 1000,
            worker: 200,
            sequence: 1,
            ..Default::default()
        })
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(&[
        "decode",
        &id.to_string(),
        "--layout",
        spec,
        "--json",
    ]))
    .unwrap();
    assert_eq!(v["time"], "2024-01-01T00:00:10Z");
    assert_eq!(v["worker"], 200);
    assert_eq!(v["layout"], layout.to_string());
}
