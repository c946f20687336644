//! The bad-input rows of `nccl_tensor::checks`: the shared building
//! blocks, then one function per operation.

use nccl_core::{DataType, Reduction, Version};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{BufferDesc, Layout, Op, Plan};

use super::{AVG, BF16, E4M3, F16, F32, MAX, Row, SUM, err};

/// The shape and strides of a transposed 2 x 4 `f32` matrix.
const SHAPE: [usize; 2] = [2, 4];
const STRIDES: [usize; 2] = [1, 2];

/// Rank 0 of 4 on device 0, NCCL 2.28.3, compute capability 9.0, no group.
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

/// [`info`] on an older NCCL.
fn nccl(major: u32, minor: u32, patch: u32) -> CommInfo {
    CommInfo {
        nccl_version: Version::new(major, minor, patch),
        ..info()
    }
}

/// [`info`] on a GPU of compute capability 8.0.
fn ampere() -> CommInfo {
    CommInfo {
        compute_capability: (8, 0),
        ..info()
    }
}

/// A contiguous buffer on device 0.
fn buf(dtype: DataType, len: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(dtype, len, 0)
}

/// A contiguous `f32` buffer on device 0.
fn f32s(len: usize) -> BufferDesc<'static> {
    buf(F32, len)
}

/// A contiguous `f32` buffer on device 1 (the communicator is on 0).
fn on_device_1(len: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(F32, len, 1)
}

/// A transposed (non-contiguous) 2 x 4 `f32` matrix on device 0.
fn strided() -> BufferDesc<'static> {
    BufferDesc {
        dtype: F32,
        len: 8,
        device: 0,
        strided: Some((&SHAPE, &STRIDES)),
    }
}

