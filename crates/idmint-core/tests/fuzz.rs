//! Fuzz tests of every parser in `idmint-core` that reads outside input: the
//! layout text form, the ID decoders (`Id::from_str`, `Layout::decode`,
//! `Layout::compose`), public IDs (the three text forms, `Obfuscator::reveal`,
//! obfuscation keys) and the UUID version and namespace names.
//!
//! Each target gets two kinds of input: valid text with random edits
//! (truncation, deletions, inserted tokens such as doubled separators, huge
//! numbers and non-ASCII characters, replaced characters, inflated digit
//! runs, case changes), and raw arbitrary strings. Every call must return
//! within [`BOUND`] without panicking; a failure must be the typed error the
//! API documents, naming what was wrong; a success must round-trip.
//!
//! Why proptest and not cargo-fuzz: cargo-fuzz (libFuzzer) needs a nightly
//! toolchain, which the machines this project is built on cannot fetch. These
//! run in `cargo test` with a modest case count; `scripts/fuzz` runs every
//! `fuzz_` test in release with `PROPTEST_CASES` (default 200,000).

use std::time::Duration;

use idmint_core::uuid::{Uuid, UuidNamespace, UuidVersion};
use idmint_core::{
    Error, FieldOrder, Id, IdParts, Layout, LayoutSpec, ObfuscationKey, Obfuscator, PublicId,
    PublicIdCodec, TextFormat,
};
use idmint_testkit::fuzz::{self, arbitrary, cases, mutated};
use jiff::Timestamp;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

// ---- Harness ----

/// The longest any one parse may take, generous for a debug build on a busy
/// machine: these parsers are linear in input of at most a few hundred bytes.
const BOUND: Duration = Duration::from_millis(50);

/// [`fuzz::timed`] with this file's [`BOUND`].
fn timed<T>(what: &str, f: impl FnMut() -> T) -> Result<T, TestCaseError> {
    fuzz::timed(BOUND, what, f)
}

/// An error's message must say something, on one line (the CLI prints it as
/// its one stderr line), and the error must count as bad input.
fn check_message(e: &Error) -> Result<(), TestCaseError> {
    let message = e.to_string();
    prop_assert!(!message.trim().is_empty(), "{e:?}");
    prop_assert!(!message.contains('\n'), "{message:?}");
    prop_assert!(e.is_bad_input(), "{e:?} is not bad input");
    Ok(())
}

/// An error quotes its input cut at 64 bytes (then `...`): what it quotes is
/// the start of the input.
fn check_quoted(quoted: &str, input: &str) -> Result<(), TestCaseError> {
    let kept = quoted.strip_suffix("...").unwrap_or(quoted);
    prop_assert!(
        input.starts_with(kept) && kept.len() <= 64,
        "quoted {quoted:?} for input {input:?}"
    );
    Ok(())
}

// ---- Layouts ----

/// A random layout built through the public API. Field widths are drawn so
/// that nearly every combination builds; the rest fall back to a preset
/// rather than being rejected (rejections count against the whole run).
fn any_layout() -> impl Strategy<Value = Layout> {
    (
        (
            16u8..=63,
            1u8..=63,
            1u32..=86_400_000,
            0i64..=7_258_118_400_000,
        ),
        (0u8..=8, 0u8..=16, 0u8..=8, 1u8..=22),
        (any::<bool>(), select(Layout::PRESETS)),
    )
        .prop_map(
            |((max, time, unit, epoch), (dc, worker, rb, seq), (tsn, (_, fallback)))| {
                let epoch = Timestamp::from_millisecond(epoch).expect("epoch in jiff's range");
                let order = if tsn {
                    FieldOrder::TimeSequenceNode
                } else {
                    FieldOrder::TimeNodeSequence
                };
                LayoutSpec::new(time, epoch, seq)
                    .with_unit(Duration::from_millis(u64::from(unit)))
                    .with_datacenter_bits(dc)
                    .with_worker_bits(worker)
                    .with_rollback_bits(rb)
                    .with_order(order)
                    .with_max_bits(max)
                    .build()
                    .unwrap_or(fallback)
            },
        )
}

