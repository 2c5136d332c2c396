//! Integration tests of `idmint-segment` against real SQLite, PostgreSQL,
//! MariaDB and Redis.

mod allocator;
mod redis;
mod sql;
mod support;
mod tinyid;
