//! Text forms of public IDs, each reversible: decimal, Crockford base32, Sqids.
//!
//! None pads, so a form's length varies a little with the value; public IDs look
//! random, so that says nothing about the ID behind them.

use std::fmt;
use std::str::FromStr;

use super::PublicId;
use super::sqids_codec::{AllBlocked, SqidsCodec, SqidsError};
use crate::error::{Error, Result};

/// A text form of public IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TextFormat {
    /// Decimal, as `Display` writes integers (`7031742349577331321`).
    #[default]
    Decimal,
    /// Crockford base32: digits and upper-case letters without I, L, O and U, no
    /// leading zeros, no check symbol (`635E4D51A18KS`). Decoding ignores case and
    /// reads `I` and `L` as `1`, `O` as `0`, as Crockford's specification asks;
    /// `U` and anything else is an error.
    Base32,
    /// [Sqids](https://sqids.org) with the default alphabet (62 letters and digits,
    /// case-sensitive), no minimum length and the default blocklist, so no public
    /// ID spells one of the blocklist's words (`CNdjRtAx6kya`). Decoding accepts
    /// only the one string [`PublicIdCodec::encode`] writes for a value.
    ///
    /// The output is the `sqids` crate's, character for character (tested), but
    /// made by this crate's one-number encoder, with the crate's alphabet shuffle,
    /// word list and blocklist rules: the crate itself takes about 7 µs a value,
    /// this about 0.1 µs.
    Sqids,
}

impl TextFormat {
    /// The name used on the command line and in config: `dec`, `base32`, `sqids`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TextFormat::Decimal => "dec",
            TextFormat::Base32 => "base32",
            TextFormat::Sqids => "sqids",
        }
    }
}

impl fmt::Display for TextFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TextFormat {
    type Err = Error;

    /// Parses `dec` (or `decimal`), `base32` or `sqids`.
    fn from_str(s: &str) -> Result<TextFormat> {
        match s {
            "dec" | "decimal" => Ok(TextFormat::Decimal),
            "base32" => Ok(TextFormat::Base32),
            "sqids" => Ok(TextFormat::Sqids),
            _ => Err(Error::InvalidObfuscator(format!(
                "unknown text format {s:?}: use dec, base32 or sqids"
            ))),
        }
    }
}

/// Writes public IDs in one [`TextFormat`] and reads them back.
///
/// Build one per format and keep it: the Sqids form prepares its alphabet and
/// blocklist once, in [`PublicIdCodec::new`].
///
/// # Examples
///
/// ```
/// use idmint_core::{PublicId, PublicIdCodec, TextFormat};
///
/// let public = PublicId::new(7031742349577331321);
/// for format in [TextFormat::Decimal, TextFormat::Base32, TextFormat::Sqids] {
///     let codec = PublicIdCodec::new(format);
///     let text = codec.encode(public)?;
///     assert_eq!(codec.decode(&text)?, public, "{format}");
/// }
/// let base32 = PublicIdCodec::new(TextFormat::Base32);
/// assert_eq!(base32.encode(public)?, "635E4D51A18KS");
/// assert_eq!(base32.decode("635e4d5ia18ks")?, public); // any case, I for 1
/// assert_eq!(base32.decode("635E4D5UA18KS").unwrap_err().code(), "invalid_public_id");
/// let sqids = PublicIdCodec::new(TextFormat::Sqids);
/// assert_eq!(sqids.encode(public)?, "CNdjRtAx6kya");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PublicIdCodec {
    format: TextFormat,
    sqids: Option<SqidsCodec>,
}

impl PublicIdCodec {
    /// A codec for `format`.
    pub fn new(format: TextFormat) -> PublicIdCodec {
        PublicIdCodec {
            format,
            sqids: (format == TextFormat::Sqids).then(SqidsCodec::new),
        }
    }

    /// The codec's format.
    pub fn format(&self) -> TextFormat {
        self.format
    }

