//! The issue engine behind every operation: the route to a communicator,
//! the event handoff between the caller's stream and the NCCL stream, the
//! flight recorder, the watchdog's tracking, and what an error leaves
//! behind. [`ProcessGroup::issue`] and [`MultiDevice::issue`](crate::MultiDevice::issue)
//! issue an operation described by nccl-tensor ([`Op`], planned and
//! enqueued by its communicator); [`ProcessGroup::run_one`] issues any
//! enqueue (the barrier, [`ProcessGroup::custom`]).

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaStream;
use nccl_core::{DataType, ErrorChain, Group, Op, Reduction, Status};
use nccl_tensor::Communicator;

use crate::devices::DeviceList;
use crate::diagnostics::analysis::Issued as Fingerprint;
use crate::diagnostics::checks::Checked;
use crate::diagnostics::clock;
use crate::diagnostics::nvtx;
use crate::diagnostics::recorder::records::{OpDescription, OpState};
use crate::engine::buffers::GroupBuffers;
use crate::engine::buffers::keep;
use crate::engine::captures;
use crate::engine::checking::is_collective;
use crate::engine::failing::Finish;
use crate::engine::group::ProcessGroup;
use crate::engine::handoff::{
    check_stream, end_event, op_end, order_after_stream, start_event, sync_start,
};
use crate::engine::key::CommKey;
use crate::engine::local_comms::LocalComms;
use crate::engine::member::Member;
use crate::engine::ownership::Ownership;
use crate::engine::recent;
use crate::engine::tracked::{Ends, Tracked};
use crate::engine::work::{Issued, OpResult, Work, refusal_of};
use crate::engine::work_buffers::{Keep, WorkBuffers};
use crate::error::Uncapturable;
use crate::error::{GroupError, OpError, Result};
use crate::failure::FailureCause;
use crate::health::watchdog::{Completion, PendingOp};
use crate::options::{CommMode, StreamMode};

/// What the flight recorder notes about an operation before it is issued
/// (and the collective check fingerprints).
#[derive(Clone, Copy)]
pub(crate) struct OpInfo {
    pub(crate) op: &'static str,
    pub(crate) dtype: Option<DataType>,
    pub(crate) count: usize,
    pub(crate) output_count: usize,
    pub(crate) reduction: Option<&'static str>,
    pub(crate) peer: Option<usize>,
    /// Sends and receives only, which every rank need not issue: no
    /// collective sequence number, even on the collective communicator.
    pub(crate) point_to_point: bool,
    /// Whether it may be captured in a CUDA graph (all but the barrier).
    pub(crate) capturable: bool,
}

impl OpInfo {
    /// An operation with no typed buffers (a custom one, a graph's replay).
    pub(crate) fn untyped(op: &'static str) -> Self {
        Self::collective(op, None, 0)
    }

    /// A capturable collective with no peer or reduction, of `count`
    /// input elements of `dtype` (and as many output elements).
    pub(crate) fn collective(op: &'static str, dtype: Option<DataType>, count: usize) -> Self {
        Self {
            op,
            dtype,
            count,
            output_count: count,
            reduction: None,
            peer: None,
            point_to_point: false,
            capturable: true,
        }
    }

    /// The same, with `output_count` output elements.
    pub(crate) fn with_output(self, output_count: usize) -> Self {
        Self {
            output_count,
            ..self
        }
    }
}

/// What [`ProcessGroup::record`] numbered: the operation, and the
/// collective number the mismatch check compares, if it does.
pub(crate) struct Recorded {
    pub(crate) seq: u64,
    collective: Option<u64>,
}

/// Which communicators an operation runs on: the group's collective ones,
/// or those of the pair of this process and a peer (sends and receives).
#[derive(Clone, Copy)]
enum Route {
    Collective,
    Pair {
        low: usize,
        high: usize,
        peer_is_high: bool,
    },
}

impl Route {
    fn key(self, devices: DeviceList) -> CommKey {
        match self {
            Route::Collective => CommKey::Collective(devices),
            Route::Pair { low, high, .. } => CommKey::PointToPoint { low, high, devices },
        }
    }

