//! Bad input: a non-zero exit, nothing on stdout, one line on stderr naming the problem.

use crate::{fails, idmint};

#[test]
fn bad_input_gets_one_clear_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["gen", "--layout", "nope"],
            r#"invalid layout text "nope": unknown preset"#,
        ),
        (
            &["gen", "--layout", "twitter,sequence=40"],
            "sequence 40 bits is out of range",
        ),
        (&["gen", "--layout", "twitter,colour=red"], "colour=red"),
        (
            &["gen", "--worker", "40"],
            "error: worker 40 is out of range for this layout (0..=31)",
        ),
        (
            &["gen", "--datacenter", "1", "--layout", "leaf"],
            "datacenter 1 is out of range for this layout (0..=0)",
        ),
        (
            &["gen", "--strategy", "cached", "--worker", "32"],
            "worker 32 is out of range",
        ),
        (&["gen", "--count", "0"], "count 0 is out of range"),
        (
            &["gen", "--count", "1000000001"],
            "count 1000000001 is out of range",
        ),
        (
            &["gen", "--count", "1000000000000"],
            "count 1000000000000 is out of range",
        ),
        (
            &["gen", "--strategy", "uuid", "--count", "0"],
            "count 0 is out of range",
        ),
        (
            &["gen", "--strategy", "uuid", "--uuid-version", "6"],
            r#"unknown UUID version "6""#,
        ),
        (
            &[
                "gen",
                "--strategy",
                "uuid",
                "--uuid-version",
                "5",
                "--name",
                "x",
            ],
            "needs --namespace",
        ),
        (
            &[
                "gen",
                "--strategy",
                "uuid",
                "--uuid-version",
                "5",
                "--namespace",
                "dns",
            ],
            "needs --name",
        ),
        (
            &[
                "gen",
                "--strategy",
                "uuid",
                "--uuid-version",
                "3",
                "--namespace",
                "isbn",
                "--name",
                "x",
            ],
            r#"unknown UUID namespace "isbn""#,
        ),
        (
            &[
                "gen",
                "--strategy",
                "uuid",
                "--uuid-version",
                "4",
                "--name",
                "x",
            ],
            "apply to UUID v3 and v5",
        ),
        (
            &["gen", "--strategy", "uuid", "--format", "hex"],
            "--format does not apply",
        ),
        (
            &["gen", "--strategy", "uuid", "--layout", "twitter"],
            "--layout does not apply",
        ),
        (
            &["gen", "--uuid-version", "7"],
            "--uuid-version applies to --strategy uuid",
        ),
        (
            &["decode", "abc"],
            r#"invalid ID "abc": not a decimal number"#,
        ),
        (&["decode", "-1"], r#"invalid ID "-1""#),
        (&["decode", "9223372036854775808"], "above 2^63 - 1"),
        (&["decode", "12", "--layout", "nope"], "unknown preset"),
        (
            &["decode", "--format", "hex", "xyz"],
            "not a hexadecimal number",
        ),
        (
            &["decode", "--layout", "js53", "9007199254740993"],
            "has bits set above",
        ),
        (&["layout", "nope"], "unknown preset"),
        (&["layout", "twitter,unit=1us"], "unit=1us"),
        (
            &["layout", "time=41,epoch=2020-01-01"],
            "`sequence` is required",
        ),
    ];
    for &(args, needle) in cases {
        let (code, line) = fails(args);
        assert_eq!(code, 2, "idmint {args:?}: {line}");
        assert!(
            line.contains(needle),
            "idmint {args:?}: {line:?} lacks {needle:?}"
        );
    }
}

/// uid-generator's default layout ran out on 2024-11-20; generating with it must
/// fail with the core's message, which says when and what to change.
#[test]
fn exhausted_layout_refuses_to_generate() {
    for strategy in ["snowflake", "cached"] {
        let (code, line) = fails(&["gen", "--strategy", strategy, "--layout", "baidu"]);
        assert_eq!(code, 2);
        assert!(
            line.contains("layout ran out at 2024-11-20T13:24:16Z"),
            "{strategy}: {line}"
        );
        assert!(
            line.contains("use a later epoch or more time bits"),
            "{strategy}: {line}"
        );
    }
}

/// clap's own usage errors keep clap's format, exit 2 and print nothing on stdout.
#[test]
fn usage_errors_exit_2() {
    for args in [
        &["gen", "--count", "abc"][..],
        &["gen", "--worker", "-1"][..],
        &["gen", "--strategy", "segment"][..],
        &["gen", "--format", "octal"][..],
        &["decode"][..],
        &["frobnicate"][..],
        &["layout", "twitter", "--list"][..],
    ] {
        let out = idmint(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("error: "),
            "{args:?}"
        );
    }
}
