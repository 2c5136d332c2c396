//! What the fuzz tests of every crate share: the case count, the time bound
//! on each call, the text mutator (valid text with random edits) and the
//! arbitrary-text strategies.
//!
//! proptest stands in for cargo-fuzz, which needs a nightly toolchain this
//! project's machines cannot fetch. The tests run in `cargo test` with a
//! modest case count; `scripts/fuzz` runs every `fuzz_` test in release with
//! a large `PROPTEST_CASES`.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

/// `cases` per test, unless `PROPTEST_CASES` says otherwise (`scripts/fuzz`).
pub fn cases(cases: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() {
        ProptestConfig::default()
    } else {
        ProptestConfig::with_cases(cases)
    }
}

/// Runs `f`, failing the case if it takes longer than `bound`. A slow call
/// is timed twice more and the fastest run counts, so a scheduler stall on a
/// shared machine is not taken for a slow input; a pathological input is slow
/// every time.
pub fn timed<T>(bound: Duration, what: &str, mut f: impl FnMut() -> T) -> Result<T, TestCaseError> {
    let start = Instant::now();
    let out = f();
    let mut fastest = start.elapsed();
    for _ in 0..2 {
        if fastest <= bound {
            break;
        }
        let again = Instant::now();
        f();
        fastest = fastest.min(again.elapsed());
    }
    prop_assert!(fastest <= bound, "{what} took {fastest:?}");
    Ok(out)
}

// ---- Mutations ----

/// One random edit of a text. Positions are taken modulo the text's length,
/// in characters, so every edit applies to every text.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Cut the text here.
    Truncate(usize),
    /// Remove up to this many characters from a position.
    Delete(usize, usize),
    /// Insert a token at a position.
    Insert(usize, String),
    /// Replace one character with any Unicode scalar value.
    Replace(usize, char),
    /// Repeat a stretch of up to this many characters in place.
    Duplicate(usize, usize),
    /// Append digits to one of the text's digit runs (or insert them).
    InflateDigits(usize, String),
    /// Double every separator.
    DoubleSeparators,
    /// Upper-case (`true`) or lower-case the whole text.
    Case(bool),
}

/// Tokens every parser here may choke on.
pub const COMMON_TOKENS: &[&str] = &[
    "",
    ",",
    "=",
    ",,",
    "==",
    ":",
    "-",
    "+",
    ".",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\0",
    "é",
    "🦀",
    "\u{202e}",
    "\u{feff}",
    "0",
    "-1",
    "-0",
    "64",
    "65",
    "255",
    "256",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999",
    "1e3",
    "0x10",
    "NaN",
    "inf",
];

/// A token: a common one, one of the target's own (`extra`), or any short text.
pub fn token(extra: &'static [&'static str]) -> impl Strategy<Value = String> {
    let extra = if extra.is_empty() {
        COMMON_TOKENS
    } else {
        extra
    };
    prop_oneof![
        select(COMMON_TOKENS).prop_map(str::to_owned),
        select(extra).prop_map(str::to_owned),
        "\\PC{0,6}",
    ]
}

pub fn edit(extra: &'static [&'static str]) -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), 1usize..8).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), token(extra)).prop_map(|(at, t)| Edit::Insert(at, t)),
        (any::<usize>(), any::<char>()).prop_map(|(at, c)| Edit::Replace(at, c)),
        (any::<usize>(), 1usize..16).prop_map(|(at, n)| Edit::Duplicate(at, n)),
        (any::<usize>(), "[0-9]{1,40}").prop_map(|(at, d)| Edit::InflateDigits(at, d)),
        Just(Edit::DoubleSeparators),
        any::<bool>().prop_map(Edit::Case),
    ]
}

pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        let len = chars.len();
        let at = |p: usize| p % (len + 1);
        match edit {
            Edit::Truncate(p) => chars.truncate(at(*p)),
            Edit::Delete(p, n) => {
                let start = at(*p);
                chars.drain(start..(start + n).min(len));
            }
            Edit::Insert(p, token) => {
                let start = at(*p);
                chars.splice(start..start, token.chars());
            }
            Edit::Replace(p, c) => {
                if len > 0 {
                    chars[p % len] = *c;
                }
            }
            Edit::Duplicate(p, n) => {
                let start = at(*p);
                let end = (start + n).min(len);
                let copy = chars[start..end].to_vec();
                chars.splice(end..end, copy);
            }
            Edit::InflateDigits(p, digits) => {
                let ends: Vec<usize> = (0..len)
                    .filter(|&i| {
                        chars[i].is_ascii_digit()
                            && chars.get(i + 1).is_none_or(|c| !c.is_ascii_digit())
                    })
                    .collect();
                let start = match ends.as_slice() {
                    [] => at(*p),
                    ends => ends[p % ends.len()] + 1,
                };
                chars.splice(start..start, digits.chars());
            }
            Edit::DoubleSeparators => {
                chars = chars
                    .into_iter()
                    .flat_map(|c| {
                        let n = if ",=:.-/&".contains(c) { 2 } else { 1 };
                        std::iter::repeat_n(c, n)
                    })
                    .collect();
            }
            Edit::Case(upper) => {
                let text: String = chars.iter().collect();
                let text = if *upper {
                    text.to_uppercase()
                } else {
                    text.to_lowercase()
                };
                chars = text.chars().collect();
            }
        }
    }
    chars.into_iter().collect()
}

/// Valid text from `seed`, with one to four edits.
pub fn mutated(
    seed: impl Strategy<Value = String>,
    extra: &'static [&'static str],
) -> impl Strategy<Value = String> {
    (seed, prop::collection::vec(edit(extra), 1..=4)).prop_map(|(text, edits)| apply(&text, &edits))
}

/// Arbitrary text: printable Unicode, anything but a newline, text over
/// `alphabet` (which reaches deeper into a parser), or raw bytes read as UTF-8.
pub fn arbitrary(alphabet: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,80}",
        ".{0,80}",
        proptest::string::string_regex(&format!("[{alphabet}]{{0,60}}")).expect("a valid regex"),
        prop::collection::vec(any::<u8>(), 0..80)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}
