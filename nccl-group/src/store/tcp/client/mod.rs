//! The TCP store client ([`TcpStore`]); its settings are in `options`.

mod options;

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use super::server::{TcpStoreServer, TcpStoreServerOptions};
use super::wire::{self, FrameError, Request, Response, code};
use crate::store::{CompareSet, Deadline, MAX_WAIT, Result, Store, StoreError, check_time_limit};

pub use options::TcpStoreOptions;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 4;
/// The longest single connection attempt, and the backoff cap.
const MAX_ATTEMPT: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A client of a [`TcpStoreServer`].
///
/// Thread-safe: concurrent calls from several threads each use their own
/// connection (taken from a small pool, or opened on demand), so a thread
/// blocked in `get` never holds up another thread's `set`.
///
/// ```
/// use nccl_group::{Store, TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions};
/// use std::time::Duration;
///
/// let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default())?;
/// let opts = TcpStoreOptions::default().with_connect_timeout(Duration::from_secs(5));
/// let store = TcpStore::connect_to(server.local_addr(), opts)?;
/// store.set("uid", b"42")?;
/// assert_eq!(store.add("count", 2)?, 2);
/// assert_eq!(store.get("uid", Duration::from_secs(1))?, b"42");
/// # Ok::<(), nccl_group::StoreError>(())
/// ```
pub struct TcpStore {
    host: String,
    port: u16,
    /// `host:port`, for messages.
    addr: String,
    options: TcpStoreOptions,
    /// The most this client sends: its own maximum and the server's.
    send_max: usize,
    idle: Mutex<Vec<TcpStream>>,
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
    /// retrying with exponential backoff while the server is not up yet, for
    /// at most `options.connect_timeout`.
    ///
    /// Fails with [`StoreError::Connect`] when the server cannot be reached
    /// in time, at once with [`StoreError::Auth`] when it refuses the
    /// secret, and at once with [`StoreError::TooManyConnections`] when it
    /// already has its maximum number of connections open. A later call
    /// that needs a new connection (several threads calling at once) can
    /// fail with the latter too.
    pub fn connect(host: &str, port: u16, options: TcpStoreOptions) -> Result<Self> {
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_owned();
        let addr = show_addr(&host, port);
        if options.max_frame_size < 64 {
            return Err(StoreError::InvalidArgument {
                what: "max_frame_size",
                given: options.max_frame_size.to_string(),
                expected: "at least 64 bytes (default 64 MiB)".into(),
            });
        }
        check_time_limit("io_margin", options.io_margin, "10 s")?;
        let mut store = TcpStore {
            host,
            port,
            addr,
            options,
            send_max: 0,
            idle: Mutex::new(Vec::new()),
            server: None,
        };
        let (stream, server_max) = store.connect_with_retry()?;
        store.send_max = store
            .options
            .max_frame_size
            .min(usize::try_from(server_max).unwrap_or(usize::MAX));
        store.idle().push(stream);
        Ok(store)
    }

    /// [`TcpStore::connect`] to a socket address.
    pub fn connect_to(addr: SocketAddr, options: TcpStoreOptions) -> Result<Self> {
        Self::connect(&addr.ip().to_string(), addr.port(), options)
    }

    /// Starts a [`TcpStoreServer`] on `bind_addr` in this process and
    /// connects to it; the server lives as long as the returned store. This
    /// is what rank 0 does.
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

