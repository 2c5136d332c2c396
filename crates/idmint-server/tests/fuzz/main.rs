//! The server's fuzz tests (proptest; `scripts/fuzz` runs them with a large
//! case count): the configuration (`config.rs`) and HTTP paths and query
//! parameters against an in-process server (`http.rs`). The RESP parser's
//! are next to it, in `src/resp/frame/fuzz_tests.rs`.

mod config;
mod http;