const LAYOUT_SEEDS: &[&str] = &[
    "twitter",
    "leaf",
    "baidu",
    "sonyflake",
    "discord",
    "instagram",
    "js53",
    "tso",
    "twitter, epoch=2020-01-01 , datacenter=3",
    "leaf,rollback=2",
    "leaf,worker=6",
    "baidu,epoch=2024-01-01",
    "sonyflake,epoch=1409529600000",
    "time=39,unit=10ms,epoch=2014-09-01T00:00:00Z,worker=16,sequence=8,order=tsn",
    "time=30,unit=2s,epoch=2024-06-01,seq=10,max=53",
    "time=41,epoch=2020-01-01T00:00:00.123+02:00,dc=5,worker=5,seq=12,order=time-node-sequence",
];

const LAYOUT_TOKENS: &[&str] = &[
    "time=",
    "unit=",
    "epoch=",
    "node=",
    "datacenter=",
    "dc=",
    "worker=",
    "rollback=",
    "sequence=",
    "seq=",
    "order=",
    "max=",
    "tns",
    "tsn",
    "ms",
    "s",
    "us",
    "1d",
    "86400000ms",
    "86401s",
    "T00:00:00Z",
    "2200-01-01",
    "1969-12-31",
    "9999-12-31T23:59:59.999999999Z",
    "-9999-01-01",
    "twitter",
    ",time=63",
    ",seq=31",
];

fn layout_text() -> impl Strategy<Value = String> {
    prop_oneof![
        select(LAYOUT_SEEDS).prop_map(str::to_owned),
        any_layout().prop_map(|l| l.to_string()),
    ]
}

/// The fields [`Error::InvalidLayout`] may name.
const LAYOUT_FIELDS: &[&str] = &[
    "max", "time", "unit", "sequence", "rollback", "node", "epoch",
];

