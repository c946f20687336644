//! The TCP store client ([`TcpStore`]): its settings are in `options`,
//! its handshake in `handshake`, its connections in `connection`.

mod connection;
mod handshake;
mod options;
mod sessions;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::server::{TcpStoreServer, TcpStoreServerOptions};
use super::wire::{Limits, Request, Response};
use crate::{CompareSet, Deadline, Result, Store, StoreError};
use connection::Connection;
use sessions::SessionLine;

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use handshake::{HandshakeError, client_handshake};
pub use options::TcpStoreOptions;

/// A client of a [`TcpStoreServer`].
///
/// Thread-safe: concurrent calls from several threads each use their own
/// connection (taken from a small pool, or opened on demand), so a thread
/// blocked in `get` never holds up another thread's `set`.
///
/// With a secret, each connection starts with a challenge and response
/// that proves both sides hold it (the secret never crosses the wire), and
/// every frame after that carries an authentication tag; see the README's
/// security section.
///
/// A call that fails with a timeout or a lost connection may still have
/// been applied: the request may have reached the server before its answer
/// was lost, or be held up on the way. With a secret, every request carries
/// the client's time since the handshake, and the server refuses, unapplied,
/// one that arrives more than its `io_timeout` late
/// ([`TcpStoreServerOptions::io_timeout`]); without one, nothing bounds how
/// late a held-up request is applied.
///
/// ```
/// use nccl_rendezvous::{Store, TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions};
/// use std::time::Duration;
///
/// let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default())?;
/// let opts = TcpStoreOptions::default().with_connect_timeout(Duration::from_secs(5));
/// let store = TcpStore::connect_to(server.local_addr(), opts)?;
/// store.set("uid", b"42")?;
/// assert_eq!(store.add("count", 2)?, 2);
/// assert_eq!(store.get("uid", Duration::from_secs(1))?, b"42");
/// # Ok::<(), nccl_rendezvous::StoreError>(())
/// ```
pub struct TcpStore {
    host: String,
    port: u16,
    /// `host:port`, for messages.
    addr: String,
    options: TcpStoreOptions,
    /// The most this client sends: its own maximum and the server's.
    send_max: usize,
    /// The server's per-request limits, from its `HELLO`.
    limits: Limits,
    idle: Mutex<Vec<Connection>>,
    /// The connection that holds this client's session keys, and the keys.
    sessions: Mutex<SessionLine>,
    /// Declared last: dropped after the connections.
    server: Option<TcpStoreServer>,
}

impl fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStore")
            .field("addr", &self.addr)
            .field("options", &self.options)
            .field("hosts_server", &self.server.is_some())
            .finish_non_exhaustive()
    }
}

