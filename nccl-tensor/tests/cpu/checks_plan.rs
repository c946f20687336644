//! CPU tests of what `Plan::new` adds around the buffer checks: each
//! operation's name and rules, the layouts it takes (`Error::WrongLayout`
//! otherwise), the stream's device, the order of those first checks, valid
//! and empty arguments, and the NCCL count and input length each plan
//! returns. Every error with all its fields and its exact message
//! (`checks_support` has the common ground). No GPU and no NCCL needed.

use crate::checks_support::*;
use nccl_core::DataType;
use nccl_core::nccl_sys::Version;
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{Layout, Layouts, Op, Plan, Sizes, rules};

const IN_PLACE: &str = "one buffer in place";
const OUT_OF_PLACE: &str = "an input and an output";
const INPUT: &str = "an input only";
const OUTPUT: &str = "an output only";

/// The layouts `layouts` takes, by name, and how its errors name them.
fn taken(layouts: Layouts) -> (&'static [&'static str], &'static str) {
    match layouts {
        Layouts::Either => (
            &[IN_PLACE, OUT_OF_PLACE],
            "one buffer in place, or an input and an output",
        ),
        Layouts::OutOfPlace => (&[OUT_OF_PLACE], OUT_OF_PLACE),
        Layouts::Input => (&[INPUT], INPUT),
        Layouts::Output => (&[OUTPUT], OUTPUT),
    }
}

/// Every layout, each of buffers with valid lengths for `op` (8 elements
/// per rank).
fn every_layout(op: &Op<'_>) -> [Layout<'static>; 4] {
    let (input, output) = lens(rules(op).sizes, 8);
    [
        Layout::InPlace(f32s(8)),
        pair(f32s(input), f32s(output)),
        Layout::Input(f32s(8)),
        Layout::Output(f32s(8)),
    ]
}

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
fn every_operation_has_its_name_and_rules() {
    let expected = [
        ("all_reduce", Layouts::Either, Sizes::SAME),
        ("broadcast", Layouts::Either, Sizes::SAME),
        ("reduce", Layouts::Either, Sizes::SAME),
        ("all_gather", Layouts::OutOfPlace, Sizes::GATHERED),
        ("reduce_scatter", Layouts::OutOfPlace, Sizes::SCATTERED),
        ("all_to_all", Layouts::OutOfPlace, Sizes::EXCHANGED),
        ("gather", Layouts::OutOfPlace, Sizes::GATHERED),
        ("scatter", Layouts::OutOfPlace, Sizes::SCATTERED),
        ("send", Layouts::Input, Sizes::SAME),
        ("recv", Layouts::Output, Sizes::SAME),
    ];
    for (op, (name, layouts, sizes)) in every_op(1).iter().zip(expected) {
        let rules = rules(op);
        assert_eq!(
            (op.name(), rules.layouts, rules.sizes),
            (name, layouts, sizes)
        );
    }
    let layout_names = [IN_PLACE, OUT_OF_PLACE, INPUT, OUTPUT];
    for (layout, name) in every_layout(&Op::AllGather).iter().zip(layout_names) {
        assert_eq!(layout.name(), name);
    }
}

// ---------------------------------------------------------------------------
// Layouts.
// ---------------------------------------------------------------------------

#[test]
fn every_operation_refuses_the_layouts_it_does_not_take() {
    let mut refused = 0;
    for op in every_op(1) {
        let name = op.name();
        let (accepted, expected) = taken(rules(&op).layouts);
        for layout in every_layout(&op) {
            let given = layout.name();
            let result = plan(op, &info(), layout);
            if accepted.contains(&given) {
                assert!(result.is_ok(), "{name} on {given}: {result:?}");
            } else {
                wrong_layout(
                    result,
                    name,
                    (expected, given),
                    &format!("{name} takes {expected}, but was given {given}"),
                );
                refused += 1;
            }
        }
    }
    // all_reduce, broadcast and reduce refuse 2 layouts each; the others 3.
    assert_eq!(refused, 3 * 2 + 7 * 3);
}

