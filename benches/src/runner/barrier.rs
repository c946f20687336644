//! Where the rank threads meet before each checked run and each timed
//! batch.

use std::sync::{Condvar, Mutex};

use crate::error::BenchError;

/// A barrier for the rank threads that a failing rank can break, so that
/// no thread waits forever for one that has given up.
#[derive(Debug)]
pub struct RankBarrier {
    state: Mutex<BarrierState>,
    changed: Condvar,
    parties: usize,
}

#[derive(Debug, Default)]
struct BarrierState {
    arrived: usize,
    generation: u64,
    broken: bool,
}

impl RankBarrier {
    /// A barrier for `parties` threads.
    pub fn new(parties: usize) -> Self {
        Self {
            state: Mutex::new(BarrierState::default()),
            changed: Condvar::new(),
            parties: parties.max(1),
        }
    }

    /// Waits until every party has arrived.
    ///
    /// # Errors
    /// [`BenchError::Stopped`] once the barrier is broken.
    pub fn wait(&self) -> Result<(), BenchError> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.broken {
            return Err(BenchError::Stopped);
        }
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.changed.notify_all();
            return Ok(());
        }
        let generation = state.generation;
        while state.generation == generation && !state.broken {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.generation == generation {
            Err(BenchError::Stopped)
        } else {
            Ok(())
        }
    }

    /// Breaks the barrier: every waiting and later [`RankBarrier::wait`] fails.
    pub fn break_all(&self) {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .broken = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn barrier_releases_and_breaks() {
        let barrier = Arc::new(RankBarrier::new(3));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || (0..10).all(|_| barrier.wait().is_ok()))
            })
            .collect();
        assert!(threads.into_iter().all(|t| t.join().unwrap()));

        let barrier = Arc::new(RankBarrier::new(2));
        let waiter = {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || barrier.wait())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        barrier.break_all();
        assert!(matches!(waiter.join().unwrap(), Err(BenchError::Stopped)));
        assert!(matches!(barrier.wait(), Err(BenchError::Stopped)));
    }
}
