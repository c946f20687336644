//! One connection to a c10d TCPStore server: the handshake, requests with
//! bounded replies, and the WAIT / CANCEL_WAIT exchange.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::wire::{self, CheckReply, ReadError, Request, WaitReply};
use crate::{Deadline, MAX_WAIT, Result, StoreError};

/// The shortest socket timeout set (a zero timeout means "none" to the OS).
const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// An open, validated connection.
///
/// Any I/O or protocol failure marks it broken: its position in the byte stream
/// is then unknown, and the pool drops it.
pub(super) struct Connection {
    stream: TcpStream,
    /// `host:port`, for messages.
    addr: String,
    /// How long a reply that does not wait for other ranks may take.
    margin: Duration,
    broken: bool,
}

/// Why a connection attempt failed.
pub(super) enum AttemptError {
    /// Worth retrying: refused, unreachable, reset or timed out while the
    /// server starts.
    Retry(io::Error),
    /// The peer answered, but not as a c10d store: retrying will not help.
    Fatal(StoreError),
}

impl Connection {
    /// Connects to `sockaddr` and validates the connection as torch's
    /// client does: VALIDATE with the magic number, then a PING whose
    /// echo must be `nonce`.
    pub(super) fn open(
        sockaddr: SocketAddr,
        addr: &str,
        within: Duration,
        margin: Duration,
        nonce: u32,
    ) -> std::result::Result<Self, AttemptError> {
        let within = within.max(MIN_TIMEOUT);
        let stream = TcpStream::connect_timeout(&sockaddr, within).map_err(AttemptError::Retry)?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(within)))
            .map_err(AttemptError::Retry)?;
        let mut conn = Connection {
            stream,
            addr: addr.to_owned(),
            margin,
            broken: false,
        };
        let mut hello = Request::Validate.encode();
        hello.extend(Request::Ping { nonce }.encode());
        conn.stream.write_all(&hello).map_err(AttemptError::Retry)?;
        conn.stream
            .set_read_timeout(Some(within))
            .map_err(AttemptError::Retry)?;
        match wire::read_u32(&mut conn.stream) {
            Ok(echo) if echo == nonce => {}
            Ok(echo) => {
                return Err(AttemptError::Fatal(conn.protocol_error(format!(
                    "the handshake's PING echoed {echo:#010x}, expected {nonce:#010x}"
                ))));
            }
            Err(ReadError::Io(e)) => return Err(AttemptError::Retry(e)),
            Err(ReadError::Malformed(detail)) => {
                return Err(AttemptError::Fatal(conn.protocol_error(detail)));
            }
        }
        conn.stream
            .set_write_timeout(Some(margin.max(MIN_TIMEOUT)))
            .map_err(AttemptError::Retry)?;
        Ok(conn)
    }

    /// Whether the connection can still carry requests.
    pub(super) fn is_usable(&self) -> bool {
        !self.broken
    }

    /// Sends `request`.
    pub(super) fn send(&mut self, op: &str, request: Request<'_>) -> Result<()> {
        let bytes = request.encode();
        if let Err(e) = self.stream.write_all(&bytes) {
            self.broken = true;
            return Err(self.io_error(op, e, self.margin));
        }
        Ok(())
    }

    /// Reads a reply with `read`, allowing the I/O margin.
    pub(super) fn reply<T>(
        &mut self,
        op: &str,
        read: impl FnOnce(&mut TcpStream) -> std::result::Result<T, ReadError>,
    ) -> Result<T> {
        let within = self.margin;
        self.reply_within(op, within, read)
    }

    fn reply_within<T>(
        &mut self,
        op: &str,
        within: Duration,
        read: impl FnOnce(&mut TcpStream) -> std::result::Result<T, ReadError>,
    ) -> Result<T> {
        let within = within.clamp(MIN_TIMEOUT, MAX_WAIT);
        if let Err(e) = self.stream.set_read_timeout(Some(within)) {
            self.broken = true;
            return Err(StoreError::io(
                format!("configuring the connection to {}", self.addr),
                e,
            ));
        }
        read(&mut self.stream).map_err(|error| self.fail(op, error, within))
    }

    /// Marks the connection broken and names the failure of `op`.
    fn fail(&mut self, op: &str, error: ReadError, waited: Duration) -> StoreError {
        self.broken = true;
        match error {
            ReadError::Io(e) => self.io_error(op, e, waited),
            ReadError::Malformed(detail) => {
                self.protocol_error(format!("answer to {op}: {detail}"))
            }
        }
    }

    /// Sends `request` and reads its reply with `read`.
    pub(super) fn call<T>(
        &mut self,
        op: &str,
        request: Request<'_>,
        read: impl FnOnce(&mut TcpStream) -> std::result::Result<T, ReadError>,
    ) -> Result<T> {
        self.send(op, request)?;
        self.reply(op, read)
    }

    /// Round-trips a PING: once its echo is back, every request sent
    /// before it on this connection has been applied by the server.
    pub(super) fn ping(&mut self, op: &str, nonce: u32) -> Result<()> {
        let echo = self.call(op, Request::Ping { nonce }, wire::read_u32)?;
        if echo != nonce {
            self.broken = true;
            return Err(self.protocol_error(format!(
                "PING after {op} echoed {echo:#010x}, expected {nonce:#010x}"
            )));
        }
        Ok(())
    }

    /// Whether every key of `keys` is set (CHECK).
    pub(super) fn check(&mut self, op: &str, keys: &[&str]) -> Result<bool> {
        let reply = self.call(op, Request::Check { keys }, wire::read_check)?;
        Ok(reply == CheckReply::Ready)
    }

    /// Waits until every key of `keys` is set or `deadline` passes: `true`
    /// when they are all set.
    ///
    /// Each wake-up is confirmed with CHECK, as torch's libuv server also wakes
    /// waiters of a key that a compare-and-set left absent.
    pub(super) fn wait(&mut self, op: &str, keys: &[&str], deadline: &Deadline) -> Result<bool> {
        loop {
            if self.check(op, keys)? {
                return Ok(true);
            }
            let Some(left) = deadline.remaining() else {
                return Ok(false);
            };
            self.send(op, Request::Wait { keys })?;
            match self.read_wait_reply(op, left)? {
                Some(WaitReply::StopWaiting) => continue,
                Some(WaitReply::WaitCanceled) => {
                    self.broken = true;
                    return Err(self
                        .protocol_error(format!("WAIT_CANCELED answered {op} before any cancel")));
                }
                None => return self.cancel_wait(op, keys),
            }
        }
    }

    /// The first reply byte to a WAIT, or `None` when `within` passed
    /// without one (the connection stays usable: nothing was read).
    fn read_wait_reply(&mut self, op: &str, within: Duration) -> Result<Option<WaitReply>> {
        let within = within.clamp(MIN_TIMEOUT, MAX_WAIT);
        if let Err(e) = self.stream.set_read_timeout(Some(within)) {
            self.broken = true;
            return Err(StoreError::io(
                format!("configuring the connection to {}", self.addr),
                e,
            ));
        }
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => {
                self.broken = true;
                Err(StoreError::ConnectionClosed {
                    addr: self.addr.clone(),
                    op: op.to_owned(),
                })
            }
            Ok(_) => wire::read_wait(&mut &byte[..])
                .map(Some)
                .map_err(|error| self.fail(op, error, within)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => {
                self.broken = true;
                Err(self.io_error(op, e, within))
            }
        }
    }

    /// Cancels a WAIT whose time ran out, as `TCPStore::doWait` does: the
    /// server answers WAIT_CANCELED, after a STOP_WAITING if the keys came
    /// in the meantime (then CHECK says whether they are still set).
    fn cancel_wait(&mut self, op: &str, keys: &[&str]) -> Result<bool> {
        self.send(op, Request::CancelWait)?;
        match self.reply(op, wire::read_wait)? {
            WaitReply::WaitCanceled => Ok(false),
            WaitReply::StopWaiting => match self.reply(op, wire::read_wait)? {
                WaitReply::WaitCanceled => self.check(op, keys),
                WaitReply::StopWaiting => {
                    self.broken = true;
                    Err(self.protocol_error(format!(
                        "a second STOP_WAITING answered the cancel of {op}, expected WAIT_CANCELED"
                    )))
                }
            },
        }
    }

    fn io_error(&self, op: &str, e: io::Error, waited: Duration) -> StoreError {
        StoreError::on_connection(&self.addr, op, e, waited, || {
            format!("{op} on the c10d store at {}", self.addr)
        })
    }

    fn protocol_error(&self, detail: String) -> StoreError {
        StoreError::Protocol {
            addr: self.addr.clone(),
            detail: format!("{detail} (talking c10d's TCPStore protocol)"),
        }
    }
}