    /// `public` as text.
    ///
    /// # Errors
    ///
    /// As [`PublicIdCodec::encode_into`].
    pub fn encode(&self, public: PublicId) -> Result<String> {
        let mut out = String::with_capacity(20);
        self.encode_into(public, &mut out)?;
        Ok(out)
    }

    /// Appends `public` as text to `out`.
    ///
    /// # Errors
    ///
    /// Decimal and base32 never fail. Sqids fails with [`Error::EncodeFailed`] in
    /// the theoretical case that all 62 candidate strings for a value contain a
    /// blocklist word.
    #[inline]
    pub fn encode_into(&self, public: PublicId, out: &mut String) -> Result<()> {
        let value = public.get();
        match &self.sqids {
            None if self.format == TextFormat::Base32 => {
                out.push_str(base32::encode_to(value, &mut [0; base32::MAX_LEN]))
            }
            None => out.push_str(decimal(value, &mut [0; 20])),
            Some(sqids) => encode_sqids(sqids, value, out)?,
        }
        Ok(())
    }

    /// Reads a public ID written in this codec's format.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPublicId`], quoting the text (cut at 64 characters), when it
    /// is not a value of the format or is above 2^64 − 1.
    pub fn decode(&self, text: &str) -> Result<PublicId> {
        let value = match (&self.sqids, self.format) {
            (Some(sqids), _) => decode_sqids(sqids, text),
            (None, TextFormat::Base32) => base32::decode(text).map_err(|e| e.to_string()),
            (None, _) => parse_decimal(text),
        };
        value
            .map(PublicId::new)
            .map_err(|reason| Error::invalid_public_id(text, reason))
    }
}

impl fmt::Debug for PublicIdCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicIdCodec")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// `value` in decimal, in the tail of `buf`.
fn decimal(mut value: u64, buf: &mut [u8; 20]) -> &str {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[start..]).expect("ASCII digits")
}

fn parse_decimal(text: &str) -> Result<u64, String> {
    if text.is_empty() {
        return Err("empty".into());
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a decimal number".into());
    }
    text.parse()
        .map_err(|_| "above 2^64 - 1, the largest public ID".into())
}

/// Crockford base32 for `u64`s: the form both public IDs and `idmint gen
/// --format base32` use.
///
/// Digits `0123456789ABCDEFGHJKMNPQRSTVWXYZ`, most significant first, upper case,
/// no leading zeros (`0` for zero), no check symbol, no hyphens.
/// [`decode`](base32::decode) ignores case, reads `I`/`L` as `1` and `O` as `0`,
/// and refuses `U` and everything else.
///
/// # References
///
/// Douglas Crockford, *Base 32* (crockford.com/base32.html).
pub mod base32 {
    use std::fmt;

    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

    /// The value of each ASCII byte as a base32 digit, or `INVALID`.
    const DIGITS: [u8; 256] = {
        let mut table = [INVALID; 256];
        let mut i = 0;
        while i < 32 {
            let c = ALPHABET[i];
            table[c as usize] = i as u8;
            table[c.to_ascii_lowercase() as usize] = i as u8;
            i += 1;
        }
        table[b'I' as usize] = 1;
        table[b'i' as usize] = 1;
        table[b'L' as usize] = 1;
        table[b'l' as usize] = 1;
        table[b'O' as usize] = 0;
        table[b'o' as usize] = 0;
        table
    };
    const INVALID: u8 = 0xff;

    /// The longest encoding of a `u64`: 13 symbols.
    pub const MAX_LEN: usize = 13;

