//! Tests of the allocator part; being written.
