//! Keyed, reversible obfuscation of IDs into *public IDs*, and their text forms.
//!
//! Time-ordered IDs leak: two orders placed a day apart tell a competitor how many
//! orders were placed in between (Leaf #87), and every ID tells when and on which
//! worker it was made. An [`Obfuscator`] maps each internal [`Id`] to a
//! [`PublicId`] of the same width with a keyed permutation: public IDs look
//! random, and only the holder of the key turns one back into the sortable
//! internal ID. [`PublicIdCodec`] writes public IDs as decimal, Crockford base32
//! or Sqids text and reads them back.
//!
//! # Construction
//!
//! FF1 from NIST SP 800-38G with AES-128 or AES-256, radix 2, an empty tweak: the
//! ID is the numeral string of its `id_bits` bits, most significant first, and the
//! ciphertext is the public ID's low `id_bits` bits. FF1 is a ten-round unbalanced
//! Feistel network whose round function is an AES CBC-MAC; it takes numeral
//! strings of any length directly, so odd widths need no cycle-walking.
//!
//! The implementation is this crate's own (in `obfuscate/ff1.rs`) because the
//! general-purpose `fpe` crate works on vectors of numerals and costs about 15 µs
//! an ID; specialised to halves that fit a `u64`, with the round-independent part
//! of the CBC-MAC computed once per key, a round is one AES call and an ID costs
//! ten dependent AES calls, about 0.17 µs with AES-NI (see BENCHMARKS.md). It
//! reproduces NIST's nine FF1 samples exactly, and, for radix 2 and every width
//! used here, the `fpe` crate's output.
//!
//! # Security claim
//!
//! FF1 is a pseudorandom permutation of its domain as long as AES is a
//! pseudorandom permutation (the FFX analysis behind SP 800-38G). Without the key,
//! the public IDs of distinct IDs are indistinguishable from distinct random
//! values of the width: they reveal neither order, nor volume, nor the time,
//! worker or sequence inside the ID.
//!
//! # Limits
//!
//! - **Deterministic.** One ID always gives the same public ID under one key,
//!   width and key-ID split, so public IDs can be compared and used as keys, and
//!   also linked: the same ID shown in two places is recognisably the same. Use
//!   separate keys where that matters.
//! - **Not authentication.** Every value of the width is the public ID of *some*
//!   value: a forged or mistyped public ID reveals to an arbitrary internal ID.
//!   [`Obfuscator::reveal`] rejects only values outside the width, unknown key IDs,
//!   and (with 64-bit public IDs) values that reveal above 2^63 − 1. Look the
//!   revealed ID up before trusting it.
//! - **Small domains.** The published attacks on FF1 (Bellare–Hoang–Tessaro 2016,
//!   Hoang–Tessaro–Trieu 2018) need domains far smaller than these or impractical
//!   numbers of known pairs; NIST's draft revision 1 of SP 800-38G sets a floor of
//!   one million values. This module requires 2^32 (at least 32 permuted bits).
//! - **No order.** Public IDs do not sort by time: store and index the internal ID,
//!   reveal on the way in, obfuscate on the way out.
//! - **Bound to the settings.** A public ID is tied to the key, the width and the
//!   key-ID bits. Changing any of them changes every public ID.
//! - **Key material** (the key bytes and the AES round keys) is zeroed when an
//!   [`ObfuscationKey`] or [`Obfuscator`] is dropped, and no `Debug` output or
//!   error message contains it. Keys come from the caller (a config file, the
//!   environment): the core reads no files.
//!
//! # Key IDs and rotation
//!
//! An obfuscator can hold several keys, each under a *key ID*, and reserve the top
//! `key_id_bits` bits of every public ID for the ID of the key that made it: the
//! public ID is `key_id · FF1_key(id)`, with the ID in the low
//! `bits − key_id_bits` bits. New public IDs use the active key; `reveal` reads the
//! key ID from the public ID and uses that key, or fails with
//! [`Error::UnknownKeyId`].
//!
//! Why not "try every configured key": a permutation has no wrong answers. A
//! public ID reveals to *some* ID under every key, so trying keys in order cannot
//! tell which one made it. A versioned text prefix (`k1_...`) would work for text,
//! but not for the integer form, which is the one that must fit a `BIGINT` column.
//! So the key ID goes into the number, and every text form carries it for free.
//!
//! The cost is `key_id_bits` bits of ID space, so choose the split with the layout:
//!
//! - `key_id_bits = 0` (the default): one key; a public ID has exactly the width
//!   and type of the internal ID (63 bits: a positive `i64`; 53: JavaScript-safe).
//!   Changing the key changes every public ID.
//! - 63-bit IDs, `bits = 64`, `key_id_bits = 1`: two key slots, enough to rotate
//!   (keep the old key to reveal, make new public IDs with the new one). Public IDs
//!   are `u64`s; those of key 1 are above 2^63 − 1, so store them as `u64`, text or
//!   `NUMERIC`, not as a signed `BIGINT`.
//! - A layout with fewer bits (`max_bits` of 60, say) and `bits = 63`,
//!   `key_id_bits = 3`: eight slots and positive-`i64` public IDs.
//!
//! Reusing a slot for a new key silently changes what the old key's public IDs
//! reveal to; retire a slot only once its public IDs are no longer in use. The key
//! ID is visible to anyone, by design: it tells which key generation made a public
//! ID, nothing about the ID itself.
//!
//! # Examples
//!
//! ```
//! use idmint_core::{Id, ObfuscationKey, Obfuscator, PublicIdCodec, TextFormat};
//!
//! let key: ObfuscationKey = "000102030405060708090a0b0c0d0e0f".parse()?;
//! let obfuscator = Obfuscator::new(key, 63)?;
//! let id = Id::new(1_050_118_621_198_921_728)?;
//! let public = obfuscator.obfuscate(id)?;
//! assert_ne!(public.get(), id.get());
//! assert!(public.get() < 1 << 63); // still a positive i64
//! assert_eq!(obfuscator.reveal(public)?, id);
//!
//! let base32 = PublicIdCodec::new(TextFormat::Base32);
//! let text = base32.encode(public)?;
//! assert_eq!(base32.decode(&text.to_lowercase())?, public);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Rotating keys with one key-ID bit:
//!
//! ```
//! use idmint_core::{Id, ObfuscationKey, Obfuscator};
//!
//! let old: ObfuscationKey = "8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0".parse()?;
//! let new: ObfuscationKey = "0f1e2d3c4b5a69788796a5b4c3d2e1f0".parse()?;
//! let before = Obfuscator::builder(64).with_key_id_bits(1).with_key(0, old).build()?;
//! let id = Id::new(42)?;
//! let issued_before = before.obfuscate(id)?;
//!
//! let old: ObfuscationKey = "8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0".parse()?;
//! let after = Obfuscator::builder(64)
//!     .with_key_id_bits(1)
//!     .with_key(0, old)
//!     .with_key(1, new) // the last key added makes new public IDs
//!     .build()?;
//! let issued_after = after.obfuscate(id)?;
//! assert_eq!(issued_after.get() >> 63, 1);
//! assert_eq!(after.reveal(issued_before)?, id);
//! assert_eq!(after.reveal(issued_after)?, id);
//! // The old obfuscator has no key 1.
//! assert_eq!(before.reveal(issued_after).unwrap_err().code(), "unknown_key_id");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Text forms
//!
//! [`TextFormat`] names them: decimal; Crockford base32 (case-insensitive, with
//! Crockford's `I`/`L`/`O` aliases, also the [`base32`] module for plain `u64`s);
//! and Sqids with the default alphabet and blocklist, so that no public ID spells
//! a blocklisted word. Each reads back exactly what it writes; Sqids accepts only
//! its one canonical string per value. The text forms are encodings, not secrecy:
//! all of the hiding is done by the permutation.
//!
//! # References
//!
//! - NIST SP 800-38G, *Recommendation for Block Cipher Modes of Operation: Methods
//!   for Format-Preserving Encryption*, §5.1 (FF1); and its samples, `FF1samples.pdf`.
//! - Bellare, Rogaway, Spies, *The FFX Mode of Operation for Format-Preserving
//!   Encryption* (2010).
//! - Hoang, Tessaro, Trieu, *The Curse of Small Domains: New Attacks on
//!   Format-Preserving Encryption* (CRYPTO 2018).

