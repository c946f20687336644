//! CPU tests of every argument check in `nccl_tensor::checks`, the pure
//! functions the communicator runs before NCCL sees anything. Each error is
//! matched with all its fields and its exact message, and the order of the
//! checks is pinned where several could fire. No GPU and no NCCL needed.
//!
//! Out of scope here: `Reduction::PreMulSum` (its NCCL 2.11 requirement and
//! its data-type match) needs a pre-multiplied sum created on a live
//! communicator, so those checks are left to the GPU tests.

use nccl_core::Version;
use nccl_core::{DataType, ReduceOp, Reduction};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{BufferDesc, Error, Result};

const F32: DataType = DataType::Float32;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::Bfloat16;
const E4M3: DataType = DataType::Float8E4M3;
const E5M2: DataType = DataType::Float8E5M2;
const FP8: [DataType; 2] = [E4M3, E5M2];

const SUM: Reduction<'static> = Reduction::Builtin(ReduceOp::Sum);
const AVG: Reduction<'static> = Reduction::Builtin(ReduceOp::Avg);

const V2_9_9: Version = Version::new(2, 9, 9);
const V2_10_0: Version = Version::new(2, 10, 0);
const V2_23_4: Version = Version::new(2, 23, 4);
const V2_24_0: Version = Version::new(2, 24, 0);

/// The reason given for an fp8 reduction on a GPU of compute capability 8.0.
const FP8_ON_8_0: &str = "reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, \
     this one is 8.0; all_gather, broadcast, send and recv work on any GPU";

/// Rank 0 of 4 on device 0, NCCL 2.28.3, compute capability 9.0, no group
/// open. Tests override fields with `CommInfo { field, ..info() }`.
fn info() -> CommInfo {
    CommInfo {
        rank: 0,
        world_size: 4,
        device: 0,
        nccl_version: Version::new(2, 28, 3),
        compute_capability: (9, 0),
        in_group: false,
    }
}

/// A contiguous buffer on device 0.
fn buf(dtype: DataType, len: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(dtype, len, 0)
}

/// A contiguous buffer of `f32` on device 0.
fn f32s(len: usize) -> BufferDesc<'static> {
    buf(F32, len)
}

/// A contiguous buffer of `f32` on `device`.
fn f32s_on(len: usize, device: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(F32, len, device)
}

/// The shape and strides of a transposed `[len / 2, 2]` matrix: `[2, len / 2]`
/// with strides `[1, 2]`.
fn transposed(len: usize) -> (Vec<usize>, Vec<usize>) {
    (vec![2, len / 2], vec![1, 2])
}

/// A strided `f32` buffer on device 0 over `shape` and `strides`.
fn strided<'a>(shape: &'a [usize], strides: &'a [usize]) -> BufferDesc<'a> {
    BufferDesc {
        dtype: F32,
        len: shape.iter().product(),
        device: 0,
        strided: Some((shape, strides)),
    }
}

// ---------------------------------------------------------------------------
// Error matchers: the variant with every field, and the exact message.
// ---------------------------------------------------------------------------

#[track_caller]
fn expect_err(result: Result<()>, text: &str) -> Error {
    match result {
        Ok(()) => panic!("expected the error {text:?}, but the check passed"),
        Err(err) => {
            assert_eq!(err.to_string(), text, "message of {err:?}");
            err
        }
    }
}

#[track_caller]
fn dtype_mismatch(result: Result<()>, op: &str, input: DataType, output: DataType, text: &str) {
    match expect_err(result, text) {
        Error::DtypeMismatch {
            op: o,
            input: i,
            output: out,
        } => assert_eq!((o, i, out), (op, input, output)),
        other => panic!("expected DtypeMismatch, got {other:?}"),
    }
}

#[track_caller]
fn wrong_length(
    result: Result<()>,
    (op, what): (&str, &str),
    expected: usize,
    given: usize,
    rule: &str,
    text: &str,
) {
    match expect_err(result, text) {
        Error::WrongLength {
            op: o,
            what: w,
            expected: e,
            given: g,
            rule: r,
        } => assert_eq!((o, w, e, g, r), (op, what, expected, given, rule)),
        other => panic!("expected WrongLength, got {other:?}"),
    }
}

#[track_caller]
fn not_divisible(
    result: Result<()>,
    (op, what): (&str, &str),
    given: usize,
    world_size: i32,
    text: &str,
) {
    match expect_err(result, text) {
        Error::NotDivisible {
            op: o,
            what: w,
            given: g,
            world_size: n,
        } => assert_eq!((o, w, g, n), (op, what, given, world_size)),
        other => panic!("expected NotDivisible, got {other:?}"),
    }
}

#[track_caller]
fn wrong_device(
    result: Result<()>,
    (op, what): (&str, &str),
    expected: usize,
    given: usize,
    text: &str,
) {
    match expect_err(result, text) {
        Error::WrongDevice {
            op: o,
            what: w,
            expected: e,
            given: g,
        } => assert_eq!((o, w, e, g), (op, what, expected, given)),
        other => panic!("expected WrongDevice, got {other:?}"),
    }
}

#[track_caller]
fn not_contiguous(
    result: Result<()>,
    (op, what): (&str, &str),
    shape: &[usize],
    strides: &[usize],
    text: &str,
) {
    match expect_err(result, text) {
        Error::NotContiguous {
            op: o,
            what: w,
            shape: sh,
            strides: st,
        } => assert_eq!(
            (o, w, sh.as_slice(), st.as_slice()),
            (op, what, shape, strides)
        ),
        other => panic!("expected NotContiguous, got {other:?}"),
    }
}

#[track_caller]
fn rank_out_of_range(
    result: Result<()>,
    (op, what): (&str, &str),
    given: i32,
    world_size: i32,
    text: &str,
) {
    match expect_err(result, text) {
        Error::RankOutOfRange {
            op: o,
            what: w,
            given: g,
            world_size: n,
        } => assert_eq!((o, w, g, n), (op, what, given, world_size)),
        other => panic!("expected RankOutOfRange, got {other:?}"),
    }
}

#[track_caller]
fn self_peer(result: Result<()>, op: &str, peer: i32, text: &str) {
    match expect_err(result, text) {
        Error::SelfPeerOutsideGroup { op: o, peer: p } => assert_eq!((o, p), (op, peer)),
        other => panic!("expected SelfPeerOutsideGroup, got {other:?}"),
    }
}

#[track_caller]
fn unsupported_dtype(
    result: Result<()>,
    op: &str,
    dtype: DataType,
    (needed, loaded): (Version, Version),
    text: &str,
) {
    match expect_err(result, text) {
        Error::UnsupportedDataType {
            op: o,
            dtype: d,
            needed: n,
            loaded: l,
        } => assert_eq!((o, d, n, l), (op, dtype, needed, loaded)),
        other => panic!("expected UnsupportedDataType, got {other:?}"),
    }
}

