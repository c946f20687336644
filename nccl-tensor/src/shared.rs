//! [`SharedComm`]: a communicator shared between threads behind a lock
//! that knows which thread holds it, so that buffers registered with it
//! ([`Registered::shared`](crate::Registered::shared)) deregister under
//! the same lock without deadlocking a thread that already holds it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use crate::communicator::Communicator;

/// A [`Communicator`] shared between threads: each call on it runs under
/// its lock ([`lock`](Self::lock)), which hands out `&Communicator` only,
/// never `&mut`: the communicator behind it is the one it was made with
/// for as long as it lives, which the buffers registered with it rely on.
#[derive(Debug)]
pub struct SharedComm {
    comm: Mutex<Communicator>,
    /// The holding thread's token ([`thread_token`]), 0 when unlocked.
    holder: AtomicUsize,
}

/// `&Communicator` under a [`SharedComm`]'s lock, released on drop.
#[derive(Debug)]
pub struct SharedCommGuard<'a> {
    comm: MutexGuard<'a, Communicator>,
    holder: &'a AtomicUsize,
}

/// A number that tells this thread apart from every other live thread:
/// the address of a thread-local (never 0).
fn thread_token() -> usize {
    thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|token| std::ptr::from_ref(token) as usize)
}

impl SharedComm {
    /// Shares `comm`.
    pub fn new(comm: Communicator) -> Self {
        Self {
            comm: Mutex::new(comm),
            holder: AtomicUsize::new(0),
        }
    }

    fn guard<'a>(&'a self, comm: MutexGuard<'a, Communicator>) -> SharedCommGuard<'a> {
        self.holder.store(thread_token(), Ordering::Release);
        SharedCommGuard {
            comm,
            holder: &self.holder,
        }
    }

    /// Locks the communicator, waiting for another thread's call to end.
    ///
    /// Locking it again on the thread that holds it deadlocks, as with any
    /// mutex: see [`is_held_here`](Self::is_held_here).
    pub fn lock(&self) -> SharedCommGuard<'_> {
        // A panic elsewhere while holding the lock leaves the communicator
        // as usable as NCCL left it.
        self.guard(self.comm.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Locks the communicator if no thread holds it.
    pub fn try_lock(&self) -> Option<SharedCommGuard<'_>> {
        match self.comm.try_lock() {
            Ok(comm) => Some(self.guard(comm)),
            Err(TryLockError::Poisoned(poisoned)) => Some(self.guard(poisoned.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Whether this thread holds the lock (a second `lock` here would
    /// never return).
    pub fn is_held_here(&self) -> bool {
        self.holder.load(Ordering::Acquire) == thread_token()
    }
}

impl std::ops::Deref for SharedCommGuard<'_> {
    type Target = Communicator;

    fn deref(&self) -> &Communicator {
        &self.comm
    }
}

impl Drop for SharedCommGuard<'_> {
    fn drop(&mut self) {
        // Cleared while the lock is still held (the mutex guard drops
        // after this body), so no other holder's token is overwritten.
        self.holder.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::thread_token;

    #[test]
    fn threads_have_distinct_tokens() {
        let here = thread_token();
        assert_ne!(here, 0);
        assert_eq!(here, thread_token());
        let there = std::thread::spawn(thread_token).join().expect("a thread");
        assert_ne!(here, there);
    }
}
