//! The client's connections: opening one (retrying while the server is not
//! up yet, or full, within the connect timeout), the pool of idle ones, one
//! request and its answer on a sealed connection, and every failure told
//! as a [`StoreError`] naming the server.

use std::io;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use super::TcpStore;
use super::handshake::{HandshakeError, client_handshake};
use crate::tcp::descriptors;
use crate::tcp::wire::{self, FrameError, Limit, Limits, Request, Response, Session, code};
use crate::{Deadline, MAX_WAIT, Result, StoreError};

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 4;
/// An idle connection older than this is closed rather than reused: the
/// stamps of its requests measure from its handshake, and two hosts'
/// monotonic clocks drift apart (by up to 500 ppm, 0.3 s in 10 minutes).
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(600);
/// The longest single connection attempt, and the backoff cap.
const MAX_ATTEMPT: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// An authenticated connection and the state of its seals.
pub(super) struct Connection {
    stream: TcpStream,
    session: Session,
    opened: Instant,
}

impl Connection {
    /// Whether a pooled connection can no longer carry a request: too old,
    /// or closed or reset by the server (one that restarted or stopped).
    ///
    /// Bytes the server sent unasked (a refusal) are left for the next call to
    /// read and report.
    pub(super) fn is_stale(&self) -> bool {
        use rustix::net::{RecvFlags, recv};
        if self.opened.elapsed() > MAX_CONNECTION_AGE {
            return true;
        }
        let peeked = recv(
            &self.stream,
            &mut [0u8; 1],
            RecvFlags::PEEK | RecvFlags::DONTWAIT,
        );
        match peeked {
            Ok((n, _)) => n == 0,
            Err(e) => e != rustix::io::Errno::AGAIN && e != rustix::io::Errno::INTR,
        }
    }
}

/// Why an exchange failed.
pub(super) enum Failed {
    /// The connection closed before any answer: the server was gone (a
    /// pooled connection it closed as it went), not refusing.
    Unanswered(StoreError),
    Other(StoreError),
}

impl Failed {
    pub(super) fn into_error(self) -> StoreError {
        match self {
            Failed::Unanswered(e) | Failed::Other(e) => e,
        }
    }
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Self {
        Failed::Other(e)
    }
}

/// Why one round of connection attempts failed.
enum AttemptError {
    /// Worth retrying while connecting: refused, unreachable, not
    /// resolvable yet, or the server closed during the handshake (it may
    /// be starting).
    Io(io::Error),
    /// The server took the connection but did not answer the handshake in
    /// time (stopped, or swamped): worth retrying while connecting, and
    /// the error to give when the time is up.
    Unanswered(StoreError),
    /// The server is full: worth retrying until the connect timeout.
    Full(StoreError),
    /// Retrying will not help.
    Fatal(StoreError),
}

