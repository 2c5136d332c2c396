//! idmint-embed's integration tests: the blocking API against real
//! registries and stores (the file registry, PostgreSQL, etcd, a private
//! Redis stopped mid-run, Leaf's `leaf_alloc` on MariaDB), and what a forked
//! child sees.
//!
//! Services come from the environment `scripts/test` sets
//! (`IDMINT_TEST_ETCD_ENDPOINT`) and the machine's own PostgreSQL and
//! MariaDB; a missing one fails under `CI=true` and is skipped elsewhere.

mod bad_input;
mod error_codes;
mod generator;
mod layout_vectors;
mod segments;
mod support;
mod workers;
