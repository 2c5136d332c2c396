//! The SQL segment store (SQLite, PostgreSQL, MySQL/MariaDB). Being written.
