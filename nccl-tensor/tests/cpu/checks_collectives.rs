//! CPU tests of the collectives' own rules: how input and output lengths
//! relate (`nccl_tensor::Sizes`, and the list form of all_gather), the
//! root of broadcast and reduce, and the order of those checks. Every error
//! with all its fields and its exact message (`checks_support` has the
//! common ground). No GPU and no NCCL needed.

use crate::checks_support::*;
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{Layout, Op};

// ---------------------------------------------------------------------------
// Lengths.
// ---------------------------------------------------------------------------

#[test]
fn all_gather_output_is_world_times_input() {
    for given in [39, 41, 10, 0] {
        wrong_length(
            plan(Op::AllGather, &info(), pair(f32s(10), f32s(given))),
            ("all_gather", "output"),
            40,
            given,
            "world size x input elements",
            &format!(
                "all_gather: output has {given} elements, expected 40 (world size x input elements)"
            ),
        );
    }
    assert!(plan(Op::AllGather, &info(), pair(f32s(10), f32s(40))).is_ok());
    let eight = CommInfo {
        world_size: 8,
        ..info()
    };
    wrong_length(
        plan(Op::AllGather, &eight, pair(f32s(10), f32s(40))),
        ("all_gather", "output"),
        80,
        40,
        "world size x input elements",
        "all_gather: output has 40 elements, expected 80 (world size x input elements)",
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
fn reduce_scatter_input_is_world_times_output() {
    for given in [39, 41, 10, 0] {
        wrong_length(
            plan(Op::ReduceScatter(SUM), &info(), pair(f32s(given), f32s(10))),
            ("reduce_scatter", "input"),
            40,
            given,
            "world size x output elements",
            &format!(
                "reduce_scatter: input has {given} elements, expected 40 (world size x output elements)"
            ),
        );
    }
    assert!(plan(Op::ReduceScatter(SUM), &info(), pair(f32s(40), f32s(10))).is_ok());
}

#[test]
fn all_to_all_input_must_be_divisible_by_the_world_size() {
    for given in [1, 2, 3, 5, 10, 41] {
        not_divisible(
            plan(Op::AllToAll, &info(), pair(f32s(given), f32s(given))),
            ("all_to_all", "input"),
            given,
            4,
            &format!(
                "all_to_all: input has {given} elements, which is not a multiple of the world size 4"
            ),
        );
    }
    let three = CommInfo {
        world_size: 3,
        ..info()
    };
    not_divisible(
        plan(Op::AllToAll, &three, pair(f32s(8), f32s(8))),
        ("all_to_all", "input"),
        8,
        3,
        "all_to_all: input has 8 elements, which is not a multiple of the world size 3",
    );
    assert!(plan(Op::AllToAll, &three, pair(f32s(9), f32s(9))).is_ok());
}

#[test]
fn all_to_all_needs_equal_lengths() {
    // The output is only compared with the input, so an output that is not
    // a multiple of the world size is reported as a wrong length.
    for given in [16, 8, 10, 0] {
        wrong_length(
            plan(Op::AllToAll, &info(), pair(f32s(12), f32s(given))),
            ("all_to_all", "output"),
            12,
            given,
            "the same number of elements as the input",
            &format!(
                "all_to_all: output has {given} elements, expected 12 (the same number of elements as the input)"
            ),
        );
    }
}

#[test]
fn out_of_place_all_reduce_broadcast_and_reduce_need_equal_lengths() {
    for op in [
        TwoBuffers::AllReduce,
        TwoBuffers::Broadcast,
        TwoBuffers::Reduce,
    ] {
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
// Roots.
// ---------------------------------------------------------------------------

#[test]
fn broadcast_and_reduce_refuse_a_root_out_of_range() {
    for root in [4, 5, 1 << 31, usize::MAX] {
        let text = |op: &str| format!("{op}: root {root} is out of range: expected 0..4");
        let ops = [
            (Op::Broadcast { root }, "broadcast"),
            (Op::Reduce { op: SUM, root }, "reduce"),
        ];
        for (op, name) in ops {
            for layout in [Layout::InPlace(f32s(8)), pair(f32s(8), f32s(8))] {
                rank_out_of_range(
                    plan(op, &info(), layout),
                    (name, "root"),
                    root,
                    4,
                    &text(name),
                );
            }
        }
    }
    rank_out_of_range(
        plan(Op::Broadcast { root: 5 }, &info(), Layout::InPlace(f32s(8))),
        ("broadcast", "root"),
        5,
        4,
        "broadcast: root 5 is out of range: expected 0..4",
    );
    rank_out_of_range(
        plan(
            Op::Reduce { op: SUM, root: 4 },
            &info(),
            Layout::InPlace(f32s(8)),
        ),
        ("reduce", "root"),
        4,
        4,
        "reduce: root 4 is out of range: expected 0..4",
    );
    for root in 0..4 {
        assert!(plan(Op::Broadcast { root }, &info(), Layout::InPlace(f32s(8))).is_ok());
        assert!(
            plan(
                Op::Reduce { op: SUM, root },
                &info(),
                Layout::InPlace(f32s(8))
            )
            .is_ok()
        );
    }
}

#[test]
fn the_last_rank_and_other_world_sizes_are_valid_roots() {
    let comm = info();
    assert!(plan(Op::Broadcast { root: 3 }, &comm, Layout::InPlace(f32s(8))).is_ok());
    assert!(
        plan(
            Op::Reduce { op: SUM, root: 3 },
            &comm,
            Layout::InPlace(f32s(8))
        )
        .is_ok()
    );
    let single = CommInfo {
        world_size: 1,
        ..info()
    };
    assert!(plan(Op::Broadcast { root: 0 }, &single, Layout::InPlace(f32s(8))).is_ok());
    assert!(plan(Op::AllGather, &single, pair(f32s(8), f32s(8))).is_ok());
    assert!(plan(Op::ReduceScatter(SUM), &single, pair(f32s(8), f32s(8))).is_ok());
    assert!(plan(Op::AllToAll, &single, pair(f32s(7), f32s(7))).is_ok());
    assert!(checks::all_gather_list(&single, &f32s(8), [f32s(8)].into_iter()).is_ok());
}

#[test]
fn rank_check_itself() {
    assert!(checks::rank("op", "root", 0, &info()).is_ok());
    assert!(checks::rank("op", "root", 3, &info()).is_ok());
    rank_out_of_range(
        checks::rank("op", "root", 4, &info()),
        ("op", "root"),
        4,
        4,
        "op: root 4 is out of range: expected 0..4",
    );
}

// ---------------------------------------------------------------------------
// The order of the checks, where several could fire.
// ---------------------------------------------------------------------------

#[test]
fn order_root_before_buffers() {
    // broadcast and reduce check the root before any buffer.
    rank_out_of_range(
        plan(
            Op::Broadcast { root: 4 },
            &info(),
            pair(f32s_on(8, 1), f32s_on(9, 2)),
        ),
        ("broadcast", "root"),
        4,
        4,
        "broadcast: root 4 is out of range: expected 0..4",
    );
    rank_out_of_range(
        plan(
            Op::Reduce { op: SUM, root: 5 },
            &info(),
            pair(buf(F16, 8), f32s(9)),
        ),
        ("reduce", "root"),
        5,
        4,
        "reduce: root 5 is out of range: expected 0..4",
    );
    let (shape, strides) = ([2, 4], [1, 2]);
    rank_out_of_range(
        plan(
            Op::Broadcast { root: 9 },
            &info(),
            Layout::InPlace(strided(&shape, &strides)),
        ),
        ("broadcast", "root"),
        9,
        4,
        "broadcast: root 9 is out of range: expected 0..4",
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
fn order_all_to_all_divisibility_before_equal_lengths() {
    // An input of 10 (not divisible by 4) and an output of 12: the input's
    // divisibility is reported.
    not_divisible(
        plan(Op::AllToAll, &info(), pair(f32s(10), f32s(12))),
        ("all_to_all", "input"),
        10,
        4,
        "all_to_all: input has 10 elements, which is not a multiple of the world size 4",
    );
}

#[test]
fn order_lengths_before_the_reduction() {
    // fp8 on compute capability 8.0 with wrong lengths: the length is
    // reported; the reduction is checked last.
    let ampere = ampere();
    wrong_length(
        plan(
            Op::ReduceScatter(SUM),
            &ampere,
            pair(buf(E4M3, 39), buf(E4M3, 10)),
        ),
        ("reduce_scatter", "input"),
        40,
        39,
        "world size x output elements",
        "reduce_scatter: input has 39 elements, expected 40 (world size x output elements)",
    );
    wrong_length(
        plan(
            Op::AllReduce(SUM),
            &ampere,
            pair(buf(E4M3, 8), buf(E4M3, 9)),
        ),
        ("all_reduce", "output"),
        8,
        9,
        "the same number of elements as the input",
        "all_reduce: output has 9 elements, expected 8 (the same number of elements as the input)",
    );
    rank_out_of_range(
        plan(
            Op::Reduce { op: SUM, root: 4 },
            &ampere,
            Layout::InPlace(buf(E4M3, 8)),
        ),
        ("reduce", "root"),
        4,
        4,
        "reduce: root 4 is out of range: expected 0..4",
    );
}