/// The rows of this area, in the order of the Markdown table.
pub fn rows() -> Vec<Row> {
    vec![
        // ----------------------------------------------------------------
        // nccl_tensor::checks: the shared building blocks.
        // ----------------------------------------------------------------
        Row {
            area: "checks",
            call: "checks::buffer",
            input: "buffer on device 1, communicator on device 0",
            expect: &["device 1", "device 0"],
            run: || err(checks::buffer("op", "x", &on_device_1(8), &info())),
        },
        Row {
            area: "checks",
            call: "checks::buffer",
            input: "transposed (strided) buffer",
            expect: &["not contiguous", "shape [2, 4], strides [1, 2]"],
            run: || err(checks::buffer("op", "x", &strided(), &info())),
        },
        Row {
            area: "checks",
            call: "checks::buffer",
            input: "bfloat16 with NCCL 2.9.9",
            expect: &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
            run: || err(checks::buffer("op", "x", &buf(BF16, 8), &nccl(2, 9, 9))),
        },
        Row {
            area: "checks",
            call: "checks::same_dtype",
            input: "f32 input, f16 output",
            expect: &["output is half", "input is float"],
            run: || err(checks::same_dtype("op", &f32s(8), &buf(F16, 8))),
        },
        Row {
            area: "checks",
            call: "checks::length",
            input: "7 elements where 8 are needed",
            expect: &["has 7 elements", "expected 8"],
            run: || err(checks::length("op", "output", 8, 7, "a rule")),
        },
        Row {
            area: "checks",
            call: "checks::rank",
            input: "root 4 of world size 4",
            expect: &["root 4", "expected 0..4"],
            run: || err(checks::rank("op", "root", 4, &info())),
        },
        Row {
            area: "checks",
            call: "checks::peer",
            input: "peer 5",
            expect: &["dst 5", "expected 0..4"],
            run: || err(checks::peer("op", "dst", 5, &info())),
        },
        Row {
            area: "checks",
            call: "checks::peer",
            input: "peer = this rank, no group open",
            expect: &["peer 0 is this rank", "inside one nccl_core::Group"],
            run: || err(checks::peer("op", "dst", 0, &info())),
        },
        Row {
            area: "checks",
            call: "checks::reduction",
            input: "fp8 max on compute capability 8.0",
            expect: &["max on f8e4m3", "9.0 or newer, this one is 8.0"],
            run: || err(checks::reduction("op", MAX, E4M3, &ampere())),
        },
        Row {
            area: "checks",
            call: "checks::reduction",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || err(checks::reduction("op", AVG, E4M3, &info())),
        },
        Row {
            area: "checks",
            call: "checks::reduction",
            input: "avg with NCCL 2.9.9",
            expect: &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
            run: || err(checks::reduction("op", AVG, F32, &nccl(2, 9, 9))),
        },
        // ----------------------------------------------------------------
        // nccl_tensor::Plan::new: every operation's checks.
        // ----------------------------------------------------------------
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "in-place tensor on device 1",
            expect: &["tensor is on device 1", "device 0"],
            run: || err(plan_all_reduce(&info(), None, &on_device_1(8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "strided input",
            expect: &["input is not contiguous", "strides [1, 2]"],
            run: || err(plan_all_reduce(&info(), Some(&strided()), &f32s(8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "f16 input, f32 output",
            expect: &["output is float", "input is half"],
            run: || err(plan_all_reduce(&info(), Some(&buf(F16, 8)), &f32s(8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "8-element input, 6-element output",
            expect: &["output has 6 elements", "expected 8"],
            run: || err(plan_all_reduce(&info(), Some(&f32s(8)), &f32s(6), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || err(plan_all_reduce(&info(), None, &buf(E4M3, 8), AVG)),
        },
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "fp8 sum on compute capability 8.0",
            expect: &["sum on f8e4m3", "this one is 8.0"],
            run: || err(plan_all_reduce(&ampere(), None, &buf(E4M3, 8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "fp8 tensor with NCCL 2.23.4",
            expect: &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
            run: || err(plan_all_reduce(&nccl(2, 23, 4), None, &buf(E4M3, 8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "Plan::new(Op::AllReduce)",
            input: "avg with NCCL 2.9.9",
            expect: &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
            run: || err(plan_all_reduce(&nccl(2, 9, 9), None, &f32s(8), AVG)),
        },
        Row {
            area: "broadcast",
            call: "Plan::new(Op::Broadcast)",
            input: "root 4 of world size 4",
            expect: &["root 4", "expected 0..4"],
            run: || err(plan_broadcast(&info(), None, &f32s(8), 4)),
        },
        Row {
            area: "broadcast",
            call: "Plan::new(Op::Broadcast)",
            input: "root 2^31 (past NCCL's C int)",
            expect: &["root 2147483648", "expected 0..4"],
            run: || err(plan_broadcast(&info(), None, &f32s(8), 1 << 31)),
        },
        Row {
            area: "broadcast",
            call: "Plan::new(Op::Broadcast)",
            input: "8-element input, 9-element output",
            expect: &["output has 9 elements", "expected 8"],
            run: || err(plan_broadcast(&info(), Some(&f32s(8)), &f32s(9), 0)),
        },
        Row {
            area: "broadcast",
            call: "Plan::new(Op::Broadcast)",
            input: "bf16 input, f32 output",
            expect: &["output is float", "input is bfloat16"],
            run: || err(plan_broadcast(&info(), Some(&buf(BF16, 8)), &f32s(8), 0)),
        },
        Row {
            area: "reduce",
            call: "Plan::new(Op::Reduce)",
            input: "root 5 of world size 4",
            expect: &["root 5", "expected 0..4"],
            run: || err(plan_reduce(&info(), None, &f32s(8), SUM, 5)),
        },
        Row {
            area: "reduce",
            call: "Plan::new(Op::Reduce)",
            input: "output on device 1",
            expect: &["output is on device 1", "device 0"],
            run: || {
                err(plan_reduce(
                    &info(),
                    Some(&f32s(8)),
                    &on_device_1(8),
                    SUM,
                    0,
                ))
            },
        },
        Row {
            area: "reduce",
            call: "Plan::new(Op::Reduce)",
            input: "8-element input, 4-element output",
            expect: &["output has 4 elements", "expected 8"],
            run: || err(plan_reduce(&info(), Some(&f32s(8)), &f32s(4), SUM, 0)),
        },
        Row {
            area: "reduce",
            call: "Plan::new(Op::Reduce)",
            input: "fp8 max on compute capability 8.0",
            expect: &["max on f8e4m3", "this one is 8.0"],
            run: || err(plan_reduce(&ampere(), None, &buf(E4M3, 8), MAX, 0)),
        },
        Row {
            area: "all_gather",
            call: "Plan::new(Op::AllGather)",
            input: "2-element input, 7-element output (world 4)",
            expect: &["output has 7 elements", "expected 8"],
            run: || err(plan_all_gather(&info(), &f32s(2), &f32s(7))),
        },
        Row {
            area: "all_gather",
            call: "Plan::new(Op::AllGather)",
            input: "f32 input, f16 output",
            expect: &["output is half", "input is float"],
            run: || err(plan_all_gather(&info(), &f32s(2), &buf(F16, 8))),
        },
        Row {
            area: "all_gather",
            call: "Plan::new(Op::AllGather)",
            input: "input on device 1",
            expect: &["input is on device 1", "device 0"],
            run: || err(plan_all_gather(&info(), &on_device_1(2), &f32s(8))),
        },
        Row {
            area: "all_gather",
            call: "Plan::new(Op::AllGather)",
            input: "fp8 with NCCL 2.23.4",
            expect: &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
            run: || {
                err(plan_all_gather(
                    &nccl(2, 23, 4),
                    &buf(E4M3, 2),
                    &buf(E4M3, 8),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "3 outputs for world size 4",
            expect: &["output list has 3 elements", "expected 4"],
            run: || {
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    [f32s(2); 3].into_iter(),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "one output of 3 elements, input of 2",
            expect: &["an output has 3 elements", "expected 2"],
            run: || {
                let outputs = [f32s(2), f32s(2), f32s(3), f32s(2)];
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    outputs.into_iter(),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "one f16 output, f32 input",
            expect: &["output is half", "input is float"],
            run: || {
                let outputs = [f32s(2), buf(F16, 2), f32s(2), f32s(2)];
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    outputs.into_iter(),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "one output on device 1",
            expect: &["an output is on device 1", "device 0"],
            run: || {
                let outputs = [f32s(2), f32s(2), f32s(2), on_device_1(2)];
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    outputs.into_iter(),
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "Plan::new(Op::ReduceScatter)",
            input: "7-element input, 2-element output (world 4)",
            expect: &["input has 7 elements", "expected 8"],
            run: || err(plan_reduce_scatter(&info(), &f32s(7), &f32s(2), SUM)),
        },
        Row {
            area: "reduce_scatter",
            call: "Plan::new(Op::ReduceScatter)",
            input: "f32 input, bf16 output",
            expect: &["output is bfloat16", "input is float"],
            run: || err(plan_reduce_scatter(&info(), &f32s(8), &buf(BF16, 2), SUM)),
        },
        Row {
            area: "reduce_scatter",
            call: "Plan::new(Op::ReduceScatter)",
            input: "strided output",
            expect: &["output is not contiguous", "strides [1, 2]"],
            run: || err(plan_reduce_scatter(&info(), &f32s(32), &strided(), SUM)),
        },
        Row {
            area: "reduce_scatter",
            call: "Plan::new(Op::ReduceScatter)",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || {
                err(plan_reduce_scatter(
                    &info(),
                    &buf(E4M3, 8),
                    &buf(E4M3, 2),
                    AVG,
                ))
            },
        },
        Row {
            area: "all_to_all",
            call: "Plan::new(Op::AllToAll)",
            input: "6 elements, world size 4",
            expect: &["input has 6 elements", "not a multiple of the world size 4"],
            run: || err(plan_all_to_all(&info(), &f32s(6), &f32s(6))),
        },
        Row {
            area: "all_to_all",
            call: "Plan::new(Op::AllToAll)",
            input: "8-element input, 12-element output",
            expect: &["output has 12 elements", "expected 8"],
            run: || err(plan_all_to_all(&info(), &f32s(8), &f32s(12))),
        },
        Row {
            area: "all_to_all",
            call: "Plan::new(Op::AllToAll)",
            input: "f16 input, f32 output",
            expect: &["output is float", "input is half"],
            run: || err(plan_all_to_all(&info(), &buf(F16, 8), &f32s(8))),
        },
        Row {
            area: "gather",
            call: "Plan::new(Op::Gather)",
            input: "on the root, 8-element input, 31-element output (world 4)",
            expect: &["gather: output has 31 elements", "expected 32"],
            run: || {
                err(planned(
                    Op::Gather { root: 0 },
                    &info(),
                    Some(&f32s(8)),
                    &f32s(31),
                ))
            },
        },
        Row {
            area: "scatter",
            call: "Plan::new(Op::Scatter)",
            input: "root 4 of world size 4",
            expect: &["scatter: root 4", "expected 0..4"],
            run: || {
                err(planned(
                    Op::Scatter { root: 4 },
                    &info(),
                    Some(&f32s(32)),
                    &f32s(8),
                ))
            },
        },
        Row {
            area: "layout",
            call: "Plan::new(Op::AllGather)",
            input: "one buffer in place",
            expect: &[
                "all_gather takes an input and an output",
                "one buffer in place",
            ],
            run: || err(planned(Op::AllGather, &info(), None, &f32s(8))),
        },
        Row {
            area: "send/recv",
            call: "Plan::new(Op::Send)",
            input: "dst 4 of world size 4",
            expect: &["send: dst 4", "expected 0..4"],
            run: || err(plan_point_to_point("send", &info(), &f32s(8), 4)),
        },
        Row {
            area: "send/recv",
            call: "Plan::new(Op::Send)",
            input: "dst = this rank, no group open",
            expect: &["send: peer 0 is this rank", "inside one nccl_core::Group"],
            run: || err(plan_point_to_point("send", &info(), &f32s(8), 0)),
        },
        Row {
            area: "send/recv",
            call: "Plan::new(Op::Send)",
            input: "strided tensor",
            expect: &["send: tensor is not contiguous", "strides [1, 2]"],
            run: || err(plan_point_to_point("send", &info(), &strided(), 1)),
        },
        Row {
            area: "send/recv",
            call: "Plan::new(Op::Recv)",
            input: "src 5",
            expect: &["recv: src 5", "expected 0..4"],
            run: || err(plan_point_to_point("recv", &info(), &f32s(8), 5)),
        },
        Row {
            area: "send/recv",
            call: "Plan::new(Op::Recv)",
            input: "tensor on device 1",
            expect: &["recv: tensor is on device 1", "device 0"],
            run: || err(plan_point_to_point("recv", &info(), &on_device_1(8), 1)),
        },
    ]
}

/// Plans `op` with a stream on the communicator's device: in place on
/// `output` when there is no `input`, out of place otherwise.
fn planned(
    op: Op<'_>,
    info: &CommInfo,
    input: Option<&BufferDesc<'_>>,
    output: &BufferDesc<'_>,
) -> nccl_tensor::Result<()> {
    let layout = match input {
        Some(&input) => Layout::OutOfPlace {
            input,
            output: *output,
        },
        None => Layout::InPlace(*output),
    };
    Plan::new(op, info, &layout, info.device).map(drop)
}

fn plan_all_reduce(
    info: &CommInfo,
    input: Option<&BufferDesc<'_>>,
    output: &BufferDesc<'_>,
    op: Reduction<'_>,
) -> nccl_tensor::Result<()> {
    planned(Op::AllReduce(op), info, input, output)
}

fn plan_broadcast(
    info: &CommInfo,
    input: Option<&BufferDesc<'_>>,
    output: &BufferDesc<'_>,
    root: usize,
) -> nccl_tensor::Result<()> {
    planned(Op::Broadcast { root }, info, input, output)
}

fn plan_reduce(
    info: &CommInfo,
    input: Option<&BufferDesc<'_>>,
    output: &BufferDesc<'_>,
    op: Reduction<'_>,
    root: usize,
) -> nccl_tensor::Result<()> {
    planned(Op::Reduce { op, root }, info, input, output)
}

fn plan_all_gather(
    info: &CommInfo,
    input: &BufferDesc<'_>,
    output: &BufferDesc<'_>,
) -> nccl_tensor::Result<()> {
    planned(Op::AllGather, info, Some(input), output)
}

fn plan_reduce_scatter(
    info: &CommInfo,
    input: &BufferDesc<'_>,
    output: &BufferDesc<'_>,
    op: Reduction<'_>,
) -> nccl_tensor::Result<()> {
    planned(Op::ReduceScatter(op), info, Some(input), output)
}

fn plan_all_to_all(
    info: &CommInfo,
    input: &BufferDesc<'_>,
    output: &BufferDesc<'_>,
) -> nccl_tensor::Result<()> {
    planned(Op::AllToAll, info, Some(input), output)
}

/// A send (`op` "send") or receive of `buffer` with `peer`.
fn plan_point_to_point(
    op: &str,
    info: &CommInfo,
    buffer: &BufferDesc<'_>,
    peer: usize,
) -> nccl_tensor::Result<()> {
    let (op, layout) = match op {
        "send" => (Op::Send { peer }, Layout::Input(*buffer)),
        _ => (Op::Recv { peer }, Layout::Output(*buffer)),
    };
    Plan::new(op, info, &layout, info.device).map(drop)
}
