//! The argument rules every operation is checked with, as pure functions
//! of buffer descriptions and communicator facts: no CUDA, no NCCL, so
//! they are tested on machines without a GPU. Which rules an operation
//! applies is written once, in [`Plan::new`](crate::Plan::new); the list
//! form of `all_gather` has its own ([`all_gather_list`]).

use nccl_core::Version;
use nccl_core::{DataType, ReduceOp, Reduction};

use crate::buffer::BufferDesc;
use crate::error::{Error, Result};

/// What the checks need to know about the communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommInfo {
    /// This rank.
    pub rank: usize,
    /// The number of ranks.
    pub world_size: usize,
    /// The communicator's device ordinal.
    pub device: usize,
    /// The loaded NCCL.
    pub nccl_version: Version,
    /// The device's compute capability.
    pub compute_capability: (i32, i32),
    /// Whether a [`nccl_core::Group`] is open on this thread.
    pub in_group: bool,
}

/// A stream on the device the operation runs on (`expected`).
pub fn stream(op: &'static str, stream_device: usize, expected: usize) -> Result<()> {
    if stream_device == expected {
        Ok(())
    } else {
        Err(Error::WrongDevice {
            op,
            what: "stream",
            expected,
            given: stream_device,
        })
    }
}

/// A buffer NCCL can use: on the communicator's device, contiguous, of a
/// data type the loaded NCCL knows.
pub fn buffer(
    op: &'static str,
    what: &'static str,
    desc: &BufferDesc<'_>,
    info: &CommInfo,
) -> Result<()> {
    if desc.device != info.device {
        return Err(Error::WrongDevice {
            op,
            what,
            expected: info.device,
            given: desc.device,
        });
    }
    if let Some((shape, strides)) = desc.strided {
        return Err(Error::NotContiguous {
            op,
            what,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        });
    }
    let needed = desc.dtype.min_version();
    if needed > info.nccl_version {
        return Err(Error::UnsupportedDataType {
            op,
            dtype: desc.dtype,
            needed,
            loaded: info.nccl_version,
        });
    }
    Ok(())
}

/// Input and output of the same data type.
pub fn same_dtype(op: &'static str, input: &BufferDesc<'_>, output: &BufferDesc<'_>) -> Result<()> {
    if input.dtype == output.dtype {
        Ok(())
    } else {
        Err(Error::DtypeMismatch {
            op,
            input: input.dtype,
            output: output.dtype,
        })
    }
}

/// A buffer of exactly `expected` elements.
pub fn length(
    op: &'static str,
    what: &'static str,
    expected: usize,
    given: usize,
    rule: &'static str,
) -> Result<()> {
    if expected == given {
        Ok(())
    } else {
        Err(Error::WrongLength {
            op,
            what,
            expected,
            given,
            rule,
        })
    }
}

/// A root or peer in `0..world_size`.
pub fn rank(op: &'static str, what: &'static str, given: usize, info: &CommInfo) -> Result<()> {
    if given < info.world_size {
        Ok(())
    } else {
        Err(Error::RankOutOfRange {
            op,
            what,
            given,
            world_size: info.world_size,
        })
    }
}

/// A peer for a send or receive: in range, and not this rank unless a
/// group is open (NCCL would wait forever for the other half).
pub fn peer(op: &'static str, what: &'static str, given: usize, info: &CommInfo) -> Result<()> {
    rank(op, what, given, info)?;
    if given == info.rank && !info.in_group {
        return Err(Error::SelfPeerOutsideGroup {
            op,
            peer: info.rank,
        });
    }
    Ok(())
}

