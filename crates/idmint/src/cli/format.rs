//! Text forms of integer IDs: writing them fast (for `gen`) and reading them back
//! (for `decode`).
//!
//! - `dec`: decimal, as everywhere else in idmint.
//! - `hex`: lowercase hexadecimal, no `0x` prefix, no leading zeros
//!   (`175928847299117063` is `271065ac1020007`). `decode` also accepts a `0x` prefix.
//! - `base32`: Crockford base32, upper case, no leading zeros, no check symbol
//!   (`4W86BB0G4007`). `decode` accepts lower case and Crockford's aliases
//!   (`O` for 0, `I`/`L` for 1).
//!
//! No form pads, so IDs of one era have the same length; compare IDs as numbers,
//! not as text, when eras may mix.

use std::io::{self, Write};

use clap::ValueEnum;
use idmint_core::obfuscate::base32;
use idmint_core::{Error, Id};

/// The text form of an integer ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum IdFormat {
    /// Decimal.
    #[default]
    Dec,
    /// Lowercase hexadecimal without a prefix.
    Hex,
    /// Crockford base32 (upper case).
    Base32,
}

/// Writes IDs, one per line, without allocating per ID.
pub struct IdWriter<W: Write> {
    out: W,
    format: IdFormat,
    dec: itoa::Buffer,
}

impl<W: Write> IdWriter<W> {
    pub fn new(out: W, format: IdFormat) -> IdWriter<W> {
        IdWriter {
            out,
            format,
            dec: itoa::Buffer::new(),
        }
    }

    /// Writes `id` and a newline.
    #[inline]
    pub fn write_id(&mut self, id: u64) -> io::Result<()> {
        match self.format {
            IdFormat::Dec => {
                self.out.write_all(self.dec.format(id).as_bytes())?;
                self.out.write_all(b"\n")
            }
            IdFormat::Hex => {
                let mut buf = [0u8; 17];
                self.out.write_all(hex_line(id, &mut buf))
            }
            IdFormat::Base32 => {
                let mut buf = [0u8; base32::MAX_LEN];
                self.out
                    .write_all(base32::encode_to(id, &mut buf).as_bytes())?;
                self.out.write_all(b"\n")
            }
        }
    }

    /// Writes raw bytes (a UUID line, say).
    #[inline]
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    /// Flushes and hands the writer back.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// `id` in lowercase hex followed by a newline, in the tail of `buf`.
fn hex_line(mut id: u64, buf: &mut [u8; 17]) -> &[u8] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut start = 16;
    buf[16] = b'\n';
    loop {
        start -= 1;
        buf[start] = DIGITS[(id & 0xf) as usize];
        id >>= 4;
        if id == 0 {
            break;
        }
    }
    &buf[start..]
}

/// Reads an ID written in `format`.
///
/// # Errors
///
/// [`Error::InvalidId`] naming the input when it is not a number in that form or
/// is 2^63 or above.
pub fn parse_id(text: &str, format: IdFormat) -> Result<Id, Error> {
    let invalid = |reason: &str| Error::InvalidId {
        input: shorten(text),
        reason: reason.to_owned(),
    };
    let value = match format {
        IdFormat::Dec => return text.parse::<Id>(),
        IdFormat::Hex => {
            let digits = text
                .strip_prefix("0x")
                .or_else(|| text.strip_prefix("0X"))
                .unwrap_or(text);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid("not a hexadecimal number"));
            }
            u64::from_str_radix(digits, 16)
                .map_err(|_| invalid("above 2^63 - 1, the largest ID"))?
        }
        IdFormat::Base32 => base32::decode(text).map_err(|e| match e {
            base32::DecodeError::TooLarge => invalid("above 2^63 - 1, the largest ID"),
            e => invalid(&e.to_string()),
        })?,
    };
    Id::new(value).map_err(|_| invalid("above 2^63 - 1, the largest ID"))
}

/// The input as shown in an error: cut at 64 characters.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(format: IdFormat, ids: &[u64]) -> String {
        let mut w = IdWriter::new(Vec::new(), format);
        for &id in ids {
            w.write_id(id).unwrap();
        }
        String::from_utf8(w.finish().unwrap()).unwrap()
    }

    #[test]
    fn forms_write_one_line_per_id() {
        let ids = [0, 1, 175_928_847_299_117_063, i64::MAX as u64];
        assert_eq!(
            written(IdFormat::Dec, &ids),
            "0\n1\n175928847299117063\n9223372036854775807\n"
        );
        assert_eq!(
            written(IdFormat::Hex, &ids),
            "0\n1\n271065ac1020007\n7fffffffffffffff\n"
        );
        assert_eq!(written(IdFormat::Base32, &[0, 31, 32]), "0\nZ\n10\n");
    }

    #[test]
    fn forms_read_back() {
        for format in [IdFormat::Dec, IdFormat::Hex, IdFormat::Base32] {
            for id in [0, 7, 175_928_847_299_117_063, i64::MAX as u64] {
                let text = written(format, &[id]);
                assert_eq!(
                    parse_id(text.trim_end(), format).unwrap().get(),
                    id,
                    "{format:?}"
                );
            }
        }
        assert_eq!(
            parse_id("0x271065AC1020007", IdFormat::Hex).unwrap().get(),
            175_928_847_299_117_063
        );
        assert_eq!(
            parse_id("4w86bb0g4007", IdFormat::Base32).unwrap().get(),
            175_928_847_299_117_063
        );
    }

    #[test]
    fn bad_text_is_an_invalid_id() {
        let cases = [
            ("", IdFormat::Dec),
            ("12a", IdFormat::Dec),
            ("-1", IdFormat::Dec),
            ("", IdFormat::Hex),
            ("0x", IdFormat::Hex),
            ("+ff", IdFormat::Hex),
            ("8000000000000000", IdFormat::Hex),
            ("10000000000000000", IdFormat::Hex),
            ("U", IdFormat::Base32),
            ("", IdFormat::Base32),
            ("ZZZZZZZZZZZZZ", IdFormat::Base32),
        ];
        for (text, format) in cases {
            let err = parse_id(text, format).unwrap_err();
            assert_eq!(err.code(), "invalid_id", "{text:?} {format:?}");
        }
    }
}
