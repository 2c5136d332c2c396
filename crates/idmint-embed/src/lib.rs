//! idmint inside another program's process: the one layer every language
//! binding (Python, and to come Node.js, Java, Go) wraps thinly.
//!
//! Blocking and language-neutral: plain integers, strings and a single
//! [`Error`] carrying idmint's stable code. What needs a runtime (the
//! keeper that holds a leased worker ID, the segment preloader, the calls to
//! registries and stores) runs on a tokio runtime each object owns, on one
//! thread of its own; the caller's thread only ever blocks on it.
//!
//! - [`Layout`]: the CLI and config text form, decode, compose, run-out.
//! - [`Generator`]: snowflake IDs with a fixed worker ID, or one leased from
//!   the registry an `idmint serve` config names, by the server's own code
//!   (`idmint-node`, the layer below the server; embed never depends on
//!   `idmint-server`).
//! - [`Segments`]: segment keys from the config's `[segment]` store.
//! - [`PublicIds`]: obfuscate and reveal, decimal, base32 and Sqids text.
//! - [`close_all`]: what a binding calls when its process exits, so the
//!   leases still held are released then.
//! - What every binding would otherwise decide on its own: the defaults
//!   ([`GeneratorOptions::default`], [`PublicIdsOptions::new`]), the check
//!   of a batch's count ([`Generator::check_count`],
//!   [`Segments::check_count`]), the range of public-ID settings.
//! - [`after_fork_in_child`]: what a binding calls in a forked child, so
//!   nothing of the parent's worker ID or segments is used there.
//!
//! # Examples
//!
//! ```
//! use idmint_embed::{Generator, GeneratorOptions, Layout};
//!
//! let g = Generator::new(GeneratorOptions::new(Layout::parse("twitter")?, 7))?;
//! let id = g.next_id()?;
//! let parts = g.layout().decode(id)?;
//! assert_eq!(parts.worker, 7);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! From a config file, as `idmint serve` reads it (here the file registry in
//! a data directory):
//!
//! ```
//! use idmint_embed::Generator;
//!
//! let dir = tempfile::tempdir()?;
//! let config = dir.path().join("idmint.toml");
//! std::fs::write(&config, format!(
//!     "[server]\ndata_dir = {:?}\n[snowflake]\nlayout = \"twitter\"\nregistry = \"file\"\n",
//!     dir.path().join("data"),
//! ))?;
//! let g = Generator::from_config(&config)?;
//! let ids = g.next_ids(10_000)?;
//! assert!(ids.windows(2).all(|w| w[0] < w[1]));
//! assert_eq!(g.status()?.lease, "held");
//! g.close(); // releases the lease
//! assert_eq!(g.next_id().unwrap_err().code(), "closed");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod count;
mod error;
mod fork;
mod generator;
mod layout;
mod open;
mod public;
mod runtime;
mod segments;
mod workers;

pub use error::{Error, error_codes};
pub use fork::{after_fork_in_child, generation as fork_generation};
pub use generator::{Generator, GeneratorOptions, GeneratorStatus, MAX_BATCH, node_identity};
/// The instants layouts decode to and compose from.
pub use jiff::Timestamp;
pub use layout::{Decoded, IdParts, Layout};
pub use open::close_all;
pub use public::{PublicIds, PublicIdsOptions};
pub use segments::Segments;
