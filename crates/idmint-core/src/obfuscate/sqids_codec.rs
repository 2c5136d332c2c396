//! Sqids for one `u64` with the default options (alphabet, no minimum length,
//! blocklist), written for speed and checked against the `sqids` crate.
//!
//! The `sqids` crate encodes a number in about 7 µs on the project's machine:
//! every call allocates a dozen strings and scans the whole blocklist (560 words)
//! with `str::contains`. This does the same steps, for the one-number case, with
//! tables built once: the 62 rotated alphabets, and the blocklist as sorted packed
//! keys behind a bitset of three-letter prefixes, so most positions of a candidate
//! are ruled out by one bit test. The algorithm, alphabet shuffle and blocklist
//! rules are the crate's (and the Sqids specification's); the word list is the
//! crate's own `default_blocklist()`; the tests compare the output with the
//! crate's for random values, short values and values whose first candidate is
//! blocked.

/// The alphabet length (the default alphabet: `a-z`, `A-Z`, `0-9`).
const N: usize = 62;
/// The longest candidate a `u64` makes: a prefix symbol and 11 base-61 digits.
const MAX_LEN: usize = 12;
/// A three-symbol window as an index into the prefix bitsets (36 lowercase symbols).
const TRIGRAMS: usize = 36 * 36 * 36;

/// Why a string is not the Sqids form of one `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SqidsError {
    /// A symbol outside the alphabet.
    Symbol,
    /// Not exactly one number (empty, or a separator inside).
    NotOne,
    /// The number is above 2^64 − 1.
    TooLarge,
    /// It decodes, but is not the string `encode` writes for that number.
    NotCanonical,
}

/// Every candidate for some value contains a blocklist word (never seen in
/// practice: it would take 63 blocked candidates in a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AllBlocked;

pub(super) struct SqidsCodec {
    /// The shuffled alphabet (the crate shuffles the default alphabet once).
    alphabet: [u8; N],
    /// For each offset: the alphabet rotated left by it, then reversed. Symbol 0
    /// is the separator, symbols 1..62 the base-61 digits.
    reversed: Box<[[u8; N]; N]>,
    /// The index of each ASCII symbol in `alphabet`, or `u8::MAX`.
    index: [u8; 128],
    blocklist: Blocklist,
}

impl SqidsCodec {
    pub(super) fn new() -> SqidsCodec {
        let mut alphabet = [0u8; N];
        alphabet.copy_from_slice(sqids::DEFAULT_ALPHABET.as_bytes());
        shuffle(&mut alphabet);
        let mut reversed = Box::new([[0u8; N]; N]);
        for (offset, table) in reversed.iter_mut().enumerate() {
            for (k, symbol) in table.iter_mut().enumerate() {
                // rotated[j] = alphabet[(offset + j) % N]; reversed[k] = rotated[N - 1 - k].
                *symbol = alphabet[(offset + N - 1 - k) % N];
            }
        }
        let mut index = [u8::MAX; 128];
        for (i, &symbol) in alphabet.iter().enumerate() {
            index[usize::from(symbol)] = i as u8;
        }
        SqidsCodec {
            alphabet,
            reversed,
            index,
            blocklist: Blocklist::new(&alphabet),
        }
    }

    /// Appends the Sqids string of `value` to `out`.
    #[inline]
    pub(super) fn encode_into(&self, value: u64, out: &mut String) -> Result<(), AllBlocked> {
        let mut buf = [0u8; MAX_LEN];
        let text = self.encode_to(value, &mut buf)?;
        out.push_str(text);
        Ok(())
    }

