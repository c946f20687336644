//! nccl-group: the multi-device cached process group.
//!
//! The application-facing layer over `nccl-core` and `nccl-tensor`:
//!
//! * [`ProcessGroup`]: collectives across processes, each driving one or
//!   several local GPUs, over communicators cached per device list (and
//!   per process pair for send/recv), with two-way event synchronisation
//!   between the caller's streams and the NCCL streams, and [`Work`]
//!   handles that own the tensors until the GPU is done with them (or
//!   hold the borrow of memory a framework owns, a `&mut CudaSlice`:
//!   [`ProcessGroup`]'s "Borrowed memory"); several
//!   operations in one NCCL group with one `Work`
//!   ([`ProcessGroup::batch_isend_irecv`], [`ProcessGroup::coalesced`],
//!   [`ProcessGroup::all_to_all_single_split`], [`ProcessGroup::all_to_all`],
//!   [`ProcessGroup::all_gather`]); the operations take torch.distributed's
//!   names (`all_gather_into_tensor`, `reduce_scatter_tensor`,
//!   `all_to_all_single`, ...), as nccl-tensor's do;
//!   operations captured in a CUDA graph and replayed under the watchdog
//!   ([`ProcessGroup::begin_capture`], [`GroupGraph`]).
//! * [`store`]: the key-value stores where the ranks meet (in-process, TCP,
//!   file, torch's c10d TCPStore), and the launch configuration from torchrun / Slurm variables.
//! * [`communicator`]: a bare nccl-tensor `Communicator` from those
//!   variables, for programs that issue its operations themselves.
//! * One error type, [`GroupError`], for every call (`?` takes an
//!   operation's refusal into it too), matched by [`GroupError::kind`].
//! * When ranks do not issue the same collectives: a failure's report
//!   names the first collective they did not issue alike, the opt-in
//!   collective check ([`GroupOptions::collective_checks`]) stops it
//!   before NCCL hangs or mixes the data ([`GroupError::Mismatch`]), and
//!   [`analysis`] reads dumps back; [`ras`] asks NCCL's RAS service which
//!   ranks are dead or unresponsive, as failure reports do.
//!
//! The crate re-exports [`nccl_tensor`] and [`nccl_core`], and its
//! [`prelude`] extends nccl-tensor's, so nccl-group is the one dependency
//! a program needs:
//!
//! ```no_run
//! use nccl_group::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let group = ProcessGroup::from_env("trainer")?; // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//! let local_rank = group.local_rank().unwrap_or(0); // LOCAL_RANK: one GPU per process
//! let device = Device::new(local_rank)?;
//! let stream = device.new_stream()?;
//! let grads = Tensor::from_host(&stream, &[1.0f32; 1024], &[1024])?;
//! let work = group.all_reduce(grads, ReduceOp::Sum, &stream)?;
//! let grads = work.wait()?; // `stream` waits for the all-reduce; the CPU does not
//! # Ok(()) }
//! ```
//!
//! Every blocking call takes a timeout and every failure is an error that
//! names what was expected, what was seen and what to do.
//!
//! # Features: the group, or the dumps alone
//!
//! Feature `cuda` is the process group: everything above, over cudarc,
//! nccl-core, nccl-tensor and nccl-rendezvous. The defaults, and every
//! CUDA version (`cuda-12080`, ...) and linking-mode (`dynamic-loading`,
//! ...) feature turn it on. A program that picks cudarc's features on its
//! own cudarc takes `default-features = false, features = ["cuda"]`.
//!
//! Without it, the crate is the flight recorder's dumps
//! ([`FlightDump`], its records, [`dumps::write_incident`]), their
//! [`analysis`] and, with feature `analysis`, the `nccl-frtrace` binary:
//! a tool that reads dumps takes `default-features = false, features =
//! ["analysis"]` and builds with no CUDA at all (cudarc's build script
//! needs a CUDA version, which such a tool has no reason to pick). One
//! crate behind a feature rather than a second crate: the dump types are
//! the recorder's own (the group writes them, tools read them), so they
//! live, and are versioned, with the group that writes them.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Examples compile without warnings: one that calls a deprecated item fails its doctest.
#![doc(test(attr(deny(warnings), allow(unused))))]