    fn idle(&self) -> MutexGuard<'_, Vec<TcpStream>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn describe(&self) -> String {
        format!("TCP store at {}", self.addr)
    }

    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        let addrs: Vec<SocketAddr> = (self.host.as_str(), self.port).to_socket_addrs()?.collect();
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} resolves to no address", self.host),
            ));
        }
        Ok(addrs)
    }

    /// One round of attempts over every resolved address.
    fn try_connect(
        &self,
        per_attempt: Duration,
    ) -> std::result::Result<(TcpStream, u64), AttemptError> {
        let per_attempt = per_attempt.clamp(Duration::from_millis(1), MAX_ATTEMPT);
        let addrs = self.resolve().map_err(AttemptError::Io)?;
        let mut last = None;
        for sockaddr in addrs {
            match TcpStream::connect_timeout(&sockaddr, per_attempt) {
                Ok(stream) => return self.handshake(stream).map_err(AttemptError::Fatal),
                Err(e) => last = Some(e),
            }
        }
        Err(AttemptError::Io(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no address to connect to")
        })))
    }

    fn connect_with_retry(&self) -> Result<(TcpStream, u64)> {
        let deadline = Deadline::after(self.options.connect_timeout);
        let mut backoff = Duration::from_millis(10);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let per_attempt = deadline.remaining().unwrap_or(Duration::from_millis(1));
            let last = match self.try_connect(per_attempt) {
                Ok(ok) => return Ok(ok),
                Err(AttemptError::Fatal(e)) => match e {
                    // The server closed or reset during the handshake: it may
                    // be starting or restarting; retry like a refused connect.
                    StoreError::ConnectionClosed { .. } | StoreError::Io { .. } => io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        nccl_core::ErrorChain(&e).to_string(),
                    ),
                    other => {
                        crate::trace::event!(warn, addr = %self.addr, error = %other, "store: the server refused the connection");
                        return Err(other);
                    }
                },
                Err(AttemptError::Io(e)) => e,
            };
            let Some(left) = deadline.remaining() else {
                crate::trace::event!(warn, addr = %self.addr, attempts, error = %last, "store: giving up connecting");
                return Err(StoreError::Connect {
                    addr: self.addr.clone(),
                    attempts,
                    waited: deadline.elapsed(),
                    source: last,
                });
            };
            crate::trace::event!(debug, addr = %self.addr, attempts, error = %last, retry_in = ?backoff.min(left), "store: connecting failed, retrying");
            thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Sends HELLO and reads the server's answer; returns the stream and the
    /// server's maximum frame size.
    fn handshake(&self, mut stream: TcpStream) -> Result<(TcpStream, u64)> {
        let margin = self.margin();
        let setup = stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(margin)))
            .and_then(|()| stream.set_read_timeout(Some(margin)));
        setup.map_err(|e| {
            StoreError::io(format!("configuring the connection to {}", self.addr), e)
        })?;
        let hello = Request::Hello {
            version: wire::VERSION,
            secret: self.options.secret.clone(),
        };
        match self.exchange(&mut stream, "the HELLO handshake", &hello.encode(), margin)? {
            Response::Hello { max_frame } => Ok((stream, max_frame)),
            other => Err(self.unexpected("the HELLO handshake", &other)),
        }
    }

    fn margin(&self) -> Duration {
        self.options.io_margin.max(Duration::from_millis(1))
    }

    /// Takes an idle connection or opens a new one (a single round of
    /// attempts: the server was up when this store connected).
    fn checkout(&self) -> Result<TcpStream> {
        if let Some(stream) = self.idle().pop() {
            return Ok(stream);
        }
        let per_attempt = self.options.connect_timeout.min(self.margin());
        let start = Deadline::after(per_attempt);
        match self.try_connect(per_attempt) {
            Ok((stream, _)) => Ok(stream),
            Err(AttemptError::Fatal(e)) => Err(e),
            Err(AttemptError::Io(source)) => Err(StoreError::Connect {
                addr: self.addr.clone(),
                attempts: 1,
                waited: start.elapsed(),
                source,
            }),
        }
    }

    fn checkin(&self, stream: TcpStream) {
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE {
            idle.push(stream);
        }
    }

    /// Sends `request` and returns the answer. `wait` is how long the server
    /// may legitimately take (a `get`'s timeout); the read timeout adds the
    /// I/O margin.
    fn call(&self, op: &str, request: &Request, wait: Duration) -> Result<Response> {
        let frame = request.encode();
        if frame.payload_len() > self.send_max {
            return Err(StoreError::FrameTooLarge {
                context: format!("{op} on the {}", self.describe()),
                len: frame.payload_len() as u64,
                max: self.send_max as u64,
            });
        }
        let mut stream = self.checkout()?;
        let read_timeout = wait.min(MAX_WAIT).saturating_add(self.margin());
        stream.set_read_timeout(Some(read_timeout)).map_err(|e| {
            StoreError::io(format!("configuring the connection to {}", self.addr), e)
        })?;
        // On any error the stream is dropped: its state is unknown, and the
        // server closes a connection after sending an error frame.
        let response = self.exchange(&mut stream, op, &frame, read_timeout)?;
        self.checkin(stream);
        Ok(response)
    }

    /// Writes a frame and reads the answer on `stream`, mapping every failure
    /// to an error that names the server and the operation.
    fn exchange(
        &self,
        stream: &mut TcpStream,
        op: &str,
        frame: &wire::Frame,
        read_timeout: Duration,
    ) -> Result<Response> {
        if let Err(write_err) = wire::write_frame(stream, frame) {
            // The server may have answered (e.g. an auth or size error) and
            // closed before taking the whole frame: prefer its answer.
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            if let Ok(payload) = wire::read_frame(stream, self.options.max_frame_size, None)
                && let Ok(response @ Response::Error { .. }) = Response::decode(&payload)
            {
                return Err(self.remote_error(op, response));
            }
            return Err(self.io_error(op, write_err, read_timeout));
        }
        let payload = match wire::read_frame(stream, self.options.max_frame_size, None) {
            Ok(payload) => payload,
            Err(FrameError::Closed) => {
                return Err(StoreError::ConnectionClosed {
                    addr: self.addr.clone(),
                    op: op.to_owned(),
                });
            }
            Err(FrameError::TooLarge(len)) => {
                return Err(StoreError::FrameTooLarge {
                    context: format!("the answer to {op} from the {}", self.describe()),
                    len,
                    max: self.options.max_frame_size as u64,
                });
            }
            Err(FrameError::Io(e)) => return Err(self.io_error(op, e, read_timeout)),
        };
        let response = Response::decode(&payload).map_err(|detail| StoreError::Protocol {
            addr: self.addr.clone(),
            detail: format!("answer to {op}: {detail}"),
        })?;
        match response {
            Response::Error { .. } => Err(self.remote_error(op, response)),
            other => Ok(other),
        }
    }

    fn io_error(&self, op: &str, e: io::Error, waited: Duration) -> StoreError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => StoreError::Unresponsive {
                addr: self.addr.clone(),
                op: op.to_owned(),
                waited,
            },
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected => StoreError::ConnectionClosed {
                addr: self.addr.clone(),
                op: op.to_owned(),
            },
            _ => StoreError::io(format!("{op} on the {}", self.describe()), e),
        }
    }

    fn remote_error(&self, op: &str, response: Response) -> StoreError {
        let Response::Error { code, message } = response else {
            return self.unexpected(op, &response);
        };
        match code {
            code::AUTH => StoreError::Auth {
                addr: self.addr.clone(),
                detail: message,
            },
            code::TOO_MANY_CONNECTIONS => StoreError::TooManyConnections {
                addr: self.addr.clone(),
                detail: message,
            },
            code::SHUTDOWN => StoreError::ConnectionClosed {
                addr: self.addr.clone(),
                op: op.to_owned(),
            },
            _ => StoreError::Remote {
                addr: self.addr.clone(),
                message: format!("{message} (during {op})"),
            },
        }
    }

    fn unexpected(&self, op: &str, response: &Response) -> StoreError {
        StoreError::Protocol {
            addr: self.addr.clone(),
            detail: format!("unexpected {} answer to {op}", response.name()),
        }
    }

    fn timeout_error(
        &self,
        op: &'static str,
        missing: Vec<String>,
        waited: Duration,
    ) -> StoreError {
        StoreError::Timeout {
            op,
            keys: missing,
            store: self.describe(),
            waited,
        }
    }
}