    /// The Sqids string of `value`, in `buf`.
    fn encode_to<'b>(&self, value: u64, buf: &'b mut [u8; MAX_LEN]) -> Result<&'b str, AllBlocked> {
        // The crate's offset for numbers [v]: (alphabet[v % N] + index 0 + count 1) % N.
        let first = (usize::from(self.alphabet[(value % N as u64) as usize]) + 1) % N;
        // It tries increments 0..=N, one more than there are offsets.
        for increment in 0..=N {
            let len = self.candidate((first + increment) % N, value, buf);
            if !self.blocklist.blocks(&buf[..len]) {
                return Ok(std::str::from_utf8(&buf[..len]).expect("alphabet symbols are ASCII"));
            }
        }
        Err(AllBlocked)
    }

    /// Writes the candidate for `value` at `offset` into `buf`; returns its length.
    #[inline]
    fn candidate(&self, offset: usize, mut value: u64, buf: &mut [u8; MAX_LEN]) -> usize {
        let table = &self.reversed[offset];
        // The prefix is the rotated alphabet's first symbol: the reversed one's last.
        buf[0] = table[N - 1];
        let digits = &table[1..];
        // Base 61, least significant digit first, two digits per 64-bit division
        // (the divisions form the critical path).
        const BASE: u64 = N as u64 - 1;
        let mut tmp = [0u8; MAX_LEN];
        let mut n = 0;
        while value >= BASE * BASE {
            let pair = (value % (BASE * BASE)) as u32;
            value /= BASE * BASE;
            tmp[n] = digits[(pair % BASE as u32) as usize];
            tmp[n + 1] = digits[(pair / BASE as u32) as usize];
            n += 2;
        }
        loop {
            tmp[n] = digits[(value % BASE) as usize];
            n += 1;
            value /= BASE;
            if value == 0 {
                break;
            }
        }
        for (dst, src) in buf[1..=n].iter_mut().zip(tmp[..n].iter().rev()) {
            *dst = *src;
        }
        n + 1
    }

    /// The value whose Sqids string is `text`; only that exact string is accepted.
    pub(super) fn decode(&self, text: &str) -> Result<u64, SqidsError> {
        let bytes = text.as_bytes();
        let offset = |b: u8| {
            self.index
                .get(usize::from(b))
                .copied()
                .filter(|&i| i != u8::MAX)
        };
        if bytes.iter().any(|&b| offset(b).is_none()) {
            return Err(SqidsError::Symbol);
        }
        let (&prefix, digits) = bytes.split_first().ok_or(SqidsError::NotOne)?;
        let table = &self.reversed[usize::from(offset(prefix).unwrap())];
        if digits.is_empty() || digits.contains(&table[0]) {
            return Err(SqidsError::NotOne);
        }
        let mut value: u64 = 0;
        for &symbol in digits {
            let digit = table[1..].iter().position(|&s| s == symbol).unwrap() as u64;
            value = value
                .checked_mul(N as u64 - 1)
                .and_then(|v| v.checked_add(digit))
                .ok_or(SqidsError::TooLarge)?;
        }
        let mut buf = [0u8; MAX_LEN];
        match self.encode_to(value, &mut buf) {
            Ok(canonical) if canonical == text => Ok(value),
            _ => Err(SqidsError::NotCanonical),
        }
    }
}

/// The `sqids` crate's shuffle, applied to the alphabet once when it is built.
fn shuffle(symbols: &mut [u8; N]) {
    for i in 0..N - 1 {
        let j = N - 1 - i;
        let r = (i as u32 * j as u32 + u32::from(symbols[i]) + u32::from(symbols[j])) % N as u32;
        symbols.swap(i, r as usize);
    }
}

/// The default blocklist, under the Sqids rules: a candidate (lower-cased) is
/// blocked when
/// - it is at most 3 symbols long, or the word is, and it equals the word;
/// - else, when the word has a digit, it starts or ends with the word;
/// - else, it contains the word.
struct Blocklist {
    /// Words of exactly 3 symbols (shorter ones are dropped, as the crate does).
    short: Vec<u128>,
    /// Longer words with a digit, and their first and last three symbols.
    digit_words: Vec<u128>,
    digit_heads: Box<[u64]>,
    digit_tails: Box<[u64]>,
    /// Longer words of letters only, and their first three symbols.
    letter_words: Vec<u128>,
    letter_heads: Box<[u64]>,
    /// The lengths of the longer words, as a bitmask.
    lengths: u32,
}

