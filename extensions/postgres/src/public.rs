//! Public IDs: `idmint_obfuscate` and `idmint_reveal`, the keyed permutation
//! of the config's `[obfuscation]` section (`idmint_core::Obfuscator`, built
//! by `idmint-node` as `idmint serve` builds it), so a public ID made here is
//! the one the server's public keys and `idmint obfuscate` make with the same
//! key, and reveals there too. Numbers only: the text forms
//! (`obfuscation.format`) are for the server's and the CLI's output.

use idmint_core::{Id, Obfuscator, PublicId};
use pgrx::prelude::*;

use crate::error::Failure;

/// The configured obfuscator, or `obfuscation_disabled` without a key.
fn obfuscator() -> Result<&'static Obfuscator, Failure> {
    let settings = crate::settings::settings()?;
    settings.obfuscator.as_ref().ok_or_else(|| {
        Failure::new(
            "obfuscation_disabled",
            "no obfuscation key: set obfuscation.key in the config file idmint.config names \
             (or IDMINT_OBFUSCATION_KEY in the server's environment)",
        )
    })
}

/// `value` as a bigint, or `invalid_obfuscator` when a 64-bit wide public ID
/// does not fit one.
fn bigint(value: u64) -> Result<i64, Failure> {
    i64::try_from(value).map_err(|_| {
        Failure::new(
            "invalid_obfuscator",
            format!(
                "public ID {value} does not fit a bigint: obfuscation.bits = 64 makes such IDs; \
                 use 63 or fewer"
            ),
        )
    })
}

fn obfuscate(id: i64) -> Result<i64, Failure> {
    let obfuscator = obfuscator()?;
    let id = u64::try_from(id)
        .ok()
        .and_then(|v| Id::new(v).ok())
        .ok_or_else(|| Failure::new("invalid_id", format!("id {id} is negative")))?;
    bigint(obfuscator.obfuscate(id)?.get())
}

fn reveal(public_id: i64) -> Result<i64, Failure> {
    let obfuscator = obfuscator()?;
    let public = u64::try_from(public_id).map_err(|_| {
        Failure::new(
            "invalid_public_id",
            format!("public ID {public_id} is negative"),
        )
    })?;
    bigint(obfuscator.reveal(PublicId::from(public))?.get())
}

/// The public ID of `id`, under `[obfuscation]`'s active key.
#[pg_extern(stable, parallel_safe)]
fn idmint_obfuscate(id: i64) -> i64 {
    obfuscate(id).unwrap_or_else(|f| f.raise("idmint_obfuscate"))
}

/// The ID behind `public_id`, under the key its key-ID bits name.
#[pg_extern(stable, parallel_safe)]
fn idmint_reveal(public_id: i64) -> i64 {
    reveal(public_id).unwrap_or_else(|f| f.raise("idmint_reveal"))
}
