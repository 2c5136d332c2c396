//! Keyed, reversible obfuscation of IDs and their text encodings (being written).