/// A reduction the data type, the device and the loaded NCCL support.
pub fn reduction(
    op: &'static str,
    reduction: Reduction<'_>,
    dtype: DataType,
    info: &CommInfo,
) -> Result<()> {
    let unsupported = |reason: String| Error::UnsupportedReduction {
        op,
        reduction: reduction.name(),
        dtype,
        reason,
    };
    if dtype.is_fp8() && info.compute_capability < (9, 0) {
        let (major, minor) = info.compute_capability;
        return Err(unsupported(format!(
            "reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, this one is {major}.{minor}; \
             all_gather, broadcast, send and recv work on any GPU"
        )));
    }
    let scaling = matches!(
        reduction,
        Reduction::Builtin(ReduceOp::Avg) | Reduction::PreMulSum(_)
    );
    if dtype.is_fp8() && scaling {
        // NCCL 2.28 answers ncclInvalidArgument to these (seen on an H200).
        return Err(unsupported(
            "NCCL has no averaging or pre-multiplied sums on 8-bit floats; sum, prod, max and min work".to_string(),
        ));
    }
    let needed = match reduction {
        Reduction::Builtin(ReduceOp::Avg) => Some(Version::new(2, 10, 0)),
        Reduction::PreMulSum(_) => Some(Version::new(2, 11, 0)),
        Reduction::Builtin(_) => None,
    };
    if let Some(needed) = needed
        && needed > info.nccl_version
    {
        return Err(unsupported(format!(
            "it needs NCCL {needed} or newer, but the loaded libnccl is {}",
            info.nccl_version
        )));
    }
    if let Some(op_dtype) = reduction.data_type()
        && op_dtype != dtype
    {
        return Err(unsupported(format!(
            "the pre-multiplied sum was created for {op_dtype}"
        )));
    }
    Ok(())
}

/// `all_gather` into a list: one output per rank, each like the input.
pub fn all_gather_list<'a>(
    info: &CommInfo,
    input: &BufferDesc<'_>,
    outputs: impl ExactSizeIterator<Item = BufferDesc<'a>>,
) -> Result<()> {
    const OP: &str = "all_gather";
    buffer(OP, "input", input, info)?;
    length(
        OP,
        "output list",
        info.world_size,
        outputs.len(),
        "one output per rank",
    )?;
    for output in outputs {
        buffer(OP, "an output", &output, info)?;
        same_dtype(OP, input, &output)?;
        length(
            OP,
            "an output",
            input.len,
            output.len,
            "the same number of elements as the input",
        )?;
    }
    Ok(())
}

/// `all_to_all_single` with split sizes: both buffers usable and of one
/// data type, one split size per rank in each list, the sizes adding up
/// to their buffer's length, and what this rank sends itself
/// (`input_splits[rank]`) what it receives from itself.
pub fn all_to_all_splits(
    info: &CommInfo,
    input: &BufferDesc<'_>,
    output: &BufferDesc<'_>,
    input_splits: &[usize],
    output_splits: &[usize],
) -> Result<()> {
    const OP: &str = "all_to_all_single";
    buffer(OP, "input", input, info)?;
    buffer(OP, "output", output, info)?;
    same_dtype(OP, input, output)?;
    split_sizes(
        OP,
        info,
        "input_split_sizes",
        input_splits,
        "input",
        input.len,
    )?;
    split_sizes(
        OP,
        info,
        "output_split_sizes",
        output_splits,
        "output",
        output.len,
    )?;
    match (input_splits.get(info.rank), output_splits.get(info.rank)) {
        (Some(&sent), Some(&received)) => length(
            OP,
            "output_split_sizes[this rank]",
            sent,
            received,
            "input_split_sizes[this rank]: what this rank sends itself",
        ),
        // A rank outside its own communicator has no self exchange.
        _ => Ok(()),
    }
}

/// One split size per rank, adding up to the `buffer`'s `len`.
fn split_sizes(
    op: &'static str,
    info: &CommInfo,
    what: &'static str,
    splits: &[usize],
    buffer: &'static str,
    len: usize,
) -> Result<()> {
    if splits.len() != info.world_size {
        return Err(Error::SplitCount {
            op,
            what,
            given: splits.len(),
            world_size: info.world_size,
        });
    }
    let sum: u128 = splits.iter().map(|&size| size as u128).sum();
    if sum != len as u128 {
        return Err(Error::SplitSum {
            op,
            what,
            buffer,
            sum,
            len,
        });
    }
    Ok(())
}

/// `all_to_all` between lists: one input and one output per rank, each a
/// buffer NCCL can use (their lengths are the peers' business; what this
/// rank sends itself is checked by the batch it becomes).
pub fn all_to_all_list(
    info: &CommInfo,
    inputs: &[BufferDesc<'_>],
    outputs: &[BufferDesc<'_>],
) -> Result<()> {
    const OP: &str = "all_to_all";
    let world = info.world_size;
    length(OP, "input list", world, inputs.len(), "one input per rank")?;
    length(
        OP,
        "output list",
        world,
        outputs.len(),
        "one output per rank",
    )?;
    for input in inputs {
        buffer(OP, "an input", input, info)?;
    }
    for output in outputs {
        buffer(OP, "an output", output, info)?;
    }
    Ok(())
}
