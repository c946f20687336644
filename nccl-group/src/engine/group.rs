//! [`ProcessGroup`]: collectives across processes, each driving one or
//! several local GPUs, over cached communicators with two-way event sync,
//! watched by the process's watchdog and recorded by a flight recorder.
//!
//!
//! The group's state ([`Inner`]) is shared by the engine's files, which
//! issue operations, fail the group and dump its records, and by
//! `crate::generations`, which makes the next generations and sub-groups.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::engine::release::Unfinished;
use crate::diagnostics::checks::Checker;
use crate::diagnostics::dumps::request::RequestWatch;
use crate::diagnostics::fingerprints::Fingerprints;
use crate::diagnostics::metrics::GroupMetrics;
use crate::diagnostics::recorder::FlightRecorder;
use crate::engine::cache::OnceMap;
use crate::engine::captures;
use crate::engine::comms::CommCache;
use crate::engine::factory::NcclFactory;
use crate::engine::generation::{Children, Succession};
use crate::engine::membership::Membership;
use crate::engine::pool::DevicePool;
use crate::engine::suspension::Suspension;
use crate::error::{GroupError, Result};
use crate::failure::Failure;
use crate::engine::presence::Presence;
use crate::health::alarm::Listener;
use crate::health::verify::{OutcomeScope, Verification};
use crate::health::watchdog::Tracker;
use crate::lineage::SubGroup;
use crate::options::{GroupOptions, StreamMode};
use crate::protocols::CHECKS;
use nccl_rendezvous::{RendezvousConfig, Store};

pub(crate) const LIVE: u8 = 0;
pub(crate) const ABORTED: u8 = 1;
pub(crate) const DESTROYED: u8 = 2;
pub(crate) const FAILED: u8 = 3;
/// Replaced by the generation a heal or a grow made ([`GroupError::Healed`]).
pub(crate) const HEALED: u8 = 4;

pub(crate) struct Inner {
    pub(crate) cache: CommCache<NcclFactory>,
    /// `LIVE` to `HEALED`; shared with the liveness thread, which reads it
    /// every beat without holding the group (`engine/liveness.rs`).
    pub(crate) state: Arc<AtomicU8>,
    pub(crate) failure: OnceLock<Arc<Failure>>,
    pub(crate) tracker: Tracker,
    pub(crate) recorder: FlightRecorder,
    pub(crate) captures: captures::Captures,
    /// The clean checks that verify operations' ends (`crate::health::verify`).
    pub(crate) verification: Arc<Verification>,
    /// What every operation's outcome shares (its checks, this group).
    pub(crate) outcomes: Arc<OutcomeScope>,
    /// The file trigger of on-demand dumps.
    pub(crate) requests: RequestWatch,
    /// This process's rank on its host, when the group was made from a
    /// launch configuration.
    pub(crate) local_rank: Option<usize>,
    /// The collective check, when it is on.
    pub(crate) checks: Option<Checker>,
    /// The mismatch check, when it is on and there is another rank.
    pub(crate) fingerprints: Option<Arc<Fingerprints>>,
    /// The heal or grow of this generation, once done: every later heal
    /// or grow returns it (the lock also makes concurrent ones one).
    pub(crate) succession: Mutex<Succession>,
    /// The generation that replaced this one (set with `HEALED`).
    pub(crate) successor: OnceLock<u64>,
    /// Where this group sits in the group it was split from (`None`: a
    /// root group).
    pub(crate) lineage: Option<Arc<SubGroup>>,
    /// The sub-groups split from this group.
    pub(crate) children: Mutex<Children>,
    /// Reading the other ranks' failure alarm (`alarm`).
    pub(crate) listener: Listener,
    /// Whether the communicators are suspended (`suspension`).
    pub(crate) suspension: Suspension,
    /// How many commit votes this rank began (`generations/vote.rs`).
    pub(crate) votes: AtomicU64,
    /// The earlier generations' releases, waited for on drop
    /// (`engine/release.rs`).
    pub(crate) unfinished: Mutex<Unfinished>,
}

