//! Why a group failed, as the watchdog (or an abort) reports it.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use nccl_core::ResultCode;

use crate::recorder::{OpRecord, PeerProgress};

/// The longest single sleep of [`Failure::wait_details`]: it sleeps again
/// until its deadline, so a timeout of any length is waited out in these.
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);

/// What to do when the watchdog fails a group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Abort the group's communicators and return
    /// [`GroupError::Failed`](crate::GroupError::Failed) from every later
    /// call and every waiter;
    /// the process keeps running and may create a new group.
    #[default]
    ReturnErrors,
    /// Abort the group's communicators, write the flight recorder, print
    /// the failure to stderr and abort the process, for launchers that
    /// restart failed workers. Nothing returns an error first, so nothing
    /// can exit before the dump is written.
    AbortProcess,
}

/// Why a group failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureCause {
    /// An operation ran past its timeout.
    Timeout {
        /// The operation's timeout.
        timeout: Duration,
        /// How long it had run when the watchdog saw it.
        ran: Duration,
    },
    /// NCCL reported an asynchronous error on one of the group's
    /// communicators (a peer failed, a network error, an abort).
    /// `ncclRemoteError` is a lost peer ([`FailureCause::is_peer_lost`]).
    AsyncError {
        /// NCCL's error, with its sources, on one line.
        error: String,
        /// NCCL's result code (`None` when the error was not a NCCL
        /// code: a CUDA error, a library that could not be asked).
        nccl_code: Option<ResultCode>,
    },
    /// CUDA failed to report an operation's end (the device is in error).
    Cuda {
        /// CUDA's error.
        error: String,
    },
    /// The group was aborted ([`ProcessGroup::abort`](crate::ProcessGroup::abort))
    /// while operations were pending.
    Aborted,
    /// The group was dropped while operations were pending.
    Dropped,
    /// NCCL accepted the operation, then something failed before its end
    /// could be tracked (waiting for a nonblocking communicator, recording
    /// its end event): it was left in flight, so the group cannot go on.
    Enqueue {
        /// The error.
        error: String,
    },
    /// Enqueueing an operation on the communicator of `device` (the NCCL
    /// call, or a custom operation's own code) had not returned after its
    /// timeout: the calling thread is stuck in it (a peer that never
    /// connects, say). The operation has no sequence number yet.
    EnqueueBlocked {
        /// The local device.
        device: usize,
        /// The operation's timeout.
        timeout: Duration,
        /// How long the call had been blocked when the watchdog saw it.
        blocked: Duration,
    },
    /// A communicator could not be created in time
    /// ([`GroupError::InitTimeout`](crate::GroupError::InitTimeout)): the
    /// ranks no longer agree on what to create next.
    Creation {
        /// The error.
        error: String,
    },
}

impl FailureCause {
    /// True when something ran past its timeout: an operation
    /// ([`FailureCause::Timeout`]), an enqueue
    /// ([`FailureCause::EnqueueBlocked`]) or a communicator's creation
    /// ([`FailureCause::Creation`], which only a timed-out creation causes).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            FailureCause::Timeout { .. }
                | FailureCause::EnqueueBlocked { .. }
                | FailureCause::Creation { .. }
        )
    }

    /// The NCCL result code behind the failure: an asynchronous error's.
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            FailureCause::AsyncError { nccl_code, .. } => *nccl_code,
            _ => None,
        }
    }

    /// True when NCCL reported a lost peer: a remote rank failed or went
    /// away (`ncclRemoteError`). [`GroupError::kind`](crate::GroupError::kind)
    /// is then [`ErrorKind::PeerLost`](crate::ErrorKind::PeerLost).
    pub fn is_peer_lost(&self) -> bool {
        self.nccl_code().is_some_and(ResultCode::is_remote_error)
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureCause::Timeout { timeout, ran } => {
                write!(
                    f,
                    "did not complete within its timeout of {timeout:?} (it had run {ran:?})"
                )
            }
            FailureCause::AsyncError { error, .. } => {
                write!(f, "failed: NCCL reported an asynchronous error: {error}")
            }
            FailureCause::Cuda { error } => write!(f, "failed: CUDA error: {error}"),
            FailureCause::Aborted => write!(f, "was pending when the group was aborted"),
            FailureCause::Dropped => write!(f, "was pending when the group was dropped"),
            FailureCause::Enqueue { error } => {
                write!(f, "failed after NCCL accepted it: {error}")
            }
            FailureCause::Creation { error } => write!(f, "could not be created: {error}"),
            FailureCause::EnqueueBlocked {
                device,
                timeout,
                blocked,
            } => write!(
                f,
                "on device {device} was stuck enqueueing an operation for {blocked:?}, past its timeout of \
                 {timeout:?} (a peer that never connects?)"
            ),
        }
    }
}

