//! `idmint reveal PUBLIC...`: public IDs turned back into internal IDs, with the
//! same key(s), `--bits`, `--key-id-bits` and `--format` they were made with.
//!
//! A public ID of the right width reveals to *some* number under any key: a
//! permutation cannot tell a wrong key. What it can refuse, it refuses with exit
//! 2: text that is not a public ID of the format, a value wider than `--bits`, a
//! key ID with no key, a value that reveals above 2^63 − 1.

use anyhow::Result;
use clap::Args;

use super::obfuscate::{KeyArgs, inputs, write_all};

#[derive(Debug, Args)]
pub struct RevealArgs {
    /// Public IDs in --format; `-` reads them from stdin (whitespace-separated).
    #[arg(value_name = "PUBLIC", required = true)]
    public_ids: Vec<String>,

    #[command(flatten)]
    keys: KeyArgs,
}

pub fn run(args: RevealArgs) -> Result<()> {
    let obfuscator = args.keys.obfuscator(None)?;
    let codec = args.keys.codec();
    let mut output = String::new();
    for text in inputs(&args.public_ids)? {
        let id = obfuscator.reveal(codec.decode(&text)?)?;
        output.push_str(itoa::Buffer::new().format(id.get()));
        output.push('\n');
    }
    write_all(&output)
}
