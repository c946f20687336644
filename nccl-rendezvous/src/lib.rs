//! nccl-rendezvous: where the ranks of a NCCL job meet. No CUDA, no NCCL:
//! a program that only needs to hand a unique id from rank 0 to the
//! others, or a launcher, takes this crate alone.
//!
//! Rendezvous stores are a small key-value service the ranks of a job use
//! to exchange the NCCL unique id and to meet at barriers.
//!
//! - [`Store`]: the trait every store implements (torch `c10d::Store`
//!   semantics: `set`, `get` with a timeout, `add`, `compare_set`, `wait`,
//!   `delete`; `compare_set` also says whether it swapped, see
//!   [`CompareSet`]), and session keys where the store sees its clients'
//!   connections ([`Store::set_session`]: a key the [`TcpStore`] server
//!   deletes when its client's process goes).
//! - [`InProcessStore`]: threads of one program.
//! - [`TcpStore`] / [`TcpStoreServer`]: processes on one or many hosts; one
//!   rank (or a standalone process) hosts the server.
//! - [`FileStore`]: a directory on a filesystem every rank sees.
//! - [`C10dStore`]: a client of torch's c10d `TCPStore`, e.g. the one
//!   torchrun's agent serves (`TORCHELASTIC_USE_AGENT_STORE=True`).
//! - [`PrefixStore`]: scopes keys with a prefix (one per group).
//! - [`RendezvousConfig`]: reads `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ... the
//!   way torchrun, Slurm, Open MPI and PMI launchers set them, and connects
//!   to the right store, scoped to the run's key namespace.
//!
//! - [`meet`]: what ranks do together over a store (a barrier, a value
//!   one rank publishes once, a gather of every rank's value, a failure
//!   that ends every rank's wait), naming the ranks that did not come;
//!   [`meet::agree`]: after a failure, the survivors' agreement on who is
//!   lost and on the next generation's ranks.
//!
//! Every blocking call has a timeout; no call panics.
//!
//! Features: `tracing` (events and spans through `tracing`),
//! `conformance` (the conformance suite every `Store` must pass),
//! `fuzzing` (the TCP store's decoders as fuzzing entry points).
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod c10d;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
mod error;
mod file;
pub mod meet;
mod memory;
mod rank_list;
mod rendezvous;
mod setters;
mod tcp;
mod trace;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use c10d::{C10dStore, C10dStoreOptions};
pub use error::{ErrorKind, Result, StoreError};
pub use file::{FileStore, MAX_FILE_KEY_LEN};
pub use memory::InProcessStore;
pub use rendezvous::{Launcher, RendezvousConfig, StoreSpec};
#[cfg(feature = "fuzzing")]
#[cfg_attr(docsrs, doc(cfg(feature = "fuzzing")))]
pub use tcp::fuzzing;
pub use tcp::{
    DEFAULT_MAX_FRAME_SIZE, GatePriority, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions, TcpStoreServerStats,
};

/// The default timeout of blocking store operations: 300 s, as in torch.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A key-value store shared by the ranks of a job.
///
/// Values are byte strings. Counters written by [`Store::add`] are stored as
/// decimal text, so `get` on a counter returns e.g. `b"42"`. Implementations
/// are thread-safe: one store can be shared by many threads (wrap it in an
/// `Arc`).
pub trait Store: Send + Sync {
    /// Stores `value` under `key`, replacing any previous value, and wakes
    /// every caller waiting for `key`.
    ///
    /// An `Err` does not always mean nothing was stored: when a networked
    /// store's answer does not come in time (a timeout, a lost
    /// connection), the write may have been applied, or may still be on
    /// its way and be applied later. Read the key back, or write it again,
    /// before relying on either. (A [`TcpStore`] with a secret bounds
    /// "later": its server refuses a request that arrives more than its
    /// `io_timeout` after it was sent.)
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;

    /// Returns the value of `key`, waiting until some rank sets it, but at
    /// most `timeout`; then fails with [`StoreError::Timeout`] naming the key.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;