/// How the abort of the group's communicators went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbortOutcome {
    /// Every communicator was aborted, in this long.
    Aborted(Duration),
    /// The abort had not returned after this long; it was left running on
    /// its own thread so the caller is not stuck with it.
    Stalled(Duration),
}

/// What was learnt after the failure: the abort, the other ranks'
/// progress and the flight recorder's dump.
#[derive(Clone, Debug)]
pub struct FailureDetails {
    /// How the abort went.
    pub abort: AbortOutcome,
    /// Every rank's progress that was exchanged through the store.
    pub peers: Vec<PeerProgress>,
    /// Ranks that had not issued the collective this rank was stuck on, or
    /// that did not answer: the likely culprits.
    pub lagging: Vec<usize>,
    /// Where the flight recorder's dump was written, or why it was not
    /// (`None`: dumps are off).
    pub dump: Option<Result<PathBuf, String>>,
}

/// A group's failure: which operation, why, and what was done about it.
/// [`GroupError::Failed`](crate::GroupError::Failed) carries it; its
/// `Display` is the full report.
#[derive(Debug)]
pub struct Failure {
    /// The group's name.
    pub group: String,
    /// The group instance's generation.
    pub generation: u64,
    /// This process's rank.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// Why it failed.
    pub cause: FailureCause,
    /// The operation it failed on, as the flight recorder has it (`None`
    /// when no operation was involved, e.g. an asynchronous error between
    /// operations, or when the record was overwritten).
    pub op: Option<OpRecord>,
    /// The operations whose end was seen but not yet followed by a clean
    /// check of the communicators when the group failed, oldest first:
    /// they may have ended because a peer died, over partial data, so
    /// work the GPU ran on their results (a kernel queued after
    /// [`Work::wait`](crate::Work::wait)) read suspect values. Host reads
    /// of their tensors fail instead. The flight recorder marks them
    /// [`OpState::Suspect`](crate::OpState::Suspect).
    pub suspects: Vec<OpRecord>,
    details: OnceLock<FailureDetails>,
    /// Signalled when the details are set.
    details_set: (Mutex<()>, Condvar),
}

impl Failure {
    pub(crate) fn new(
        group: String,
        generation: u64,
        rank: usize,
        world_size: usize,
        cause: FailureCause,
        op: Option<OpRecord>,
        suspects: Vec<OpRecord>,
    ) -> Self {
        Self {
            group,
            generation,
            rank,
            world_size,
            cause,
            op,
            suspects,
            details: OnceLock::new(),
            details_set: (Mutex::new(()), Condvar::new()),
        }
    }

    /// The abort's outcome, the peers' progress and the dump, once the
    /// watchdog has them (they follow the failure by at most the abort
    /// timeout plus the exchange's few seconds).
    pub fn details(&self) -> Option<&FailureDetails> {
        self.details.get()
    }

