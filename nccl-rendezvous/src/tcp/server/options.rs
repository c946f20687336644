//! The settings of a TCP store server ([`TcpStoreServerOptions`]): the
//! secret, who may connect without one, and every bound on its resources.

use std::fmt;
use std::time::Duration;

use crate::tcp::{DEFAULT_MAX_FRAME_SIZE, redacted};
use crate::{Result, StoreError, check_time_limit};

/// Settings of a [`TcpStoreServer`](super::TcpStoreServer).
///
/// Start from `TcpStoreServerOptions::default()` and change what you need:
///
/// ```
/// use nccl_rendezvous::TcpStoreServerOptions;
/// let opts = TcpStoreServerOptions::default().with_secret(b"s3cret".to_vec());
/// assert!(format!("{opts:?}").contains("<redacted>"));
/// ```
///
/// # Who may connect
///
/// With a [`secret`](Self::secret), only clients that prove they hold it
/// (a challenge and response over fresh nonces; the secret never crosses
/// the wire), and every frame after that is authenticated. Without one,
/// only clients on the server's own host (loopback, or this host's own
/// address), unless [`allow_unauthenticated_remote`](Self::allow_unauthenticated_remote)
/// is set. The README's security section says what this protects against.
///
/// # What bounds the server's resources
///
/// - Each open connection costs one thread and two file descriptors;
///   [`max_connections`](Self::max_connections) bounds them (lowered at
///   bind to what the process's file descriptor limit allows).
/// - Until its handshake is done, a connection may send frames of at most
///   512 bytes and must finish within
///   [`handshake_timeout`](Self::handshake_timeout), or lose its slot.
/// - After it, a request is at most [`max_frame_size`](Self::max_frame_size)
///   bytes, read as its bytes arrive (never allocated from the length a
///   header claims), and must arrive within [`io_timeout`](Self::io_timeout).
///   Its keys, values and key count are checked against
///   [`max_key_len`](Self::max_key_len), [`max_value_len`](Self::max_value_len)
///   and [`max_keys_per_request`](Self::max_keys_per_request) from the
///   frame's first bytes, before the rest is read.
/// - What is stored is bounded by [`max_stored_keys`](Self::max_stored_keys)
///   and [`max_stored_bytes`](Self::max_stored_bytes): a request past them
///   is refused and nothing stored changes.
#[derive(Clone)]
#[non_exhaustive]
pub struct TcpStoreServerOptions {
    /// When set, every client must prove it holds this secret, and every
    /// frame is authenticated under a key derived from it.
    pub secret: Option<Vec<u8>>,
    /// Without a secret, accept clients from other hosts too (by default
    /// only clients on this host are accepted, as Redis's protected mode
    /// does). Anyone who can reach the port can then read and write every
    /// key. `NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1` sets it for
    /// [`RendezvousConfig`](crate::RendezvousConfig). Default `false`.
    pub allow_unauthenticated_remote: bool,
    /// How long a new connection has to finish its handshake, from the
    /// moment it is accepted; then it is closed and its slot freed. At most
    /// 10 years; 0 counts as 1 ms. Default 10 s.
    pub handshake_timeout: Duration,
    /// The largest frame (request) accepted after the handshake, in bytes;
    /// larger ones are answered with an error and their connection closed.
    /// Default 64 MiB.
    pub max_frame_size: usize,
    /// The longest key a request may name, in bytes. Default 8 KiB (as
    /// torch's libuv TCPStore).
    pub max_key_len: usize,
    /// The longest value a request may carry, in bytes. Default 8 MiB (as
    /// torch's libuv TCPStore).
    pub max_value_len: usize,
    /// The most keys one request may name (a `wait`). Default 131072 (as
    /// torch's libuv TCPStore).
    pub max_keys_per_request: usize,
    /// The most keys the store holds. A request that would store more is
    /// refused. Default 1048576.
    pub max_stored_keys: usize,
    /// The most bytes (keys plus values) the store holds. A request that
    /// would store more is refused. Default 1 GiB.
    pub max_stored_bytes: usize,
    /// The time limit for one frame after the handshake, in either
    /// direction:
    ///
    /// - once a frame has started arriving, all of it must have arrived
    ///   within this time: a deadline for the whole frame, so a client that
    ///   stalls, or dribbles a byte now and then, is disconnected;
    /// - the client must take the server's answer within this time.
    ///
    /// Between frames a connection may stay idle for as long as it likes
    /// (clients keep their connections for reuse); `max_connections` bounds
    /// those. Raise this when clients send frames near `max_frame_size` over
    /// slow links. At most 10 years ([`TcpStoreServer::bind`](super::TcpStoreServer::bind)
    /// refuses more); 0 counts as 1 ms. Default 30 s.
    pub io_timeout: Duration,
    /// The most client connections open at once. A connection over the
    /// limit is answered with an error frame naming the limit and closed;
    /// the connections already open keep being served. A
    /// [`TcpStore`](crate::TcpStore) retries with backoff until its connect
    /// timeout, then fails with [`StoreError::TooManyConnections`]. A
    /// `TcpStore` uses one connection per thread calling it at the same
    /// time and keeps up to 4 idle ones. Default 16384: room for a
    /// connection per rank of very large jobs (each costs a server thread),
    /// yet a bound. [`TcpStoreServer::bind`](super::TcpStoreServer::bind)
    /// lowers it to what the file descriptor limit allows
    /// ([`TcpStoreServer::max_connections`](super::TcpStoreServer::max_connections)).
    pub max_connections: usize,
}

