//! Obfuscation benchmarks: the cost per ID of turning an ID into a public ID and
//! its text, as ratios against generating the ID itself in the same run
//! (`Snowflake::next_id` with the default clock, borrowing within 10 s so the
//! layout's cap does not hold it back).
//!
//! `cargo bench -p idmint-core --bench obfuscate` prints a Markdown table (the one
//! in BENCHMARKS.md). Every figure is the median of `IDMINT_BENCH_RUNS` runs
//! (default 7). Without `--bench` (as `cargo test --benches` runs it) it makes a
//! quick smoke run whose figures mean nothing.
//!
//! Same custom harness as `generators.rs`, for the same reason: the figures that
//! matter are ratios between measurements of one run on a shared, noisy machine.

use std::hint::black_box;
use std::time::{Duration, Instant};

use aes::Aes128;
use fpe::ff1::{FF1, FlexibleNumeralString};
use idmint_core::{
    Id, Layout, ObfuscationKey, Obfuscator, PublicId, PublicIdCodec, SequenceExhausted, Snowflake,
    TextFormat,
};
use idmint_testkit::bench::{median, runs};

const KEY_128: &str = "2b7e151628aed2a6abf7158809cf4f3c";
const KEY_256: &str = "2b7e151628aed2a6abf7158809cf4f3cef4359d8d580aa4f7f036d6f04fc6a94";
/// A Twitter-layout ID of 2018; benchmarks obfuscate it and the IDs after it.
const FIRST_ID: u64 = 1_050_118_621_198_921_728;

/// Nanoseconds per call of `f(i)` over `n` calls, `i` counting from 0.
fn cost(n: u64, mut f: impl FnMut(u64) -> u64) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        black_box(f(black_box(i)));
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn obfuscator(hex: &str) -> Obfuscator {
    Obfuscator::new(hex.parse::<ObfuscationKey>().unwrap(), 63).unwrap()
}

fn id(i: u64) -> Id {
    Id::new(FIRST_ID + i).unwrap()
}

struct Row {
    what: String,
    ns: f64,
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick { 1 } else { runs() };
    let n: u64 = if quick { 20_000 } else { 2_000_000 };
    let borrow = SequenceExhausted::Borrow {
        max_lead: Duration::from_secs(10),
    };
    let aes128 = obfuscator(KEY_128);
    let aes256 = obfuscator(KEY_256);
    let base32 = PublicIdCodec::new(TextFormat::Base32);
    let decimal = PublicIdCodec::new(TextFormat::Decimal);
    let sqids = PublicIdCodec::new(TextFormat::Sqids);
    let (aes128, aes256, base32, decimal, sqids) = (&aes128, &aes256, &base32, &decimal, &sqids);

