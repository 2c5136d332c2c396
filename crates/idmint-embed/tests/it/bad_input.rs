//! The one file of bad-input vectors every binding's tests read,
//! `bindings/testdata/bad-input.tsv`: a value a caller can get wrong, and
//! the code and message every language answers with, since the check is
//! this layer's alone (the count of a batch, the public-ID settings that
//! must be bytes). This test renders the file from `idmint-embed` and fails
//! when the one in the repository differs; `IDMINT_BLESS=1` writes it.
//!
//! Cases (each binding maps them onto its own call):
//! - `next_ids`: `Generator::next_ids(value)` on a fixed generator with
//!   the defaults (Python `next_ids`, Node `nextIds`, Java `nextIds`, Go
//!   `NextIDs`);
//! - `public_ids.<setting>`: public IDs with the key in [`KEY`] and that
//!   setting (`bits`, `key_id_bits`, `active_key`) set to the value, the
//!   rest at their defaults.

use std::path::Path;

use idmint_embed::{Generator, GeneratorOptions, PublicIds, PublicIdsOptions};

/// The key ring the `public_ids.*` cases use.
const KEY: &str = "000102030405060708090a0b0c0d0e0f";

const HEADER: &str = "\
# Bad-input vectors, read by every binding's tests: the value, the code and the message each
# language must answer with. Generated from idmint-embed by
# crates/idmint-embed/tests/it/bad_input.rs (IDMINT_BLESS=1 writes it); don't edit.
# Cases: next_ids (a fixed generator with the defaults, asked for `value` IDs);
# public_ids.bits, public_ids.key_id_bits, public_ids.active_key (public IDs with the key
# 000102030405060708090a0b0c0d0e0f and that one setting set to `value`).
# case\tvalue\tcode\tmessage
";

/// Values within every binding's integer type (Java's `int`, a JavaScript
/// safe integer).
const CASES: &[(&str, i64)] = &[
    ("next_ids", 0),
    ("next_ids", -1),
    ("next_ids", 10_000_001),
    ("public_ids.bits", 300),
    ("public_ids.bits", -1),
    ("public_ids.key_id_bits", 256),
    ("public_ids.active_key", -2),
    ("public_ids.active_key", 1000),
];

fn answer(case: &str, value: i64) -> idmint_embed::Error {
    let options = PublicIdsOptions::new();
    let made = match case {
        "next_ids" => {
            let g = Generator::new(GeneratorOptions::default()).unwrap();
            let n = Generator::check_count(value).map(|_| ());
            g.close();
            n
        }
        "public_ids.bits" => PublicIds::with_options(KEY, &options.with_bits(value)).map(|_| ()),
        "public_ids.key_id_bits" => {
            PublicIds::with_options(KEY, &options.with_key_id_bits(value)).map(|_| ())
        }
        "public_ids.active_key" => {
            PublicIds::with_options(KEY, &options.with_active_key(Some(value))).map(|_| ())
        }
        _ => unreachable!("{case}"),
    };
    made.expect_err(case)
}

#[test]
fn the_vectors_file_is_embeds_answers() {
    let mut text = HEADER.to_owned();
    for &(case, value) in CASES {
        let e = answer(case, value);
        assert!(e.is_bad_input(), "{case} {value}: {e}");
        text.push_str(&format!("{case}\t{value}\t{}\t{}\n", e.code(), e.message()));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/testdata/bad-input.tsv");
    if std::env::var_os("IDMINT_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == text,
        "{} differs from idmint-embed's answers; run with IDMINT_BLESS=1 to write it:\n{text}",
        path.display()
    );
}

#[test]
fn a_count_is_refused_in_the_cores_words_by_next_ids_too() {
    let g = Generator::new(GeneratorOptions::default().with_worker(3)).unwrap();
    for n in [0, idmint_embed::MAX_BATCH + 1] {
        let e = g.next_ids(n).unwrap_err();
        assert_eq!(e, Generator::check_count(n).unwrap_err());
    }
    assert_eq!(Generator::check_count(5_u64), Ok(5));
}

/// `close_all` closes every generator of the process, so it runs in a
/// child process of its own (this test binary again, this test alone):
/// here it would close the generators of the tests running alongside.
#[test]
fn close_all_closes_what_is_open_and_only_that() {
    const CHILD: &str = "IDMINT_TEST_CLOSE_ALL_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "bad_input::close_all_closes_what_is_open_and_only_that",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "the child failed:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let open = Generator::new(GeneratorOptions::default().with_worker(9)).unwrap();
    let dropped = Generator::new(GeneratorOptions::default().with_worker(10)).unwrap();
    drop(dropped);
    idmint_embed::close_all();
    assert_eq!(open.next_id().unwrap_err().code(), "closed");
    // Its worker ID is free again: a new generator on it is open.
    let again = Generator::new(GeneratorOptions::default().with_worker(9)).unwrap();
    again.next_id().unwrap();
    idmint_embed::close_all();
    idmint_embed::close_all(); // idempotent
    assert_eq!(again.next_id().unwrap_err().code(), "closed");
}
