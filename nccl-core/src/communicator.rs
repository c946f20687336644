//! The RAII communicator: creation, split, finalize, abort and drop.

use std::cell::Cell;
use std::ffi::c_int;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use nccl_sys::{NCCL_SPLIT_NOCOLOR, NcclLibrary, ncclComm_t, ncclResult_t};

use crate::config::Config;
use crate::datatype::DataType;
use crate::device::Device;
use crate::error::{Error, Result, ResultCode, Status};
use crate::group::Group;
use crate::library::{check, check_accepted, library, require_version};
use crate::reduce_op::PreMulSum;
use crate::unique_id::UniqueId;

const LIVE: u8 = 0;
const FINALIZED: u8 = 1;
const ABORTED: u8 = 2;
const DESTROYED: u8 = 3;

/// How long nonblocking waits poll `ncclCommGetAsyncError` back to back
/// (yielding the CPU in between) before they start sleeping: NCCL's launch
/// thread of a nonblocking group usually finishes within it, and a sleep
/// costs far more than its nominal length.
const POLL_SPIN: Duration = Duration::from_micros(200);
/// The first sleep between polls after that, doubling up to
/// [`POLL_INTERVAL`].
const POLL_FIRST_SLEEP: Duration = Duration::from_micros(10);
/// The longest sleep between polls of a nonblocking wait.
const POLL_INTERVAL: Duration = Duration::from_micros(200);

/// What the communicator and its abort handles share.
struct Shared {
    raw: ncclComm_t,
    lib: &'static NcclLibrary,
    state: AtomicU8,
}

// SAFETY: `raw` is an opaque handle that NCCL lets any thread use; the only
// call made through `Shared` from other threads is ncclCommAbort, which NCCL
// documents as the way to stop a communicator blocked in another thread.
// `state` serialises who tears the handle down: exactly one CAS out of
// LIVE/FINALIZED wins, so the handle is freed once, and no call that loads
// the state after that CAS uses it. What the state cannot exclude: a call
// on the owning thread that loaded LIVE in `raw_for_call` just before
// another thread's abort reaches NCCL with the handle while, or after, the
// abort tears it down. A call already inside NCCL is the case NCCL's abort
// is made for (the call returns an error); one still between the load and
// its NCCL entry point (a few instructions) races with the free, which
// NCCL's contract does not cover. Callers that abort from another thread
// while this one may issue (nccl-group's watchdog) accept that window, as
// PyTorch's watchdog does; aborting from the owning thread, or after it
// stopped issuing, has no such window.
unsafe impl Send for Shared {}
// SAFETY: as above; all mutation goes through the atomic `state`.
unsafe impl Sync for Shared {}

impl Shared {
    /// Moves LIVE or FINALIZED to `to`; true if this call did it.
    fn claim(&self, to: u8) -> bool {
        [LIVE, FINALIZED].into_iter().any(|from| {
            self.state
                .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    fn abort(&self) -> Result<()> {
        if !self.claim(ABORTED) {
            return Ok(());
        }
        let abort = self.lib.functions().ncclCommAbort()?;
        // SAFETY: the CAS above made this the only teardown of `raw`, which
        // is live until this call frees it.
        check(self.lib, "ncclCommAbort", unsafe { abort(self.raw) }).map(|_| ())
    }
}

/// A NCCL communicator (`ncclComm_t`) for one rank on one device.
///
/// # Threads
/// NCCL does not allow two threads to issue calls on one communicator at
/// the same time, and calls on a communicator must be issued in the same
/// order on every rank. So `Communicator` is `Send` (move it to the thread
/// that drives its GPU) but not `Sync`: the compiler stops two threads from
/// sharing one. Wrap it in a `Mutex` to share it. An [`AbortHandle`] is the
/// one thing another thread may use while a call is blocked.
///
/// # Drop
/// Dropping never blocks on other ranks: a communicator that was
/// [`finalize`](Communicator::finalize)d is destroyed (`ncclCommDestroy`),
/// any other is aborted (`ncclCommAbort`), which also cancels work still
/// queued on the GPU. Finalize first for an orderly shutdown.
pub struct Communicator {
    shared: Arc<Shared>,
    device: Device,
    rank: i32,
    world_size: i32,
    blocking: bool,
    timeout: Duration,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.device.ordinal())
            .field("blocking", &self.blocking)
            .finish()
    }
}

/// Aborts a communicator from any thread (`ncclCommAbort`), for instance a
/// watchdog that sees a collective hang. Cheap to clone. After an abort,
/// every call on the communicator returns [`Error::Aborted`].
#[derive(Clone)]
pub struct AbortHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle")
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

impl AbortHandle {
    /// Aborts the communicator; a no-op if it is already aborted or dropped.
    ///
    /// # Errors
    /// The error ncclCommAbort returned; the communicator is unusable either way.
    pub fn abort(&self) -> Result<()> {
        self.shared.abort()
    }

