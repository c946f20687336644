//! Where the processes of a run meet: the meeting of their launch's
//! [`World`] (over an in-process store for one process alone). Through
//! it they check they run the same plan, share the NCCL unique id, hold
//! the barrier before each timed batch, send their ranks' results to
//! process 0, and learn how the run ended.
//!
//! Every step is `nccl_group::store::meet`'s: no wait hangs (each ends at
//! the store's timeout, naming the ranks or processes that did not
//! come), and one process's failure, published here, ends every other
//! process's waits within a slice. This module names the steps and puts
//! their errors in `BenchError`'s terms.

use std::time::Duration;

use nccl_core::UniqueId;

use crate::error::BenchError;
use crate::world::{Who, World, met, published};

/// The meeting place of one run's processes.
pub struct Meeting {
    world: World,
}

impl Meeting {
    /// The meeting of `world`'s processes.
    pub fn new(world: World) -> Self {
        Self { world }
    }

    /// This process's place in the launch.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// This process's rank in the launch.
    pub fn process(&self) -> usize {
        self.world.rank
    }

    /// How long any wait lasts at most.
    pub fn timeout(&self) -> Duration {
        self.world.timeout
    }

    /// Publishes `error` as this process's failure, for every process to
    /// stop on, unless a failure stands already; returns what to report:
    /// `error`, or the failure another process published first (its
    /// likely cause), but never in place of a usage or environment error
    /// (exit status 2), which no other failure causes.
    pub fn fail(&self, error: BenchError) -> BenchError {
        let code = error.exit_code();
        match self.world.meeting().fail(&error.one_line(), code.into()) {
            Ok(Some(standing)) if code != 2 => published(standing),
            // Published, or the store is gone (the others find out from it).
            _ => error,
        }
    }

    /// Fails with the failure another process published, if any.
    ///
    /// # Errors
    /// The failure, or the store's.
    pub fn check(&self) -> Result<(), BenchError> {
        match self.world.meeting().failure()? {
            Some(failure) => Err(published(failure)),
            None => Ok(()),
        }
    }

    /// Every process's `value` under `name`, in process order, on every
    /// process, waiting for them as the meeting called `what`.
    ///
    /// # Errors
    /// A process did not share it in time, another failed, or the store's.
    pub fn all_gather(
        &self,
        name: &str,
        what: &str,
        value: &[u8],
    ) -> Result<Vec<Vec<u8>>, BenchError> {
        self.world
            .meeting()
            .all_gather(name, value)
            .map_err(|error| met(error, what, Who::Process))
    }

    /// Every process's `value` under `name`, in process order, on process
    /// 0 (which waits for them as the meeting called `what`); `None` on
    /// the others, which go on at once.
    ///
    /// # Errors
    /// On process 0, a process did not share it in time or another
    /// failed; anywhere, the store's.
    pub fn gather(
        &self,
        name: &str,
        what: &str,
        value: &[u8],
    ) -> Result<Option<Vec<Vec<u8>>>, BenchError> {
        self.world
            .meeting()
            .gather(0, name, value)
            .map_err(|error| met(error, what, Who::Process))
    }

    /// The bench communicator's unique id: process 0 creates it, the
    /// others receive it.
    ///
    /// # Errors
    /// NCCL cannot make an id, process 0 did not share it in time, a
    /// process failed, or the store's.
    pub fn unique_id(&self) -> Result<UniqueId, BenchError> {
        let bytes = self
            .world
            .meeting()
            .share_from(0, "unique-id", || {
                Ok::<_, BenchError>(UniqueId::new()?.as_bytes().to_vec())
            })
            .map_err(|error| met(error, "the sharing of NCCL's unique id", Who::Process))?;
        Ok(UniqueId::try_from_slice(&bytes)?)
    }

    /// How the run ended, from process 0 to every process: process 0
    /// shares `wrong`, the wrong elements it summed over every rank, and
    /// returns it; the others return process 0's (their own `wrong` is
    /// part of it).
    ///
    /// # Errors
    /// Process 0 did not share it in time, a process failed, or the store's.
    pub fn conclude(&self, wrong: u64) -> Result<u64, BenchError> {
        let shared = self
            .world
            .meeting()
            .share_from(0, "outcome", || {
                Ok::<_, BenchError>(wrong.to_string().into_bytes())
            })
            .map_err(|error| met(error, "the end of the run", Who::Process))?;
        let text = String::from_utf8_lossy(&shared).into_owned();
        text.parse().map_err(|_| {
            BenchError::Usage(format!(
                "process 0 ended the run with {text:?}, not a count of wrong elements: run the same \
                 nccl-perf build in every process"
            ))
        })
    }

