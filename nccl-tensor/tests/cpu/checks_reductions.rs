//! CPU tests of the reduction check: what the data type, the device's
//! compute capability and the loaded NCCL support, through every reducing
//! operation and through `checks::reduction` itself. Every error with all
//! its fields and its exact message (`checks_support` has the common
//! ground). No GPU and no NCCL needed.
//!
//! Out of scope here: `Reduction::PreMulSum` (its NCCL 2.11 requirement and
//! its data-type match) needs a pre-multiplied sum created on a live
//! communicator, so those checks are left to the GPU tests.

use crate::checks_support::*;
use nccl_core::nccl_sys::Version;
use nccl_core::{DataType, ReduceOp};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{Error, Layout, Op};

#[test]
fn fp8_reductions_are_refused_before_compute_capability_9_0() {
    let ampere = ampere();
    for dtype in FP8 {
        for red in ReduceOp::ALL {
            for op in TwoBuffers::REDUCING {
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
    let ampere = ampere();
    unsupported_reduction(
        plan(Op::AllReduce(SUM), &ampere, Layout::InPlace(buf(E4M3, 8))),
        ("all_reduce", "sum"),
        E4M3,
        FP8_ON_8_0,
        "all_reduce: reduction sum on f8e4m3 is not supported: reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, this one is 8.0; all_gather, broadcast, send and recv work on any GPU",
    );
    unsupported_reduction(
        plan(
            Op::ReduceScatter(ReduceOp::Max.into()),
            &ampere,
            pair(buf(E5M2, 32), buf(E5M2, 8)),
        ),
        ("reduce_scatter", "max"),
        E5M2,
        FP8_ON_8_0,
        "reduce_scatter: reduction max on f8e5m2 is not supported: reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, this one is 8.0; all_gather, broadcast, send and recv work on any GPU",
    );
    // Ada (8.9) is still below 9.0.
    let ada = CommInfo {
        compute_capability: (8, 9),
        ..info()
    };
    const ON_8_9: &str = "reductions on 8-bit floats need a GPU of compute capability 9.0 or newer, this one is 8.9; all_gather, broadcast, send and recv work on any GPU";
    let prod_at_0 = Op::Reduce {
        op: ReduceOp::Prod.into(),
        root: 0,
    };
    unsupported_reduction(
        plan(prod_at_0, &ada, Layout::InPlace(buf(E4M3, 8))),
        ("reduce", "prod"),
        E4M3,
        ON_8_9,
        &format!("reduce: reduction prod on f8e4m3 is not supported: {ON_8_9}"),
    );
}

#[test]
fn fp8_averages_are_refused_on_every_gpu() {
    for dtype in FP8 {
        for op in TwoBuffers::REDUCING {
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
                matches!(&error, Error::UnsupportedReduction { op: name, reduction: "avg", dtype: d, .. } if *d == dtype && *name == op.name()),
                "{op:?} {dtype}: {error:?}"
            );
            assert_eq!(
                error.to_string(),
                format!(
                    "{}: reduction avg on {dtype} is not supported: NCCL has no averaging or pre-multiplied sums on 8-bit floats; sum, prod, max and min work",
                    op.name()
                ),
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
            for red in supported_reductions(dtype) {
                for op in TwoBuffers::REDUCING {
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
            for op in TwoBuffers::REDUCING {
                let (i, o) = op.lens(8);
                let result = op.check(&volta, &buf(dtype, i), &buf(dtype, o), red.into());
                assert!(result.is_ok(), "{op:?} {dtype} {red}: {result:?}");
            }
        }
    }
}

#[test]
fn fp8_without_a_reduction_is_accepted_before_compute_capability_9_0() {
    let ampere = ampere();
    for dtype in FP8 {
        for op in [
            TwoBuffers::AllGather,
            TwoBuffers::AllGatherList,
            TwoBuffers::Broadcast,
            TwoBuffers::AllToAll,
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
    for op in TwoBuffers::REDUCING {
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
        plan(
            Op::AllReduce(AVG),
            &old,
            Layout::InPlace(buf(DataType::Int32, 8)),
        ),
        ("all_reduce", "avg"),
        DataType::Int32,
        REASON,
        "all_reduce: reduction avg on int32 is not supported: it needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.9",
    );
    let first = CommInfo {
        nccl_version: V2_10_0,
        ..info()
    };
    for op in TwoBuffers::REDUCING {
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
fn order_within_the_reduction_compute_capability_before_version() {
    // fp8 avg on compute capability 8.0 with NCCL 2.9 (the data type check
    // is skipped by calling `reduction` directly): the capability is
    // reported.
    let old_everything = CommInfo {
        nccl_version: V2_9_9,
        ..ampere()
    };
    unsupported_reduction(
        checks::reduction("all_reduce", AVG, E4M3, &old_everything),
        ("all_reduce", "avg"),
        E4M3,
        FP8_ON_8_0,
        &format!("all_reduce: reduction avg on f8e4m3 is not supported: {FP8_ON_8_0}"),
    );
    // Through an operation on NCCL 2.28 (fp8 known), fp8 avg on 8.0.
    let ampere = ampere();
    unsupported_reduction(
        plan(
            Op::Reduce { op: AVG, root: 1 },
            &ampere,
            pair(buf(E5M2, 8), buf(E5M2, 8)),
        ),
        ("reduce", "avg"),
        E5M2,
        FP8_ON_8_0,
        &format!("reduce: reduction avg on f8e5m2 is not supported: {FP8_ON_8_0}"),
    );
}