#[track_caller]
fn unsupported_reduction(
    result: Result<()>,
    (op, reduction): (&str, &str),
    dtype: DataType,
    reason: &str,
    text: &str,
) {
    match expect_err(result, text) {
        Error::UnsupportedReduction {
            op: o,
            reduction: r,
            dtype: d,
            reason: why,
        } => assert_eq!((o, r, d, why.as_str()), (op, reduction, dtype, reason)),
        other => panic!("expected UnsupportedReduction, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// The operations, so one test can run a check over all of them.
// ---------------------------------------------------------------------------

/// The operations with an input and an output buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Out-of-place `all_reduce`.
    AllReduce,
    /// Out-of-place `broadcast` (root 0).
    Broadcast,
    /// Out-of-place `reduce` (root 0).
    Reduce,
    AllGatherIntoTensor,
    /// `all_gather` into a list of `world_size` copies of the output.
    AllGatherList,
    ReduceScatterTensor,
    AllToAllSingle,
}

impl Op {
    const ALL: [Op; 7] = [
        Op::AllReduce,
        Op::Broadcast,
        Op::Reduce,
        Op::AllGatherIntoTensor,
        Op::AllGatherList,
        Op::ReduceScatterTensor,
        Op::AllToAllSingle,
    ];

    const REDUCING: [Op; 3] = [Op::AllReduce, Op::Reduce, Op::ReduceScatterTensor];

    /// The name in error messages.
    fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::Broadcast => "broadcast",
            Op::Reduce => "reduce",
            Op::AllGatherIntoTensor => "all_gather_into_tensor",
            Op::AllGatherList => "all_gather",
            Op::ReduceScatterTensor => "reduce_scatter_tensor",
            Op::AllToAllSingle => "all_to_all_single",
        }
    }

    /// What the errors call the output buffer.
    fn output_name(self) -> &'static str {
        match self {
            Op::AllGatherList => "an output",
            _ => "output",
        }
    }

    /// Valid (input, output) lengths for `n` elements per rank, world size 4.
    fn lens(self, n: usize) -> (usize, usize) {
        match self {
            Op::AllGatherIntoTensor => (n, 4 * n),
            Op::ReduceScatterTensor => (4 * n, n),
            Op::AllToAllSingle => (4 * n, 4 * n),
            _ => (n, n),
        }
    }

    fn check(
        self,
        info: &CommInfo,
        input: &BufferDesc<'_>,
        output: &BufferDesc<'_>,
        op: Reduction<'_>,
    ) -> Result<()> {
        match self {
            Op::AllReduce => checks::all_reduce(info, Some(input), output, op),
            Op::Broadcast => checks::broadcast(info, Some(input), output, 0),
            Op::Reduce => checks::reduce(info, Some(input), output, op, 0),
            Op::AllGatherIntoTensor => checks::all_gather_into_tensor(info, input, output),
            Op::AllGatherList => checks::all_gather_list(
                info,
                input,
                vec![*output; info.world_size as usize].into_iter(),
            ),
            Op::ReduceScatterTensor => checks::reduce_scatter_tensor(info, input, output, op),
            Op::AllToAllSingle => checks::all_to_all_single(info, input, output),
        }
    }
}

/// The operations on one buffer: in-place collectives and point-to-point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OneBuffer {
    AllReduce,
    /// Root 0.
    Broadcast,
    /// Root 0.
    Reduce,
    /// To rank 1, as the communicator calls it: `("send", "dst")`.
    Send,
    /// From rank 1, as the communicator calls it: `("recv", "src")`.
    Recv,
}

impl OneBuffer {
    const ALL: [OneBuffer; 5] = [
        OneBuffer::AllReduce,
        OneBuffer::Broadcast,
        OneBuffer::Reduce,
        OneBuffer::Send,
        OneBuffer::Recv,
    ];

    fn name(self) -> &'static str {
        match self {
            OneBuffer::AllReduce => "all_reduce",
            OneBuffer::Broadcast => "broadcast",
            OneBuffer::Reduce => "reduce",
            OneBuffer::Send => "send",
            OneBuffer::Recv => "recv",
        }
    }

    /// What the errors call the buffer: in-place collectives check it as
    /// their output, point-to-point as "tensor".
    fn what(self) -> &'static str {
        // In-place operations and send/recv name their one buffer "tensor".
        "tensor"
    }

    fn check(self, info: &CommInfo, buffer: &BufferDesc<'_>, op: Reduction<'_>) -> Result<()> {
        match self {
            OneBuffer::AllReduce => checks::all_reduce(info, None, buffer, op),
            OneBuffer::Broadcast => checks::broadcast(info, None, buffer, 0),
            OneBuffer::Reduce => checks::reduce(info, None, buffer, op, 0),
            OneBuffer::Send => checks::point_to_point("send", "dst", info, buffer, 1),
            OneBuffer::Recv => checks::point_to_point("recv", "src", info, buffer, 1),
        }
    }
}

// ---------------------------------------------------------------------------
// Valid arguments.
// ---------------------------------------------------------------------------

#[test]
fn the_helper_describes_rank_0_of_4_on_nccl_2_28_3_and_hopper() {
    let info = info();
    assert_eq!(
        (info.rank, info.world_size, info.device, info.nccl_version),
        (0, 4, 0, Version::new(2, 28, 3))
    );
    assert_eq!((info.compute_capability, info.in_group), ((9, 0), false));
    let other = CommInfo { device: 3, ..info };
    assert_eq!((other.device, other.rank, other.world_size), (3, 0, 4));
}

#[test]
fn valid_arguments_pass_for_every_operation_and_data_type() {
    for dtype in DataType::ALL {
        for op in Op::ALL {
            let (i, o) = op.lens(8);
            for red in ReduceOp::ALL
                .into_iter()
                .filter(|&red| supported(dtype, red))
            {
                let result = op.check(&info(), &buf(dtype, i), &buf(dtype, o), red.into());
                assert!(result.is_ok(), "{op:?} {dtype} {red}: {result:?}");
            }
        }
        for op in OneBuffer::ALL {
            for red in ReduceOp::ALL
                .into_iter()
                .filter(|&red| supported(dtype, red))
            {
                let result = op.check(&info(), &buf(dtype, 8), red.into());
                assert!(result.is_ok(), "{op:?} {dtype} {red}: {result:?}");
            }
        }
    }
}

#[test]
fn the_last_rank_and_other_world_sizes_are_valid_roots_and_peers() {
    let comm = info();
    assert!(checks::broadcast(&comm, None, &f32s(8), 3).is_ok());
    assert!(checks::reduce(&comm, None, &f32s(8), SUM, 3).is_ok());
    assert!(checks::point_to_point("send", "dst", &comm, &f32s(8), 3).is_ok());
    assert!(checks::point_to_point("recv", "src", &comm, &f32s(8), 3).is_ok());
    let single = CommInfo {
        world_size: 1,
        ..info()
    };
    assert!(checks::broadcast(&single, None, &f32s(8), 0).is_ok());
    assert!(checks::all_gather_into_tensor(&single, &f32s(8), &f32s(8)).is_ok());
    assert!(checks::reduce_scatter_tensor(&single, &f32s(8), &f32s(8), SUM).is_ok());
    assert!(checks::all_to_all_single(&single, &f32s(7), &f32s(7)).is_ok());
    assert!(checks::all_gather_list(&single, &f32s(8), [f32s(8)].into_iter()).is_ok());
}

