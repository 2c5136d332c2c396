//! Tests of the obfuscator, its keys and the text forms. FF1 itself (NIST's
//! samples, agreement with the `fpe` crate) is tested in `ff1.rs`.

use proptest::prelude::*;

use super::*;

const KEY_A: &str = "2b7e151628aed2a6abf7158809cf4f3c";
const KEY_B: &str = "000102030405060708090a0b0c0d0e0f";

fn key(hex: &str) -> ObfuscationKey {
    hex.parse().unwrap()
}

fn id(value: u64) -> Id {
    Id::new(value).unwrap()
}

/// A key of 16 or 32 random bytes (never all zero: one byte is forced non-zero).
fn any_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 16),
        proptest::collection::vec(any::<u8>(), 32)
    ]
    .prop_map(|mut bytes| {
        bytes[0] |= 1;
        bytes
    })
}

/// (bits, key_id_bits): every width, and every key-ID split it allows.
fn any_split() -> impl Strategy<Value = (u8, u8)> {
    (MIN_ID_BITS..=MAX_BITS)
        .prop_flat_map(|bits| (Just(bits), 0..=MAX_KEY_ID_BITS.min(bits - MIN_ID_BITS)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Over random keys, widths and key-ID splits: reveal inverts obfuscate, public
    /// IDs stay within the width, and their top bits name the active key.
    #[test]
    fn reveal_inverts_obfuscate(
        key_bytes in any_key(),
        other_key in any_key(),
        (bits, key_id_bits) in any_split(),
        key_id in any::<u8>(),
        raw in any::<u64>(),
    ) {
        let key_id = (u16::from(key_id) % (1 << key_id_bits)) as u8;
        let other_id = key_id ^ u8::from(key_id_bits > 0);
        let mut builder = Obfuscator::builder(bits)
            .with_key_id_bits(key_id_bits)
            .with_key(key_id, ObfuscationKey::from_bytes(&key_bytes).unwrap());
        if key_id_bits > 0 {
            builder = builder
                .with_key(other_id, ObfuscationKey::from_bytes(&other_key).unwrap())
                .with_active_key(key_id);
        }
        let obfuscator = builder.build().unwrap();
        let id_bits = bits - key_id_bits;
        prop_assert_eq!(obfuscator.id_bits(), id_bits);
        let value = (raw >> (64 - id_bits)) & Id::MAX.get();
        let public = obfuscator.obfuscate(id(value)).unwrap();
        if bits < 64 {
            prop_assert!(public.get() < 1 << bits);
        }
        prop_assert_eq!(public.get().checked_shr(id_bits.into()).unwrap_or(0), u64::from(key_id));
        prop_assert_eq!(obfuscator.reveal(public).unwrap(), id(value));
    }

    /// Every text form reads back what it writes, for any `u64`.
    #[test]
    fn text_forms_round_trip(value in any::<u64>()) {
        for format in [TextFormat::Decimal, TextFormat::Base32, TextFormat::Sqids] {
            let codec = PublicIdCodec::new(format);
            let text = codec.encode(PublicId::new(value)).unwrap();
            prop_assert_eq!(codec.decode(&text).unwrap().get(), value, "{} {}", format, text);
        }
    }

    /// Base32 decoding ignores case and reads Crockford's aliases.
    #[test]
    fn base32_reads_case_and_aliases(value in any::<u64>()) {
        let text = base32::encode(value);
        prop_assert!(text.len() <= base32::MAX_LEN);
        prop_assert!(!text.contains(['I', 'L', 'O', 'U']));
        prop_assert_eq!(base32::decode(&text.to_lowercase()), Ok(value));
        let aliased: String = text
            .chars()
            .map(|c| match c {
                '0' => 'o',
                '1' => 'L',
                c => c,
            })
            .collect();
        prop_assert_eq!(base32::decode(&aliased), Ok(value));
        let aliased = text.replace('1', "i").replace('0', "O");
        prop_assert_eq!(base32::decode(&aliased), Ok(value));
    }
}

/// The permutation, checked exhaustively on widths small enough to enumerate:
/// every value maps to a distinct value of the width, and decrypts back. FF1
/// itself is the same code for every width (the public API's floor of 32 bits is
/// a security floor, not a limit of the construction), so this is the Feistel
/// network the obfuscator runs, under both key sizes, for an even and an odd split.
#[test]
fn permutation_is_a_bijection_on_small_widths() {
    let wide = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    for hex in [KEY_A, wide] {
        for n in [16u8, 17] {
            let ff1 = KeyedFf1::new(&key(hex), n);
            let v = u32::from(n - n / 2);
            let size = 1usize << n;
            let mut seen = vec![false; size];
            for x in 0..size as u64 {
                let y = ff1.encrypt(x, v);
                assert!(y < size as u64, "{n} bits: {x} -> {y}");
                assert!(!seen[y as usize], "{n} bits: {y} reached twice");
                seen[y as usize] = true;
                assert_eq!(ff1.decrypt(y, v), x);
            }
            assert!(seen.iter().all(|&s| s));
        }
    }
}

/// Consecutive internal IDs (what a snowflake generator issues within a tick and
/// across ticks) give public IDs with no visible order: over a million of them,
/// about half of the consecutive pairs decrease, and each bit is set about half
/// the time.
#[test]
fn consecutive_ids_show_no_order() {
    const N: u64 = 1_000_000;
    let obfuscator = Obfuscator::new(key(KEY_A), 63).unwrap();
    // A Twitter-layout ID of 2018 (the API docs' example tweet) and the next million.
    let start = 1_050_118_621_198_921_728;
    let mut decreases = 0u64;
    let mut ones = [0u64; 63];
    let mut previous = obfuscator.obfuscate(id(start)).unwrap().get();
    for value in start + 1..=start + N {
        let public = obfuscator.obfuscate(id(value)).unwrap().get();
        decreases += u64::from(public < previous);
        for (bit, count) in ones.iter_mut().enumerate() {
            *count += (public >> bit) & 1;
        }
        previous = public;
    }
    // For independent fair coins the standard deviation is 0.0005; allow 10 of them.
    let share = decreases as f64 / N as f64;
    assert!((share - 0.5).abs() < 0.005, "{share} of pairs decrease");
    for (bit, count) in ones.iter().enumerate() {
        let share = *count as f64 / N as f64;
        assert!((share - 0.5).abs() < 0.005, "bit {bit} set in {share}");
    }
}

/// Fixed answers, so that no refactoring can silently change every public ID in
/// the world. They are FF1-AES-128, radix 2, empty tweak (the `fpe` crate gives
/// the same: see `ff1::tests::binary_matches_the_fpe_crate`).
#[test]
fn known_answers() {
    let cases: [(u8, u64, u64); 4] = [
        (63, 0, 7_407_393_923_982_924_685),
        (63, 1_050_118_621_198_921_728, 7_175_602_343_469_354_441),
        (53, 42, 6_524_755_277_098_949),
        (32, 4_294_967_295, 33_434_143),
    ];
    for (bits, value, public) in cases {
        let obfuscator = Obfuscator::new(key(KEY_A), bits).unwrap();
        assert_eq!(
            obfuscator.obfuscate(id(value)).unwrap().get(),
            public,
            "{bits} bits, {value}"
        );
    }
}

#[test]
fn another_key_does_not_reveal_the_id() {
    let a = Obfuscator::new(key(KEY_A), 63).unwrap();
    let b = Obfuscator::new(key(KEY_B), 63).unwrap();
    for value in (0..1000).map(|i| 1_050_118_621_198_921_728 + i * 7919) {
        let public = a.obfuscate(id(value)).unwrap();
        assert_ne!(b.obfuscate(id(value)).unwrap(), public);
        // A permutation has no wrong answers: b reveals *something*, not the ID.
        assert_ne!(b.reveal(public).unwrap(), id(value));
    }
    // Nor does the same key at another width.
    let narrower = Obfuscator::new(key(KEY_A), 62).unwrap();
    let public = narrower.obfuscate(id(12345)).unwrap();
    assert_ne!(a.reveal(public).unwrap(), id(12345));
}

#[test]
fn unknown_key_id_is_a_typed_error() {
    let two_keys = Obfuscator::builder(64)
        .with_key_id_bits(1)
        .with_key(0, key(KEY_A))
        .with_key(1, key(KEY_B))
        .build()
        .unwrap();
    assert_eq!(two_keys.active_key_id(), 1);
    let public = two_keys.obfuscate(id(7)).unwrap();
    assert_eq!(public.get() >> 63, 1);

    let key_0_only = Obfuscator::builder(64)
        .with_key_id_bits(1)
        .with_key(0, key(KEY_A))
        .build()
        .unwrap();
    let err = key_0_only.reveal(public).unwrap_err();
    assert_eq!(
        err,
        Error::UnknownKeyId {
            public: public.get(),
            key_id: 1
        }
    );
    assert!(err.is_bad_input());
    assert!(
        err.to_string().contains("key ID 1, which has no key here"),
        "{err}"
    );
    // Key 0's public IDs still reveal under both.
    let old = key_0_only.obfuscate(id(7)).unwrap();
    assert_eq!(two_keys.reveal(old).unwrap(), id(7));

    // Eight slots in a 63-bit public ID, keys 3 and 5 configured.
    let sparse = Obfuscator::builder(63)
        .with_key_id_bits(3)
        .with_key(3, key(KEY_A))
        .with_key(5, key(KEY_B))
        .with_active_key(3)
        .build()
        .unwrap();
    let public = sparse.obfuscate(id(99)).unwrap();
    assert_eq!(public.get() >> 60, 3);
    assert_eq!(sparse.reveal(public).unwrap(), id(99));
    let slot_6 = PublicId::new((6 << 60) | (public.get() & ((1 << 60) - 1)));
    assert_eq!(sparse.reveal(slot_6).unwrap_err().code(), "unknown_key_id");
}

#[test]
fn out_of_range_numbers_are_typed_errors() {
    let js = Obfuscator::new(key(KEY_A), 53).unwrap();
    let err = js.obfuscate(id(1 << 53)).unwrap_err();
    assert_eq!(err.code(), "invalid_id");
    assert!(err.to_string().contains("above 2^53 - 1"), "{err}");
    assert!(js.obfuscate(id((1 << 53) - 1)).is_ok());

    let err = js.reveal(PublicId::new(1 << 53)).unwrap_err();
    assert_eq!(err.code(), "invalid_public_id");
    assert!(err.to_string().contains("above 2^53 - 1"), "{err}");
    assert!(err.is_bad_input());

    let split = Obfuscator::builder(63)
        .with_key_id_bits(2)
        .with_key(0, key(KEY_A))
        .build()
        .unwrap();
    assert_eq!(
        split.obfuscate(id(1 << 61)).unwrap_err().code(),
        "invalid_id"
    );

    // 64-bit public IDs with no key bits: half of all values reveal above 2^63 - 1,
    // which is no ID; that is a typed error, never a wrapped or negative ID.
    let full = Obfuscator::new(key(KEY_A), 64).unwrap();
    let (mut ok, mut refused) = (0, 0);
    for raw in (0..2000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) {
        match full.reveal(PublicId::new(raw)) {
            Ok(revealed) => {
                ok += 1;
                assert_eq!(full.obfuscate(revealed).unwrap().get(), raw);
            }
            Err(err) => {
                refused += 1;
                assert_eq!(err.code(), "invalid_public_id");
                assert!(
                    err.to_string()
                        .contains("reveals to a value above 2^63 - 1")
                );
            }
        }
    }
    assert!(
        ok > 800 && refused > 800,
        "{ok} revealed, {refused} refused"
    );
    assert_eq!(
        full.obfuscate(Id::MAX).map(|p| full.reveal(p)),
        Ok(Ok(Id::MAX))
    );
}

#[test]
fn builder_rejects_settings_that_do_not_fit() {
    let cases: [(ObfuscatorBuilder, &str); 9] = [
        (
            Obfuscator::builder(31).with_key(0, key(KEY_A)),
            "width 31 bits is out of range",
        ),
        (
            Obfuscator::builder(65).with_key(0, key(KEY_A)),
            "width 65 bits is out of range",
        ),
        (
            Obfuscator::builder(64)
                .with_key_id_bits(9)
                .with_key(0, key(KEY_A)),
            "9 key ID bits is out of range",
        ),
        (
            Obfuscator::builder(39)
                .with_key_id_bits(8)
                .with_key(0, key(KEY_A)),
            "leave 31 bits of a 39-bit public ID",
        ),
        (Obfuscator::builder(63), "no key"),
        (
            Obfuscator::builder(63).with_key(1, key(KEY_A)),
            "key ID 1 does not fit in 0 key ID bits",
        ),
        (
            Obfuscator::builder(64)
                .with_key_id_bits(1)
                .with_key(2, key(KEY_A)),
            "key ID 2 does not fit in 1 key ID bits (0..=1)",
        ),
        (
            Obfuscator::builder(64)
                .with_key_id_bits(1)
                .with_key(0, key(KEY_A))
                .with_key(0, key(KEY_B)),
            "key ID 0 is given twice",
        ),
        (
            Obfuscator::builder(64)
                .with_key_id_bits(1)
                .with_key(0, key(KEY_A))
                .with_active_key(1),
            "the active key ID 1 has no key",
        ),
    ];
    for (builder, needle) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err.code(), "invalid_obfuscator");
        assert!(err.is_bad_input());
        assert!(err.to_string().contains(needle), "{err} lacks {needle:?}");
    }
    for bits in [32, 53, 63, 64] {
        assert_eq!(Obfuscator::new(key(KEY_A), bits).unwrap().bits(), bits);
    }
}

