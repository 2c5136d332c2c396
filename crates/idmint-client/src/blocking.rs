//! [`BlockingClient`]: the async [`Client`] behind blocking calls, for code
//! that has no async runtime.

use crate::{Client, Error};

/// A blocking idmint client: a [`Client`] with a small tokio runtime of its
/// own (one worker thread, which also runs the prefetch refills).
///
/// Everything in [`Client`]'s contract holds: uniqueness, order within a
/// buffer and only trend order across servers, fail-over, a typed
/// [`Error::Unavailable`] when every server is down. Build it with
/// [`ClientBuilder::build_blocking`](crate::ClientBuilder::build_blocking).
///
/// # Panics
/// Its calls block the thread, so calling them, or dropping the client,
/// from inside an async runtime panics (tokio refuses to block a runtime
/// thread); use [`Client`] there.
///
/// # Examples
///
/// ```no_run
/// let client = idmint_client::Client::builder()
///     .servers(["127.0.0.1:8080"])
///     .prefetch(1000)
///     .build_blocking()?;
/// let id = client.next_id("order")?;
/// let more = client.next_ids("order", 10)?;
/// assert!(!more.contains(&id));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BlockingClient {
    // Dropped first: the refill tasks stop before the runtime shuts down.
    client: Client,
    runtime: tokio::runtime::Runtime,
}

impl BlockingClient {
    /// Wraps `client` with a runtime of its own.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the runtime can't be started.
    pub fn new(client: Client) -> Result<BlockingClient, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("idmint-client")
            .enable_all()
            .build()
            .map_err(|e| Error::invalid(format!("can't start the client's runtime: {e}")))?;
        Ok(BlockingClient { client, runtime })
    }

    /// The next ID of `key`; see [`Client::next_id`].
    ///
    /// # Errors
    /// As [`Client::next_id`].
    pub fn next_id(&self, key: &str) -> Result<u64, Error> {
        self.runtime.block_on(self.client.next_id(key))
    }

    /// The next `n_ids` IDs of `key`; see [`Client::next_ids`].
    ///
    /// # Errors
    /// As [`Client::next_ids`].
    pub fn next_ids(&self, key: &str, n_ids: u64) -> Result<Vec<u64>, Error> {
        self.runtime.block_on(self.client.next_ids(key, n_ids))
    }

    /// How many IDs of `key` are prefetched and waiting.
    pub fn buffered(&self, key: &str) -> usize {
        self.client.buffered(key)
    }

    /// The async client inside (clones share its buffers and servers' state).
    pub fn client(&self) -> &Client {
        &self.client
    }
}
