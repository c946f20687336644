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

#[derive(Debug, Default)]
struct State {
    map: HashMap<String, Vec<u8>>,
    closed: bool,
}

/// A map guarded by a mutex, with a condition variable signalled on every
/// change so that blocking reads sleep instead of polling.
#[derive(Debug, Default)]
pub(crate) struct Table {
    state: Mutex<State>,
    changed: Condvar,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, and every update leaves the
        // map consistent, so a poisoned lock is still safe to use.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set(&self, key: &str, value: Vec<u8>) {
        self.lock().map.insert(key.to_owned(), value);
        self.changed.notify_all();
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

    pub(crate) fn compare_set(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> CompareSet {
        let mut state = self.lock();
        let outcome = compare_set_decision(state.map.get(key).map(Vec::as_slice), expected, new);
        if outcome.swapped {
            state.map.insert(key.to_owned(), new.to_vec());
            drop(state);
            self.changed.notify_all();
        }
        outcome
    }

    pub(crate) fn add(&self, key: &str, delta: i64) -> Result<i64, AddError> {
        let mut state = self.lock();
        let value = add_decision(state.map.get(key).map(Vec::as_slice), delta)?;
        state
            .map
            .insert(key.to_owned(), value.to_string().into_bytes());
        drop(state);
        self.changed.notify_all();
        Ok(value)
    }

    pub(crate) fn delete(&self, key: &str) -> bool {
        self.lock().map.remove(key).is_some()
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
/// use nccl_group::{InProcessStore, Store};
/// use std::time::Duration;
///
/// let store = InProcessStore::new();
/// let other = store.clone();
/// std::thread::spawn(move || other.set("uid", b"42").unwrap());
/// assert_eq!(store.get("uid", Duration::from_secs(5)).unwrap(), b"42");
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

impl Default for InProcessStore {
    fn default() -> Self {
        Self::new()
    }
}

impl Store for InProcessStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.table.set(key, value.to_vec());
        Ok(())
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
        Ok(self.table.compare_set(key, expected, new))
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
    use std::thread;
    use std::time::Instant;

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
        let t0 = Instant::now();
        let h = thread::spawn(move || t2.get("never", Duration::from_secs(30)));
        thread::sleep(Duration::from_millis(50));
        table.close();
        assert_eq!(h.join().unwrap(), Err(WaitError::Closed));
        assert!(t0.elapsed() < Duration::from_secs(5));
        // After close, blocking calls on missing keys return at once.
        assert_eq!(
            table.wait(&["x"], Duration::from_secs(30)),
            Err(WaitError::Closed)
        );
    }

    #[test]
    fn many_threads_wait_on_one_key() {
        let store = InProcessStore::new();
        thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| store.get("go", Duration::from_secs(5))))
                .collect();
            thread::sleep(Duration::from_millis(30));
            store.set("go", b"now").unwrap();
            for h in handles {
                assert_eq!(h.join().unwrap().unwrap(), b"now");
            }
        });
    }
}
