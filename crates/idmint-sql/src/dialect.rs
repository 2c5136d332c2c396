//! [`Dialect`]: which database a URL names, and the few SQL differences
//! between them that idmint's statements care about.

use std::fmt;

use crate::Identifier;
use crate::error::{Error, Result};

/// The SQL dialect of a database, chosen by its URL's scheme.
///
/// | dialect | URL schemes | placeholders | identifiers |
/// |---|---|---|---|
/// | [`Dialect::Postgres`] | `postgres://`, `postgresql://` | `$1, $2, …` | `"name"` |
/// | [`Dialect::MySql`] | `mysql://`, `mariadb://` | `?` | `` `name` `` |
/// | [`Dialect::Sqlite`] | `sqlite:` | `?` | `"name"` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB (InnoDB).
    MySql,
    /// SQLite (3.35 or later, for `RETURNING`; sqlx bundles a newer one).
    Sqlite,
}

impl Dialect {
    /// The dialect a database URL names.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for any other scheme (the message shows the URL
    /// with its password replaced).
    ///
    /// # Examples
    /// ```
    /// use idmint_sql::Dialect;
    ///
    /// assert_eq!(Dialect::from_url("postgres://u@db/ids")?, Dialect::Postgres);
    /// assert_eq!(Dialect::from_url("mariadb://root@db/ids")?, Dialect::MySql);
    /// assert_eq!(Dialect::from_url("sqlite://ids.db")?, Dialect::Sqlite);
    /// assert!(Dialect::from_url("oracle://u:pw@db").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Dialect> {
        let lower = url.get(..14).unwrap_or(url).to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Ok(Dialect::Postgres)
        } else if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
            Ok(Dialect::MySql)
        } else if lower.starts_with("sqlite:") {
            Ok(Dialect::Sqlite)
        } else {
            Err(Error::InvalidUrl {
                url: crate::redact::redact_url(url),
                reason: "unsupported scheme; expected postgres://, mysql://, mariadb:// or \
                         sqlite://"
                    .to_owned(),
            })
        }
    }

    /// A short lowercase name: `postgres`, `mysql`, `sqlite` (also the store
    /// kinds of the segment store).
    pub const fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// Rewrites `?` placeholders as `$1, $2, …` for PostgreSQL and leaves the
    /// statement as is for the others.
    ///
    /// Statements are written once with `?`; they must not contain `?` inside
    /// string literals or quoted identifiers (idmint's never do, and validated
    /// [`Identifier`]s can't).
    ///
    /// # Examples
    /// ```
    /// use idmint_sql::Dialect;
    ///
    /// assert_eq!(Dialect::Postgres.placeholders("a = ? AND b = ?"), "a = $1 AND b = $2");
    /// assert_eq!(Dialect::MySql.placeholders("a = ?"), "a = ?");
    /// ```
    pub fn placeholders(self, sql: &str) -> String {
        if self != Dialect::Postgres {
            return sql.to_owned();
        }
        let mut out = String::with_capacity(sql.len() + 16);
        let mut n = 0u32;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// The identifier quoted for this dialect, so a table may be called
    /// `order` or `group` and is used exactly as written (on PostgreSQL,
    /// upper-case letters are kept rather than folded to lower case).
    ///
    /// # Examples
    /// ```
    /// use idmint_sql::{Dialect, Identifier};
    ///
    /// let table = Identifier::new("leaf_alloc")?;
    /// assert_eq!(Dialect::Postgres.quote(&table), "\"leaf_alloc\"");
    /// assert_eq!(Dialect::MySql.quote(&table), "`leaf_alloc`");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quote(self, ident: &Identifier) -> String {
        // A validated identifier holds no quote characters, so no escaping.
        match self {
            Dialect::MySql => format!("`{ident}`"),
            Dialect::Postgres | Dialect::Sqlite => format!("\"{ident}\""),
        }
    }

    /// An SQL expression for "now" that fits a timestamp column of this
    /// dialect as idmint creates it: `now()` (`TIMESTAMPTZ`),
    /// `UTC_TIMESTAMP(6)` (`DATETIME(6)` holding UTC) and ISO-8601 UTC text
    /// with milliseconds on SQLite.
    pub const fn now(self) -> &'static str {
        match self {
            Dialect::Postgres => "now()",
            Dialect::MySql => "UTC_TIMESTAMP(6)",
            Dialect::Sqlite => "strftime('%Y-%m-%d %H:%M:%f', 'now')",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_recognised_case_insensitively() {
        assert_eq!(
            Dialect::from_url("PostgreSQL://u@h/db").unwrap(),
            Dialect::Postgres
        );
        assert_eq!(Dialect::from_url("MYSQL://u@h/db").unwrap(), Dialect::MySql);
        assert_eq!(
            Dialect::from_url("sqlite:relative.db").unwrap(),
            Dialect::Sqlite
        );
        assert_eq!(
            Dialect::from_url("sqlite::memory:").unwrap(),
            Dialect::Sqlite
        );
    }

    #[test]
    fn unknown_scheme_hides_the_password() {
        let err = Dialect::from_url("oracle://u:pw@h/db").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("oracle://u:***@h/db"), "{text}");
        assert!(!text.contains("pw"), "{text}");
        assert!(err.is_config());
        assert!(Dialect::from_url("").is_err());
        assert!(Dialect::from_url("postgres").is_err());
    }

    #[test]
    fn placeholders_are_numbered_only_for_postgres() {
        assert_eq!(
            Dialect::Postgres.placeholders("UPDATE t SET a = ? WHERE b = ? AND c <= ?"),
            "UPDATE t SET a = $1 WHERE b = $2 AND c <= $3"
        );
        assert_eq!(Dialect::Sqlite.placeholders("a = ?"), "a = ?");
        assert_eq!(Dialect::Postgres.placeholders("no params"), "no params");
    }

    #[test]
    fn quoting_per_dialect() {
        let t = Identifier::new("Order_2").unwrap();
        assert_eq!(Dialect::Postgres.quote(&t), "\"Order_2\"");
        assert_eq!(Dialect::Sqlite.quote(&t), "\"Order_2\"");
        assert_eq!(Dialect::MySql.quote(&t), "`Order_2`");
    }
}
