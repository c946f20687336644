//! [`ProcessGroup`]: collectives across processes, each driving one or
//! several local GPUs, over cached communicators with two-way event sync,
//! watched by the process's watchdog and recorded by a flight recorder.

mod factory;
mod health;

use health::Finish;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use nccl_core::{DataType, Group, ReduceOp, Status};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{Communicator, NcclType, Tensor, TypedBuffer};

pub(crate) use factory::{LocalComms, Member, NcclFactory};

use crate::cache::OnceMap;
use crate::comms::{CommCache, Membership};
use crate::error::{GroupError, OpError, Result};
use crate::failure::{AbortOutcome, Failure, FailureCause, FailurePolicy};
use crate::key::{CommKey, DeviceList};
use crate::recorder::{FlightDump, FlightRecorder, OpDescription, OpState};
use crate::store::{RendezvousConfig, Store, StoreSpec};
use crate::watchdog::{Bounded, run_bounded};
use crate::watchdog::{PendingOp, Tracker};
use crate::work::{End, Ends, Tracked, Work, WorkBuffers};

/// Options of a [`ProcessGroup`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupOptions {
    /// NCCL streams per device (round robin across communicators); used by
    /// the operations issued with [`StreamMode::Separate`].
    pub streams_per_device: usize,
    /// Which stream operations run on. Default [`StreamMode::Caller`];
    /// override per call with [`ProcessGroup::with_stream_mode`] (e.g.
    /// [`StreamMode::Separate`] for an operation that should overlap
    /// compute queued after it).
    pub stream_mode: StreamMode,
    /// Nonblocking or blocking NCCL communicators. Default
    /// [`CommMode::Blocking`] (as PyTorch's), the one whose per-operation
    /// cost stays near nccl-tensor's at world sizes above 1 (the README's
    /// world-size table has the figures).
    pub comm_mode: CommMode,
    /// Create the NCCL streams with the device's highest priority.
    pub high_priority: bool,
    /// How long each of the two steps of creating a communicator may take:
    /// waiting in the store for another rank's unique id, then NCCL's
    /// init, which waits for every rank to join. Past it the communicators
    /// are aborted (with [`CommMode::Blocking`], the init is left to finish
    /// or hang on a thread of its own), the error names the ranks that
    /// never joined, and the group fails (the ranks no longer agree on what
    /// to create next). Default 10 min.
    pub timeout: Duration,
    /// How long each operation may run on the GPU before the watchdog
    /// fails the group (override per call with
    /// [`ProcessGroup::with_op_timeout`]). Default 10 min.
    pub op_timeout: Duration,
    /// How long an abort may take before it is left running on its own
    /// thread and reported as stalled. Default 10 s.
    pub abort_timeout: Duration,
    /// What the watchdog does after it fails the group.
    pub on_failure: FailurePolicy,
    /// How many operations the flight recorder keeps. Default 2048.
    pub recorder_capacity: usize,
    /// Where the flight recorder's JSON dump is written when the group
    /// fails or is aborted (`None`: not written). Default: the folder in
    /// `NCCL_GROUP_DUMP_DIR`, else the system's temporary folder.
    pub dump_dir: Option<PathBuf>,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self {
            streams_per_device: 1,
            stream_mode: StreamMode::Caller,
            comm_mode: CommMode::Blocking,
            high_priority: false,
            timeout: crate::store::DEFAULT_TIMEOUT,
            op_timeout: DEFAULT_OP_TIMEOUT,
            abort_timeout: Duration::from_secs(10),
            on_failure: FailurePolicy::ReturnErrors,
            recorder_capacity: 2048,
            dump_dir: Some(
                std::env::var_os(DUMP_DIR_VARIABLE).map_or_else(std::env::temp_dir, PathBuf::from),
            ),
        }
    }
}

/// Which stream a group's operations run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamMode {
    /// On the group's own NCCL streams (the spec's design): the NCCL stream
    /// waits for an event recorded on the caller's stream, and
    /// [`Work::wait`] makes the caller's stream wait for the operation's
    /// end. The caller's stream is free for other work meanwhile (compute
    /// overlaps communication), at the price of the handoff: two event
    /// records and two stream waits per operation.
    Separate,
    /// On the caller's stream: no event handoff between streams (three
    /// driver calls fewer per operation, and no cross-stream latency on
    /// the GPU), [`Work::wait`] has nothing to do, but everything queued
    /// after the operation on that stream waits for it. For callers that
    /// wait at once anyway (as PyTorch's `async_op=False`). The default:
    /// the group's call then costs about what nccl-tensor's does.
    #[default]
    Caller,
}

/// Which kind of NCCL communicator a group creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommMode {
    /// Nonblocking communicators: NCCL never blocks the calling thread, so
    /// every wait (creation, an operation's enqueue) is polled and bounded
    /// by a deadline, and an abort interrupts any of them. But NCCL 2.28
    /// ends every group that involves other ranks on a new thread of its
    /// own and answers `ncclInProgress`, which the group then waits out:
    /// some 30 to 45 us per operation on an H200 (a send and a receive to
    /// self, against 1.2 to 2.4 us on a blocking communicator; see the
    /// README). At world size 1 NCCL shortcuts the collectives, so their
    /// cost there does not show it. For whoever needs an abort to
    /// interrupt any call, even one stuck inside NCCL before its deadline.
    Nonblocking,
    /// Blocking communicators: operations are enqueued on the calling
    /// thread at NCCL's normal cost. Creation is still bounded by
    /// [`GroupOptions::timeout`]: the init runs on a helper thread, which a
    /// timeout leaves behind (it ends when NCCL gives up or the missing
    /// ranks come; each such timeout leaves one). An enqueue that blocks (a
    /// peer that never connects) is seen by the watchdog once it passes
    /// the operation's timeout: it fails the group, and the abort releases
    /// the NCCL call (as PyTorch's watchdog does). An NCCL error returned
    /// by an operation's calls fails the group as well, since part of the
    /// operation may have launched. `destroy` runs each finalize on a
    /// helper thread bounded by the timeout. The default.
    #[default]
    Blocking,
}