// ---------------------------------------------------------------------------
// Data type mismatch.
// ---------------------------------------------------------------------------

#[test]
fn dtype_mismatch_is_refused_by_every_operation_with_two_buffers() {
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        let name = op.name();
        dtype_mismatch(
            op.check(&info(), &buf(F32, i), &buf(F16, o), SUM),
            name,
            F32,
            F16,
            &format!(
                "{name}: the output is half but the input is float; both must have the same data type"
            ),
        );
        dtype_mismatch(
            op.check(&info(), &buf(E4M3, i), &buf(E5M2, o), SUM),
            name,
            E4M3,
            E5M2,
            &format!(
                "{name}: the output is f8e5m2 but the input is f8e4m3; both must have the same data type"
            ),
        );
    }
}

#[test]
fn dtype_mismatch_messages() {
    dtype_mismatch(
        checks::all_reduce(&info(), Some(&buf(F32, 8)), &buf(BF16, 8), SUM),
        "all_reduce",
        F32,
        BF16,
        "all_reduce: the output is bfloat16 but the input is float; both must have the same data type",
    );
    dtype_mismatch(
        checks::all_to_all_single(&info(), &buf(DataType::Int64, 8), &buf(DataType::Uint64, 8)),
        "all_to_all_single",
        DataType::Int64,
        DataType::Uint64,
        "all_to_all_single: the output is uint64 but the input is int64; both must have the same data type",
    );
    dtype_mismatch(
        checks::same_dtype("x", &buf(DataType::Float64, 1), &buf(DataType::Int8, 1)),
        "x",
        DataType::Float64,
        DataType::Int8,
        "x: the output is int8 but the input is double; both must have the same data type",
    );
    assert!(checks::same_dtype("x", &buf(F16, 1), &buf(F16, 99)).is_ok());
}

#[test]
fn all_gather_list_refuses_one_output_of_another_type() {
    let outputs = [buf(F32, 8), buf(F32, 8), buf(F16, 8), buf(F32, 8)];
    dtype_mismatch(
        checks::all_gather_list(&info(), &buf(F32, 8), outputs.into_iter()),
        "all_gather",
        F32,
        F16,
        "all_gather: the output is half but the input is float; both must have the same data type",
    );
}

// ---------------------------------------------------------------------------
// Lengths.
// ---------------------------------------------------------------------------

#[test]
fn all_gather_into_tensor_output_is_world_times_input() {
    for given in [39, 41, 10, 0] {
        wrong_length(
            checks::all_gather_into_tensor(&info(), &f32s(10), &f32s(given)),
            ("all_gather_into_tensor", "output"),
            40,
            given,
            "world size x input elements",
            &format!(
                "all_gather_into_tensor: output has {given} elements, expected 40 (world size x input elements)"
            ),
        );
    }
    assert!(checks::all_gather_into_tensor(&info(), &f32s(10), &f32s(40)).is_ok());
    let eight = CommInfo {
        world_size: 8,
        ..info()
    };
    wrong_length(
        checks::all_gather_into_tensor(&eight, &f32s(10), &f32s(40)),
        ("all_gather_into_tensor", "output"),
        80,
        40,
        "world size x input elements",
        "all_gather_into_tensor: output has 40 elements, expected 80 (world size x input elements)",
    );
}

#[test]
fn all_gather_list_needs_one_output_per_rank() {
    for count in [0, 1, 3, 5] {
        wrong_length(
            checks::all_gather_list(&info(), &f32s(10), vec![f32s(10); count].into_iter()),
            ("all_gather", "output list"),
            4,
            count,
            "one output per rank",
            &format!(
                "all_gather: output list has {count} elements, expected 4 (one output per rank)"
            ),
        );
    }
    assert!(checks::all_gather_list(&info(), &f32s(10), vec![f32s(10); 4].into_iter()).is_ok());
}

#[test]
fn all_gather_list_refuses_an_output_of_the_wrong_length() {
    for given in [9, 11, 0, 40] {
        let outputs = [f32s(10), f32s(given), f32s(10), f32s(10)];
        wrong_length(
            checks::all_gather_list(&info(), &f32s(10), outputs.into_iter()),
            ("all_gather", "an output"),
            10,
            given,
            "the same number of elements as the input",
            &format!(
                "all_gather: an output has {given} elements, expected 10 (the same number of elements as the input)"
            ),
        );
    }
}

#[test]
fn reduce_scatter_tensor_input_is_world_times_output() {
    for given in [39, 41, 10, 0] {
        wrong_length(
            checks::reduce_scatter_tensor(&info(), &f32s(given), &f32s(10), SUM),
            ("reduce_scatter_tensor", "input"),
            40,
            given,
            "world size x output elements",
            &format!(
                "reduce_scatter_tensor: input has {given} elements, expected 40 (world size x output elements)"
            ),
        );
    }
    assert!(checks::reduce_scatter_tensor(&info(), &f32s(40), &f32s(10), SUM).is_ok());
}

#[test]
fn all_to_all_single_input_must_be_divisible_by_the_world_size() {
    for given in [1, 2, 3, 5, 10, 41] {
        not_divisible(
            checks::all_to_all_single(&info(), &f32s(given), &f32s(given)),
            ("all_to_all_single", "input"),
            given,
            4,
            &format!(
                "all_to_all_single: input has {given} elements, which is not a multiple of the world size 4"
            ),
        );
    }
    let three = CommInfo {
        world_size: 3,
        ..info()
    };
    not_divisible(
        checks::all_to_all_single(&three, &f32s(8), &f32s(8)),
        ("all_to_all_single", "input"),
        8,
        3,
        "all_to_all_single: input has 8 elements, which is not a multiple of the world size 3",
    );
    assert!(checks::all_to_all_single(&three, &f32s(9), &f32s(9)).is_ok());
}

#[test]
fn all_to_all_single_needs_equal_lengths() {
    // The output is only compared with the input, so an output that is not
    // a multiple of the world size is reported as a wrong length.
    for given in [16, 8, 10, 0] {
        wrong_length(
            checks::all_to_all_single(&info(), &f32s(12), &f32s(given)),
            ("all_to_all_single", "output"),
            12,
            given,
            "the same number of elements as the input",
            &format!(
                "all_to_all_single: output has {given} elements, expected 12 (the same number of elements as the input)"
            ),
        );
    }
}

