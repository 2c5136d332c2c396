//! [`PublicIds`]: IDs shown to the public, through the keyed, reversible
//! permutation of `idmint_core::obfuscate`, in decimal, Crockford base32 or
//! Sqids text.

use std::path::Path;

use idmint_core::{Id, Obfuscator, PublicId, PublicIdCodec, TextFormat};
use idmint_node::config::{ObfuscationConfig, Secret};

use crate::error::Error;
use crate::generator::load_config;

/// The settings of [`PublicIds::with_options`], as a binding's caller
/// gives them: the defaults are `[obfuscation]`'s (the config's own: 63
/// bits, no key-ID bits, the last key listed active, `dec`), decided here
/// for every binding; the numbers are taken as the caller's language has
/// them and checked here to be bytes, as the config's are.
///
/// Builder-lite: [`PublicIdsOptions::new`], then `with_*`.
///
/// # Examples
///
/// ```
/// use idmint_embed::{PublicIds, PublicIdsOptions};
///
/// let options = PublicIdsOptions::new();
/// assert_eq!((options.bits(), options.format()), (63, "dec"));
/// let ids = PublicIds::with_options("000102030405060708090a0b0c0d0e0f", &options.with_format("base32"))?;
/// assert_eq!(ids.format(), "base32");
/// let e = PublicIds::with_options("000102030405060708090a0b0c0d0e0f", &PublicIdsOptions::new().with_bits(300))
///     .unwrap_err();
/// assert_eq!(e.code(), "invalid_config");
/// assert_eq!(e.message(), "obfuscation.bits = 300 is out of range: 0 to 255");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicIdsOptions {
    bits: i64,
    key_id_bits: i64,
    active_key: Option<i64>,
    format: String,
}

impl Default for PublicIdsOptions {
    fn default() -> PublicIdsOptions {
        PublicIdsOptions::new()
    }
}

impl PublicIdsOptions {
    /// `[obfuscation]`'s defaults (the config's `ObfuscationConfig`).
    pub fn new() -> PublicIdsOptions {
        let section = ObfuscationConfig::default();
        PublicIdsOptions {
            bits: i64::from(section.bits),
            key_id_bits: i64::from(section.key_id_bits),
            active_key: section.active_key.map(i64::from),
            format: section.format,
        }
    }

    /// The width of public IDs (32 to 64; default 63).
    pub fn with_bits(mut self, bits: i64) -> PublicIdsOptions {
        self.bits = bits;
        self
    }

    /// The key-ID bits (default 0).
    pub fn with_key_id_bits(mut self, key_id_bits: i64) -> PublicIdsOptions {
        self.key_id_bits = key_id_bits;
        self
    }

    /// The key new public IDs are made with (`None`, the default: the last
    /// key listed).
    pub fn with_active_key(mut self, active_key: Option<i64>) -> PublicIdsOptions {
        self.active_key = active_key;
        self
    }

    /// The text form: `dec` (the default), `base32` or `sqids`.
    pub fn with_format(mut self, format: &str) -> PublicIdsOptions {
        format.clone_into(&mut self.format);
        self
    }

    /// The width of public IDs (the default until set).
    pub fn bits(&self) -> i64 {
        self.bits
    }

    /// The key-ID bits (the default until set).
    pub fn key_id_bits(&self) -> i64 {
        self.key_id_bits
    }

    /// The active key, `None` for the last key listed.
    pub fn active_key(&self) -> Option<i64> {
        self.active_key
    }

    /// The text form's name (the default until set).
    pub fn format(&self) -> &str {
        &self.format
    }
}

/// `value` of the setting `obfuscation.<name>`, when it is a byte (the
/// config's type).
fn byte(name: &str, value: i64) -> Result<u8, Error> {
    u8::try_from(value).map_err(|_| {
        Error::config(format!(
            "obfuscation.{name} = {value} is out of range: 0 to 255"
        ))
    })
}

/// Obfuscates IDs into public IDs and reveals them again, and writes and
/// reads their text form.
///
/// Built from the same settings as the server's `[obfuscation]` section (and
/// read by the same code): a key ring (`HEX` or `KEY_ID:HEX` entries), the
/// width of public IDs (32 to 64 bits, default 63), the key-ID bits, the
/// active key, and the text form (`dec`, `base32`, `sqids`). So a public ID
/// made here is revealed by a server with the same settings, and the other
/// way round.
///
/// Pure and thread-safe: no I/O, no state beyond the keys; key material never
/// shows in `Debug` or in errors.
///
/// # Examples
///
/// ```
/// use idmint_embed::PublicIds;
///
/// let ids = PublicIds::new("000102030405060708090a0b0c0d0e0f", 63, 0, None, "base32")?;
/// let public = ids.obfuscate(1_050_118_621_198_921_728)?;
/// assert_ne!(public, 1_050_118_621_198_921_728);
/// assert_eq!(ids.reveal(public)?, 1_050_118_621_198_921_728);
/// let text = ids.encode(public)?;
/// assert_eq!(ids.decode(&text.to_lowercase())?, public);
/// assert_eq!(ids.reveal_text(&ids.obfuscate_text(42)?)?, 42);
/// assert_eq!(ids.decode("not base32!").unwrap_err().code(), "invalid_public_id");
/// // A malformed key: the core's code, and never the key in the message.
/// let bad = PublicIds::new("zz", 63, 0, None, "dec").unwrap_err();
/// assert_eq!(bad.code(), "invalid_key");
/// assert!(!bad.message().contains("zz"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PublicIds {
    obfuscator: Obfuscator,
    codec: PublicIdCodec,
}

