//! [`Cached`]: Baidu CachedUidGenerator's ring buffer of pre-made IDs (being written).