    /// [`Failure::details`], waiting for them at most `timeout` (e.g.
    /// before a process exits, so that the flight recorder's dump is
    /// written).
    pub fn wait_details(&self, timeout: Duration) -> Option<&FailureDetails> {
        // A timeout past what `Instant` can hold waits as long as it takes.
        let deadline = Instant::now().checked_add(timeout);
        let (lock, set) = &self.details_set;
        let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(details) = self.details.get() {
                return Some(details);
            }
            let left = deadline.map_or(LONGEST_SLEEP, |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                return None;
            }
            guard = set
                .wait_timeout(guard, left.min(LONGEST_SLEEP))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    pub(crate) fn set_details(&self, details: FailureDetails) {
        let (lock, set) = &self.details_set;
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self.details.set(details);
        set.notify_all();
    }
}

/// `all_reduce #57 (collective #41, 1024 x float on devices [0])`.
fn describe(op: &OpRecord, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{} #{} (", op.op, op.seq)?;
    if let Some(n) = op.collective_seq {
        write!(f, "collective #{n}, ")?;
    }
    match op.dtype {
        Some(dtype) => write!(f, "{} x {dtype}", op.count)?,
        None => write!(f, "{} elements", op.count)?,
    }
    if let Some(peer) = op.peer {
        let role = if op.collective_seq.is_some() {
            "root"
        } else {
            "peer"
        };
        write!(f, ", {role} {peer}")?;
    }
    write!(f, " on devices {:?})", op.devices)
}

/// How many suspect operations a failure's message names.
const SUSPECTS_NAMED: usize = 4;

/// `; the results of 2 operations that ended since the last clean check
/// may be wrong: all_reduce #56 (...), all_reduce #57 (...)`.
fn write_suspects(suspects: &[OpRecord], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Some((first, rest)) = suspects.split_first() else {
        return Ok(());
    };
    write!(
        f,
        "; the results of {} operation(s) that ended since the last clean check of the communicators \
         may be wrong (work the GPU ran on them read suspect values): ",
        suspects.len()
    )?;
    describe(first, f)?;
    for op in rest.iter().take(SUSPECTS_NAMED - 1) {
        write!(f, ", ")?;
        describe(op, f)?;
    }
    if suspects.len() > SUSPECTS_NAMED {
        write!(f, " and {} more", suspects.len() - SUSPECTS_NAMED)?;
    }
    Ok(())
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process group {:?} (rank {} of {}) failed: ",
            self.group, self.rank, self.world_size
        )?;
        match &self.op {
            Some(op) => describe(op, f)?,
            None => write!(f, "a communicator")?,
        }
        write!(f, " {}", self.cause)?;
        write_suspects(&self.suspects, f)?;
        let Some(details) = self.details() else {
            return write!(
                f,
                "; its communicators are being aborted. Create a new group to continue."
            );
        };
        match details.abort {
            AbortOutcome::Aborted(took) => {
                write!(f, "; its communicators were aborted in {took:?}")?
            }
            AbortOutcome::Stalled(waited) => write!(
                f,
                "; aborting its communicators had not finished after {waited:?} and was left running"
            )?,
        }
        if !details.lagging.is_empty() {
            let stuck = self.op.and_then(|op| op.collective_seq);
            match stuck {
                Some(n) => write!(
                    f,
                    "; ranks {:?} had not issued collective #{n} or did not answer (the likely culprits)",
                    details.lagging
                )?,
                None => write!(f, "; ranks {:?} did not answer", details.lagging)?,
            }
        }
        match &details.dump {
            Some(Ok(path)) => write!(f, "; flight recorder: {}", path.display())?,
            Some(Err(error)) => write!(f, "; the flight recorder could not be written: {error}")?,
            None => {}
        }
        write!(f, ". Create a new group to continue.")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::key::DeviceList;
    use crate::recorder::OpState;
    use nccl_core::DataType;

    fn record() -> OpRecord {
        OpRecord {
            seq: 57,
            collective_seq: Some(41),
            p2p_seq: None,
            op: "all_reduce",
            dtype: Some(DataType::Float32),
            count: 1024,
            output_count: 1024,
            reduction: Some("sum"),
            peer: None,
            timeout: Duration::from_secs(5),
            thread: 0,
            devices: DeviceList::one(0).unwrap(),
            enqueued_us: 10,
            finished_us: None,
            state: OpState::Failed,
            end_stamp: 0,
        }
    }