#[test]
fn keys_never_show() {
    let secret = "5ec7e75ec7e75ec7e75ec7e75ec7e75e";
    let k = key(secret);
    assert_eq!(k.bits(), 128);
    assert_eq!(format!("{k:?}"), "ObfuscationKey(128-bit, redacted)");
    let builder = Obfuscator::builder(63).with_key(0, k);
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains("5ec7") && !shown.contains("94, 199"),
        "{shown}"
    );
    let obfuscator = builder.build().unwrap();
    let shown = format!("{obfuscator:?} {obfuscator:#?}");
    assert!(!shown.contains("5ec7") && !shown.contains("rk"), "{shown}");

    let k = key(&secret.repeat(2).to_uppercase());
    assert_eq!(k.bits(), 256);

    // Errors describe the key's shape, never its text.
    for (bad, needle) in [
        ("5ec7e75ec7e75ec7e75ec7e75ec7e7", "not 30"),
        ("5ec7e75ec7e75ec7e75ec7e75ec7e75e5e", "not 34"),
        (
            "5ec7e75ec7e75ec7e75ec7e75ec7e7zz",
            "character 31 is not a hex digit",
        ),
        ("", "not 0"),
        (
            " 5ec7e75ec7e75ec7e75ec7e75ec7e75e",
            "character 1 is not a hex digit",
        ),
        ("00000000000000000000000000000000", "all zeros"),
    ] {
        let err = bad.parse::<ObfuscationKey>().unwrap_err();
        assert_eq!(err.code(), "invalid_key");
        assert!(err.is_bad_input());
        let message = err.to_string();
        assert!(message.contains(needle), "{message} lacks {needle:?}");
        assert!(
            !message.contains("5ec7e7") && !message.contains("0000"),
            "{message}"
        );
    }
    assert_eq!(
        ObfuscationKey::from_bytes(&[1; 24]).unwrap_err().code(),
        "invalid_key"
    );
}