    // Each closure is one measurement; all of them run once per run, interleaved,
    // so drift on the machine hits every row alike.
    type Bench<'a> = (String, u64, Box<dyn FnMut(u64) -> u64 + 'a>);
    let generator = || {
        Snowflake::builder(Layout::TWITTER)
            .with_worker(1)
            .with_sequence_exhausted(borrow)
            .build()
            .unwrap()
    };
    let (g1, g2) = (&generator(), &generator());
    let encoded_base32: Vec<String> = (0..1024)
        .map(|i| base32.encode(aes128.obfuscate(id(i)).unwrap()).unwrap())
        .collect();
    let encoded_sqids: Vec<String> = (0..1024)
        .map(|i| sqids.encode(aes128.obfuscate(id(i)).unwrap()).unwrap())
        .collect();
    let (encoded_base32, encoded_sqids) = (&encoded_base32, &encoded_sqids);
    let fpe_128 = &FF1::<Aes128>::new(&unhex(KEY_128), 2).unwrap();
    let sqids_crate = &sqids::Sqids::default();
    let mut benches: Vec<Bench<'_>> = vec![
        (
            "`Snowflake::next_id`, twitter layout, borrowing (bound 10 s), default clock \
             (baseline)"
                .into(),
            n,
            Box::new(move |_| g1.next_id().unwrap().get()),
        ),
        (
            "`Obfuscator::obfuscate`, 63 bits, AES-128".into(),
            n,
            Box::new(move |i| aes128.obfuscate(id(i)).unwrap().get()),
        ),
        (
            "`Obfuscator::obfuscate`, 63 bits, AES-256".into(),
            n,
            Box::new(move |i| aes256.obfuscate(id(i)).unwrap().get()),
        ),
        (
            "`obfuscate`, chained: each ID is the last public ID (latency, no overlap)".into(),
            n,
            Box::new({
                let mut last = FIRST_ID;
                move |_| {
                    last = aes128.obfuscate(Id::new(last).unwrap()).unwrap().get();
                    last
                }
            }),
        ),
        (
            "Crockford base32 alone (`PublicIdCodec::encode_into`)".into(),
            n,
            Box::new(with_text(move |text, i| {
                base32
                    .encode_into(
                        PublicId::new(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1),
                        text,
                    )
                    .unwrap();
                text.len() as u64
            })),
        ),
        (
            "Sqids alone".into(),
            n,
            Box::new(with_text(move |text, i| {
                sqids
                    .encode_into(
                        PublicId::new(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1),
                        text,
                    )
                    .unwrap();
                text.len() as u64
            })),
        ),
        (
            "`obfuscate` + decimal (`PublicIdCodec::encode_into`)".into(),
            n,
            Box::new(with_text(move |text, i| {
                decimal
                    .encode_into(aes128.obfuscate(id(i)).unwrap(), text)
                    .unwrap();
                text.len() as u64
            })),
        ),
        (
            "`obfuscate` + Crockford base32".into(),
            n,
            Box::new(with_text(move |text, i| {
                base32
                    .encode_into(aes128.obfuscate(id(i)).unwrap(), text)
                    .unwrap();
                text.len() as u64
            })),
        ),
        (
            "`obfuscate` + Sqids (default blocklist)".into(),
            n,
            Box::new(with_text(move |text, i| {
                sqids
                    .encode_into(aes128.obfuscate(id(i)).unwrap(), text)
                    .unwrap();
                text.len() as u64
            })),
        ),
        (
            "`next_id` + `obfuscate` + base32 (the whole path)".into(),
            n,
            Box::new(with_text(move |text, _| {
                let id = g2.next_id().unwrap();
                base32
                    .encode_into(aes128.obfuscate(id).unwrap(), text)
                    .unwrap();
                text.len() as u64
            })),
        ),
        (
            "base32 decode + `Obfuscator::reveal`".into(),
            n,
            Box::new(move |i| {
                let public = base32.decode(&encoded_base32[(i % 1024) as usize]).unwrap();
                aes128.reveal(public).unwrap().get()
            }),
        ),
        (
            "Sqids decode + `Obfuscator::reveal`".into(),
            n,
            Box::new(move |i| {
                let public = sqids.decode(&encoded_sqids[(i % 1024) as usize]).unwrap();
                aes128.reveal(public).unwrap().get()
            }),
        ),
        (
            "peer: `fpe` crate FF1, AES-128, radix 2, 63 numerals".into(),
            n / 100,
            Box::new(move |i| {
                let x = FIRST_ID + i;
                let digits: Vec<u16> = (0..63).rev().map(|k| ((x >> k) & 1) as u16).collect();
                let out: Vec<u16> = fpe_128
                    .encrypt(&[], &FlexibleNumeralString::from(digits))
                    .unwrap()
                    .into();
                out.iter().fold(0, |acc, &d| (acc << 1) | u64::from(d))
            }),
        ),
        (
            "peer: `sqids` crate `Sqids::encode`, one number, default options".into(),
            n / 100,
            Box::new(move |i| {
                let text = sqids_crate.encode(&[i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1]);
                text.unwrap().len() as u64
            }),
        ),
    ];

    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); benches.len()];
    for _ in 0..runs {
        for (bench, sample) in benches.iter_mut().zip(&mut samples) {
            sample.push(cost(bench.1, &mut bench.2));
        }
    }
    let rows: Vec<Row> = benches
        .iter()
        .zip(samples)
        .map(|(bench, sample)| Row {
            what: bench.0.clone(),
            ns: median(sample),
        })
        .collect();
    // Keep the sanity of what was measured visible: a public ID reveals back.
    let public: PublicId = aes128.obfuscate(id(0)).unwrap();
    assert_eq!(aes128.reveal(public).unwrap(), id(0));

    let base = rows[0].ns;
    println!("| measurement (1 thread) | median of {runs} | ratio to `next_id` |");
    println!("|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} ns/ID | {:.2}× |",
            r.what,
            if r.ns < 1000.0 {
                format!("{:.1}", r.ns)
            } else {
                format!("{:.0}", r.ns)
            },
            r.ns / base
        );
    }
}

/// A benchmark body that writes into its own reused `String`, cleared per call.
fn with_text(mut f: impl FnMut(&mut String, u64) -> u64) -> impl FnMut(u64) -> u64 {
    let mut text = String::with_capacity(32);
    move |i| {
        text.clear();
        f(&mut text, i)
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
