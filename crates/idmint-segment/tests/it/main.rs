//! Integration tests of `idmint-segment` against real SQLite, PostgreSQL,
//! MariaDB and Redis.

mod allocator;
mod redis;
mod redis_ha;
mod sql;
mod support;
mod tinyid;
