//! Tests of the redis part; being written.