/// The default [`GroupOptions::op_timeout`] (as PyTorch's NCCL process group).
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(600);

/// The environment variable that sets the default [`GroupOptions::dump_dir`].
pub const DUMP_DIR_VARIABLE: &str = "NCCL_GROUP_DUMP_DIR";

impl GroupOptions {
    /// With `streams` NCCL streams per device.
    pub fn with_streams_per_device(mut self, streams: usize) -> Self {
        self.streams_per_device = streams;
        self
    }

    /// With operations on this stream ([`StreamMode`]).
    pub fn with_stream_mode(mut self, mode: StreamMode) -> Self {
        self.stream_mode = mode;
        self
    }

    /// With this kind of NCCL communicator ([`CommMode`]).
    pub fn with_comm_mode(mut self, mode: CommMode) -> Self {
        self.comm_mode = mode;
        self
    }

    /// With high-priority NCCL streams.
    pub fn with_high_priority(mut self, high: bool) -> Self {
        self.high_priority = high;
        self
    }

    /// With this communicator-creation timeout ([`GroupOptions::timeout`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// With this default per-operation timeout.
    pub fn with_op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// With this bound on aborts.
    pub fn with_abort_timeout(mut self, timeout: Duration) -> Self {
        self.abort_timeout = timeout;
        self
    }

    /// With this failure policy.
    pub fn with_failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = policy;
        self
    }

    /// Keeping the last `capacity` operations in the flight recorder.
    pub fn with_recorder_capacity(mut self, capacity: usize) -> Self {
        self.recorder_capacity = capacity;
        self
    }

    /// Writing flight-recorder dumps to `dir` (`None`: not at all).
    pub fn with_dump_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.dump_dir = dir;
        self
    }
}

const LIVE: u8 = 0;
const ABORTED: u8 = 1;
const DESTROYED: u8 = 2;
const FAILED: u8 = 3;

struct Inner {
    cache: CommCache<NcclFactory>,
    state: AtomicU8,
    failure: OnceLock<Arc<Failure>>,
    tracker: Tracker,
    recorder: FlightRecorder,
}

/// A group of processes running collectives on GPU tensors: the
/// multi-device cached process group of the spec, with its TODOs solved.
///
/// * Communicators are cached per ordered list of local devices (and per
///   pair of processes for send/recv); each key is created exactly once
///   even when many threads ask at once. Rank 0 (or the lower rank of a
///   pair) creates the unique id and publishes it in the store under a
///   key scoped by group name and generation. Creation is bounded by
///   [`GroupOptions::timeout`].
/// * Every operation records an event on the caller's stream that the
///   NCCL stream waits for, enqueues inside one group call, records an end
///   event, and returns a [`Work`] that owns the tensors until the GPU is
///   done with them. ([`StreamMode::Caller`] runs operations on the
///   caller's stream instead, with no handoff, for the whole group or per
///   call with [`ProcessGroup::with_stream_mode`].)
/// * Every operation has a deadline ([`GroupOptions::op_timeout`], or
///   [`ProcessGroup::with_op_timeout`] per call). The process's watchdog
///   thread polls the end events and the communicators' asynchronous
///   errors; on a timeout or an error it aborts the communicators and
///   fails the group: every later call and every waiter gets
///   [`GroupError::Failed`], which names the operation, its sequence
///   number, the rank, the sizes, how long it ran and which ranks lag.
/// * A flight recorder keeps the last operations ([`ProcessGroup::flight_record`]),
///   written as JSON on failure and abort ([`GroupOptions::dump_dir`]).
/// * Thread-safe: any thread may issue operations (the communicator is
///   locked while they are enqueued). All processes must still issue the
///   group's collectives in the same order, as with any NCCL program.
/// * [`ProcessGroup::abort`] works from any thread; afterwards every call
///   fails and a new group may be created under the same name. Dropping
///   never blocks on other processes.
///
/// Operations take tensors by value and give them back from
/// [`Work::wait`]; when they fail before enqueueing, the [`OpError`]
/// carries them back.
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<Inner>,
    op_timeout: Duration,
    stream_mode: StreamMode,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.inner.cache.membership();
        f.debug_struct("ProcessGroup")
            .field("name", &m.name)
            .field("rank", &m.rank)
            .field("world_size", &m.world_size)
            .field("generation", &m.generation)
            .field("op_timeout", &self.op_timeout)
            .field("stream_mode", &self.stream_mode)
            .finish()
    }
}

/// The result of an operation: its [`Work`], or the error with the buffers
/// (boxed: failures are rare, and the success path stays small).
pub type OpResult<B> = std::result::Result<Work<B>, Box<OpError<B>>>;

/// What the flight recorder notes about an operation before it is issued.
#[derive(Clone, Copy)]
struct OpInfo {
    op: &'static str,
    dtype: Option<DataType>,
    count: usize,
    peer: Option<usize>,
}

impl OpInfo {
    fn of<T: NcclType>(op: &'static str, count: usize, peer: Option<usize>) -> Self {
        Self {
            op,
            dtype: Some(T::DATA_TYPE),
            count,
            peer,
        }
    }

    fn root(root: i32) -> Option<usize> {
        usize::try_from(root).ok()
    }
}

impl ProcessGroup {
    /// Joins the group `name` as process `rank` of `world_size`, meeting
    /// the others in `store`. `store_address` only appears in error
    /// messages (for the TCP store: rank 0's address).
    ///
    /// # Errors
    /// A store failure, an invalid rank, or no watchdog thread.
    pub fn new(
        name: &str,
        rank: usize,
        world_size: usize,
        store: Arc<dyn Store>,
        store_address: impl Into<String>,
        options: GroupOptions,
    ) -> Result<Self> {
        let membership = Membership::join(
            name,
            rank,
            world_size,
            store,
            store_address.into(),
            options.timeout,
        )?;
        let (op_timeout, stream_mode) = (options.op_timeout, options.stream_mode);
        let recorder = FlightRecorder::new(options.recorder_capacity);
        let factory = NcclFactory {
            pools: OnceMap::new(),
            options,
        };
        let inner = Arc::new(Inner {
            cache: CommCache::new(membership, factory),
            state: AtomicU8::new(LIVE),
            failure: OnceLock::new(),
            tracker: Tracker::default(),
            recorder,
        });
        let watched: std::sync::Weak<dyn crate::watchdog::Watched> =
            Arc::downgrade(&(Arc::clone(&inner) as Arc<dyn crate::watchdog::Watched>));
        crate::watchdog::watch(watched).map_err(|error| GroupError::InvalidArgument {
            argument: "process",
            expected: "a process that can start the watchdog thread".to_string(),
            given: error.to_string(),
        })?;
        Ok(Self {
            inner,
            op_timeout,
            stream_mode,
        })
    }

