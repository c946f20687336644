//! Errors of the process group.

use std::sync::Arc;
use std::time::Duration;

use crate::failure::Failure;
use crate::store::StoreError;

/// Everything a process-group call can fail with.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The rendezvous store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A communicator operation failed (NCCL, CUDA, or an argument check).
    #[error(transparent)]
    Tensor(#[from] nccl_tensor::Error),
    /// Another rank did not publish a communicator's unique id in time.
    #[error(
        "timed out after {waited:?} waiting for the NCCL unique id under store key {key:?} from rank {creator} \
         (store at {store}); likely causes: rank {creator} has not reached this collective yet (slower, stuck, or \
         issuing collectives in another order), it exited, or the ranks disagree on the group name or device list"
    )]
    Rendezvous {
        /// The store key.
        key: String,
        /// The rank that creates the id (0, or the lower rank of a pair).
        creator: usize,
        /// Where the store is (rank 0's address for the TCP store).
        store: String,
        /// How long this rank waited.
        waited: Duration,
    },
    /// The group was aborted (by [`ProcessGroup::abort`](crate::ProcessGroup::abort)
    /// or an error); create a new one.
    #[error("process group {name:?} was aborted; create a new group (the same name may be reused)")]
    Aborted {
        /// The group's name.
        name: String,
    },
    /// The watchdog failed the group: an operation timed out, or NCCL or
    /// CUDA reported an error. The [`Failure`] says which operation, why,
    /// which ranks lag and where the flight recorder was written.
    #[error("{0}")]
    Failed(Arc<Failure>),
    /// Aborting the group's communicators had not finished in time; it was
    /// left running on its own thread.
    #[error(
        "aborting process group {name:?} had not finished after {waited:?}; it was left running on its own \
         thread (the group is unusable; NCCL may be stuck in the driver)"
    )]
    AbortStalled {
        /// The group's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// Creating a communicator did not finish in time (NCCL's init waits
    /// for every rank to join).
    #[error(
        "creating the communicator of store key {key:?} did not finish within {waited:?}; ranks {missing:?} never \
         joined it (they have not reached this operation, exited, or disagree on the group name or device list); \
         NCCL said: {source}"
    )]
    InitTimeout {
        /// The store key of the communicator.
        key: String,
        /// How long this rank waited.
        waited: Duration,
        /// The ranks that had not announced themselves in the store.
        missing: Vec<usize>,
        /// NCCL's (nccl-core's) error.
        source: Box<GroupError>,
    },
    /// The group stopped creating communicators (it failed, was aborted or
    /// destroyed) while this call was about to create one.
    #[error(
        "process group {name:?} no longer creates communicators (it failed, was aborted or destroyed); \
         create a new group"
    )]
    Closed {
        /// The group's name.
        name: String,
    },
    /// The group was destroyed.
    #[error("process group {name:?} was destroyed")]
    Destroyed {
        /// The group's name.
        name: String,
    },
    /// An argument that does not fit the group.
    #[error("invalid {argument}: expected {expected}, got {given}")]
    InvalidArgument {
        /// Which argument.
        argument: &'static str,
        /// What is accepted.
        expected: String,
        /// What was given.
        given: String,
    },
    /// A wait ran past its timeout.
    #[error("{operation} did not complete within {waited:?}")]
    Timeout {
        /// What was waited for.
        operation: &'static str,
        /// How long.
        waited: Duration,
    },
    /// A CUDA call (event, stream) failed.
    #[error("CUDA error during {during}: {source}")]
    Cuda {
        /// What was being done.
        during: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
}

impl From<nccl_core::Error> for GroupError {
    fn from(error: nccl_core::Error) -> Self {
        GroupError::Tensor(nccl_tensor::Error::Core(error))
    }
}

impl GroupError {
    pub(crate) fn cuda(during: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Self {
        move |source| GroupError::Cuda { during, source }
    }
}

/// An operation that failed before its work was enqueued, with the buffers
/// it was given, so the caller keeps them.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct OpError<B> {
    /// What went wrong.
    #[source]
    pub error: GroupError,
    /// The buffers passed to the operation, untouched by NCCL.
    pub buffers: B,
}

/// Shorthand for this crate's results.
pub type Result<T, E = GroupError> = std::result::Result<T, E>;