/// A layout parses to one that prints and parses back to itself, or fails
/// with a layout error naming the bad part (a piece of the text) or field.
fn check_layout_text(text: &str) -> Result<(), TestCaseError> {
    match timed("Layout::from_str", || text.parse::<Layout>())? {
        Ok(layout) => {
            let full = layout.to_string();
            let again = full.parse::<Layout>();
            prop_assert_eq!(&again, &Ok(layout), "{:?} printed as {:?}", text, full);
            prop_assert_eq!(again.expect("checked").to_string(), full);
        }
        Err(e) => {
            check_message(&e)?;
            match &e {
                Error::InvalidLayoutText { part, reason } => {
                    prop_assert!(text.contains(part.as_str()), "part {part:?} of {text:?}");
                    prop_assert!(!reason.is_empty());
                }
                Error::InvalidLayout { field, reason } => {
                    prop_assert!(LAYOUT_FIELDS.contains(field), "{e:?}");
                    prop_assert!(!reason.is_empty());
                }
                other => prop_assert!(false, "{text:?}: unexpected error {other:?}"),
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(5000))]

    #[test]
    fn fuzz_layout_text_mutated(text in mutated(layout_text(), LAYOUT_TOKENS)) {
        check_layout_text(&text)?;
    }

    #[test]
    fn fuzz_layout_text_arbitrary(text in arbitrary("a-z0-9=,:.+ TZ-")) {
        check_layout_text(&text)?;
    }
}

// ---- IDs ----

/// `Id::from_str` reads decimal below 2^63 and nothing else: an `Id` prints
/// as its input without leading zeros; an error is `InvalidId` quoting it.
fn check_id_text(text: &str) -> Result<(), TestCaseError> {
    match timed("Id::from_str", || text.parse::<Id>())? {
        Ok(id) => {
            prop_assert!(id.get() <= Id::MAX.get());
            prop_assert!(id.as_i64() >= 0);
            let trimmed = text.trim_start_matches('0');
            let canonical = if trimmed.is_empty() { "0" } else { trimmed };
            prop_assert_eq!(id.to_string(), canonical);
        }
        Err(e) => {
            check_message(&e)?;
            match &e {
                Error::InvalidId { input, reason } => {
                    check_quoted(input, text)?;
                    prop_assert!(!reason.is_empty());
                }
                other => prop_assert!(false, "{text:?}: unexpected error {other:?}"),
            }
        }
    }
    Ok(())
}

/// A value decodes to parts that compose back to it, or is refused for bits
/// above the layout's width.
fn check_decode(layout: &Layout, value: u64) -> Result<(), TestCaseError> {
    let width = u32::from(layout.usable_time_bits() + layout.node_bits() + layout.sequence_bits());
    match timed("Layout::decode", || layout.decode(value))? {
        Ok(d) => {
            prop_assert!(value >> width == 0);
            prop_assert_eq!(d.id.get(), value);
            prop_assert_eq!(layout.compose(d.parts()), Ok(d.id));
            prop_assert_eq!(d.time, layout.time_of_tick(d.tick));
            prop_assert!(d.time >= layout.epoch());
        }
        Err(e) => {
            check_message(&e)?;
            prop_assert!(value >> width != 0, "{value} refused by {layout}: {e}");
            prop_assert!(
                matches!(&e, Error::InvalidId { reason, .. } if reason.contains("bits set above")),
                "{e:?}"
            );
        }
    }
    Ok(())
}

/// Values worth decoding: anything, an ID of the layout, and an ID of the
/// layout with one more bit set (often above its width).
fn value_for(layout: &Layout) -> impl Strategy<Value = u64> + use<> {
    let layout = *layout;
    let width = u32::from(layout.usable_time_bits() + layout.node_bits() + layout.sequence_bits());
    prop_oneof![
        any::<u64>(),
        any::<u64>().prop_map(move |v| v >> (64 - width)),
        (any::<u64>(), 0u32..64).prop_map(move |(v, bit)| (v >> (64 - width)) | (1 << bit)),
    ]
}

/// Parts as a caller might pass them, in range or not.
fn any_parts() -> impl Strategy<Value = IdParts> {
    let small = || prop_oneof![0u32..64, any::<u32>()];
    (
        prop_oneof![0u64..1 << 20, any::<u64>()],
        small(),
        small(),
        small(),
        small(),
    )
        .prop_map(|(tick, datacenter, worker, rollback, sequence)| IdParts {
            tick,
            datacenter,
            worker,
            rollback,
            sequence,
        })
}

/// `compose` either makes an ID that decodes to the same parts, or names the
/// first field out of range, or says the layout has run out at that tick.
fn check_compose(layout: &Layout, parts: IdParts) -> Result<(), TestCaseError> {
    let fits = |value: u32, bits: u8| u64::from(value) < 1u64 << bits;
    let fields = [
        (
            "datacenter",
            fits(parts.datacenter, layout.datacenter_bits()),
        ),
        ("worker", fits(parts.worker, layout.worker_bits())),
        ("rollback", fits(parts.rollback, layout.rollback_bits())),
        ("sequence", fits(parts.sequence, layout.sequence_bits())),
    ];
    let first_bad = fields.iter().find(|(_, ok)| !ok).map(|(name, _)| *name);
    match timed("Layout::compose", || layout.compose(parts))? {
        Ok(id) => {
            prop_assert_eq!(first_bad, None);
            prop_assert!(id.get() < 1u64 << layout.max_bits());
            prop_assert_eq!(layout.decode(id.get()).map(|d| d.parts()), Ok(parts));
        }
        Err(Error::NodeOutOfRange { field, value, max }) => {
            prop_assert_eq!(Some(field), first_bad);
            prop_assert!(value > max);
        }
        Err(Error::LayoutExhausted { .. }) => {
            prop_assert_eq!(first_bad, None);
            prop_assert!(parts.tick >= layout.ticks());
        }
        Err(other) => prop_assert!(false, "unexpected error {other:?}"),
    }
    Ok(())
}

fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        (0..=Id::MAX.get()).prop_map(|v| v.to_string()),
        select(&["0", "9223372036854775807", "175928847299117063"][..]).prop_map(str::to_owned),
    ]
}

proptest! {
    #![proptest_config(cases(5000))]

    #[test]
    fn fuzz_id_text_mutated(text in mutated(id_text(), &[])) {
        check_id_text(&text)?;
    }

    #[test]
    fn fuzz_id_text_arbitrary(text in arbitrary("0-9+ e.x-")) {
        check_id_text(&text)?;
    }

    #[test]
    fn fuzz_layout_decode(
        (layout, value) in any_layout().prop_flat_map(|l| (Just(l), value_for(&l))),
    ) {
        check_decode(&layout, value)?;
    }

    #[test]
    fn fuzz_layout_compose(layout in any_layout(), parts in any_parts()) {
        check_compose(&layout, parts)?;
    }
}

// ---- Public IDs ----

const FORMATS: [TextFormat; 3] = [TextFormat::Decimal, TextFormat::Base32, TextFormat::Sqids];