#[test]
fn malformed_text_is_a_typed_error() {
    let too_long = "1".repeat(100);
    let cases: &[(TextFormat, &str, &str)] = &[
        (TextFormat::Decimal, "", "empty"),
        (TextFormat::Decimal, "-1", "not a decimal number"),
        (TextFormat::Decimal, "+1", "not a decimal number"),
        (TextFormat::Decimal, "1.5", "not a decimal number"),
        (TextFormat::Decimal, " 1", "not a decimal number"),
        (
            TextFormat::Decimal,
            "18446744073709551616",
            "above 2^64 - 1",
        ),
        (TextFormat::Base32, "", "empty"),
        (TextFormat::Base32, "U", "character 1 is not one of"),
        (TextFormat::Base32, "AB-C", "character 3 is not one of"),
        (TextFormat::Base32, "é", "character 1"),
        (TextFormat::Base32, "G000000000000", "above 2^64 - 1"),
        (TextFormat::Base32, &too_long, "above 2^64 - 1"),
        (TextFormat::Sqids, "", "empty"),
        (TextFormat::Sqids, "ab_cd", "only letters and digits"),
        (TextFormat::Sqids, &too_long, "longer than 32 characters"),
    ];
    for &(format, text, needle) in cases {
        let err = PublicIdCodec::new(format).decode(text).unwrap_err();
        assert_eq!(err.code(), "invalid_public_id", "{format} {text:?}");
        assert!(err.is_bad_input());
        let message = err.to_string();
        assert!(
            message.contains(needle),
            "{format} {text:?}: {message} lacks {needle:?}"
        );
    }
    // Error messages quote at most 64 characters of the input.
    let err = PublicIdCodec::new(TextFormat::Decimal)
        .decode(&too_long)
        .unwrap_err();
    assert!(err.to_string().contains(&format!("{}...", &too_long[..64])));
    assert!(!err.to_string().contains(&too_long[..65]));

    // Sqids reads several numbers, or non-canonical spellings, as numbers; the
    // codec accepts only the one string it writes for one value.
    let sqids = PublicIdCodec::new(TextFormat::Sqids);
    let reference = sqids::Sqids::default();
    let pair = reference.encode(&[1, 2]).unwrap();
    let err = sqids.decode(&pair).unwrap_err();
    assert!(
        err.to_string()
            .contains("not the Sqids string of one 64-bit value"),
        "{err}"
    );
    let text = sqids
        .encode(PublicId::new(7_031_742_349_577_331_321))
        .unwrap();
    let mut altered = 0;
    for prefix in sqids::DEFAULT_ALPHABET.chars() {
        let other = format!("{prefix}{}", &text[1..]);
        if other != text {
            let err = sqids.decode(&other).unwrap_err();
            assert_eq!(err.code(), "invalid_public_id", "{other}");
            altered += 1;
        }
    }
    assert_eq!(altered, 61);
    // Overflow: a value above 2^64 - 1 in Sqids symbols.
    let err = sqids.decode("bMZZZZZZZZZZZZZZ").unwrap_err();
    assert_eq!(err.code(), "invalid_public_id");
}

#[test]
fn text_forms_have_names() {
    for format in [TextFormat::Decimal, TextFormat::Base32, TextFormat::Sqids] {
        assert_eq!(format.as_str().parse::<TextFormat>().unwrap(), format);
        assert_eq!(PublicIdCodec::new(format).format(), format);
    }
    assert_eq!(
        "decimal".parse::<TextFormat>().unwrap(),
        TextFormat::Decimal
    );
    let err = "hex".parse::<TextFormat>().unwrap_err();
    assert_eq!(err.code(), "invalid_obfuscator");
    assert!(err.to_string().contains(r#"unknown text format "hex""#));
}

#[test]
fn public_ids_parse_as_decimal() {
    assert_eq!("0".parse::<PublicId>().unwrap(), PublicId::new(0));
    assert_eq!(
        "18446744073709551615".parse::<PublicId>().unwrap().get(),
        u64::MAX
    );
    assert_eq!(
        "x".parse::<PublicId>().unwrap_err().code(),
        "invalid_public_id"
    );
    assert_eq!(u64::from(PublicId::from(5)), 5);
}
