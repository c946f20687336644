//! Shared by nccl-tensor's `checks_*` test modules: CPU tests of every argument check the
//! communicator runs before NCCL sees anything, through
//! [`Plan::new`] (one operation on a [`Layout`] of buffer descriptions and
//! a stream's device) and the primitive checks of `nccl_tensor::checks`.
//! Each error is matched with all its fields and its exact message, and
//! the order of the checks is pinned where several could fire. No GPU and
//! no NCCL needed.
//!
//! This module holds the communicator facts, buffer descriptions, error
//! matchers and the operation tables the tests loop over.

use std::fmt::Debug;

use nccl_core::nccl_sys::Version;
use nccl_core::{DataType, ReduceOp, Reduction};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{BufferDesc, Error, Extent, Layout, Layouts, Op, Plan, Result, Sizes, rules};
pub use nccl_test_support::ops::every_op;

/// Data types by their short names.
pub const F32: DataType = DataType::Float32;
pub const F16: DataType = DataType::Float16;
pub const BF16: DataType = DataType::Bfloat16;
pub const E4M3: DataType = DataType::Float8E4M3;
pub const E5M2: DataType = DataType::Float8E5M2;
/// The 8-bit floats.
pub const FP8: [DataType; 2] = [E4M3, E5M2];

/// The built-in reductions the tests name.
pub const SUM: Reduction<'static> = Reduction::Builtin(ReduceOp::Sum);
pub const AVG: Reduction<'static> = Reduction::Builtin(ReduceOp::Avg);

/// NCCL releases on either side of a data type's or reduction's first.
pub const V2_9_9: Version = Version::new(2, 9, 9);
pub const V2_10_0: Version = Version::new(2, 10, 0);
pub const V2_23_4: Version = Version::new(2, 23, 4);
pub const V2_24_0: Version = Version::new(2, 24, 0);

/// The world size of [`info`].
pub const WORLD: usize = 4;

/// The reason given for an fp8 reduction on a GPU of compute capability 8.0.
pub const FP8_ON_8_0: &str = "reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, \
     this one is 8.0; all_gather, broadcast, send and recv work on any GPU";

/// The message of a send or receive to rank 2 (this rank) outside a group,
/// after the operation's name.
pub const SELF_2_TEXT: &str = "peer 2 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs";

/// Rank 0 of 4 on device 0, NCCL 2.28.3, compute capability 9.0, no group
/// open. Tests override fields with `CommInfo { field, ..info() }`.
pub fn info() -> CommInfo {
    CommInfo {
        rank: 0,
        world_size: WORLD,
        device: 0,
        nccl_version: Version::new(2, 28, 3),
        compute_capability: (9, 0),
        in_group: false,
    }
}

/// [`info`] on a GPU of compute capability 8.0 (no fp8 reductions).
pub fn ampere() -> CommInfo {
    CommInfo {
        compute_capability: (8, 0),
        ..info()
    }
}

/// A contiguous buffer on device 0.
pub fn buf(dtype: DataType, len: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(dtype, len, 0)
}

/// A contiguous buffer of `f32` on device 0.
pub fn f32s(len: usize) -> BufferDesc<'static> {
    buf(F32, len)
}

/// A contiguous buffer of `f32` on `device`.
pub fn f32s_on(len: usize, device: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(F32, len, device)
}

/// The shape and strides of a transposed `[len / 2, 2]` matrix: `[2, len / 2]`
/// with strides `[1, 2]`.
pub fn transposed(len: usize) -> (Vec<usize>, Vec<usize>) {
    (vec![2, len / 2], vec![1, 2])
}

/// A strided `f32` buffer on device 0 over `shape` and `strides`.
pub fn strided<'a>(shape: &'a [usize], strides: &'a [usize]) -> BufferDesc<'a> {
    BufferDesc {
        dtype: F32,
        len: shape.iter().product(),
        device: 0,
        strided: Some((shape, strides)),
    }
}

/// Separate `input` and `output`.
pub fn pair<'a>(input: BufferDesc<'a>, output: BufferDesc<'a>) -> Layout<'a> {
    Layout::OutOfPlace { input, output }
}

/// Plans `op` on `layout` with the stream on the communicator's device.
pub fn plan<'r>(op: Op<'r>, info: &CommInfo, layout: Layout<'_>) -> Result<Plan<'r>> {
    Plan::new(op, info, &layout, info.device)
}

/// A send of `buffer` to `peer`.
pub fn send<'a>(info: &CommInfo, buffer: BufferDesc<'a>, peer: usize) -> Result<Plan<'a>> {
    plan(Op::Send { peer }, info, Layout::Input(buffer))
}

/// A receive into `buffer` from `peer`.
pub fn recv<'a>(info: &CommInfo, buffer: BufferDesc<'a>, peer: usize) -> Result<Plan<'a>> {
    plan(Op::Recv { peer }, info, Layout::Output(buffer))
}