impl Inner {
    /// Moves the group from live to `to` (`ABORTED`, `DESTROYED` or
    /// `FAILED`); `false` when it was no longer live: another transition
    /// came first.
    pub(crate) fn leave_live(&self, to: u8) -> bool {
        let left = self
            .state
            .compare_exchange(LIVE, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if left {
            self.stop_mismatch_check(to);
        }
        left
    }
}

/// A group of processes running collectives on GPU tensors, with its
/// communicators made once and cached, on one or several local GPUs.
///
/// ```no_run
/// use std::time::Duration;
/// use nccl_group::prelude::*;
///
/// fn main() -> Result<(), GroupError> {
///     // torchrun's, srun's or mpirun's variables; an operation still running after 2 min fails the group.
///     let options = GroupOptions::default().with_op_timeout(Duration::from_secs(120));
///     let group = ProcessGroup::builder("trainer")
///         .options(options)
///         .config(&RendezvousConfig::from_env()?)
///         .build()?;
///     let device = Device::new(group.local_rank().unwrap_or(0))?; // a GPU per process
///     let stream = device.new_stream()?;
///     let weights = Tensor::<f32>::zeros(&stream, &[1024])?;
///     let weights = group.broadcast(weights, 0, &stream)?.wait()?; // rank 0's weights on every rank
///     let grads = Tensor::from_host(&stream, &[1.0f32; 1024], &[1024])?; // a backward pass's gradients
///     let grads = group.all_reduce(grads, ReduceOp::Avg, &stream)?.wait()?; // `stream` waits; the CPU does not
///     // A host read is checked: a peer lost under the all-reduce is an `Err`, never partial data.
///     println!("rank {}: {:?} {:?}", group.rank(), &weights.to_vec(&stream)?[..2], &grads.to_vec(&stream)?[..2]);
///     group.destroy() // collective: every rank leaves together
/// }
/// ```
///
/// * Communicators are cached per ordered list of local devices (and per
///   pair of processes for send/recv); each key is created exactly once
///   even when many threads ask at once. Rank 0 (or the lower rank of a
///   pair) creates the unique id and publishes it in the store under a
///   key scoped by group name and generation. Creation is bounded by
///   [`GroupOptions::timeout`].
/// * Every operation records an event on the caller's stream that the
///   NCCL stream waits for, enqueues inside one group call, records an end
///   event, and returns a [`Work`](crate::Work) that owns the tensors until the GPU is
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
/// * A flight recorder keeps the last operations ([`ProcessGroup::flight_record`](crate::Diagnostics::flight_record)),
///   written on failure and abort, and on request
///   ([`ProcessGroup::dump_flight_recorder`](crate::Diagnostics::dump_flight_recorder), or the file
///   [`crate::dumps::REQUEST_FILE`]), to [`GroupOptions::dump_dir`]: one
///   folder per incident, as JSON and in PyTorch's format ([`crate::dumps`]).
/// * Operations issued with [`StreamMode::Caller`] on a stream being
///   captured into a CUDA graph are captured ([`Work`](crate::Work)'s "Captured
///   operations"); [`ProcessGroup::begin_capture`] captures into a
///   [`GroupGraph`](crate::GroupGraph) whose replays the watchdog watches.
/// * Thread-safe: any thread may issue operations (the communicator is
///   locked while they are enqueued). All processes must still issue the
///   group's collectives in the same order, as with any NCCL program.
/// * [`ProcessGroup::abort`](crate::Lifecycle::abort) works from any thread; afterwards every call
///   fails and a new group may be created under the same name. Dropping
///   never blocks on other processes.
///
/// Operations take tensors by value and give them back from
/// [`Work::wait`](crate::Work::wait); when they fail before enqueueing, the
/// [`OpError`](crate::OpError) carries them back (borrowed memory's
/// refusal is a plain [`GroupError`]: [`Ownership`](crate::Ownership)).
///
/// # Borrowed memory
/// Memory a framework owns (candle's `CudaSlice`s) is passed as a borrow,
/// without a copy and without giving it up: every one-device operation
/// (`all_reduce`, `broadcast`, `reduce`, `all_gather_into_tensor`,
/// `reduce_scatter_tensor`, `all_to_all_single`, `gather`, `scatter`,
/// `send`, `recv`, [`issue`](Self::issue), [`coalesced`](Self::coalesced)
/// batches and [`batch_isend_irecv`](Self::batch_isend_irecv)) takes
/// `&mut CudaSlice<T>` or a `CudaViewMut<T>` where it takes a tensor, and
/// the out-of-place forms take an `(output, input)` of `&mut CudaSlice<T>`
/// and `&CudaSlice<T>`, or of `CudaViewMut<T>` and `CudaView<T>` (a part
/// of a slice: `slice.slice_mut(range)`, `slice.slice(range)`). The rules:
///
/// * The [`Work`](crate::Work) holds the borrow (`Work<&'a mut CudaSlice<T>>`): the
///   memory cannot be read, written or freed until the work is waited
///   for, which hands the borrow back, or dropped.
/// * The operation is the same as on a tensor: the same checks (a wrong
///   length, type or device is an `Err`, the memory untouched), the
///   deadline and the watchdog, the stream handoff, and a flight record
///   with the slices' element counts.
/// * [`Work::wait`](crate::Work::wait) makes the caller's stream wait for the operation.
///   Dropping the work unwaited does that too, and makes the memory's own
///   stream (where cudarc frees it) wait; the CPU waits for neither. Uses
///   on any other stream are ordered by cudarc's event tracking (its
///   default), which the operation's access recorded; with the tracking
///   disabled (cudarc's `unsafe` `disable_event_tracking`), ordering them,
///   and a work given to `std::mem::forget`, are yours, as cudarc's
///   contract says.
/// * It is never captured in a CUDA graph, which would use the memory
///   after the borrow ends ([`Uncapturable::BorrowedMemory`](crate::Uncapturable::BorrowedMemory)): capture
///   owned tensors ([`Tensor::from_slice`](nccl_tensor::Tensor::from_slice)
///   takes a `CudaSlice` over without a copy).
/// * The memory comes back without a result check: call
///   [`Work::synchronize`](crate::Work::synchronize) before reading it on the host when a failed
///   peer must not go unnoticed.
/// * The refusal is a plain [`GroupError`]
///   ([`Borrowed`](crate::Borrowed)): the caller still owns the memory,
///   so nothing is handed back, and `?` takes it into a `Box<dyn Error>`
///   or an `anyhow::Error` whatever the borrow's lifetime.
///
/// ```no_run
/// use nccl_group::prelude::*;
///
/// /// Memory owned the way candle owns it, lent out as `&mut`.
/// struct Grads(CudaSlice<bf16>);
///
/// fn sum(group: &ProcessGroup, grads: &mut Grads, stream: &std::sync::Arc<CudaStream>) -> nccl_group::Result<()> {
///     let work = group.all_reduce(&mut grads.0, ReduceOp::Sum, stream)?; // borrows grads.0
///     work.wait()?; // the borrow ends; `stream` waits for the all-reduce
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct ProcessGroup {
    pub(crate) inner: Arc<Inner>,
    pub(crate) op_timeout: Duration,
    pub(crate) stream_mode: StreamMode,
}

impl crate::sealed::Sealed for ProcessGroup {}

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

impl ProcessGroup {
    /// Joins the group `name` as process `place.0` of `place.1`, meeting
    /// the others in `store`, knowing this process's local rank when
    /// `place.2` has it ([`GroupBuilder::build`](crate::GroupBuilder::build)).
    pub(crate) fn join(
        name: &str,
        place: (usize, usize, Option<usize>),
        store: Arc<dyn Store>,
        store_address: String,
        options: GroupOptions,
    ) -> Result<Self> {
        let (rank, world_size, local_rank) = place;
        options.validate()?;
        let membership = Membership::join(
            name,
            rank,
            world_size,
            store,
            store_address,
            options.timeout,
        )?;
        Self::start(
            membership,
            options,
            local_rank,
            Arc::new(OnceMap::new()),
            None,
        )
    }