    /// Whether the communicator was aborted.
    pub fn is_aborted(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == ABORTED
    }
}

/// At least one device, none twice (NCCL allows one rank per GPU).
fn check_distinct(devices: &[Device]) -> Result<()> {
    if devices.is_empty() {
        return Err(Error::InvalidArgument {
            argument: "devices",
            expected: "at least one device".to_string(),
            given: "an empty list".to_string(),
        });
    }
    let ordinal = |i: usize| devices[i].ordinal();
    match (0..devices.len()).find(|&i| (0..i).any(|j| ordinal(j) == ordinal(i))) {
        Some(duplicate) => Err(Error::InvalidArgument {
            argument: "devices",
            expected: "distinct devices (NCCL allows one rank per GPU)".to_string(),
            given: format!("device {} twice", ordinal(duplicate)),
        }),
        None => Ok(()),
    }
}

/// Waits for the nonblocking ones among `communicators`, under one
/// deadline: the longest of their timeouts, counted from now.
fn wait_all_ready(
    communicators: &[impl std::borrow::Borrow<Communicator>],
    operation: &'static str,
) -> Result<()> {
    let started = Instant::now();
    communicators
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|c: &&Communicator| !c.blocking)
        .try_for_each(|c| c.wait_ready_since(operation, started))
}

fn check_world(world_size: i32, rank: i32) -> Result<()> {
    if world_size < 1 {
        return Err(Error::InvalidArgument {
            argument: "world_size",
            expected: "at least 1".to_string(),
            given: world_size.to_string(),
        });
    }
    if !(0..world_size).contains(&rank) {
        return Err(Error::RankOutOfRange {
            what: "rank",
            given: rank.into(),
            world_size,
        });
    }
    Ok(())
}

impl Communicator {
    /// Creates this rank's communicator (`ncclCommInitRank`). Every rank
    /// calls it, each in its own thread or process, with the same
    /// `unique_id` and `world_size`; it returns when all have joined.
    ///
    /// Checks: `world_size >= 1` and `rank` in `0..world_size`.
    ///
    /// # Errors
    /// Bad arguments, no CUDA driver or NCCL library, or NCCL's failure.
    pub fn new(device: Device, world_size: i32, unique_id: UniqueId, rank: i32) -> Result<Self> {
        check_world(world_size, rank)?;
        let lib = library()?;
        let init = lib.functions().ncclCommInitRank()?;
        device.bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `raw` is writable; the id is passed by value; the device's
        // context is current on this thread, as NCCL requires.
        let result = unsafe { init(&mut raw, world_size, unique_id.to_raw(), rank) };
        check_accepted(lib, "ncclCommInitRank", result)?;
        Ok(Self::wrap(
            raw,
            lib,
            device,
            rank,
            world_size,
            true,
            Config::new().wait_timeout(),
        ))
    }

    /// Like [`Communicator::new`] with options (`ncclCommInitRankConfig`,
    /// NCCL 2.14+). A nonblocking config returns once NCCL reports the
    /// communicator ready, polling until [`Config::timeout`]; past it the
    /// communicator is aborted and [`Error::Timeout`] returned.
    ///
    /// # Errors
    /// As [`Communicator::new`], plus an invalid config or a timeout.
    pub fn with_config(
        device: Device,
        world_size: i32,
        unique_id: UniqueId,
        rank: i32,
        config: &Config,
    ) -> Result<Self> {
        let communicator = Self::start_init(device, world_size, unique_id, rank, config)?;
        communicator.wait_ready("ncclCommInitRankConfig")?;
        Ok(communicator)
    }

