//! Where the processes of a run meet: the store of their launch's
//! [`World`] (an in-process store for one process alone). Through it they
//! check they run the same plan, share the NCCL unique id, hold the barrier
//! before each timed batch, send their ranks' results to process 0, and
//! learn how the run ended.
//!
//! No wait here hangs: each waits at most the store's timeout (then fails
//! naming the ranks or processes that did not come), in slices, between
//! which it looks for a failure another process published; so one failing
//! process stops every other within a slice, whatever they were waiting
//! for.

use std::ops::Range;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::world::World;

/// How long one wait on the store lasts before looking for a failure.
pub const SLICE: Duration = Duration::from_millis(200);

/// What kind of participant a meeting waits for, as messages name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// An NCCL rank (one GPU).
    Rank,
    /// A process of the launch.
    Process,
}

impl Who {
    /// `rank 3`, `ranks 1, 3`, `process 2`, `processes 1, 2`.
    fn name(self, numbers: &[usize]) -> String {
        let noun = match (self, numbers.len()) {
            (Who::Rank, 1) => "rank",
            (Who::Rank, _) => "ranks",
            (Who::Process, 1) => "process",
            (Who::Process, _) => "processes",
        };
        let list: Vec<String> = numbers.iter().map(ToString::to_string).collect();
        format!("{noun} {}", list.join(", "))
    }
}

/// A process's failure, as published for the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Failure {
    /// `process 2`.
    origin: String,
    /// Its error on one line.
    message: String,
    /// Its exit status.
    status: u8,
}

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

    fn origin(&self) -> String {
        Who::Process.name(&[self.process()])
    }

    /// Publishes `error` as this process's failure, for every process to
    /// stop on, unless a failure stands already; returns what to report:
    /// `error`, or the failure that came first (its likely cause), but
    /// never in place of a usage or environment error (exit status 2),
    /// which no other failure causes.
    pub fn fail(&self, error: BenchError) -> BenchError {
        let failure = Failure {
            origin: self.origin(),
            message: error.one_line(),
            status: error.exit_code(),
        };
        let Ok(bytes) = serde_json::to_vec(&failure) else {
            return error;
        };
        let key = self.world.key("failed");
        let standing = match self.world.store().compare_set(&key, None, &bytes) {
            Ok(outcome) if !outcome.swapped => outcome.current,
            // Published, or the store is gone (the others find out from it).
            _ => None,
        };
        match standing.as_deref().map(decode_failure) {
            Some(standing) if failure.status != 2 && standing != failure => peer(standing),
            _ => error,
        }
    }

    /// Fails with the failure another process published, if any
    /// ([`BenchError::Stopped`] for this process's own, which [`Meeting::fail`]
    /// turns back into the failure).
    ///
    /// # Errors
    /// The failure, or the store's.
    pub fn check(&self) -> Result<(), BenchError> {
        match self.world.store().try_get(&self.world.key("failed"))? {
            None => Ok(()),
            Some(bytes) => {
                let failure = decode_failure(&bytes);
                Err(if failure.origin == self.origin() {
                    BenchError::Stopped
                } else {
                    peer(failure)
                })
            }
        }
    }

    /// Waits until every key of `keys` is set, key `i` standing for
    /// `who` number `numbers[i]`, for the meeting called `what`: at most
    /// `timeout`, and (`watch`) until a process fails.
    fn wait_all(
        &self,
        (what, who): (&str, Who),
        keys: &[String],
        numbers: &[usize],
        timeout: Duration,
        watch: bool,
    ) -> Result<(), BenchError> {
        let store = self.world.store();
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match store.wait(&names, left.min(SLICE)) {
                Ok(()) => return Ok(()),
                Err(error) if error.is_timeout() => {}
                Err(error) => return Err(error.into()),
            }
            if watch {
                self.check()?;
            }
            if Instant::now() >= deadline {
                let mut missing = Vec::new();
                for (key, &number) in keys.iter().zip(numbers) {
                    if store.try_get(key)?.is_none() {
                        missing.push(number);
                    }
                }
                return Err(BenchError::Absent {
                    missing: who.name(&missing),
                    what: what.to_string(),
                    waited: timeout,
                });
            }
        }
    }

    /// Shares `value` under `name` for the other processes.
    ///
    /// # Errors
    /// The store's.
    pub fn share(&self, name: &str, value: &[u8]) -> Result<(), BenchError> {
        let key = self.world.key(&format!("{name}/{}", self.process()));
        Ok(self.world.store().set(&key, value)?)
    }

    /// What each of `processes` shared under `name`, in order, waiting
    /// for them as the meeting called `what`.
    ///
    /// # Errors
    /// A process did not share it in time, another failed, or the store's.
    pub fn collect(
        &self,
        name: &str,
        what: &str,
        processes: Range<usize>,
    ) -> Result<Vec<Vec<u8>>, BenchError> {
        let numbers: Vec<usize> = processes.collect();
        let keys: Vec<String> = numbers
            .iter()
            .map(|process| self.world.key(&format!("{name}/{process}")))
            .collect();
        self.wait_all((what, Who::Process), &keys, &numbers, self.timeout(), true)?;
        keys.iter()
            .map(|key| Ok(self.world.store().get(key, self.timeout())?))
            .collect()
    }

    /// The barrier numbered `count` of `ranks` ranks, as `rank`: returns
    /// once every rank has come to it, for the meeting called `what`.
    ///
    /// # Errors
    /// A rank did not come in time, a process failed, or the store's.
    pub fn barrier(
        &self,
        rank: usize,
        ranks: usize,
        count: u64,
        what: &str,
    ) -> Result<(), BenchError> {
        let key = |rank: usize| self.world.key(&format!("barrier/{count}/{rank}"));
        self.world.store().set(&key(rank), b"")?;
        let numbers: Vec<usize> = (0..ranks).collect();
        let keys: Vec<String> = numbers.iter().map(|&rank| key(rank)).collect();
        self.wait_all((what, Who::Rank), &keys, &numbers, self.timeout(), true)
    }

    /// How the run ended, from process 0 to every process: process 0
    /// shares `wrong`, the wrong elements it summed over every rank, and
    /// returns it; the others return process 0's (their own `wrong` is
    /// part of it).
    ///
    /// # Errors
    /// Process 0 did not share it in time, a process failed, or the store's.
    pub fn conclude(&self, wrong: u64) -> Result<u64, BenchError> {
        if self.process() == 0 {
            self.share("outcome", wrong.to_string().as_bytes())?;
            return Ok(wrong);
        }
        let shared = self.collect("outcome", "the end of the run", 0..1)?;
        let text =
            String::from_utf8_lossy(shared.first().map_or(&[][..], Vec::as_slice)).into_owned();
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
        if self.process() != 0 {
            return self.share("left", b"");
        }
        let numbers: Vec<usize> = (1..self.world.size).collect();
        let keys: Vec<String> = numbers
            .iter()
            .map(|process| self.world.key(&format!("left/{process}")))
            .collect();
        self.wait_all(
            ("the end of the run", Who::Process),
            &keys,
            &numbers,
            timeout,
            false,
        )?;
        self.check()
    }
}

