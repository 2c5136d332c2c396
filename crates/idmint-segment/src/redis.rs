//! The Redis strategies and the Redis segment store. Being written.