/// Items of the process group itself (feature `cuda`), each under that
/// feature; the rest of the crate is the dumps and their analysis.
macro_rules! with_cuda {
    ($($item:item)*) => { $(#[cfg(feature = "cuda")] $item)* };
}

mod devices;
mod diagnostics;
pub use devices::MAX_LOCAL_DEVICES;
pub use diagnostics::dumps::DUMP_DIR_VARIABLE;
pub use diagnostics::{analysis, dumps, ras, recorder};
pub use recorder::{FlightDump, OpRecord, OpState, PeerProgress};

with_cuda! {
    mod bare;
    mod engine;
    mod error;
    mod failure;
    mod generations;
    mod health;
    mod lineage;
    mod options;
    mod protocols;
    pub mod ranks;
    mod sealed;

    pub use bare::communicator;
    pub use diagnostics::checks::MAX_CHECK_INTERVAL;
    pub use engine::batch::{Coalesced, P2POp};
    pub use engine::buffers::{GroupBuffers, GroupTensor};
    pub use engine::builder::GroupBuilder;
    pub use diagnostics::metrics;
    pub use engine::capture::GraphCapture;
    pub use engine::dumping::Diagnostics;
    pub use engine::graph::GroupGraph;
    pub use engine::memory::DeviceMemStats;
    pub use engine::group::ProcessGroup;
    pub use engine::multi::MultiDevice;
    pub use engine::ownership::{Borrowed, OpBuffers, Owned, Ownership};
    pub use engine::register::GroupRegistered;
    pub use engine::work::{OpResult, Refusal, Work};
    pub use engine::work_buffers::WorkBuffers;
    #[cfg(feature = "async")]
    pub use engine::work_future::WorkFuture;
    pub use error::{ErrorKind, GroupError, Mismatch, OpError, Result, Uncapturable};
    pub use failure::{AbortOutcome, Failure, FailureCause, FailureDetails, FailurePolicy, FoundBy};
    pub use generations::grow::options::{GrowOptions, Grown};
    pub use generations::heal::options::{HealOptions, Healed};
    pub use generations::lifecycle::Lifecycle;
    pub use generations::recovery::Recovery;
    pub use generations::subgroups::SubGroups;
    pub use lineage::{GrowPath, HealPath, SplitPath, SubGroup};
    /// NCCL's communicator options, which [`GroupOptions::with_config`] takes.
    pub use nccl_core::Config;
    /// The rendezvous stores, the launch environment and the meetings:
    /// [`nccl_rendezvous`], under the name this crate has always given them.
    pub use nccl_rendezvous as store;
    pub use options::{
        CommMode, DEFAULT_OP_TIMEOUT, GroupOptions, Liveness, MAX_BEAT_INTERVAL, StreamMode,
        TIMING_VARIABLE,
    };
    pub use ranks::{GlobalRank, GroupRank, Rank};
    pub use store::{
        C10dStore, C10dStoreOptions, CompareSet, FileStore, InProcessStore, Launcher, PrefixStore,
        RendezvousConfig, Store, StoreError, StoreSpec, TcpStore, TcpStoreOptions, TcpStoreServer,
        TcpStoreServerOptions,
    };
    pub use {nccl_core, nccl_rendezvous, nccl_tensor};
}

#[cfg(feature = "cuda")]
/// What most programs name: nccl-tensor's prelude (the tensor types,
/// `bf16` and `f16`, cudarc's slices), the group's own types and
/// errors, and its extension traits ([`Lifecycle`], [`Recovery`],
/// [`Diagnostics`], [`SubGroups`]), `use nccl_group::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Diagnostics, ErrorKind, FailureCause, GlobalRank, GroupError, GroupOptions, GroupRank,
        Lifecycle, ProcessGroup, Recovery, RendezvousConfig, Store, StreamMode, SubGroups, Work,
    };
    pub use nccl_tensor::prelude::*;
}

/// The README's code blocks, compiled as this crate's doctests (they use
/// nccl-tensor and nccl-group, the crates the README shows).
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// docs/framework-authors.md's code blocks, compiled as this crate's
/// doctests, so the page stays true of the API.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../docs/framework-authors.md")]
pub struct FrameworkAuthorsDoctests;

#[cfg(feature = "cuda")]
/// The group's inner parts, exported for its own tests and benches only:
/// the communicator cache and its factory seam, the membership handshake,
/// the cache keys, the event pool and the flight recorder's part of an
/// operation.
///
/// Not a stable API.
#[doc(hidden)]
pub mod testing {
    pub use crate::devices::DeviceList;
    pub use crate::engine::cache::OnceMap;
    pub use crate::engine::comms::{CommCache, CommFactory};
    pub use crate::engine::key::{CommClass, CommKey, Members};
    pub use crate::engine::membership::Membership;
    pub use crate::engine::pool::DevicePool;

    use crate::recorder::{FlightRecorder, OpDescription, OpState};

    /// What every tracked operation costs `recorder`: recorded as issued
    /// at `at`, then finished as completed at `at`; its sequence number.
    pub fn record_and_finish(
        recorder: &FlightRecorder,
        description: &OpDescription,
        at: std::time::Instant,
    ) -> u64 {
        let seq = recorder
            .record(description, crate::diagnostics::clock::nanos(at))
            .seq;
        recorder.finish(seq, OpState::Completed, at, 1, None);
        seq
    }
}