#[test]
fn out_of_place_all_reduce_broadcast_and_reduce_need_equal_lengths() {
    for op in [Op::AllReduce, Op::Broadcast, Op::Reduce] {
        let name = op.name();
        for given in [7, 9, 0] {
            wrong_length(
                op.check(&info(), &f32s(8), &f32s(given), SUM),
                (name, "output"),
                8,
                given,
                "the same number of elements as the input",
                &format!(
                    "{name}: output has {given} elements, expected 8 (the same number of elements as the input)"
                ),
            );
        }
    }
}

#[test]
fn length_check_itself() {
    assert!(checks::length("op", "x", 5, 5, "why").is_ok());
    wrong_length(
        checks::length("op", "x", 5, 6, "why"),
        ("op", "x"),
        5,
        6,
        "why",
        "op: x has 6 elements, expected 5 (why)",
    );
}

// ---------------------------------------------------------------------------
// Buffers on another device.
// ---------------------------------------------------------------------------

#[test]
fn an_input_on_another_device_is_refused() {
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        let name = op.name();
        wrong_device(
            op.check(&info(), &f32s_on(i, 1), &f32s(o), SUM),
            (name, "input"),
            0,
            1,
            &format!("{name}: input is on device 1, but the communicator is on device 0"),
        );
    }
}

#[test]
fn an_output_on_another_device_is_refused() {
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        let (name, what) = (op.name(), op.output_name());
        wrong_device(
            op.check(&info(), &f32s(i), &f32s_on(o, 2), SUM),
            (name, what),
            0,
            2,
            &format!("{name}: {what} is on device 2, but the communicator is on device 0"),
        );
    }
}

#[test]
fn a_single_buffer_on_another_device_is_refused() {
    let on_5 = CommInfo {
        device: 5,
        ..info()
    };
    for op in OneBuffer::ALL {
        let (name, what) = (op.name(), op.what());
        wrong_device(
            op.check(&on_5, &f32s(8), SUM),
            (name, what),
            5,
            0,
            &format!("{name}: {what} is on device 0, but the communicator is on device 5"),
        );
        assert!(op.check(&on_5, &f32s_on(8, 5), SUM).is_ok());
    }
}

#[test]
fn wrong_device_messages() {
    wrong_device(
        checks::all_gather_into_tensor(&info(), &f32s_on(10, 1), &f32s(40)),
        ("all_gather_into_tensor", "input"),
        0,
        1,
        "all_gather_into_tensor: input is on device 1, but the communicator is on device 0",
    );
    wrong_device(
        checks::point_to_point("send", "dst", &info(), &f32s_on(10, 3), 1),
        ("send", "tensor"),
        0,
        3,
        "send: tensor is on device 3, but the communicator is on device 0",
    );
    let outputs = [f32s(10), f32s(10), f32s(10), f32s_on(10, 7)];
    wrong_device(
        checks::all_gather_list(&info(), &f32s(10), outputs.into_iter()),
        ("all_gather", "an output"),
        0,
        7,
        "all_gather: an output is on device 7, but the communicator is on device 0",
    );
}

// ---------------------------------------------------------------------------
// Non-contiguous buffers.
// ---------------------------------------------------------------------------

#[test]
fn a_non_contiguous_input_is_refused() {
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        let name = op.name();
        let (shape, strides) = transposed(i);
        not_contiguous(
            op.check(&info(), &strided(&shape, &strides), &f32s(o), SUM),
            (name, "input"),
            &shape,
            &strides,
            &format!(
                "{name}: input is not contiguous (shape {shape:?}, strides [1, 2]); make a contiguous copy first"
            ),
        );
    }
}

#[test]
fn a_non_contiguous_output_is_refused() {
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        let (name, what) = (op.name(), op.output_name());
        let (shape, strides) = transposed(o);
        not_contiguous(
            op.check(&info(), &f32s(i), &strided(&shape, &strides), SUM),
            (name, what),
            &shape,
            &strides,
            &format!(
                "{name}: {what} is not contiguous (shape {shape:?}, strides [1, 2]); make a contiguous copy first"
            ),
        );
    }
}

#[test]
fn a_non_contiguous_single_buffer_is_refused() {
    let (shape, strides) = ([3, 4, 2], [8, 1, 4]);
    for op in OneBuffer::ALL {
        let (name, what) = (op.name(), op.what());
        not_contiguous(
            op.check(&info(), &strided(&shape, &strides), SUM),
            (name, what),
            &shape,
            &strides,
            &format!(
                "{name}: {what} is not contiguous (shape [3, 4, 2], strides [8, 1, 4]); make a contiguous copy first"
            ),
        );
    }
}

#[test]
fn not_contiguous_message() {
    let (shape, strides) = ([4, 8], [1, 4]);
    not_contiguous(
        checks::all_reduce(&info(), None, &strided(&shape, &strides), SUM),
        ("all_reduce", "tensor"),
        &[4, 8],
        &[1, 4],
        "all_reduce: tensor is not contiguous (shape [4, 8], strides [1, 4]); make a contiguous copy first",
    );
}

#[test]
fn the_checks_trust_the_desc_strided_means_refused() {
    // `strided: Some(..)` is refused even when shape and strides would be
    // row-major: deciding contiguity is the buffer's job
    // (`TensorCell::desc` only sets it for non-contiguous cells).
    let (shape, strides) = ([2, 4], [4, 1]);
    not_contiguous(
        checks::buffer("op", "x", &strided(&shape, &strides), &info()),
        ("op", "x"),
        &[2, 4],
        &[4, 1],
        "op: x is not contiguous (shape [2, 4], strides [4, 1]); make a contiguous copy first",
    );
}

// ---------------------------------------------------------------------------
// Roots and peers.
// ---------------------------------------------------------------------------

#[test]
fn broadcast_and_reduce_refuse_a_root_out_of_range() {
    for root in [-1, 4, i32::MIN, i32::MAX] {
        let text = |op: &str| format!("{op}: root {root} is out of range: expected 0..4");
        rank_out_of_range(
            checks::broadcast(&info(), None, &f32s(8), root),
            ("broadcast", "root"),
            root,
            4,
            &text("broadcast"),
        );
        rank_out_of_range(
            checks::broadcast(&info(), Some(&f32s(8)), &f32s(8), root),
            ("broadcast", "root"),
            root,
            4,
            &text("broadcast"),
        );
        rank_out_of_range(
            checks::reduce(&info(), None, &f32s(8), SUM, root),
            ("reduce", "root"),
            root,
            4,
            &text("reduce"),
        );
        rank_out_of_range(
            checks::reduce(&info(), Some(&f32s(8)), &f32s(8), SUM, root),
            ("reduce", "root"),
            root,
            4,
            &text("reduce"),
        );
    }
    rank_out_of_range(
        checks::broadcast(&info(), None, &f32s(8), -1),
        ("broadcast", "root"),
        -1,
        4,
        "broadcast: root -1 is out of range: expected 0..4",
    );
    rank_out_of_range(
        checks::reduce(&info(), None, &f32s(8), SUM, 4),
        ("reduce", "root"),
        4,
        4,
        "reduce: root 4 is out of range: expected 0..4",
    );
    for root in 0..4 {
        assert!(checks::broadcast(&info(), None, &f32s(8), root).is_ok());
        assert!(checks::reduce(&info(), None, &f32s(8), SUM, root).is_ok());
    }
}

