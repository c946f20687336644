//! The TCP store server.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs,
};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::wire::{self, FrameError, FrameTimeouts, Request, Response, code};
use super::{DEFAULT_MAX_FRAME_SIZE, redacted};
use crate::store::memory::{Table, WaitError};
use crate::store::{AddError, Result, StoreError, check_time_limit};

/// Settings of a [`TcpStoreServer`].
///
/// Start from `TcpStoreServerOptions::default()` and change what you need:
///
/// ```
/// use nccl_group::TcpStoreServerOptions;
/// let opts = TcpStoreServerOptions::default().with_secret(b"s3cret".to_vec());
/// assert!(format!("{opts:?}").contains("<redacted>"));
/// ```
///
/// # What bounds the server's resources
///
/// Each open connection costs one thread and, while a request arrives, a
/// buffer of at most [`max_frame_size`](Self::max_frame_size) bytes (it grows
/// with the bytes that actually arrive, never with the length a header
/// claims). [`max_connections`](Self::max_connections) bounds the number of
/// connections, and [`io_timeout`](Self::io_timeout) bounds how long any one
/// frame may take, so a slow or silent client cannot hold a connection's
/// buffer, or a connection that never spoke, for longer than that. The
/// stored keys and values themselves are whatever the clients store: set a
/// [`secret`](Self::secret) to keep strangers from storing anything.
#[derive(Clone)]
#[non_exhaustive]
pub struct TcpStoreServerOptions {
    /// When set, every client must present this secret in its first frame.
    pub secret: Option<Vec<u8>>,
    /// The largest frame (request) accepted, in bytes; larger ones are
    /// answered with an error and their connection closed. Default 64 MiB.
    pub max_frame_size: usize,
    /// The time limit for one frame, in either direction:
    ///
    /// - a new connection must start its first frame within this time (a
    ///   client that connects and says nothing is disconnected);
    /// - once a frame has started arriving, all of it must have arrived
    ///   within this time: a deadline for the whole frame, so a client that
    ///   stalls, or dribbles a byte now and then, is disconnected;
    /// - the client must take the server's answer within this time.
    ///
    /// Between frames a connection may stay idle for as long as it likes
    /// (clients keep their connections for reuse); `max_connections` bounds
    /// those. Raise this when clients send frames near `max_frame_size` over
    /// slow links. At most 10 years ([`TcpStoreServer::bind`] refuses
    /// more); 0 counts as 1 ms. Default 30 s.
    pub io_timeout: Duration,
    /// The most client connections open at once. A connection over the
    /// limit is answered with an error frame naming the limit (the client
    /// sees [`StoreError::TooManyConnections`], at once, without retrying)
    /// and closed; the connections already open keep being served. A
    /// [`TcpStore`](super::TcpStore) uses one connection per thread calling
    /// it at the same time and keeps up to 4 idle ones. Default 16384:
    /// room for a connection per rank of very large jobs (each costs a
    /// server thread), yet a bound.
    pub max_connections: usize,
}

impl Default for TcpStoreServerOptions {
    fn default() -> Self {
        TcpStoreServerOptions {
            secret: None,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            io_timeout: Duration::from_secs(30),
            max_connections: 16384,
        }
    }
}

impl TcpStoreServerOptions {
    /// Requires clients to present `secret`.
    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Sets [`TcpStoreServerOptions::max_frame_size`].
    pub fn with_max_frame_size(mut self, bytes: usize) -> Self {
        self.max_frame_size = bytes;
        self
    }

    /// Sets [`TcpStoreServerOptions::io_timeout`].
    pub fn with_io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// Sets [`TcpStoreServerOptions::max_connections`] (at least 1).
    pub fn with_max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }
}

impl fmt::Debug for TcpStoreServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStoreServerOptions")
            .field("secret", &redacted(self.secret.as_deref()))
            .field("max_frame_size", &self.max_frame_size)
            .field("io_timeout", &self.io_timeout)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// Live connections, so that shutdown can close them.
#[derive(Default)]
struct Conns {
    shutdown: bool,
    accept_exited: bool,
    next_id: u64,
    live: HashMap<u64, TcpStream>,
}

