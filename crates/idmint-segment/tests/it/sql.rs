//! Tests of the sql part; being written.