#[test]
fn wrong_layout_messages() {
    wrong_layout(
        plan(Op::AllGather, &info(), Layout::InPlace(f32s(8))),
        "all_gather",
        (OUT_OF_PLACE, IN_PLACE),
        "all_gather takes an input and an output, but was given one buffer in place",
    );
    wrong_layout(
        plan(Op::AllReduce(SUM), &info(), Layout::Input(f32s(8))),
        "all_reduce",
        ("one buffer in place, or an input and an output", INPUT),
        "all_reduce takes one buffer in place, or an input and an output, but was given an input only",
    );
    wrong_layout(
        plan(Op::Send { peer: 1 }, &info(), Layout::Output(f32s(8))),
        "send",
        (INPUT, OUTPUT),
        "send takes an input only, but was given an output only",
    );
    wrong_layout(
        plan(Op::Recv { peer: 1 }, &info(), pair(f32s(8), f32s(8))),
        "recv",
        (OUTPUT, OUT_OF_PLACE),
        "recv takes an output only, but was given an input and an output",
    );
}

// ---------------------------------------------------------------------------
// The stream's device.
// ---------------------------------------------------------------------------

#[test]
fn a_stream_on_another_device_is_refused_by_every_operation() {
    let on_5 = CommInfo {
        device: 5,
        ..info()
    };
    for op in every_op(1) {
        let name = op.name();
        let layout = valid_layout(&op, F32, 8);
        wrong_device(
            Plan::new(op, &info(), &layout, 1),
            (name, "stream"),
            0,
            1,
            &format!("{name}: stream is on device 1, but the communicator is on device 0"),
        );
        assert!(Plan::new(op, &info(), &layout, 0).is_ok(), "{name}");
        // The stream is checked before the buffers, here on device 0 too.
        wrong_device(
            Plan::new(op, &on_5, &layout, 0),
            (name, "stream"),
            5,
            0,
            &format!("{name}: stream is on device 0, but the communicator is on device 5"),
        );
    }
}

#[test]
fn stream_check_itself() {
    assert!(checks::stream("op", 0, info().device).is_ok());
    wrong_device(
        checks::stream("op", 7, info().device),
        ("op", "stream"),
        0,
        7,
        "op: stream is on device 7, but the communicator is on device 0",
    );
}

