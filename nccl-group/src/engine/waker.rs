//! The waker thread of async completion: one per process, started by the
//! first future that has to wait, parked on a condition variable while no
//! future waits. It polls each waiting operation's end (the [`Settle`] of
//! its [`Tracked`](crate::engine::tracked::Tracked), the state the
//! watchdog polls too) and wakes the future's waker once the operation
//! ended, broke or failed with its group; the future then makes the checks
//! [`Work::synchronize`](crate::Work::synchronize) makes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::Waker;
use std::time::Duration;

/// How long the thread waits between two rounds of polls while futures
/// wait (a registration interrupts it).
const POLL: Duration = Duration::from_micros(100);

/// Something whose end a future waits for.
pub(crate) trait Settle: Send + Sync {
    /// Whether it ended, broke or failed: polling its future again now
    /// gives its result.
    ///
    /// Polls without blocking.
    fn is_settled(&self) -> bool;
}

/// A waiting future's operation and the waker to call when it settles.
struct Waiting {
    op: Arc<dyn Settle>,
    waker: Waker,
}

/// The registry the thread serves.
#[derive(Default)]
struct Registry {
    waiting: HashMap<u64, Waiting>,
    /// Whether the thread is running (started at the first registration).
    started: bool,
    /// Set when the owner goes: the thread ends.
    closed: bool,
}

#[derive(Default)]
struct Shared {
    registry: Mutex<Registry>,
    changed: Condvar,
    /// How many threads this registry started (a test hook: never more than one).
    threads: AtomicUsize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // The registry holds no invariant a panic elsewhere could break.
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The registry of waiting futures and its one thread.
pub(crate) struct Wakers {
    shared: Arc<Shared>,
    next_id: AtomicU64,
}

/// The process's registry, which every [`Work`](crate::Work) future uses.
pub(crate) fn wakers() -> &'static Wakers {
    static WAKERS: OnceLock<Wakers> = OnceLock::new();
    WAKERS.get_or_init(Wakers::new)
}

impl Wakers {
    pub(crate) fn new() -> Self {
        Self {
            shared: Arc::default(),
            next_id: AtomicU64::new(1),
        }
    }

    /// A new registration identity for one future.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Wakes `waker` once `op` settles; a second registration under the
    /// same `id` replaces the waker.
    ///
    /// Starts the thread the first time.
    ///
    /// # Errors
    /// The OS refused to start the thread.
    pub(crate) fn register(
        &self,
        id: u64,
        op: Arc<dyn Settle>,
        waker: &Waker,
    ) -> std::io::Result<()> {
        let mut registry = self.shared.lock();
        match registry.waiting.get_mut(&id) {
            Some(waiting) => waiting.waker.clone_from(waker),
            None => {
                registry.waiting.insert(
                    id,
                    Waiting {
                        op,
                        waker: waker.clone(),
                    },
                );
            }
        }
        if !registry.started {
            let shared = Arc::clone(&self.shared);
            std::thread::Builder::new()
                .name("nccl-group-wakers".to_string())
                .spawn(move || serve(&shared))
                .inspect_err(|_| {
                    registry.waiting.remove(&id);
                })?;
            registry.started = true;
            self.shared.threads.fetch_add(1, Ordering::Relaxed);
        }
        drop(registry);
        self.shared.changed.notify_one();
        Ok(())
    }

    /// Forgets the registration `id` (a future dropped or done).
    pub(crate) fn unregister(&self, id: u64) {
        self.shared.lock().waiting.remove(&id);
    }

    /// How many futures wait (a test hook).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.shared.lock().waiting.len()
    }

    /// How many threads this registry started (a test hook).
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.shared.threads.load(Ordering::Relaxed)
    }
}

impl Drop for Wakers {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
    }
}

/// The thread: parks while nothing waits; otherwise polls every waiting
/// operation, wakes (and forgets) the settled ones, and waits [`POLL`].
fn serve(shared: &Shared) {
    let mut registry = shared.lock();
    loop {
        if registry.closed {
            return;
        }
        if registry.waiting.is_empty() {
            registry = shared
                .changed
                .wait(registry)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            continue;
        }
        let ops: Vec<(u64, Arc<dyn Settle>)> = registry
            .waiting
            .iter()
            .map(|(id, waiting)| (*id, Arc::clone(&waiting.op)))
            .collect();
        // Polling an event may take a driver lock: not under ours.
        drop(registry);
        let settled: Vec<u64> = ops
            .into_iter()
            .filter(|(_, op)| op.is_settled())
            .map(|(id, _)| id)
            .collect();
        registry = shared.lock();
        let wake: Vec<Waker> = settled
            .iter()
            .filter_map(|id| registry.waiting.remove(id))
            .map(|waiting| waiting.waker)
            .collect();
        if !wake.is_empty() {
            // A waker may run the future on this thread: not under our lock.
            drop(registry);
            wake.into_iter().for_each(Waker::wake);
            registry = shared.lock();
            continue;
        }
        registry = shared
            .changed
            .wait_timeout(registry, POLL)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
}

#[cfg(test)]
mod tests;
