//! The in-memory table behind [`InProcessStore`] and the TCP server.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{
    AddError, CompareSet, DEFAULT_TIMEOUT, Deadline, Result, Store, StoreError, add_decision,
    compare_set_decision,
};

/// Why a blocking table operation returned without its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitError {
    /// The time ran out; these keys were still missing.
    Timeout {
        missing: Vec<String>,
        waited: Duration,
    },
    /// The table was closed (the server is shutting down).
    Closed,
    /// The caller's liveness check failed (the client went away).
    Abandoned,
}

/// How often a blocking call with a liveness check calls it.
pub(crate) const ALIVE_CHECK: Duration = Duration::from_secs(1);

/// The most a [`Table`] holds: keys, and bytes of keys plus values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quota {
    pub(crate) max_keys: usize,
    pub(crate) max_bytes: usize,
}

impl Quota {
    /// No bound but memory (the in-process store: its callers are the
    /// program's own threads).
    const UNBOUNDED: Quota = Quota {
        max_keys: usize::MAX,
        max_bytes: usize::MAX,
    };
}

/// A write refused because the table would hold more than its [`Quota`]:
/// what it would have held and the bound, for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OverQuota(pub(crate) String);

#[derive(Debug)]
struct State {
    map: HashMap<String, Vec<u8>>,
    /// Bytes of keys plus values in `map`.
    bytes: usize,
    quota: Quota,
    closed: bool,
}

impl State {
    /// Stores `value` under `key` unless the quota forbids it; a refused
    /// write changes nothing.
    fn put(&mut self, key: &str, value: Vec<u8>) -> Result<(), OverQuota> {
        let (keys, bytes) = match self.map.get(key) {
            Some(old) => (self.map.len(), self.bytes - old.len() + value.len()),
            None => (
                self.map.len() + 1,
                self.bytes
                    .saturating_add(key.len())
                    .saturating_add(value.len()),
            ),
        };
        if keys > self.quota.max_keys {
            return Err(OverQuota(format!(
                "storing key {} would make {keys} keys, over the store's max_stored_keys of {}",
                super::error::show_key(key),
                self.quota.max_keys
            )));
        }
        if bytes > self.quota.max_bytes {
            return Err(OverQuota(format!(
                "storing {} bytes under key {} would make {bytes} bytes of keys and values, \
                 over the store's max_stored_bytes of {}",
                value.len(),
                super::error::show_key(key),
                self.quota.max_bytes
            )));
        }
        self.bytes = bytes;
        self.map.insert(key.to_owned(), value);
        Ok(())
    }

    fn remove(&mut self, key: &str) -> bool {
        let Some(old) = self.map.remove(key) else {
            return false;
        };
        self.bytes -= key.len() + old.len();
        true
    }
}

/// A map guarded by a mutex, with a condition variable signalled on every
/// change so that blocking reads sleep instead of polling.
#[derive(Debug)]
pub(crate) struct Table {
    state: Mutex<State>,
    changed: Condvar,
}

impl Default for Table {
    fn default() -> Self {
        Table::with_quota(Quota::UNBOUNDED)
    }
}

