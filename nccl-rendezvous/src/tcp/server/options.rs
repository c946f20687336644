//! The settings of a TCP store server ([`TcpStoreServerOptions`]): the
//! secret, who may connect without one, and every bound on its resources.

use std::fmt;
use std::time::Duration;

use crate::setters::with_setters;
use crate::tcp::redacted;
use crate::tcp::wire::{Limits, RequestLimits, STAMP_LEN, TAG_LEN};
use crate::{DEFAULT_TIMEOUT, Result, StoreError, check_time_limit};

/// The most threads [`TcpStoreServerOptions::serving_threads`] takes.
const MAX_SERVING_THREADS: usize = 64;

/// How the gate (the thread that accepts connections and runs their
/// handshakes) is scheduled against the loops that serve the
/// authenticated clients ([`TcpStoreServerOptions::gate_priority`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum GatePriority {
    /// Nice +10 over the server's other threads (the default): under a
    /// flood of connections that never authenticate, the gate yields the
    /// CPU to the serving loops most of the time, and still gets about a
    /// tenth of a CPU that busy processes share, so ranks joining a
    /// loaded host are let in promptly.
    #[default]
    Lowered,
    /// Linux's `SCHED_IDLE` (elsewhere, as [`GatePriority::Lowered`]): the
    /// gate runs only when no other thread wants the CPU, and a waking
    /// serving loop or client preempts it at once, so a flood costs the
    /// authenticated clients least.
    ///
    /// But on a host whose CPUs are all busy (rank 0's own training, data
    /// loaders) the gate gets almost no CPU: handshakes, so ranks joining,
    /// wait. For stores on hosts with CPU to spare, facing untrusted networks.
    Idle,
}

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
/// The server runs a fixed number of threads whatever the number of
/// connections: a gate that accepts connections and runs their handshakes
/// (at a lower scheduling priority, [`gate_priority`](Self::gate_priority)), and [`serving_threads`](Self::serving_threads)
/// loops that serve the authenticated ones.
///
/// - Each open connection costs one file descriptor and a few hundred
///   bytes; [`max_connections`](Self::max_connections) bounds them (lowered
///   at bind to what the process's file descriptor limit allows).
/// - A connection still in its handshake may send frames of at most 512
///   bytes and must finish within [`handshake_timeout`](Self::handshake_timeout).
///   At most [`max_unauthenticated`](Self::max_unauthenticated) connections
///   (and half of `max_connections`) are in their handshake at once, at
///   most [`max_unauthenticated_per_address`](Self::max_unauthenticated_per_address)
///   from one address: the other slots are kept for authenticated
///   sessions. Past half of `max_unauthenticated`, new connections are
///   refused at random, more often the fuller it gets. Each step of a
///   handshake has a short deadline (500 ms, or half the handshake
///   timeout: the client's `HELLO` from accept, its `PROOF` from the
///   server's `HELLO`); when the slots are full, a newcomer takes the slot
///   of a connection past its step's deadline, picked at random (of its
///   own address when that address has all its slots). A newcomer from an
///   address with all its slots waits, unread and first in first out, for
///   one of them (as many wait as the address has slots; more are
///   refused), and while every slot is taken by connections within their
///   deadlines the server leaves newcomers in its listen queue, in order.
///   A refused client retries until its connect timeout.
/// - After the handshake, a request is at most [`max_frame_size`](Self::max_frame_size)
///   bytes, must arrive within [`io_timeout`](Self::io_timeout), and is
///   read as its bytes arrive (never allocated from the length a header
///   claims). Each length in it is checked against [`max_key_len`](Self::max_key_len),
///   [`max_value_len`](Self::max_value_len), [`max_keys_per_request`](Self::max_keys_per_request)
///   and [`max_key_bytes_per_request`](Self::max_key_bytes_per_request)
///   as soon as it arrives, and the lengths together against the frame's:
///   a frame over a limit, or with junk after valid fields, is refused
///   before its body is read.
/// - All connections together hold at most [`max_in_flight_bytes`](Self::max_in_flight_bytes)
///   for requests in progress: a quarter for frames being read, a quarter
///   for answers not yet sent, half for `get`s and `wait`s waiting for
///   keys. Each connection has a small floor of its own in the first two
///   (so small requests and answers never wait for others), and draws
///   what it needs beyond it from a pool the connections share; a frame or
///   an answer that finds no room waits for it (a request is run only
///   when its answer has room), and is refused at its `io_timeout`. An
///   answer of a stored value shares the stored bytes: a value read by
///   any number of clients is held once.
/// - A `get` or `wait` waits on the server for at most [`max_wait`](Self::max_wait)
///   (a client asks again for the rest of its own timeout), and only while
///   its connection is open.
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
    /// does).
    ///
    /// Anyone who can reach the port can then read and write every key.
    /// `NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1` sets it for
    /// [`RendezvousConfig`](crate::RendezvousConfig). Default `false`.
    pub allow_unauthenticated_remote: bool,
    /// How long a new connection has to finish its handshake, from the
    /// moment it is accepted; then it is closed and its slot freed.
    ///
    /// At most 10 years; 0 counts as 1 ms. Default 10 s.
    pub handshake_timeout: Duration,
    /// The largest frame (request) accepted after the handshake, in bytes;
    /// larger ones are answered with an error and their connection closed.
    ///
    /// `None` (the default): the largest request the other limits allow, a
    /// `compare_set` of two values of `max_value_len` (16 MiB and 54 bytes with
    /// the defaults); a larger size is lowered to that too
    /// ([`TcpStoreServer::max_frame_size`](super::TcpStoreServer::max_frame_size)).
    pub max_frame_size: Option<usize>,
    /// The longest key a request may name, in bytes.
    ///
    /// Default 8 KiB (as torch's libuv TCPStore).
    pub max_key_len: usize,
    /// The longest value a request may carry, in bytes.
    ///
    /// Default 8 MiB (as torch's libuv TCPStore).
    pub max_value_len: usize,
    /// The most keys one request may name (a `wait`).
    ///
    /// Default 131072 (as torch's libuv TCPStore).
    pub max_keys_per_request: usize,
    /// The most bytes of keys one request may name, all its keys together
    /// (a `wait`).
    ///
    /// A parked `wait` holds its keys in memory, twice over (for the request
    /// and for the index by key). Default 4 MiB.
    pub max_key_bytes_per_request: usize,
    /// The most keys the store holds.
    ///
    /// A request that would store more is refused. Default 1048576.
    pub max_stored_keys: usize,
    /// The most bytes (keys plus values) the store holds.
    ///
    /// A request that would store more is refused. Default 1 GiB.
    pub max_stored_bytes: usize,
    /// The most bytes the server holds for requests in progress, all
    /// connections together: frames being read (a quarter of it), answers
    /// not yet taken by their clients (a quarter), and `get`s and `wait`s
    /// waiting for keys (half; past that a new one is refused).
    ///
    /// In the first two, each connection may hold a floor of its own (its share
    /// of half the quarter, over `max_connections`) whatever the others hold,
    /// and beyond it what the pool the connections share has left; a frame or
    /// an answer that finds no room waits for it, and is refused when its
    /// `io_timeout` ends first. Raised at bind to eight times the largest frame
    /// (a quarter each for frames being read and for answers, each with room
    /// for the largest beside every connection's own floor). Default 256 MiB.
    pub max_in_flight_bytes: usize,
    /// The longest a `get` or `wait` waits on the server: a longer timeout
    /// is cut to this, and a [`TcpStore`](crate::TcpStore) asks again for
    /// the rest of its own timeout.
    ///
    /// It bounds how long the request of a client that vanished without closing
    /// its connection (a host that lost power) stays parked. At most 10 years;
    /// 0 counts as 1 ms. Default 300 s.
    pub max_wait: Duration,
    /// The time limit for one frame after the handshake, in either
    /// direction:
    ///
    /// - once a frame has started arriving, all of it must have arrived
    ///   within this time: a deadline for the whole frame, so a client that
    ///   stalls, or dribbles a byte now and then, is disconnected;
    /// - the client must take the server's answer within this time;
    /// - a sealed request must arrive within this time of being sent: its
    ///   stamp (the client's time since the handshake) may lag the
    ///   server's own by at most this, so a request held back on the way
    ///   is refused, unapplied.
    ///
    /// Between frames a connection may stay idle for as long as it likes
    /// (clients keep their connections for reuse); `max_connections` bounds
    /// those. Raise this when clients send frames near `max_frame_size` over
    /// slow links. At most 10 years ([`TcpStoreServer::bind`](super::TcpStoreServer::bind)
    /// refuses more); 0 counts as 1 ms. Default 30 s.
    pub io_timeout: Duration,
    /// The most client connections open at once, in their handshake or
    /// after it.
    ///
    /// A connection over the limit is answered with an error frame naming the
    /// limit and closed (or, when some are still in their handshake past a
    /// step's deadline, takes one's slot); the connections already open keep
    /// being served. A [`TcpStore`](crate::TcpStore) retries with backoff until
    /// its connect timeout, then fails with [`StoreError::TooManyConnections`].
    /// A `TcpStore` uses one connection per thread calling it at the same time
    /// and keeps up to 4 idle ones. Default 16384.
    /// [`TcpStoreServer::bind`](super::TcpStoreServer::bind) lowers it to what
    /// the file descriptor limit allows
    /// ([`TcpStoreServer::max_connections`](super::TcpStoreServer::max_connections)).
    pub max_connections: usize,
    /// The most connections in their handshake at once (as sshd's
    /// `MaxStartups`); never more than half of `max_connections`, so the
    /// other half is kept for authenticated sessions.
    ///
    /// Default 256.
    pub max_unauthenticated: usize,
    /// The most connections in their handshake at once from one address
    /// (an IPv4 address, or an IPv6 /64 network); as many more wait for
    /// one of them to finish or pass its deadline.
    ///
    /// Default 8.
    pub max_unauthenticated_per_address: usize,
    /// How many threads serve the authenticated connections, each its
    /// share of them, all on one table.
    ///
    /// `None` (the default): one for every 4 CPUs, 1 to 4. At most 64.
    pub serving_threads: Option<usize>,
    /// How the gate is scheduled against the serving loops.
    ///
    /// Default [`GatePriority::Lowered`].
    pub gate_priority: GatePriority,
}