#[test]
fn order_layout_then_stream_then_root_or_peer_then_buffers() {
    let (shape, strides) = ([2, 4], [1, 2]);
    // A layout the operation does not take is reported before a stream,
    // peer or buffer that is wrong too.
    wrong_layout(
        Plan::new(
            Op::Send { peer: 9 },
            &info(),
            &pair(f32s_on(8, 1), strided(&shape, &strides)),
            3,
        ),
        "send",
        (INPUT, OUT_OF_PLACE),
        "send takes an input only, but was given an input and an output",
    );
    // The stream before the root, the peer and the buffers.
    wrong_device(
        Plan::new(
            Op::Broadcast { root: 4 },
            &info(),
            &Layout::InPlace(f32s_on(8, 1)),
            2,
        ),
        ("broadcast", "stream"),
        0,
        2,
        "broadcast: stream is on device 2, but the communicator is on device 0",
    );
    wrong_device(
        Plan::new(
            Op::Recv { peer: 0 },
            &info(),
            &Layout::Output(strided(&shape, &strides)),
            1,
        ),
        ("recv", "stream"),
        0,
        1,
        "recv: stream is on device 1, but the communicator is on device 0",
    );
    // The root and the peer before the buffers.
    rank_out_of_range(
        plan(
            Op::Reduce { op: SUM, root: 4 },
            &info(),
            Layout::InPlace(f32s_on(8, 1)),
        ),
        ("reduce", "root"),
        4,
        4,
        "reduce: root 4 is out of range: expected 0..4",
    );
    self_peer(
        recv(&info(), f32s_on(8, 1), 0),
        "recv",
        0,
        "recv: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
}

// ---------------------------------------------------------------------------
// Valid and empty arguments.
// ---------------------------------------------------------------------------

#[test]
fn valid_arguments_pass_for_every_operation_and_data_type() {
    for dtype in DataType::ALL {
        for red in supported_reductions(dtype) {
            for op in TwoBuffers::ALL {
                let (i, o) = op.lens(8);
                let result = op.check(&info(), &buf(dtype, i), &buf(dtype, o), red.into());
                assert!(result.is_ok(), "{op:?} {dtype} {red}: {result:?}");
            }
            for op in OneBuffer::ALL {
                let result = op.check(&info(), &buf(dtype, 8), red.into());
                assert!(result.is_ok(), "{op:?} {dtype} {red}: {result:?}");
            }
        }
    }
}

#[test]
fn empty_tensors_pass_every_check() {
    for dtype in DataType::ALL {
        for red in supported_reductions(dtype) {
            for op in TwoBuffers::ALL {
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
    assert!(send(&grouped_self, f32s(0), 0).is_ok());
}

#[test]
fn empty_tensors_still_get_the_other_checks() {
    // The checks do not skip empty buffers: a wrong layout, stream, device,
    // data type, root, peer or reduction is an error at any length.
    wrong_layout(
        plan(Op::AllToAll, &info(), Layout::InPlace(f32s(0))),
        "all_to_all",
        (OUT_OF_PLACE, IN_PLACE),
        "all_to_all takes an input and an output, but was given one buffer in place",
    );
    wrong_device(
        Plan::new(Op::AllReduce(SUM), &info(), &Layout::InPlace(f32s(0)), 1),
        ("all_reduce", "stream"),
        0,
        1,
        "all_reduce: stream is on device 1, but the communicator is on device 0",
    );
    wrong_device(
        plan(Op::AllReduce(SUM), &info(), Layout::InPlace(f32s_on(0, 1))),
        ("all_reduce", "tensor"),
        0,
        1,
        "all_reduce: tensor is on device 1, but the communicator is on device 0",
    );
    dtype_mismatch(
        plan(Op::AllGather, &info(), pair(buf(F32, 0), buf(F16, 0))),
        "all_gather",
        F32,
        F16,
        "all_gather: the output is half but the input is float; both must have the same data type",
    );
    rank_out_of_range(
        plan(Op::Broadcast { root: 4 }, &info(), Layout::InPlace(f32s(0))),
        ("broadcast", "root"),
        4,
        4,
        "broadcast: root 4 is out of range: expected 0..4",
    );
    self_peer(
        recv(&info(), f32s(0), 0),
        "recv",
        0,
        "recv: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
    unsupported_reduction(
        plan(Op::AllReduce(SUM), &ampere(), Layout::InPlace(buf(E4M3, 0))),
        ("all_reduce", "sum"),
        E4M3,
        FP8_ON_8_0,
        &format!("all_reduce: reduction sum on f8e4m3 is not supported: {FP8_ON_8_0}"),
    );
    // An empty input wants an empty output, and vice versa.
    wrong_length(
        plan(Op::AllGather, &info(), pair(f32s(0), f32s(4))),
        ("all_gather", "output"),
        0,
        4,
        "world size x input elements",
        "all_gather: output has 4 elements, expected 0 (world size x input elements)",
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
// What a plan returns.
// ---------------------------------------------------------------------------

/// `(count, input_len)` of the plan of `op` on `layout`, which must pass.
#[track_caller]
fn counts(op: Op<'_>, info: &CommInfo, layout: Layout<'_>) -> (usize, usize) {
    let plan = plan(op, info, layout).unwrap_or_else(|error| panic!("{}: {error}", op.name()));
    (plan.count, plan.input_len)
}

#[test]
fn the_count_is_the_length_for_operations_of_one_size() {
    for op in [
        Op::AllReduce(SUM),
        Op::Broadcast { root: 1 },
        Op::Reduce { op: SUM, root: 1 },
    ] {
        assert_eq!(counts(op, &info(), Layout::InPlace(f32s(8))), (8, 8));
        assert_eq!(counts(op, &info(), pair(f32s(6), f32s(6))), (6, 6));
    }
    assert_eq!(
        counts(Op::Send { peer: 1 }, &info(), Layout::Input(f32s(5))),
        (5, 5)
    );
    let recv_from_1 = Op::Recv { peer: 1 };
    assert_eq!(
        counts(recv_from_1, &info(), Layout::Output(f32s(5))),
        (5, 5)
    );
}

#[test]
fn gathers_scatters_and_exchanges_count_one_block() {
    // all_gather counts the input, reduce_scatter the output, all_to_all
    // one rank's block of the input; the input's length stays whole.
    let scatter = Op::ReduceScatter(SUM);
    // (operation, world size, input and output lengths, counts)
    for (op, world_size, (input, output), expected) in [
        (Op::AllGather, WORLD, (10, 40), (10, 10)),
        (scatter, WORLD, (40, 10), (10, 40)),
        (Op::AllToAll, WORLD, (12, 12), (3, 12)),
        (Op::AllGather, 8, (10, 80), (10, 10)),
        (scatter, 8, (80, 10), (10, 80)),
        (Op::AllToAll, 8, (16, 16), (2, 16)),
        (Op::AllToAll, 3, (9, 9), (3, 9)),
        (Op::AllToAll, 1, (7, 7), (7, 7)),
        (Op::AllGather, 1, (7, 7), (7, 7)),
    ] {
        let comm = CommInfo {
            world_size,
            ..info()
        };
        assert_eq!(
            counts(op, &comm, pair(f32s(input), f32s(output))),
            expected,
            "{op:?} at world size {world_size} on {input} and {output} elements"
        );
    }
}

#[test]
fn every_operation_counts_the_elements_per_rank() {
    // `lens` gives `n` elements per rank: NCCL's count for every operation.
    for op in every_op(1) {
        for n in [0, 1, 3, 8, 1000] {
            let layout = valid_layout(&op, F32, n);
            let (input_len, _) = lens(rules(&op).sizes, n);
            let input_len = match layout {
                Layout::OutOfPlace { .. } => input_len,
                _ => n,
            };
            assert_eq!(counts(op, &info(), layout), (n, input_len), "{}", op.name());
        }
    }
}

#[test]
fn the_plan_keeps_the_operation_and_the_data_type() {
    for dtype in DataType::ALL {
        for op in every_op(1) {
            let plan = plan(op, &info(), valid_layout(&op, dtype, 8))
                .unwrap_or_else(|error| panic!("{} {dtype}: {error}", op.name()));
            assert_eq!(plan.dtype, dtype, "{}", op.name());
            assert_eq!(
                (plan.op.name(), plan.op.rank_argument()),
                (op.name(), op.rank_argument())
            );
            assert_eq!(
                plan.op.reduction().map(|reduction| reduction.name()),
                op.reduction().map(|reduction| reduction.name())
            );
        }
    }
}

#[test]
fn sizes_give_each_buffers_length_for_a_count() {
    assert_eq!(Sizes::SAME.lengths(64, 4), (64, 64));
    assert_eq!(Sizes::GATHERED.lengths(64, 4), (64, 256));
    assert_eq!(Sizes::SCATTERED.lengths(64, 4), (256, 64));
    assert_eq!(Sizes::EXCHANGED.lengths(64, 4), (256, 256));
    assert_eq!(Sizes::GATHERED.lengths(64, 1), (64, 64));
    assert_eq!(Sizes::EXCHANGED.lengths(0, 8), (0, 0));
    // A world of 0 counts as one rank; a product past usize saturates.
    assert_eq!(Sizes::GATHERED.lengths(5, 0), (5, 5));
    assert_eq!(
        Sizes::GATHERED.lengths(usize::MAX, 2),
        (usize::MAX, usize::MAX)
    );
}

#[test]
fn gather_and_scatter_size_their_spread_buffer_on_the_root_only() {
    for op in every_op(1) {
        let on_root_only = matches!(op, Op::Gather { .. } | Op::Scatter { .. });
        assert_eq!(
            rules(&op).spread_on_root_only,
            on_root_only,
            "{}",
            op.name()
        );
    }
    // Rank 0 of 4; the root is rank 1, then rank 0.
    let elsewhere = |root| (Op::Gather { root }, Op::Scatter { root });
    let (gather, scatter) = elsewhere(1);
    // Not the root: the spread buffer may be anything, even empty.
    assert_eq!(counts(gather, &info(), pair(f32s(8), f32s(0))), (8, 8));
    assert_eq!(counts(scatter, &info(), pair(f32s(3), f32s(8))), (8, 3));
    // The root: world size x the block, as all_gather and reduce_scatter.
    let (gather, scatter) = elsewhere(0);
    assert_eq!(counts(gather, &info(), pair(f32s(8), f32s(32))), (8, 8));
    assert_eq!(counts(scatter, &info(), pair(f32s(32), f32s(8))), (8, 32));
    let short = plan(gather, &info(), pair(f32s(8), f32s(31))).unwrap_err();
    assert_eq!(
        short.to_string(),
        "gather: output has 31 elements, expected 32 (world size x input elements)"
    );
    let short = plan(scatter, &info(), pair(f32s(30), f32s(8))).unwrap_err();
    assert_eq!(
        short.to_string(),
        "scatter: input has 30 elements, expected 32 (world size x output elements)"
    );
    // The root is checked like any root.
    let outside = plan(Op::Gather { root: 4 }, &info(), pair(f32s(8), f32s(32))).unwrap_err();
    assert_eq!(
        outside.to_string(),
        "gather: root 4 is out of range: expected 0..4"
    );
}