impl Table {
    /// An empty table that holds at most `quota`.
    pub(crate) fn with_quota(quota: Quota) -> Self {
        Table {
            state: Mutex::new(State {
                map: HashMap::new(),
                bytes: 0,
                quota,
                closed: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, and every update leaves the
        // map consistent, so a poisoned lock is still safe to use.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set(&self, key: &str, value: Vec<u8>) -> Result<(), OverQuota> {
        self.lock().put(key, value)?;
        self.changed.notify_all();
        Ok(())
    }

    pub(crate) fn try_get(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().map.get(key).cloned()
    }

    pub(crate) fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, WaitError> {
        self.get_while(key, timeout, None)
    }

    /// [`Table::get`] that also gives up with [`WaitError::Abandoned`] when
    /// `alive` (checked about every [`ALIVE_CHECK`]) returns false.
    pub(crate) fn get_while(
        &self,
        key: &str,
        timeout: Duration,
        alive: Option<&dyn Fn() -> bool>,
    ) -> Result<Vec<u8>, WaitError> {
        let deadline = Deadline::after(timeout);
        let mut state = self.lock();
        loop {
            if let Some(value) = state.map.get(key) {
                return Ok(value.clone());
            }
            state = self.sleep(state, &deadline, alive, || vec![key.to_owned()])?;
        }
    }

    pub(crate) fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), WaitError> {
        self.wait_while(keys, timeout, None)
    }

    /// [`Table::wait`] with the liveness check of [`Table::get_while`].
    pub(crate) fn wait_while(
        &self,
        keys: &[&str],
        timeout: Duration,
        alive: Option<&dyn Fn() -> bool>,
    ) -> Result<(), WaitError> {
        let deadline = Deadline::after(timeout);
        let mut state = self.lock();
        loop {
            let missing: Vec<&str> = keys
                .iter()
                .copied()
                .filter(|k| !state.map.contains_key(*k))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            state = self.sleep(state, &deadline, alive, || {
                missing.iter().map(|k| (*k).to_owned()).collect()
            })?;
        }
    }

    /// Sleeps on the condition variable until a change, the deadline, or
    /// close; with `alive`, wakes at least every [`ALIVE_CHECK`] to call it.
    fn sleep<'a>(
        &'a self,
        state: MutexGuard<'a, State>,
        deadline: &Deadline,
        alive: Option<&dyn Fn() -> bool>,
        missing: impl FnOnce() -> Vec<String>,
    ) -> Result<MutexGuard<'a, State>, WaitError> {
        if state.closed {
            return Err(WaitError::Closed);
        }
        let Some(left) = deadline.remaining() else {
            return Err(WaitError::Timeout {
                missing: missing(),
                waited: deadline.elapsed(),
            });
        };
        let slice = if alive.is_some() {
            left.min(ALIVE_CHECK)
        } else {
            left
        };
        let (state, woke) = self
            .changed
            .wait_timeout(state, slice)
            .unwrap_or_else(PoisonError::into_inner);
        if state.closed {
            return Err(WaitError::Closed);
        }
        if let Some(alive) = alive {
            // Only on a quiet slice: a burst of sets must not turn into a
            // burst of liveness checks.
            if woke.timed_out() && !alive() {
                return Err(WaitError::Abandoned);
            }
        }
        Ok(state)
    }

