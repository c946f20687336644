//! Errors of the tensor API: every argument check has its own variant that
//! names the operation, what was expected and what was given.

use nccl_core::{DataType, ErrorKind, ResultCode};

/// Everything a tensor operation can fail with.
///
/// `Debug` leads with the message (and its sources), then names the variant and
/// its kind, so `fn main() -> Result<(), nccl_tensor::Error>` prints the
/// sentence.
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum Error {
    /// An error of the communicator layer (NCCL, CUDA, the library).
    #[error(transparent)]
    Core(#[from] nccl_core::Error),
    /// Input and output have different data types.
    #[error(
        "{op}: the output is {output} but the input is {input}; both must have the same data type"
    )]
    DtypeMismatch {
        /// The operation.
        op: &'static str,
        /// The input's data type.
        input: DataType,
        /// The output's data type.
        output: DataType,
    },
    /// A buffer of the wrong number of elements.
    #[error("{op}: {what} has {given} elements, expected {expected} ({rule})")]
    WrongLength {
        /// The operation.
        op: &'static str,
        /// Which buffer.
        what: &'static str,
        /// The number of elements required.
        expected: usize,
        /// The number given.
        given: usize,
        /// Why that many.
        rule: &'static str,
    },
    /// A buffer whose length must be a multiple of the world size.
    #[error(
        "{op}: {what} has {given} elements, which is not a multiple of the world size {world_size}"
    )]
    NotDivisible {
        /// The operation.
        op: &'static str,
        /// Which buffer.
        what: &'static str,
        /// Its number of elements.
        given: usize,
        /// The communicator's world size.
        world_size: usize,
    },
    /// A buffer on another device than the communicator's.
    #[error("{op}: {what} is on device {given}, but the communicator is on device {expected}")]
    WrongDevice {
        /// The operation.
        op: &'static str,
        /// Which buffer or stream.
        what: &'static str,
        /// The communicator's device.
        expected: usize,
        /// The buffer's device.
        given: usize,
    },
    /// A strided, non-contiguous tensor, which NCCL cannot address.
    #[error(
        "{op}: {what} is not contiguous (shape {shape:?}, strides {strides:?}); make a contiguous copy first"
    )]
    NotContiguous {
        /// The operation.
        op: &'static str,
        /// Which buffer.
        what: &'static str,
        /// Its shape.
        shape: Vec<usize>,
        /// Its strides, in elements.
        strides: Vec<usize>,
    },
    /// A root or peer outside `0..world_size`.
    #[error("{op}: {what} {given} is out of range: expected 0..{world_size}")]
    RankOutOfRange {
        /// The operation.
        op: &'static str,
        /// "root", "dst" or "src".
        what: &'static str,
        /// The rank given.
        given: usize,
        /// The communicator's world size.
        world_size: usize,
    },
    /// A send or receive to this rank itself outside a group, which NCCL
    /// would never complete.
    #[error(
        "{op}: peer {peer} is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs"
    )]
    SelfPeerOutsideGroup {
        /// The operation.
        op: &'static str,
        /// The peer (this rank).
        peer: usize,
    },
    /// A data type the loaded NCCL does not know.
    #[error(
        "{op}: data type {dtype} needs NCCL {needed} or newer, but the loaded libnccl is {loaded}"
    )]
    UnsupportedDataType {
        /// The operation.
        op: &'static str,
        /// The data type.
        dtype: DataType,
        /// The first release with it.
        needed: nccl_core::Version,
        /// The loaded release.
        loaded: nccl_core::Version,
    },
    /// A reduction the data type, the device or the loaded NCCL does not support.
    #[error("{op}: reduction {reduction} on {dtype} is not supported: {reason}")]
    UnsupportedReduction {
        /// The operation.
        op: &'static str,
        /// The reduction's name.
        reduction: &'static str,
        /// The data type.
        dtype: DataType,
        /// Why not, and what would work.
        reason: String,
    },
    /// The same tensor cell was passed twice to one operation (as input
    /// and output, or as two outputs).
    #[error(
        "{op}: the same TensorCell is passed twice (as input and output, or as two outputs); pass distinct tensors or use the in-place form"
    )]
    AliasedCells {
        /// The operation.
        op: &'static str,
    },
    /// Buffers laid out in a way the operation does not take (one buffer
    /// to an operation that needs an input and an output, ...).
    #[error("{op} takes {expected}, but was given {given}")]
    WrongLayout {
        /// The operation.
        op: &'static str,
        /// The layouts it takes.
        expected: &'static str,
        /// The layout given.
        given: &'static str,
    },
    /// An operation of a batch ([`Batch`](crate::Batch)) failed its own
    /// checks; `error` says which.
    #[error("operation {index} of the batch: {error}")]
    InBatch {
        /// Its position in the batch, from 0.
        index: usize,
        /// The operation's error (part of this message, so not a `source()`).
        error: Box<Error>,
    },
    /// A batch of more operations than [`MAX_BATCH_OPERATIONS`](crate::MAX_BATCH_OPERATIONS).
    #[error(
        "a batch holds at most {max} operations, but {given} were given; issue it as several batches"
    )]
    BatchTooLong {
        /// The operations given.
        given: usize,
        /// The most a batch holds.
        max: usize,
    },
    /// One tensor cell used twice in a batch (by two operations, or as
    /// both buffers of one).
    #[error(
        "operations {first} and {second} of the batch use the same TensorCell; a batch locks each cell once, \
         so pass it once (receiving into a buffer that is also sent or received into would race on the GPU anyway)"
    )]
    CellTwiceInBatch {
        /// The first operation that uses it.
        first: usize,
        /// The operation that uses it again.
        second: usize,
    },
    /// Sends to this rank itself and receives from it that do not pair up.
    #[error(
        "the batch has {sends} send(s) to this rank ({rank}) itself and {recvs} receive(s) from it; NCCL pairs \
         them in order, so their numbers must be equal, or a send waits forever"
    )]
    UnpairedSelfExchange {
        /// This rank.
        rank: usize,
        /// Sends to it.
        sends: usize,
        /// Receives from it.
        recvs: usize,
    },
    /// A send to this rank itself whose paired receive differs in size or
    /// data type.
    #[error(
        "operation {send} of the batch sends {sent} elements of {sent_dtype} to this rank itself, but the receive \
         it pairs with (operation {recv}) takes {received} elements of {received_dtype}; they must match"
    )]
    SelfExchangeMismatch {
        /// The send's position in the batch.
        send: usize,
        /// The paired receive's position.
        recv: usize,
        /// Elements sent.
        sent: usize,
        /// Their data type.
        sent_dtype: DataType,
        /// Elements the receive takes.
        received: usize,
        /// Its data type.
        received_dtype: DataType,
    },
    /// A list of split sizes without one entry per rank.
    #[error("{op}: {what} has {given} entries, expected one per rank ({world_size})")]
    SplitCount {
        /// The operation.
        op: &'static str,
        /// Which list.
        what: &'static str,
        /// Its number of entries.
        given: usize,
        /// The communicator's world size.
        world_size: usize,
    },
    /// Split sizes that do not add up to their buffer's length.
    #[error(
        "{op}: {what} add up to {sum} elements, but the {buffer} has {len}; they must be equal"
    )]
    SplitSum {
        /// The operation.
        op: &'static str,
        /// Which list.
        what: &'static str,
        /// Which buffer it splits.
        buffer: &'static str,
        /// The sum of the sizes (wider than `usize`, so it never overflows).
        sum: u128,
        /// The buffer's number of elements.
        len: usize,
    },
    /// A tensor whose shape does not match its data.
    #[error("invalid shape {shape:?}: it holds {expected} elements, but the data has {given}")]
    ShapeMismatch {
        /// The shape asked for.
        shape: Vec<usize>,
        /// The product of the shape.
        expected: usize,
        /// The number of elements available.
        given: usize,
    },
    /// A shape whose number of elements does not fit in `usize`.
    #[error("invalid shape {shape:?}: its number of elements overflows usize")]
    ShapeOverflow {
        /// The shape asked for.
        shape: Vec<usize>,
    },
    /// Strides that reach past the tensor's storage.
    #[error(
        "invalid strides {strides:?} for shape {shape:?}: they reach element {needed}, but the storage has {storage} elements"
    )]
    StridesOutOfBounds {
        /// The shape.
        shape: Vec<usize>,
        /// The strides, in elements.
        strides: Vec<usize>,
        /// One past the last element they address.
        needed: usize,
        /// The storage's number of elements.
        storage: usize,
    },
    /// A view range that reaches past the tensor.
    #[error("range {start}..{end} is out of bounds for a tensor of {len} elements")]
    RangeOutOfBounds {
        /// First element of the range.
        start: usize,
        /// One past the last element.
        end: usize,
        /// The tensor's number of elements.
        len: usize,
    },
    /// The asynchronous operation that last wrote the tensor (a process
    /// group's, say) may have run with a failed peer: the values read are
    /// not its result ([`crate::producer`]).
    ///
    /// The message carries the producer's own (a process group's names
    /// the cause, the ranks and the collective), so printing this error
    /// alone says why.
    #[error(
        "the operation that produced this tensor's contents failed, so they are not its result: {error}"
    )]
    ProducerFailed {
        /// The producer's error (a `nccl_group::GroupError` from a process
        /// group: downcast it to branch on it). Part of this message, so
        /// not a `source()`: a chain of sources prints it once.
        error: crate::producer::ProducerError,
    },
    /// A typed access to a [`TensorCell`](crate::TensorCell) or an
    /// [`AnyTensor`](crate::AnyTensor) of another data type.
    #[error("the tensor holds {actual}, not {requested}")]
    WrongType {
        /// The cell's data type.
        actual: DataType,
        /// The type asked for.
        requested: DataType,
    },
}