    /// Returns the value of `key` if it is set, without waiting.
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Atomically replaces the value of `key` with `new` if it currently
    /// equals `expected` (`None`: the key is absent), and says whether it did
    /// and what the key holds afterwards:
    ///
    /// - `expected == None` and `key` absent: stores `new`;
    /// - `expected == Some(v)` and `key` holds `v`: stores `new`;
    /// - otherwise (another value, or absent when a value was expected):
    ///   changes nothing.
    ///
    /// [`CompareSet::swapped`] tells the cases apart even when another
    /// caller stored the same bytes as `new` first, and
    /// [`CompareSet::current`] is the value to expect on a retry. (torch's
    /// `compareSet` returns only a value, which cannot tell "I swapped" from
    /// "someone else already wrote that value".)
    fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<CompareSet>;

    /// Atomically adds `delta` to the counter `key` (absent counts as 0) and
    /// returns the new value.
    ///
    /// The value is stored as decimal text; a value that is not an integer
    /// gives [`StoreError::NotAnInteger`], an overflow
    /// [`StoreError::Overflow`].
    fn add(&self, key: &str, delta: i64) -> Result<i64>;

    /// Waits until every key in `keys` is set, at most `timeout`; then fails
    /// with [`StoreError::Timeout`] naming the keys still missing.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()>;

    /// Removes `key`; returns whether it was set.
    fn delete(&self, key: &str) -> Result<bool>;

    /// The timeout this store was configured with, for callers that have no
    /// better one.
    fn default_timeout(&self) -> Duration;

    /// Stores `value` under `key` as a session key: the store deletes it
    /// when this client's connection to it closes, so that other processes
    /// learn that this one exited (or was killed: the kernel closes its
    /// sockets) by finding the key gone.
    ///
    /// Only stores that see their clients' connections can do this (a
    /// [`TcpStore`]: the protocol is in its module docs); the others answer
    /// [`StoreError::Unsupported`] ([`ErrorKind::Unsupported`]), and callers
    /// fall back to what every store can do. Calling it again with the same
    /// key replaces the value; [`Store::delete`] ends the session key (and
    /// is how a process that leaves cleanly withdraws it).
    ///
    /// # Errors
    /// [`StoreError::Unsupported`] from a store without sessions;
    /// [`StoreError::InvalidArgument`] for an empty key or one another
    /// client holds as its session key; the store's own errors.
    fn set_session(&self, key: &str, value: &[u8]) -> Result<()> {
        let _ = (key, value);
        Err(StoreError::Unsupported {
            capability: "session keys (Store::set_session)",
            store: std::any::type_name::<Self>().to_owned(),
            instead: "use a TcpStore, or go without knowing at once that a process exited",
        })
    }

    /// [`Store::get`] with [`Store::default_timeout`].
    fn get_default(&self, key: &str) -> Result<Vec<u8>> {
        self.get(key, self.default_timeout())
    }

    /// [`Store::wait`] with [`Store::default_timeout`].
    fn wait_default(&self, keys: &[&str]) -> Result<()> {
        self.wait(keys, self.default_timeout())
    }
}

/// What [`Store::compare_set`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompareSet {
    /// Whether this call stored its `new` value: `false` whenever the key did
    /// not hold `expected`, even if another caller had already stored the
    /// same bytes as `new`.
    pub swapped: bool,
    /// The value of the key after the call: `new` when it swapped, else the
    /// value that did not match (`None`: the key is absent).
    ///
    /// Pass it as `expected` to retry.
    pub current: Option<Vec<u8>>,
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        impl<S: Store + ?Sized> Store for $ty {
            fn set(&self, key: &str, value: &[u8]) -> Result<()> {
                (**self).set(key, value)
            }
            fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
                (**self).get(key, timeout)
            }
            fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
                (**self).try_get(key)
            }
            fn compare_set(
                &self,
                key: &str,
                expected: Option<&[u8]>,
                new: &[u8],
            ) -> Result<CompareSet> {
                (**self).compare_set(key, expected, new)
            }
            fn add(&self, key: &str, delta: i64) -> Result<i64> {
                (**self).add(key, delta)
            }
            fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
                (**self).wait(keys, timeout)
            }
            fn delete(&self, key: &str) -> Result<bool> {
                (**self).delete(key)
            }
            fn default_timeout(&self) -> Duration {
                (**self).default_timeout()
            }
            fn set_session(&self, key: &str, value: &[u8]) -> Result<()> {
                (**self).set_session(key, value)
            }
        }
    )*};
}

