//! RFC 9562 UUIDs (being written).