    /// A group of `membership`, watched by the process's watchdog, with
    /// the device pools `pools` (a heal's new generation and a sub-group
    /// keep the group's), split from a parent where `lineage` says.
    pub(crate) fn start(
        membership: Membership,
        options: GroupOptions,
        local_rank: Option<usize>,
        pools: Arc<OnceMap<usize, DevicePool>>,
        lineage: Option<Arc<SubGroup>>,
    ) -> Result<Self> {
        let (op_timeout, stream_mode) = (options.op_timeout, options.stream_mode);
        Presence::of(&membership)?.announce(membership.rank)?;
        let checks = checker(options.collective_checks, &membership);
        let fingerprints = (options.mismatch_check && membership.world_size > 1)
            .then(|| Arc::new(Fingerprints::new(membership.rank, membership.world_size)));
        let recorder = FlightRecorder::new(options.recorder_capacity)
            .with_metrics(GroupMetrics::new(&membership.name));
        let requests = RequestWatch::new(options.dump_dir.as_deref(), Instant::now());
        let factory = NcclFactory { pools, options };
        let verification = Arc::new(Verification::new(&membership.name));
        let inner = Arc::new_cyclic(|inner: &std::sync::Weak<Inner>| Inner {
            outcomes: Arc::new(OutcomeScope::new(
                Arc::clone(&verification),
                inner.clone(),
                fingerprints.clone(),
            )),
            cache: CommCache::new(membership, factory),
            state: Arc::new(AtomicU8::new(LIVE)),
            failure: OnceLock::new(),
            tracker: Tracker::default(),
            recorder,
            captures: captures::Captures::default(),
            verification,
            requests,
            local_rank,
            checks,
            fingerprints,
            succession: Mutex::default(),
            successor: OnceLock::new(),
            lineage,
            children: Mutex::default(),
            listener: Listener::default(),
            suspension: Suspension::default(),
            votes: AtomicU64::new(0),
            unfinished: Mutex::default(),
        });
        let watched: std::sync::Weak<dyn crate::health::watchdog::Watched> =
            Arc::downgrade(&(Arc::clone(&inner) as Arc<dyn crate::health::watchdog::Watched>));
        crate::health::watchdog::watch(watched)
            .map_err(|source| GroupError::WatchdogStart { source })?;
        inner.start_mismatch_check()?;
        inner.start_liveness()?;
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
        let config = RendezvousConfig::from_env()?;
        Self::builder(name)
            .options(GroupOptions::default().with_timeout(config.timeout))
            .config(&config)
            .build()
    }

