//! The settings of a TCP store client ([`TcpStoreOptions`]): timeouts, the
//! shared secret and the maximum frame size.

use std::fmt;
use std::time::Duration;

use crate::store::DEFAULT_TIMEOUT;
use crate::store::tcp::{DEFAULT_MAX_FRAME_SIZE, redacted};

/// Settings of a [`TcpStore`](super::TcpStore) client.
///
/// ```
/// use nccl_group::TcpStoreOptions;
/// use std::time::Duration;
/// let opts = TcpStoreOptions::default()
///     .with_timeout(Duration::from_secs(60))
///     .with_connect_timeout(Duration::from_secs(30));
/// assert_eq!(opts.timeout, Duration::from_secs(60));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct TcpStoreOptions {
    /// The default timeout of blocking operations
    /// ([`Store::default_timeout`](crate::store::Store::default_timeout)).
    /// Default 300 s.
    pub timeout: Duration,
    /// How long [`TcpStore::connect`](super::TcpStore::connect) keeps
    /// retrying (with exponential backoff) while the server is not up yet.
    /// Default 300 s.
    pub connect_timeout: Duration,
    /// Extra time allowed for the server's answer on top of the operation's
    /// own wait (the read timeout of a `get` is its timeout plus this), and the
    /// write timeout. At most 10 years ([`TcpStore::connect`](super::TcpStore::connect)
    /// refuses more); 0 counts as 1 ms. Default 10 s.
    pub io_margin: Duration,
    /// The shared secret to present to the server, if it requires one.
    pub secret: Option<Vec<u8>>,
    /// The largest frame this client sends or accepts, in bytes; the client
    /// also never sends more than the server's own maximum. Default 64 MiB.
    pub max_frame_size: usize,
}

impl Default for TcpStoreOptions {
    fn default() -> Self {
        TcpStoreOptions {
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_TIMEOUT,
            io_margin: Duration::from_secs(10),
            secret: None,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
        }
    }
}

impl TcpStoreOptions {
    /// Sets [`TcpStoreOptions::timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`TcpStoreOptions::connect_timeout`].
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`TcpStoreOptions::io_margin`].
    pub fn with_io_margin(mut self, margin: Duration) -> Self {
        self.io_margin = margin;
        self
    }

    /// Sets the shared secret.
    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Sets [`TcpStoreOptions::max_frame_size`].
    pub fn with_max_frame_size(mut self, bytes: usize) -> Self {
        self.max_frame_size = bytes;
        self
    }
}

impl fmt::Debug for TcpStoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStoreOptions")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_margin", &self.io_margin)
            .field("secret", &redacted(self.secret.as_deref()))
            .field("max_frame_size", &self.max_frame_size)
            .finish()
    }
}