    pub(crate) fn compare_set(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<CompareSet, OverQuota> {
        let mut state = self.lock();
        let outcome = compare_set_decision(state.map.get(key).map(Vec::as_slice), expected, new);
        if outcome.swapped {
            state.put(key, new.to_vec())?;
            drop(state);
            self.changed.notify_all();
        }
        Ok(outcome)
    }

    pub(crate) fn add(&self, key: &str, delta: i64) -> Result<i64, AddError> {
        let mut state = self.lock();
        let value = add_decision(state.map.get(key).map(Vec::as_slice), delta)?;
        state
            .put(key, value.to_string().into_bytes())
            .map_err(|OverQuota(detail)| AddError::OverQuota(detail))?;
        drop(state);
        self.changed.notify_all();
        Ok(value)
    }

    pub(crate) fn delete(&self, key: &str) -> bool {
        self.lock().remove(key)
    }

    /// Wakes every waiter with [`WaitError::Closed`], now and from now on.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

/// A store for the threads of one program: a map behind a mutex, with a
/// condition variable (no polling) for blocking reads.
///
/// Cloning gives another handle to the same map.
///
/// ```
/// use nccl_rendezvous::{InProcessStore, Store};
/// use std::time::Duration;
///
/// let store = InProcessStore::new();
/// let other = store.clone();
/// std::thread::spawn(move || other.set("uid", b"42").unwrap());
/// assert_eq!(store.get("uid", Duration::from_secs(60)).unwrap(), b"42");
/// ```
#[derive(Debug, Clone)]
pub struct InProcessStore {
    table: Arc<Table>,
    timeout: Duration,
}

impl InProcessStore {
    /// An empty store with the default timeout ([`DEFAULT_TIMEOUT`]).
    pub fn new() -> Self {
        Self::with_timeout(DEFAULT_TIMEOUT)
    }

    /// An empty store whose [`Store::default_timeout`] is `timeout`.
    pub fn with_timeout(timeout: Duration) -> Self {
        InProcessStore {
            table: Arc::default(),
            timeout,
        }
    }

    fn timeout_error(op: &'static str, err: WaitError) -> StoreError {
        match err {
            WaitError::Timeout { missing, waited } => StoreError::Timeout {
                op,
                keys: missing,
                store: DESCRIPTION.into(),
                waited,
            },
            // Nothing closes an in-process table nor checks liveness;
            // report it plainly anyway.
            WaitError::Closed | WaitError::Abandoned => StoreError::Remote {
                addr: DESCRIPTION.into(),
                message: "the store was closed".into(),
            },
        }
    }
}

const DESCRIPTION: &str = "in-process store";

/// The in-process table has no quota; should one refuse, say so plainly.
fn over_quota(op: &str, key: &str, OverQuota(detail): OverQuota) -> StoreError {
    StoreError::OverLimit {
        op: format!("{op} {}", super::error::show_key(key)),
        store: DESCRIPTION.into(),
        detail,
    }
}

impl Default for InProcessStore {
    fn default() -> Self {
        Self::new()
    }
}

impl Store for InProcessStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.table
            .set(key, value.to_vec())
            .map_err(|e| over_quota("set", key, e))
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.table
            .get(key, timeout)
            .map_err(|e| Self::timeout_error("get", e))
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.table.try_get(key))
    }

    fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<CompareSet> {
        self.table
            .compare_set(key, expected, new)
            .map_err(|e| over_quota("compare_set", key, e))
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.table
            .add(key, delta)
            .map_err(|e| e.into_store_error(key, delta, DESCRIPTION.into()))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.table
            .wait(keys, timeout)
            .map_err(|e| Self::timeout_error("wait", e))
    }

    fn delete(&self, key: &str) -> Result<bool> {
        Ok(self.table.delete(key))
    }

    fn default_timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_test_support::within;
    use std::thread;

    /// How long a waiter that must be released may take: a hang guard,
    /// which only a lost wake-up outlasts.
    const PATIENCE: Duration = Duration::from_secs(60);

    #[test]
    fn clones_share_the_map_and_timeout_is_reported() {
        let a = InProcessStore::with_timeout(Duration::from_secs(7));
        let b = a.clone();
        a.set("k", b"v").unwrap();
        assert_eq!(b.try_get("k").unwrap().unwrap(), b"v");
        assert_eq!(b.default_timeout(), Duration::from_secs(7));
        assert_eq!(InProcessStore::default().default_timeout(), DEFAULT_TIMEOUT);
    }

    #[test]
    fn close_wakes_waiters() {
        let table = Arc::new(Table::default());
        let t2 = Arc::clone(&table);
        // Its timeout outlasts the hang guard: only `close` can end it.
        let h = thread::spawn(move || t2.get("never", 2 * PATIENCE));
        thread::sleep(Duration::from_millis(50));
        table.close();
        let woken = within("a waiter woken by close", PATIENCE, move || h.join());
        assert_eq!(woken.unwrap(), Err(WaitError::Closed));
        // After close, blocking calls on missing keys return at once.
        assert_eq!(
            table.wait(&["x"], Duration::from_secs(30)),
            Err(WaitError::Closed)
        );
    }

    #[test]
    fn a_quota_refuses_writes_past_it_and_keeps_what_is_stored() {
        let table = Table::with_quota(Quota {
            max_keys: 2,
            max_bytes: 10,
        });
        table.set("a", b"1234".to_vec()).unwrap();
        // Over the bytes: 1 + 4 + 1 + 5 = 11.
        let OverQuota(message) = table.set("b", b"12345".to_vec()).unwrap_err();
        assert!(
            message.contains("11 bytes") && message.contains("max_stored_bytes of 10"),
            "{message}"
        );
        table.set("b", b"1234".to_vec()).unwrap();
        // Over the keys, by set, compare_set and add alike.
        assert!(table.set("c", Vec::new()).is_err());
        assert!(table.compare_set("c", None, b"").is_err());
        assert!(matches!(table.add("c", 1), Err(AddError::OverQuota(_))));
        // Replacing within the bounds works; nothing refused was stored.
        table.set("a", b"x".to_vec()).unwrap();
        assert_eq!(table.try_get("a").unwrap(), b"x");
        assert_eq!(table.try_get("b").unwrap(), b"1234");
        assert_eq!(table.try_get("c"), None);
        // Deleting frees room.
        assert!(table.delete("b"));
        table.set("c", b"123456".to_vec()).unwrap();
    }

    #[test]
    fn many_threads_wait_on_one_key() {
        let store = InProcessStore::new();
        thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| store.get("go", PATIENCE)))
                .collect();
            thread::sleep(Duration::from_millis(30));
            store.set("go", b"now").unwrap();
            for h in handles {
                assert_eq!(h.join().unwrap().unwrap(), b"now");
            }
        });
    }
}
