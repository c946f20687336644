//! [`ProcessGroup`]: collectives across processes, each driving one or
//! several local GPUs, over cached communicators with two-way event sync.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cudarc::driver::CudaStream;
use nccl_core::{AbortHandle, Device, Group, ReduceOp, Status, UniqueId};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{Communicator, NcclType, Tensor, TypedBuffer};

use crate::cache::OnceMap;
use crate::comms::{CommCache, CommFactory, Membership};
use crate::error::{GroupError, OpError, Result};
use crate::key::{CommKey, DeviceList};
use crate::pool::DevicePool;
use crate::store::{RendezvousConfig, Store, StoreSpec};
use crate::work::{End, Ends, Work, WorkBuffers};

/// One local device's communicator of a key, with its NCCL stream.
pub struct Member {
    comm: Mutex<Communicator>,
    abort: AbortHandle,
    pool: Arc<DevicePool>,
    stream: Arc<CudaStream>,
}

/// The communicators of one key on this process, one per local device.
pub struct LocalComms {
    members: Vec<Member>,
}

impl LocalComms {
    /// Aborts every communicator (a no-op for those already aborted).
    fn abort(&self) {
        for member in &self.members {
            // An abort error leaves the communicator unusable anyway.
            let _ = member.abort.abort();
        }
    }

    /// Finalizes every communicator, together (in one NCCL group when
    /// there are several, so no device waits for another).
    fn finalize(&self) -> Result<()> {
        let guards: Vec<_> = self
            .members
            .iter()
            .map(|m| m.comm.lock().unwrap_or_else(PoisonError::into_inner))
            .collect();
        let group = (guards.len() > 1).then(Group::start).transpose()?;
        let finalized: Result<()> = guards
            .iter()
            .try_for_each(|comm| comm.core().finalize().map_err(GroupError::from));
        if let Some(group) = group {
            let _ = group.end()?;
        }
        finalized
    }
}

/// Creates real NCCL communicators, with one [`DevicePool`] per device.
pub struct NcclFactory {
    pools: OnceMap<usize, DevicePool>,
    options: GroupOptions,
}

impl CommFactory for NcclFactory {
    type Comms = LocalComms;

    fn unique_id(&self) -> Result<UniqueId> {
        Ok(UniqueId::new()?)
    }