impl Blocklist {
    fn new(alphabet: &[u8; N]) -> Blocklist {
        let lower: Vec<u8> = alphabet.iter().map(u8::to_ascii_lowercase).collect();
        let bitset = || vec![0u64; TRIGRAMS.div_ceil(64)].into_boxed_slice();
        let mut list = Blocklist {
            short: Vec::new(),
            digit_words: Vec::new(),
            digit_heads: bitset(),
            digit_tails: bitset(),
            letter_words: Vec::new(),
            letter_heads: bitset(),
            lengths: 0,
        };
        for word in sqids::default_blocklist() {
            let word = word.to_lowercase().into_bytes();
            // The crate keeps words of 3 or more symbols, all in the alphabet.
            if word.len() < 3 || !word.iter().all(|b| lower.contains(b)) {
                continue;
            }
            // No candidate is longer than MAX_LEN, so longer words never match.
            if word.len() > MAX_LEN {
                continue;
            }
            if word.len() == 3 {
                list.short.push(pack(&word));
            } else if word.iter().any(u8::is_ascii_digit) {
                list.digit_words.push(pack(&word));
                set(&mut list.digit_heads, trigram(&word[..3]));
                set(&mut list.digit_tails, trigram(&word[word.len() - 3..]));
                list.lengths |= 1 << word.len();
            } else {
                list.letter_words.push(pack(&word));
                set(&mut list.letter_heads, trigram(&word[..3]));
                list.lengths |= 1 << word.len();
            }
        }
        for words in [
            &mut list.short,
            &mut list.digit_words,
            &mut list.letter_words,
        ] {
            words.sort_unstable();
            words.dedup();
        }
        list
    }

    /// True when the candidate (as written, mixed case) contains a blocked word.
    #[inline]
    fn blocks(&self, candidate: &[u8]) -> bool {
        let mut lower = [0u8; MAX_LEN];
        let len = candidate.len();
        for (l, c) in lower.iter_mut().zip(candidate) {
            *l = c.to_ascii_lowercase();
        }
        let id = &lower[..len];
        if len <= 3 {
            return len == 3 && self.short.binary_search(&pack(id)).is_ok();
        }
        let lengths = |max: usize| (4..=max).filter(move |&k| self.lengths & (1 << k) != 0);
        // Words with a digit: a prefix or a suffix of the candidate.
        if get(&self.digit_heads, trigram(&id[..3]))
            && lengths(len).any(|k| self.digit_words.binary_search(&pack(&id[..k])).is_ok())
        {
            return true;
        }
        if get(&self.digit_tails, trigram(&id[len - 3..]))
            && lengths(len).any(|k| {
                self.digit_words
                    .binary_search(&pack(&id[len - k..]))
                    .is_ok()
            })
        {
            return true;
        }
        // Words of letters: anywhere.
        (0..=len - 4).any(|start| {
            get(&self.letter_heads, trigram(&id[start..start + 3]))
                && lengths(len - start).any(|k| {
                    self.letter_words
                        .binary_search(&pack(&id[start..start + k]))
                        .is_ok()
                })
        })
    }
}

/// Up to 15 lower-case symbols and their count, as one comparable integer.
fn pack(symbols: &[u8]) -> u128 {
    debug_assert!(symbols.len() < 16);
    let mut bytes = [0u8; 16];
    bytes[..symbols.len()].copy_from_slice(symbols);
    bytes[15] = symbols.len() as u8;
    u128::from_be_bytes(bytes)
}