/// The canonical base32 of what `text` spells: upper case, Crockford's
/// aliases read, no leading zeros.
fn base32_canonical(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| match c.to_ascii_uppercase() {
            'I' | 'L' => '1',
            'O' => '0',
            c => c,
        })
        .collect();
    let trimmed = mapped.trim_start_matches('0');
    if trimmed.is_empty() {
        "0".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// A public ID's text reads back to a value whose text is the input (up to
/// what the form ignores), or fails with `InvalidPublicId` quoting it.
fn check_public_text(codec: &PublicIdCodec, text: &str) -> Result<(), TestCaseError> {
    let format = codec.format();
    match timed("PublicIdCodec::decode", || codec.decode(text))? {
        Ok(public) => {
            let written = codec
                .encode(public)
                .expect("decimal and base32 never fail; sqids wrote it");
            match format {
                TextFormat::Decimal => {
                    let trimmed = text.trim_start_matches('0');
                    prop_assert_eq!(written, if trimmed.is_empty() { "0" } else { trimmed });
                }
                TextFormat::Base32 => prop_assert_eq!(written, base32_canonical(text)),
                // Only the one canonical string per value is accepted.
                _ => prop_assert_eq!(written, text),
            }
            if format == TextFormat::Decimal {
                prop_assert_eq!(text.parse::<PublicId>(), Ok(public));
            }
        }
        Err(e) => {
            check_message(&e)?;
            match &e {
                Error::InvalidPublicId { input, reason } => {
                    check_quoted(input, text)?;
                    prop_assert!(!reason.is_empty());
                }
                other => prop_assert!(false, "{format} {text:?}: unexpected error {other:?}"),
            }
        }
    }
    Ok(())
}

fn public_text() -> impl Strategy<Value = (TextFormat, String)> {
    (select(&FORMATS[..]), any::<u64>()).prop_map(|(format, value)| {
        let text = PublicIdCodec::new(format)
            .encode(PublicId::new(value))
            .expect("every u64 encodes");
        (format, text)
    })
}

const PUBLIC_TOKENS: &[&str] = &[
    "U",
    "I",
    "L",
    "O",
    "o",
    "_",
    "G000000000000",
    "ZZZZZZZZZZZZZ",
    "bM",
];

/// Obfuscators of every width and key-ID split, with keys 0 and 1 configured
/// (when the split has room for two): one per key, each with it active, so a
/// public ID of either key can be checked against the obfuscator that made it.
fn any_obfuscators() -> impl Strategy<Value = Vec<Obfuscator>> {
    (32u8..=64, 0u8..=8, any::<bool>()).prop_map(|(bits, key_id_bits, aes256)| {
        let key_id_bits = key_id_bits.min(bits - 32);
        let hex = if aes256 {
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        } else {
            "2b7e151628aed2a6abf7158809cf4f3c"
        };
        let key = |hex: &str| hex.parse::<ObfuscationKey>().expect("a valid key");
        let key_ids: &[u8] = if key_id_bits > 0 { &[0, 1] } else { &[0] };
        key_ids
            .iter()
            .map(|&active| {
                let mut builder = Obfuscator::builder(bits)
                    .with_key_id_bits(key_id_bits)
                    .with_key(0, key(hex));
                if key_id_bits > 0 {
                    builder = builder.with_key(1, key("8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0"));
                }
                builder
                    .with_active_key(active)
                    .build()
                    .expect("a valid split")
            })
            .collect()
    })
}

/// `reveal` of any value: an ID that the obfuscator of the key it names
/// obfuscates back to the value, or a typed refusal (outside the width, no
/// key for its key ID, or above 2^63 − 1).
fn check_reveal(obfuscators: &[Obfuscator], value: u64) -> Result<(), TestCaseError> {
    let obfuscator = &obfuscators[0];
    let public = PublicId::new(value);
    let key_id = value.checked_shr(obfuscator.id_bits().into()).unwrap_or(0);
    match timed("Obfuscator::reveal", || obfuscator.reveal(public))? {
        Ok(id) => {
            let maker = obfuscators
                .iter()
                .find(|o| u64::from(o.active_key_id()) == key_id);
            prop_assert!(
                maker.is_some(),
                "{value} revealed under unknown key {key_id}"
            );
            prop_assert_eq!(maker.expect("checked").obfuscate(id), Ok(public));
        }
        Err(e) => {
            check_message(&e)?;
            let bits = u32::from(obfuscator.bits());
            match &e {
                Error::InvalidPublicId { input, .. } => {
                    prop_assert_eq!(input, &value.to_string());
                    let too_wide = bits < 64 && value >> bits != 0;
                    prop_assert!(too_wide || obfuscator.id_bits() == 64, "{e}");
                }
                Error::UnknownKeyId {
                    public: p,
                    key_id: k,
                } => {
                    prop_assert_eq!(*p, value);
                    prop_assert_eq!(u64::from(*k), key_id);
                    prop_assert!(obfuscator.key_ids().all(|configured| configured != *k));
                }
                other => prop_assert!(false, "{value}: unexpected error {other:?}"),
            }
        }
    }
    Ok(())
}

/// A key reads from 32 or 64 hex digits, or fails with `InvalidKey` whose
/// message never quotes the text.
fn check_key_text(text: &str) -> Result<(), TestCaseError> {
    match timed("ObfuscationKey::from_hex", || {
        text.parse::<ObfuscationKey>()
    })? {
        Ok(key) => {
            prop_assert!(text.len() == 32 || text.len() == 64);
            prop_assert!(text.bytes().all(|b| b.is_ascii_hexdigit()));
            prop_assert_eq!(key.bits() as usize, text.len() * 4);
        }
        Err(e) => {
            check_message(&e)?;
            prop_assert!(matches!(e, Error::InvalidKey { .. }), "{e:?}");
            if text.len() >= 16 {
                prop_assert!(!e.to_string().contains(text), "{e} quotes the key");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(5000))]

    #[test]
    fn fuzz_public_id_text_mutated(
        (format, text) in public_text().prop_flat_map(|(format, text)| {
            (Just(format), mutated(Just(text), PUBLIC_TOKENS))
        }),
    ) {
        check_public_text(&PublicIdCodec::new(format), &text)?;
    }

    #[test]
    fn fuzz_public_id_text_arbitrary(
        format in select(&FORMATS[..]),
        text in arbitrary("0-9a-zA-Z_ -"),
    ) {
        check_public_text(&PublicIdCodec::new(format), &text)?;
    }

    #[test]
    fn fuzz_reveal(obfuscators in any_obfuscators(), value in any::<u64>(), shift in 0u32..64) {
        check_reveal(&obfuscators, value)?;
        check_reveal(&obfuscators, value >> shift)?;
    }

    #[test]
    fn fuzz_obfuscation_key_text(
        text in prop_oneof![
            mutated("[0-9a-fA-F]{32}|[0-9a-fA-F]{64}", &[]),
            arbitrary("0-9a-fA-Fg-z"),
        ],
    ) {
        check_key_text(&text)?;
    }
}

// ---- UUID names ----

/// A name parses to a value whose text parses back to it, or fails with
/// `InvalidConfig` quoting the input (as `{:?}` writes it).
fn check_name<T>(
    what: &str,
    text: &str,
    parse: impl Fn(&str) -> Result<T, Error>,
) -> Result<(), TestCaseError>
where
    T: std::fmt::Display + PartialEq + std::fmt::Debug,
{
    match timed(what, || parse(text))? {
        Ok(value) => prop_assert_eq!(parse(&value.to_string()), Ok(value)),
        Err(e) => {
            check_message(&e)?;
            prop_assert!(
                matches!(&e, Error::InvalidConfig(m) | Error::InvalidObfuscator(m) if m.contains(&format!("{text:?}"))),
                "{what} {text:?}: {e:?}"
            );
        }
    }
    Ok(())
}

fn uuid_texts() -> impl Strategy<Value = String> {
    prop_oneof![
        select(
            &[
                "1", "v3", "V4", "5", "v7", "dns", "URL", "oid", "x500", "dec", "decimal",
                "base32", "sqids"
            ][..]
        )
        .prop_map(str::to_owned),
        any::<u128>().prop_map(|v| Uuid::from_u128(v).hyphenated().to_string()),
        any::<u128>().prop_map(|v| Uuid::from_u128(v).simple().to_string()),
        any::<u128>().prop_map(|v| Uuid::from_u128(v).braced().to_string()),
        any::<u128>().prop_map(|v| Uuid::from_u128(v).urn().to_string()),
        Just(Uuid::NAMESPACE_DNS.to_string()),
    ]
}

proptest! {
    #![proptest_config(cases(5000))]

    #[test]
    fn fuzz_uuid_names(
        text in prop_oneof![
            mutated(uuid_texts(), &["v", "V", "{", "}", "urn:uuid:", "-"]),
            arbitrary("0-9a-fvV{}:-"),
        ],
    ) {
        check_name("UuidVersion::from_str", &text, str::parse::<UuidVersion>)?;
        check_name("UuidNamespace::from_str", &text, str::parse::<UuidNamespace>)?;
        check_name("TextFormat::from_str", &text, str::parse::<TextFormat>)?;
    }
}
