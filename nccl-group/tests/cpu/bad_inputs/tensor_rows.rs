//! The bad-input rows of `nccl_tensor::checks`: the shared building
//! blocks, then one function per operation.

use nccl_core::{DataType, Reduction, Version};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{BufferDesc, Layout, Op, Plan};

use super::{AVG, BF16, E4M3, F16, F32, MAX, Row, SUM, calls, err};

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
    [
        // ----------------------------------------------------------------
        // nccl_tensor::checks: the shared building blocks.
        // ----------------------------------------------------------------
        calls(
            "checks",
            "checks::buffer",
            &[
                (
                    "buffer on device 1, communicator on device 0",
                    &["device 1", "device 0"],
                    || err(checks::buffer("op", "x", &on_device_1(8), &info())),
                ),
                (
                    "transposed (strided) buffer",
                    &["not contiguous", "shape [2, 4], strides [1, 2]"],
                    || err(checks::buffer("op", "x", &strided(), &info())),
                ),
                (
                    "bfloat16 with NCCL 2.9.9",
                    &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
                    || err(checks::buffer("op", "x", &buf(BF16, 8), &nccl(2, 9, 9))),
                ),
            ],
        ),
        calls(
            "checks",
            "checks::same_dtype",
            &[(
                "f32 input, f16 output",
                &["output is half", "input is float"],
                || err(checks::same_dtype("op", &f32s(8), &buf(F16, 8))),
            )],
        ),
        calls(
            "checks",
            "checks::length",
            &[(
                "7 elements where 8 are needed",
                &["has 7 elements", "expected 8"],
                || err(checks::length("op", "output", 8, 7, "a rule")),
            )],
        ),
        calls(
            "checks",
            "checks::rank",
            &[(
                "root 4 of world size 4",
                &["root 4", "expected 0..4"],
                || err(checks::rank("op", "root", 4, &info())),
            )],
        ),
        calls(
            "checks",
            "checks::peer",
            &[
                ("peer 5", &["dst 5", "expected 0..4"], || {
                    err(checks::peer("op", "dst", 5, &info()))
                }),
                (
                    "peer = this rank, no group open",
                    &["peer 0 is this rank", "inside one nccl_core::Group"],
                    || err(checks::peer("op", "dst", 0, &info())),
                ),
            ],
        ),
        calls(
            "checks",
            "checks::reduction",
            &[
                (
                    "fp8 max on compute capability 8.0",
                    &["max on f8e4m3", "9.0 or newer, this one is 8.0"],
                    || err(checks::reduction("op", MAX, E4M3, &ampere())),
                ),
                (
                    "fp8 avg",
                    &["avg on f8e4m3", "sum, prod, max and min work"],
                    || err(checks::reduction("op", AVG, E4M3, &info())),
                ),
                (
                    "avg with NCCL 2.9.9",
                    &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
                    || err(checks::reduction("op", AVG, F32, &nccl(2, 9, 9))),
                ),
            ],
        ),
        // ----------------------------------------------------------------
        // nccl_tensor::Plan::new: every operation's checks.
        // ----------------------------------------------------------------
        calls(
            "all_reduce",
            "Plan::new(Op::AllReduce)",
            &[
                (
                    "in-place tensor on device 1",
                    &["tensor is on device 1", "device 0"],
                    || err(plan_all_reduce(&info(), None, &on_device_1(8), SUM)),
                ),
                (
                    "strided input",
                    &["input is not contiguous", "strides [1, 2]"],
                    || err(plan_all_reduce(&info(), Some(&strided()), &f32s(8), SUM)),
                ),
                (
                    "f16 input, f32 output",
                    &["output is float", "input is half"],
                    || err(plan_all_reduce(&info(), Some(&buf(F16, 8)), &f32s(8), SUM)),
                ),
                (
                    "8-element input, 6-element output",
                    &["output has 6 elements", "expected 8"],
                    || err(plan_all_reduce(&info(), Some(&f32s(8)), &f32s(6), SUM)),
                ),
                (
                    "fp8 avg",
                    &["avg on f8e4m3", "sum, prod, max and min work"],
                    || err(plan_all_reduce(&info(), None, &buf(E4M3, 8), AVG)),
                ),
                (
                    "fp8 sum on compute capability 8.0",
                    &["sum on f8e4m3", "this one is 8.0"],
                    || err(plan_all_reduce(&ampere(), None, &buf(E4M3, 8), SUM)),
                ),
                (
                    "fp8 tensor with NCCL 2.23.4",
                    &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
                    || err(plan_all_reduce(&nccl(2, 23, 4), None, &buf(E4M3, 8), SUM)),
                ),
                (
                    "avg with NCCL 2.9.9",
                    &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
                    || err(plan_all_reduce(&nccl(2, 9, 9), None, &f32s(8), AVG)),
                ),
            ],
        ),
        calls(
            "broadcast",
            "Plan::new(Op::Broadcast)",
            &[
                (
                    "root 4 of world size 4",
                    &["root 4", "expected 0..4"],
                    || err(plan_broadcast(&info(), None, &f32s(8), 4)),
                ),
                (
                    "root 2^31 (past NCCL's C int)",
                    &["root 2147483648", "expected 0..4"],
                    || err(plan_broadcast(&info(), None, &f32s(8), 1 << 31)),
                ),
                (
                    "8-element input, 9-element output",
                    &["output has 9 elements", "expected 8"],
                    || err(plan_broadcast(&info(), Some(&f32s(8)), &f32s(9), 0)),
                ),
                (
                    "bf16 input, f32 output",
                    &["output is float", "input is bfloat16"],
                    || err(plan_broadcast(&info(), Some(&buf(BF16, 8)), &f32s(8), 0)),
                ),
            ],
        ),
        calls(
            "reduce",
            "Plan::new(Op::Reduce)",
            &[
                (
                    "root 5 of world size 4",
                    &["root 5", "expected 0..4"],
                    || err(plan_reduce(&info(), None, &f32s(8), SUM, 5)),
                ),
                (
                    "output on device 1",
                    &["output is on device 1", "device 0"],
                    || {
                        err(plan_reduce(
                            &info(),
                            Some(&f32s(8)),
                            &on_device_1(8),
                            SUM,
                            0,
                        ))
                    },
                ),
                (
                    "8-element input, 4-element output",
                    &["output has 4 elements", "expected 8"],
                    || err(plan_reduce(&info(), Some(&f32s(8)), &f32s(4), SUM, 0)),
                ),
                (
                    "fp8 max on compute capability 8.0",
                    &["max on f8e4m3", "this one is 8.0"],
                    || err(plan_reduce(&ampere(), None, &buf(E4M3, 8), MAX, 0)),
                ),
            ],
        ),
        calls(
            "all_gather",
            "Plan::new(Op::AllGather)",
            &[
                (
                    "2-element input, 7-element output (world 4)",
                    &["output has 7 elements", "expected 8"],
                    || err(plan_all_gather(&info(), &f32s(2), &f32s(7))),
                ),
                (
                    "f32 input, f16 output",
                    &["output is half", "input is float"],
                    || err(plan_all_gather(&info(), &f32s(2), &buf(F16, 8))),
                ),
                (
                    "input on device 1",
                    &["input is on device 1", "device 0"],
                    || err(plan_all_gather(&info(), &on_device_1(2), &f32s(8))),
                ),
                (
                    "fp8 with NCCL 2.23.4",
                    &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
                    || {
                        err(plan_all_gather(
                            &nccl(2, 23, 4),
                            &buf(E4M3, 2),
                            &buf(E4M3, 8),
                        ))
                    },
                ),
            ],
        ),
        calls(
            "all_gather",
            "checks::all_gather_list",
            &[
                (
                    "3 outputs for world size 4",
                    &["output list has 3 elements", "expected 4"],
                    || {
                        err(checks::all_gather_list(
                            &info(),
                            &f32s(2),
                            [f32s(2); 3].into_iter(),
                        ))
                    },
                ),
                (
                    "one output of 3 elements, input of 2",
                    &["an output has 3 elements", "expected 2"],
                    || {
                        let outputs = [f32s(2), f32s(2), f32s(3), f32s(2)];
                        err(checks::all_gather_list(
                            &info(),
                            &f32s(2),
                            outputs.into_iter(),
                        ))
                    },
                ),
                (
                    "one f16 output, f32 input",
                    &["output is half", "input is float"],
                    || {
                        let outputs = [f32s(2), buf(F16, 2), f32s(2), f32s(2)];
                        err(checks::all_gather_list(
                            &info(),
                            &f32s(2),
                            outputs.into_iter(),
                        ))
                    },
                ),
                (
                    "one output on device 1",
                    &["an output is on device 1", "device 0"],
                    || {
                        let outputs = [f32s(2), f32s(2), f32s(2), on_device_1(2)];
                        err(checks::all_gather_list(
                            &info(),
                            &f32s(2),
                            outputs.into_iter(),
                        ))
                    },
                ),
            ],
        ),
        calls(
            "reduce_scatter",
            "Plan::new(Op::ReduceScatter)",
            &[
                (
                    "7-element input, 2-element output (world 4)",
                    &["input has 7 elements", "expected 8"],
                    || err(plan_reduce_scatter(&info(), &f32s(7), &f32s(2), SUM)),
                ),
                (
                    "f32 input, bf16 output",
                    &["output is bfloat16", "input is float"],
                    || err(plan_reduce_scatter(&info(), &f32s(8), &buf(BF16, 2), SUM)),
                ),
                (
                    "strided output",
                    &["output is not contiguous", "strides [1, 2]"],
                    || err(plan_reduce_scatter(&info(), &f32s(32), &strided(), SUM)),
                ),
                (
                    "fp8 avg",
                    &["avg on f8e4m3", "sum, prod, max and min work"],
                    || {
                        err(plan_reduce_scatter(
                            &info(),
                            &buf(E4M3, 8),
                            &buf(E4M3, 2),
                            AVG,
                        ))
                    },
                ),
            ],
        ),
        calls(
            "all_to_all",
            "Plan::new(Op::AllToAll)",
            &[
                (
                    "6 elements, world size 4",
                    &["input has 6 elements", "not a multiple of the world size 4"],
                    || err(plan_all_to_all(&info(), &f32s(6), &f32s(6))),
                ),
                (
                    "8-element input, 12-element output",
                    &["output has 12 elements", "expected 8"],
                    || err(plan_all_to_all(&info(), &f32s(8), &f32s(12))),
                ),
                (
                    "f16 input, f32 output",
                    &["output is float", "input is half"],
                    || err(plan_all_to_all(&info(), &buf(F16, 8), &f32s(8))),
                ),
            ],
        ),
        calls(
            "gather",
            "Plan::new(Op::Gather)",
            &[(
                "on the root, 8-element input, 31-element output (world 4)",
                &["gather: output has 31 elements", "expected 32"],
                || {
                    err(planned(
                        Op::Gather { root: 0 },
                        &info(),
                        Some(&f32s(8)),
                        &f32s(31),
                    ))
                },
            )],
        ),
        calls(
            "scatter",
            "Plan::new(Op::Scatter)",
            &[(
                "root 4 of world size 4",
                &["scatter: root 4", "expected 0..4"],
                || {
                    err(planned(
                        Op::Scatter { root: 4 },
                        &info(),
                        Some(&f32s(32)),
                        &f32s(8),
                    ))
                },
            )],
        ),
        calls(
            "layout",
            "Plan::new(Op::AllGather)",
            &[(
                "one buffer in place",
                &[
                    "all_gather takes an input and an output",
                    "one buffer in place",
                ],
                || err(planned(Op::AllGather, &info(), None, &f32s(8))),
            )],
        ),
        calls(
            "send/recv",
            "Plan::new(Op::Send)",
            &[
                (
                    "dst 4 of world size 4",
                    &["send: dst 4", "expected 0..4"],
                    || err(plan_point_to_point("send", &info(), &f32s(8), 4)),
                ),
                (
                    "dst = this rank, no group open",
                    &["send: peer 0 is this rank", "inside one nccl_core::Group"],
                    || err(plan_point_to_point("send", &info(), &f32s(8), 0)),
                ),
                (
                    "strided tensor",
                    &["send: tensor is not contiguous", "strides [1, 2]"],
                    || err(plan_point_to_point("send", &info(), &strided(), 1)),
                ),
            ],
        ),
        calls(
            "send/recv",
            "Plan::new(Op::Recv)",
            &[
                ("src 5", &["recv: src 5", "expected 0..4"], || {
                    err(plan_point_to_point("recv", &info(), &f32s(8), 5))
                }),
                (
                    "tensor on device 1",
                    &["recv: tensor is on device 1", "device 0"],
                    || err(plan_point_to_point("recv", &info(), &on_device_1(8), 1)),
                ),
            ],
        ),
    ]
    .concat()
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