impl Default for TcpStoreServerOptions {
    fn default() -> Self {
        TcpStoreServerOptions {
            secret: None,
            allow_unauthenticated_remote: false,
            handshake_timeout: Duration::from_secs(10),
            max_frame_size: None,
            max_key_len: 8 << 10,
            max_value_len: 8 << 20,
            max_keys_per_request: 128 << 10,
            max_key_bytes_per_request: 4 << 20,
            max_stored_keys: 1 << 20,
            max_stored_bytes: 1 << 30,
            max_in_flight_bytes: 256 << 20,
            max_wait: DEFAULT_TIMEOUT,
            io_timeout: Duration::from_secs(30),
            max_connections: 16384,
            max_unauthenticated: 256,
            max_unauthenticated_per_address: 8,
            serving_threads: None,
            gate_priority: GatePriority::Lowered,
        }
    }
}

impl TcpStoreServerOptions {
    with_setters! {
        /// Requires clients to prove they hold `secret`.
        with_secret(secret: impl Into<Vec<u8>>) => secret = Some(secret.into());
        /// Sets [`TcpStoreServerOptions::max_frame_size`] (at least 64 bytes).
        with_max_frame_size(bytes: usize) => max_frame_size = Some(bytes);
        /// Sets [`TcpStoreServerOptions::serving_threads`] (1 to 64).
        with_serving_threads(threads: usize) => serving_threads = Some(threads);
        /// Sets [`TcpStoreServerOptions::allow_unauthenticated_remote`].
        with_unauthenticated_remote(value: bool) => allow_unauthenticated_remote = value;
        /// Sets [`TcpStoreServerOptions::handshake_timeout`].
        with_handshake_timeout(value: Duration) => handshake_timeout = value;
        /// Sets [`TcpStoreServerOptions::max_key_len`].
        with_max_key_len(value: usize) => max_key_len = value;
        /// Sets [`TcpStoreServerOptions::max_value_len`].
        with_max_value_len(value: usize) => max_value_len = value;
        /// Sets [`TcpStoreServerOptions::max_keys_per_request`].
        with_max_keys_per_request(value: usize) => max_keys_per_request = value;
        /// Sets [`TcpStoreServerOptions::max_key_bytes_per_request`].
        with_max_key_bytes_per_request(value: usize) => max_key_bytes_per_request = value;
        /// Sets [`TcpStoreServerOptions::max_stored_keys`].
        with_max_stored_keys(value: usize) => max_stored_keys = value;
        /// Sets [`TcpStoreServerOptions::max_stored_bytes`].
        with_max_stored_bytes(value: usize) => max_stored_bytes = value;
        /// Sets [`TcpStoreServerOptions::max_in_flight_bytes`].
        with_max_in_flight_bytes(value: usize) => max_in_flight_bytes = value;
        /// Sets [`TcpStoreServerOptions::max_wait`].
        with_max_wait(value: Duration) => max_wait = value;
        /// Sets [`TcpStoreServerOptions::io_timeout`].
        with_io_timeout(value: Duration) => io_timeout = value;
        /// Sets [`TcpStoreServerOptions::max_connections`] (at least 1).
        with_max_connections(value: usize) => max_connections = value;
        /// Sets [`TcpStoreServerOptions::max_unauthenticated`] (at least 1).
        with_max_unauthenticated(value: usize) => max_unauthenticated = value;
        /// Sets [`TcpStoreServerOptions::max_unauthenticated_per_address`]
        /// (at least 1).
        with_max_unauthenticated_per_address(value: usize) => max_unauthenticated_per_address = value;
        /// Sets [`TcpStoreServerOptions::gate_priority`].
        with_gate_priority(value: GatePriority) => gate_priority = value;
    }