impl Default for TcpStoreServerOptions {
    fn default() -> Self {
        TcpStoreServerOptions {
            secret: None,
            allow_unauthenticated_remote: false,
            handshake_timeout: Duration::from_secs(10),
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_key_len: 8 << 10,
            max_value_len: 8 << 20,
            max_keys_per_request: 128 << 10,
            max_stored_keys: 1 << 20,
            max_stored_bytes: 1 << 30,
            io_timeout: Duration::from_secs(30),
            max_connections: 16384,
        }
    }
}

/// The builder methods: one per field, named `with_<field>`.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $field:ident: $ty:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.$field = value;
            self
        }
    )*};
}

impl TcpStoreServerOptions {
    /// Requires clients to prove they hold `secret`.
    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    setters! {
        /// Sets [`TcpStoreServerOptions::allow_unauthenticated_remote`].
        with_unauthenticated_remote: allow_unauthenticated_remote: bool;
        /// Sets [`TcpStoreServerOptions::handshake_timeout`].
        with_handshake_timeout: handshake_timeout: Duration;
        /// Sets [`TcpStoreServerOptions::max_frame_size`].
        with_max_frame_size: max_frame_size: usize;
        /// Sets [`TcpStoreServerOptions::max_key_len`].
        with_max_key_len: max_key_len: usize;
        /// Sets [`TcpStoreServerOptions::max_value_len`].
        with_max_value_len: max_value_len: usize;
        /// Sets [`TcpStoreServerOptions::max_keys_per_request`].
        with_max_keys_per_request: max_keys_per_request: usize;
        /// Sets [`TcpStoreServerOptions::max_stored_keys`].
        with_max_stored_keys: max_stored_keys: usize;
        /// Sets [`TcpStoreServerOptions::max_stored_bytes`].
        with_max_stored_bytes: max_stored_bytes: usize;
        /// Sets [`TcpStoreServerOptions::io_timeout`].
        with_io_timeout: io_timeout: Duration;
        /// Sets [`TcpStoreServerOptions::max_connections`] (at least 1).
        with_max_connections: max_connections: usize;
    }

    /// Refuses settings the server cannot run with, naming the setting.
    pub(super) fn check(&self) -> Result<()> {
        if self.max_frame_size < 64 {
            return Err(StoreError::InvalidArgument {
                what: "max_frame_size",
                given: self.max_frame_size.to_string(),
                expected: "at least 64 bytes (default 64 MiB)".into(),
            });
        }
        check_time_limit("io_timeout", self.io_timeout, "30 s")?;
        check_time_limit("handshake_timeout", self.handshake_timeout, "10 s")?;
        if self.secret.as_ref().is_some_and(Vec::is_empty) {
            return Err(StoreError::InvalidArgument {
                what: "secret",
                given: "\"\"".into(),
                expected: "a non-empty secret, or none".into(),
            });
        }
        for (what, given, default) in [
            ("max_connections", self.max_connections, "16384"),
            ("max_key_len", self.max_key_len, "8192"),
            ("max_value_len", self.max_value_len, "8388608"),
            ("max_keys_per_request", self.max_keys_per_request, "131072"),
            ("max_stored_keys", self.max_stored_keys, "1048576"),
            ("max_stored_bytes", self.max_stored_bytes, "1073741824"),
        ] {
            if given == 0 {
                return Err(StoreError::InvalidArgument {
                    what,
                    given: "0".into(),
                    expected: format!("at least 1 (default {default})"),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Debug for TcpStoreServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStoreServerOptions")
            .field("secret", &redacted(self.secret.as_deref()))
            .field(
                "allow_unauthenticated_remote",
                &self.allow_unauthenticated_remote,
            )
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_frame_size", &self.max_frame_size)
            .field("max_key_len", &self.max_key_len)
            .field("max_value_len", &self.max_value_len)
            .field("max_keys_per_request", &self.max_keys_per_request)
            .field("max_stored_keys", &self.max_stored_keys)
            .field("max_stored_bytes", &self.max_stored_bytes)
            .field("io_timeout", &self.io_timeout)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}
