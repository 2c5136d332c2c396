//! SQL plumbing shared by `idmint-registry` and `idmint-segment`: connecting to
//! PostgreSQL, MySQL/MariaDB or SQLite by URL, the dialect differences they
//! care about, versioned migrations the binary runs itself, and which database
//! errors are worth a retry.

#![deny(missing_docs)]
