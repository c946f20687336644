//! The error type shared by every store.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::meet::agree::reason::ExclusionReason;
use crate::rank_list::RankList;

/// What kind of failure a [`StoreError`] is, for callers that react by
/// kind rather than by variant (retry a timeout, fix a setting, give up on
/// an unreachable store).
///
/// The crates above map these onto their own kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A `get`, `wait` or meeting did not see its keys or ranks in time.
    Timeout,
    /// Another rank published its failure while this one waited for it.
    PeerFailed,
    /// An argument the call cannot accept: a key, a prefix, an option, a
    /// counter that is not a number or would overflow.
    InvalidArgument,
    /// A launch setting (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ...) is
    /// missing or malformed.
    Config,
    /// The store itself failed: it could not be reached or bound, closed
    /// the connection, did not answer, refused the client, or its file or
    /// socket I/O failed.
    Store,
    /// The survivors' agreement left this rank out of the group's next
    /// generation ([`StoreError::Excluded`]): it must not take part in it.
    Excluded,
    /// Too few ranks came to the survivors' agreement for the group to go
    /// on ([`StoreError::TooFewSurvivors`]).
    TooFewSurvivors,
    /// The store has no such capability ([`StoreError::Unsupported`]):
    /// fall back to what every store can do.
    Unsupported,
}