/// The failure in `bytes`, or one that says it could not be read.
fn decode_failure(bytes: &[u8]) -> Failure {
    serde_json::from_slice(bytes).unwrap_or_else(|error| Failure {
        origin: "another process".to_string(),
        message: format!("its failure record cannot be read ({error})"),
        status: 1,
    })
}

fn peer(failure: Failure) -> BenchError {
    BenchError::Peer {
        origin: failure.origin,
        message: failure.message,
        status: failure.status,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nccl_group::{FileStore, InProcessStore, Store};

    use super::*;

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
    fn names_of_who_is_missing() {
        assert_eq!(Who::Rank.name(&[3]), "rank 3");
        assert_eq!(Who::Rank.name(&[1, 3]), "ranks 1, 3");
        assert_eq!(Who::Process.name(&[2]), "process 2");
        assert_eq!(Who::Process.name(&[0, 2]), "processes 0, 2");
    }

    #[test]
    fn processes_share_and_collect_over_a_file_store() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(FileStore::open(dir.path(), Duration::from_secs(10)).unwrap());
        let meetings = meetings(&store, 3);
        let collected: Vec<Vec<Vec<u8>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = meetings
                .iter()
                .map(|meeting| {
                    scope.spawn(move || {
                        meeting.share("v", &[meeting.process() as u8]).unwrap();
                        for count in 0..3 {
                            meeting
                                .barrier(meeting.process(), 3, count, "a test barrier")
                                .unwrap();
                        }
                        meeting.collect("v", "the values", 0..3).unwrap()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap())
                .collect()
        });
        for values in collected {
            assert_eq!(values, vec![vec![0], vec![1], vec![2]]);
        }
    }

    #[test]
    fn a_missing_rank_is_named_when_the_wait_ends() {
        let store = in_process(Duration::from_millis(300));
        let meetings = meetings(&store, 1);
        let started = Instant::now();
        let error = meetings[0]
            .barrier(0, 3, 0, "the barrier before a timed batch")
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(error.exit_code(), 1);
        assert!(error.is_timeout());
        let text = error.to_string();
        assert!(
            text.starts_with(
                "ranks 1, 2 did not reach the barrier before a timed batch within 300ms"
            ),
            "{text}"
        );
        let error = meetings[0].collect("rows", "the rows", 1..2).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("process 1 did not reach the rows"),
            "{error}"
        );
    }

    #[test]
    fn a_failure_stops_every_wait_within_a_slice() {
        let store = in_process(Duration::from_secs(30));
        let meetings = meetings(&store, 2);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let started = Instant::now();
                let error = meetings[0].barrier(0, 2, 0, "a barrier").unwrap_err();
                (started.elapsed(), error)
            });
            std::thread::sleep(Duration::from_millis(100));
            let own = meetings[1].fail(BenchError::Usage("-r 7 is not a rank".to_string()));
            assert!(matches!(own, BenchError::Usage(_)), "{own}");
            let (waited, error) = waiter.join().unwrap();
            assert!(waited < Duration::from_secs(5), "{waited:?}");
            assert_eq!(error.to_string(), "process 1 failed: -r 7 is not a rank");
            // Every process exits with the failing one's status.
            assert_eq!(error.exit_code(), 2);
        });
        // The first failure stands: a later one reports it as the cause
        // (but for its own usage errors), and the failing process's own
        // waits say it stopped.
        let later = meetings[0].fail(BenchError::Stopped);
        assert_eq!(later.to_string(), "process 1 failed: -r 7 is not a rank");
        let own = meetings[0].fail(BenchError::Environment("no GPU".to_string()));
        assert_eq!(own.to_string(), "no GPU");
        assert!(matches!(meetings[1].check(), Err(BenchError::Stopped)));
        // A rank of the failing process that stopped reports the failure.
        assert_eq!(
            meetings[1].fail(BenchError::Stopped).to_string(),
            "process 1 failed: -r 7 is not a rank"
        );
    }

    #[test]
    fn process_0_leaves_last_and_learns_of_late_failures() {
        let store = in_process(Duration::from_secs(10));
        let meetings = meetings(&store, 2);
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
        assert!(error.is_timeout(), "{error}");
        assert!(
            error
                .to_string()
                .starts_with("process 1 did not reach the end of the run within 50ms"),
            "{error}"
        );
    }
}
