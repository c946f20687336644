//! The bad-input rows of `nccl_tensor::checks`: the shared building
//! blocks, then one function per operation.

use nccl_core::DataType;
use nccl_core::nccl_sys::Version;
use nccl_tensor::BufferDesc;
use nccl_tensor::checks::{self, CommInfo};

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
            input: "peer -1",
            expect: &["dst -1", "expected 0..4"],
            run: || err(checks::peer("op", "dst", -1, &info())),
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
        // nccl_tensor::checks: one function per operation.
        // ----------------------------------------------------------------
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "in-place tensor on device 1",
            expect: &["tensor is on device 1", "device 0"],
            run: || err(checks::all_reduce(&info(), None, &on_device_1(8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "strided input",
            expect: &["input is not contiguous", "strides [1, 2]"],
            run: || err(checks::all_reduce(&info(), Some(&strided()), &f32s(8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "f16 input, f32 output",
            expect: &["output is float", "input is half"],
            run: || {
                err(checks::all_reduce(
                    &info(),
                    Some(&buf(F16, 8)),
                    &f32s(8),
                    SUM,
                ))
            },
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "8-element input, 6-element output",
            expect: &["output has 6 elements", "expected 8"],
            run: || err(checks::all_reduce(&info(), Some(&f32s(8)), &f32s(6), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || err(checks::all_reduce(&info(), None, &buf(E4M3, 8), AVG)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "fp8 sum on compute capability 8.0",
            expect: &["sum on f8e4m3", "this one is 8.0"],
            run: || err(checks::all_reduce(&ampere(), None, &buf(E4M3, 8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "fp8 tensor with NCCL 2.23.4",
            expect: &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
            run: || {
                err(checks::all_reduce(
                    &nccl(2, 23, 4),
                    None,
                    &buf(E4M3, 8),
                    SUM,
                ))
            },
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "avg with NCCL 2.9.9",
            expect: &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
            run: || err(checks::all_reduce(&nccl(2, 9, 9), None, &f32s(8), AVG)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "root 4 of world size 4",
            expect: &["root 4", "expected 0..4"],
            run: || err(checks::broadcast(&info(), None, &f32s(8), 4)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "root -1",
            expect: &["root -1", "expected 0..4"],
            run: || err(checks::broadcast(&info(), None, &f32s(8), -1)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "8-element input, 9-element output",
            expect: &["output has 9 elements", "expected 8"],
            run: || err(checks::broadcast(&info(), Some(&f32s(8)), &f32s(9), 0)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "bf16 input, f32 output",
            expect: &["output is float", "input is bfloat16"],
            run: || err(checks::broadcast(&info(), Some(&buf(BF16, 8)), &f32s(8), 0)),
        },
        Row {
            area: "reduce",
            call: "checks::reduce",
            input: "root 5 of world size 4",
            expect: &["root 5", "expected 0..4"],
            run: || err(checks::reduce(&info(), None, &f32s(8), SUM, 5)),
        },
        Row {
            area: "reduce",
            call: "checks::reduce",
            input: "output on device 1",
            expect: &["output is on device 1", "device 0"],
            run: || {
                err(checks::reduce(
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
            call: "checks::reduce",
            input: "8-element input, 4-element output",
            expect: &["output has 4 elements", "expected 8"],
            run: || err(checks::reduce(&info(), Some(&f32s(8)), &f32s(4), SUM, 0)),
        },
        Row {
            area: "reduce",
            call: "checks::reduce",
            input: "fp8 max on compute capability 8.0",
            expect: &["max on f8e4m3", "this one is 8.0"],
            run: || err(checks::reduce(&ampere(), None, &buf(E4M3, 8), MAX, 0)),
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "2-element input, 7-element output (world 4)",
            expect: &["output has 7 elements", "expected 8"],
            run: || err(checks::all_gather_into_tensor(&info(), &f32s(2), &f32s(7))),
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "f32 input, f16 output",
            expect: &["output is half", "input is float"],
            run: || {
                err(checks::all_gather_into_tensor(
                    &info(),
                    &f32s(2),
                    &buf(F16, 8),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "input on device 1",
            expect: &["input is on device 1", "device 0"],
            run: || {
                err(checks::all_gather_into_tensor(
                    &info(),
                    &on_device_1(2),
                    &f32s(8),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "fp8 with NCCL 2.23.4",
            expect: &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
            run: || {
                err(checks::all_gather_into_tensor(
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
            call: "checks::reduce_scatter_tensor",
            input: "7-element input, 2-element output (world 4)",
            expect: &["input has 7 elements", "expected 8"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &f32s(7),
                    &f32s(2),
                    SUM,
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "checks::reduce_scatter_tensor",
            input: "f32 input, bf16 output",
            expect: &["output is bfloat16", "input is float"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &f32s(8),
                    &buf(BF16, 2),
                    SUM,
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "checks::reduce_scatter_tensor",
            input: "strided output",
            expect: &["output is not contiguous", "strides [1, 2]"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &f32s(32),
                    &strided(),
                    SUM,
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "checks::reduce_scatter_tensor",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &buf(E4M3, 8),
                    &buf(E4M3, 2),
                    AVG,
                ))
            },
        },
        Row {
            area: "all_to_all",
            call: "checks::all_to_all_single",
            input: "6 elements, world size 4",
            expect: &["input has 6 elements", "not a multiple of the world size 4"],
            run: || err(checks::all_to_all_single(&info(), &f32s(6), &f32s(6))),
        },
        Row {
            area: "all_to_all",
            call: "checks::all_to_all_single",
            input: "8-element input, 12-element output",
            expect: &["output has 12 elements", "expected 8"],
            run: || err(checks::all_to_all_single(&info(), &f32s(8), &f32s(12))),
        },
        Row {
            area: "all_to_all",
            call: "checks::all_to_all_single",
            input: "f16 input, f32 output",
            expect: &["output is float", "input is half"],
            run: || err(checks::all_to_all_single(&info(), &buf(F16, 8), &f32s(8))),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"send\", \"dst\")",
            input: "dst 4 of world size 4",
            expect: &["send: dst 4", "expected 0..4"],
            run: || err(checks::point_to_point("send", "dst", &info(), &f32s(8), 4)),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"send\", \"dst\")",
            input: "dst = this rank, no group open",
            expect: &["send: peer 0 is this rank", "inside one nccl_core::Group"],
            run: || err(checks::point_to_point("send", "dst", &info(), &f32s(8), 0)),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"send\", \"dst\")",
            input: "strided tensor",
            expect: &["send: tensor is not contiguous", "strides [1, 2]"],
            run: || {
                err(checks::point_to_point(
                    "send",
                    "dst",
                    &info(),
                    &strided(),
                    1,
                ))
            },
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"recv\", \"src\")",
            input: "src -1",
            expect: &["recv: src -1", "expected 0..4"],
            run: || err(checks::point_to_point("recv", "src", &info(), &f32s(8), -1)),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"recv\", \"src\")",
            input: "tensor on device 1",
            expect: &["recv: tensor is on device 1", "device 0"],
            run: || {
                err(checks::point_to_point(
                    "recv",
                    "src",
                    &info(),
                    &on_device_1(8),
                    1,
                ))
            },
        },
    ]
}