enum AttemptError {
    /// Worth retrying: refused, unreachable, not resolvable yet.
    Io(io::Error),
    /// The server answered: retrying will not help (or the caller decides).
    Fatal(StoreError),
}

fn op_name(op: &str, key: &str) -> String {
    format!("{op} {}", crate::store::error::show_key(key))
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let op = op_name("set", key);
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
        let req = Request::Get {
            key: key.to_owned(),
            timeout,
        };
        match self.call(&op, &req, timeout)? {
            Response::Value(v) => Ok(v),
            Response::Timeout { missing, waited } => {
                Err(self.timeout_error("get", missing, waited))
            }
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let op = op_name("try_get", key);
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
        let req = Request::Add {
            key: key.to_owned(),
            delta,
        };
        match self.call(&op, &req, Duration::ZERO)? {
            Response::Int(v) => Ok(v),
            Response::NotAnInteger(v) => Err(crate::store::AddError::NotAnInteger(v)
                .into_store_error(key, delta, self.describe())),
            Response::Overflow(v) => Err(crate::store::AddError::Overflow(v).into_store_error(
                key,
                delta,
                self.describe(),
            )),
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
        let req = Request::Wait {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            timeout,
        };
        match self.call(&op, &req, timeout)? {
            Response::Ok => Ok(()),
            Response::Timeout { missing, waited } => {
                Err(self.timeout_error("wait", missing, waited))
            }
            other => Err(self.unexpected(&op, &other)),
        }
    }

    fn delete(&self, key: &str) -> Result<bool> {
        let op = op_name("delete", key);
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
}
