//! The one integration-test binary of `idmint-sql`: connecting, migrating and
//! classifying errors against real PostgreSQL and MariaDB (SQLite is covered
//! by the unit tests), with shared helpers in `support`.

mod errors;
mod failover;
mod migrate;
mod support;