mod ff1;
mod sqids_codec;
#[cfg(test)]
mod tests;
mod text;

use std::fmt;
use std::str::FromStr;

use aes::cipher::KeyInit;
use aes::{Aes128Enc, Aes256Enc};
use zeroize::Zeroize;

use crate::error::{Error, Result};
use crate::id::Id;

use self::ff1::Ff1;
pub use self::text::{PublicIdCodec, TextFormat, base32};

/// The narrowest permuted part of a public ID: 2^32 values, well above FF1's floor.
pub const MIN_ID_BITS: u8 = 32;
/// The widest public ID.
pub const MAX_BITS: u8 = 64;
/// The most bits a public ID can spend on its key ID (256 keys).
pub const MAX_KEY_ID_BITS: u8 = 8;

/// A public ID: what an [`Obfuscator`] makes of an [`Id`], an integer of the
/// obfuscator's width that looks random.
///
/// Any `u64` is a `PublicId` value; whether it is one a given obfuscator can
/// reveal is that obfuscator's question ([`Obfuscator::reveal`]).
///
/// # Examples
///
/// ```
/// use idmint_core::PublicId;
///
/// let public: PublicId = "7031742349577331321".parse()?;
/// assert_eq!(public.get(), 7031742349577331321);
/// assert_eq!(public.to_string(), "7031742349577331321");
/// assert!("-1".parse::<PublicId>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublicId(u64);