    /// The same group, whose operations issued through the returned handle
    /// get `timeout` instead of [`GroupOptions::op_timeout`]:
    /// `group.with_op_timeout(Duration::from_secs(5)).all_reduce(...)`.
    ///
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
    /// [`GroupOptions::stream_mode`]'s, on the same communicators.
    ///
    /// PyTorch's `async_op` choice per call: `StreamMode::Caller` for an
    /// operation whose result the caller's stream needs next anyway (no
    /// handoff, and no cross-stream latency on the GPU), `StreamMode::Separate`
    /// for one that should overlap the compute queued after it. Mixing the two
    /// on one caller's stream keeps the order: each
    /// [`Work::wait`](crate::Work::wait) makes that stream wait, and each
    /// operation on the NCCL stream waits for it. Cheap (one reference count).
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

    /// This process's rank on its host (`LOCAL_RANK`): with one GPU per
    /// process, the GPU to use (`Device::new(local_rank)`).
    ///
    /// Known for a group made from a launch configuration
    /// ([`ProcessGroup::from_env`],
    /// [`GroupBuilder::config`](crate::GroupBuilder::config)) or given
    /// [`GroupBuilder::local_rank`](crate::GroupBuilder::local_rank); `None`
    /// otherwise.
    pub fn local_rank(&self) -> Option<usize> {
        self.inner.local_rank
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.inner.cache.membership().world_size
    }