    /// Joins the group `name` the way torchrun and Slurm launch processes:
    /// `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and the store
    /// options of [`RendezvousConfig`] (rank 0 hosts the TCP store), with
    /// the default options and the store's timeout for communicator creation.
    ///
    /// # Errors
    /// A missing or malformed variable (named in the error), or a store failure.
    pub fn from_env(name: &str) -> Result<Self> {
        let timeout = RendezvousConfig::from_env()?.timeout;
        Self::from_env_with(name, GroupOptions::default().with_timeout(timeout))
    }

    /// [`ProcessGroup::from_env`] with these options.
    ///
    /// # Errors
    /// As [`ProcessGroup::from_env`].
    pub fn from_env_with(name: &str, options: GroupOptions) -> Result<Self> {
        let config = RendezvousConfig::from_env()?;
        let address = match &config.store {
            StoreSpec::Tcp { addr, port } => format!("tcp://{addr}:{port}"),
            StoreSpec::File { dir } => format!("file://{}", dir.display()),
        };
        let store: Arc<dyn Store> = Arc::from(config.connect()?);
        Self::new(
            name,
            config.rank,
            config.world_size,
            store,
            address,
            options,
        )
    }

    /// The same group, whose operations issued through the returned handle
    /// get `timeout` instead of [`GroupOptions::op_timeout`]:
    /// `group.with_op_timeout(Duration::from_secs(5)).all_reduce(...)`.
    /// Cheap (one reference count).
    pub fn with_op_timeout(&self, timeout: Duration) -> ProcessGroup {
        ProcessGroup {
            op_timeout: timeout,
            ..self.clone()
        }
    }

    /// The timeout this handle gives each operation.
    pub fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    /// The same group, whose operations issued through the returned handle
    /// run on the stream `mode` picks instead of
    /// [`GroupOptions::stream_mode`]'s, on the same communicators. PyTorch's
    /// `async_op` choice per call: `StreamMode::Caller` for an operation
    /// whose result the caller's stream needs next anyway (no handoff, and
    /// no cross-stream latency on the GPU), `StreamMode::Separate` for one
    /// that should overlap the compute queued after it. Mixing the two on
    /// one caller's stream keeps the order: each [`Work::wait`] makes that
    /// stream wait, and each operation on the NCCL stream waits for it.
    /// Cheap (one reference count).
    pub fn with_stream_mode(&self, mode: StreamMode) -> ProcessGroup {
        ProcessGroup {
            stream_mode: mode,
            ..self.clone()
        }
    }

    /// The stream mode of this handle's operations.
    pub fn stream_mode(&self) -> StreamMode {
        self.stream_mode
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.inner.cache.membership().rank
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.inner.cache.membership().world_size
    }

    /// The options the group was created with.
    pub fn options(&self) -> &GroupOptions {
        &self.inner.cache.factory().options
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.inner.cache.membership().name
    }

    /// Why the group failed or was aborted: a timeout or error the watchdog
    /// saw, an operation left in flight by an error, a communicator that
    /// could not be created in time, or [`ProcessGroup::abort`].
    pub fn failure(&self) -> Option<Arc<Failure>> {
        self.inner.failure.get().cloned()
    }

    /// The flight recorder's records now, with this process's progress.
    pub fn flight_record(&self) -> FlightDump {
        self.inner
            .dump("on request".to_string(), Vec::new(), Vec::new())
    }

    /// How many operations the watchdog is still waiting for.
    pub fn pending_operations(&self) -> usize {
        self.inner.tracker.len()
    }

    fn check_live(&self) -> Result<()> {
        self.inner.check_live()
    }