impl PublicId {
    /// Wraps a value as a public ID.
    pub const fn new(value: u64) -> PublicId {
        PublicId(value)
    }

    /// The public ID as a `u64`.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for PublicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for PublicId {
    type Err = Error;

    /// Parses a decimal public ID, as printed by `Display`.
    fn from_str(s: &str) -> Result<PublicId> {
        PublicIdCodec::new(TextFormat::Decimal).decode(s)
    }
}

impl From<u64> for PublicId {
    fn from(value: u64) -> PublicId {
        PublicId(value)
    }
}

impl From<PublicId> for u64 {
    fn from(public: PublicId) -> u64 {
        public.0
    }
}

/// A secret key for an [`Obfuscator`]: 16 bytes (AES-128) or 32 bytes (AES-256).
///
/// Read it from a config file or the environment as hex (`"00112233..."`, 32 or 64
/// hex digits; generate one with `openssl rand -hex 16`). AES-128 is the
/// recommended size: the permutation's domain, not the key, bounds what an
/// attacker can do, and AES-256 costs about 40% more per ID.
///
/// The key never shows: `Debug` prints only its size, errors never quote it, and
/// its bytes are zeroed on drop. It is deliberately not `Clone` or `Display`.
///
/// # Examples
///
/// ```
/// use idmint_core::ObfuscationKey;
///
/// let key = ObfuscationKey::from_hex("000102030405060708090A0B0C0D0E0F")?;
/// assert_eq!(key.bits(), 128);
/// assert_eq!(format!("{key:?}"), "ObfuscationKey(128-bit, redacted)");
/// let err = ObfuscationKey::from_hex("secret!").unwrap_err();
/// assert!(!err.to_string().contains("secret"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ObfuscationKey {
    bytes: [u8; 32],
    len: usize,
}

impl ObfuscationKey {
    /// A key from its raw bytes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] unless `bytes` is 16 or 32 bytes long and not all zero
    /// (an all-zero key is a placeholder that was never replaced).
    pub fn from_bytes(bytes: &[u8]) -> Result<ObfuscationKey> {
        if bytes.len() != 16 && bytes.len() != 32 {
            return Err(Error::InvalidKey {
                reason: format!(
                    "a key is 16 or 32 bytes (AES-128 or AES-256), not {}",
                    bytes.len()
                ),
            });
        }
        if bytes.iter().all(|&b| b == 0) {
            return Err(Error::InvalidKey {
                reason: "the key is all zeros, a placeholder rather than a secret".into(),
            });
        }
        let mut key = ObfuscationKey {
            bytes: [0; 32],
            len: bytes.len(),
        };
        key.bytes[..bytes.len()].copy_from_slice(bytes);
        Ok(key)
    }

    /// A key from hex: 32 or 64 hex digits, either case, nothing else.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`], naming the length or the position of the first
    /// non-hex character, never the text itself.
    pub fn from_hex(hex: &str) -> Result<ObfuscationKey> {
        let digits = hex.as_bytes();
        if let Some(at) = digits.iter().position(|b| !b.is_ascii_hexdigit()) {
            return Err(Error::InvalidKey {
                reason: format!("character {} is not a hex digit", at + 1),
            });
        }
        if digits.len() != 32 && digits.len() != 64 {
            return Err(Error::InvalidKey {
                reason: format!(
                    "a key is 32 or 64 hex digits (AES-128 or AES-256), not {}",
                    digits.len()
                ),
            });
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let nibble = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
            *byte = nibble(pair[0]) << 4 | nibble(pair[1]);
        }
        let key = ObfuscationKey::from_bytes(&bytes[..digits.len() / 2]);
        bytes.zeroize();
        key
    }