    fn create(
        &self,
        key: &CommKey,
        id: UniqueId,
        world_size: i32,
        first_rank: i32,
    ) -> Result<LocalComms> {
        let pools = key
            .devices()
            .iter()
            .map(|ordinal| {
                self.pools.get_or_create(&ordinal, |&ordinal| {
                    DevicePool::new(
                        Device::new(ordinal)?,
                        self.options.streams_per_device,
                        self.options.high_priority,
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Several local devices join one communicator together: their
        // inits must be in one group, or the first waits for the others.
        let group = (pools.len() > 1).then(Group::start).transpose()?;
        let comms = pools
            .iter()
            .enumerate()
            .map(|(index, pool)| {
                nccl_core::Communicator::new(
                    pool.device().clone(),
                    world_size,
                    id,
                    first_rank + index as i32,
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if let Some(group) = group {
            let _ = group.end()?;
        }
        let members = comms
            .into_iter()
            .zip(pools)
            .map(|(core, pool)| {
                let abort = core.abort_handle();
                Ok(Member {
                    comm: Mutex::new(Communicator::from_core(core)?),
                    abort,
                    stream: pool.stream(),
                    pool,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LocalComms { members })
    }
}

/// Options of a [`ProcessGroup`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupOptions {
    /// NCCL streams per device (round robin across communicators).
    pub streams_per_device: usize,
    /// Create the NCCL streams with the device's highest priority.
    pub high_priority: bool,
    /// How long to wait in the store for another rank's unique id. Once
    /// every rank has it, NCCL's own communicator init waits for all of
    /// them (bounded by NCCL's bootstrap timeouts, not by this); a group
    /// aborted meanwhile aborts the new communicators as soon as their
    /// init returns.
    pub timeout: Duration,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self {
            streams_per_device: 1,
            high_priority: false,
            timeout: crate::store::DEFAULT_TIMEOUT,
        }
    }
}

impl GroupOptions {
    /// With `streams` NCCL streams per device.
    pub fn with_streams_per_device(mut self, streams: usize) -> Self {
        self.streams_per_device = streams;
        self
    }

    /// With high-priority NCCL streams.
    pub fn with_high_priority(mut self, high: bool) -> Self {
        self.high_priority = high;
        self
    }

    /// With this rendezvous timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

const LIVE: u8 = 0;
const ABORTED: u8 = 1;
const DESTROYED: u8 = 2;

struct Inner {
    cache: CommCache<NcclFactory>,
    state: AtomicU8,
}

/// A group of processes running collectives on GPU tensors: the
/// multi-device cached process group of the spec, with its TODOs solved.
///
/// * Communicators are cached per ordered list of local devices (and per
///   pair of processes for send/recv); each key is created exactly once
///   even when many threads ask at once. Rank 0 (or the lower rank of a
///   pair) creates the unique id and publishes it in the store under a
///   key scoped by group name and generation.
/// * Every operation records an event on the caller's stream that the
///   NCCL stream waits for, enqueues inside one group call, records an end
///   event, and returns a [`Work`] that owns the tensors until the GPU is
///   done with them.
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
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.inner.cache.membership();
        f.debug_struct("ProcessGroup")
            .field("name", &m.name)
            .field("rank", &m.rank)
            .field("world_size", &m.world_size)
            .field("generation", &m.generation)
            .finish()
    }
}

/// The result of an operation: its [`Work`], or the error with the buffers
/// (boxed: failures are rare, and the success path stays small).
pub type OpResult<B> = std::result::Result<Work<B>, Box<OpError<B>>>;

impl ProcessGroup {
    /// Joins the group `name` as process `rank` of `world_size`, meeting
    /// the others in `store`. `store_address` only appears in error
    /// messages (for the TCP store: rank 0's address).
    ///
    /// # Errors
    /// A store failure or an invalid rank.
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
        let factory = NcclFactory {
            pools: OnceMap::new(),
            options,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                cache: CommCache::new(membership, factory),
                state: AtomicU8::new(LIVE),
            }),
        })
    }

    /// Joins the group `name` the way torchrun and Slurm launch processes:
    /// `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and the store
    /// options of [`RendezvousConfig`] (rank 0 hosts the TCP store).
    ///
    /// # Errors
    /// A missing or malformed variable (named in the error), or a store failure.
    pub fn from_env(name: &str) -> Result<Self> {
        let config = RendezvousConfig::from_env()?;
        let address = match &config.store {
            StoreSpec::Tcp { addr, port } => format!("tcp://{addr}:{port}"),
            StoreSpec::File { dir } => format!("file://{}", dir.display()),
        };
        let store: Arc<dyn Store> = Arc::from(config.connect()?);
        let options = GroupOptions::default().with_timeout(config.timeout);
        Self::new(
            name,
            config.rank,
            config.world_size,
            store,
            address,
            options,
        )
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.inner.cache.membership().rank
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.inner.cache.membership().world_size
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.inner.cache.membership().name
    }

    fn check_live(&self) -> Result<()> {
        match self.inner.state.load(Ordering::Acquire) {
            LIVE => Ok(()),
            ABORTED => Err(GroupError::Aborted {
                name: self.name().to_string(),
            }),
            _ => Err(GroupError::Destroyed {
                name: self.name().to_string(),
            }),
        }
    }

    /// The communicators for `key`. A group aborted while they were being
    /// created aborts them too (`abort` only sees those created before it).
    fn comms_for(&self, key: &CommKey) -> Result<Arc<LocalComms>> {
        let comms = self.inner.cache.get(key)?;
        if let Err(error) = self.check_live() {
            comms.abort();
            return Err(error);
        }
        Ok(comms)
    }

    /// An error of a call that raced with `abort` or `destroy` is reported
    /// as that, not as the communicator error it caused.
    fn classify(&self, error: GroupError) -> GroupError {
        self.check_live().err().unwrap_or(error)
    }

    /// Enqueues one operation on one local device: the NCCL stream waits
    /// for the caller's stream, `issue` enqueues, an end event is recorded.
    fn run_one<B: WorkBuffers>(
        &self,
        key: impl FnOnce(DeviceList) -> CommKey,
        device: usize,
        mut buffers: B,
        caller: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> OpResult<B> {
        let attempt = (|| {
            self.check_live()?;
            check_stream(caller, device)?;
            let comms = self.comms_for(&key(DeviceList::one(device)?))?;
            let member = &comms.members[0];
            sync_start(member, caller)?;
            {
                let comm = member.comm.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = issue(&comm, &member.stream, &mut buffers)?;
            }
            end_event(member, caller)
        })();
        match attempt {
            Ok(end) => Ok(Work::new(buffers, Ends::One(end))),
            Err(error) => Err(Box::new(OpError {
                error: self.classify(error),
                buffers,
            })),
        }
    }

    /// Enqueues one operation per local device inside one NCCL group.
    fn run_many<B: WorkBuffers + Located>(
        &self,
        key: impl FnOnce(DeviceList) -> CommKey,
        mut buffers: Vec<B>,
        callers: &[Arc<CudaStream>],
        check: impl Fn(&CommInfo, &B) -> nccl_tensor::Result<()>,
        issue: impl Fn(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> OpResult<Vec<B>> {
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
            let comms = self.comms_for(&key(devices))?;
            {
                let guards: Vec<_> = comms
                    .members
                    .iter()
                    .map(|m| m.comm.lock().unwrap_or_else(PoisonError::into_inner))
                    .collect();
                // Every device's arguments are checked before any is
                // enqueued: a part left in the group would launch alone
                // and wait forever for its peers.
                for (comm, part) in guards.iter().zip(&buffers) {
                    check(&comm.info(), part)?;
                }
                for (member, caller) in comms.members.iter().zip(callers) {
                    sync_start(member, caller)?;
                }
                let group = Group::start()?;
                for ((comm, member), part) in
                    guards.iter().zip(&comms.members).zip(buffers.iter_mut())
                {
                    let _ = issue(comm, &member.stream, part)?;
                }
                let _ = group.end()?;
            }
            comms
                .members
                .iter()
                .zip(callers)
                .map(|(member, caller)| end_event(member, caller))
                .collect()
        })();
        match attempt {
            Ok(ends) => Ok(Work::new(buffers, Ends::Many(ends))),
            Err(error) => Err(Box::new(OpError {
                error: self.classify(error),
                buffers,
            })),
        }
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
        let device = tensor.device();
        self.run_one(CommKey::Collective, device, tensor, stream, |c, s, t| {
            c.all_reduce(t, op, s)
        })
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
        self.run_many(
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
        let device = tensor.device();
        self.run_one(CommKey::Collective, device, tensor, stream, |c, s, t| {
            c.broadcast(t, root, s)
        })
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
        self.run_many(
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
        let device = tensor.device();
        self.run_one(CommKey::Collective, device, tensor, stream, |c, s, t| {
            c.reduce(t, op, root, s)
        })
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
        self.run_many(
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
        let device = output.device();
        self.run_one(
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
        self.run_many(
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
        let device = output.device();
        self.run_one(
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
        self.run_many(
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
        let device = output.device();
        self.run_one(
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
        self.run_many(
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
        let device = tensor.device();
        self.run_one(key, device, tensor, stream, |c, s, t| c.send(&*t, peer, s))
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
        let device = tensor.device();
        self.run_one(key, device, tensor, stream, |c, s, t| c.recv(t, peer, s))
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
        self.run_many(
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
        self.run_many(
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
        let device = stream.context().ordinal();
        self.run_one(CommKey::Collective, device, (), stream, |c, s, _| {
            c.barrier(s)
        })
        .map_err(|e| e.error)
    }

    /// Aborts every communicator of the group, from any thread; calls
    /// blocked in NCCL return. Afterwards every call fails with
    /// [`GroupError::Aborted`]; a new group may reuse the name.
    pub fn abort(&self) {
        if self
            .inner
            .state
            .compare_exchange(LIVE, ABORTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        for comms in self.inner.cache.all() {
            comms.abort();
        }
    }

    /// Finalizes and destroys every communicator, together with the other
    /// processes (collective: all must call it). Afterwards every call
    /// fails with [`GroupError::Destroyed`].
    ///
    /// # Errors
    /// An aborted group, or a communicator failing to finalize (it is then
    /// aborted).
    pub fn destroy(&self) -> Result<()> {
        if self
            .inner
            .state
            .compare_exchange(LIVE, DESTROYED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return self.check_live();
        }
        // In store-key order, the same on every process, so blocking
        // finalizes meet their peers.
        let mut first_error = None;
        for comms in self.inner.cache.clear() {
            if let Err(error) = comms.finalize() {
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
}

impl<T: NcclType> Located for Tensor<T> {
    fn device(&self) -> usize {
        Tensor::device(self)
    }
}

/// An `(output, input)` pair is on its output's device (the checks refuse
/// an input elsewhere).
impl<T: NcclType> Located for (Tensor<T>, Tensor<T>) {
    fn device(&self) -> usize {
        self.0.device()
    }
}

/// In a pair communicator of `devices` ranks per process, the distance from
/// a local rank to the same device of the peer (`peer` is the peer's index
/// in the pair: 1 when it is the higher rank).
fn peer_offset(peer: i32, devices: usize) -> i32 {
    let devices = devices as i32;
    if peer == 1 { devices } else { -devices }
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

/// Records the end of the operation on the NCCL stream.
fn end_event(member: &Member, caller: &Arc<CudaStream>) -> Result<End> {
    let event = member.pool.event()?;
    match event.record(&member.stream) {
        Ok(()) => Ok(End {
            pool: Arc::clone(&member.pool),
            event,
            caller: Arc::clone(caller),
        }),
        Err(error) => {
            member.pool.give_back(event);
            Err(GroupError::cuda("recording the end event")(error))
        }
    }
}
