//! The communicators each thread looked up last, so that a loop's lookup
//! is a comparison and a reference count, where the cache's is a read
//! lock, a hash and a reference count ([`CommCache::get`]).
//!
//! A thread keeps a weak reference, which never keeps communicators alive
//! past their cache, with the cache's stamp at the lookup: a cache that
//! forgets or replaces communicators takes a new stamp
//! ([`CommCache::stamp`]), which no thread's entry matches. A thread that
//! alternates between groups or keys looks each up in its cache.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crate::engine::comms::{CommCache, CommFactory};
use crate::engine::factory::NcclFactory;
use crate::engine::key::CommKey;
use crate::engine::local_comms::LocalComms;
use crate::error::Result;

/// A thread's last lookup, of communicators `C`.
struct Recent<C> {
    stamp: u64,
    key: CommKey,
    comms: Weak<C>,
}

thread_local! {
    static RECENT: RefCell<Option<Recent<LocalComms>>> = const { RefCell::new(None) };
}

/// The communicators for `key` in `cache`: this thread's last lookup if it
/// was of them and the cache has not changed them since, else the cache's
/// ([`CommCache::get`], which creates them the first time).
///
/// # Errors
/// As [`CommCache::get`].
pub(crate) fn comms(cache: &CommCache<NcclFactory>, key: &CommKey) -> Result<Arc<LocalComms>> {
    // A thread whose locals are being destroyed asks the cache.
    RECENT
        .try_with(|recent| lookup(recent, cache, key))
        .unwrap_or_else(|_| cache.get(key))
}

/// [`comms`] with the thread's last lookup in `recent`.
fn lookup<F: CommFactory>(
    recent: &RefCell<Option<Recent<F::Comms>>>,
    cache: &CommCache<F>,
    key: &CommKey,
) -> Result<Arc<F::Comms>> {
    // Read before the lookup: a change after it leaves a stale stamp behind.
    let stamp = cache.stamp();
    let hit = recent
        .borrow()
        .as_ref()
        .filter(|recent| recent.stamp == stamp && recent.key == *key)
        .and_then(|recent| recent.comms.upgrade());
    if let Some(comms) = hit {
        return Ok(comms);
    }
    let comms = cache.get(key)?;
    *recent.borrow_mut() = Some(Recent {
        stamp,
        key: *key,
        comms: Arc::downgrade(&comms),
    });
    Ok(comms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::membership::Membership;
    use nccl_core::UniqueId;
    use nccl_rendezvous::InProcessStore;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Communicators that are a number: how many were made before them.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl CommFactory for Counting {
        type Comms = usize;

        fn unique_id(&self) -> Result<UniqueId> {
            Ok(UniqueId::from_bytes([7; UniqueId::BYTES]))
        }

        fn create(&self, _: &CommKey, _: UniqueId, _: usize, _: usize) -> Result<usize> {
            Ok(self.0.fetch_add(1, Ordering::SeqCst))
        }
    }

    fn cache(name: &str) -> CommCache<Counting> {
        let store = Arc::new(InProcessStore::new());
        let membership = Membership::join(
            name,
            0,
            1,
            store,
            "in-process".into(),
            Duration::from_secs(60),
        )
        .expect("a group of one joins");
        CommCache::new(membership, Counting::default())
    }

    fn key(device: usize) -> CommKey {
        CommKey::Collective(crate::devices::DeviceList::one(device).expect("a device"))
    }

    #[test]
    fn a_repeated_lookup_is_the_recent_one_until_the_cache_changes_its_communicators() {
        let recent = RefCell::new(None);
        let cache = cache("recent");
        let first = lookup(&recent, &cache, &key(0)).expect("created");
        let again = lookup(&recent, &cache, &key(0)).expect("recent");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(cache.factory().0.load(Ordering::SeqCst), 1);

        // Another key is the cache's, and becomes the recent one.
        let other = lookup(&recent, &cache, &key(1)).expect("created");
        assert_eq!(*other, 1);
        assert_eq!(*lookup(&recent, &cache, &key(0)).expect("cached"), 0);

        // Replaced communicators are never the recent ones, though alive.
        cache.adopt(key(0), 10).expect("adopted");
        assert_eq!(*lookup(&recent, &cache, &key(0)).expect("adopted"), 10);
        drop((first, again, other));

        // A cleared cache's are not either: the next lookup creates them.
        let stamp = cache.stamp();
        let cleared = cache.clear();
        assert_ne!(cache.stamp(), stamp);
        assert_eq!(*lookup(&recent, &cache, &key(0)).expect("created again"), 2);
        drop(cleared);
    }

    #[test]
    fn the_recent_lookup_never_keeps_communicators_alive() {
        let recent = RefCell::new(None);
        let cache = cache("recent-weak");
        let comms = lookup(&recent, &cache, &key(0)).expect("created");
        let weak = Arc::downgrade(&comms);
        drop(comms);
        drop(cache.clear());
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn caches_never_share_a_stamp() {
        let (a, b) = (cache("recent-a"), cache("recent-b"));
        assert_ne!(a.stamp(), b.stamp());
        let recent = RefCell::new(None);
        let from_a = lookup(&recent, &a, &key(0)).expect("created");
        let from_b = lookup(&recent, &b, &key(0)).expect("created");
        assert!(!Arc::ptr_eq(&from_a, &from_b));
    }
}
