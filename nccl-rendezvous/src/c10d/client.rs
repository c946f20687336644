//! [`C10dStore`]: connecting (with retries), the pool of connections, and
//! the [`Store`] operations mapped onto c10d's queries.

use std::fmt;
use std::io;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use super::connection::{AttemptError, Connection};
use super::options::C10dStoreOptions;
use super::wire::{self, MAX_KEY_COUNT, MAX_KEY_LEN, MAX_VALUE_LEN, Request};
use crate::error::show_key;
use crate::{CompareSet, Deadline, Result, Store, StoreError, add_decision, check_time_limit};

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 4;
/// The longest single connection attempt, and the backoff cap.
const MAX_ATTEMPT: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A client of torch's c10d `TCPStore` server (both its libuv and its
/// legacy backend), e.g. the store torchrun's agent serves to its workers.
///
/// # No authentication
///
/// c10d's TCPStore has none: any process that reaches the port can read
/// and write every key. This client therefore has no secret either
/// (`NCCL_RS_STORE_SECRET` is refused with the agent's store); keep the
/// port on a trusted network, as torch's documentation asks.
///
/// # How each operation maps onto c10d's queries
///
/// | [`Store`](crate::Store) call | queries |
/// |---|---|
/// | `set` | SET, then PING: SET has no reply, and the echo proves it was applied before `set` returns |
/// | `get` | CHECK; while absent, WAIT (cancelled with CANCEL_WAIT at the deadline) and CHECK again; then GET |
/// | `try_get` | CHECK, then GET if set |
/// | `compare_set` | COMPARE_SET (and CHECK when `expected == new`) |
/// | `add` | CHECK and GET (to refuse a non-integer or an overflow), then ADD |
/// | `wait` | as `get`, without the GET; on a timeout, one CHECK per key to name those missing |
/// | `delete` | DELETE_KEY |
///
/// Every reply is bounded: a `get` or `wait` by its timeout (then the wait
/// is cancelled as torch's own client does), every other reply by the I/O
/// margin ([`C10dStoreOptions::io_margin`]). A server that closes the
/// connection fails the call at once with
/// [`StoreError::ConnectionClosed`](crate::StoreError::ConnectionClosed).
///
/// # Where c10d's semantics differ from `Store`'s
///
/// * **`compare_set`'s `swapped`.** c10d's COMPARE_SET answers only the
///   value the key holds afterwards, so `swapped` is `true` whenever that
///   value is `new`: also when another caller had already stored the same
///   bytes. Of several callers offering the same value at once, all report
///   `swapped` (the store's suite checks that exactly one does: c10d cannot
///   meet it). Elect a leader with distinct values (e.g. each rank's own
///   id) and compare `current` with your own.
/// * **"Absent" is an empty expected value.** c10d has no way to say "the
///   key must be absent" but an empty `expected`, so `expected: None` and
///   `Some(b"")` are the same request: a key holding an empty value counts
///   as absent (it is swapped where [`Store`](crate::Store) says it
///   is present), and `Some(b"")` on an absent key stores `new`. When the
///   key is absent and a non-empty value was expected, c10d answers the
///   expected value itself; the client reads that as `current: None`.
/// * **`add`** checks the stored value before adding, but not atomically
///   with the ADD: a non-integer written between the two makes torch's
///   server close the connection
///   ([`StoreError::ConnectionClosed`](crate::StoreError::ConnectionClosed)),
///   and an overflow in between wraps. Counters written by `add`, here or
///   by Python, never hit either.
/// * **Limits.** Keys of at most 8 KiB less the `/` torch's client puts before each, values of at most 8 MiB and at most
///   128 Ki keys per `wait` (torch's libuv server closes the connection on
///   more); refused before sending with
///   [`StoreError::InvalidArgument`](crate::StoreError::InvalidArgument).
/// * **A key deleted while it is read** (between the CHECK and the GET):
///   the legacy server closes the connection, the libuv one answers an
///   empty value.
/// * **Wake-ups.** The legacy server does not wake waiters of a key that
///   COMPARE_SET creates; a `get` or `wait` on such a key returns once
///   something else sets it, or times out.
///
/// ```no_run
/// use nccl_rendezvous::{C10dStore, Store};
/// use std::time::Duration;
///
/// // Under torchrun: the agent's store.
/// let store = C10dStore::connect("127.0.0.1", 29500, Duration::from_secs(60))?;
/// store.set("from_rust", b"hello")?;
/// let value = store.get("from_python", Duration::from_secs(10))?;
/// # Ok::<(), nccl_rendezvous::StoreError>(())
/// ```
///
/// Thread-safe: concurrent calls each use their own connection (from a
/// small pool, or opened on demand), so a thread blocked in `get` never
/// holds up another thread's `set`.
pub struct C10dStore {
    host: String,
    port: u16,
    /// `host:port`, for messages.
    addr: String,
    options: C10dStoreOptions,
    idle: Mutex<Vec<Connection>>,
    /// The next PING nonce: unique per request, so a stale echo is caught.
    nonce: AtomicU32,
}