forward_store!(&S, Box<S>, Arc<S>);

/// A view of a store whose keys all live under `prefix/`.
///
/// Two `PrefixStore`s with different prefixes never see each other's keys. A
/// prefix must be non-empty and must not contain `/`, so that the mapping
/// from (prefix, key) to the inner key is one-to-one; nest `PrefixStore`s for
/// hierarchical names.
#[derive(Debug, Clone)]
pub struct PrefixStore<S> {
    inner: S,
    prefix: String,
}

impl<S: Store> PrefixStore<S> {
    /// Scopes `inner` with `prefix`.
    ///
    /// Fails with [`StoreError::InvalidArgument`] when `prefix` is empty or
    /// contains `/`.
    pub fn new(inner: S, prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        if prefix.is_empty() || prefix.contains('/') {
            return Err(StoreError::InvalidArgument {
                what: "store prefix",
                given: error::show_key(&prefix),
                expected: "a non-empty name without '/' (nest PrefixStores for hierarchical \
                           names, e.g. a group name, then a sub-name)"
                    .into(),
            });
        }
        Ok(PrefixStore { inner, prefix })
    }

    /// The prefix (without the trailing `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Returns the wrapped store.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn scoped(&self, key: &str) -> String {
        let mut full = String::with_capacity(self.prefix.len() + 1 + key.len());
        full.push_str(&self.prefix);
        full.push('/');
        full.push_str(key);
        full
    }
}

impl<S: Store> Store for PrefixStore<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&self.scoped(key), value)
    }
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.inner.get(&self.scoped(key), timeout)
    }
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.try_get(&self.scoped(key))
    }
    fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<CompareSet> {
        self.inner.compare_set(&self.scoped(key), expected, new)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.add(&self.scoped(key), delta)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let full: Vec<String> = keys.iter().map(|k| self.scoped(k)).collect();
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        self.inner.wait(&refs, timeout)
    }
    fn delete(&self, key: &str) -> Result<bool> {
        self.inner.delete(&self.scoped(key))
    }
    fn default_timeout(&self) -> Duration {
        self.inner.default_timeout()
    }
    fn set_session(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set_session(&self.scoped(key), value)
    }
}

/// The longest wait any store performs; longer timeouts are clamped to it so
/// that deadline arithmetic cannot overflow.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Refuses a time-limit option above [`MAX_WAIT`] (10 years): such a limit
/// is added to the current time on every frame, where a value near
/// `Duration::MAX` would overflow.
pub(crate) fn check_time_limit(
    what: &'static str,
    given: Duration,
    default: &str,
) -> Result<(), StoreError> {
    if given <= MAX_WAIT {
        return Ok(());
    }
    Err(StoreError::InvalidArgument {
        what,
        given: format!("{given:?}"),
        expected: format!(
            "at most 10 years ({} s), default {default}",
            MAX_WAIT.as_secs()
        ),
    })
}

/// The addresses `host:port` resolves to, for the socket clients (TCP and
/// c10d stores) to try in turn; none is an error naming the host.
pub(crate) fn resolve(host: &str, port: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = (host, port).to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host} resolves to no address"),
        ));
    }
    Ok(addrs)
}

/// A point in time a blocking operation must not pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    start: Instant,
    end: Instant,
}

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Self {
        Self::after_from(Instant::now(), timeout)
    }

    /// The deadline `timeout` (at most [`MAX_WAIT`]) after `start`: the
    /// arithmetic of [`Deadline::after`], on a time the caller gives (a
    /// test's made-up one).
    fn after_from(start: Instant, timeout: Duration) -> Self {
        let timeout = timeout.min(MAX_WAIT);
        // `MAX_WAIT` is far below what `Instant` can represent; fall back to
        // `start` (an immediate timeout) rather than panicking if it were not.
        let end = start.checked_add(timeout).unwrap_or(start);
        Deadline { start, end }
    }

    /// Time left, or `None` once the deadline has passed.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.remaining_at(Instant::now())
    }

    /// Time left at `now`, or `None` once the deadline has passed then.
    fn remaining_at(&self, now: Instant) -> Option<Duration> {
        let left = self.end.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Parses a counter value written by `add` (decimal text).
pub(crate) fn parse_counter(value: &[u8]) -> Option<i64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

/// The compare-and-set decision shared by every store: given the current
/// value, the outcome; the caller stores `new` when it swapped.
pub(crate) fn compare_set_decision(
    current: Option<&[u8]>,
    expected: Option<&[u8]>,
    new: &[u8],
) -> CompareSet {
    if current == expected {
        CompareSet {
            swapped: true,
            current: Some(new.to_vec()),
        }
    } else {
        CompareSet {
            swapped: false,
            current: current.map(<[u8]>::to_vec),
        }
    }
}

/// Why an `add` could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AddError {
    /// The stored value (raw) is not decimal text.
    NotAnInteger(Vec<u8>),
    /// The stored value would overflow.
    Overflow(i64),
    /// Storing the new value would pass the store's quota (the message).
    OverQuota(String),
}

