//! One launched rank of the `gpu_rank_*` fault scenarios: the faulty
//! rank's fault, and every other rank's checks of the failure it sees.

use nccl_group::Lifecycle;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::{CudaStream, ReduceOp};
use nccl_group::{
    CommMode, FailureCause, GroupError, GroupOptions, ProcessGroup, RendezvousConfig,
};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::faults::{SLACK, read_dump};
use nccl_test_support::processes::{await_mark, publish, unix_us};

use super::{
    CHILD_INIT_TIMEOUT, CHILD_LEN, CHILD_OP_TIMEOUT, CHILD_TIMEOUT, COMMS_VAR, DIE_AT, EXITED_AT,
    Fault, KILLED_AT, LAUNCH_TIMEOUT, MARK_TIMEOUT, VICTIM_READY,
};

/// This process's part, as one rank of a launch of `fault`'s scenario:
/// the faulty rank's fault, or a surviving rank's checks of the failure.
pub fn run(fault: Fault) {
    let ranks = support::ranks();
    let (rank, world) = (ranks.rank, ranks.world);
    let mode = match std::env::var(COMMS_VAR).as_deref() {
        Ok("blocking") => CommMode::Blocking,
        _ => CommMode::Nonblocking,
    };
    let victim = fault.victim(world);
    let label = format!(
        "{fault:?} at world size {world} on {mode:?} communicators, rank {rank}{}",
        if rank == victim {
            " (the faulty rank)"
        } else {
            ""
        }
    );
    let dir = ranks
        .dir
        .clone()
        .unwrap_or_else(|| panic!("{label}: NCCL_LAUNCH_DIR is not set"));
    // Every rank but the faulty one says when it is done (also when it
    // panics), so that rank 0 keeps the TCP store up for the others'
    // failure exchange, and a stalled rank knows when to stop.
    let _reported = (rank != victim).then(|| Reported(dir.clone(), rank));
    let timeout = if fault == Fault::NeverStarts {
        CHILD_INIT_TIMEOUT
    } else {
        CHILD_TIMEOUT
    };
    let options = GroupOptions::default()
        .with_comm_mode(mode)
        .with_timeout(timeout)
        .with_op_timeout(CHILD_OP_TIMEOUT)
        .with_abort_timeout(Duration::from_secs(5))
        .with_dump_dir(dir.join(format!("dumps-rank{rank}")));
    let group = ProcessGroup::builder("faults")
        .options(options)
        .config(&RendezvousConfig::from_env().expect("the launch variables"))
        .build()
        .unwrap_or_else(|e| panic!("{label}: ProcessGroup::builder: {e}"));
    let stream = ranks
        .device()
        .new_stream()
        .unwrap_or_else(|e| panic!("{label}: stream: {e}"));
    let child = Child {
        fault,
        rank,
        world,
        victim,
        label,
        dir,
    };
    if fault == Fault::NeverStarts {
        child.never_starts(&group, &stream);
    } else {
        child.loop_until_failure(group, &stream);
    }
    if rank == 0 && rank != victim {
        child.await_reports();
    }
}

/// Publishes `reported.<rank>` in the launch's folder when dropped.
struct Reported(PathBuf, usize);

impl Drop for Reported {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join(format!("reported.{}", self.1)), b"");
    }
}

/// One rank of a fault scenario.
struct Child {
    fault: Fault,
    rank: usize,
    world: usize,
    victim: usize,
    label: String,
    dir: PathBuf,
}

impl Child {
    /// Waits until every rank but the faulty one has reported.
    fn await_reports(&self) {
        for r in (0..self.world).filter(|&r| r != self.victim && r != self.rank) {
            assert!(
                await_mark(&self.dir, &format!("reported.{r}"), MARK_TIMEOUT).is_some(),
                "{}: rank {r} did not report within {MARK_TIMEOUT:?}",
                self.label
            );
        }
    }