impl TcpStore {
    /// One round of attempts over every resolved address.
    fn try_connect(&self, per_attempt: Duration) -> Result<(Connection, Limits), AttemptError> {
        let per_attempt = per_attempt.clamp(Duration::from_millis(1), MAX_ATTEMPT);
        let addrs = crate::resolve(&self.host, self.port).map_err(AttemptError::Io)?;
        let mut last = None;
        for sockaddr in addrs {
            match TcpStream::connect_timeout(&sockaddr, per_attempt) {
                Ok(stream) => return self.handshake(stream, per_attempt),
                Err(e) if descriptors::is_exhausted(&e) => {
                    return Err(AttemptError::Fatal(self.out_of_descriptors(e)));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(AttemptError::Io(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no address to connect to")
        })))
    }

    fn out_of_descriptors(&self, source: io::Error) -> StoreError {
        StoreError::io(
            format!(
                "connecting to the {}: this process has no file descriptor left ({}); each \
                 TcpStore connection takes one: raise the limit (ulimit -n), or use fewer \
                 stores or threads calling them at once",
                self.describe(),
                descriptors::exhausted_note()
            ),
            source,
        )
    }

    /// Connects, retrying with exponential backoff while the server is not
    /// up yet or does not answer the handshake (`retry_unreachable`), or is
    /// full, until `timeout`.
    pub(super) fn connect_with_retry(
        &self,
        timeout: Duration,
        retry_unreachable: bool,
    ) -> Result<(Connection, Limits)> {
        let deadline = Deadline::after(timeout);
        let mut backoff = Duration::from_millis(10);
        let mut attempts = 0u32;
        // A server that said it was full is why this connect fails, even
        // when the last attempt, with only a sliver of the timeout left,
        // ran out of time first: its refusal is the error to give.
        let mut full: Option<String> = None;
        loop {
            attempts += 1;
            let per_attempt = deadline.remaining().unwrap_or(Duration::from_millis(1));
            let (last, retry) = match self.try_connect(per_attempt) {
                Ok(ok) => return Ok(ok),
                Err(AttemptError::Fatal(e)) => {
                    crate::trace::event!(warn, addr = %self.addr, error = %e, "store: the server refused the connection");
                    return Err(e);
                }
                Err(AttemptError::Full(e)) => {
                    if let StoreError::TooManyConnections { detail, .. } = &e {
                        full = Some(detail.clone());
                    }
                    (e, true)
                }
                Err(AttemptError::Unanswered(e)) => (e, retry_unreachable),
                Err(AttemptError::Io(source)) => {
                    let e = StoreError::Connect {
                        addr: self.addr.clone(),
                        attempts,
                        waited: deadline.elapsed(),
                        source,
                    };
                    (e, retry_unreachable)
                }
            };
            let Some(left) = deadline.remaining().filter(|_| retry) else {
                crate::trace::event!(warn, addr = %self.addr, attempts, "store: giving up connecting");
                return Err(match (full, last) {
                    (
                        Some(detail),
                        StoreError::Unresponsive { .. } | StoreError::Connect { .. },
                    ) => StoreError::TooManyConnections {
                        addr: self.addr.clone(),
                        detail,
                    },
                    (_, last) => last,
                });
            };
            crate::trace::event!(debug, addr = %self.addr, attempts, retry_in = ?backoff.min(left), "store: connecting failed, retrying");
            thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Runs the handshake on a fresh connection, each step within the I/O
    /// margin and `within`.
    fn handshake(
        &self,
        mut stream: TcpStream,
        within: Duration,
    ) -> Result<(Connection, Limits), AttemptError> {
        let margin = self.margin().min(within);
        let setup = stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(margin)))
            .and_then(|()| stream.set_read_timeout(Some(margin)));
        setup.map_err(|e| {
            AttemptError::Fatal(StoreError::io(
                format!("configuring the connection to {}", self.addr),
                e,
            ))
        })?;
        let op = "the handshake";
        match client_handshake(&mut stream, self.options.secret.as_deref()) {
            Ok((session, limits)) => Ok((
                Connection {
                    stream,
                    session,
                    opened: Instant::now(),
                },
                limits,
            )),
            Err(HandshakeError::Refused(response)) => match self.remote_error(op, response) {
                full @ StoreError::TooManyConnections { .. } => Err(AttemptError::Full(full)),
                // The server is shutting down: another may take its port.
                StoreError::ConnectionClosed { .. } => Err(AttemptError::Io(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "the server is shutting down",
                ))),
                other => Err(AttemptError::Fatal(other)),
            },
            Err(HandshakeError::Auth(detail)) => Err(AttemptError::Fatal(StoreError::Auth {
                addr: self.addr.clone(),
                detail,
            })),
            Err(HandshakeError::Protocol(detail)) => {
                Err(AttemptError::Fatal(StoreError::Protocol {
                    addr: self.addr.clone(),
                    detail,
                }))
            }
            Err(HandshakeError::TooLarge(len)) => {
                Err(AttemptError::Fatal(StoreError::FrameTooLarge {
                    context: format!("the answer to {op} from the {}", self.describe()),
                    len,
                    max: wire::HANDSHAKE_MAX_FRAME as u64,
                }))
            }
            // The server closed or reset during the handshake: it may be
            // starting or restarting; retry like a refused connect.
            Err(HandshakeError::Closed) => Err(AttemptError::Io(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "the server closed the connection during the handshake",
            ))),
            Err(HandshakeError::Io(e)) => match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    Err(AttemptError::Unanswered(self.io_error(op, e, margin)))
                }
                _ => Err(AttemptError::Io(e)),
            },
        }
    }

    pub(super) fn margin(&self) -> Duration {
        self.options.io_margin.max(Duration::from_millis(1))
    }

    /// Takes an idle connection (whether it was one) or opens a new one:
    /// the server was up when this store connected, so only a full server
    /// is waited for (within the connect timeout).
    ///
    /// Idle connections the server has closed meanwhile are dropped.
    fn checkout(&self) -> Result<(Connection, bool)> {
        while let Some(connection) = self.idle().pop() {
            if !connection.is_stale() {
                return Ok((connection, true));
            }
        }
        let (connection, _) = self.connect_with_retry(self.options.connect_timeout, false)?;
        Ok((connection, false))
    }

    pub(super) fn checkin(&self, connection: Connection) {
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE {
            idle.push(connection);
        }
    }

    /// Sends `request` and returns the answer.
    ///
    /// `wait` is how long the server may legitimately take (a `get`'s timeout);
    /// the client waits that and the I/O margin for the whole exchange, and
    /// seals that patience in the request. A read (`get`, `try_get`, `wait`)
    /// whose pooled connection turns out closed is sent once more on a fresh
    /// one: the server closed it between the look at it and the request.
    pub(super) fn call(&self, op: &str, request: &Request, wait: Duration) -> Result<Response> {
        let (mut connection, pooled) = self.checkout()?;
        let sealed_len = request.encode().payload_len() + connection.session.outbound_overhead();
        if sealed_len > self.send_max {
            self.checkin(connection);
            return Err(StoreError::FrameTooLarge {
                context: format!("{op} on the {}", self.describe()),
                len: sealed_len as u64,
                max: self.send_max as u64,
            });
        }
        let patience = wait.min(MAX_WAIT).saturating_add(self.margin());
        // On any error the connection is dropped: its state is unknown, and
        // the server closes a connection after sending an error frame.
        let response = match self.exchange(&mut connection, op, request, patience) {
            Err(Failed::Unanswered(_)) if pooled && request.is_read() => {
                let (fresh, _) = self.connect_with_retry(self.options.connect_timeout, false)?;
                connection = fresh;
                self.exchange(&mut connection, op, request, patience)
                    .map_err(Failed::into_error)?
            }
            answered => answered.map_err(Failed::into_error)?,
        };
        self.checkin(connection);
        // The server answered: it can take the session keys again if their
        // connection broke.
        self.renew_sessions();
        Ok(response)
    }

    /// Seals and writes a request, reads and opens the answer, all within
    /// `patience` from sealing, mapping every failure to an error that
    /// names the server and the operation.
    pub(super) fn exchange(
        &self,
        connection: &mut Connection,
        op: &str,
        request: &Request,
        patience: Duration,
    ) -> Result<Response, Failed> {
        let Connection {
            stream, session, ..
        } = connection;
        let deadline = Deadline::after(patience);
        let frame = session.seal_request(request.encode(), patience);
        let left = || deadline.remaining().unwrap_or(Duration::from_millis(1));
        let configuring =
            |e| StoreError::io(format!("configuring the connection to {}", self.addr), e);
        stream
            .set_write_timeout(Some(left()))
            .map_err(configuring)?;
        if let Err(write_err) = wire::write_frame(stream, &frame) {
            // The server may have answered (e.g. a size error) and closed
            // before taking the whole frame: prefer its answer.
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            if let Ok(payload) = wire::read_frame(stream, self.options.max_frame_size)
                && let Ok(opened) = session.open(payload)
                && let Ok(response @ Response::Error { .. }) = Response::decode(&opened.body)
            {
                return Err(self.remote_error(op, response).into());
            }
            let error = self.io_error(op, write_err, patience);
            return Err(match error {
                StoreError::ConnectionClosed { .. } => Failed::Unanswered(error),
                other => other.into(),
            });
        }
        stream.set_read_timeout(Some(left())).map_err(configuring)?;
        let payload = match wire::read_frame(stream, self.options.max_frame_size) {
            Ok(payload) => payload,
            Err(FrameError::Closed) => {
                return Err(Failed::Unanswered(StoreError::ConnectionClosed {
                    addr: self.addr.clone(),
                    op: op.to_owned(),
                }));
            }
            Err(FrameError::TooLarge(len)) => {
                return Err(StoreError::FrameTooLarge {
                    context: format!("the answer to {op} from the {}", self.describe()),
                    len,
                    max: self.options.max_frame_size as u64,
                }
                .into());
            }
            Err(FrameError::Io(e)) => return Err(self.io_error(op, e, patience).into()),
        };
        let opened = session.open(payload).map_err(|_| StoreError::Integrity {
            addr: self.addr.clone(),
            detail: format!("the answer to {op} does not carry the session's tag"),
        })?;
        let response = Response::decode(&opened.body).map_err(|detail| StoreError::Protocol {
            addr: self.addr.clone(),
            detail: format!("answer to {op}: {detail}"),
        })?;
        match response {
            Response::Error { .. } => Err(self.remote_error(op, response).into()),
            other => Ok(other),
        }
    }

    fn io_error(&self, op: &str, e: io::Error, waited: Duration) -> StoreError {
        StoreError::on_connection(&self.addr, op, e, waited, || {
            format!("{op} on the {}", self.describe())
        })
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
            code::INTEGRITY => StoreError::Integrity {
                addr: self.addr.clone(),
                detail: format!("the server refused {op}: {message}"),
            },
            code::TOO_MANY_CONNECTIONS => StoreError::TooManyConnections {
                addr: self.addr.clone(),
                detail: message,
            },
            code::LIMIT => StoreError::OverLimit {
                op: op.to_owned(),
                store: self.describe(),
                detail: message,
            },
            code::SHUTDOWN => StoreError::ConnectionClosed {
                addr: self.addr.clone(),
                op: op.to_owned(),
            },
            code::PROTOCOL => StoreError::Protocol {
                addr: self.addr.clone(),
                detail: format!("the server says: {message} (during {op})"),
            },
            _ => StoreError::Remote {
                addr: self.addr.clone(),
                message: format!("{message} (during {op})"),
            },
        }
    }

    pub(super) fn unexpected(&self, op: &str, response: &Response) -> StoreError {
        StoreError::Protocol {
            addr: self.addr.clone(),
            detail: format!("unexpected {} answer to {op}", response.name()),
        }
    }

    /// Refuses, before sending, a request the limits the server announced
    /// refuse (it refuses the same, in the same words).
    pub(super) fn check_limits(&self, op: &str, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        let limits = &self.limits;
        let lengths = |items: &mut dyn Iterator<Item = usize>| items.max().unwrap_or(0) as u64;
        let checks = [
            (Limit::Keys, keys.len() as u64, limits.max_keys),
            (
                Limit::KeyLen,
                lengths(&mut keys.iter().map(|k| k.len())),
                limits.max_key_len,
            ),
            (
                Limit::ValueLen,
                lengths(&mut values.iter().map(|v| v.len())),
                limits.max_value_len,
            ),
        ];
        match checks.into_iter().find(|&(_, given, max)| given > max) {
            Some((limit, given, max)) => Err(StoreError::OverLimit {
                op: op.to_owned(),
                store: self.describe(),
                detail: limit.refusal(given, max),
            }),
            None => Ok(()),
        }
    }
}