    /// The key size in bits: 128 or 256.
    pub fn bits(&self) -> u32 {
        self.len as u32 * 8
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl Drop for ObfuscationKey {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl FromStr for ObfuscationKey {
    type Err = Error;

    /// Parses hex, as [`ObfuscationKey::from_hex`].
    fn from_str(s: &str) -> Result<ObfuscationKey> {
        ObfuscationKey::from_hex(s)
    }
}

impl fmt::Debug for ObfuscationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObfuscationKey({}-bit, redacted)", self.bits())
    }
}

/// FF1 under one key, for one permuted width.
///
/// The variants differ by 256 bytes of round keys; they live in the obfuscator's
/// `Vec` of (few) keys, and boxing them would add a pointer chase to every call.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum KeyedFf1 {
    Aes128(Ff1<Aes128Enc>),
    Aes256(Ff1<Aes256Enc>),
}

impl KeyedFf1 {
    fn new(key: &ObfuscationKey, id_bits: u8) -> KeyedFf1 {
        let n = u32::from(id_bits);
        // Widths are checked by the builder; FF1 takes every width up to 126 bits.
        let unsupported = "radix 2 and widths up to 64 bits are supported";
        match key.len {
            16 => KeyedFf1::Aes128(
                Ff1::new(
                    Aes128Enc::new_from_slice(key.as_bytes()).unwrap(),
                    2,
                    n,
                    &[],
                )
                .expect(unsupported),
            ),
            _ => KeyedFf1::Aes256(
                Ff1::new(
                    Aes256Enc::new_from_slice(key.as_bytes()).unwrap(),
                    2,
                    n,
                    &[],
                )
                .expect(unsupported),
            ),
        }
    }

    /// Encrypts the `n`-bit `x`, `n = u + v`, `v` the larger half.
    #[inline]
    fn encrypt(&self, x: u64, v: u32) -> u64 {
        let (a, b) = (x >> v, x & ((1 << v) - 1));
        let (a, b) = match self {
            KeyedFf1::Aes128(f) => f.encrypt(a, b),
            KeyedFf1::Aes256(f) => f.encrypt(a, b),
        };
        (a << v) | b
    }

    /// Decrypts the `n`-bit `x`: the inverse of [`KeyedFf1::encrypt`].
    #[inline]
    fn decrypt(&self, x: u64, v: u32) -> u64 {
        let (a, b) = (x >> v, x & ((1 << v) - 1));
        let (a, b) = match self {
            KeyedFf1::Aes128(f) => f.decrypt(a, b),
            KeyedFf1::Aes256(f) => f.decrypt(a, b),
        };
        (a << v) | b
    }
}

/// A keyed permutation of IDs: [`obfuscate`](Obfuscator::obfuscate) an [`Id`]
/// into a [`PublicId`] of the same width, [`reveal`](Obfuscator::reveal) it back.
///
/// See the [module docs](self) for the construction (FF1 with AES), what it
/// hides, its limits, and how key IDs let keys rotate.
///
/// - **Width.** Public IDs are below `2^bits` (`bits` from 32 to 64: 63 for a
///   positive `i64`, 53 for JavaScript); the top `key_id_bits` of them name the key,
///   and IDs up to `id_bits = bits − key_id_bits` bits wide are obfuscated.
/// - **Thread-safety.** `Send + Sync`, immutable after building: share one behind an
///   `Arc` or a `&'static`.
/// - **Cost.** One AES block per FF1 round, ten rounds per ID, no allocation.
/// - **Secrets.** `Debug` shows the settings and key IDs, never key material.
///
/// # Examples
///
/// ```
/// use idmint_core::{Id, ObfuscationKey, Obfuscator};
///
/// let key = ObfuscationKey::from_hex("8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0")?;
/// let js = Obfuscator::new(key, 53)?; // public IDs stay below 2^53
/// let public = js.obfuscate(Id::new(123_456_789)?)?;
/// assert!(public.get() < 1 << 53);
/// assert_eq!(js.reveal(public)?.get(), 123_456_789);
/// // IDs wider than the obfuscator are refused, not truncated.
/// assert_eq!(js.obfuscate(Id::new(1 << 53)?).unwrap_err().code(), "invalid_id");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Obfuscator {
    bits: u8,
    key_id_bits: u8,
    id_bits: u8,
    /// The larger FF1 half, `id_bits - id_bits / 2`.
    v: u32,
    /// The key IDs and their FF1s, in the order added; few, so searched linearly.
    keys: Vec<(u8, KeyedFf1)>,
    /// Index in `keys` of the key that obfuscates.
    active: usize,
}