impl Error {
    /// What kind of failure this is; a core error answers its own
    /// [`nccl_core::Error::kind`]:
    ///
    /// | Variant | Kind |
    /// |---|---|
    /// | `Core(error)` | `error.kind()` |
    /// | `InBatch { error, .. }` | `error.kind()` |
    /// | `WrongDevice` | [`ErrorKind::WrongDevice`] |
    /// | `RankOutOfRange` | [`ErrorKind::RankOutOfRange`] |
    /// | `UnsupportedDataType`, `UnsupportedReduction` | [`ErrorKind::Unsupported`] |
    /// | `ProducerFailed` | [`ErrorKind::Aborted`] (its producer's communicators were aborted) |
    /// | every other variant (a length, a data type, a shape, an alias, a range, a layout, a batch's pairing, split sizes) | [`ErrorKind::InvalidArgument`] |
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Core(error) => error.kind(),
            Error::InBatch { error, .. } => error.kind(),
            Error::WrongDevice { .. } => ErrorKind::WrongDevice,
            Error::RankOutOfRange { .. } => ErrorKind::RankOutOfRange,
            Error::UnsupportedDataType { .. } | Error::UnsupportedReduction { .. } => {
                ErrorKind::Unsupported
            }
            Error::ProducerFailed { .. } => ErrorKind::Aborted,
            Error::DtypeMismatch { .. }
            | Error::WrongLength { .. }
            | Error::NotDivisible { .. }
            | Error::NotContiguous { .. }
            | Error::SelfPeerOutsideGroup { .. }
            | Error::AliasedCells { .. }
            | Error::ShapeMismatch { .. }
            | Error::ShapeOverflow { .. }
            | Error::StridesOutOfBounds { .. }
            | Error::RangeOutOfBounds { .. }
            | Error::WrongType { .. }
            | Error::WrongLayout { .. }
            | Error::BatchTooLong { .. }
            | Error::CellTwiceInBatch { .. }
            | Error::UnpairedSelfExchange { .. }
            | Error::SelfExchangeMismatch { .. }
            | Error::SplitCount { .. }
            | Error::SplitSum { .. } => ErrorKind::InvalidArgument,
        }
    }

    /// The NCCL result code behind this error, from the core error it
    /// wraps ([`nccl_core::Error::nccl_code`]).
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            Error::Core(error) => error.nccl_code(),
            _ => None,
        }
    }

    /// True when a wait ran past its deadline ([`ErrorKind::Timeout`]).
    pub fn is_timeout(&self) -> bool {
        self.kind() == ErrorKind::Timeout
    }

    /// The variant's name, for `Debug`.
    fn variant(&self) -> &'static str {
        match self {
            Error::Core(_) => "Core",
            Error::DtypeMismatch { .. } => "DtypeMismatch",
            Error::WrongLength { .. } => "WrongLength",
            Error::NotDivisible { .. } => "NotDivisible",
            Error::WrongDevice { .. } => "WrongDevice",
            Error::NotContiguous { .. } => "NotContiguous",
            Error::RankOutOfRange { .. } => "RankOutOfRange",
            Error::SelfPeerOutsideGroup { .. } => "SelfPeerOutsideGroup",
            Error::UnsupportedDataType { .. } => "UnsupportedDataType",
            Error::UnsupportedReduction { .. } => "UnsupportedReduction",
            Error::AliasedCells { .. } => "AliasedCells",
            Error::WrongLayout { .. } => "WrongLayout",
            Error::InBatch { .. } => "InBatch",
            Error::BatchTooLong { .. } => "BatchTooLong",
            Error::CellTwiceInBatch { .. } => "CellTwiceInBatch",
            Error::UnpairedSelfExchange { .. } => "UnpairedSelfExchange",
            Error::SelfExchangeMismatch { .. } => "SelfExchangeMismatch",
            Error::SplitCount { .. } => "SplitCount",
            Error::SplitSum { .. } => "SplitSum",
            Error::ShapeMismatch { .. } => "ShapeMismatch",
            Error::ShapeOverflow { .. } => "ShapeOverflow",
            Error::StridesOutOfBounds { .. } => "StridesOutOfBounds",
            Error::RangeOutOfBounds { .. } => "RangeOutOfBounds",
            Error::ProducerFailed { .. } => "ProducerFailed",
            Error::WrongType { .. } => "WrongType",
        }
    }
}

impl std::fmt::Debug for Error {
    /// `all_reduce: the output has 3 elements, expected 4 (...)
    /// (nccl_tensor::Error::WrongLength, kind InvalidArgument)`: the
    /// message and its sources on one line, then the variant and kind.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (nccl_tensor::Error::{}, kind {:?})",
            nccl_core::ErrorChain(self),
            self.variant(),
            self.kind()
        )
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