    /// The first all_reduce creates the communicator, which cannot form
    /// without the rank that never started: `InitTimeout` naming it, within
    /// the group's timeout; the group has failed afterwards.
    fn never_starts(&self, group: &ProcessGroup, stream: &Arc<CudaStream>) {
        let label = &self.label;
        let tensor = Tensor::<f32>::zeros(stream, &[1024]).expect("tensor");
        // The ranks that started begin together, so that none waits for
        // another's CUDA start-up within the timeout.
        publish(&self.dir, &format!("started.{}", self.rank), "");
        for r in (0..self.world).filter(|&r| r != self.victim) {
            assert!(
                await_mark(&self.dir, &format!("started.{r}"), MARK_TIMEOUT).is_some(),
                "{label}: rank {r} did not start within {MARK_TIMEOUT:?}"
            );
        }
        let started = Instant::now();
        let error = match group.all_reduce(tensor, ReduceOp::Sum, stream) {
            Err(e) => e.error,
            Ok(_) => panic!("{label}: an all_reduce over a rank that never started was enqueued"),
        };
        let took = started.elapsed();
        assert!(
            took <= CHILD_INIT_TIMEOUT + SLACK * 3,
            "{label}: creation failed only after {took:?}, its timeout is {CHILD_INIT_TIMEOUT:?}: {error}"
        );
        match &error {
            GroupError::InitTimeout { missing, .. } => assert_eq!(
                missing,
                &vec![self.victim],
                "{label}: InitTimeout names the wrong ranks: {error}"
            ),
            other => panic!(
                "{label}: expected GroupError::InitTimeout naming rank {}, got {other}",
                self.victim
            ),
        }
        let text = error.to_string();
        assert!(
            text.contains(&format!("ranks [{}] never joined", self.victim)),
            "{label}: {text}"
        );
        match group.barrier(stream).map(drop) {
            Err(GroupError::Failed(failure)) => assert!(
                matches!(failure.cause, FailureCause::Creation { .. }),
                "{label}: the group failed for another reason: {failure}"
            ),
            other => panic!("{label}: after InitTimeout a barrier gave {other:?}, expected Failed"),
        }
        println!(
            "fault child {}: failed as expected after {took:?}: {error}",
            self.rank
        );
    }

    /// All_reduces of rank-dependent values (checked) until the group
    /// fails, or the faulty rank's turn to fail comes.
    fn loop_until_failure(&self, group: ProcessGroup, stream: &Arc<CudaStream>) {
        let label = &self.label;
        let mine = vec![(self.rank + 1) as f32; CHILD_LEN];
        let sum = (self.world * (self.world + 1) / 2) as f32;
        let mut tensor = Tensor::from_host(stream, &mine, &[CHILD_LEN]).expect("upload");
        for iteration in 0..=DIE_AT + 5 {
            if self.rank == self.victim && iteration == DIE_AT {
                return self.fail(group, iteration);
            }
            tensor.copy_from_host(stream, &mine).expect("upload");
            let started = Instant::now();
            let result = match group.all_reduce(tensor, ReduceOp::Sum, stream) {
                Err(e) => Err(e.error),
                Ok(work) => work
                    .synchronize(Duration::from_secs(60))
                    .and_then(|()| work.wait()),
            };
            match result {
                Ok(t) => {
                    let got = t.to_vec(stream).expect("download");
                    if let Some(i) = got.iter().position(|&v| v != sum) {
                        panic!(
                            "{label}: iteration {iteration}: element {i} is {}, expected {sum}",
                            got[i]
                        );
                    }
                    tensor = t;
                }
                Err(error) => return self.report(&error, iteration, started),
            }
        }
        panic!(
            "{label}: every all_reduce up to iteration {} completed, although rank {} {}",
            DIE_AT + 5,
            self.victim,
            match self.fault {
                Fault::Killed => "was killed",
                Fault::Stalls => "stalled",
                _ => "exited",
            }
        );
    }

