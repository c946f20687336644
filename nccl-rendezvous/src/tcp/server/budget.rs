//! The fair shares of the bytes in flight, one budget for frames being
//! read and one for answers not yet sent: each connection has a floor of
//! its own (so a small request or answer is never held up by others), and
//! draws what it needs beyond it from a pool all connections share, one
//! frame at a time (a connection carries one request at a time). The
//! floors of every connection the server can have and the pool together
//! are the budget, so the bound holds whoever holds what, and a client
//! holding all it can delays others' small requests not at all and their
//! large ones by at most its own frame.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One direction's bytes in flight.
#[derive(Debug)]
pub(super) struct Budget {
    /// Bytes every connection holds.
    total: AtomicUsize,
    /// Of those, the bytes beyond each connection's floor.
    pooled: AtomicUsize,
    /// What each connection may hold whatever the others hold.
    floor: usize,
    /// What connections may hold beyond their floors, together.
    pool: usize,
    /// Counts the times a connection held less of the pool than before:
    /// who waits for room looks again only after it changed.
    freed: AtomicU64,
}

impl Budget {
    /// `limit` bytes, for at most `connections` connections: half of it
    /// their floors, half the pool.
    pub(super) fn new(limit: usize, connections: usize) -> Self {
        Budget {
            total: AtomicUsize::new(0),
            pooled: AtomicUsize::new(0),
            floor: limit / 2 / connections.max(1),
            pool: limit - limit / 2,
            freed: AtomicU64::new(0),
        }
    }

    /// A budget that never refuses (the gate's: its frames are bounded by
    /// the handshake's own cap).
    pub(super) fn unbounded() -> Self {
        Budget {
            total: AtomicUsize::new(0),
            pooled: AtomicUsize::new(0),
            floor: usize::MAX,
            pool: usize::MAX,
            freed: AtomicU64::new(0),
        }
    }

    /// The bytes held now, by every connection.
    pub(super) fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Counts a connection as holding `now` bytes instead of `charged`
    /// (which becomes `now`).
    pub(super) fn charge(&self, charged: &mut usize, now: usize) {
        let over = |held: usize| held.saturating_sub(self.floor);
        self.total.fetch_add(now, Ordering::AcqRel);
        self.total.fetch_sub(*charged, Ordering::AcqRel);
        self.pooled.fetch_add(over(now), Ordering::AcqRel);
        self.pooled.fetch_sub(over(*charged), Ordering::AcqRel);
        if over(now) < over(*charged) {
            self.freed.fetch_add(1, Ordering::AcqRel);
        }
        *charged = now;
    }

    /// How many times room in the pool was freed so far (those waiting
    /// for room have used their floors up).
    pub(super) fn freed(&self) -> u64 {
        self.freed.load(Ordering::Acquire)
    }

    /// How many bytes a connection holding `charged` may add now: the rest
    /// of its floor, and what the pool has left.
    pub(super) fn room(&self, charged: usize) -> usize {
        let pooled = self.pooled.load(Ordering::Acquire);
        let pool_left = self.pool.saturating_sub(pooled);
        self.floor.saturating_sub(charged).saturating_add(pool_left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_keeps_its_floor_whatever_the_others_hold() {
        // 1000 bytes for 10 connections: floors of 50, a pool of 500.
        let budget = Budget::new(1000, 10);
        let mut greedy = 0;
        budget.charge(&mut greedy, budget.room(0));
        assert_eq!(greedy, 550);
        assert_eq!(budget.room(greedy), 0);
        // Another still has its floor, and no more.
        assert_eq!(budget.room(0), 50);
        let mut small = 0;
        budget.charge(&mut small, 50);
        assert_eq!(budget.total(), 600);
        // Every connection at its floor and the pool taken: the limit.
        let mut others = [0; 8];
        for held in &mut others {
            budget.charge(held, budget.room(0));
        }
        assert_eq!(budget.total(), 1000);
        budget.charge(&mut greedy, 0);
        assert_eq!((budget.total(), budget.room(0)), (450, 550));
    }
}