/// A `Result` whose error defaults to [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong while talking to a rendezvous store or
/// reading the launch environment.
///
/// Every message says what was expected, what was seen, and what the user can
/// do about it. Match on the variants to react programmatically; the enum is
/// `#[non_exhaustive]`, so keep a wildcard arm. `Debug` leads with the
/// message and its sources, then names the variant and its kind, so
/// `fn main() -> Result<(), StoreError>` prints the sentence.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A blocking `get` or `wait` did not see its key(s) in time.
    #[error(
        "{op} timed out after {waited:?} waiting for {} in the {store}; likely causes: the rank \
         that sets it has not reached that point yet, has crashed, or uses a different store \
         address, directory or group prefix; check the other ranks' logs, or raise the timeout \
         (NCCL_RS_STORE_TIMEOUT_SECS) if ranks start far apart",
        KeyList(.keys)
    )]
    Timeout {
        /// The operation that timed out (`get`, `wait`).
        op: &'static str,
        /// The keys still missing when the time ran out.
        keys: Vec<String>,
        /// The store, described for humans (kind and address or directory).
        store: String,
        /// How long the operation waited.
        waited: Duration,
    },

    /// `add` found a value that is not a decimal 64-bit integer.
    #[error(
        "add on key {key:?} in the {store}: the stored value {value} is not a decimal 64-bit \
         integer; add() only works on keys that hold decimal text (as written by add()); use a \
         separate key for counters"
    )]
    NotAnInteger {
        /// The key.
        key: String,
        /// The stored value, shown (lossily, possibly truncated) for humans.
        value: String,
        /// The store, described for humans.
        store: String,
    },

    /// `add` would overflow a 64-bit signed integer.
    #[error(
        "add({delta}) on key {key:?} in the {store} would overflow i64 (the current value is \
         {current}); use a smaller delta or reset the counter"
    )]
    Overflow {
        /// The key.
        key: String,
        /// The value stored before the call.
        current: i64,
        /// The delta that was asked for.
        delta: i64,
        /// The store, described for humans.
        store: String,
    },

    /// The TCP client could not reach the server before its connect timeout.
    #[error(
        "could not connect to the TCP store server at {addr}: {attempts} attempt(s) over \
         {waited:?}; check that rank 0 (or, for torchrun's agent store, the agent) is running \
         and listening there (MASTER_ADDR / MASTER_PORT), that the port is reachable from this \
         host, or raise the connect timeout if it starts late"
    )]
    Connect {
        /// The address that was tried (`host:port`).
        addr: String,
        /// How many connection attempts were made.
        attempts: u32,
        /// How long the client kept trying.
        waited: Duration,
        /// The error of the last attempt.
        #[source]
        source: io::Error,
    },

    /// The TCP server could not bind its listening socket.
    #[error(
        "could not bind the TCP store server to {addr}; another process may already use that \
         port (choose another MASTER_PORT, or port 0 for an ephemeral one), or the \
         address does not belong to this host"
    )]
    Bind {
        /// The address that was asked for.
        addr: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// The TCP server closed the connection in the middle of an operation.
    #[error(
        "the TCP store server at {addr} closed the connection during {op}; the server (usually \
         hosted by rank 0, or by torchrun's agent) has probably exited, crashed or been shut \
         down; check its log"
    )]
    ConnectionClosed {
        /// The server's address.
        addr: String,
        /// The operation in flight, with its key.
        op: String,
    },

    /// The TCP server did not answer within the operation's time plus the
    /// client's I/O margin.
    #[error(
        "the TCP store server at {addr} sent no answer to {op} within {waited:?}; the server may \
         be hung or overloaded, or the network dropped the connection; raise the client's I/O \
         margin if the server is merely slow"
    )]
    Unresponsive {
        /// The server's address.
        addr: String,
        /// The operation in flight, with its key.
        op: String,
        /// How long the client waited for the answer.
        waited: Duration,
    },

    /// The handshake with the TCP server failed: the two sides do not hold
    /// the same secret, only one holds one, or the server takes no client
    /// from another host without one.
    #[error(
        "authentication with the TCP store server at {addr} failed: {detail}; every rank must \
         use the same shared secret as the server (NCCL_RS_STORE_SECRET)"
    )]
    Auth {
        /// The server's address.
        addr: String,
        /// What the server said was wrong.
        detail: String,
    },

    /// A frame failed its authentication tag: altered, replayed, reordered
    /// or injected between the client and the server.
    #[error(
        "a frame on the connection with the TCP store server at {addr} failed authentication: \
         {detail}; something between this client and the server altered, replayed or injected \
         data (or the server restarted with another secret); the connection was closed and \
         nothing it carried after that frame was used"
    )]
    Integrity {
        /// The server's address.
        addr: String,
        /// Which frame, and which way.
        detail: String,
    },

    /// A request over one of the store's limits: a key, a value or a key
    /// count over the server's per-request limits, or a write that would
    /// pass the store's quota.
    ///
    /// Nothing stored was changed.
    #[error(
        "{op} on the {store} was refused: {detail}; nothing stored was changed. The limits are \
         the server's (TcpStoreServerOptions: max_key_len, max_value_len, max_keys_per_request, \
         max_stored_keys, max_stored_bytes): store less, delete keys no longer needed, or raise \
         them where the server starts"
    )]
    OverLimit {
        /// The operation, with its key.
        op: String,
        /// The store, described for humans.
        store: String,
        /// The limit, and what the request would have taken.
        detail: String,
    },

    /// The TCP server refused a new connection: it already has as many open
    /// as its `max_connections` allows (or no file descriptor left).
    #[error(
        "the TCP store server at {addr} refused a new connection: {detail}; each TcpStore opens \
         one connection per thread calling it at once, so fewer calling threads or clients also \
         help"
    )]
    TooManyConnections {
        /// The server's address.
        addr: String,
        /// The server's message, with its limit.
        detail: String,
    },

    /// A frame was larger than the maximum frame size.
    #[error(
        "{context}: a frame of {len} bytes exceeds the maximum frame size of {max} bytes; store \
         smaller values, or raise max_frame_size on the server and on every client"
    )]
    FrameTooLarge {
        /// Which frame (operation and key, or the server's answer).
        context: String,
        /// The frame's length in bytes.
        len: u64,
        /// The maximum in force.
        max: u64,
    },

    /// The peer sent something that is not the store protocol.
    #[error(
        "protocol error talking to the TCP store at {addr}: {detail}; the peer is probably not the \
         server this client expects (an nccl-rendezvous store server of the same version, or torch's \
         c10d TCPStore for a C10dStore); check MASTER_ADDR / MASTER_PORT"
    )]
    Protocol {
        /// The peer's address.
        addr: String,
        /// What was expected and what came.
        detail: String,
    },

    /// The TCP server reported an error it found while serving the request.
    #[error("the TCP store server at {addr} reported an error: {message}")]
    Remote {
        /// The server's address.
        addr: String,
        /// The server's message.
        message: String,
    },

    /// An operating-system I/O error (also the `source()`), with what was
    /// being done: the message names both, so a log line that prints only
    /// the error says why ("No space left on device").
    #[error("{context}: {source}")]
    Io {
        /// What was being done (and on which file or address).
        context: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// The file store could not take its lock in time: a live process
    /// holds it (the kernel releases the lock of a process that dies).
    #[error(
        "the file store could not take its lock on {} within {waited:?}{}; a live process holds \
         it (a process that dies releases it at once), so one is stopped or hung in the middle \
         of a write: look for a stopped (SIGSTOP, debugger) or hung rank using this directory",
        .path.display(),
        LockAge(*.age)
    )]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// How long the store tried.
        waited: Duration,
        /// How long the holder had held the lock at the last try, when
        /// known.
        age: Option<Duration>,
    },

    /// The store cannot do what was asked: a capability only some stores
    /// have ([`Store::set_session`](crate::Store::set_session)).
    #[error("the {store} does not support {capability}; {instead}")]
    Unsupported {
        /// The capability, as the caller would name it.
        capability: &'static str,
        /// The store, for messages.
        store: String,
        /// What to do instead.
        instead: &'static str,
    },

    /// An argument the store cannot accept (a key too long for a file name,
    /// a prefix with a `/`, ...).
    #[error("invalid {what} {given}: expected {expected}")]
    InvalidArgument {
        /// What the argument is.
        what: &'static str,
        /// The value given, quoted.
        given: String,
        /// What is accepted, and what to do instead.
        expected: String,
    },

    /// Ranks did not come to a meeting ([`meet`](crate::meet)) in time.
    #[error(
        "{} of {world_size} did not reach {meeting} within {waited:?}; they are slower or \
         stuck, issue their steps in another order, exited, or meet under another namespace or \
         store; check their logs",
        RankList(.missing)
    )]
    Absent {
        /// The meeting, as the caller named it (`the barrier "start"`).
        meeting: String,
        /// The ranks that had not come, in order.
        missing: Vec<usize>,
        /// The ranks of the meeting.
        world_size: usize,
        /// How long this rank waited.
        waited: Duration,
    },

    /// Another rank of a meeting published its failure
    /// ([`Meeting::fail`](crate::meet::Meeting::fail)) while this one
    /// waited, or before it came.
    #[error("rank {rank} failed: {message}")]
    PeerFailed {
        /// The rank that failed.
        rank: usize,
        /// Its error, on one line.
        message: String,
        /// What it exits with (the caller's code; 1 when it gave none).
        code: i32,
    },

    /// The survivors' agreement
    /// ([`agree_survivors`](crate::meet::agree::agree_survivors)) left this
    /// rank out of the next generation: it came after the decision.
    ///
    /// Final: calling again gives the same error.
    #[error(
        "rank {rank} was excluded from generation {generation}: {reason}; {} went on as \
         generation {generation} without it. This rank must not take part in generation \
         {generation} (its collectives would hang or disturb the survivors'): leave the job, \
         or join again as a new rank (a grow, or a fresh group)",
        RankList(.survivors)
    )]
    Excluded {
        /// This rank, in the generation that failed.
        rank: usize,
        /// The generation it was left out of (the failed one + 1).
        generation: u64,
        /// Why it was left out.
        reason: ExclusionReason,
        /// The survivors' old ranks, in order.
        survivors: Vec<usize>,
    },

    /// Fewer ranks than the caller's minimum came to the survivors'
    /// agreement ([`agree_survivors`](crate::meet::agree::agree_survivors))
    /// in time; every rank that reads the decision gets this.
    #[error(
        "only {} of {world_size} came to the agreement on generation {generation} in time, \
         fewer than the {min_survivors} the group needs (min_survivors); generation \
         {generation} was not formed and the group cannot go on: restart the job, or accept \
         fewer survivors",
        RankList(.survivors)
    )]
    TooFewSurvivors {
        /// The generation that was not formed (the failed one + 1).
        generation: u64,
        /// The ranks that came, in order.
        survivors: Vec<usize>,
        /// The fewest survivors asked for.
        min_survivors: usize,
        /// The world size of the generation that failed.
        world_size: usize,
    },

    /// A launch environment variable is missing or malformed.
    #[error("{message}")]
    Config {
        /// The variable at fault.
        var: String,
        /// The full message: the variable, the value seen and the form expected.
        message: String,
    },
}