/// Valid (input, output) lengths for `n` elements per rank at world size
/// [`WORLD`], as `sizes` relates them.
pub fn lens(sizes: Sizes, n: usize) -> (usize, usize) {
    let len = |extent| match extent {
        Extent::Block => n,
        Extent::World => WORLD * n,
    };
    (len(sizes.input), len(sizes.output))
}

/// A layout `op` takes, of `dtype` buffers on device 0 with `n` elements
/// per rank (in place where the operation has that form).
pub fn valid_layout(op: &Op<'_>, dtype: DataType, n: usize) -> Layout<'static> {
    let rules = rules(op);
    let (input, output) = lens(rules.sizes, n);
    match rules.layouts {
        Layouts::Either => Layout::InPlace(buf(dtype, n)),
        Layouts::OutOfPlace => pair(buf(dtype, input), buf(dtype, output)),
        Layouts::Input => Layout::Input(buf(dtype, n)),
        Layouts::Output => Layout::Output(buf(dtype, n)),
    }
}

/// The reductions NCCL supports on `dtype` at all (on a new enough GPU and
/// library): averaging 8-bit floats it does not.
pub fn supported_reductions(dtype: DataType) -> impl Iterator<Item = ReduceOp> {
    ReduceOp::ALL
        .into_iter()
        .filter(move |&red| !(dtype.is_fp8() && red == ReduceOp::Avg))
}

// ---------------------------------------------------------------------------
// The operations, so one test can run a check over all of them.
// ---------------------------------------------------------------------------

/// The operations with an input and an output buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TwoBuffers {
    /// Out-of-place `all_reduce`.
    AllReduce,
    /// Out-of-place `broadcast` (root 0).
    Broadcast,
    /// Out-of-place `reduce` (root 0).
    Reduce,
    /// `all_gather` into a tensor of `world_size` blocks.
    AllGather,
    /// `all_gather` into a list of `world_size` copies of the output
    /// (`checks::all_gather_list`).
    AllGatherList,
    /// `reduce_scatter` of `world_size` blocks into one.
    ReduceScatter,
    /// `all_to_all` of `world_size` blocks.
    AllToAll,
}

impl TwoBuffers {
    /// Every operation with two buffers.
    pub const ALL: [TwoBuffers; 7] = [
        TwoBuffers::AllReduce,
        TwoBuffers::Broadcast,
        TwoBuffers::Reduce,
        TwoBuffers::AllGather,
        TwoBuffers::AllGatherList,
        TwoBuffers::ReduceScatter,
        TwoBuffers::AllToAll,
    ];

    /// Those that reduce.
    pub const REDUCING: [TwoBuffers; 3] = [
        TwoBuffers::AllReduce,
        TwoBuffers::Reduce,
        TwoBuffers::ReduceScatter,
    ];

    /// The name in error messages.
    pub fn name(self) -> &'static str {
        match self {
            TwoBuffers::AllReduce => "all_reduce",
            TwoBuffers::Broadcast => "broadcast",
            TwoBuffers::Reduce => "reduce",
            TwoBuffers::AllGather | TwoBuffers::AllGatherList => "all_gather",
            TwoBuffers::ReduceScatter => "reduce_scatter",
            TwoBuffers::AllToAll => "all_to_all",
        }
    }

    /// What the errors call the output buffer.
    pub fn output_name(self) -> &'static str {
        match self {
            TwoBuffers::AllGatherList => "an output",
            _ => "output",
        }
    }

    /// The operation planned, with `reduction` where it reduces; `None`
    /// for the list form, which has checks of its own.
    pub fn op(self, reduction: Reduction<'_>) -> Option<Op<'_>> {
        match self {
            TwoBuffers::AllReduce => Some(Op::AllReduce(reduction)),
            TwoBuffers::Broadcast => Some(Op::Broadcast { root: 0 }),
            TwoBuffers::Reduce => Some(Op::Reduce {
                op: reduction,
                root: 0,
            }),
            TwoBuffers::AllGather => Some(Op::AllGather),
            TwoBuffers::AllGatherList => None,
            TwoBuffers::ReduceScatter => Some(Op::ReduceScatter(reduction)),
            TwoBuffers::AllToAll => Some(Op::AllToAll),
        }
    }

    /// Valid (input, output) lengths for `n` elements per rank at world size
    /// [`WORLD`] (each output of the list form holds `n`).
    pub fn lens(self, n: usize) -> (usize, usize) {
        match self.op(SUM) {
            Some(op) => lens(rules(&op).sizes, n),
            None => (n, n),
        }
    }

    /// Every check of the operation on `input` and `output`.
    pub fn check(
        self,
        info: &CommInfo,
        input: &BufferDesc<'_>,
        output: &BufferDesc<'_>,
        reduction: Reduction<'_>,
    ) -> Result<()> {
        match self.op(reduction) {
            Some(op) => plan(op, info, pair(*input, *output)).map(drop),
            None => {
                checks::all_gather_list(info, input, vec![*output; info.world_size].into_iter())
            }
        }
    }
}