fn show_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl TcpStore {
    /// Connects to the server at `host:port` (a host name or an IP address),
    /// retrying with exponential backoff while the server is not up yet or
    /// already has its maximum number of connections open, for at most
    /// `options.connect_timeout`.
    ///
    /// Fails with [`StoreError::Connect`] when the server cannot be reached
    /// in time, with [`StoreError::TooManyConnections`] when it stayed full
    /// that long, with [`StoreError::Unresponsive`] when it took connections
    /// but never answered the handshake (each try waits up to the I/O
    /// margin: a stopped server), and at once with [`StoreError::Auth`] when the two sides
    /// do not hold the same secret (or the server takes no client from
    /// another host without one), with [`StoreError::Protocol`] when it
    /// speaks another protocol version, and with [`StoreError::Io`] when
    /// this process has no file descriptor left. A later call that needs a
    /// new connection (several threads calling at once) waits for a full
    /// server the same way.
    pub fn connect(host: &str, port: u16, options: TcpStoreOptions) -> Result<Self> {
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_owned();
        let addr = show_addr(&host, port);
        options.check()?;
        let mut store = TcpStore {
            host,
            port,
            addr,
            options,
            send_max: 0,
            limits: Limits {
                max_frame: 0,
                max_key_len: 0,
                max_value_len: 0,
                max_keys: 0,
            },
            idle: Mutex::new(Vec::new()),
            sessions: Mutex::new(SessionLine::new()?),
            server: None,
        };
        let (connection, limits) = store.connect_with_retry(store.options.connect_timeout, true)?;
        store.send_max = store
            .options
            .max_frame_size
            .min(usize::try_from(limits.max_frame).unwrap_or(usize::MAX));
        store.limits = limits;
        store.checkin(connection);
        Ok(store)
    }

    /// [`TcpStore::connect`] to a socket address.
    pub fn connect_to(addr: SocketAddr, options: TcpStoreOptions) -> Result<Self> {
        Self::connect(&addr.ip().to_string(), addr.port(), options)
    }

    /// Starts a [`TcpStoreServer`] on `bind_addr` in this process and
    /// connects to it; the server lives as long as the returned store.
    ///
    /// This is what rank 0 does.
    pub fn host(
        bind_addr: impl ToSocketAddrs + fmt::Debug,
        server_options: TcpStoreServerOptions,
        options: TcpStoreOptions,
    ) -> Result<Self> {
        let server = TcpStoreServer::bind(bind_addr, server_options)?;
        let mut store = Self::connect_to(server.connect_addr(), options)?;
        store.server = Some(server);
        Ok(store)
    }

    /// The server this store hosts, if it was made by [`TcpStore::host`].
    pub fn hosted_server(&self) -> Option<&TcpStoreServer> {
        self.server.as_ref()
    }

    /// The server's address as given (`host:port`).
    pub fn server_addr(&self) -> &str {
        &self.addr
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn describe(&self) -> String {
        format!("TCP store at {}", self.addr)
    }

    /// Sends the blocking request `request(time left)` until it is
    /// answered or `timeout` has passed: the server may end a wait at its
    /// own `max_wait`, and is then asked again for the rest.
    ///
    /// Returns any answer but a timeout; a timeout once the time is up is
    /// [`StoreError::Timeout`] (`kind` names the operation).
    fn call_for(
        &self,
        kind: &'static str,
        op: &str,
        timeout: Duration,
        request: impl Fn(Duration) -> Request,
    ) -> Result<Response> {
        let deadline = Deadline::after(timeout);
        loop {
            // The protocol counts whole milliseconds: round up, so that a
            // timeout answer comes once the caller's time is up.
            let left = deadline.remaining().map_or(Duration::ZERO, |left| {
                Duration::from_millis(
                    u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
                )
            });
            match self.call(op, &request(left), left)? {
                Response::Timeout { missing, .. } => {
                    if deadline.remaining().is_some() {
                        continue;
                    }
                    return Err(StoreError::Timeout {
                        op: kind,
                        keys: missing,
                        store: self.describe(),
                        waited: deadline.elapsed(),
                    });
                }
                answer => return Ok(answer),
            }
        }
    }
}

fn op_name(op: &str, key: &str) -> String {
    format!("{op} {}", crate::error::show_key(key))
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let op = op_name("set", key);
        self.check_limits(&op, &[key], &[value])?;
        let req = Request::Set {
            key: key.to_owned(),
            value: value.to_vec(),
        };
        match self.call(&op, &req, Duration::ZERO)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let op = op_name("get", key);
        self.check_limits(&op, &[key], &[])?;
        let request = |timeout| Request::Get {
            key: key.to_owned(),
            timeout,
        };
        match self.call_for("get", &op, timeout, request)? {
            Response::Value(v) => Ok(v),
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let op = op_name("try_get", key);
        self.check_limits(&op, &[key], &[])?;
        let req = Request::TryGet {
            key: key.to_owned(),
        };
        match self.call(&op, &req, Duration::ZERO)? {
            Response::Value(v) => Ok(Some(v)),
            Response::NotFound => Ok(None),
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<CompareSet> {
        let op = op_name("compare_set", key);
        self.check_limits(&op, &[key], &[expected.unwrap_or_default(), new])?;
        let req = Request::CompareSet {
            key: key.to_owned(),
            expected: expected.map(<[u8]>::to_vec),
            new: new.to_vec(),
        };
        match self.call(&op, &req, Duration::ZERO)? {
            Response::CompareSet { swapped, current } => Ok(CompareSet { swapped, current }),
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let op = op_name("add", key);
        self.check_limits(&op, &[key], &[])?;
        let req = Request::Add {
            key: key.to_owned(),
            delta,
        };
        match self.call(&op, &req, Duration::ZERO)? {
            Response::Int(v) => Ok(v),
            Response::NotAnInteger(v) => {
                Err(crate::AddError::NotAnInteger(v).into_store_error(key, delta, self.describe()))
            }
            Response::Overflow(v) => {
                Err(crate::AddError::Overflow(v).into_store_error(key, delta, self.describe()))
            }
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let op = match keys {
            [one] => op_name("wait", one),
            _ => format!("wait for {} keys", keys.len()),
        };
        self.check_limits(&op, keys, &[])?;
        let request = |timeout| Request::Wait {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            timeout,
        };
        match self.call_for("wait", &op, timeout, request)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn delete(&self, key: &str) -> Result<bool> {
        let op = op_name("delete", key);
        self.check_limits(&op, &[key], &[])?;
        self.forget_session_key(key);
        let req = Request::Delete {
            key: key.to_owned(),
        };
        match self.call(&op, &req, Duration::ZERO)? {
            Response::Bool(existed) => Ok(existed),
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn default_timeout(&self) -> Duration {
        self.options.timeout
    }

    fn set_session(&self, key: &str, value: &[u8]) -> Result<()> {
        self.set_session_key(key, value)
    }
}
