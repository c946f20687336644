//! Where every rank of every process meets: before its communicator is
//! created, before each checked run and before each timed batch.

use std::sync::Arc;

use nccl_group::store::meet::Participant;
use nccl_group::{PrefixStore, Store};

use super::meeting::Meeting;
use crate::error::BenchError;
use crate::world::{Who, met};

/// One rank's side of the run's barriers, held at the processes'
/// meeting: a rank that does not come is named once the store's timeout
/// has passed, and a process that fails stops every rank of the others
/// within a slice.
pub struct RankBarrier<'a> {
    barriers: Participant<'a, PrefixStore<Arc<dyn Store>>>,
}

impl<'a> RankBarrier<'a> {
    /// `rank`'s side of the barriers of `ranks` ranks at `meeting`.
    ///
    /// # Errors
    /// `rank` is not below `ranks`.
    pub fn new(meeting: &'a Meeting, rank: usize, ranks: usize) -> Result<Self, BenchError> {
        Ok(Self {
            barriers: meeting
                .world()
                .meeting()
                .participant("ranks", rank, ranks)?,
        })
    }

    /// Returns once every rank has come to its next barrier, which is
    /// `what` (named in the error when a rank does not come).
    ///
    /// # Errors
    /// A rank did not come in time, a process failed, or the store's.
    pub fn wait(&self, what: &str) -> Result<(), BenchError> {
        self.barriers
            .barrier(what)
            .map_err(|error| met(error, what, Who::Rank))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nccl_group::InProcessStore;

    use super::*;
    use crate::error::tests::assert_timeout_starting;
    use crate::threads::on_threads;
    use crate::world::World;

    fn meetings(processes: usize, timeout: Duration) -> Vec<Meeting> {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::with_timeout(timeout));
        (0..processes)
            .map(|process| {
                Meeting::new(World::in_store(
                    process,
                    processes,
                    Arc::clone(&store),
                    "test",
                ))
            })
            .collect()
    }

    #[test]
    fn ranks_of_several_processes_meet_again_and_again() {
        // Two processes of two ranks each, every rank a thread. The
        // store's timeout is a hang guard: only a deadlock outlasts it.
        let meetings = meetings(2, Duration::from_secs(60));
        let passed = on_threads(4, |rank| {
            let barrier = RankBarrier::new(&meetings[rank / 2], rank, 4).unwrap();
            (0..10)
                .filter(|_| barrier.wait("a test barrier").is_ok())
                .count()
        });
        assert_eq!(passed, vec![10; 4]);
    }

    #[test]
    fn a_rank_that_does_not_come_is_named() {
        let meetings = meetings(1, Duration::from_millis(50));
        let barrier = RankBarrier::new(&meetings[0], 0, 2).unwrap();
        let error = barrier
            .wait("the creation of the communicators")
            .unwrap_err();
        assert_timeout_starting(
            &error,
            "rank 1 did not reach the creation of the communicators within",
        );
        let error = RankBarrier::new(&meetings[0], 2, 2).err().unwrap();
        assert!(
            error
                .one_line()
                .contains("invalid participant place rank 2 of 2"),
            "{error}"
        );
    }

    #[test]
    fn a_failed_process_stops_the_ranks_of_the_others() {
        let meetings = meetings(2, Duration::from_secs(300));
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let barrier = RankBarrier::new(&meetings[0], 0, 2).unwrap();
                barrier
                    .wait("the barrier before a timed batch")
                    .unwrap_err()
            });
            meetings[1].fail(BenchError::Usage("-r 7 is not a rank".to_string()));
            let error = waiter.join().unwrap();
            assert_eq!(error.to_string(), "process 1 failed: -r 7 is not a rank");
            assert_eq!(error.exit_code(), 2);
        });
    }
}
