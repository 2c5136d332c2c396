//! `idmint obfuscate` and `idmint reveal`.

use std::path::PathBuf;

use crate::{expect_failure, expect_ok, idmint_with, integers, ok};

const KEY_A: &str = "2b7e151628aed2a6abf7158809cf4f3c";
const KEY_B: &str = "000102030405060708090a0b0c0d0e0f";
const ENV: &str = "IDMINT_OBFUSCATION_KEY";

/// Runs with `key` (or no key at all) in the environment and `stdin`; asserts success.
#[track_caller]
fn run_ok(args: &[&str], key: Option<&str>, stdin: &str) -> String {
    expect_ok(args, idmint_with(args, &[(ENV, key)], stdin))
}

/// Runs with `key` (or no key) in the environment; asserts a one-line failure.
#[track_caller]
fn run_fails(args: &[&str], key: Option<&str>) -> (i32, String) {
    expect_failure(args, idmint_with(args, &[(ENV, key)], ""))
}

/// A key file in the temporary directory, removed when dropped.
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(name: &str, text: &str) -> KeyFile {
        let file_name = format!("idmint-it-{}-{name}", std::process::id());
        let path = std::env::temp_dir().join(file_name);
        std::fs::write(&path, text).unwrap();
        KeyFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn public_ids_are_ff1_of_the_ids_and_reveal_back() {
    let ids = ["0", "1050118621198921728", "1", "9223372036854775807"];
    let mut args = vec!["obfuscate"];
    args.extend(ids);
    let public = run_ok(&args, Some(KEY_A), "");
    let lines: Vec<&str> = public.lines().collect();
    // FF1-AES-128 of the 63-bit IDs (the core's known answers, which the `fpe`
    // crate reproduces).
    assert_eq!(lines[0], "7407393923982924685");
    assert_eq!(lines[1], "7175602343469354441");
    assert!(integers(&public).iter().all(|&p| p < 1 << 63));

    let mut args = vec!["reveal"];
    args.extend(&lines);
    assert_eq!(
        run_ok(&args, Some(KEY_A), "").lines().collect::<Vec<_>>(),
        ids
    );
}

#[test]
fn every_format_round_trips_through_stdin() {
    let ids = ok(&["gen", "--count", "2000"]);
    for format in ["dec", "base32", "sqids"] {
        let public = run_ok(&["obfuscate", "--format", format, "-"], Some(KEY_A), &ids);
        assert_eq!(public.lines().count(), 2000, "{format}");
        // Consecutive IDs in, no order out.
        let sorted = public.lines().collect::<Vec<_>>().is_sorted();
        assert!(!sorted, "{format}: public IDs came out sorted");
        // Base32 reads back in any case.
        let public = if format == "base32" {
            public.to_lowercase()
        } else {
            public
        };
        let revealed = run_ok(&["reveal", "--format", format, "-"], Some(KEY_A), &public);
        assert_eq!(revealed, ids, "{format}");
    }
}

#[test]
fn bits_bound_the_public_ids() {
    let ids = ["0", "12345", "9007199254740991"];
    let mut args = vec!["obfuscate", "--bits", "53"];
    args.extend(ids);
    let public = run_ok(&args, Some(KEY_A), "");
    assert!(integers(&public).iter().all(|&p| p < 1 << 53), "{public}");
    let revealed = run_ok(&["reveal", "--bits", "53", "-"], Some(KEY_A), &public);
    assert_eq!(revealed.lines().collect::<Vec<_>>(), ids);
    // The same ID at 63 bits is another public ID.
    let wider = run_ok(&["obfuscate", "12345"], Some(KEY_A), "");
    assert_ne!(integers(&wider)[0], integers(&public)[1]);
}

#[test]
fn key_ids_in_the_top_bits_let_keys_rotate() {
    let old = KeyFile::new("old.keys", &format!("# before the rotation\n0:{KEY_A}\n"));
    let both = KeyFile::new(
        "both.keys",
        &format!("0:{KEY_A}\n1:{KEY_B}  # since 2026-11\n"),
    );
    let file_args = |command: &'static str, file: &KeyFile, extra: &[&str]| {
        let mut args = vec![command.to_owned()];
        args.extend(["--bits", "64", "--key-id-bits", "1", "--key-file"].map(str::to_owned));
        args.push(file.path().to_owned());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ok(&args, None, "")
    };

    // No key in the environment: the file is the only source.
    let made_before = run(file_args("obfuscate", &old, &["77"]));
    let made_after = run(file_args("obfuscate", &both, &["77"]));
    let pinned = run(file_args("obfuscate", &both, &["--key-id", "0", "77"]));
    assert_eq!(integers(&made_before)[0] >> 63, 0);
    assert_eq!(
        integers(&made_after)[0] >> 63,
        1,
        "the last key listed is active"
    );
    assert_eq!(pinned, made_before);

    for public in [&made_before, &made_after] {
        assert_eq!(run(file_args("reveal", &both, &[public.trim()])), "77\n");
    }
    // The old key file has no key 1: a typed error, not a wrong ID.
    let args = file_args("reveal", &old, &[made_after.trim()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, line) = run_fails(&args, None);
    assert_eq!(code, 2);
    assert!(
        line.contains("made with key ID 1, which has no key here"),
        "{line}"
    );
}

#[test]
fn another_key_reveals_another_number() {
    let public = run_ok(&["obfuscate", "4242"], Some(KEY_A), "");
    let revealed = run_ok(&["reveal", public.trim()], Some(KEY_B), "");
    assert_ne!(revealed, "4242\n");
    assert!(integers(&revealed)[0] < 1 << 63);
}

#[test]
fn bad_input_gets_one_line_exit_2_and_never_the_key() {
    let secret = "5ec7e75ec7e75ec7e75ec7e75ec7e75e";
    let bad_file = KeyFile::new("bad.keys", &format!("{secret}\n7x:{secret}\n"));
    let missing = std::env::temp_dir().join("idmint-it-no-such-dir/keys");
    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (
            &["obfuscate", "1"],
            None,
            "no obfuscation key: set IDMINT_OBFUSCATION_KEY",
        ),
        (
            &["reveal", "1"],
            Some(""),
            "the obfuscation key source is empty",
        ),
        (
            &["obfuscate", "1"],
            Some(&secret[..31]),
            "key entry 1: invalid obfuscation key: a key is 32 or 64 hex digits",
        ),
        (
            &["obfuscate", "1"],
            Some("5ec7e75ec7e75ec7e75ec7e75ec7e7zz"),
            "character 31 is not a hex digit",
        ),
        (
            &["obfuscate", "1", "--key-file", bad_file.path()],
            None,
            "key entry 2: the key ID before ':' is not a number",
        ),
        (
            &["obfuscate", "1", "--key-file", missing.to_str().unwrap()],
            Some(secret),
            "cannot read key file",
        ),
        (
            &["obfuscate", "abc"],
            Some(secret),
            r#"invalid ID "abc": not a decimal number"#,
        ),
        (
            &["obfuscate", "9223372036854775808"],
            Some(secret),
            "above 2^63 - 1",
        ),
        (
            &["obfuscate", "--bits", "53", "9007199254740992"],
            Some(secret),
            "above 2^53 - 1, the widest ID a 53-bit obfuscator",
        ),
        (
            &["obfuscate", "--bits", "31", "1"],
            Some(secret),
            "width 31 bits is out of range",
        ),
        (
            &["obfuscate", "--bits", "65", "1"],
            Some(secret),
            "width 65 bits is out of range",
        ),
        (
            &["obfuscate", "--key-id-bits", "9", "1"],
            Some(secret),
            "9 key ID bits is out of range",
        ),
        (
            &["obfuscate", "--key-id", "1", "1"],
            Some(secret),
            "the active key ID 1 has no key",
        ),
        (
            &["reveal", "--bits", "53", "9007199254740992"],
            Some(secret),
            "above 2^53 - 1, the largest public ID of this width",
        ),
        (
            &["reveal", "18446744073709551616"],
            Some(secret),
            "above 2^64 - 1",
        ),
        (
            &["reveal", "12x"],
            Some(secret),
            r#"invalid public ID "12x": not a decimal number"#,
        ),
        (
            &["reveal", "--format", "base32", "7U"],
            Some(secret),
            "not a Crockford base32 number",
        ),
        (
            &["reveal", "--format", "sqids", "not-a-sqid"],
            Some(secret),
            "only letters and digits",
        ),
        (
            &["reveal", "--format", "sqids", "86Rf07xd4z"],
            Some(secret),
            "invalid public ID \"86Rf07xd4z\"",
        ),
    ];
    for &(args, key, needle) in cases {
        let (code, line) = run_fails(args, key);
        assert_eq!(code, 2, "idmint {args:?}: {line}");
        assert!(
            line.contains(needle),
            "idmint {args:?}: {line:?} lacks {needle:?}"
        );
        assert!(
            !line.contains("5ec7e7"),
            "idmint {args:?} printed the key: {line}"
        );
    }
}

/// clap's usage errors: no IDs, an unknown format, a width that is not a number.
#[test]
fn usage_errors_exit_2() {
    for args in [
        &["obfuscate"][..],
        &["reveal"][..],
        &["obfuscate", "--format", "hex", "1"][..],
        &["obfuscate", "--bits", "wide", "1"][..],
        &["obfuscate", "--key", KEY_A, "1"][..],
        &["obfuscate", "-5"][..],
    ] {
        let out = idmint_with(args, &[(ENV, Some(KEY_A))], "");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(
            !stderr.contains(&KEY_A[2..]),
            "{args:?} printed the key: {stderr}"
        );
    }
}
