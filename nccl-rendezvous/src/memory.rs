//! The in-memory table behind [`InProcessStore`] and the TCP server.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{
    AddError, CompareSet, DEFAULT_TIMEOUT, Deadline, Result, Store, StoreError, add_decision,
    compare_set_decision,
};

/// A blocking table operation's time ran out: these keys were still
/// missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitTimeout {
    missing: Vec<String>,
    waited: Duration,
}

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

/// The keys and values of a store, within a [`Quota`]: what the
/// in-process [`Table`] guards with its mutex, and what the TCP server's
/// event loop owns alone.
///
/// Values are shared (`Arc`), so that the server's answers of one value, to any
/// number of clients, hold it once.
#[derive(Debug)]
pub(crate) struct Entries {
    map: HashMap<String, Arc<[u8]>>,
    /// Bytes of keys plus values in `map`.
    bytes: usize,
    quota: Quota,
}

impl Entries {
    /// No entries, and at most `quota`.
    pub(crate) fn new(quota: Quota) -> Self {
        Entries {
            map: HashMap::new(),
            bytes: 0,
            quota,
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&[u8]> {
        self.map.get(key).map(|value| &**value)
    }

    /// The value of `key`, shared.
    pub(crate) fn shared(&self, key: &str) -> Option<Arc<[u8]>> {
        self.map.get(key).cloned()
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Stores `value` under `key` unless the quota forbids it; a refused
    /// write changes nothing.
    pub(crate) fn put(&mut self, key: &str, value: Vec<u8>) -> Result<(), OverQuota> {
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
        self.map.insert(key.to_owned(), value.into());
        Ok(())
    }

    pub(crate) fn remove(&mut self, key: &str) -> bool {
        let Some(old) = self.map.remove(key) else {
            return false;
        };
        self.bytes -= key.len() + old.len();
        true
    }

    /// Stores `new` when the key holds `expected` (`None`: is absent).
    pub(crate) fn compare_set(
        &mut self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<CompareSet, OverQuota> {
        let outcome = compare_set_decision(self.get(key), expected, new);
        if outcome.swapped {
            self.put(key, new.to_vec())?;
        }
        Ok(outcome)
    }

    /// Adds `delta` to the decimal integer the key holds (0 when absent).
    pub(crate) fn add(&mut self, key: &str, delta: i64) -> Result<i64, AddError> {
        let value = add_decision(self.get(key), delta)?;
        self.put(key, value.to_string().into_bytes())
            .map_err(|OverQuota(detail)| AddError::OverQuota(detail))?;
        Ok(value)
    }
}

/// A map guarded by a mutex, with a condition variable signalled on every
/// change so that blocking reads sleep instead of polling.
#[derive(Debug)]
pub(crate) struct Table {
    state: Mutex<Entries>,
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
            state: Mutex::new(Entries::new(quota)),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
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
        self.lock().get(key).map(<[u8]>::to_vec)
    }

    pub(crate) fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, WaitTimeout> {
        let deadline = Deadline::after(timeout);
        let mut state = self.lock();
        loop {
            if let Some(value) = state.get(key) {
                return Ok(value.to_vec());
            }
            state = self.sleep(state, &deadline, || vec![key.to_owned()])?;
        }
    }

    pub(crate) fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), WaitTimeout> {
        let deadline = Deadline::after(timeout);
        let mut state = self.lock();
        loop {
            let missing: Vec<&str> = keys
                .iter()
                .copied()
                .filter(|k| !state.contains(k))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            state = self.sleep(state, &deadline, || {
                missing.iter().map(|k| (*k).to_owned()).collect()
            })?;
        }
    }

    /// Sleeps on the condition variable until a change or the deadline.
    fn sleep<'a>(
        &'a self,
        state: MutexGuard<'a, Entries>,
        deadline: &Deadline,
        missing: impl FnOnce() -> Vec<String>,
    ) -> Result<MutexGuard<'a, Entries>, WaitTimeout> {
        let Some(left) = deadline.remaining() else {
            return Err(WaitTimeout {
                missing: missing(),
                waited: deadline.elapsed(),
            });
        };
        let (state, _) = self
            .changed
            .wait_timeout(state, left)
            .unwrap_or_else(PoisonError::into_inner);
        Ok(state)
    }

    pub(crate) fn compare_set(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<CompareSet, OverQuota> {
        let outcome = self.lock().compare_set(key, expected, new)?;
        if outcome.swapped {
            self.changed.notify_all();
        }
        Ok(outcome)
    }

    pub(crate) fn add(&self, key: &str, delta: i64) -> Result<i64, AddError> {
        let value = self.lock().add(key, delta)?;
        self.changed.notify_all();
        Ok(value)
    }

    pub(crate) fn delete(&self, key: &str) -> bool {
        self.lock().remove(key)
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

    fn timeout_error(op: &'static str, WaitTimeout { missing, waited }: WaitTimeout) -> StoreError {
        StoreError::Timeout {
            op,
            keys: missing,
            store: DESCRIPTION.into(),
            waited,
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