impl fmt::Debug for C10dStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("C10dStore")
            .field("addr", &self.addr)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl C10dStore {
    /// Connects to the c10d TCPStore server at `host:port` (a host name or
    /// an IP address, IPv6 possibly in brackets), retrying while it is not
    /// up yet for at most `timeout`, which is also the default timeout of
    /// blocking operations ([`Store::default_timeout`]).
    ///
    /// Fails with [`StoreError::Connect`] when no server answered in time,
    /// and at once with [`StoreError::Protocol`] when the peer answers but
    /// not as a c10d store.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self> {
        let options = C10dStoreOptions::default()
            .with_timeout(timeout)
            .with_connect_timeout(timeout);
        Self::connect_with(host, port, options)
    }

    /// [`C10dStore::connect`] with every setting given.
    pub fn connect_with(host: &str, port: u16, options: C10dStoreOptions) -> Result<Self> {
        check_time_limit("io_margin", options.io_margin, "10 s")?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_owned();
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let store = C10dStore {
            host,
            port,
            addr,
            options,
            idle: Mutex::new(Vec::new()),
            nonce: AtomicU32::new(std::process::id().rotate_left(16)),
        };
        let first = store.connect_with_retry()?;
        store.idle().push(first);
        Ok(store)
    }

    /// The server's address as given (`host:port`).
    pub fn server_addr(&self) -> &str {
        &self.addr
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn describe(&self) -> String {
        format!("c10d TCPStore at {}", self.addr)
    }

    fn next_nonce(&self) -> u32 {
        self.nonce.fetch_add(1, Ordering::Relaxed)
    }

    fn margin(&self) -> Duration {
        self.options.io_margin
    }

    /// One round of attempts over every resolved address.
    fn try_connect(&self, within: Duration) -> std::result::Result<Connection, AttemptError> {
        let within = within.min(MAX_ATTEMPT);
        let mut last = None;
        for sockaddr in crate::resolve(&self.host, self.port).map_err(AttemptError::Retry)? {
            match Connection::open(
                sockaddr,
                &self.addr,
                within,
                self.margin(),
                self.next_nonce(),
            ) {
                Ok(conn) => return Ok(conn),
                Err(AttemptError::Retry(e)) => last = Some(e),
                Err(fatal) => return Err(fatal),
            }
        }
        Err(AttemptError::Retry(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no address to connect to")
        })))
    }

    /// Connects, retrying with exponential backoff until the connect
    /// timeout, as torch's client does while the server starts.
    fn connect_with_retry(&self) -> Result<Connection> {
        let deadline = Deadline::after(self.options.connect_timeout);
        let mut backoff = Duration::from_millis(10);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let within = deadline.remaining().unwrap_or(Duration::from_millis(1));
            let last = match self.try_connect(within) {
                Ok(conn) => return Ok(conn),
                Err(AttemptError::Fatal(e)) => return Err(e),
                Err(AttemptError::Retry(e)) => e,
            };
            let Some(left) = deadline.remaining() else {
                return Err(StoreError::Connect {
                    addr: self.addr.clone(),
                    attempts,
                    waited: deadline.elapsed(),
                    source: last,
                });
            };
            thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Takes an idle connection or opens one (a single round of attempts:
    /// the server was up when this store connected).
    fn checkout(&self) -> Result<Connection> {
        if let Some(conn) = self.idle().pop() {
            return Ok(conn);
        }
        let within = self.options.connect_timeout.min(self.margin());
        let start = Deadline::after(within);
        self.try_connect(within).map_err(|e| match e {
            AttemptError::Fatal(e) => e,
            AttemptError::Retry(source) => StoreError::Connect {
                addr: self.addr.clone(),
                attempts: 1,
                waited: start.elapsed(),
                source,
            },
        })
    }

    /// Runs `body` on a connection of the pool, and puts the connection
    /// back unless it broke.
    fn with_connection<T>(&self, body: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let mut conn = self.checkout()?;
        let result = body(&mut conn);
        if conn.is_usable() {
            let mut idle = self.idle();
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
        result
    }

    fn check_key(&self, key: &str) -> Result<()> {
        if key.len() <= MAX_KEY_LEN {
            return Ok(());
        }
        Err(StoreError::InvalidArgument {
            what: "c10d store key",
            given: show_key(key),
            expected: format!(
                "at most {MAX_KEY_LEN} bytes: torch's libuv TCPStore server closes the \
                 connection on a longer key"
            ),
        })
    }

    fn check_value(&self, what: &'static str, value: &[u8]) -> Result<()> {
        if value.len() <= MAX_VALUE_LEN {
            return Ok(());
        }
        Err(StoreError::InvalidArgument {
            what,
            given: format!("of {} bytes", value.len()),
            expected: format!(
                "at most {MAX_VALUE_LEN} bytes (8 MiB): torch's libuv TCPStore server closes the \
                 connection on a longer value"
            ),
        })
    }

    /// The keys of `keys` not set now: for a timeout's message.
    fn missing(&self, conn: &mut Connection, op: &str, keys: &[&str]) -> Result<Vec<String>> {
        let mut missing = Vec::new();
        for key in keys {
            if !conn.check(op, &[key])? {
                missing.push((*key).to_owned());
            }
        }
        Ok(missing)
    }

    /// The value of `key` if it is set (CHECK, then GET: the legacy server
    /// closes the connection on a GET of an absent key).
    fn fetch(&self, conn: &mut Connection, op: &str, key: &str) -> Result<Option<Vec<u8>>> {
        if !conn.check(op, &[key])? {
            return Ok(None);
        }
        conn.call(op, Request::Get { key }, wire::read_bytes)
            .map(Some)
    }
}

fn op_name(op: &str, key: &str) -> String {
    format!("{op} {}", show_key(key))
}

impl Store for C10dStore {
    /// SET, then a PING round trip: SET has no reply, and the echo proves
    /// the server applied it before `set` returns, so a read on another
    /// connection afterwards sees the value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.check_key(key)?;
        self.check_value("c10d store value", value)?;
        let op = op_name("set", key);
        self.with_connection(|conn| {
            conn.send(&op, Request::Set { key, value })?;
            conn.ping(&op, self.next_nonce())
        })
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.check_key(key)?;
        let op = op_name("get", key);
        let deadline = Deadline::after(timeout);
        self.with_connection(|conn| {
            if !conn.wait(&op, &[key], &deadline)? {
                return Err(StoreError::Timeout {
                    op: "get",
                    keys: vec![key.to_owned()],
                    store: self.describe(),
                    waited: deadline.elapsed(),
                });
            }
            conn.call(&op, Request::Get { key }, wire::read_bytes)
        })
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.check_key(key)?;
        let op = op_name("try_get", key);
        self.with_connection(|conn| self.fetch(conn, &op, key))
    }

    /// COMPARE_SET, whose reply is only the value afterwards; see the
    /// module docs for what that means for [`CompareSet::swapped`] and for
    /// an empty `expected`.
    fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<CompareSet> {
        self.check_key(key)?;
        let wire_expected = expected.unwrap_or_default();
        self.check_value("c10d compare_set expected value", wire_expected)?;
        self.check_value("c10d compare_set new value", new)?;
        let op = op_name("compare_set", key);
        self.with_connection(|conn| {
            let request = Request::CompareSet {
                key,
                expected: wire_expected,
                desired: new,
            };
            let after = conn.call(&op, request, wire::read_bytes)?;
            let swapped_to_new = CompareSet {
                swapped: true,
                current: Some(new.to_vec()),
            };
            if wire_expected.is_empty() {
                // An absent key, or an empty value, matched.
                return Ok(if after == new {
                    swapped_to_new
                } else {
                    CompareSet {
                        swapped: false,
                        current: Some(after),
                    }
                });
            }
            // A present key answers `new` (it matched) or its value (it did
            // not, so not `expected`); an absent one answers `expected`.
            // Only when `expected == new` do the cases share an answer, and
            // then CHECK tells them apart.
            if after == new && (new != wire_expected || conn.check(&op, &[key])?) {
                Ok(swapped_to_new)
            } else if after == wire_expected {
                Ok(CompareSet {
                    swapped: false,
                    current: None,
                })
            } else {
                Ok(CompareSet {
                    swapped: false,
                    current: Some(after),
                })
            }
        })
    }

    /// ADD, after reading the current value: torch's server adds to a
    /// value that is not an integer by closing the connection, and wraps
    /// past `i64::MAX`, so the client refuses both first (not atomically
    /// with the ADD: a write between the two goes unchecked).
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.check_key(key)?;
        let op = op_name("add", key);
        self.with_connection(|conn| {
            let current = self.fetch(conn, &op, key)?;
            add_decision(current.as_deref(), delta)
                .map_err(|e| e.into_store_error(key, delta, self.describe()))?;
            conn.call(&op, Request::Add { key, delta }, wire::read_i64)
        })
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        if keys.len() > MAX_KEY_COUNT {
            return Err(StoreError::InvalidArgument {
                what: "number of keys to wait for",
                given: keys.len().to_string(),
                expected: format!(
                    "at most {MAX_KEY_COUNT}: torch's libuv TCPStore server closes the \
                     connection on more"
                ),
            });
        }
        for key in keys {
            self.check_key(key)?;
        }
        let op = match keys {
            [one] => op_name("wait", one),
            _ => format!("wait for {} keys", keys.len()),
        };
        let deadline = Deadline::after(timeout);
        self.with_connection(|conn| {
            if conn.wait(&op, keys, &deadline)? {
                return Ok(());
            }
            let waited = deadline.elapsed();
            let missing = self.missing(conn, &op, keys)?;
            if missing.is_empty() {
                // The last keys arrived while the missing ones were listed.
                return Ok(());
            }
            Err(StoreError::Timeout {
                op: "wait",
                keys: missing,
                store: self.describe(),
                waited,
            })
        })
    }

    fn delete(&self, key: &str) -> Result<bool> {
        self.check_key(key)?;
        let op = op_name("delete", key);
        self.with_connection(|conn| {
            let removed = conn.call(&op, Request::DeleteKey { key }, wire::read_i64)?;
            Ok(removed > 0)
        })
    }

    fn default_timeout(&self) -> Duration {
        self.options.timeout
    }
}
