//! The TCP store server: binding, accepting connections within the
//! connection and file descriptor limits, and shutting down. Each
//! connection is served by `connection`; the settings are in `options`.

mod connection;
mod options;

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::descriptors;
use super::wire::{Frame, Limits, Response, code};
use crate::memory::{Quota, Table};
use crate::{Result, StoreError};

pub(crate) use connection::serve_connection;
#[cfg(feature = "fuzzing")]
pub(crate) use connection::{HandshakeFailure, server_handshake};
pub use options::TcpStoreServerOptions;

/// Live connections, so that shutdown can close them.
#[derive(Default)]
struct Conns {
    shutdown: bool,
    accept_exited: bool,
    next_id: u64,
    live: HashMap<u64, TcpStream>,
}

/// What every connection thread of one server shares.
pub(crate) struct Shared {
    table: Table,
    options: TcpStoreServerOptions,
    limits: Limits,
    /// `options.max_connections`, lowered to fit the file descriptor limit.
    max_connections: usize,
    /// Why `max_connections` is below the option, for refusals.
    lowered: Option<String>,
    conns: Mutex<Conns>,
    conns_changed: Condvar,
    /// Refusals being answered on threads of their own.
    refusing: AtomicUsize,
}

impl Shared {
    /// The state of a server with these (checked) options; raises the
    /// process's soft file descriptor limit to its hard limit and fits
    /// `max_connections` under it.
    pub(crate) fn new(options: TcpStoreServerOptions) -> Result<Self> {
        options.check()?;
        let (max_connections, lowered) = fit_connections(options.max_connections);
        let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let limits = Limits {
            max_frame: as_u64(options.max_frame_size),
            max_key_len: as_u64(options.max_key_len),
            max_value_len: as_u64(options.max_value_len),
            max_keys: as_u64(options.max_keys_per_request),
        };
        let quota = Quota {
            max_keys: options.max_stored_keys,
            max_bytes: options.max_stored_bytes,
        };
        Ok(Shared {
            table: Table::with_quota(quota),
            options,
            limits,
            max_connections,
            lowered,
            conns: Mutex::default(),
            conns_changed: Condvar::new(),
            refusing: AtomicUsize::new(0),
        })
    }