impl Obfuscator {
    /// An obfuscator with one key and no key-ID bits: public IDs are `bits` wide,
    /// exactly like the IDs they hide.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidObfuscator`] when `bits` is not in 32..=64.
    pub fn new(key: ObfuscationKey, bits: u8) -> Result<Obfuscator> {
        Obfuscator::builder(bits).with_key(0, key).build()
    }

    /// A builder for an obfuscator with public IDs `bits` wide, for several keys.
    pub fn builder(bits: u8) -> ObfuscatorBuilder {
        ObfuscatorBuilder::new(bits)
    }

    /// The width of public IDs: every public ID is below `2^bits`.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// How many top bits of a public ID name its key.
    pub fn key_id_bits(&self) -> u8 {
        self.key_id_bits
    }

    /// The width of the IDs this obfuscator takes: `bits − key_id_bits`.
    pub fn id_bits(&self) -> u8 {
        self.id_bits
    }

    /// The key ID of the key that makes new public IDs.
    pub fn active_key_id(&self) -> u8 {
        self.keys[self.active].0
    }

    /// The configured key IDs, in the order they were added.
    pub fn key_ids(&self) -> impl Iterator<Item = u8> + '_ {
        self.keys.iter().map(|(key_id, _)| *key_id)
    }

    /// The public ID of `id` under the active key.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] when `id` is `2^id_bits` or above: it does not fit the
    /// public width (a 63-bit ID given to a 53-bit obfuscator, say).
    #[inline]
    pub fn obfuscate(&self, id: Id) -> Result<PublicId> {
        let x = id.get();
        if u32::from(self.id_bits) < u64::BITS && x >> self.id_bits != 0 {
            return Err(self.too_wide(id));
        }
        let (key_id, ff1) = &self.keys[self.active];
        let permuted = ff1.encrypt(x, self.v);
        let key_part = u64::from(*key_id)
            .checked_shl(self.id_bits.into())
            .unwrap_or(0);
        Ok(PublicId(key_part | permuted))
    }

    /// The ID behind `public`, under the key its key-ID bits name.
    ///
    /// A public ID made under another key or other settings reveals to some other
    /// value without an error: see "Not authentication" in the module docs.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidPublicId`] when `public` is `2^bits` or above, or reveals to
    ///   a value above 2^63 − 1 (possible only when `id_bits` is 64);
    /// - [`Error::UnknownKeyId`] when its key-ID bits name a key this obfuscator
    ///   does not have.
    #[inline]
    pub fn reveal(&self, public: PublicId) -> Result<Id> {
        let p = public.0;
        if u32::from(self.bits) < u64::BITS && p >> self.bits != 0 {
            return Err(Error::InvalidPublicId {
                input: p.to_string(),
                reason: format!(
                    "above 2^{} - 1, the largest public ID of this width",
                    self.bits
                ),
            });
        }
        let key_id = p.checked_shr(self.id_bits.into()).unwrap_or(0) as u8;
        let Some((_, ff1)) = self.keys.iter().find(|(k, _)| *k == key_id) else {
            return Err(Error::UnknownKeyId { public: p, key_id });
        };
        let permuted = if self.id_bits == 64 {
            p
        } else {
            p & ((1 << self.id_bits) - 1)
        };
        let x = ff1.decrypt(permuted, self.v);
        Id::new(x).map_err(|_| Error::InvalidPublicId {
            input: p.to_string(),
            reason: format!(
                "not a public ID of key {key_id}: it reveals to a value above 2^63 - 1 \
                 (mistyped, forged, or made with another key or width)"
            ),
        })
    }

    fn too_wide(&self, id: Id) -> Error {
        Error::invalid_id(
            &id.to_string(),
            format!(
                "above 2^{} - 1, the widest ID a {}-bit obfuscator with {} key ID bits takes",
                self.id_bits, self.bits, self.key_id_bits
            ),
        )
    }
}

impl fmt::Debug for Obfuscator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Obfuscator")
            .field("bits", &self.bits)
            .field("key_id_bits", &self.key_id_bits)
            .field("key_ids", &self.key_ids().collect::<Vec<_>>())
            .field("active_key_id", &self.active_key_id())
            .finish_non_exhaustive()
    }
}