    /// `op` as issued by the local rank `comm_rank` of a communicator with
    /// `devices` ranks per process: a send or receive goes to the same
    /// device of the peer process, `devices` ranks up or down in the pair
    /// communicator; a collective's root is already a global rank.
    fn op_on(self, op: Op<'static>, comm_rank: usize, devices: usize) -> Op<'static> {
        let Route::Pair { peer_is_high, .. } = self else {
            return op;
        };
        // The high process's ranks follow the low one's `devices` ranks, so
        // neither side leaves the pair; a broken pair gets a peer out of
        // range, which the plan refuses.
        let peer = if peer_is_high {
            comm_rank.saturating_add(devices)
        } else {
            comm_rank.checked_sub(devices).unwrap_or(usize::MAX)
        };
        match op {
            Op::Send { .. } => Op::Send { peer },
            Op::Recv { .. } => Op::Recv { peer },
            other => other,
        }
    }
}

impl ProcessGroup {
    /// The route of `op`.
    ///
    /// A send or receive names another process's rank.
    fn route(&self, op: &Op<'_>) -> Result<Route> {
        let Some((what, peer)) = op.rank_argument().filter(|_| op.is_point_to_point()) else {
            return Ok(Route::Collective);
        };
        let rank = self.rank();
        if peer < self.world_size() && peer != rank {
            Ok(Route::Pair {
                low: rank.min(peer),
                high: rank.max(peer),
                peer_is_high: peer > rank,
            })
        } else {
            Err(self.peer_out_of_range(what, peer))
        }
    }

    /// The error for a send's or receive's peer that is not another
    /// process of the group.
    pub(crate) fn peer_out_of_range(&self, what: &'static str, given: impl ToString) -> GroupError {
        GroupError::InvalidArgument {
            argument: what,
            expected: format!(
                "another process's rank in 0..{} (this is rank {})",
                self.world_size(),
                self.rank()
            ),
            given: given.to_string(),
        }
    }

    /// What the recorder notes: the sizes, the reduction, the root or the
    /// peer process.
    pub(crate) fn op_info(
        op: &Op<'_>,
        dtype: Option<DataType>,
        count: usize,
        output_count: usize,
    ) -> OpInfo {
        OpInfo {
            op: op.name(),
            dtype,
            count,
            output_count,
            reduction: op.reduction().map(Reduction::name),
            peer: op.rank_argument().map(|(_, rank)| rank),
            point_to_point: op.is_point_to_point(),
            capturable: true,
        }
    }

    /// Issues `op` on one local device's `buffers` (a tensor, or an
    /// `(output, input)` pair), on the caller's `stream`.
    ///
    /// Every operation method is this with one [`Op`]; a root is a global rank,
    /// and a send's or receive's peer another process's rank. The argument
    /// rules are nccl-tensor's ([`nccl_tensor::rules`]), so an `(output,
    /// input)` pair works for every operation that takes one, `all_reduce`
    /// included.
    ///
    /// # Errors
    /// As `B`'s [`Refusal`](crate::Refusal) (owned buffers handed back,
    /// borrowed memory's a plain [`GroupError`]): an aborted, destroyed,
    /// failed or suspended ([`GroupError::Suspended`]) group, a send's or receive's peer that is not another
    /// process, a failed rendezvous, a failed argument check
    /// ([`nccl_tensor::Plan::new`]), NCCL's error, or, on a stream being
    /// captured into a CUDA graph, an operation the group does not capture
    /// ([`GroupError::Capture`], with its [`Uncapturable`] reason).
    pub fn issue<B: GroupBuffers>(
        &self,
        op: Op<'static>,
        buffers: B,
        caller: &Arc<CudaStream>,
    ) -> OpResult<B> {
        crate::diagnostics::trace::enter_span!(trace, "op", op = op.name(), group = self.name());
        let route = match self.route(&op) {
            Ok(route) => route,
            Err(error) => return Err(B::Ownership::refuse(error, buffers)),
        };
        let info = Self::op_info(
            &op,
            Some(buffers.data_type()),
            buffers.input_len(),
            buffers.output_len(),
        );
        let device = buffers.device();
        let key = |devices| route.key(devices);
        refusal_of(self.run_one(
            info,
            key,
            device,
            (buffers, keep::<B>()),
            caller,
            |comm, stream, buffers| {
                let op = route.op_on(op, comm.core().rank(), 1);
                comm.plan(op, buffers.operands(), caller)?
                    .enqueue_on(stream)
            },
        ))
    }