#[test]
fn send_and_recv_refuse_a_peer_out_of_range() {
    for peer in [-1, 4, 100] {
        rank_out_of_range(
            checks::point_to_point("send", "dst", &info(), &f32s(8), peer),
            ("send", "dst"),
            peer,
            4,
            &format!("send: dst {peer} is out of range: expected 0..4"),
        );
        rank_out_of_range(
            checks::point_to_point("recv", "src", &info(), &f32s(8), peer),
            ("recv", "src"),
            peer,
            4,
            &format!("recv: src {peer} is out of range: expected 0..4"),
        );
    }
    // A group does not make an out-of-range peer valid.
    let grouped = CommInfo {
        in_group: true,
        ..info()
    };
    rank_out_of_range(
        checks::point_to_point("send", "dst", &grouped, &f32s(8), 4),
        ("send", "dst"),
        4,
        4,
        "send: dst 4 is out of range: expected 0..4",
    );
}

#[test]
fn send_and_recv_to_this_rank_need_an_open_group() {
    const SELF_TEXT: &str = "peer 2 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs";
    let rank_2 = CommInfo { rank: 2, ..info() };
    self_peer(
        checks::point_to_point("send", "dst", &rank_2, &f32s(8), 2),
        "send",
        2,
        &format!("send: {SELF_TEXT}"),
    );
    self_peer(
        checks::point_to_point("recv", "src", &rank_2, &f32s(8), 2),
        "recv",
        2,
        &format!("recv: {SELF_TEXT}"),
    );
    self_peer(
        checks::point_to_point("send", "dst", &info(), &f32s(8), 0),
        "send",
        0,
        "send: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
    let grouped = CommInfo {
        in_group: true,
        ..rank_2
    };
    assert!(checks::point_to_point("send", "dst", &grouped, &f32s(8), 2).is_ok());
    assert!(checks::point_to_point("recv", "src", &grouped, &f32s(8), 2).is_ok());
    // Other peers are fine either way.
    for peer in [0, 1, 3] {
        assert!(checks::point_to_point("send", "dst", &rank_2, &f32s(8), peer).is_ok());
        assert!(checks::point_to_point("recv", "src", &grouped, &f32s(8), peer).is_ok());
    }
}

#[test]
fn rank_and_peer_checks_themselves() {
    assert!(checks::rank("op", "root", 0, &info()).is_ok());
    assert!(checks::rank("op", "root", 3, &info()).is_ok());
    rank_out_of_range(
        checks::rank("op", "root", 4, &info()),
        ("op", "root"),
        4,
        4,
        "op: root 4 is out of range: expected 0..4",
    );
    // `peer` checks the range first: an out-of-range "self" cannot exist,
    // but a bad peer is a range error even inside a group.
    rank_out_of_range(
        checks::peer("op", "dst", -1, &info()),
        ("op", "dst"),
        -1,
        4,
        "op: dst -1 is out of range: expected 0..4",
    );
    self_peer(
        checks::peer("op", "dst", 0, &info()),
        "op",
        0,
        "op: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
}

// ---------------------------------------------------------------------------
// Reductions and data types the device or the loaded NCCL lacks.
// ---------------------------------------------------------------------------

#[test]
fn fp8_reductions_are_refused_before_compute_capability_9_0() {
    let ampere = CommInfo {
        compute_capability: (8, 0),
        ..info()
    };
    for dtype in FP8 {
        for red in ReduceOp::ALL {
            for op in Op::REDUCING {
                let (i, o) = op.lens(8);
                let name = op.name();
                unsupported_reduction(
                    op.check(&ampere, &buf(dtype, i), &buf(dtype, o), red.into()),
                    (name, red.name()),
                    dtype,
                    FP8_ON_8_0,
                    &format!("{name}: reduction {red} on {dtype} is not supported: {FP8_ON_8_0}"),
                );
            }
            for op in [OneBuffer::AllReduce, OneBuffer::Reduce] {
                let name = op.name();
                unsupported_reduction(
                    op.check(&ampere, &buf(dtype, 8), red.into()),
                    (name, red.name()),
                    dtype,
                    FP8_ON_8_0,
                    &format!("{name}: reduction {red} on {dtype} is not supported: {FP8_ON_8_0}"),
                );
            }
        }
    }
}

#[test]
fn fp8_reduction_messages_name_both_capabilities() {
    let ampere = CommInfo {
        compute_capability: (8, 0),
        ..info()
    };
    unsupported_reduction(
        checks::all_reduce(&ampere, None, &buf(E4M3, 8), SUM),
        ("all_reduce", "sum"),
        E4M3,
        FP8_ON_8_0,
        "all_reduce: reduction sum on f8e4m3 is not supported: reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, this one is 8.0; all_gather, broadcast, send and recv work on any GPU",
    );
    unsupported_reduction(
        checks::reduce_scatter_tensor(&ampere, &buf(E5M2, 32), &buf(E5M2, 8), ReduceOp::Max.into()),
        ("reduce_scatter_tensor", "max"),
        E5M2,
        FP8_ON_8_0,
        "reduce_scatter_tensor: reduction max on f8e5m2 is not supported: reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, this one is 8.0; all_gather, broadcast, send and recv work on any GPU",
    );
    // Ada (8.9) is still below 9.0.
    let ada = CommInfo {
        compute_capability: (8, 9),
        ..info()
    };
    const ON_8_9: &str = "reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, this one is 8.9; all_gather, broadcast, send and recv work on any GPU";
    unsupported_reduction(
        checks::reduce(&ada, None, &buf(E4M3, 8), ReduceOp::Prod.into(), 0),
        ("reduce", "prod"),
        E4M3,
        ON_8_9,
        &format!("reduce: reduction prod on f8e4m3 is not supported: {ON_8_9}"),
    );
}

/// Whether NCCL supports `red` on `dtype` at all (on a new enough GPU and
/// library): averaging 8-bit floats it does not.
fn supported(dtype: DataType, red: ReduceOp) -> bool {
    !(dtype.is_fp8() && red == ReduceOp::Avg)
}

#[test]
fn fp8_averages_are_refused_on_every_gpu() {
    for dtype in FP8 {
        for op in Op::REDUCING {
            let (i, o) = op.lens(8);
            let error = op
                .check(
                    &info(),
                    &buf(dtype, i),
                    &buf(dtype, o),
                    ReduceOp::Avg.into(),
                )
                .unwrap_err();
            assert!(
                matches!(&error, Error::UnsupportedReduction { reduction: "avg", dtype: d, .. } if *d == dtype),
                "{op:?} {dtype}: {error:?}"
            );
            assert!(
                error.to_string().ends_with(
                    "is not supported: NCCL has no averaging or pre-multiplied sums on 8-bit floats; sum, prod, max and min work"
                ),
                "{error}"
            );
        }
    }
}

#[test]
fn fp8_reductions_are_accepted_from_compute_capability_9_0() {
    for compute_capability in [(9, 0), (9, 1), (10, 0), (12, 0)] {
        let comm = CommInfo {
            compute_capability,
            ..info()
        };
        for dtype in FP8 {
            for red in ReduceOp::ALL
                .into_iter()
                .filter(|&red| supported(dtype, red))
            {
                for op in Op::REDUCING {
                    let (i, o) = op.lens(8);
                    let result = op.check(&comm, &buf(dtype, i), &buf(dtype, o), red.into());
                    assert!(
                        result.is_ok(),
                        "{op:?} {dtype} {red} {compute_capability:?}: {result:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn other_types_reduce_on_any_compute_capability() {
    let volta = CommInfo {
        compute_capability: (7, 0),
        ..info()
    };
    for dtype in DataType::ALL.into_iter().filter(|d| !d.is_fp8()) {
        for red in ReduceOp::ALL {
            for op in Op::REDUCING {
                let (i, o) = op.lens(8);
                let result = op.check(&volta, &buf(dtype, i), &buf(dtype, o), red.into());
                assert!(result.is_ok(), "{op:?} {dtype} {red}: {result:?}");
            }
        }
    }
}

#[test]
fn fp8_without_a_reduction_is_accepted_before_compute_capability_9_0() {
    let ampere = CommInfo {
        compute_capability: (8, 0),
        ..info()
    };
    for dtype in FP8 {
        for op in [
            Op::AllGatherIntoTensor,
            Op::AllGatherList,
            Op::Broadcast,
            Op::AllToAllSingle,
        ] {
            let (i, o) = op.lens(8);
            let result = op.check(&ampere, &buf(dtype, i), &buf(dtype, o), SUM);
            assert!(result.is_ok(), "{op:?} {dtype}: {result:?}");
        }
        for op in [OneBuffer::Broadcast, OneBuffer::Send, OneBuffer::Recv] {
            let result = op.check(&ampere, &buf(dtype, 8), SUM);
            assert!(result.is_ok(), "{op:?} {dtype}: {result:?}");
        }
    }
}

#[test]
fn avg_needs_nccl_2_10() {
    const REASON: &str = "it needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9";
    let old = CommInfo {
        nccl_version: V2_9_9,
        ..info()
    };
    for op in Op::REDUCING {
        let (i, o) = op.lens(8);
        let name = op.name();
        unsupported_reduction(
            op.check(&old, &f32s(i), &f32s(o), AVG),
            (name, "avg"),
            F32,
            REASON,
            &format!("{name}: reduction avg on float is not supported: {REASON}"),
        );
    }
    unsupported_reduction(
        checks::all_reduce(&old, None, &buf(DataType::Int32, 8), AVG),
        ("all_reduce", "avg"),
        DataType::Int32,
        REASON,
        "all_reduce: reduction avg on int32 is not supported: it needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9",
    );
    let first = CommInfo {
        nccl_version: V2_10_0,
        ..info()
    };
    for op in Op::REDUCING {
        let (i, o) = op.lens(8);
        assert!(op.check(&first, &f32s(i), &f32s(o), AVG).is_ok(), "{op:?}");
        // The other built-in reductions need nothing newer.
        for red in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
            assert!(
                op.check(&old, &f32s(i), &f32s(o), red.into()).is_ok(),
                "{op:?} {red}"
            );
        }
    }
}

#[test]
fn reduction_check_itself() {
    assert!(checks::reduction("op", SUM, F32, &info()).is_ok());
    let old = CommInfo {
        nccl_version: Version::new(2, 8, 4),
        ..info()
    };
    unsupported_reduction(
        checks::reduction("op", AVG, F16, &old),
        ("op", "avg"),
        F16,
        "it needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.8.4",
        "op: reduction avg on half is not supported: it needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.8.4",
    );
    // `reduction` does not know about data type versions: `buffer` does.
    assert!(checks::reduction("op", SUM, BF16, &old).is_ok());
}

#[test]
fn a_data_type_newer_than_the_loaded_nccl_is_refused() {
    let nccl_2_9 = CommInfo {
        nccl_version: V2_9_9,
        ..info()
    };
    let nccl_2_23 = CommInfo {
        nccl_version: V2_23_4,
        ..info()
    };
    let cases = [
        (nccl_2_9, BF16, V2_10_0, "bfloat16", "2.10.0", "2.9.9"),
        (nccl_2_23, E4M3, V2_24_0, "f8e4m3", "2.24.0", "2.23.4"),
        (nccl_2_23, E5M2, V2_24_0, "f8e5m2", "2.24.0", "2.23.4"),
    ];
    for (comm, dtype, needed, dtype_text, needed_text, loaded_text) in cases {
        let text = |op: &str| {
            format!(
                "{op}: data type {dtype_text} needs NCCL {needed_text} or newer, but the loaded libnccl is {loaded_text}"
            )
        };
        for op in Op::ALL {
            let (i, o) = op.lens(8);
            unsupported_dtype(
                op.check(&comm, &buf(dtype, i), &buf(dtype, o), SUM),
                op.name(),
                dtype,
                (needed, comm.nccl_version),
                &text(op.name()),
            );
        }
        for op in OneBuffer::ALL {
            unsupported_dtype(
                op.check(&comm, &buf(dtype, 8), SUM),
                op.name(),
                dtype,
                (needed, comm.nccl_version),
                &text(op.name()),
            );
        }
    }
    unsupported_dtype(
        checks::point_to_point("send", "dst", &nccl_2_9, &buf(BF16, 8), 1),
        "send",
        BF16,
        (V2_10_0, V2_9_9),
        "send: data type bfloat16 needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9",
    );
    unsupported_dtype(
        checks::all_reduce(&nccl_2_23, None, &buf(E4M3, 8), SUM),
        "all_reduce",
        E4M3,
        (V2_24_0, V2_23_4),
        "all_reduce: data type f8e4m3 needs NCCL 2.24.0 or newer, but the loaded libnccl is 2.23.4",
    );
}

#[test]
fn data_types_are_accepted_from_their_first_nccl_release() {
    let at = |version| CommInfo {
        nccl_version: version,
        ..info()
    };
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        assert!(
            op.check(&at(V2_10_0), &buf(BF16, i), &buf(BF16, o), SUM)
                .is_ok()
        );
        for dtype in FP8 {
            assert!(
                op.check(&at(V2_24_0), &buf(dtype, i), &buf(dtype, o), SUM)
                    .is_ok()
            );
        }
    }
    // The old types work on any release.
    let ancient = at(Version::new(2, 0, 0));
    for dtype in [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        F16,
        F32,
        DataType::Float64,
    ] {
        for op in OneBuffer::ALL {
            assert!(
                op.check(&ancient, &buf(dtype, 8), SUM).is_ok(),
                "{op:?} {dtype}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Empty tensors.
// ---------------------------------------------------------------------------

#[test]
fn empty_tensors_pass_every_check() {
    for dtype in DataType::ALL {
        for op in Op::ALL {
            for red in ReduceOp::ALL
                .into_iter()
                .filter(|&red| supported(dtype, red))
            {
                let result = op.check(&info(), &buf(dtype, 0), &buf(dtype, 0), red.into());
                assert!(result.is_ok(), "{op:?} {dtype} {red}: {result:?}");
            }
        }
        for op in OneBuffer::ALL {
            let result = op.check(&info(), &buf(dtype, 0), SUM);
            assert!(result.is_ok(), "{op:?} {dtype}: {result:?}");
        }
    }
    let grouped_self = CommInfo {
        in_group: true,
        ..info()
    };
    assert!(checks::point_to_point("send", "dst", &grouped_self, &f32s(0), 0).is_ok());
}

#[test]
fn empty_tensors_still_get_the_other_checks() {
    // The checks do not skip empty buffers: a wrong device, data type,
    // root, peer or reduction is an error at any length.
    wrong_device(
        checks::all_reduce(&info(), None, &f32s_on(0, 1), SUM),
        ("all_reduce", "tensor"),
        0,
        1,
        "all_reduce: tensor is on device 1, but the communicator is on device 0",
    );
    dtype_mismatch(
        checks::all_gather_into_tensor(&info(), &buf(F32, 0), &buf(F16, 0)),
        "all_gather_into_tensor",
        F32,
        F16,
        "all_gather_into_tensor: the output is half but the input is float; both must have the same data type",
    );
    rank_out_of_range(
        checks::broadcast(&info(), None, &f32s(0), 4),
        ("broadcast", "root"),
        4,
        4,
        "broadcast: root 4 is out of range: expected 0..4",
    );
    self_peer(
        checks::point_to_point("recv", "src", &info(), &f32s(0), 0),
        "recv",
        0,
        "recv: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
    let ampere = CommInfo {
        compute_capability: (8, 0),
        ..info()
    };
    unsupported_reduction(
        checks::all_reduce(&ampere, None, &buf(E4M3, 0), SUM),
        ("all_reduce", "sum"),
        E4M3,
        FP8_ON_8_0,
        &format!("all_reduce: reduction sum on f8e4m3 is not supported: {FP8_ON_8_0}"),
    );
    // An empty input wants an empty output, and vice versa.
    wrong_length(
        checks::all_gather_into_tensor(&info(), &f32s(0), &f32s(4)),
        ("all_gather_into_tensor", "output"),
        0,
        4,
        "world size x input elements",
        "all_gather_into_tensor: output has 4 elements, expected 0 (world size x input elements)",
    );
    wrong_length(
        checks::all_gather_list(&info(), &f32s(0), vec![f32s(0); 3].into_iter()),
        ("all_gather", "output list"),
        4,
        3,
        "one output per rank",
        "all_gather: output list has 3 elements, expected 4 (one output per rank)",
    );
}

// ---------------------------------------------------------------------------
// The order of the checks, where several could fire.
// ---------------------------------------------------------------------------

#[test]
fn order_within_one_buffer_device_then_contiguity_then_data_type_version() {
    let (shape, strides) = ([2, 4], [1, 2]);
    let nccl_2_9 = CommInfo {
        nccl_version: V2_9_9,
        ..info()
    };
    // Strided bf16 on device 1 with NCCL 2.9: the device is reported.
    let everything_wrong = BufferDesc {
        dtype: BF16,
        len: 8,
        device: 1,
        strided: Some((&shape, &strides)),
    };
    wrong_device(
        checks::buffer("op", "x", &everything_wrong, &nccl_2_9),
        ("op", "x"),
        0,
        1,
        "op: x is on device 1, but the communicator is on device 0",
    );
    // On the right device: contiguity before the data type's version.
    let strided_bf16 = BufferDesc {
        device: 0,
        ..everything_wrong
    };
    not_contiguous(
        checks::buffer("op", "x", &strided_bf16, &nccl_2_9),
        ("op", "x"),
        &[2, 4],
        &[1, 2],
        "op: x is not contiguous (shape [2, 4], strides [1, 2]); make a contiguous copy first",
    );
    unsupported_dtype(
        checks::buffer("op", "x", &buf(BF16, 8), &nccl_2_9),
        "op",
        BF16,
        (V2_10_0, V2_9_9),
        "op: data type bfloat16 needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9",
    );
}

#[test]
fn order_of_the_two_buffer_checks() {
    // Both buffers on wrong devices: the two-buffer collectives with a
    // single `output` (all_reduce, broadcast, reduce) check the output
    // first; the others (all_gather_into_tensor, all_gather list,
    // reduce_scatter_tensor, all_to_all_single) check the input first.
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        let result = op.check(&info(), &f32s_on(i, 1), &f32s_on(o, 2), SUM);
        let name = op.name();
        match op {
            Op::AllReduce | Op::Broadcast | Op::Reduce => wrong_device(
                result,
                (name, "output"),
                0,
                2,
                &format!("{name}: output is on device 2, but the communicator is on device 0"),
            ),
            _ => wrong_device(
                result,
                (name, "input"),
                0,
                1,
                &format!("{name}: input is on device 1, but the communicator is on device 0"),
            ),
        }
    }
}

#[test]
fn order_buffers_then_data_type_then_length() {
    for op in Op::ALL {
        let (i, o) = op.lens(8);
        let name = op.name();
        // A wrong-device input with another type and a wrong length: the
        // device is reported.
        wrong_device(
            op.check(&info(), &f32s_on(i + 1, 1), &buf(F16, o + 3), SUM),
            (name, "input"),
            0,
            1,
            &format!("{name}: input is on device 1, but the communicator is on device 0"),
        );
        // A wrong-device output with a wrong length: the device is reported.
        let what = op.output_name();
        wrong_device(
            op.check(&info(), &f32s(i), &f32s_on(o + 3, 1), SUM),
            (name, what),
            0,
            1,
            &format!("{name}: {what} is on device 1, but the communicator is on device 0"),
        );
        // Another type and a wrong length (and, for all_to_all_single, an
        // input not divisible by the world size): the type is reported.
        dtype_mismatch(
            op.check(&info(), &buf(F32, i + 1), &buf(F16, o + 3), SUM),
            name,
            F32,
            F16,
            &format!(
                "{name}: the output is half but the input is float; both must have the same data type"
            ),
        );
    }
    // The brief's example: all_gather_into_tensor of 10 into 39 elements
    // with the input on device 1.
    wrong_device(
        checks::all_gather_into_tensor(&info(), &f32s_on(10, 1), &f32s(39)),
        ("all_gather_into_tensor", "input"),
        0,
        1,
        "all_gather_into_tensor: input is on device 1, but the communicator is on device 0",
    );
}

#[test]
fn order_root_before_buffers() {
    // broadcast and reduce check the root before any buffer.
    rank_out_of_range(
        checks::broadcast(&info(), Some(&f32s_on(8, 1)), &f32s_on(9, 2), 4),
        ("broadcast", "root"),
        4,
        4,
        "broadcast: root 4 is out of range: expected 0..4",
    );
    rank_out_of_range(
        checks::reduce(&info(), Some(&buf(F16, 8)), &f32s(9), SUM, -1),
        ("reduce", "root"),
        -1,
        4,
        "reduce: root -1 is out of range: expected 0..4",
    );
}

#[test]
fn order_point_to_point_buffer_before_peer() {
    // send and recv check the buffer before the peer.
    wrong_device(
        checks::point_to_point("send", "dst", &info(), &f32s_on(8, 1), 9),
        ("send", "tensor"),
        0,
        1,
        "send: tensor is on device 1, but the communicator is on device 0",
    );
    let (shape, strides) = ([2, 4], [1, 2]);
    not_contiguous(
        checks::point_to_point("recv", "src", &info(), &strided(&shape, &strides), 0),
        ("recv", "tensor"),
        &[2, 4],
        &[1, 2],
        "recv: tensor is not contiguous (shape [2, 4], strides [1, 2]); make a contiguous copy first",
    );
}

#[test]
fn order_all_gather_list_input_then_count_then_each_output_in_turn() {
    // The input's buffer check comes before the list length.
    wrong_device(
        checks::all_gather_list(&info(), &f32s_on(10, 1), vec![f32s(10); 3].into_iter()),
        ("all_gather", "input"),
        0,
        1,
        "all_gather: input is on device 1, but the communicator is on device 0",
    );
    // The list length before any element.
    let bad = [f32s_on(10, 1), buf(F16, 9), f32s(8)];
    wrong_length(
        checks::all_gather_list(&info(), &f32s(10), bad.into_iter()),
        ("all_gather", "output list"),
        4,
        3,
        "one output per rank",
        "all_gather: output list has 3 elements, expected 4 (one output per rank)",
    );
    // Elements in order, each fully checked before the next: a wrong
    // length at index 1 is reported before a wrong device at index 3.
    let outputs = [f32s(10), f32s(9), f32s(10), f32s_on(10, 1)];
    wrong_length(
        checks::all_gather_list(&info(), &f32s(10), outputs.into_iter()),
        ("all_gather", "an output"),
        10,
        9,
        "the same number of elements as the input",
        "all_gather: an output has 9 elements, expected 10 (the same number of elements as the input)",
    );
    // Within one element: buffer, then type, then length.
    let outputs = [f32s(10), buf(F16, 9), f32s(10), f32s(10)];
    dtype_mismatch(
        checks::all_gather_list(&info(), &f32s(10), outputs.into_iter()),
        "all_gather",
        F32,
        F16,
        "all_gather: the output is half but the input is float; both must have the same data type",
    );
}

#[test]
fn order_all_to_all_single_divisibility_before_equal_lengths() {
    // An input of 10 (not divisible by 4) and an output of 12: the input's
    // divisibility is reported.
    not_divisible(
        checks::all_to_all_single(&info(), &f32s(10), &f32s(12)),
        ("all_to_all_single", "input"),
        10,
        4,
        "all_to_all_single: input has 10 elements, which is not a multiple of the world size 4",
    );
}

#[test]
fn order_lengths_before_the_reduction() {
    // fp8 on compute capability 8.0 with wrong lengths: the length is
    // reported; the reduction is checked last.
    let ampere = CommInfo {
        compute_capability: (8, 0),
        ..info()
    };
    wrong_length(
        checks::reduce_scatter_tensor(&ampere, &buf(E4M3, 39), &buf(E4M3, 10), SUM),
        ("reduce_scatter_tensor", "input"),
        40,
        39,
        "world size x output elements",
        "reduce_scatter_tensor: input has 39 elements, expected 40 (world size x output elements)",
    );
    wrong_length(
        checks::all_reduce(&ampere, Some(&buf(E4M3, 8)), &buf(E4M3, 9), SUM),
        ("all_reduce", "output"),
        8,
        9,
        "the same number of elements as the input",
        "all_reduce: output has 9 elements, expected 8 (the same number of elements as the input)",
    );
    rank_out_of_range(
        checks::reduce(&ampere, None, &buf(E4M3, 8), SUM, 4),
        ("reduce", "root"),
        4,
        4,
        "reduce: root 4 is out of range: expected 0..4",
    );
}

#[test]
fn order_data_type_version_before_the_reduction() {
    // bf16 with avg on NCCL 2.9: the data type is reported, not avg.
    let nccl_2_9 = CommInfo {
        nccl_version: V2_9_9,
        ..info()
    };
    unsupported_dtype(
        checks::all_reduce(&nccl_2_9, None, &buf(BF16, 8), AVG),
        "all_reduce",
        BF16,
        (V2_10_0, V2_9_9),
        "all_reduce: data type bfloat16 needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9",
    );
    // fp8 on NCCL 2.23 and compute capability 8.0: the data type is reported.
    let old_everything = CommInfo {
        nccl_version: V2_23_4,
        compute_capability: (8, 0),
        ..info()
    };
    unsupported_dtype(
        checks::reduce_scatter_tensor(&old_everything, &buf(E5M2, 32), &buf(E5M2, 8), SUM),
        "reduce_scatter_tensor",
        E5M2,
        (V2_24_0, V2_23_4),
        "reduce_scatter_tensor: data type f8e5m2 needs NCCL 2.24.0 or newer, but the loaded libnccl is 2.23.4",
    );
}

#[test]
fn order_within_the_reduction_compute_capability_before_version() {
    // fp8 avg on compute capability 8.0 with NCCL 2.9 (the data type check
    // is skipped by calling `reduction` directly): the capability is
    // reported.
    let old_everything = CommInfo {
        nccl_version: V2_9_9,
        compute_capability: (8, 0),
        ..info()
    };
    unsupported_reduction(
        checks::reduction("all_reduce", AVG, E4M3, &old_everything),
        ("all_reduce", "avg"),
        E4M3,
        FP8_ON_8_0,
        &format!("all_reduce: reduction avg on f8e4m3 is not supported: {FP8_ON_8_0}"),
    );
    // Through an operation on NCCL 2.28 (fp8 known), fp8 avg on 8.0.
    let ampere = CommInfo {
        compute_capability: (8, 0),
        ..info()
    };
    unsupported_reduction(
        checks::reduce(&ampere, Some(&buf(E5M2, 8)), &buf(E5M2, 8), AVG, 1),
        ("reduce", "avg"),
        E5M2,
        FP8_ON_8_0,
        &format!("reduce: reduction avg on f8e5m2 is not supported: {FP8_ON_8_0}"),
    );
}
