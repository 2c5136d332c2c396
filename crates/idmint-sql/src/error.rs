//! [`Error`]: what can go wrong connecting, migrating and naming things.

use std::time::Duration;

/// Everything that can go wrong in `idmint-sql`.
///
/// Errors from a consumer's own queries stay `sqlx::Error`s (classify them with
/// [`crate::is_retryable`] and [`crate::is_unique_violation`]); this type covers
/// what this crate does itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A database URL that can't be used: unknown scheme or malformed.
    #[error("database url {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A configurable name (a table) that is not a plain SQL identifier.
    #[error("invalid sql identifier {name:?}: {reason}")]
    InvalidIdentifier {
        /// The name given, shortened if long.
        name: String,
        /// Why it is not an identifier.
        reason: String,
    },

    /// Connection options that can't work (a pool of 0, a zero timeout).
    #[error("invalid connection options: {0}")]
    InvalidOptions(String),

    /// A migration set that is not well formed: versions not strictly
    /// increasing from 1, a bad component name, an empty step. A bug in the
    /// component that supplied it, reported rather than half applied.
    #[error("invalid migrations for component {component:?}: {reason}")]
    InvalidMigrations {
        /// The component.
        component: String,
        /// What is wrong.
        reason: String,
    },

    /// Opening the pool failed.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// No host of a URL with several hosts (or with `target_session_attrs`)
    /// takes writes: each is a standby, read-only or unreachable. Transient: a
    /// promotion under way ends it.
    #[error("no writable host in {url}: {hosts}")]
    NoWritableHost {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What each host was, in the URL's order.
        hosts: String,
    },

    /// Something did not finish in time (connecting, waiting for the
    /// migration lock).
    #[error("{operation} on {url} timed out after {after:?}")]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The URL, with any password replaced by `***`.
        url: String,
        /// The bound that ran out.
        after: Duration,
    },

    /// A statement this crate ran failed.
    #[error("{operation} failed: {source}")]
    Database {
        /// What was being done.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// The database records a schema version for the component that this
    /// binary does not know: a newer idmint migrated it. Running an older
    /// binary against it could misread or damage data, so it is refused.
    #[error(
        "the database has schema version {recorded} of {component:?}, newer than version \
         {known}, the newest this binary knows: run a newer idmint against this database"
    )]
    SchemaTooNew {
        /// The component.
        component: String,
        /// The newest version recorded in the database.
        recorded: i64,
        /// The newest version this binary knows.
        known: u32,
    },

    /// A migration step failed. On PostgreSQL and SQLite nothing of the step
    /// remains; on MySQL/MariaDB, where DDL commits by itself, statements of the
    /// step before the failing one may remain (steps are written to be re-run).
    #[error("migration {version} of {component:?} ({description}) failed: {source}")]
    Migration {
        /// The component.
        component: String,
        /// The step's version.
        version: u32,
        /// The step's description.
        description: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The driver's error underneath, if there is one.
    pub fn sqlx(&self) -> Option<&sqlx::Error> {
        match self {
            Error::Connect { source, .. }
            | Error::Database { source, .. }
            | Error::Migration { source, .. } => Some(source),
            _ => None,
        }
    }

    /// True for errors caused by configuration or by the caller's input
    /// (URL, identifier, options, migration set), which retrying won't fix.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Error::InvalidUrl { .. }
                | Error::InvalidIdentifier { .. }
                | Error::InvalidOptions(_)
                | Error::InvalidMigrations { .. }
        )
    }

    /// True for errors that may go away by themselves: timeouts, connection
    /// failures, and driver errors that [`crate::is_retryable`] classifies so.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::Connect { .. } | Error::NoWritableHost { .. } => true,
            Error::Database { source, .. } | Error::Migration { source, .. } => {
                crate::is_retryable(source)
                    || matches!(source, sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut)
            }
            _ => false,
        }
    }
}