impl PublicIds {
    /// From explicit settings, as `[obfuscation]` takes them: `key` (the
    /// ring), `bits`, `key_id_bits`, `active_key` (default: the last key
    /// listed) and `format` (`dec`, `base32`, `sqids`). Read by the server's
    /// own code, with the core's codes, as docs/api.md gives them for the
    /// library: these are values, not a config file.
    ///
    /// # Errors
    /// `invalid_key` for a malformed key ring (an entry that is no 32 or 64
    /// hex digits, a key ID that is no number, no entry), naming the entry
    /// by its position and never quoting a key; `invalid_obfuscator` for
    /// settings that don't fit together or an unknown format.
    pub fn new(
        key: &str,
        bits: u8,
        key_id_bits: u8,
        active_key: Option<u8>,
        format: &str,
    ) -> Result<PublicIds, Error> {
        let section = ObfuscationConfig {
            key: Some(Secret::new(key)),
            bits,
            key_id_bits,
            active_key,
            format: format.to_owned(),
        };
        let obfuscator = section
            .checked_obfuscator()?
            .ok_or_else(|| Error::config("no obfuscation key: public IDs need one"))?;
        Ok(PublicIds {
            obfuscator,
            codec: PublicIdCodec::new(format.parse::<TextFormat>()?),
        })
    }

    /// From a binding's settings ([`PublicIdsOptions`]: its defaults, and
    /// the range of each number, are decided there), as
    /// [`PublicIds::new`].
    ///
    /// # Errors
    /// `invalid_config` naming a setting that is no byte
    /// (`obfuscation.bits = 300 is out of range: 0 to 255`); else as
    /// [`PublicIds::new`].
    pub fn with_options(key: &str, options: &PublicIdsOptions) -> Result<PublicIds, Error> {
        let bits = byte("bits", options.bits)?;
        let key_id_bits = byte("key_id_bits", options.key_id_bits)?;
        let active_key = match options.active_key {
            Some(k) => Some(byte("active_key", k)?),
            None => None,
        };
        PublicIds::new(key, bits, key_id_bits, active_key, &options.format)
    }

    /// From the `[obfuscation]` section of the config file at `path` (and
    /// `IDMINT_OBFUSCATION_KEY`, as `idmint serve` reads it).
    ///
    /// # Errors
    /// `invalid_config` for a config the server would refuse (a malformed
    /// key among them: in a config file it is a setting, named as such), or
    /// one with no key.
    pub fn from_config(path: impl AsRef<Path>) -> Result<PublicIds, Error> {
        let config = load_config(Some(path.as_ref()))?;
        PublicIds::from_section(&config.obfuscation)
    }

    fn from_section(section: &ObfuscationConfig) -> Result<PublicIds, Error> {
        let obfuscator = section.obfuscator()?.ok_or_else(|| {
            Error::config("config key obfuscation.key: no key: public IDs need one")
        })?;
        Ok(PublicIds {
            obfuscator,
            codec: PublicIdCodec::new(section.text_format()?),
        })
    }

    /// The public ID of `id`.
    ///
    /// # Errors
    /// `invalid_id` for an ID above 2^63 − 1 or wider than the public IDs.
    pub fn obfuscate(&self, id: u64) -> Result<u64, Error> {
        Ok(self.obfuscator.obfuscate(Id::new(id)?)?.get())
    }

    /// The ID behind `public`.
    ///
    /// # Errors
    /// `invalid_public_id` outside the width, `unknown_key_id` for a key ID
    /// with no key here.
    pub fn reveal(&self, public: u64) -> Result<u64, Error> {
        Ok(self.obfuscator.reveal(PublicId::new(public))?.get())
    }

    /// `public` in the text form.
    ///
    /// # Errors
    /// `encode_failed` when Sqids can't write it.
    pub fn encode(&self, public: u64) -> Result<String, Error> {
        Ok(self.codec.encode(PublicId::new(public))?)
    }

    /// The public ID a text reads as.
    ///
    /// # Errors
    /// `invalid_public_id` naming the text.
    pub fn decode(&self, text: &str) -> Result<u64, Error> {
        Ok(self.codec.decode(text)?.get())
    }

    /// The public ID of `id`, as text.
    ///
    /// # Errors
    /// As [`PublicIds::obfuscate`] and [`PublicIds::encode`].
    pub fn obfuscate_text(&self, id: u64) -> Result<String, Error> {
        self.encode(self.obfuscate(id)?)
    }

    /// The ID behind a public ID's text.
    ///
    /// # Errors
    /// As [`PublicIds::decode`] and [`PublicIds::reveal`].
    pub fn reveal_text(&self, text: &str) -> Result<u64, Error> {
        self.reveal(self.decode(text)?)
    }

    /// The text form's name: `dec`, `base32` or `sqids`.
    pub fn format(&self) -> &'static str {
        self.codec.format().as_str()
    }

    /// The width of public IDs in bits.
    pub fn bits(&self) -> u8 {
        self.obfuscator.bits()
    }
}