/// Each alphabet symbol, either case, as a number below 36 (`a` 0 ... `z` 25,
/// `0` 26 ... `9` 35).
const SYMBOL: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 26 {
        table[b'a' as usize + i] = i as u8;
        table[b'A' as usize + i] = i as u8;
        i += 1;
    }
    while i < 36 {
        table[b'0' as usize + i - 26] = i as u8;
        i += 1;
    }
    table
};

/// Three symbols (either case) as an index below 36^3.
#[inline]
fn trigram(symbols: &[u8]) -> usize {
    let value = |b: u8| usize::from(SYMBOL[usize::from(b)]);
    (value(symbols[0]) * 36 + value(symbols[1])) * 36 + value(symbols[2])
}

fn set(bits: &mut [u64], i: usize) {
    bits[i / 64] |= 1 << (i % 64);
}

fn get(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use proptest::prelude::*;

    use super::*;

    /// The values the tests compare: random ones, small ones (the short-candidate
    /// rules), and the edges.
    fn values(random: usize) -> Vec<u64> {
        let mut values: Vec<u64> = (0..5000).chain([u64::MAX, u64::MAX - 1, 1 << 63]).collect();
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        values.extend((0..random).map(|_| {
            // xorshift64*: reproducible without a dependency.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> (state % 40)
        }));
        values
    }

    #[test]
    fn encodes_as_the_sqids_crate() {
        let (ours, theirs) = (&*OURS, &*THEIRS);
        for value in values(20_000) {
            let mut text = String::new();
            ours.encode_into(value, &mut text).unwrap();
            assert_eq!(text, theirs.encode(&[value]).unwrap(), "{value}");
        }
    }

    /// Values whose first candidate spells a blocklist word, where each rule
    /// applies (letter words anywhere, digit words at either end), in any case:
    /// the crate moves on to later candidates, and so must we.
    #[test]
    fn blocked_candidates_move_on_as_the_sqids_crate_does() {
        let (ours, theirs) = (&*OURS, &*THEIRS);
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut random = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        // (word, where in the digits after the prefix symbol; None: the word
        // starts with the prefix symbol itself).
        for (word, place) in [
            ("fuck", Some(0)),
            ("boob", Some(3)),
            ("sexy", Some(6)),
            ("b00b", None),
            ("1d10t", Some(usize::MAX)),
            ("ah01e", None),
        ] {
            let mut hits = 0;
            for _ in 0..1_000_000 {
                if hits == 10 {
                    break;
                }
                // A candidate of 10 digits at a random offset, with the word
                // written into it (upper or lower case, whichever the digits have).
                let (offset, word) = match place {
                    Some(_) => ((random() % N as u64) as usize, word),
                    None => {
                        // Only 52 of the 62 offsets are ever a value's first one
                        // (the offset comes from a symbol's code); those of `b`
                        // and of `a` and `A` are.
                        let c = word.as_bytes()[0];
                        let prefix = if c == b'a' && random() % 2 == 0 {
                            b'A'
                        } else {
                            c
                        };
                        (usize::from(ours.index[usize::from(prefix)]), &word[1..])
                    }
                };
                let digits = &ours.reversed[offset][1..];
                let mut symbols: Vec<u8> = (0..10)
                    .map(|_| digits[(random() % (N as u64 - 1)) as usize])
                    .collect();
                let at = place.unwrap_or(0).min(symbols.len() - word.len());
                let mut spelled = true;
                for (k, c) in word.bytes().enumerate() {
                    let upper = random() % 2 == 0;
                    let pick = if upper { c.to_ascii_uppercase() } else { c };
                    match [pick, c, c.to_ascii_uppercase()]
                        .into_iter()
                        .find(|s| digits.contains(s))
                    {
                        Some(symbol) => symbols[at + k] = symbol,
                        None => spelled = false,
                    }
                }
                let value = symbols.iter().try_fold(0u64, |v, s| {
                    let digit = digits.iter().position(|d| d == s).unwrap() as u64;
                    v.checked_mul(N as u64 - 1)?.checked_add(digit)
                });
                let Some(value) = value.filter(|_| spelled) else {
                    continue;
                };
                // The value picks its own offset; keep it only if that is this one.
                let first = (usize::from(ours.alphabet[(value % N as u64) as usize]) + 1) % N;
                if first != offset {
                    continue;
                }
                let mut buf = [0u8; MAX_LEN];
                let len = ours.candidate(first, value, &mut buf);
                let candidate = std::str::from_utf8(&buf[..len]).unwrap();
                assert!(ours.blocklist.blocks(&buf[..len]), "{word}: {candidate}");
                let mut text = String::new();
                ours.encode_into(value, &mut text).unwrap();
                assert_eq!(text, theirs.encode(&[value]).unwrap(), "{word}: {value}");
                assert_ne!(text.as_bytes(), &buf[..len]);
                hits += 1;
            }
            assert_eq!(hits, 10, "{word}: too few values found");
        }
    }

    /// One codec and one reference for all tests: both parse the word list.
    static OURS: LazyLock<SqidsCodec> = LazyLock::new(SqidsCodec::new);
    static THEIRS: LazyLock<sqids::Sqids> = LazyLock::new(sqids::Sqids::default);

    #[test]
    fn blocklist_rules() {
        let ours = &*OURS;
        // Candidates that embed words in each position the rules distinguish.
        let cases = [
            ("goo", true),       // 3 symbols, equal to a 3-symbol word
            ("gooX", false),     // 3-symbol words only block equal candidates
            ("Ab", false),       // too short for any word
            ("xxSexyxx", true),  // a letter word inside
            ("xxxxboob", true),  // at the end
            ("b00bxxxx", true),  // a digit word as a prefix
            ("xxxxb00b", true),  // as a suffix
            ("xxb00bxx", false), // digit words only at the ends
        ];
        for (candidate, blocked) in cases {
            assert_eq!(
                ours.blocklist.blocks(candidate.as_bytes()),
                blocked,
                "{candidate}"
            );
        }
    }

    #[test]
    fn decoding_refuses_what_the_crate_would_not_write() {
        let ours = &*OURS;
        assert_eq!(ours.decode(""), Err(SqidsError::NotOne));
        assert_eq!(ours.decode("a"), Err(SqidsError::NotOne));
        assert_eq!(ours.decode("ab_c"), Err(SqidsError::Symbol));
        assert_eq!(ours.decode("é"), Err(SqidsError::Symbol));
        let pair = THEIRS.encode(&[1, 2]).unwrap();
        assert_eq!(ours.decode(&pair), Err(SqidsError::NotOne));
        let max = THEIRS.encode(&[u64::MAX]).unwrap();
        assert_eq!(ours.decode(&max), Ok(u64::MAX));
        // One more digit (digit 1 of the prefix's table) is above 2^64 - 1.
        let table = &ours.reversed[usize::from(ours.index[usize::from(max.as_bytes()[0])])];
        let longer = format!("{max}{}", char::from(table[2]));
        assert_eq!(ours.decode(&longer), Err(SqidsError::TooLarge));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any string of alphabet symbols: we accept it exactly when the crate
        /// reads it as one value and writes that value as this very string.
        #[test]
        fn decodes_as_the_sqids_crate(text in "[a-zA-Z0-9]{1,13}") {
            let theirs = &*THEIRS;
            let expected = match theirs.decode(&text)[..] {
                [value] if theirs.encode(&[value]).unwrap() == text => Some(value),
                _ => None,
            };
            prop_assert_eq!(OURS.decode(&text).ok(), expected);
        }

        #[test]
        fn random_values_round_trip(value in any::<u64>()) {
            let mut text = String::new();
            OURS.encode_into(value, &mut text).unwrap();
            prop_assert_eq!(OURS.decode(&text), Ok(value));
        }
    }
}