    /// Whether `error`, returned by an operation's NCCL calls, may have
    /// left part of the operation launched: an error NCCL itself returned
    /// on a blocking communicator (a multi-call group may fail after some
    /// of its calls launched). A nonblocking communicator reports those
    /// after accepting the calls, and argument checks fail before any.
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
        match self.stream_mode {
            StreamMode::Separate => {
                sync_start(member, caller)?;
                Ok(&member.stream)
            }
            StreamMode::Caller => Ok(caller),
        }
    }

    /// The communicators for `key`. A group aborted while they were being
    /// created aborts them too (`abort` only sees those created before it).
    fn comms_for(&self, key: &CommKey) -> Result<Arc<LocalComms>> {
        let comms = match self.inner.cache.get(key) {
            Ok(comms) => comms,
            Err(error @ GroupError::InitTimeout { .. }) => {
                // A retry would meet stale ids and announcements in the
                // store: the group ends here (this caller gets the init
                // error itself, later calls the failure).
                let cause = FailureCause::Creation {
                    error: error.to_string(),
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
    fn classify(&self, error: GroupError) -> GroupError {
        if matches!(error, GroupError::InitTimeout { .. }) {
            return error;
        }
        self.check_live().err().unwrap_or(error)
    }

    /// Notes an operation NCCL accepted, issued at `now`, in the flight
    /// recorder (its sequence numbers). Operations refused by a check are
    /// not recorded, so every rank numbers the same collectives alike.
    fn record(&self, info: OpInfo, key: &CommKey, now: Instant) -> u64 {
        let description = OpDescription {
            op: info.op,
            dtype: info.dtype,
            count: info.count,
            peer: info.peer,
            devices: *key.devices(),
            collective: matches!(key, CommKey::Collective(_)),
        };
        self.inner.recorder.record(&description, now).seq
    }

    /// Records the end of an enqueued operation (`record_ends`) and hands
    /// it to the watchdog. The ends are recorded inside the tracker's lock,
    /// so the tracker holds the operations in the order their ends were
    /// recorded on each stream, which lets it reap a backlog on one stream
    /// with a binary search (see `watchdog::reap`).
    fn track(
        &self,
        seq: u64,
        enqueued: Instant,
        record_ends: impl FnOnce() -> Result<Ends>,
    ) -> Result<Arc<Tracked>> {
        let inner = &self.inner;
        let mut reaped_at = None;
        let op = inner.tracker.push_with::<_, GroupError>(
            || {
                let op = Arc::new(Tracked::new(record_ends()?));
                let pending = PendingOp {
                    seq,
                    enqueued,
                    timeout: self.op_timeout,
                    completion: Arc::clone(&op) as Arc<dyn crate::watchdog::Completion>,
                };
                Ok((pending, op))
            },
            // One timestamp for every operation one reap finds finished.
            |done| {
                let at = *reaped_at.get_or_insert_with(Instant::now);
                inner.recorder.finish(done, OpState::Completed, at)
            },
        )?;
        // A failure that drained the tracker just before the push missed
        // this operation: mark it here.
        if let Some(failure) = inner.failure.get() {
            crate::watchdog::Completion::fail(&*op, failure);
        }
        Ok(op)
    }

    /// Enqueues one operation on one local device: the NCCL stream waits
    /// for the caller's stream (unless the operation runs on the caller's
    /// stream), `issue` enqueues, an end event is recorded.
    fn run_one<B: WorkBuffers>(
        &self,
        info: OpInfo,
        key: impl FnOnce(DeviceList) -> CommKey,
        device: usize,
        mut buffers: B,
        caller: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> OpResult<B> {
        // Set once NCCL accepted the operation: its sequence number and the
        // stream it is on.
        let mut issued: Option<(u64, Arc<CudaStream>)> = None;
        let attempt = (|| {
            self.check_live()?;
            check_stream(caller, device)?;
            let key = key(DeviceList::one(device)?);
            let comms = self.comms_for(&key)?;
            let member = &comms.members[0];
            let stream = self.op_stream(member, caller)?;
            let enqueued = Instant::now();
            let seq = {
                let comm = member.lock();
                let _enqueueing = member.enqueueing(enqueued, self.op_timeout);
                let status = match issue(&comm, stream, &mut buffers) {
                    Ok(status) => status,
                    Err(error) => {
                        if self.may_have_launched(&error) {
                            let seq = self.record(info, &key, enqueued);
                            issued = Some((seq, Arc::clone(stream)));
                        }
                        return Err(error.into());
                    }
                };
                let seq = self.record(info, &key, enqueued);
                issued = Some((seq, Arc::clone(stream)));
                if status == Status::InProgress {
                    comm.core().wait_ready_within(info.op, self.op_timeout)?;
                }
                seq
            };
            self.track(seq, enqueued, || {
                end_event(member, stream, caller).map(Ends::One)
            })
        })();
        match attempt {
            Ok(op) => Ok(Work::new(buffers, op)),
            Err(error) => match issued {
                None => Err(self.failed_op(error, buffers)),
                Some((seq, stream)) => {
                    order_after_stream(&buffers, &stream);
                    Err(self.failed_in_flight(error, seq, buffers))
                }
            },
        }
    }

    /// Enqueues one operation per local device inside one NCCL group.
    fn run_many<B: WorkBuffers + Located>(
        &self,
        info: OpInfo,
        key: impl FnOnce(DeviceList) -> CommKey,
        mut buffers: Vec<B>,
        callers: &[Arc<CudaStream>],
        check: impl Fn(&CommInfo, &B) -> nccl_tensor::Result<()>,
        issue: impl Fn(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> OpResult<Vec<B>> {
        // Set once the NCCL group is open (with the stream of each device's
        // part): from then on an error leaves a (partial) operation to NCCL.
        let mut issued: Option<(u64, Vec<Arc<CudaStream>>)> = None;
        let attempt = (|| {
            self.check_live()?;
            let devices = DeviceList::new(buffers.iter().map(Located::device))?;
            if callers.len() != devices.len() {
                return Err(GroupError::InvalidArgument {
                    argument: "streams",
                    expected: format!("one caller stream per tensor ({})", devices.len()),
                    given: format!("{} streams", callers.len()),
                });
            }
            for (caller, device) in callers.iter().zip(devices.iter()) {
                check_stream(caller, device)?;
            }
            let key = key(devices);
            let comms = self.comms_for(&key)?;
            let (seq, enqueued, streams) = {
                let guards: Vec<_> = comms.members.iter().map(Member::lock).collect();
                let started = Instant::now();
                let _enqueueing: Vec<_> = comms
                    .members
                    .iter()
                    .map(|member| member.enqueueing(started, self.op_timeout))
                    .collect();
                // Every device's arguments are checked before any is
                // enqueued: a part left in the group would launch alone
                // and wait forever for its peers.
                for (comm, part) in guards.iter().zip(&buffers) {
                    check(&comm.info(), part)?;
                }
                let streams = comms
                    .members
                    .iter()
                    .zip(callers)
                    .map(|(member, caller)| self.op_stream(member, caller))
                    .collect::<Result<Vec<_>>>()?;
                let enqueued = Instant::now();
                let seq = self.record(info, &key, enqueued);
                issued = Some((seq, streams.iter().map(|&s| Arc::clone(s)).collect()));
                let group = Group::start()?;
                for ((comm, stream), part) in guards.iter().zip(&streams).zip(buffers.iter_mut()) {
                    let _ = issue(comm, stream, part)?;
                }
                if group.end()? == Status::InProgress {
                    for comm in &guards {
                        comm.core().wait_ready_within(info.op, self.op_timeout)?;
                    }
                }
                (seq, enqueued, streams)
            };
            self.track(seq, enqueued, || {
                comms
                    .members
                    .iter()
                    .zip(streams)
                    .zip(callers)
                    .map(|((member, stream), caller)| end_event(member, stream, caller))
                    .collect::<Result<Vec<_>>>()
                    .map(Ends::Many)
            })
        })();
        match attempt {
            Ok(op) => Ok(Work::new(buffers, op)),
            Err(error) => match issued {
                None => Err(self.failed_op(error, buffers)),
                Some((seq, streams)) => {
                    for (stream, part) in streams.iter().zip(&buffers) {
                        order_after_stream(part, stream);
                    }
                    Err(self.failed_in_flight(error, seq, buffers))
                }
            },
        }
    }

    /// The error of an operation that failed before it was enqueued, with
    /// its buffers.
    fn failed_op<B>(&self, error: GroupError, buffers: B) -> Box<OpError<B>> {
        Box::new(OpError {
            error: self.classify(error),
            buffers,
        })
    }

    /// The error of an operation NCCL accepted before something failed:
    /// it is in flight with no end to track, so the group fails (its
    /// communicators are aborted, which ends the operation); the buffers
    /// come back with their release ordered after it.
    fn failed_in_flight<B>(&self, error: GroupError, seq: u64, buffers: B) -> Box<OpError<B>> {
        self.inner
            .recorder
            .finish(seq, OpState::Failed, Instant::now());
        let cause = FailureCause::Enqueue {
            error: error.to_string(),
        };
        self.inner.fail(cause, Some(seq), Finish::Here);
        self.failed_op(error, buffers)
    }

    /// Runs NCCL calls of your own on the group's communicator for
    /// `device` (its collective communicator, the one all_reduce uses),
    /// with everything the group's own operations get: the two-way event
    /// sync with `stream`, the deadline and watchdog, the flight recorder
    /// (as operation `name`), and a [`Work`] that owns `buffers`. `issue`
    /// gets the communicator and the stream to enqueue on (the NCCL
    /// stream, or `stream` itself with [`StreamMode::Caller`]); every
    /// rank must issue matching calls, as with any collective. The group's
    /// communicators are nonblocking (NCCL may answer `ncclInProgress`), so
    /// `issue` runs inside one NCCL group, whose end is waited for: it may
    /// make several calls.
    ///
    /// # Errors
    /// As the group's operations: an aborted or failed group, a stream on
    /// another device, a failed rendezvous, or `issue`'s error, with the
    /// buffers handed back.
    pub fn custom<B: WorkBuffers>(
        &self,
        name: &'static str,
        device: usize,
        buffers: B,
        stream: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> OpResult<B> {
        let info = OpInfo {
            op: name,
            dtype: None,
            count: 0,
            peer: None,
        };
        // The group's communicators are nonblocking: inside one NCCL group
        // only its end may report "in progress", which is then waited for.
        let grouped = |comm: &Communicator, nccl_stream: &Arc<CudaStream>, buffers: &mut B| {
            let group = Group::start()?;
            let issued = issue(comm, nccl_stream, buffers);
            let ended = group.end();
            let (issued, ended) = (issued?, ended?);
            Ok(
                if issued == Status::InProgress || ended == Status::InProgress {
                    Status::InProgress
                } else {
                    Status::Success
                },
            )
        };
        self.run_one(info, CommKey::Collective, device, buffers, stream, grouped)
    }

    /// Reduces `tensor` across every process, in place
    /// (`torch.distributed.all_reduce`).
    ///
    /// # Errors
    /// An aborted group, a failed rendezvous or argument check, or NCCL's
    /// error, with the tensor handed back.
    pub fn all_reduce<T: NcclType>(
        &self,
        tensor: Tensor<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Tensor<T>> {
        let info = OpInfo::of::<T>("all_reduce", tensor.len(), None);
        let device = tensor.device();
        self.run_one(
            info,
            CommKey::Collective,
            device,
            tensor,
            stream,
            |c, s, t| c.all_reduce(t, op, s),
        )
    }

    /// [`ProcessGroup::all_reduce`] over one tensor per local GPU (the
    /// spec's list form; global rank = process rank x devices + index).
    /// `streams[i]` is the caller's stream on `tensors[i]`'s device.
    ///
    /// # Errors
    /// As `all_reduce`, plus a device twice or a stream count mismatch.
    pub fn all_reduce_multi<T: NcclType>(
        &self,
        tensors: Vec<Tensor<T>>,
        op: ReduceOp,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<Tensor<T>>> {
        let info = OpInfo::of::<T>("all_reduce", first_len(&tensors), None);
        self.run_many(
            info,
            CommKey::Collective,
            tensors,
            streams,
            |info, t| checks::all_reduce(info, None, &t.desc(), op.into()),
            |c, s, t| c.all_reduce(t, op, s),
        )
    }

    /// Copies `tensor` from global rank `root` to every rank, in place.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce`], plus `root` out of range.
    pub fn broadcast<T: NcclType>(
        &self,
        tensor: Tensor<T>,
        root: i32,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Tensor<T>> {
        let info = OpInfo::of::<T>("broadcast", tensor.len(), OpInfo::root(root));
        let device = tensor.device();
        self.run_one(
            info,
            CommKey::Collective,
            device,
            tensor,
            stream,
            |c, s, t| c.broadcast(t, root, s),
        )
    }

    /// [`ProcessGroup::broadcast`] over one tensor per local GPU.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce_multi`].
    pub fn broadcast_multi<T: NcclType>(
        &self,
        tensors: Vec<Tensor<T>>,
        root: i32,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<Tensor<T>>> {
        let info = OpInfo::of::<T>("broadcast", first_len(&tensors), OpInfo::root(root));
        self.run_many(
            info,
            CommKey::Collective,
            tensors,
            streams,
            |info, t| checks::broadcast(info, None, &t.desc(), root),
            |c, s, t| c.broadcast(t, root, s),
        )
    }

    /// Reduces `tensor` across every process into global rank `root`, in place.
    ///
    /// # Errors
    /// As [`ProcessGroup::broadcast`].
    pub fn reduce<T: NcclType>(
        &self,
        tensor: Tensor<T>,
        op: ReduceOp,
        root: i32,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Tensor<T>> {
        let info = OpInfo::of::<T>("reduce", tensor.len(), OpInfo::root(root));
        let device = tensor.device();
        self.run_one(
            info,
            CommKey::Collective,
            device,
            tensor,
            stream,
            |c, s, t| c.reduce(t, op, root, s),
        )
    }

    /// [`ProcessGroup::reduce`] over one tensor per local GPU.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce_multi`].
    pub fn reduce_multi<T: NcclType>(
        &self,
        tensors: Vec<Tensor<T>>,
        op: ReduceOp,
        root: i32,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<Tensor<T>>> {
        let info = OpInfo::of::<T>("reduce", first_len(&tensors), OpInfo::root(root));
        self.run_many(
            info,
            CommKey::Collective,
            tensors,
            streams,
            |info, t| checks::reduce(info, None, &t.desc(), op.into(), root),
            |c, s, t| c.reduce(t, op, root, s),
        )
    }

    /// Gathers every rank's `input` into `output` (world x input elements),
    /// in rank order (`all_gather_into_tensor`). The work holds
    /// `(output, input)`.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce`], plus the length checks.
    pub fn all_gather<T: NcclType>(
        &self,
        output: Tensor<T>,
        input: Tensor<T>,
        stream: &Arc<CudaStream>,
    ) -> OpResult<(Tensor<T>, Tensor<T>)> {
        let info = OpInfo::of::<T>("all_gather", input.len(), None);
        let device = output.device();
        self.run_one(
            info,
            CommKey::Collective,
            device,
            (output, input),
            stream,
            |c, s, (o, i)| c.all_gather_into_tensor(o, &*i, s),
        )
    }

    /// [`ProcessGroup::all_gather`] with one `(output, input)` per local GPU.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce_multi`].
    pub fn all_gather_multi<T: NcclType>(
        &self,
        pairs: Vec<(Tensor<T>, Tensor<T>)>,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<(Tensor<T>, Tensor<T>)>> {
        let info = OpInfo::of::<T>("all_gather", first_len(&pairs), None);
        self.run_many(
            info,
            CommKey::Collective,
            pairs,
            streams,
            |info, (o, i)| checks::all_gather_into_tensor(info, &i.desc(), &o.desc()),
            |c, s, (o, i)| c.all_gather_into_tensor(o, &*i, s),
        )
    }

    /// Reduces `input` (world x output elements) and scatters it: each rank
    /// gets its block in `output`. The work holds `(output, input)`.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_gather`].
    pub fn reduce_scatter<T: NcclType>(
        &self,
        output: Tensor<T>,
        input: Tensor<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> OpResult<(Tensor<T>, Tensor<T>)> {
        let info = OpInfo::of::<T>("reduce_scatter", input.len(), None);
        let device = output.device();
        self.run_one(
            info,
            CommKey::Collective,
            device,
            (output, input),
            stream,
            |c, s, (o, i)| c.reduce_scatter_tensor(o, &*i, op, s),
        )
    }

    /// [`ProcessGroup::reduce_scatter`] with one `(output, input)` per local GPU.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce_multi`].
    pub fn reduce_scatter_multi<T: NcclType>(
        &self,
        pairs: Vec<(Tensor<T>, Tensor<T>)>,
        op: ReduceOp,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<(Tensor<T>, Tensor<T>)>> {
        let info = OpInfo::of::<T>("reduce_scatter", first_len(&pairs), None);
        self.run_many(
            info,
            CommKey::Collective,
            pairs,
            streams,
            |info, (o, i)| checks::reduce_scatter_tensor(info, &i.desc(), &o.desc(), op.into()),
            |c, s, (o, i)| c.reduce_scatter_tensor(o, &*i, op, s),
        )
    }

    /// Block `j` of `input` goes to rank `j`; `output` gets the blocks in
    /// rank order (`all_to_all_single`). The work holds `(output, input)`.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_gather`].
    pub fn all_to_all<T: NcclType>(
        &self,
        output: Tensor<T>,
        input: Tensor<T>,
        stream: &Arc<CudaStream>,
    ) -> OpResult<(Tensor<T>, Tensor<T>)> {
        let info = OpInfo::of::<T>("all_to_all", input.len(), None);
        let device = output.device();
        self.run_one(
            info,
            CommKey::Collective,
            device,
            (output, input),
            stream,
            |c, s, (o, i)| c.all_to_all_single(o, &*i, s),
        )
    }

    /// [`ProcessGroup::all_to_all`] with one `(output, input)` per local GPU.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce_multi`].
    pub fn all_to_all_multi<T: NcclType>(
        &self,
        pairs: Vec<(Tensor<T>, Tensor<T>)>,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<(Tensor<T>, Tensor<T>)>> {
        let info = OpInfo::of::<T>("all_to_all", first_len(&pairs), None);
        self.run_many(
            info,
            CommKey::Collective,
            pairs,
            streams,
            |info, (o, i)| checks::all_to_all_single(info, &i.desc(), &o.desc()),
            |c, s, (o, i)| c.all_to_all_single(o, &*i, s),
        )
    }

    /// The pair key and the peer's rank in the pair communicator.
    fn pair(
        &self,
        peer: usize,
        what: &'static str,
    ) -> Result<(impl FnOnce(DeviceList) -> CommKey, i32)> {
        let rank = self.rank();
        if peer >= self.world_size() || peer == rank {
            return Err(GroupError::InvalidArgument {
                argument: what,
                expected: format!(
                    "another process's rank in 0..{} (this is rank {rank})",
                    self.world_size()
                ),
                given: peer.to_string(),
            });
        }
        let (low, high) = (rank.min(peer), rank.max(peer));
        Ok((
            move |devices| CommKey::PointToPoint { low, high, devices },
            i32::from(peer == high),
        ))
    }

    /// Sends `tensor` to process `dst` over the pair's own communicator.
    ///
    /// # Errors
    /// `dst` is this process or out of range, or as [`ProcessGroup::all_reduce`].
    pub fn send<T: NcclType>(
        &self,
        tensor: Tensor<T>,
        dst: usize,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Tensor<T>> {
        let (key, peer) = match self.pair(dst, "dst") {
            Ok(pair) => pair,
            Err(error) => {
                return Err(Box::new(OpError {
                    error,
                    buffers: tensor,
                }));
            }
        };
        let info = OpInfo::of::<T>("send", tensor.len(), Some(dst));
        let device = tensor.device();
        self.run_one(info, key, device, tensor, stream, |c, s, t| {
            c.send(&*t, peer, s)
        })
    }

    /// Receives into `tensor` from process `src`.
    ///
    /// # Errors
    /// As [`ProcessGroup::send`].
    pub fn recv<T: NcclType>(
        &self,
        tensor: Tensor<T>,
        src: usize,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Tensor<T>> {
        let (key, peer) = match self.pair(src, "src") {
            Ok(pair) => pair,
            Err(error) => {
                return Err(Box::new(OpError {
                    error,
                    buffers: tensor,
                }));
            }
        };
        let info = OpInfo::of::<T>("recv", tensor.len(), Some(src));
        let device = tensor.device();
        self.run_one(info, key, device, tensor, stream, |c, s, t| {
            c.recv(t, peer, s)
        })
    }

    /// [`ProcessGroup::send`] from one tensor per local GPU: local device
    /// `i` sends to process `dst`'s device `i` (both processes pass the same
    /// number of tensors), over the pair's own communicator, in one group.
    ///
    /// # Errors
    /// As [`ProcessGroup::send`], plus those of
    /// [`ProcessGroup::all_reduce_multi`].
    pub fn send_multi<T: NcclType>(
        &self,
        tensors: Vec<Tensor<T>>,
        dst: usize,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<Tensor<T>>> {
        let (key, peer) = match self.pair(dst, "dst") {
            Ok(pair) => pair,
            Err(error) => {
                return Err(Box::new(OpError {
                    error,
                    buffers: tensors,
                }));
            }
        };
        let offset = peer_offset(peer, tensors.len());
        let info = OpInfo::of::<T>("send", first_len(&tensors), Some(dst));
        self.run_many(
            info,
            key,
            tensors,
            streams,
            |info, t| checks::point_to_point("send", "dst", info, &t.desc(), info.rank + offset),
            |c, s, t| c.send(&*t, c.rank() + offset, s),
        )
    }

    /// [`ProcessGroup::recv`] into one tensor per local GPU: local device
    /// `i` receives from process `src`'s device `i`.
    ///
    /// # Errors
    /// As [`ProcessGroup::send_multi`].
    pub fn recv_multi<T: NcclType>(
        &self,
        tensors: Vec<Tensor<T>>,
        src: usize,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<Tensor<T>>> {
        let (key, peer) = match self.pair(src, "src") {
            Ok(pair) => pair,
            Err(error) => {
                return Err(Box::new(OpError {
                    error,
                    buffers: tensors,
                }));
            }
        };
        let offset = peer_offset(peer, tensors.len());
        let info = OpInfo::of::<T>("recv", first_len(&tensors), Some(src));
        self.run_many(
            info,
            key,
            tensors,
            streams,
            |info, t| checks::point_to_point("recv", "src", info, &t.desc(), info.rank + offset),
            |c, s, t| c.recv(t, c.rank() + offset, s),
        )
    }

    /// Synchronises every process: work queued on `stream` after the
    /// returned work's `wait()` starts once all have reached the barrier.
    ///
    /// # Errors
    /// As [`ProcessGroup::all_reduce`].
    pub fn barrier(&self, stream: &Arc<CudaStream>) -> Result<Work<()>> {
        let info = OpInfo {
            op: "barrier",
            dtype: None,
            count: 0,
            peer: None,
        };
        let device = stream.context().ordinal();
        self.run_one(info, CommKey::Collective, device, (), stream, |c, s, _| {
            c.barrier(s)
        })
        .map_err(|e| e.error)
    }

    /// Aborts every communicator of the group, from any thread; calls
    /// blocked in NCCL return, and every pending [`Work`] fails. Afterwards
    /// every call fails with [`GroupError::Aborted`]; a new group may reuse
    /// the name. The flight recorder is dumped ([`GroupOptions::dump_dir`]).
    /// On a group that already failed, waits (bounded) until the failure's
    /// own abort of the communicators has finished; a no-op on a group
    /// already aborted or destroyed.
    ///
    /// # Errors
    /// [`GroupError::AbortStalled`]: NCCL's abort had not returned within
    /// [`GroupOptions::abort_timeout`]; it was left running on its own
    /// thread and the group is unusable all the same.
    pub fn abort(&self) -> Result<()> {
        if self
            .inner
            .state
            .compare_exchange(LIVE, ABORTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return self.await_failure_abort();
        }
        match self.inner.abort() {
            AbortOutcome::Aborted(_) => Ok(()),
            AbortOutcome::Stalled(waited) => Err(GroupError::AbortStalled {
                name: self.name().to_string(),
                waited,
            }),
        }
    }

    /// `abort` on a group that is no longer live: a failed group's
    /// failure is aborting its communicators (on the watchdog's helper
    /// thread); wait for that, as long as it may take at most.
    fn await_failure_abort(&self) -> Result<()> {
        if self.inner.state.load(Ordering::Acquire) != FAILED {
            return Ok(());
        }
        let Some(failure) = self.inner.failure.get() else {
            return Ok(());
        };
        let bound = self.options().abort_timeout + health::EXCHANGE_WAIT + Duration::from_secs(1);
        let started = Instant::now();
        match failure.wait_details(bound).map(|details| &details.abort) {
            Some(AbortOutcome::Aborted(_)) => Ok(()),
            Some(AbortOutcome::Stalled(waited)) => Err(GroupError::AbortStalled {
                name: self.name().to_string(),
                waited: *waited,
            }),
            None => Err(GroupError::AbortStalled {
                name: self.name().to_string(),
                waited: started.elapsed(),
            }),
        }
    }

    /// Finalizes and destroys every communicator, together with the other
    /// processes (collective: all must call it). Afterwards every call
    /// fails with [`GroupError::Destroyed`]. Each finalize is bounded by
    /// [`GroupOptions::timeout`] (a blocking communicator's runs on a
    /// helper thread for that); past it the communicator is aborted.
    ///
    /// # Errors
    /// An aborted group, or a communicator failing to finalize in time (it
    /// is then aborted).
    pub fn destroy(&self) -> Result<()> {
        if self
            .inner
            .state
            .compare_exchange(LIVE, DESTROYED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return self.check_live();
        }
        self.inner.cache.close();
        let options = self.options();
        // In store-key order, the same on every process, so blocking
        // finalizes meet their peers.
        let mut first_error = None;
        for comms in self.inner.cache.clear() {
            let finalized = match options.comm_mode {
                CommMode::Blocking => {
                    let started = Instant::now();
                    let finalizing = Arc::clone(&comms);
                    match run_bounded("nccl-group-finalize", options.timeout, move || {
                        finalizing.finalize()
                    }) {
                        Bounded::Returned(result) => result,
                        Bounded::Stalled => Err(GroupError::Timeout {
                            operation: "finalizing the group's communicators",
                            waited: started.elapsed(),
                        }),
                    }
                }
                CommMode::Nonblocking => comms.finalize(),
            };
            if let Err(error) = finalized {
                comms.abort();
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The device an operation's buffers (one part of a list form) are on.
trait Located {
    fn device(&self) -> usize;
    /// Elements of the (first) input, for the flight recorder.
    fn input_len(&self) -> usize;
}

impl<T: NcclType> Located for Tensor<T> {
    fn device(&self) -> usize {
        Tensor::device(self)
    }
    fn input_len(&self) -> usize {
        self.len()
    }
}

/// An `(output, input)` pair is on its output's device (the checks refuse
/// an input elsewhere).
impl<T: NcclType> Located for (Tensor<T>, Tensor<T>) {
    fn device(&self) -> usize {
        self.0.device()
    }
    fn input_len(&self) -> usize {
        self.1.len()
    }
}

/// Elements of the first input of a list form (0 for an empty list, which
/// the device-list check refuses).
fn first_len<B: Located>(parts: &[B]) -> usize {
    parts.first().map_or(0, Located::input_len)
}

/// In a pair communicator of `devices` ranks per process, the distance from
/// a local rank to the same device of the peer (`peer` is the peer's index
/// in the pair: 1 when it is the higher rank).
fn peer_offset(peer: i32, devices: usize) -> i32 {
    let devices = devices as i32;
    if peer == 1 { devices } else { -devices }
}

/// Makes every stream that may free `buffers` wait for what `stream` has
/// queued so far (best effort: if CUDA cannot even record an event, the
/// stream is broken and nothing queued after it runs either).
fn order_after_stream<B: WorkBuffers>(buffers: &B, stream: &CudaStream) {
    if let Ok(event) = stream.context().new_event(None)
        && event.record(stream).is_ok()
    {
        let _ = buffers.order_after(&event);
    }
}

/// The caller's stream must be on the tensor's device.
fn check_stream(caller: &CudaStream, device: usize) -> Result<()> {
    let given = caller.context().ordinal();
    if given == device {
        Ok(())
    } else {
        Err(GroupError::InvalidArgument {
            argument: "stream",
            expected: format!("a stream on the tensor's device {device}"),
            given: format!("a stream on device {given}"),
        })
    }
}

/// The NCCL stream waits for what the caller's stream has queued so far.
fn sync_start(member: &Member, caller: &CudaStream) -> Result<()> {
    let start = member.pool.event()?;
    let synced = start
        .record(caller)
        .and_then(|()| member.stream.wait(&start))
        .map_err(GroupError::cuda(
            "making the NCCL stream wait for the caller's stream",
        ));
    // The wait has captured the event; it can be recorded again.
    member.pool.give_back(start);
    synced
}

/// Records the end of the operation on `stream`, the stream it ran on;
/// the caller's stream waits for it in [`Work::wait`] unless it is that
/// stream.
fn end_event(member: &Member, stream: &Arc<CudaStream>, caller: &Arc<CudaStream>) -> Result<End> {
    let event = member.pool.event()?;
    match event.record(stream) {
        Ok(()) => Ok(End {
            pool: Arc::clone(&member.pool),
            event,
            stream: Arc::clone(stream),
            caller: (!Arc::ptr_eq(stream, caller)).then(|| Arc::clone(caller)),
        }),
        Err(error) => {
            member.pool.give_back(event);
            Err(GroupError::cuda("recording the end event")(error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InProcessStore;

    #[test]
    fn handles_carry_their_own_stream_mode_and_timeout_over_one_group() {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
        let options = GroupOptions::default()
            .with_stream_mode(StreamMode::Caller)
            .with_dump_dir(None);
        let group = ProcessGroup::new("handles", 0, 1, store, "in-process", options)
            .expect("a group of one process needs no GPU to join");
        assert_eq!(group.stream_mode(), StreamMode::Caller);

        let separate = group
            .with_stream_mode(StreamMode::Separate)
            .with_op_timeout(Duration::from_secs(3));
        assert_eq!(separate.stream_mode(), StreamMode::Separate);
        assert_eq!(separate.op_timeout(), Duration::from_secs(3));
        assert!(format!("{separate:?}").contains("stream_mode: Separate"));
        // The handle is the same group: its communicators, watchdog and
        // options; the original handle keeps its own choices.
        assert!(Arc::ptr_eq(&group.inner, &separate.inner));
        assert_eq!(separate.options().stream_mode, StreamMode::Caller);
        assert_eq!(group.stream_mode(), StreamMode::Caller);
        assert_eq!(group.op_timeout(), DEFAULT_OP_TIMEOUT);
        assert_eq!(
            group.with_op_timeout(Duration::from_secs(1)).stream_mode(),
            StreamMode::Caller
        );
    }
}
