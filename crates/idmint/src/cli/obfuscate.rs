//! `idmint obfuscate ID...`: IDs turned into public IDs with a keyed permutation
//! (FF1-AES, see `idmint_core::obfuscate`), and the key handling `reveal` shares.
//!
//! Keys come from `--key-file PATH` or, without it, the `IDMINT_OBFUSCATION_KEY`
//! environment variable; never from an argument, which would leave them in shell
//! history and `ps`. Either holds one or more entries separated by whitespace or
//! commas, `#` starting a comment: `HEX` (key ID 0) or `KEY_ID:HEX`, each key 32
//! or 64 hex digits. No message ever contains a key.
//!
//! All input is read and checked before anything is written, so bad input leaves
//! stdout empty.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use idmint_core::{Id, ObfuscationKey, Obfuscator, PublicIdCodec, TextFormat};

use super::bad_input;

/// The environment variable that holds the obfuscation key(s).
pub const KEY_ENV: &str = "IDMINT_OBFUSCATION_KEY";

/// The text form of public IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum PublicFormat {
    /// Decimal.
    #[default]
    Dec,
    /// Crockford base32 (upper case; any case and I/L/O aliases on input).
    Base32,
    /// Sqids with the default alphabet and blocklist.
    Sqids,
}

impl From<PublicFormat> for TextFormat {
    fn from(format: PublicFormat) -> TextFormat {
        match format {
            PublicFormat::Dec => TextFormat::Decimal,
            PublicFormat::Base32 => TextFormat::Base32,
            PublicFormat::Sqids => TextFormat::Sqids,
        }
    }
}

/// The settings `obfuscate` and `reveal` share: they must match for a public ID to
/// reveal.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// Width of public IDs in bits, 32 to 64: 63 keeps them positive i64s, 53
    /// JavaScript-safe.
    #[arg(long, value_name = "N", default_value_t = 63)]
    bits: u8,

    /// Top bits of each public ID that name the key that made it (0 to 8), so keys
    /// can rotate; IDs must then fit in BITS minus these.
    #[arg(long, value_name = "K", default_value_t = 0)]
    key_id_bits: u8,

    /// Read the key(s) from this file instead of $IDMINT_OBFUSCATION_KEY.
    #[arg(long, value_name = "PATH")]
    key_file: Option<PathBuf>,

    /// Text form of public IDs: decimal, Crockford base32 or Sqids.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = PublicFormat::Dec)]
    format: PublicFormat,
}

impl KeyArgs {
    /// The obfuscator these settings and keys describe; `active` picks the key
    /// that makes new public IDs (default: the last one listed).
    pub fn obfuscator(&self, active: Option<u8>) -> Result<Obfuscator> {
        let keyring = match &self.key_file {
            // A key file that can't be read is the path the user typed: bad input.
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| bad_input(format!("cannot read key file {}: {e}", path.display())))?,
            None => match std::env::var(KEY_ENV) {
                Ok(text) => text,
                Err(std::env::VarError::NotPresent) => {
                    return Err(bad_input(format!(
                        "no obfuscation key: set {KEY_ENV} to a hex key or pass \
                         --key-file PATH (make a key with `openssl rand -hex 16`)"
                    )));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(bad_input(format!("{KEY_ENV} is not valid UTF-8")));
                }
            },
        };
        let mut builder = Obfuscator::builder(self.bits).with_key_id_bits(self.key_id_bits);
        for (key_id, key) in parse_keyring(&keyring)? {
            builder = builder.with_key(key_id, key);
        }
        if let Some(key_id) = active {
            builder = builder.with_active_key(key_id);
        }
        Ok(builder.build()?)
    }

    /// The codec for `--format`.
    pub fn codec(&self) -> PublicIdCodec {
        PublicIdCodec::new(self.format.into())
    }
}