    /// `ncclCommInitRankConfig` without waiting for a nonblocking init
    /// to finish (inside a group it only finishes at the group's end).
    fn start_init(
        device: Device,
        world_size: i32,
        unique_id: UniqueId,
        rank: i32,
        config: &Config,
    ) -> Result<Self> {
        check_world(world_size, rank)?;
        let mut raw_config = config.to_raw()?;
        let lib = library()?;
        require_version(lib, 2, 14, || "a communicator config".to_string())?;
        let init = lib.functions().ncclCommInitRankConfig()?;
        device.bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: as in `new`; `raw_config` outlives the call.
        let result = unsafe {
            init(
                &mut raw,
                world_size,
                unique_id.to_raw(),
                rank,
                raw_config.as_mut_ptr(),
            )
        };
        let created = check(lib, "ncclCommInitRankConfig", result);
        if raw.is_null() {
            return Err(created.err().unwrap_or_else(|| {
                Error::from_code(
                    "ncclCommInitRankConfig",
                    ResultCode(ncclResult_t::ncclInternalError.0),
                    Some("returned no communicator".to_string()),
                    None,
                )
            }));
        }
        // From here `communicator` owns the handle: an error below drops
        // (and so aborts) it.
        let communicator = Self::wrap(
            raw,
            lib,
            device,
            rank,
            world_size,
            config.is_blocking(),
            config.wait_timeout(),
        );
        created.map(|_| ())?;
        Ok(communicator)
    }

    /// Creates the communicators of several consecutive ranks of one
    /// communicator that this process drives, one per device
    /// (`ncclCommInitRankConfig` for each, inside one NCCL group, so no
    /// device waits for the others): `devices[i]` becomes rank
    /// `first_rank + i` of `world_size`. Every process of the communicator
    /// calls this (or [`Communicator::with_config`]) with the same
    /// `unique_id`. A nonblocking `config` bounds the whole creation by
    /// [`Config::timeout`]: past it every communicator is aborted and
    /// [`Error::Timeout`] returned, so a rank that never joins cannot
    /// hang the caller.
    ///
    /// Checks: at least one device, no device twice, and the ranks
    /// `first_rank .. first_rank + devices.len()` inside `0..world_size`.
    ///
    /// # Errors
    /// Bad arguments, an invalid config, a timeout, or NCCL's failure.
    pub fn init_local_ranks(
        devices: &[Device],
        world_size: i32,
        unique_id: UniqueId,
        first_rank: i32,
        config: &Config,
    ) -> Result<Vec<Self>> {
        check_distinct(devices)?;
        let last_rank = i32::try_from(devices.len() - 1)
            .ok()
            .and_then(|extra| first_rank.checked_add(extra))
            .unwrap_or(i32::MAX);
        check_world(world_size, first_rank)?;
        check_world(world_size, last_rank)?;
        if let [device] = devices {
            return Ok(vec![Self::with_config(
                device.clone(),
                world_size,
                unique_id,
                first_rank,
                config,
            )?]);
        }
        let group = Group::start()?;
        // Every init is tried and the group ended before any communicator
        // is dropped: dropping one aborts it, which must not happen while
        // the group that holds its init is still open.
        let started: Vec<Result<Self>> = devices
            .iter()
            .zip(first_rank..)
            .map(|(device, rank)| {
                Self::start_init(device.clone(), world_size, unique_id, rank, config)
            })
            .collect();
        let ended = group.end();
        let communicators = started.into_iter().collect::<Result<Vec<_>>>()?;
        let _ = ended?;
        wait_all_ready(&communicators, "ncclCommInitRankConfig")?;
        Ok(communicators)
    }