/// Builds an [`Obfuscator`] with one or more keys; nothing is checked until
/// [`ObfuscatorBuilder::build`].
///
/// # Examples
///
/// ```
/// use idmint_core::{ObfuscationKey, Obfuscator};
///
/// let key = |hex: &str| hex.parse::<ObfuscationKey>();
/// let obfuscator = Obfuscator::builder(63)
///     .with_key_id_bits(3)
///     .with_key(1, key("11111111111111111111111111111111")?)
///     .with_key(2, key("22222222222222222222222222222222")?)
///     .with_active_key(1)
///     .build()?;
/// assert_eq!(obfuscator.id_bits(), 60);
/// assert_eq!(obfuscator.active_key_id(), 1);
/// assert_eq!(
///     format!("{obfuscator:?}"),
///     "Obfuscator { bits: 63, key_id_bits: 3, key_ids: [1, 2], active_key_id: 1, .. }"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ObfuscatorBuilder {
    bits: u8,
    key_id_bits: u8,
    keys: Vec<(u8, ObfuscationKey)>,
    active: Option<u8>,
}

impl ObfuscatorBuilder {
    /// Starts a builder for public IDs `bits` wide (32..=64), no key-ID bits, no keys.
    pub const fn new(bits: u8) -> ObfuscatorBuilder {
        ObfuscatorBuilder {
            bits,
            key_id_bits: 0,
            keys: Vec::new(),
            active: None,
        }
    }

    /// Reserves the top `key_id_bits` bits (0..=8) of every public ID for its key ID.
    pub fn with_key_id_bits(mut self, key_id_bits: u8) -> ObfuscatorBuilder {
        self.key_id_bits = key_id_bits;
        self
    }

    /// Adds a key under `key_id` (below `2^key_id_bits`). Unless
    /// [`with_active_key`](Self::with_active_key) says otherwise, the last key added
    /// makes new public IDs.
    pub fn with_key(mut self, key_id: u8, key: ObfuscationKey) -> ObfuscatorBuilder {
        self.keys.push((key_id, key));
        self
    }

    /// The key that makes new public IDs; the others only reveal.
    pub fn with_active_key(mut self, key_id: u8) -> ObfuscatorBuilder {
        self.active = Some(key_id);
        self
    }

    /// Checks the settings and expands the keys.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidObfuscator`] when `bits` is not in 32..=64, `key_id_bits` is
    /// above 8 or leaves fewer than 32 bits for the ID, no key is given, a key ID
    /// does not fit the key-ID bits or is given twice, or the active key ID has no
    /// key.
    pub fn build(self) -> Result<Obfuscator> {
        let invalid = |reason: String| Err(Error::InvalidObfuscator(reason));
        let (bits, key_id_bits) = (self.bits, self.key_id_bits);
        if !(MIN_ID_BITS..=MAX_BITS).contains(&bits) {
            return invalid(format!(
                "width {bits} bits is out of range: public IDs are {MIN_ID_BITS} to {MAX_BITS} bits"
            ));
        }
        if key_id_bits > MAX_KEY_ID_BITS {
            return invalid(format!(
                "{key_id_bits} key ID bits is out of range: 0..={MAX_KEY_ID_BITS}"
            ));
        }
        let id_bits = bits - key_id_bits;
        if id_bits < MIN_ID_BITS {
            return invalid(format!(
                "{key_id_bits} key ID bits leave {id_bits} bits of a {bits}-bit public ID \
                 for the ID; at least {MIN_ID_BITS} are needed"
            ));
        }
        if self.keys.is_empty() {
            return invalid("no key: an obfuscator needs at least one".into());
        }
        let max_key_id = (1u16 << key_id_bits) - 1;
        for (i, (key_id, _)) in self.keys.iter().enumerate() {
            if u16::from(*key_id) > max_key_id {
                return invalid(format!(
                    "key ID {key_id} does not fit in {key_id_bits} key ID bits (0..={max_key_id})"
                ));
            }
            if self.keys[..i].iter().any(|(k, _)| k == key_id) {
                return invalid(format!("key ID {key_id} is given twice"));
            }
        }
        let active_id = self.active.unwrap_or(self.keys[self.keys.len() - 1].0);
        let Some(active) = self.keys.iter().position(|(k, _)| *k == active_id) else {
            return invalid(format!("the active key ID {active_id} has no key"));
        };
        let keys = self
            .keys
            .iter()
            .map(|(key_id, key)| (*key_id, KeyedFf1::new(key, id_bits)))
            .collect();
        Ok(Obfuscator {
            bits,
            key_id_bits,
            id_bits,
            v: u32::from(id_bits - id_bits / 2),
            keys,
            active,
        })
    }
}