impl StoreError {
    /// Wraps an I/O error with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }

    /// What an I/O error `e` on the connection to `addr` during `op` means:
    /// a timeout is [`StoreError::Unresponsive`] after `waited`, a closed
    /// connection [`StoreError::ConnectionClosed`], anything else
    /// [`StoreError::Io`] with `context`.
    pub(crate) fn on_connection(
        addr: &str,
        op: &str,
        e: io::Error,
        waited: Duration,
        context: impl FnOnce() -> String,
    ) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => StoreError::Unresponsive {
                addr: addr.to_owned(),
                op: op.to_owned(),
                waited,
            },
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected => StoreError::ConnectionClosed {
                addr: addr.to_owned(),
                op: op.to_owned(),
            },
            _ => StoreError::io(context(), e),
        }
    }

    /// What kind of failure this is:
    ///
    /// | Variant | Kind |
    /// |---|---|
    /// | `Timeout`, `Absent` | [`ErrorKind::Timeout`] |
    /// | `PeerFailed` | [`ErrorKind::PeerFailed`] |
    /// | `NotAnInteger`, `Overflow`, `InvalidArgument` | [`ErrorKind::InvalidArgument`] |
    /// | `Config` | [`ErrorKind::Config`] |
    /// | `Excluded` | [`ErrorKind::Excluded`] |
    /// | `TooFewSurvivors` | [`ErrorKind::TooFewSurvivors`] |
    /// | `Unsupported` | [`ErrorKind::Unsupported`] |
    /// | every other variant (connection, server, authentication, limits, protocol, I/O, lock) | [`ErrorKind::Store`] |
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Timeout { .. } | StoreError::Absent { .. } => ErrorKind::Timeout,
            StoreError::PeerFailed { .. } => ErrorKind::PeerFailed,
            StoreError::NotAnInteger { .. }
            | StoreError::Overflow { .. }
            | StoreError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            StoreError::Config { .. } => ErrorKind::Config,
            StoreError::Excluded { .. } => ErrorKind::Excluded,
            StoreError::TooFewSurvivors { .. } => ErrorKind::TooFewSurvivors,
            StoreError::Unsupported { .. } => ErrorKind::Unsupported,
            StoreError::Connect { .. }
            | StoreError::Bind { .. }
            | StoreError::ConnectionClosed { .. }
            | StoreError::Unresponsive { .. }
            | StoreError::Auth { .. }
            | StoreError::TooManyConnections { .. }
            | StoreError::Integrity { .. }
            | StoreError::OverLimit { .. }
            | StoreError::FrameTooLarge { .. }
            | StoreError::Protocol { .. }
            | StoreError::Remote { .. }
            | StoreError::Io { .. }
            | StoreError::Lock { .. } => ErrorKind::Store,
        }
    }

    /// True for [`StoreError::Timeout`]: a `get` or `wait` whose keys did
    /// not appear in time.
    ///
    /// A server that does not answer ([`StoreError::Unresponsive`]), cannot be
    /// reached ([`StoreError::Connect`]) or a lock not taken in time
    /// ([`StoreError::Lock`]) is a failure of the store itself, not a timeout:
    /// waiting longer for other ranks would not help.
    pub fn is_timeout(&self) -> bool {
        self.kind() == ErrorKind::Timeout
    }
}