    /// Creates one communicator per device for a single process that drives
    /// several GPUs (`ncclCommInitAll`); rank `i` is on `devices[i]`.
    ///
    /// Checks: at least one device, no device twice.
    ///
    /// # Errors
    /// Bad arguments, or NCCL's failure.
    pub fn init_all(devices: &[Device]) -> Result<Vec<Self>> {
        check_distinct(devices)?;
        let ordinals: Vec<c_int> = devices.iter().map(|d| d.ordinal() as c_int).collect();
        let lib = library()?;
        let init_all = lib.functions().ncclCommInitAll()?;
        devices[0].bind_to_thread()?;
        let world_size = devices.len() as c_int;
        let mut raws: Vec<ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `raws` has room for `world_size` handles and `ordinals`
        // lists `world_size` distinct devices.
        let result = unsafe { init_all(raws.as_mut_ptr(), world_size, ordinals.as_ptr()) };
        check_accepted(lib, "ncclCommInitAll", result)?;
        Ok(raws
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (raw, device))| {
                Self::wrap(
                    raw,
                    lib,
                    device.clone(),
                    rank as i32,
                    world_size,
                    true,
                    Config::new().wait_timeout(),
                )
            })
            .collect())
    }

    fn wrap(
        raw: ncclComm_t,
        lib: &'static NcclLibrary,
        device: Device,
        rank: i32,
        world_size: i32,
        blocking: bool,
        timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                raw,
                lib,
                state: AtomicU8::new(LIVE),
            }),
            device,
            rank,
            world_size,
            blocking,
            timeout,
            _not_sync: PhantomData,
        }
    }

    /// The handle for a call, or why there is none.
    #[inline]
    pub(crate) fn raw_for_call(&self) -> Result<ncclComm_t> {
        match self.shared.state.load(Ordering::Acquire) {
            LIVE => Ok(self.shared.raw),
            FINALIZED => Err(Error::Finalized),
            _ => Err(Error::Aborted),
        }
    }

    /// The raw `ncclComm_t`, for calls this crate does not wrap. It stays
    /// valid while `self` lives and is not aborted.
    ///
    /// # Errors
    /// [`Error::Aborted`] or [`Error::Finalized`].
    pub fn as_raw(&self) -> Result<ncclComm_t> {
        self.raw_for_call()
    }

    /// The library this communicator was created with.
    pub fn library(&self) -> &'static NcclLibrary {
        self.shared.lib
    }

    /// This rank, in `0..world_size()`.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> i32 {
        self.world_size
    }

    /// The device this rank runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether calls block until NCCL is done with them.
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// A handle that aborts this communicator from any thread.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// `ncclCommGetAsyncError`: `Ok(Status::Success)` when healthy,
    /// `Ok(Status::InProgress)` while a nonblocking call is still running,
    /// `Err` with the asynchronous error otherwise (a remote rank failed,
    /// a network error).
    ///
    /// # Errors
    /// The asynchronous error, or [`Error::Aborted`].
    pub fn async_error(&self) -> Result<Status> {
        let raw = self.raw_for_call()?;
        let get = self.shared.lib.functions().ncclCommGetAsyncError()?;
        let mut state = ncclResult_t::ncclSuccess;
        // SAFETY: `raw` is live and `state` is writable.
        let result = unsafe { get(raw, &mut state) };
        check_accepted(self.shared.lib, "ncclCommGetAsyncError", result)?;
        check(
            self.shared.lib,
            "ncclCommGetAsyncError (asynchronous error)",
            state,
        )
    }

    /// Waits until a nonblocking call on this communicator has finished,
    /// at most the config's timeout; past it the communicator is aborted.
    ///
    /// # Errors
    /// The asynchronous error, or [`Error::Timeout`].
    pub fn wait_ready(&self, operation: &'static str) -> Result<()> {
        self.wait_ready_since(operation, Instant::now())
    }

    /// [`Communicator::wait_ready`] bounded by `timeout` (or the config's
    /// timeout, if shorter) instead, e.g. an operation's own deadline.
    ///
    /// # Errors
    /// The asynchronous error, or [`Error::Timeout`] (the communicator is
    /// then aborted).
    pub fn wait_ready_within(&self, operation: &'static str, timeout: Duration) -> Result<()> {
        self.wait_ready_bounded(operation, Instant::now(), timeout.min(self.timeout))
    }

    /// [`Communicator::wait_ready`] with the timeout counted from `started`.
    fn wait_ready_since(&self, operation: &'static str, started: Instant) -> Result<()> {
        self.wait_ready_bounded(operation, started, self.timeout)
    }

    fn wait_ready_bounded(
        &self,
        operation: &'static str,
        started: Instant,
        timeout: Duration,
    ) -> Result<()> {
        let waiting = Instant::now();
        let mut pause = POLL_FIRST_SLEEP;
        loop {
            match self.async_error() {
                Ok(Status::Success) => return Ok(()),
                Ok(Status::InProgress) if started.elapsed() < timeout => {
                    if waiting.elapsed() < POLL_SPIN {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(POLL_INTERVAL);
                    }
                }
                Ok(Status::InProgress) => {
                    let _ = self.shared.abort();
                    return Err(Error::Timeout {
                        operation,
                        waited: started.elapsed(),
                    });
                }
                Err(error) => {
                    let _ = self.shared.abort();
                    return Err(error);
                }
            }
        }
    }

    /// Splits off a communicator of the same ranks (color 0, key = rank),
    /// as the spec's `split_all`. Collective: every rank calls it.
    /// `config` of `None` inherits this communicator's options.
    ///
    /// # Errors
    /// As [`Communicator::split`].
    pub fn split_all(&self, config: Option<&Config>) -> Result<Self> {
        self.split(Some(0), self.rank, config)?
            .ok_or_else(|| Error::InvalidArgument {
                argument: "split",
                expected: "a communicator for every rank".to_string(),
                given: "none for this rank".to_string(),
            })
    }

    /// Splits off a communicator of `ranks` only, as the spec's
    /// `split_from`. Collective: every rank of this communicator calls it.
    /// A rank in `ranks` gets `Some`, with its new rank being its position
    /// in `ranks`; others get `None`. An empty `ranks` means "this rank is
    /// not in the new communicator, and does not know who is"
    /// (`NCCL_SPLIT_NOCOLOR`).
    ///
    /// Checks: every rank in `0..world_size`, no rank twice.
    ///
    /// # Errors
    /// Bad ranks, or as [`Communicator::split`].
    pub fn split_from(&self, ranks: &[i32], config: Option<&Config>) -> Result<Option<Self>> {
        for (index, &rank) in ranks.iter().enumerate() {
            if !(0..self.world_size).contains(&rank) {
                return Err(Error::RankOutOfRange {
                    what: "rank in split_from",
                    given: rank.into(),
                    world_size: self.world_size,
                });
            }
            if ranks[..index].contains(&rank) {
                return Err(Error::InvalidArgument {
                    argument: "ranks",
                    expected: "distinct ranks".to_string(),
                    given: format!("rank {rank} twice"),
                });
            }
        }
        match ranks.iter().position(|&rank| rank == self.rank) {
            Some(position) => self.split(Some(0), position as i32, config),
            None => self.split(None, 0, config),
        }
    }

    /// `ncclCommSplit` (NCCL 2.18+): ranks that pass the same `color` form
    /// a new communicator, ordered by `key` (ties by their rank here);
    /// `color` of `None` (`NCCL_SPLIT_NOCOLOR`) joins none and returns
    /// `None`. Collective: every rank calls it.
    ///
    /// # Errors
    /// A negative color, an invalid config, an old libnccl, NCCL's failure,
    /// or a nonblocking split past its timeout.
    pub fn split(
        &self,
        color: Option<i32>,
        key: i32,
        config: Option<&Config>,
    ) -> Result<Option<Self>> {
        if let Some(color) = color
            && color < 0
        {
            return Err(Error::InvalidArgument {
                argument: "color",
                expected: "a non-negative color, or None for NCCL_SPLIT_NOCOLOR".to_string(),
                given: color.to_string(),
            });
        }
        let lib = self.shared.lib;
        require_version(lib, 2, 18, || "ncclCommSplit".to_string())?;
        let split = lib.functions().ncclCommSplit()?;
        let mut raw_config = config.map(Config::to_raw).transpose()?;
        let config_ptr = raw_config
            .as_mut()
            .map_or(std::ptr::null_mut(), |c| c.as_mut_ptr());
        let parent = self.raw_for_call()?;
        self.device.bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `parent` is live, `raw` writable, `config_ptr` null or
        // pointing into `raw_config`, which outlives the call.
        let result = unsafe {
            split(
                parent,
                color.unwrap_or(NCCL_SPLIT_NOCOLOR),
                key,
                &mut raw,
                config_ptr,
            )
        };
        check_accepted(lib, "ncclCommSplit", result)?;
        let blocking = config
            .and_then(Config::blocking_option)
            .unwrap_or(self.blocking);
        if !self.blocking || !blocking {
            // A nonblocking split writes `raw` from NCCL's own thread when it
            // is done: wait on the parent before reading it (and before
            // `raw` goes out of scope).
            self.wait_ready("ncclCommSplit")?;
        }
        if raw.is_null() {
            return Ok(None);
        }
        let timeout = config.map_or(self.timeout, Config::wait_timeout);
        let mut child = Self::wrap(raw, lib, self.device.clone(), 0, 1, blocking, timeout);
        if !blocking {
            child.wait_ready("ncclCommSplit")?;
        }
        child.rank = child.query("ncclCommUserRank", |f| f.ncclCommUserRank())?;
        child.world_size = child.query("ncclCommCount", |f| f.ncclCommCount())?;
        Ok(Some(child))
    }

    /// Reads one integer attribute through `ncclCommUserRank`-like calls.
    fn query(
        &self,
        name: &'static str,
        function: impl FnOnce(
            &nccl_sys::Functions,
        ) -> std::result::Result<
            unsafe extern "C" fn(ncclComm_t, *mut c_int) -> ncclResult_t,
            nccl_sys::MissingSymbol,
        >,
    ) -> Result<i32> {
        let raw = self.raw_for_call()?;
        let get = function(self.shared.lib.functions())?;
        let mut value: c_int = 0;
        // SAFETY: `raw` is live and `value` writable.
        check_accepted(self.shared.lib, name, unsafe { get(raw, &mut value) })?;
        Ok(value)
    }

    /// `ncclCommFinalize` (NCCL 2.14+): flushes outstanding work and tears
    /// down connections, together with the other ranks (collective). After
    /// it, every call fails with [`Error::Finalized`], and drop destroys the
    /// communicator cleanly. A nonblocking communicator is polled until done
    /// or past its timeout.
    ///
    /// # Errors
    /// NCCL's failure, or a timeout (the communicator is then aborted).
    pub fn finalize(&self) -> Result<()> {
        self.start_finalize()?;
        if !self.blocking {
            self.wait_ready("ncclCommFinalize")?;
        }
        self.mark_finalized();
        Ok(())
    }

    /// Finalizes several communicators that this thread drives together,
    /// e.g. one per local GPU of the same communicator: blocking ones
    /// inside one NCCL group (one at a time, the first would wait for the
    /// others forever), nonblocking ones issued first and then polled
    /// under one deadline (the longest of their timeouts).
    ///
    /// # Errors
    /// NCCL's failure, or a timeout (the communicator that timed out is
    /// aborted; the caller decides about the others).
    pub fn finalize_together(communicators: &[&Communicator]) -> Result<()> {
        if let [communicator] = communicators {
            return communicator.finalize();
        }
        let group = Group::start()?;
        let started = communicators.iter().try_for_each(|c| c.start_finalize());
        let ended = group.end();
        started?;
        let _ = ended?;
        wait_all_ready(communicators, "ncclCommFinalize")?;
        communicators.iter().for_each(|c| c.mark_finalized());
        Ok(())
    }

    /// `ncclCommFinalize`, without waiting for a nonblocking one.
    fn start_finalize(&self) -> Result<()> {
        let lib = self.shared.lib;
        require_version(lib, 2, 14, || "ncclCommFinalize".to_string())?;
        let finalize = lib.functions().ncclCommFinalize()?;
        let raw = self.raw_for_call()?;
        // SAFETY: `raw` is live.
        check_accepted(lib, "ncclCommFinalize", unsafe { finalize(raw) })
    }

    fn mark_finalized(&self) {
        // Only a live communicator becomes finalized; an abort that raced
        // us wins and stays visible.
        let _ = self.shared.state.compare_exchange(
            LIVE,
            FINALIZED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Aborts this communicator now (`ncclCommAbort`).
    ///
    /// # Errors
    /// The error ncclCommAbort returned; the communicator is gone either way.
    pub fn abort(self) -> Result<()> {
        self.shared.abort()
    }

    /// Creates a pre-multiplied sum for this communicator and `dtype`
    /// (`ncclRedOpCreatePreMulSum`, NCCL 2.11+): `sum(scalar * x)` over the
    /// ranks. It is destroyed when dropped, and can only be used on this
    /// communicator and with `dtype`.
    ///
    /// # Errors
    /// A scalar that `dtype` cannot hold, an old libnccl, NCCL's failure.
    pub fn pre_mul_sum(&self, dtype: DataType, scalar: f64) -> Result<PreMulSum<'_>> {
        PreMulSum::new(self, dtype, scalar)
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let shared = &self.shared;
        if shared.state.load(Ordering::Acquire) == FINALIZED && shared.claim(DESTROYED) {
            if let Ok(destroy) = shared.lib.functions().ncclCommDestroy() {
                // SAFETY: the claim made this the only teardown; the
                // communicator was finalized, so destroy does not wait on peers.
                let _ = unsafe { destroy(shared.raw) };
            }
        } else {
            // Not finalized: abort, which never waits for other ranks.
            // Errors cannot be reported from drop.
            let _ = shared.abort();
        }
    }
}