    /// Refuses settings the server cannot run with, naming the setting.
    pub(super) fn check(&self) -> Result<()> {
        if let Some(size) = self.max_frame_size
            && size < 64
        {
            return Err(StoreError::InvalidArgument {
                what: "max_frame_size",
                given: size.to_string(),
                expected: "at least 64 bytes (default: the largest request the other limits \
                           allow)"
                    .into(),
            });
        }
        if let Some(threads) = self.serving_threads
            && !(1..=MAX_SERVING_THREADS).contains(&threads)
        {
            return Err(StoreError::InvalidArgument {
                what: "serving_threads",
                given: threads.to_string(),
                expected: format!(
                    "1 to {MAX_SERVING_THREADS} (default: one for every 4 CPUs, 1 to 4)"
                ),
            });
        }
        check_time_limit("io_timeout", self.io_timeout, "30 s")?;
        check_time_limit("handshake_timeout", self.handshake_timeout, "10 s")?;
        check_time_limit("max_wait", self.max_wait, "300 s")?;
        if self.secret.as_ref().is_some_and(Vec::is_empty) {
            return Err(StoreError::InvalidArgument {
                what: "secret",
                given: "\"\"".into(),
                expected: "a non-empty secret, or none".into(),
            });
        }
        for (what, given, default) in [
            ("max_connections", self.max_connections, "16384"),
            ("max_unauthenticated", self.max_unauthenticated, "256"),
            (
                "max_unauthenticated_per_address",
                self.max_unauthenticated_per_address,
                "8",
            ),
            ("max_key_len", self.max_key_len, "8192"),
            ("max_value_len", self.max_value_len, "8388608"),
            ("max_keys_per_request", self.max_keys_per_request, "131072"),
            (
                "max_key_bytes_per_request",
                self.max_key_bytes_per_request,
                "4194304",
            ),
            ("max_stored_keys", self.max_stored_keys, "1048576"),
            ("max_stored_bytes", self.max_stored_bytes, "1073741824"),
            ("max_in_flight_bytes", self.max_in_flight_bytes, "268435456"),
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

    /// The payload of the largest request the limits allow, sealed: a
    /// `compare_set` of two values of `max_value_len`, or a `wait` for
    /// `max_keys_per_request` keys of `max_key_bytes_per_request` bytes in
    /// all, whichever is longer; within a frame's `u32` length.
    fn largest_request(&self) -> usize {
        let [key, value, keys, key_bytes] = [
            self.max_key_len,
            self.max_value_len,
            self.max_keys_per_request,
            self.max_key_bytes_per_request,
        ]
        .map(|n| n as u64);
        let sum = |parts: &[u64]| parts.iter().fold(0u64, |a, &b| a.saturating_add(b));
        // Opcode, the key, a presence flag, the expected value, the new one.
        let compare_set = sum(&[1, 4, key, 1, 4, value, 4, value]);
        // Opcode, timeout, count, each key's length, the keys' bytes.
        let wait = sum(&[
            1,
            8,
            4,
            keys.saturating_mul(4),
            key_bytes.min(keys.saturating_mul(key)),
        ]);
        let sealed = sum(&[compare_set.max(wait), STAMP_LEN as u64, TAG_LEN as u64]);
        usize::try_from(sealed.min(u64::from(u32::MAX))).unwrap_or(usize::MAX)
    }

    /// The largest frame the server takes: `max_frame_size`, at most the
    /// largest request.
    pub(super) fn frame_limit(&self) -> usize {
        let largest = self.largest_request();
        self.max_frame_size
            .map_or(largest, |size| size.min(largest))
    }

    /// What each request is checked against, as its `HELLO` announces it.
    pub(super) fn request_limits(&self) -> RequestLimits {
        let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        RequestLimits {
            announced: Limits {
                max_frame: as_u64(self.frame_limit()),
                max_key_len: as_u64(self.max_key_len),
                max_value_len: as_u64(self.max_value_len),
                max_keys: as_u64(self.max_keys_per_request),
            },
            max_key_bytes: as_u64(self.max_key_bytes_per_request),
        }
    }

    /// The threads that serve authenticated connections.
    pub(super) fn serving_loops(&self) -> usize {
        self.serving_threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |cpus| (cpus.get() / 4).clamp(1, 4))
        })
    }

    /// `max_in_flight_bytes`, at least eight times the largest frame: a
    /// quarter of it is for frames being read, a quarter for answers, and
    /// half of each quarter is a pool in which the largest frame fits.
    pub(super) fn in_flight_limit(&self) -> usize {
        self.max_in_flight_bytes
            .max(self.frame_limit().saturating_mul(8))
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
            .field("max_key_bytes_per_request", &self.max_key_bytes_per_request)
            .field("max_stored_keys", &self.max_stored_keys)
            .field("max_stored_bytes", &self.max_stored_bytes)
            .field("max_in_flight_bytes", &self.max_in_flight_bytes)
            .field("max_wait", &self.max_wait)
            .field("io_timeout", &self.io_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_unauthenticated", &self.max_unauthenticated)
            .field(
                "max_unauthenticated_per_address",
                &self.max_unauthenticated_per_address,
            )
            .field("serving_threads", &self.serving_threads)
            .field("gate_priority", &self.gate_priority)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_frame_limit_is_the_largest_legal_request() {
        let options = TcpStoreServerOptions::default();
        // A compare_set of 8 KiB key and two 8 MiB values, stamped and
        // tagged.
        let compare_set = 1 + 4 + (8 << 10) + 1 + 4 + (8 << 20) + 4 + (8 << 20);
        assert_eq!(options.frame_limit(), compare_set + STAMP_LEN + TAG_LEN);
        assert_eq!(
            options.clone().with_max_frame_size(4096).frame_limit(),
            4096
        );
        assert_eq!(
            options.clone().with_max_frame_size(1 << 30).frame_limit(),
            options.frame_limit()
        );
        // A wait for 16 keys of up to 100 bytes, at most 50 in all, beats
        // a compare_set of 1-byte values.
        let small = options
            .with_max_value_len(1)
            .with_max_key_len(100)
            .with_max_keys_per_request(16)
            .with_max_key_bytes_per_request(50);
        assert_eq!(
            small.frame_limit(),
            1 + 8 + 4 + 16 * 4 + 50 + STAMP_LEN + TAG_LEN
        );
        assert_eq!(small.in_flight_limit(), 256 << 20);
    }
}