    /// The options the group was created with.
    pub fn options(&self) -> &GroupOptions {
        &self.inner.cache.factory().options
    }

    /// The group's generation: its instance's number among groups of the
    /// same name, one more after each [`heal`](crate::Recovery::heal) or
    /// [`grow`](crate::Recovery::grow).
    ///
    /// Instances are counted in the world size of the name's first instance on
    /// the store, so [`GroupBuilder::build`](crate::GroupBuilder::build)
    /// refuses another size for that name.
    pub fn generation(&self) -> u64 {
        self.inner.cache.membership().generation
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.inner.cache.membership().name
    }

    #[inline]
    pub(crate) fn check_live(&self) -> Result<()> {
        self.inner.check_live()
    }

    /// `Ok` for a live group; a failed or aborted one (the `argument` of
    /// a call that would `action` it) must heal first.
    pub(crate) fn check_live_to(&self, argument: &'static str, action: &str) -> Result<()> {
        let state = self.inner.state.load(Ordering::Acquire);
        if state != FAILED && state != ABORTED {
            return self.check_live();
        }
        let why = match self.inner.failure.get() {
            Some(failure) if state == FAILED => format!("failed: {}", failure.cause),
            _ => "aborted".to_string(),
        };
        let m = self.inner.cache.membership();
        Err(GroupError::InvalidArgument {
            argument,
            expected: format!(
                "a live group (heal a failed one first with ProcessGroup::heal, then {action} \
                 the group it returns; a rank the heal excluded must leave)"
            ),
            given: format!("{:?} generation {}, which {why}", m.name, m.generation),
        })
    }

    /// The group's streams and events of device `ordinal`.
    pub(crate) fn device_pool(&self, ordinal: usize) -> Result<Arc<DevicePool>> {
        self.inner.cache.factory().pool(ordinal)
    }
}

/// The group's checker, when `every` asks for one and there is another
/// rank to compare with.
fn checker(every: Option<u32>, membership: &Membership) -> Option<Checker> {
    let every = every.filter(|_| membership.world_size > 1)?;
    // The name was checked when the group was made: the scope exists.
    let scope = membership.protocol(CHECKS).ok()?;
    Some(Checker::new(
        every,
        scope,
        membership.rank,
        membership.world_size,
        Arc::clone(&membership.store),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generations::lifecycle::Lifecycle;
    use crate::options::DEFAULT_OP_TIMEOUT;
    use nccl_rendezvous::InProcessStore;

    /// The group `name` of one process on an in-process store, with
    /// `options` and no dumps.
    fn group_of_one(name: &str, options: GroupOptions) -> ProcessGroup {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
        ProcessGroup::builder(name)
            .rank(0)
            .world_size(1)
            .store(store)
            .options(options.without_dump_dir())
            .build()
            .expect("a group of one process needs no GPU to join")
    }

    #[test]
    fn handles_carry_their_own_stream_mode_and_timeout_over_one_group() {
        let group = group_of_one(
            "handles",
            GroupOptions::default().with_stream_mode(StreamMode::Caller),
        );
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

    #[test]
    fn destroy_refuses_while_a_graph_lives() {
        let group = group_of_one("graphs", GroupOptions::default());
        let graph = group.inner.captures.graph_alive();
        let error = group.destroy().expect_err("a graph lives");
        assert!(
            matches!(error, GroupError::GraphsAlive { graphs: 1, .. }),
            "{error}"
        );
        assert_eq!(error.kind(), crate::error::ErrorKind::InvalidArgument);
        assert!(
            error.to_string().contains("drop the GroupGraphs first"),
            "{error}"
        );
        // Refused before anything changed: the group is still live.
        assert!(group.check_live().is_ok());
        drop(graph);
        group.destroy().expect("no graph left");
        assert!(matches!(
            group.check_live(),
            Err(GroupError::Destroyed { .. })
        ));
    }
}
