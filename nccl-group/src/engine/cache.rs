//! A map whose values are created exactly once per key, even when many
//! threads ask for the same key at once; later lookups are one read-locked
//! map lookup.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};

/// Values created once per key.
///
/// ```
/// use nccl_group::testing::OnceMap;
/// let map: OnceMap<Vec<usize>, String> = OnceMap::new();
/// let value = map.get_or_create(&[0, 1][..], |key| Ok::<_, ()>(format!("{key:?}"))).unwrap();
/// assert_eq!(*value, "[0, 1]");
/// ```
pub struct OnceMap<K, V> {
    ready: RwLock<HashMap<K, Arc<V>>>,
    /// Keys whose value one thread is creating; the others wait on `changed`.
    creating: Mutex<HashSet<K>>,
    changed: Condvar,
}

impl<K, V> Default for OnceMap<K, V> {
    fn default() -> Self {
        Self {
            ready: RwLock::new(HashMap::new()),
            creating: Mutex::new(HashSet::new()),
            changed: Condvar::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, V> OnceMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value for `key`, if it was created.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.ready
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// The value for `key`, created by `create` if there is none yet.
    ///
    /// Exactly one caller runs `create` for a key at a time; the others wait
    /// for it. If it fails, its caller gets the error and the next caller (or a
    /// waiting one) tries again.
    ///
    /// # Errors
    /// What `create` returned.
    pub fn get_or_create<Q, E>(
        &self,
        key: &Q,
        create: impl FnOnce(&Q) -> Result<V, E>,
    ) -> Result<Arc<V>, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(value) = self.get(key) {
            return Ok(value);
        }
        let mut pending = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            // Checked under the `creating` lock: a creator publishes to
            // `ready` before it leaves `creating`, so this cannot miss a value.
            if let Some(value) = self.get(key) {
                return Ok(value);
            }
            if !pending.contains(key) {
                break;
            }
            pending = self
                .changed
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        pending.insert(key.to_owned());
        drop(pending);

        // Leaves `creating` even if `create` fails or panics, so waiters
        // never hang and one of them tries again.
        struct Finish<'a, K: Hash + Eq, V> {
            map: &'a OnceMap<K, V>,
            key: Option<K>,
        }
        impl<K: Hash + Eq, V> Drop for Finish<'_, K, V> {
            fn drop(&mut self) {
                if let Some(key) = self.key.take() {
                    let mut pending = self
                        .map
                        .creating
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    // The creator failed: the next caller (or a waiter) tries again.
                    pending.remove(&key);
                    self.map.changed.notify_all();
                }
            }
        }
        let mut finish = Finish {
            map: self,
            key: Some(key.to_owned()),
        };

        let value = Arc::new(create(key)?);
        let owned = finish.key.take().unwrap_or_else(|| key.to_owned());
        self.ready
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(owned, Arc::clone(&value));
        let mut pending = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        pending.remove(key);
        self.changed.notify_all();
        Ok(value)
    }

    /// Adds `value` under `key`, made elsewhere (a communicator a heal
    /// shrank), replacing any value there; returns it shared.
    pub fn insert(&self, key: K, value: V) -> Arc<V> {
        let value = Arc::new(value);
        self.ready
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::clone(&value));
        value
    }

    /// Removes every value (they are dropped when the last user lets go).
    ///
    /// A value still being created when this runs is added afterwards.
    pub fn clear(&self) -> Vec<Arc<V>> {
        let mut ready = self.ready.write().unwrap_or_else(PoisonError::into_inner);
        ready.drain().map(|(_, value)| value).collect()
    }

    /// Every value created so far.
    pub fn values(&self) -> Vec<Arc<V>> {
        self.ready
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The number of values created.
    pub fn len(&self) -> usize {
        self.ready
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no value was created yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
