//! The segment allocator. Being written.