/// Formats a list of keys for messages: `key "a"` or `keys "a", "b"`.
struct KeyList<'a>(&'a [String]);

impl fmt::Display for KeyList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        match self.0 {
            [one] => write!(f, "key {one:?}"),
            keys => {
                f.write_str("keys ")?;
                for (i, key) in keys.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{key:?}")?;
                }
                if keys.len() > SHOWN {
                    write!(f, " and {} more", keys.len() - SHOWN)?;
                }
                Ok(())
            }
        }
    }
}

struct LockAge(Option<Duration>);

impl fmt::Display for LockAge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(age) => write!(f, " (held for {:.1}s)", age.as_secs_f64()),
            None => Ok(()),
        }
    }
}

/// Shows a stored value in a message: lossy UTF-8, quoted, at most 64 chars.
pub(crate) fn show_value(value: &[u8]) -> String {
    const MAX: usize = 64;
    let text = String::from_utf8_lossy(value);
    let mut shown: String = text.chars().take(MAX).collect();
    if text.chars().count() > MAX {
        shown.push('…');
    }
    format!("{shown:?} ({} bytes)", value.len())
}

/// Shows a key in a message: quoted, at most 96 chars.
pub(crate) fn show_key(key: &str) -> String {
    const MAX: usize = 96;
    if key.chars().count() > MAX {
        let head: String = key.chars().take(MAX).collect();
        format!("{head:?}… ({} bytes)", key.len())
    } else {
        format!("{key:?}")
    }
}

mod debug;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_message_names_key_store_and_wait() {
        let e = StoreError::Timeout {
            op: "get",
            keys: vec!["rank3/uid".into()],
            store: "TCP store at 127.0.0.1:29500".into(),
            waited: Duration::from_millis(1500),
        };
        let msg = e.to_string();
        assert!(msg.contains("key \"rank3/uid\""), "{msg}");
        assert!(msg.contains("127.0.0.1:29500"), "{msg}");
        assert!(msg.contains("1.5s"), "{msg}");
        assert!(msg.contains("likely causes"), "{msg}");
        assert!(e.is_timeout());
    }

    #[test]
    fn io_message_names_the_operating_systems_error() {
        // ENOSPC: what a full disk gives a file store's write.
        let e = StoreError::io(
            "writing the file store's entry",
            io::Error::from_raw_os_error(28),
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with("writing the file store's entry: ")
                && msg.contains("No space left on device"),
            "{msg}"
        );
    }

    #[test]
    fn key_list_truncates() {
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        let s = KeyList(&keys).to_string();
        assert!(s.starts_with("keys \"k0\", \"k1\""), "{s}");
        assert!(s.ends_with("and 2 more"), "{s}");
    }

    #[test]
    fn show_value_truncates_and_counts() {
        let v = vec![b'x'; 100];
        let s = show_value(&v);
        assert!(s.contains('…') && s.contains("100 bytes"), "{s}");
        assert_eq!(show_value(b"12"), "\"12\" (2 bytes)");
    }
}