    /// Why text is not a base32 `u64`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum DecodeError {
        /// The text is empty.
        Empty,
        /// The character at this index is not a Crockford base32 symbol.
        InvalidSymbol {
            /// The index of the character (in characters, from 0).
            at: usize,
        },
        /// The value is above 2^64 − 1.
        TooLarge,
    }

    impl fmt::Display for DecodeError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                DecodeError::Empty => f.write_str("empty"),
                DecodeError::InvalidSymbol { at } => write!(
                    f,
                    "not a Crockford base32 number (character {} is not one of \
                     0-9 A-Z without U)",
                    at + 1
                ),
                DecodeError::TooLarge => f.write_str("above 2^64 - 1"),
            }
        }
    }

    impl std::error::Error for DecodeError {}

    /// `value` in base32, written into the tail of `buf`.
    ///
    /// ```
    /// use idmint_core::obfuscate::base32;
    ///
    /// let mut buf = [0; base32::MAX_LEN];
    /// assert_eq!(base32::encode_to(175928847299117063, &mut buf), "4W86BB0G4007");
    /// assert_eq!(base32::encode_to(0, &mut buf), "0");
    /// ```
    #[inline]
    pub fn encode_to(mut value: u64, buf: &mut [u8; MAX_LEN]) -> &str {
        let mut start = MAX_LEN;
        loop {
            start -= 1;
            buf[start] = ALPHABET[(value & 31) as usize];
            value >>= 5;
            if value == 0 {
                break;
            }
        }
        std::str::from_utf8(&buf[start..]).expect("ASCII symbols")
    }

    /// `value` in base32.
    pub fn encode(value: u64) -> String {
        encode_to(value, &mut [0; MAX_LEN]).to_owned()
    }

    /// Reads a base32 `u64`.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for empty text, a character outside the alphabet and its
    /// aliases, or a value above 2^64 − 1. Leading zeros are fine.
    ///
    /// ```
    /// use idmint_core::obfuscate::base32::{self, DecodeError};
    ///
    /// assert_eq!(base32::decode("4w86bb0g4007"), Ok(175928847299117063));
    /// assert_eq!(base32::decode("1iIlL"), base32::decode("11111"));
    /// assert_eq!(base32::decode("0o0O"), Ok(0));
    /// assert_eq!(base32::decode("4U"), Err(DecodeError::InvalidSymbol { at: 1 }));
    /// assert_eq!(base32::decode("G000000000000"), Err(DecodeError::TooLarge));
    /// ```
    pub fn decode(text: &str) -> Result<u64, DecodeError> {
        if text.is_empty() {
            return Err(DecodeError::Empty);
        }
        let mut value: u64 = 0;
        for (at, byte) in text.bytes().enumerate() {
            let digit = DIGITS[byte as usize];
            if digit == INVALID {
                let at = text[..at].chars().count();
                return Err(DecodeError::InvalidSymbol { at });
            }
            if value >> (u64::BITS - 5) != 0 {
                return Err(DecodeError::TooLarge);
            }
            value = (value << 5) | u64::from(digit);
        }
        Ok(value)
    }
}

/// The longest text the Sqids form looks at: a `u64` takes at most 12 symbols,
/// so anything much longer is refused before decoding.
const SQIDS_MAX_LEN: usize = 32;

fn encode_sqids(sqids: &SqidsCodec, value: u64, out: &mut String) -> Result<()> {
    sqids
        .encode_into(value, out)
        .map_err(|AllBlocked| Error::EncodeFailed {
            public: value,
            format: TextFormat::Sqids.as_str(),
            reason: "every candidate string contains a blocklist word".into(),
        })
}

fn decode_sqids(sqids: &SqidsCodec, text: &str) -> Result<u64, String> {
    if text.is_empty() {
        return Err("empty".into());
    }
    if text.len() > SQIDS_MAX_LEN {
        return Err(format!(
            "longer than {SQIDS_MAX_LEN} characters, so not the Sqids string of one 64-bit value"
        ));
    }
    sqids.decode(text).map_err(|e| {
        match e {
            SqidsError::Symbol => "not a Sqids string: only letters and digits",
            SqidsError::NotOne => "not the Sqids string of one 64-bit value",
            SqidsError::TooLarge => "above 2^64 - 1",
            // Sqids reads many strings as one value (any prefix symbol decodes,
            // blocklisted spellings too); only the one it writes is accepted, so
            // each public ID has exactly one text.
            SqidsError::NotCanonical => {
                "not a Sqids string this codec writes (altered or non-canonical)"
            }
        }
        .into()
    })
}