    fn conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// File descriptors kept for everything else the process does.
const RESERVED_DESCRIPTORS: u64 = 64;
/// Descriptors one connection takes: its socket, and the clone shutdown
/// closes it through.
const DESCRIPTORS_PER_CONNECTION: u64 = 2;

/// `requested` connections, or fewer when the file descriptor limit (after
/// raising it to the hard limit) has no room for them; then also why.
fn fit_connections(requested: usize) -> (usize, Option<String>) {
    let Some(limit) = descriptors::raise_soft_limit() else {
        return (requested, None);
    };
    let room = limit.saturating_sub(RESERVED_DESCRIPTORS) / DESCRIPTORS_PER_CONNECTION;
    let room = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    if room >= requested {
        return (requested, None);
    }
    crate::trace::event!(
        warn,
        requested,
        room,
        limit,
        "store server: max_connections lowered to fit RLIMIT_NOFILE"
    );
    let why = format!(
        "lowered from max_connections {requested} to fit this process's file descriptor limit \
         (RLIMIT_NOFILE {limit}, already raised to its hard limit: {DESCRIPTORS_PER_CONNECTION} \
         a connection, {RESERVED_DESCRIPTORS} kept for the rest); raise the hard limit (ulimit \
         -Hn) where the server runs for more"
    );
    (room, Some(why))
}

/// The server side of the TCP store: a listening socket and one thread per
/// client connection, all sharing one in-memory table.
///
/// A rank can host it in-process (see [`TcpStore::host`](super::TcpStore::host))
/// or a separate process can run it (see the `tcp_store_server` example).
/// Blocking `get`/`wait` requests sleep on a condition variable in their
/// connection's thread, so they never hold up other clients.
///
/// Dropping the server (or calling [`TcpStoreServer::shutdown`]) stops
/// accepting, wakes every blocked request, closes every client connection
/// (clients see an error at once) and releases the port; it waits a bounded
/// time for its threads and never hangs.
pub struct TcpStoreServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for TcpStoreServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStoreServer")
            .field("local_addr", &self.local_addr)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// How long drop waits for the server's threads.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

impl TcpStoreServer {
    /// Binds to `addr` (port 0 picks a free port; see
    /// [`TcpStoreServer::local_addr`]) and starts serving.
    ///
    /// Raises this process's soft file descriptor limit (`RLIMIT_NOFILE`)
    /// to its hard limit, and serves at most as many connections as it
    /// then allows ([`TcpStoreServer::max_connections`]).
    ///
    /// Fails with [`StoreError::Bind`] when the address cannot be bound, and
    /// with [`StoreError::InvalidArgument`] naming the setting for a
    /// `max_frame_size` under 64 bytes, an `io_timeout` or
    /// `handshake_timeout` over 10 years, an empty secret, or a count or
    /// size limit of 0.
    pub fn bind(
        addr: impl ToSocketAddrs + fmt::Debug,
        options: TcpStoreServerOptions,
    ) -> Result<Self> {
        let shown = format!("{addr:?}").trim_matches('"').to_owned();
        let shared = Arc::new(Shared::new(options)?);
        let listener = TcpListener::bind(addr).map_err(|source| StoreError::Bind {
            addr: shown.clone(),
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| StoreError::Bind {
            addr: shown.clone(),
            source,
        })?;
        let accept_shared = Arc::clone(&shared);
        let accept_thread = thread::Builder::new()
            .name(format!("nccl-store-accept-{}", local_addr.port()))
            .spawn(move || {
                accept_loop(&listener, &accept_shared);
                drop(listener);
                accept_shared.conns().accept_exited = true;
                accept_shared.conns_changed.notify_all();
            })
            .map_err(|e| {
                StoreError::io(format!("starting the TCP store server on {local_addr}"), e)
            })?;
        Ok(TcpStoreServer {
            local_addr,
            shared,
            accept_thread: Some(accept_thread),
        })
    }

    /// The address the server listens on (with the real port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// An address a client on this host can connect to: the bound address,
    /// or loopback when bound to the unspecified address (`0.0.0.0`, `::`).
    pub fn connect_addr(&self) -> SocketAddr {
        loopback_if_unspecified(self.local_addr)
    }

    /// How many client connections are open now (never more than
    /// [`TcpStoreServer::max_connections`]; refused connections are not
    /// counted).
    pub fn num_connections(&self) -> usize {
        self.shared.conns().live.len()
    }

    /// The most connections this server keeps open:
    /// [`TcpStoreServerOptions::max_connections`], lowered when the
    /// process's file descriptor limit has no room for that many.
    pub fn max_connections(&self) -> usize {
        self.shared.max_connections
    }

    /// Stops the server; the same as dropping it.
    pub fn shutdown(self) {
        drop(self);
    }

    fn stop(&mut self) {
        self.shared.table.close();
        {
            let mut conns = self.shared.conns();
            conns.shutdown = true;
            // Only the read half: a connection thread that is answering a
            // request it already applied still sends the answer (a client
            // must not see a closed connection for a `set` that took
            // effect), then reads end-of-stream and exits.
            for stream in conns.live.values() {
                let _ = stream.shutdown(Shutdown::Read);
            }
        }
        // Wake the accept loop, which then sees the flag.
        let _ = TcpStream::connect_timeout(&self.connect_addr(), Duration::from_millis(500));
        // Wait (bounded) for the accept loop, which owns the listener, and
        // for the connection threads.
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        let mut conns = self.shared.conns();
        while !(conns.accept_exited && conns.live.is_empty()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            conns = self
                .shared
                .conns_changed
                .wait_timeout(conns, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let accept_exited = conns.accept_exited;
        drop(conns);
        if accept_exited && let Some(handle) = self.accept_thread.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn loopback_if_unspecified(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    // A descriptor held back for the moment the process has none left: freed,
    // it lets the loop accept the waiting client and tell it why, instead of
    // leaving it to time out in the backlog.
    let mut spare = File::open("/dev/null").ok();
    loop {
        if spare.is_none() {
            spare = File::open("/dev/null").ok();
        }
        let accepted = listener.accept();
        let mut conns = shared.conns();
        if conns.shutdown {
            return;
        }
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if descriptors::is_exhausted(&e) => {
                drop(conns);
                drop(spare.take());
                if let Ok((stream, _)) = listener.accept() {
                    refuse(shared, stream, out_of_descriptors());
                }
                thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(_) => {
                // E.g. a connection reset before it was accepted: keep serving.
                drop(conns);
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let max = shared.max_connections;
        if conns.live.len() >= max {
            drop(conns);
            let mut message = format!(
                "the server already has {max} client connections open, its max_connections limit"
            );
            match &shared.lowered {
                Some(why) => message.push_str(&format!(" ({why})")),
                None => message.push_str(
                    "; close clients that are no longer needed, or raise max_connections on the \
                     server",
                ),
            }
            refuse(shared, stream, message);
            continue;
        }
        let Ok(clone) = stream.try_clone() else {
            drop(conns);
            refuse(shared, stream, out_of_descriptors());
            continue;
        };
        let id = conns.next_id;
        conns.next_id += 1;
        conns.live.insert(id, clone);
        drop(conns);

        let conn_shared = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name(format!("nccl-store-conn-{id}"))
            .spawn(move || {
                serve_connection(&conn_shared, stream, peer);
                conn_shared.conns().live.remove(&id);
                conn_shared.conns_changed.notify_all();
            });
        if spawned.is_err() {
            // Out of threads: drop this client (its stream closes), keep serving.
            if let Some(s) = shared.conns().live.remove(&id) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

fn out_of_descriptors() -> String {
    format!(
        "the server has no file descriptor left for another connection ({}); raise the limit \
         (ulimit -n) where the server runs, or close clients that are no longer needed",
        descriptors::exhausted_note()
    )
}

/// The most refusals answered at once on threads of their own; past it a
/// refusal is answered without waiting for the client (best effort).
const MAX_REFUSING: usize = 8;
/// How long a refusal waits for what the client sends first (its HELLO).
const REFUSAL_DRAIN: Duration = Duration::from_millis(200);

/// Answers a connection the server will not serve (over `max_connections`,
/// or no descriptor left) with an error frame and closes it, without ever
/// blocking the accept loop: on a thread of its own, which waits a moment
/// for the client's first bytes, since closing a socket with unread data
/// resets the connection and could destroy the error frame before the
/// client reads it.
fn refuse(shared: &Arc<Shared>, stream: TcpStream, message: String) {
    crate::trace::event!(warn, %message, "store server: refusing a connection");
    let frame = Response::Error {
        code: code::TOO_MANY_CONNECTIONS,
        message,
    }
    .encode();
    let taken = shared
        .refusing
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_REFUSING).then_some(n + 1)
        })
        .is_ok();
    let (stream, frame) = (Arc::new(stream), Arc::new(frame));
    if taken {
        let (thread_stream, thread_frame) = (Arc::clone(&stream), Arc::clone(&frame));
        let refusing = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name("nccl-store-refuse".into())
            .spawn(move || {
                answer_refusal(&thread_stream, &thread_frame, true);
                refusing.refusing.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_ok() {
            return;
        }
        // Out of threads: the closure, and its count, went with the error.
        shared.refusing.fetch_sub(1, Ordering::AcqRel);
    }
    answer_refusal(&stream, &frame, false);
}

/// Sends `frame`, half-closes, and discards what the client sends until it
/// closes: for up to [`REFUSAL_DRAIN`] when `wait`, else only what is
/// already there.
fn answer_refusal(stream: &TcpStream, frame: &Frame, wait: bool) {
    let limit = if wait { Some(REFUSAL_DRAIN) } else { None };
    if stream.set_write_timeout(Some(REFUSAL_DRAIN)).is_err()
        || stream.set_nonblocking(!wait).is_err()
        || stream.set_read_timeout(limit).is_err()
    {
        return;
    }
    let _ = (&*stream).write_all(frame.as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        match (&*stream).read(&mut buf) {
            Ok(n) if n > 0 && start.elapsed() < REFUSAL_DRAIN => {}
            _ => break,
        }
    }
}