impl AddError {
    pub(crate) fn into_store_error(self, key: &str, delta: i64, store: String) -> StoreError {
        match self {
            AddError::NotAnInteger(value) => StoreError::NotAnInteger {
                key: key.to_owned(),
                value: error::show_value(&value),
                store,
            },
            AddError::Overflow(current) => StoreError::Overflow {
                key: key.to_owned(),
                current,
                delta,
                store,
            },
            AddError::OverQuota(detail) => StoreError::OverLimit {
                op: format!("add {}", error::show_key(key)),
                store,
                detail,
            },
        }
    }
}

/// Adds `delta` to the counter stored in `current` (absent counts as 0);
/// returns the new value.
pub(crate) fn add_decision(current: Option<&[u8]>, delta: i64) -> Result<i64, AddError> {
    let value = match current {
        None => 0,
        Some(bytes) => {
            parse_counter(bytes).ok_or_else(|| AddError::NotAnInteger(bytes.to_vec()))?
        }
    };
    value.checked_add(delta).ok_or(AddError::Overflow(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_rejects_empty_and_slash() {
        let store = InProcessStore::new();
        for bad in ["", "a/b", "/"] {
            let err = PrefixStore::new(&store, bad).unwrap_err();
            assert!(matches!(err, StoreError::InvalidArgument { .. }), "{err:?}");
            assert!(err.to_string().contains("store prefix"), "{err}");
        }
        let ok = PrefixStore::new(&store, "g0").unwrap();
        assert_eq!(ok.prefix(), "g0");
    }

    #[test]
    fn two_prefixes_do_not_see_each_other() {
        let store = Arc::new(InProcessStore::new());
        let a = PrefixStore::new(Arc::clone(&store), "a").unwrap();
        let b = PrefixStore::new(Arc::clone(&store), "b").unwrap();
        a.set("k", b"1").unwrap();
        assert_eq!(b.try_get("k").unwrap(), None);
        assert!(
            b.get("k", Duration::from_millis(50))
                .unwrap_err()
                .is_timeout()
        );
        b.set("k", b"2").unwrap();
        assert_eq!(a.try_get("k").unwrap().unwrap(), b"1");
        assert_eq!(store.try_get("b/k").unwrap().unwrap(), b"2");
    }

    #[test]
    fn deadline_clamps_huge_timeouts() {
        let d = Deadline::after(Duration::MAX);
        assert!(d.remaining().is_some());
        let d = Deadline::after(Duration::ZERO);
        assert!(d.remaining().is_none());
        let t0 = Instant::now();
        assert_eq!(
            Deadline::after_from(t0, Duration::MAX).remaining_at(t0),
            Some(MAX_WAIT)
        );
    }

    #[test]
    fn a_deadline_passes_at_its_timeout_not_before_nor_after() {
        let t0 = Instant::now();
        let timeout = Duration::from_millis(150);
        let d = Deadline::after_from(t0, timeout);
        assert_eq!(d.remaining_at(t0), Some(timeout));
        assert_eq!(
            d.remaining_at(t0 + Duration::from_millis(149)),
            Some(Duration::from_millis(1))
        );
        assert_eq!(d.remaining_at(t0 + timeout), None);
        assert_eq!(d.remaining_at(t0 + Duration::from_secs(3600)), None);
    }

    #[test]
    fn counter_parsing() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"-7"), Some(-7));
        assert_eq!(parse_counter(b"x"), None);
        assert_eq!(parse_counter(&[0xff]), None);
    }
}