    /// The faulty rank's part, at `iteration`.
    fn fail(&self, group: ProcessGroup, iteration: usize) {
        let (rank, label) = (self.rank, &self.label);
        match self.fault {
            Fault::Killed => {
                // This rank's end of the last all_reduce does not mean the
                // others have theirs (its proxy may still be sending): a kill
                // now could fail that one. Let them finish it and enter the
                // next first, as the exit below does.
                thread::sleep(Duration::from_millis(500));
                println!("fault child {rank}: waiting to be killed at iteration {iteration}");
                publish(&self.dir, VICTIM_READY, "");
                thread::sleep(LAUNCH_TIMEOUT);
                panic!("{label}: was not killed");
            }
            Fault::Stalls => {
                println!("fault child {rank}: stalling at iteration {iteration}");
                for r in (0..self.world).filter(|&r| r != rank) {
                    assert!(
                        await_mark(&self.dir, &format!("reported.{r}"), MARK_TIMEOUT).is_some(),
                        "{label}: rank {r} did not report within {MARK_TIMEOUT:?} of the stall"
                    );
                }
                // The others aborted their communicators; so does this one.
                let _ = group.abort();
                println!("fault child {rank}: stalled rank done");
            }
            _ => {
                // Let the others enter the all_reduce first.
                thread::sleep(Duration::from_millis(500));
                println!("fault child {rank}: exiting cleanly at iteration {iteration}");
                publish(&self.dir, EXITED_AT, &unix_us().to_string());
                drop(group);
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::process::exit(0);
            }
        }
    }

    /// A surviving rank's failure: at the faulty rank's iteration, within
    /// the deadline, `GroupError::Failed`, naming the faulty rank as
    /// lagging in the failure and in the flight-recorder dump.
    fn report(&self, error: &GroupError, iteration: usize, started: Instant) {
        let label = &self.label;
        let failed_at = unix_us();
        let after = started.elapsed();
        assert_eq!(
            iteration, DIE_AT,
            "{label}: failed at iteration {iteration}, before the fault: {error}"
        );
        // How long after the fault the error came.
        let (waited, since) = match self.fault {
            Fault::Stalls => (after, "the start of the operation"),
            fault => {
                let mark = if fault == Fault::Killed {
                    KILLED_AT
                } else {
                    EXITED_AT
                };
                let text = await_mark(&self.dir, mark, Duration::from_secs(10))
                    .unwrap_or_else(|| panic!("{label}: no {mark} mark: {error}"));
                let at: u64 = text.trim().parse().expect("a time in microseconds");
                (
                    Duration::from_micros(failed_at.saturating_sub(at)),
                    if fault == Fault::Killed {
                        "the kill"
                    } else {
                        "the exit"
                    },
                )
            }
        };
        assert!(
            waited <= CHILD_OP_TIMEOUT + SLACK,
            "{label}: the error came {waited:?} after {since}, past the operation timeout \
             {CHILD_OP_TIMEOUT:?} + {SLACK:?}: {error}"
        );
        let GroupError::Failed(failure) = error else {
            panic!("{label}: expected GroupError::Failed, got {error:?}");
        };
        let details = failure
            .wait_details(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{label}: no failure details within 30 s: {failure}"));
        assert!(
            details.lagging.contains(&self.victim),
            "{label}: the failure does not name rank {} as lagging (lagging {:?}, peers {:?}): {failure}",
            self.victim,
            details.lagging,
            details.peers
        );
        let text = failure.to_string();
        assert!(
            text.contains(&format!("ranks {:?}", details.lagging)),
            "{label}: the failure's message does not name the lagging ranks: {text}"
        );
        let path = match &details.dump {
            Some(Ok(path)) => path.clone(),
            other => panic!("{label}: the flight recorder was not dumped: {other:?}"),
        };
        let dump = read_dump(&path);
        let numbers = |field: &str| -> Vec<u64> {
            dump[field]
                .as_array()
                .unwrap_or_else(|| panic!("{label}: the dump has no {field}: {dump}"))
                .iter()
                .filter_map(|v| v.as_u64().or_else(|| v["rank"].as_u64()))
                .collect()
        };
        let (lagging, peers) = (numbers("lagging"), numbers("peers"));
        assert!(
            lagging.contains(&(self.victim as u64)),
            "{label}: the dump {} does not name rank {} as lagging (lagging {lagging:?}, peers {peers:?})",
            path.display(),
            self.victim
        );
        if self.fault != Fault::Stalls {
            assert!(
                !peers.contains(&(self.victim as u64)),
                "{label}: the dump {} has progress from the dead rank {}: {peers:?}",
                path.display(),
                self.victim
            );
        }
        assert_eq!(
            dump["rank"],
            self.rank as u64,
            "{label}: {}",
            path.display()
        );
        assert_eq!(
            dump["world_size"],
            self.world as u64,
            "{label}: {}",
            path.display()
        );
        println!(
            "fault child {}: failed as expected {waited:?} after {since} (cause: {}): {failure}",
            self.rank, failure.cause
        );
    }
}