    /// Whether `error`, returned by an operation's NCCL calls, may have
    /// left part of the operation launched: an error NCCL itself returned
    /// on a blocking communicator (a multi-call group may fail after some
    /// of its calls launched).
    ///
    /// A nonblocking communicator reports those after accepting the calls, and
    /// argument checks fail before any.
    fn may_have_launched(&self, error: &nccl_tensor::Error) -> bool {
        self.options().comm_mode == CommMode::Blocking
            && matches!(
                error,
                nccl_tensor::Error::Core(nccl_core::Error::Nccl { .. })
            )
    }

    /// The stream an operation runs on (this handle's [`StreamMode`]);
    /// a separate NCCL stream is first made to wait for the caller's.
    fn op_stream<'a>(
        &self,
        member: &'a Member,
        caller: &'a Arc<CudaStream>,
    ) -> Result<&'a Arc<CudaStream>> {
        if self.stream_mode == StreamMode::Separate {
            sync_start(member, caller)?;
        }
        Ok(self.stream_of(member, caller))
    }

    /// The stream [`ProcessGroup::op_stream`] gives, without the wait.
    fn stream_of<'a>(&self, member: &'a Member, caller: &'a Arc<CudaStream>) -> &'a Arc<CudaStream> {
        match self.stream_mode {
            StreamMode::Separate => &member.stream,
            StreamMode::Caller => caller,
        }
    }

    /// The communicators for `key`.
    ///
    /// A group aborted while they were being created aborts them too (`abort`
    /// only sees those created before it).
    pub(crate) fn comms_for(&self, key: &CommKey) -> Result<Arc<LocalComms>> {
        self.check_not_suspended("issuing operations")?;
        let comms = match recent::comms(&self.inner.cache, key) {
            Ok(comms) => comms,
            Err(error @ GroupError::InitTimeout { .. }) => {
                // A retry would meet stale ids and announcements in the
                // store: the group ends here (this caller gets the init
                // error itself, later calls the failure).
                let cause = FailureCause::Creation {
                    error: ErrorChain(&error).to_string(),
                };
                self.inner.fail(cause, None, Finish::Here);
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        if let Err(error) = self.check_live() {
            comms.abort();
            return Err(error);
        }
        Ok(comms)
    }

    /// An error of a call that raced with `abort`, `destroy` or a failure
    /// is reported as that, not as the communicator error it caused.
    ///
    /// A creation timeout and a mismatch failed the group themselves and say
    /// more than the failure.
    fn classify(&self, error: GroupError) -> GroupError {
        if matches!(
            error,
            GroupError::InitTimeout { .. } | GroupError::Mismatch(_)
        ) {
            return error;
        }
        self.check_live().err().unwrap_or(error)
    }

    /// Notes an operation NCCL accepted, issued at `enqueued` (nanoseconds
    /// on `diagnostics::clock`), in the flight recorder (its sequence
    /// numbers), keeps its collective check and hands a collective's
    /// fingerprint to the mismatch check.
    ///
    /// Operations refused by a check are not recorded, so every rank numbers
    /// the same collectives alike.
    pub(crate) fn record(
        &self,
        info: OpInfo,
        key: &CommKey,
        enqueued: u64,
        checked: Option<Checked<'_>>,
    ) -> Recorded {
        if let Some(checked) = checked {
            checked.keep();
        }
        let description = OpDescription {
            op: info.op,
            dtype: info.dtype,
            count: info.count,
            output_count: info.output_count,
            reduction: info.reduction,
            peer: info.peer,
            timeout: self.op_timeout,
            devices: *key.devices(),
            collective: is_collective(&info, key),
        };
        let record = self.inner.recorder.record(&description, enqueued);
        let collective = match (&self.inner.fingerprints, record.collective) {
            (Some(fingerprints), Some(n)) => {
                fingerprints.push(Fingerprint::described(
                    n,
                    info.op,
                    info.dtype,
                    info.count,
                    info.peer,
                    info.reduction,
                ));
                Some(n)
            }
            _ => None,
        };
        Recorded {
            seq: record.seq,
            collective,
        }
    }

    /// Records the end of an enqueued operation (`record_ends`) and hands
    /// it to the watchdog.
    ///
    /// The ends are recorded inside the tracker's lock, so the tracker holds
    /// the operations in the order their ends were recorded on each stream,
    /// which lets it reap a backlog on one stream with a binary search (see
    /// `watchdog::tracker::reap`).
    pub(crate) fn track(
        &self,
        Recorded { seq, collective }: Recorded,
        enqueued: Instant,
        record_ends: impl FnOnce() -> Result<Ends>,
    ) -> Result<Arc<Tracked>> {
        let inner = &self.inner;
        // One lock and timestamp for every operation one reap finds
        // finished; the closure owns them, so the lock ends with the reap.
        let mut finishing = None;
        let op = inner.tracker.push_with::<_, GroupError>(
            |spare| {
                let blocking_wait = self.options().blocking_wait;
                let spare = spare.and_then(|spare| spare.into_any().downcast::<Tracked>().ok());
                let ends = record_ends()?;
                let op = Tracked::shared(ends, &inner.outcomes, collective, blocking_wait, spare);
                let pending = PendingOp {
                    seq,
                    enqueued,
                    timeout: self.op_timeout,
                    completion: Arc::clone(&op) as Arc<dyn Completion>,
                };
                Ok((pending, op))
            },
            move |done, gpu_time| {
                // The stamp after this operation's poll, as the watchdog's.
                let stamp = inner.verification.stamp();
                finishing
                    .get_or_insert_with(|| {
                        let recorder = &inner.recorder;
                        recorder.finishing(recorder.micros(Instant::now()))
                    })
                    .finish(done, OpState::Completed, stamp, gpu_time);
            },
        )?;
        // A failure that drained the tracker just before the push missed
        // this operation: mark it here.
        if let Some(failure) = inner.failure.get() {
            Completion::fail(&*op, failure);
        }
        Ok(op)
    }

    /// Enqueues one operation on one local device: the NCCL stream waits
    /// for the caller's stream (unless the operation runs on the caller's
    /// stream), `issue` enqueues, and the operation gets its end ([`op_end`]:
    /// on the caller's stream, the one it shares with the operations beside it).
    ///
    /// `keep` says how a captured work keeps the buffers; `None`, buffers that
    /// borrow the caller's memory, which are never captured. On a caller's
    /// stream being captured, the operation is captured instead
    /// ([`ProcessGroup::run_captured`]).
    pub(crate) fn run_one<B: WorkBuffers>(
        &self,
        info: OpInfo,
        key: impl FnOnce(DeviceList) -> CommKey,
        device: usize,
        (mut buffers, keep): (B, Keep<B>),
        caller: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> Issued<B> {
        match (self.capture_status(info.op, caller), keep) {
            (Ok(false), _) => {}
            (Ok(true), Some(keep)) => {
                return self.run_captured(info, key, device, (buffers, keep), caller, issue);
            }
            (Ok(true), None) => {
                let error = captures::refused(info.op, Uncapturable::BorrowedMemory);
                return Err(self.failed_op(error, buffers));
            }
            (Err(error), _) => return Err(self.failed_op(error, buffers)),
        }
        let borrowed = keep.is_none();
        // Set once NCCL accepted the operation, or may have launched part of
        // it: its sequence number (its stream is `op_stream`'s, of `comms`).
        let mut issued: Option<u64> = None;
        let mut comms: Option<Arc<LocalComms>> = None;
        let attempt = (|| {
            self.check_live()?;
            check_stream(info.op, caller, device)?;
            // The common answers of `DeviceList::one` and
            // `check_collective` made here, with no `Result` (as large as a
            // `GroupError`) to pass them through the stack.
            let devices = match u16::try_from(device) {
                Ok(ordinal) => DeviceList::single(ordinal),
                Err(_) => DeviceList::one(device)?,
            };
            let key = key(devices);
            let comms = comms.insert(self.comms_for(&key)?);
            let checked = match self.inner.checks {
                Some(_) => self.check_collective(&info, &key)?,
                None => None,
            };
            let member = &comms.members[0];
            let stream = self.op_stream(member, caller)?;
            let start = start_event(self.options().gpu_timing, member, stream)?;
            let enqueued = Instant::now();
            let enqueued_ns = clock::nanos(enqueued);
            let recorded = {
                let comm = member.lock();
                let _enqueueing = member.enqueueing(enqueued_ns, self.op_timeout);
                // The number `record` gives it, unless another thread
                // records an operation of the group on another communicator
                // first.
                nvtx::range!(self.name(), "{} #{}", info.op, self.inner.recorder.next_seq());
                let status = match issue(&comm, stream, &mut buffers) {
                    Ok(status) => status,
                    Err(error) => {
                        if self.may_have_launched(&error) {
                            issued = Some(self.record(info, &key, enqueued_ns, checked).seq);
                        }
                        return Err(error.into());
                    }
                };
                let recorded = self.record(info, &key, enqueued_ns, checked);
                issued = Some(recorded.seq);
                if status == Status::InProgress {
                    comm.core().wait_ready_within(info.op, self.op_timeout)?;
                }
                recorded
            };
            self.track(recorded, enqueued, || {
                op_end(member, stream, caller, start, &buffers)
            })
        })();
        match (attempt, issued, comms) {
            (Ok(op), _, _) => Ok(Work::new(buffers, op, borrowed)),
            (Err(error), Some(seq), Some(comms)) => {
                // The stream `op_stream` gave: the operation was issued on it.
                let stream = self.stream_of(&comms.members[0], caller);
                order_after_stream(&buffers, stream, borrowed.then_some(&**caller));
                Err(self.failed_in_flight(error, seq, buffers))
            }
            (Err(error), _, _) => Err(self.failed_op(error, buffers)),
        }
    }

    /// [`MultiDevice::issue`](crate::MultiDevice::issue).
    pub(crate) fn issue_multi<B: GroupBuffers>(
        &self,
        op: Op<'static>,
        mut buffers: Vec<B>,
        callers: &[Arc<CudaStream>],
    ) -> OpResult<Vec<B>> {
        crate::diagnostics::trace::enter_span!(
            trace,
            "op_multi",
            op = op.name(),
            group = self.name(),
            parts = buffers.len()
        );
        let route = match self.route(&op) {
            Ok(route) => route,
            Err(error) => return Err(B::Ownership::refuse(error, buffers)),
        };
        let first_len = buffers.first().map_or(0, GroupBuffers::input_len);
        let first_output = buffers.first().map_or(0, GroupBuffers::output_len);
        let dtype = buffers.first().map(GroupBuffers::data_type);
        let info = Self::op_info(&op, dtype, first_len, first_output);
        let borrowed = keep::<B>().is_none();
        // Set once the NCCL group is open (with the stream of each device's
        // part): from then on an error leaves a (partial) operation to NCCL.
        let mut issued: Option<(u64, Vec<Arc<CudaStream>>)> = None;
        let attempt = (|| {
            self.check_live()?;
            let devices = DeviceList::new(buffers.iter().map(GroupBuffers::device))?;
            if callers.len() != devices.len() {
                return Err(GroupError::InvalidArgument {
                    argument: "streams",
                    expected: format!("one caller stream per tensor ({})", devices.len()),
                    given: format!("{} streams", callers.len()),
                });
            }
            for (caller, device) in callers.iter().zip(devices.iter()) {
                check_stream(info.op, caller, device)?;
                if self.capture_status(info.op, caller)? {
                    return Err(captures::refused(info.op, Uncapturable::SeveralDevices));
                }
            }
            let count = devices.len();
            let key = route.key(devices);
            let comms = self.comms_for(&key)?;
            let checked = self.check_collective(&info, &key)?;
            let (recorded, enqueued, streams, starts) = {
                let guards: Vec<_> = comms.members.iter().map(Member::lock).collect();
                let started = clock::now();
                let _enqueueing: Vec<_> = comms
                    .members
                    .iter()
                    .map(|member| member.enqueueing(started, self.op_timeout))
                    .collect();
                let planned = guards
                    .iter()
                    .zip(buffers.iter_mut())
                    .zip(callers)
                    .map(|((comm, part), caller)| {
                        let op = route.op_on(op, comm.core().rank(), count);
                        comm.plan(op, part.operands(), caller)
                    })
                    .collect::<nccl_tensor::Result<Vec<_>>>()?;
                let streams = comms
                    .members
                    .iter()
                    .zip(callers)
                    .map(|(member, caller)| self.op_stream(member, caller))
                    .collect::<Result<Vec<_>>>()?;
                let starts = if self.options().gpu_timing {
                    comms
                        .members
                        .iter()
                        .zip(&streams)
                        .map(|(member, stream)| start_event(true, member, stream))
                        .collect::<Result<Vec<_>>>()?
                } else {
                    Vec::new()
                };
                let enqueued = Instant::now();
                let recorded = self.record(info, &key, clock::nanos(enqueued), checked);
                let seq = recorded.seq;
                issued = Some((seq, streams.iter().map(|&s| Arc::clone(s)).collect()));
                nvtx::range!(self.name(), "{} #{seq}", info.op);
                let group = Group::start()?;
                for (part, stream) in planned.into_iter().zip(&streams) {
                    let _ = part.enqueue_on(stream)?;
                }
                if group.end()? == Status::InProgress {
                    for comm in &guards {
                        comm.core().wait_ready_within(info.op, self.op_timeout)?;
                    }
                }
                (recorded, enqueued, streams, starts)
            };
            // Without timing, `starts` is empty: no start for any device.
            let mut starts = starts.into_iter();
            self.track(recorded, enqueued, || {
                comms
                    .members
                    .iter()
                    .zip(streams)
                    .zip(callers)
                    .map(|((member, stream), caller)| {
                        end_event(member, stream, caller, starts.next().flatten())
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Ends::Many)
            })
        })();
        refusal_of(match attempt {
            Ok(op) => Ok(Work::new(buffers, op, borrowed)),
            Err(error) => match issued {
                None => Err(self.failed_op(error, buffers)),
                Some((seq, streams)) => {
                    for ((stream, part), caller) in streams.iter().zip(&buffers).zip(callers) {
                        order_after_stream(part, stream, borrowed.then_some(&**caller));
                    }
                    Err(self.failed_in_flight(error, seq, buffers))
                }
            },
        })
    }

    /// The error of an operation that failed before it was enqueued, with
    /// its buffers.
    pub(crate) fn failed_op<B>(&self, error: GroupError, buffers: B) -> Box<OpError<B>> {
        Box::new(OpError {
            error: self.classify(error),
            buffers,
        })
    }

    /// The error of an operation NCCL accepted before something failed:
    /// it is in flight with no end to track, so the group fails (its
    /// communicators are aborted, which ends the operation); the buffers
    /// come back with their release ordered after it.
    pub(crate) fn failed_in_flight<B>(
        &self,
        error: GroupError,
        seq: u64,
        buffers: B,
    ) -> Box<OpError<B>> {
        self.inner
            .recorder
            .finish(seq, OpState::Failed, Instant::now(), 0, None);
        let cause = FailureCause::Enqueue {
            error: ErrorChain(&error).to_string(),
        };
        self.inner.fail(cause, Some(seq), Finish::Here);
        self.failed_op(error, buffers)
    }
}
