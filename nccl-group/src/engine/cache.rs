//! A map whose values are created exactly once per key, even when many
//! threads ask for the same key at once; later lookups are one read-locked
//! map lookup.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};

/// The hasher of a [`OnceMap`]: a multiply-rotate hash, a few cycles per
/// word where std's SipHash takes tens of nanoseconds for a communicator
/// key, which every operation looks up. Its keys are this process's own
/// device lists, ranks and names, not input an attacker chooses, so
/// SipHash's resistance to collision flooding buys nothing here.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

/// An odd constant with well-spread bits (the golden ratio's, as FxHash
/// uses): multiplying by it mixes every input bit into the high bits.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

impl KeyHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_u16(&mut self, value: u16) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    #[inline]
    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// How a [`OnceMap`] hashes its keys.
type KeyHashing = BuildHasherDefault<KeyHasher>;

/// Values created once per key.
///
/// ```
/// use nccl_group::testing::OnceMap;
/// let map: OnceMap<Vec<usize>, String> = OnceMap::new();
/// let value = map.get_or_create(&[0, 1][..], |key| Ok::<_, ()>(format!("{key:?}"))).unwrap();
/// assert_eq!(*value, "[0, 1]");
/// ```
pub struct OnceMap<K, V> {
    ready: RwLock<HashMap<K, Arc<V>, KeyHashing>>,
    /// Keys whose value one thread is creating; the others wait on `changed`.
    creating: Mutex<HashSet<K, KeyHashing>>,
    changed: Condvar,
}

impl<K, V> Default for OnceMap<K, V> {
    fn default() -> Self {
        Self {
            ready: RwLock::new(HashMap::default()),
            creating: Mutex::new(HashSet::default()),
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

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;
    use crate::devices::DeviceList;
    use crate::engine::key::CommKey;

    #[test]
    fn communicator_keys_hash_apart() {
        let lists: Vec<DeviceList> = (0..8)
            .map(|device| DeviceList::one(device).expect("one device"))
            .chain((1..=8).map(|len| DeviceList::new(0..len).expect("devices")))
            .collect();
        let mut keys = HashSet::new();
        for &devices in &lists {
            keys.insert(CommKey::Collective(devices));
            for (low, high) in [(0, 1), (0, 2), (1, 2), (3, 7)] {
                keys.insert(CommKey::PointToPoint { low, high, devices });
            }
        }
        let hashing = KeyHashing::default();
        let hashes: HashSet<u64> = keys.iter().map(|key| hashing.hash_one(key)).collect();
        assert_eq!(hashes.len(), keys.len());
        // Trailing zero bytes and their absence differ too.
        let bytes = |b: &[u8]| {
            let mut hasher = KeyHasher::default();
            hasher.write(b);
            hasher.finish()
        };
        assert_ne!(bytes(b""), bytes(b"\0"));
        assert_ne!(bytes(b"\0"), bytes(b"\0\0"));
        assert_ne!(bytes(b"abcdefgh"), bytes(b"abcdefgh\0"));
    }
}
