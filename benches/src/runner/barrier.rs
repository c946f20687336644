//! Where every rank of every process meets: before its communicator is
//! created, before each checked run and before each timed batch.

use std::cell::Cell;

use super::meeting::Meeting;
use crate::error::BenchError;

/// One rank's side of the run's barriers, which are the meeting's: a
/// rank that does not come is named once the store's timeout has passed,
/// and a process that fails stops every rank within a slice.
pub struct RankBarrier<'a> {
    meeting: &'a Meeting,
    rank: usize,
    ranks: usize,
    /// Barriers passed so far: the n-th of every rank meets under one key.
    passed: Cell<u64>,
}

impl<'a> RankBarrier<'a> {
    /// `rank`'s side of the barriers of `ranks` ranks at `meeting`.
    pub fn new(meeting: &'a Meeting, rank: usize, ranks: usize) -> Self {
        Self {
            meeting,
            rank,
            ranks,
            passed: Cell::new(0),
        }
    }

    /// Returns once every rank has come to its next barrier, which is
    /// `what` (named in the error when a rank does not come).
    ///
    /// # Errors
    /// A rank did not come in time, a process failed, or the store's.
    pub fn wait(&self, what: &str) -> Result<(), BenchError> {
        let count = self.passed.get();
        self.passed.set(count + 1);
        self.meeting.barrier(self.rank, self.ranks, count, what)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use nccl_group::{InProcessStore, Store};

    use super::*;
    use crate::world::World;

    #[test]
    fn ranks_of_several_processes_meet_again_and_again() {
        // Two processes of two ranks each, every rank a thread. The
        // store's timeout is a hang guard: only a deadlock outlasts it.
        let store: Arc<dyn Store> = Arc::new(InProcessStore::with_timeout(Duration::from_secs(60)));
        let meetings: Vec<Meeting> = (0..2)
            .map(|process| Meeting::new(World::in_store(process, 2, Arc::clone(&store), "test")))
            .collect();
        let passed = std::thread::scope(|scope| {
            let ranks: Vec<_> = (0..4)
                .map(|rank| {
                    let meeting = &meetings[rank / 2];
                    scope.spawn(move || {
                        let barrier = RankBarrier::new(meeting, rank, 4);
                        (0..10)
                            .filter(|_| barrier.wait("a test barrier").is_ok())
                            .count()
                    })
                })
                .collect();
            ranks
                .into_iter()
                .map(|rank| rank.join().unwrap())
                .collect::<Vec<_>>()
        });
        assert_eq!(passed, vec![10; 4]);
    }

    #[test]
    fn a_rank_that_does_not_come_is_named() {
        let store: Arc<dyn Store> =
            Arc::new(InProcessStore::with_timeout(Duration::from_millis(300)));
        let meeting = Meeting::new(World::in_store(0, 1, store, "test"));
        let barrier = RankBarrier::new(&meeting, 0, 2);
        let error = barrier
            .wait("the creation of the communicators")
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("rank 1 did not reach the creation of the communicators within 300ms"),
            "{error}"
        );
    }
}