/// The entries of a key file or of the environment variable, in order.
///
/// Errors name the entry by its position, never by its text: it holds a key.
fn parse_keyring(text: &str) -> Result<Vec<(u8, ObfuscationKey)>> {
    let entries = text
        .lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .flat_map(|line| line.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|entry| !entry.is_empty());
    let mut keys = Vec::new();
    for (n, entry) in entries.enumerate() {
        let (key_id, hex) = match entry.split_once(':') {
            Some((key_id, hex)) => {
                let key_id = key_id.parse::<u8>().map_err(|_| {
                    bad_input(format!(
                        "key entry {}: the key ID before ':' is not a number from 0 to 255",
                        n + 1
                    ))
                })?;
                (key_id, hex)
            }
            None => (0, entry),
        };
        let key = ObfuscationKey::from_hex(hex).with_context(|| format!("key entry {}", n + 1))?;
        keys.push((key_id, key));
    }
    if keys.is_empty() {
        return Err(bad_input(
            "the obfuscation key source is empty: give a key as 32 or 64 hex digits",
        ));
    }
    Ok(keys)
}

/// The positional inputs, with `-` replaced by whitespace-separated words on stdin.
pub fn inputs(args: &[String]) -> Result<Vec<String>> {
    let mut words = Vec::with_capacity(args.len());
    for arg in args {
        if arg == "-" {
            let mut text = String::new();
            io::stdin()
                .read_to_string(&mut text)
                .context("reading stdin")?;
            words.extend(text.split_whitespace().map(str::to_owned));
        } else {
            words.push(arg.trim().to_owned());
        }
    }
    Ok(words)
}

/// Writes the finished output in one go.
pub fn write_all(output: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(output.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

#[derive(Debug, Args)]
pub struct ObfuscateArgs {
    /// Internal IDs in decimal; `-` reads them from stdin (whitespace-separated).
    #[arg(value_name = "ID", required = true)]
    ids: Vec<String>,

    #[command(flatten)]
    keys: KeyArgs,

    /// The key ID of the key that makes the public IDs [default: the last key listed].
    #[arg(long, value_name = "N")]
    key_id: Option<u8>,
}

pub fn run(args: ObfuscateArgs) -> Result<()> {
    let obfuscator = args.keys.obfuscator(args.key_id)?;
    let codec = args.keys.codec();
    let mut output = String::new();
    for text in inputs(&args.ids)? {
        let id: Id = text.parse()?;
        codec.encode_into(obfuscator.obfuscate(id)?, &mut output)?;
        output.push('\n');
    }
    write_all(&output)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "2b7e151628aed2a6abf7158809cf4f3c";
    const B: &str = "000102030405060708090a0b0c0d0e0f";

    fn ids(text: &str) -> Vec<u8> {
        parse_keyring(text)
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    #[test]
    fn keyrings_list_keys_with_optional_ids() {
        assert_eq!(ids(A), [0]);
        assert_eq!(ids(&format!("  {A}\n")), [0]);
        assert_eq!(ids(&format!("0:{A},1:{B}")), [0, 1]);
        assert_eq!(
            ids(&format!("# rotated 2026-11\n3:{A}  # old\n\n5:{B}\n")),
            [3, 5]
        );
    }

    #[test]
    fn keyring_errors_never_quote_keys() {
        for (text, needle) in [
            (String::new(), "empty"),
            ("# nothing\n".to_owned(), "empty"),
            (format!("x:{A}"), "key entry 1: the key ID"),
            (format!("{A},256:{B}"), "key entry 2: the key ID"),
            (
                format!("{A} {}", &B[1..]),
                "key entry 2: invalid obfuscation key",
            ),
            (format!("1:{A}g"), "character 33 is not a hex digit"),
        ] {
            let err = parse_keyring(&text).unwrap_err();
            let message = format!("{err:#}");
            assert!(message.contains(needle), "{message} lacks {needle:?}");
            assert!(
                !message.contains(&A[..8]) && !message.contains(&B[1..9]),
                "{message}"
            );
            assert!(super::super::is_bad_input(&err), "{message}");
        }
    }
}