struct Shared {
    table: Table,
    options: TcpStoreServerOptions,
    conns: Mutex<Conns>,
    conns_changed: Condvar,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
    /// Fails with [`StoreError::Bind`] when the address cannot be bound, and
    /// with [`StoreError::InvalidArgument`] for a `max_frame_size` under 64
    /// bytes, an `io_timeout` over 10 years or a `max_connections` of 0.
    pub fn bind(
        addr: impl ToSocketAddrs + fmt::Debug,
        options: TcpStoreServerOptions,
    ) -> Result<Self> {
        let shown = format!("{addr:?}").trim_matches('"').to_owned();
        if options.max_frame_size < 64 {
            return Err(StoreError::InvalidArgument {
                what: "max_frame_size",
                given: options.max_frame_size.to_string(),
                expected: "at least 64 bytes (default 64 MiB)".into(),
            });
        }
        check_time_limit("io_timeout", options.io_timeout, "30 s")?;
        if options.max_connections == 0 {
            return Err(StoreError::InvalidArgument {
                what: "max_connections",
                given: "0".into(),
                expected: "at least 1 (default 16384)".into(),
            });
        }
        let listener = TcpListener::bind(addr).map_err(|source| StoreError::Bind {
            addr: shown.clone(),
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| StoreError::Bind {
            addr: shown.clone(),
            source,
        })?;
        let shared = Arc::new(Shared {
            table: Table::default(),
            options,
            conns: Mutex::default(),
            conns_changed: Condvar::new(),
        });
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
    /// [`TcpStoreServerOptions::max_connections`]; refused connections are
    /// not counted).
    pub fn num_connections(&self) -> usize {
        self.shared.conns().live.len()
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
    loop {
        let accepted = listener.accept();
        let mut conns = shared.conns();
        if conns.shutdown {
            return;
        }
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(_) => {
                // E.g. out of file descriptors: back off briefly, keep serving.
                drop(conns);
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let max = shared.options.max_connections;
        if conns.live.len() >= max {
            drop(conns);
            refuse(stream, max);
            continue;
        }
        let Ok(clone) = stream.try_clone() else {
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
                serve_connection(&conn_shared, stream);
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

/// Answers a connection over `max_connections` with an error frame and
/// closes it, without ever blocking the accept loop.
fn refuse(stream: TcpStream, max: usize) {
    crate::trace::event!(
        warn,
        max_connections = max,
        "store server: refusing a connection over max_connections"
    );
    let message = format!(
        "the server already has {max} client connections open, its max_connections limit; \
         close clients that are no longer needed, or raise max_connections on the server"
    );
    let frame = Response::Error {
        code: code::TOO_MANY_CONNECTIONS,
        message,
    }
    .encode();
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    // A fresh socket's send buffer is empty, so the small frame fits
    // without blocking; the FIN follows it.
    let _ = (&stream).write_all(frame.as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
    // Discard what the client already sent (its HELLO): closing a socket
    // with unread data resets the connection instead of closing it. Bytes
    // that come later cannot hurt: the frame and the FIN are already ahead
    // of the reset.
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        match (&stream).read(&mut buf) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

/// Serves one client until it disconnects, misbehaves, or the server stops.
fn serve_connection(shared: &Shared, mut stream: TcpStream) {
    let opts = &shared.options;
    let io_timeout = opts.io_timeout.max(Duration::from_millis(1));
    let _ = stream.set_nodelay(true);
    let mut authenticated = opts.secret.is_none();
    // A new connection must start talking within the timeout; after its
    // first frame it may sit idle between frames.
    let mut timeouts = FrameTimeouts {
        first_byte: Some(io_timeout),
        whole_frame: io_timeout,
    };
    loop {
        let read = wire::read_frame(&mut stream, opts.max_frame_size, Some(timeouts));
        timeouts.first_byte = None;
        let payload = match read {
            Ok(payload) => payload,
            Err(FrameError::Closed | FrameError::Io(_)) => return,
            Err(FrameError::TooLarge(len)) => {
                let message = format!(
                    "frame of {len} bytes exceeds this server's maximum frame size of {} bytes",
                    opts.max_frame_size
                );
                return send_error(&mut stream, io_timeout, code::TOO_LARGE, message);
            }
        };
        let request = match Request::decode(&payload) {
            Ok(r) => r,
            Err(detail) => {
                return send_error(
                    &mut stream,
                    io_timeout,
                    code::PROTOCOL,
                    format!("malformed request: {detail}"),
                );
            }
        };
        if !authenticated {
            let Request::Hello { secret, .. } = &request else {
                return send_error(
                    &mut stream,
                    io_timeout,
                    code::AUTH,
                    "this server requires a shared secret; the first frame must be HELLO with it"
                        .into(),
                );
            };
            let expected = opts.secret.as_deref().unwrap_or_default();
            match secret {
                None => {
                    return send_error(
                        &mut stream,
                        io_timeout,
                        code::AUTH,
                        "the client presented no secret, but this server requires one".into(),
                    );
                }
                Some(given) if !wire::secrets_match(expected, given) => {
                    return send_error(
                        &mut stream,
                        io_timeout,
                        code::AUTH,
                        "the client's secret does not match the server's".into(),
                    );
                }
                Some(_) => authenticated = true,
            }
        }
        let response = match handle(shared, request, &|| client_alive(&stream)) {
            Ok(response) => response,
            Err((code, message)) => return send_error(&mut stream, io_timeout, code, message),
        };
        if wire::write_frame_within(&mut stream, &response.encode(), io_timeout).is_err() {
            return;
        }
    }
}

/// Whether the client of a blocked request is still connected: a peek that
/// would block means "connected, nothing to read"; end-of-stream or an error
/// means it went away (its thread can stop waiting for it).
fn client_alive(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let alive = match stream.peek(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ),
    };
    // If blocking mode cannot be restored, the next read or write fails and
    // the connection ends: no hang either way.
    let _ = stream.set_nonblocking(false);
    alive
}

/// Sends an error frame and ends the connection. The client may still be
/// sending (e.g. the body of an oversized frame): closing with unread data
/// would reset the connection and could destroy the error frame before the
/// client reads it, so half-close first and discard what still arrives, for
/// a bounded time and amount.
fn send_error(stream: &mut TcpStream, io_timeout: Duration, code: u8, message: String) {
    const DRAIN_FOR: Duration = Duration::from_millis(500);
    const DRAIN_MAX: usize = 4 << 20;
    crate::trace::event!(warn, code, %message, "store server: refusing a request and closing its connection");
    let frame = Response::Error { code, message }.encode();
    if wire::write_frame_within(stream, &frame, io_timeout).is_err() {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let start = Instant::now();
    let mut drained = 0;
    let mut buf = [0u8; 8192];
    while drained < DRAIN_MAX {
        let left = DRAIN_FOR.saturating_sub(start.elapsed());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Runs one request; an `Err` is sent as an error frame and ends the
/// connection.
fn handle(
    shared: &Shared,
    request: Request,
    alive: &dyn Fn() -> bool,
) -> std::result::Result<Response, (u8, String)> {
    let table = &shared.table;
    let waited = |e: WaitError| match e {
        WaitError::Timeout { missing, waited } => Ok(Response::Timeout { missing, waited }),
        WaitError::Closed => Err((code::SHUTDOWN, "the server is shutting down".to_owned())),
        WaitError::Abandoned => Err((code::PROTOCOL, "the client went away".to_owned())),
    };
    Ok(match request {
        Request::Hello { version, .. } => {
            if version != wire::VERSION {
                return Err((
                    code::PROTOCOL,
                    format!(
                        "protocol version {version} is not supported; this server speaks version {}",
                        wire::VERSION
                    ),
                ));
            }
            Response::Hello {
                max_frame: shared.options.max_frame_size as u64,
            }
        }
        Request::Set { key, value } => {
            table.set(&key, value);
            Response::Ok
        }
        Request::Get { key, timeout } => match table.get_while(&key, timeout, Some(alive)) {
            Ok(v) => Response::Value(v),
            Err(e) => return waited(e),
        },
        Request::TryGet { key } => match table.try_get(&key) {
            Some(v) => Response::Value(v),
            None => Response::NotFound,
        },
        Request::CompareSet { key, expected, new } => {
            let outcome = table.compare_set(&key, expected.as_deref(), &new);
            Response::CompareSet {
                swapped: outcome.swapped,
                current: outcome.current,
            }
        }
        Request::Add { key, delta } => match table.add(&key, delta) {
            Ok(v) => Response::Int(v),
            Err(AddError::NotAnInteger(v)) => Response::NotAnInteger(v),
            Err(AddError::Overflow(v)) => Response::Overflow(v),
        },
        Request::Wait { keys, timeout } => {
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            match table.wait_while(&refs, timeout, Some(alive)) {
                Ok(()) => Response::Ok,
                Err(e) => return waited(e),
            }
        }
        Request::Delete { key } => Response::Bool(table.delete(&key)),
    })
}