    /// Leaves the run: process 0, which hosts a launch's TCP store, waits
    /// (at most `timeout`, failures or not) until every other process has
    /// left, then fails if one published a failure; the others say they
    /// leave.
    ///
    /// # Errors
    /// A process did not leave in time, or failed; or the store's.
    pub fn leave(&self, timeout: Duration) -> Result<(), BenchError> {
        self.world.leave_within(timeout)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nccl_group::{FileStore, InProcessStore, Store};

    use super::*;
    use crate::error::tests::assert_timeout_starting;
    use crate::threads::on_threads;

    /// `processes` meetings over one store.
    fn meetings(store: &Arc<dyn Store>, processes: usize) -> Vec<Meeting> {
        (0..processes)
            .map(|process| {
                Meeting::new(World::in_store(
                    process,
                    processes,
                    Arc::clone(store),
                    "test",
                ))
            })
            .collect()
    }

    fn in_process(timeout: Duration) -> Arc<dyn Store> {
        Arc::new(InProcessStore::with_timeout(timeout))
    }

    #[test]
    fn processes_gather_over_a_file_store() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(FileStore::open(dir.path(), Duration::from_secs(10)).unwrap());
        let meetings = meetings(&store, 3);
        let gathered = on_threads(meetings.len(), |process| {
            let meeting = &meetings[process];
            let value = [meeting.process() as u8];
            let all = meeting.all_gather("v", "the values", &value).unwrap();
            let to_0 = meeting.gather("w", "the rows", &value).unwrap();
            (all, to_0)
        });
        let every = vec![vec![0], vec![1], vec![2]];
        for (process, (all, to_0)) in gathered.into_iter().enumerate() {
            assert_eq!(all, every);
            assert_eq!(to_0, (process == 0).then(|| every.clone()));
        }
    }

    #[test]
    fn a_missing_process_is_named_when_the_wait_ends() {
        let store = in_process(Duration::from_millis(50));
        let meetings = meetings(&store, 3);
        meetings[1].gather("rows", "the rows", b"").unwrap();
        let error = meetings[0].gather("rows", "the rows", b"").unwrap_err();
        assert_eq!(error.exit_code(), 1);
        assert_timeout_starting(&error, "process 2 did not reach the rows within");
    }

    #[test]
    fn a_failure_stops_every_wait_with_its_status() {
        let store = in_process(Duration::from_secs(300));
        let meetings = meetings(&store, 2);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| meetings[0].gather("rows", "the rows", b"").unwrap_err());
            let own = meetings[1].fail(BenchError::Usage("-r 7 is not a rank".to_string()));
            assert!(matches!(own, BenchError::Usage(_)), "{own}");
            let error = waiter.join().unwrap();
            assert_eq!(error.to_string(), "process 1 failed: -r 7 is not a rank");
            // Every process exits with the failing one's status.
            assert_eq!(error.exit_code(), 2);
        });
        // The first failure stands: a later one reports it as the cause,
        // but for its own usage errors.
        let later = meetings[0].fail(BenchError::Lost);
        assert_eq!(later.to_string(), "process 1 failed: -r 7 is not a rank");
        let own = meetings[0].fail(BenchError::Environment("no GPU".to_string()));
        assert_eq!(own.to_string(), "no GPU");
        assert!(meetings[1].check().is_ok(), "its own failure");
        assert!(matches!(
            meetings[0].check(),
            Err(BenchError::Peer { status: 2, .. })
        ));
    }

    #[test]
    fn process_0_leaves_last_and_learns_of_late_failures() {
        let store = in_process(Duration::from_secs(10));
        let meetings = meetings(&store, 2);
        assert_eq!(meetings[0].conclude(15).unwrap(), 15);
        assert_eq!(meetings[1].conclude(0).unwrap(), 15);
        meetings[1].leave(Duration::from_secs(10)).unwrap();
        meetings[0].leave(Duration::from_secs(10)).unwrap();
        meetings[1].fail(BenchError::Lost);
        let error = meetings[0].leave(Duration::from_secs(10)).unwrap_err();
        assert!(
            error.to_string().starts_with("process 1 failed: "),
            "{error}"
        );
        let meetings = self::meetings(&in_process(Duration::from_secs(10)), 3);
        meetings[2].leave(Duration::from_secs(10)).unwrap();
        let error = meetings[0].leave(Duration::from_millis(50)).unwrap_err();
        assert_timeout_starting(&error, "process 1 did not reach the end of the run within");
    }
}
