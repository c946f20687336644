//! CPU tests of the checks on each buffer and on a pair of them: the
//! device, contiguity, a data type the loaded NCCL knows, one data type
//! for input and output, and the order of those checks. Every error with
//! all its fields and its exact message (`checks_support` has the common
//! ground). No GPU and no NCCL needed.

use crate::checks_support::*;
use nccl_core::DataType;
use nccl_core::nccl_sys::Version;
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{BufferDesc, Layout, Op};

// ---------------------------------------------------------------------------
// Data type mismatch.
// ---------------------------------------------------------------------------

#[test]
fn dtype_mismatch_is_refused_by_every_operation_with_two_buffers() {
    for op in TwoBuffers::ALL {
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
        plan(Op::AllReduce(SUM), &info(), pair(buf(F32, 8), buf(BF16, 8))),
        "all_reduce",
        F32,
        BF16,
        "all_reduce: the output is bfloat16 but the input is float; both must have the same data type",
    );
    dtype_mismatch(
        plan(
            Op::AllToAll,
            &info(),
            pair(buf(DataType::Int64, 8), buf(DataType::Uint64, 8)),
        ),
        "all_to_all",
        DataType::Int64,
        DataType::Uint64,
        "all_to_all: the output is uint64 but the input is int64; both must have the same data type",
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
// Buffers on another device.
// ---------------------------------------------------------------------------

#[test]
fn an_input_on_another_device_is_refused() {
    for op in TwoBuffers::ALL {
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
    for op in TwoBuffers::ALL {
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
        plan(Op::AllGather, &info(), pair(f32s_on(10, 1), f32s(40))),
        ("all_gather", "input"),
        0,
        1,
        "all_gather: input is on device 1, but the communicator is on device 0",
    );
    wrong_device(
        send(&info(), f32s_on(10, 3), 1),
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
    for op in TwoBuffers::ALL {
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
    for op in TwoBuffers::ALL {
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
        plan(
            Op::AllReduce(SUM),
            &info(),
            Layout::InPlace(strided(&shape, &strides)),
        ),
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
// Data types the loaded NCCL lacks.
// ---------------------------------------------------------------------------

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
        for op in TwoBuffers::ALL {
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
        send(&nccl_2_9, buf(BF16, 8), 1),
        "send",
        BF16,
        (V2_10_0, V2_9_9),
        "send: data type bfloat16 needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9",
    );
    unsupported_dtype(
        plan(
            Op::AllReduce(SUM),
            &nccl_2_23,
            Layout::InPlace(buf(E4M3, 8)),
        ),
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
    for op in TwoBuffers::ALL {
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
// The order of the buffer checks, where several could fire.
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
fn order_of_the_two_buffers_input_then_output() {
    // Both buffers on wrong devices: every operation checks the input
    // first (all_reduce, broadcast and reduce checked the output first
    // before each operation was described once).
    for op in TwoBuffers::ALL {
        let (i, o) = op.lens(8);
        let name = op.name();
        wrong_device(
            op.check(&info(), &f32s_on(i, 1), &f32s_on(o, 2), SUM),
            (name, "input"),
            0,
            1,
            &format!("{name}: input is on device 1, but the communicator is on device 0"),
        );
        // A strided input and an output on another device: the input.
        let (shape, strides) = transposed(i);
        not_contiguous(
            op.check(&info(), &strided(&shape, &strides), &f32s_on(o, 2), SUM),
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
fn order_buffers_then_data_type_then_length() {
    for op in TwoBuffers::ALL {
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
        // Another type and a wrong length (and, for all_to_all, an input
        // not divisible by the world size): the type is reported.
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
    // all_gather of 10 into 39 elements with the input on device 1.
    wrong_device(
        plan(Op::AllGather, &info(), pair(f32s_on(10, 1), f32s(39))),
        ("all_gather", "input"),
        0,
        1,
        "all_gather: input is on device 1, but the communicator is on device 0",
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
        plan(Op::AllReduce(AVG), &nccl_2_9, Layout::InPlace(buf(BF16, 8))),
        "all_reduce",
        BF16,
        (V2_10_0, V2_9_9),
        "all_reduce: data type bfloat16 needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9",
    );
    // fp8 on NCCL 2.23 and compute capability 8.0: the data type is reported.
    let old_everything = CommInfo {
        nccl_version: V2_23_4,
        ..ampere()
    };
    unsupported_dtype(
        plan(
            Op::ReduceScatter(SUM),
            &old_everything,
            pair(buf(E5M2, 32), buf(E5M2, 8)),
        ),
        "reduce_scatter",
        E5M2,
        (V2_24_0, V2_23_4),
        "reduce_scatter: data type f8e5m2 needs NCCL 2.24.0 or newer, but the loaded libnccl is 2.23.4",
    );
}