    #[test]
    fn the_report_names_op_cause_culprits_and_dump() {
        let failure = Failure::new(
            "trainer".into(),
            0,
            2,
            4,
            FailureCause::Timeout {
                timeout: Duration::from_secs(5),
                ran: Duration::from_millis(5020),
            },
            Some(record()),
            Vec::new(),
        );
        let early = failure.to_string();
        assert!(
            early.contains("process group \"trainer\" (rank 2 of 4) failed: all_reduce #57 (collective #41, 1024 x float on devices [0]) did not complete within its timeout of 5s (it had run 5.02s)"),
            "{early}"
        );
        assert!(early.contains("being aborted"), "{early}");
        failure.set_details(FailureDetails {
            abort: AbortOutcome::Aborted(Duration::from_millis(3)),
            peers: Vec::new(),
            lagging: vec![1],
            dump: Some(Ok(PathBuf::from("/tmp/trainer-g0-rank2.json"))),
        });
        let full = failure.to_string();
        assert!(full.contains("aborted in 3ms"), "{full}");
        assert!(
            full.contains("ranks [1] had not issued collective #41 or did not answer"),
            "{full}"
        );
        assert!(
            full.contains("flight recorder: /tmp/trainer-g0-rank2.json"),
            "{full}"
        );
        assert!(full.ends_with("Create a new group to continue."), "{full}");
    }

    #[test]
    fn details_can_be_waited_for() {
        let failure = Arc::new(Failure::new(
            "g".into(),
            0,
            0,
            1,
            FailureCause::EnqueueBlocked {
                device: 3,
                timeout: Duration::from_secs(2),
                blocked: Duration::from_millis(2040),
            },
            None,
            Vec::new(),
        ));
        let text = failure.to_string();
        assert!(
            text.contains("failed: a communicator on device 3 was stuck enqueueing an operation for 2.04s, past its timeout of 2s"),
            "{text}"
        );
        assert!(failure.wait_details(Duration::from_millis(20)).is_none());
        let setter = {
            let failure = Arc::clone(&failure);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                failure.set_details(FailureDetails {
                    abort: AbortOutcome::Aborted(Duration::from_millis(1)),
                    peers: Vec::new(),
                    lagging: Vec::new(),
                    dump: None,
                });
            })
        };
        // The longest timeout there is waits, and returns once they are set.
        let details = failure
            .wait_details(Duration::MAX)
            .expect("set by the other thread");
        assert_eq!(
            details.abort,
            AbortOutcome::Aborted(Duration::from_millis(1))
        );
        setter.join().unwrap();
    }

    #[test]
    fn causes_read_as_sentences() {
        let mut send = record();
        send.op = "send";
        send.collective_seq = None;
        send.peer = Some(3);
        let failure = Failure::new(
            "g".into(),
            1,
            0,
            4,
            FailureCause::AsyncError {
                error: "remote process exited".into(),
                nccl_code: Some(ResultCode(6)),
            },
            Some(send),
            Vec::new(),
        );
        failure.set_details(FailureDetails {
            abort: AbortOutcome::Stalled(Duration::from_secs(10)),
            peers: Vec::new(),
            lagging: vec![3],
            dump: Some(Err("permission denied".into())),
        });
        let text = failure.to_string();
        assert!(text.contains("send #57 (1024 x float, peer 3 on devices [0]) failed: NCCL reported an asynchronous error: remote process exited"), "{text}");
        assert!(
            text.contains("had not finished after 10s and was left running"),
            "{text}"
        );
        assert!(text.contains("ranks [3] did not answer"), "{text}");
        assert!(
            text.contains("could not be written: permission denied"),
            "{text}"
        );
        let none = Failure::new("g".into(), 0, 0, 1, FailureCause::Dropped, None, Vec::new());
        assert!(
            none.to_string()
                .contains("a communicator was pending when the group was dropped")
        );
    }

    #[test]
    fn suspect_operations_are_named_up_to_a_few() {
        let suspects: Vec<OpRecord> = (0..6)
            .map(|n| {
                let mut op = record();
                op.seq = 50 + n;
                op.collective_seq = Some(40 + n);
                op.state = OpState::Suspect;
                op
            })
            .collect();
        let failure = Failure::new(
            "g".into(),
            0,
            1,
            4,
            FailureCause::AsyncError {
                error: "remote process exited".into(),
                nccl_code: Some(ResultCode(6)),
            },
            None,
            suspects,
        );
        let text = failure.to_string();
        assert!(
            text.contains("the results of 6 operation(s) that ended since the last clean check"),
            "{text}"
        );
        assert!(text.contains("all_reduce #50 (collective #40"), "{text}");
        assert!(text.contains("all_reduce #53 (collective #43"), "{text}");
        assert!(!text.contains("all_reduce #54"), "{text}");
        assert!(text.contains(" and 2 more"), "{text}");
    }
}