/// The operations on one buffer: in-place collectives and point-to-point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OneBuffer {
    /// In-place `all_reduce`.
    AllReduce,
    /// In-place `broadcast` (root 0).
    Broadcast,
    /// In-place `reduce` (root 0).
    Reduce,
    /// To rank 1: `("send", "dst")`.
    Send,
    /// From rank 1: `("recv", "src")`.
    Recv,
}

impl OneBuffer {
    /// Every operation on one buffer.
    pub const ALL: [OneBuffer; 5] = [
        OneBuffer::AllReduce,
        OneBuffer::Broadcast,
        OneBuffer::Reduce,
        OneBuffer::Send,
        OneBuffer::Recv,
    ];

    /// The name in error messages.
    pub fn name(self) -> &'static str {
        match self {
            OneBuffer::AllReduce => "all_reduce",
            OneBuffer::Broadcast => "broadcast",
            OneBuffer::Reduce => "reduce",
            OneBuffer::Send => "send",
            OneBuffer::Recv => "recv",
        }
    }

    /// What the errors call the buffer: in-place collectives and
    /// point-to-point alike name their one buffer "tensor".
    pub fn what(self) -> &'static str {
        "tensor"
    }

    /// Every check of the operation on `buffer`.
    pub fn check(
        self,
        info: &CommInfo,
        buffer: &BufferDesc<'_>,
        reduction: Reduction<'_>,
    ) -> Result<()> {
        let (op, layout) = match self {
            OneBuffer::AllReduce => (Op::AllReduce(reduction), Layout::InPlace(*buffer)),
            OneBuffer::Broadcast => (Op::Broadcast { root: 0 }, Layout::InPlace(*buffer)),
            OneBuffer::Reduce => (
                Op::Reduce {
                    op: reduction,
                    root: 0,
                },
                Layout::InPlace(*buffer),
            ),
            OneBuffer::Send => (Op::Send { peer: 1 }, Layout::Input(*buffer)),
            OneBuffer::Recv => (Op::Recv { peer: 1 }, Layout::Output(*buffer)),
        };
        plan(op, info, layout).map(drop)
    }
}

// ---------------------------------------------------------------------------
// Error matchers: the variant with every field, and the exact message.
// Each is named after its `Error` variant.
// ---------------------------------------------------------------------------

/// The error of `result`, whose message must be `text`.
#[track_caller]
pub fn expect_err<T: Debug>(result: Result<T>, text: &str) -> Error {
    match result {
        Ok(value) => panic!("expected the error {text:?}, but the check passed: {value:?}"),
        Err(err) => {
            assert_eq!(err.to_string(), text, "message of {err:?}");
            err
        }
    }
}

/// Writes one matcher per row, named after what it expects: the error of
/// `result`, whose message must be `text`, is `Error::Variant` with every
/// field equal to the value the row gives it (the parameter of the same
/// name where the row names only the field).
macro_rules! error_matchers {
    ($(
        $name:ident($($param:tt: $ty:ty),*) => $variant:ident { $($field:ident $(: $value:expr)?),* };
    )*) => {$(
        #[track_caller]
        pub fn $name<T: Debug>(result: Result<T>, $($param: $ty,)* text: &str) {
            let expected = ($(error_matchers!(@value $field $(: $value)?),)*);
            match expect_err(result, text) {
                Error::$variant { $($field),* } => assert_eq!(($($field,)*), expected),
                other => panic!(concat!("expected ", stringify!($variant), ", got {:?}"), other),
            }
        }
    )*};
    (@value $field:ident) => { $field };
    (@value $field:ident: $value:expr) => { $value };
}

error_matchers! {
    dtype_mismatch(op: &str, input: DataType, output: DataType) => DtypeMismatch { op, input, output };
    wrong_length((op, what): (&str, &str), expected: usize, given: usize, rule: &str)
        => WrongLength { op, what, expected, given, rule };
    not_divisible((op, what): (&str, &str), given: usize, world_size: usize)
        => NotDivisible { op, what, given, world_size };
    wrong_device((op, what): (&str, &str), expected: usize, given: usize)
        => WrongDevice { op, what, expected, given };
    not_contiguous((op, what): (&str, &str), shape: &[usize], strides: &[usize])
        => NotContiguous { op, what, shape: shape.to_vec(), strides: strides.to_vec() };
    rank_out_of_range((op, what): (&str, &str), given: usize, world_size: usize)
        => RankOutOfRange { op, what, given, world_size };
    self_peer(op: &str, peer: usize) => SelfPeerOutsideGroup { op, peer };
    unsupported_dtype(op: &str, dtype: DataType, (needed, loaded): (Version, Version))
        => UnsupportedDataType { op, dtype, needed, loaded };
    unsupported_reduction((op, reduction): (&str, &str), dtype: DataType, reason: &str)
        => UnsupportedReduction { op, reduction, dtype, reason: reason.to_string() };
    wrong_layout(op: &str, (expected, given): (&str, &str)) => WrongLayout { op, expected, given };
}
