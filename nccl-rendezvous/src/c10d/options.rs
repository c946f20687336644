//! The settings of a [`C10dStore`](super::C10dStore): timeouts only (c10d
//! has no authentication and no frame-size negotiation).

use std::time::Duration;

use crate::DEFAULT_TIMEOUT;
use crate::setters::with_setters;

/// Settings of a [`C10dStore`](super::C10dStore).
///
/// ```
/// use nccl_rendezvous::C10dStoreOptions;
/// use std::time::Duration;
/// let opts = C10dStoreOptions::default()
///     .with_timeout(Duration::from_secs(60))
///     .with_io_margin(Duration::from_secs(2));
/// assert_eq!(opts.connect_timeout, Duration::from_secs(300));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct C10dStoreOptions {
    /// The default timeout of blocking operations
    /// ([`Store::default_timeout`](crate::Store::default_timeout)).
    ///
    /// Default 300 s, as torch's.
    pub timeout: Duration,
    /// How long [`C10dStore::connect_with`](super::C10dStore::connect_with)
    /// keeps retrying (with exponential backoff) while the server is not up
    /// yet.
    ///
    /// Default 300 s.
    pub connect_timeout: Duration,
    /// How long a reply may take when it does not wait for other ranks
    /// (every answer but a `get`'s or `wait`'s wait itself), and the write
    /// timeout: a server silent for longer is
    /// [`StoreError::Unresponsive`](crate::StoreError::Unresponsive).
    ///
    /// At most 10 years (refused above); 0 counts as 1 ms. Default 10 s.
    pub io_margin: Duration,
}

impl Default for C10dStoreOptions {
    fn default() -> Self {
        C10dStoreOptions {
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_TIMEOUT,
            io_margin: Duration::from_secs(10),
        }
    }
}

impl C10dStoreOptions {
    with_setters! {
        /// Sets [`C10dStoreOptions::timeout`].
        with_timeout(timeout: Duration) => timeout = timeout;
        /// Sets [`C10dStoreOptions::connect_timeout`].
        with_connect_timeout(timeout: Duration) => connect_timeout = timeout;
        /// Sets [`C10dStoreOptions::io_margin`].
        with_io_margin(margin: Duration) => io_margin = margin;
    }
}
