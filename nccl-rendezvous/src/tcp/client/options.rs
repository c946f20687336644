//! The settings of a TCP store client ([`TcpStoreOptions`]): timeouts, the
//! shared secret and the maximum frame size.

use std::fmt;
use std::time::Duration;

use crate::setters::with_setters;
use crate::tcp::{DEFAULT_MAX_FRAME_SIZE, redacted};
use crate::{DEFAULT_TIMEOUT, Result, StoreError, check_time_limit};

/// Settings of a [`TcpStore`](super::TcpStore) client.
///
/// ```
/// use nccl_rendezvous::TcpStoreOptions;
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
    /// ([`Store::default_timeout`](crate::Store::default_timeout)).
    ///
    /// Default 300 s.
    pub timeout: Duration,
    /// How long [`TcpStore::connect`](super::TcpStore::connect) keeps
    /// retrying (with exponential backoff) while the server is not up yet
    /// or is full, and how long a later call needing a new connection waits
    /// for a full server.
    ///
    /// Default 300 s.
    pub connect_timeout: Duration,
    /// Extra time allowed for the server's answer on top of the operation's
    /// own wait (the read timeout of a `get` is its timeout plus this), and the
    /// write timeout.
    ///
    /// At most 10 years ([`TcpStore::connect`](super::TcpStore::connect)
    /// refuses more); 0 counts as 1 ms. Default 10 s.
    pub io_margin: Duration,
    /// The shared secret, if the server has one: the client proves it
    /// holds it, checks that the server does too, and authenticates every
    /// frame under it.
    ///
    /// It never crosses the wire.
    pub secret: Option<Vec<u8>>,
    /// The largest frame this client sends or accepts, in bytes; the client
    /// also never sends more than the server's own maximum.
    ///
    /// Default 64 MiB.
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
    with_setters! {
        /// Sets [`TcpStoreOptions::timeout`].
        with_timeout(timeout: Duration) => timeout = timeout;
        /// Sets [`TcpStoreOptions::connect_timeout`].
        with_connect_timeout(timeout: Duration) => connect_timeout = timeout;
        /// Sets [`TcpStoreOptions::io_margin`].
        with_io_margin(margin: Duration) => io_margin = margin;
        /// Sets the shared secret.
        with_secret(secret: impl Into<Vec<u8>>) => secret = Some(secret.into());
        /// Sets [`TcpStoreOptions::max_frame_size`].
        with_max_frame_size(bytes: usize) => max_frame_size = bytes;
    }

    /// Refuses settings the client cannot run with, naming the setting.
    pub(super) fn check(&self) -> Result<()> {
        if self.max_frame_size < 64 {
            return Err(StoreError::InvalidArgument {
                what: "max_frame_size",
                given: self.max_frame_size.to_string(),
                expected: "at least 64 bytes (default 64 MiB)".into(),
            });
        }
        if self.secret.as_ref().is_some_and(Vec::is_empty) {
            return Err(StoreError::InvalidArgument {
                what: "secret",
                given: "\"\"".into(),
                expected: "a non-empty secret, or none".into(),
            });
        }
        check_time_limit("io_margin", self.io_margin, "10 s")
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
