//! CPU tests of the checks of several operations in one NCCL group: a
//! batch (`plan_batch`: each operation's own checks, a cell used once,
//! sends to this rank itself paired with receives from it), all_to_all
//! with split sizes (`checks::all_to_all_splits`, and the sends and
//! receives it becomes, `exchange_calls`) and the list form
//! (`checks::all_to_all_list`). Every error with its fields and exact
//! message. No GPU and no NCCL needed.

use crate::checks_support::*;
use nccl_core::{Call, DataType, ErrorKind, Op, ReduceOp, Version};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{
    BatchEntry, BufferDesc, Error, Layout, MAX_BATCH_OPERATIONS, exchange_calls, plan_batch,
};

fn sending(buffer: BufferDesc<'_>, peer: usize) -> BatchEntry<'static, '_> {
    BatchEntry {
        op: Op::Send { peer },
        layout: Layout::Input(buffer),
        cells: [None, None],
    }
}

fn receiving(buffer: BufferDesc<'_>, peer: usize) -> BatchEntry<'static, '_> {
    BatchEntry {
        op: Op::Recv { peer },
        layout: Layout::Output(buffer),
        cells: [None, None],
    }
}

/// A cell (identity `id`) received into from `peer`.
fn receiving_cell(buffer: BufferDesc<'_>, peer: usize, id: usize) -> BatchEntry<'static, '_> {
    BatchEntry {
        cells: [Some(id), None],
        ..receiving(buffer, peer)
    }
}

/// The error of `result`, whose message must start with `start`.
#[track_caller]
fn expect_err_starting<T: std::fmt::Debug>(result: nccl_tensor::Result<T>, start: &str) -> Error {
    let error = result.expect_err(start);
    let text = error.to_string();
    assert!(
        text.starts_with(start),
        "{text:?} should start with {start:?}"
    );
    error
}

fn batch<'r>(
    info: &CommInfo,
    entries: &[BatchEntry<'r, '_>],
) -> nccl_tensor::Result<Vec<nccl_tensor::Plan<'r>>> {
    plan_batch(info, info.device, entries)
}

#[test]
fn a_ring_and_mixed_collectives_plan_in_order() {
    let rank_1 = CommInfo { rank: 1, ..info() };
    let plans = batch(
        &rank_1,
        &[sending(f32s(8), 2), receiving(buf(DataType::Int64, 3), 0)],
    )
    .expect("a send to the next rank and a receive from the previous");
    let counts: Vec<_> = plans
        .iter()
        .map(|p| (p.op.name(), p.count, p.dtype))
        .collect();
    assert_eq!(
        counts,
        [("send", 8, DataType::Float32), ("recv", 3, DataType::Int64)]
    );

    // Collectives of different types and layouts, with a send, in one batch.
    let entries = [
        BatchEntry {
            op: Op::AllReduce(ReduceOp::Sum.into()),
            layout: Layout::InPlace(f32s(5)),
            cells: [None, None],
        },
        BatchEntry {
            op: Op::AllGather,
            layout: pair(buf(DataType::Bfloat16, 2), buf(DataType::Bfloat16, 8)),
            cells: [None, None],
        },
        sending(f32s(1), 3),
    ];
    let plans = batch(&info(), &entries).expect("mixed collectives");
    let counts: Vec<_> = plans.iter().map(|p| (p.count, p.dtype)).collect();
    assert_eq!(
        counts,
        [
            (5, DataType::Float32),
            (2, DataType::Bfloat16),
            (1, DataType::Float32)
        ]
    );
    assert!(batch(&info(), &[]).expect("an empty batch").is_empty());
}

#[test]
fn an_operation_that_fails_alone_fails_the_batch_with_its_position() {
    let error = expect_err(
        batch(&info(), &[sending(f32s(8), 1), sending(f32s(8), 4)]),
        "operation 1 of the batch: send: dst 4 is out of range: expected 0..4",
    );
    assert_eq!(error.kind(), ErrorKind::RankOutOfRange);
    match error {
        Error::InBatch { index: 1, error } => {
            assert!(
                matches!(*error, Error::RankOutOfRange { given: 4, .. }),
                "{error}"
            );
        }
        other => panic!("expected InBatch at 1, got {other:?}"),
    }
    expect_err(
        batch(&info(), &[receiving(f32s_on(8, 1), 5)]),
        "operation 0 of the batch: recv: src 5 is out of range: expected 0..4",
    );
    expect_err(
        batch(&info(), &[sending(f32s(2), 1), receiving(f32s_on(8, 1), 1)]),
        "operation 1 of the batch: recv: tensor is on device 1, but the communicator is on device 0",
    );
    let old = CommInfo {
        nccl_version: Version::new(2, 9, 0),
        ..info()
    };
    expect_err(
        batch(&old, &[sending(buf(DataType::Bfloat16, 2), 1)]),
        "operation 0 of the batch: send: data type bfloat16 needs NCCL 2.10.0 or newer, but the loaded libnccl is 2.9.0",
    );
    let error = expect_err(
        batch(
            &info(),
            &[BatchEntry {
                op: Op::AllReduce(ReduceOp::Sum.into()),
                layout: Layout::Input(f32s(4)),
                cells: [None, None],
            }],
        ),
        "operation 0 of the batch: all_reduce takes one buffer in place, or an input and an output, but was given an input only",
    );
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn sends_to_this_rank_itself_pair_with_receives_from_it() {
    // No group is open, but the batch is one: a paired self exchange is fine.
    let one = CommInfo {
        world_size: 1,
        ..info()
    };
    assert!(!one.in_group);
    let plans = batch(&one, &[sending(f32s(8), 0), receiving(f32s(8), 0)]).expect("paired");
    assert_eq!(plans.len(), 2);

    let error = expect_err(
        batch(&info(), &[sending(f32s(8), 0), sending(f32s(8), 1)]),
        "the batch has 1 send(s) to this rank (0) itself and 0 receive(s) from it; NCCL pairs them in order, \
         so their numbers must be equal, or a send waits forever",
    );
    assert!(matches!(
        error,
        Error::UnpairedSelfExchange {
            rank: 0,
            sends: 1,
            recvs: 0
        }
    ));
    let rank_3 = CommInfo { rank: 3, ..info() };
    expect_err_starting(
        batch(
            &rank_3,
            &[
                receiving(f32s(8), 3),
                receiving(f32s(8), 3),
                sending(f32s(8), 3),
            ],
        ),
        "the batch has 1 send(s) to this rank (3) itself and 2 receive(s) from it;",
    );

    let error = expect_err(
        batch(
            &info(),
            &[
                sending(f32s(8), 0),
                sending(f32s(4), 0),
                receiving(f32s(8), 0),
                receiving(f32s(5), 0),
            ],
        ),
        "operation 1 of the batch sends 4 elements of float to this rank itself, but the receive it pairs \
         with (operation 3) takes 5 elements of float; they must match",
    );
    assert!(matches!(
        error,
        Error::SelfExchangeMismatch {
            send: 1,
            recv: 3,
            sent: 4,
            received: 5,
            ..
        }
    ));
    expect_err_starting(
        batch(
            &info(),
            &[receiving(buf(DataType::Int32, 8), 0), sending(f32s(8), 0)],
        ),
        "operation 1 of the batch sends 8 elements of float to this rank itself, but the receive it pairs \
         with (operation 0) takes 8 elements of int32",
    );
}

#[test]
fn a_cell_is_used_once_per_batch() {
    let entries = [
        receiving_cell(f32s(8), 1, 7),
        sending(f32s(8), 2),
        BatchEntry {
            cells: [Some(7), None],
            ..sending(f32s(8), 3)
        },
    ];
    let error = expect_err_starting(
        batch(&info(), &entries),
        "operations 0 and 2 of the batch use the same TensorCell; a batch locks each cell once, so pass it once",
    );
    assert!(matches!(
        error,
        Error::CellTwiceInBatch {
            first: 0,
            second: 2
        }
    ));
    // Received into twice.
    expect_err_starting(
        batch(
            &info(),
            &[receiving_cell(f32s(8), 1, 9), receiving_cell(f32s(8), 2, 9)],
        ),
        "operations 0 and 1 of the batch use the same TensorCell",
    );
    // Both buffers of one operation: the error the operation gets alone.
    let error = expect_err_starting(
        batch(
            &info(),
            &[
                sending(f32s(8), 1),
                BatchEntry {
                    op: Op::AllReduce(ReduceOp::Sum.into()),
                    layout: pair(f32s(4), f32s(4)),
                    cells: [Some(5), Some(5)],
                },
            ],
        ),
        "operation 1 of the batch: all_reduce: the same TensorCell is passed twice",
    );
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    // Distinct cells are fine.
    assert!(
        batch(
            &info(),
            &[
                receiving_cell(f32s(8), 1, 9),
                receiving_cell(f32s(8), 2, 10)
            ]
        )
        .is_ok()
    );
}

#[test]
fn a_batch_has_a_bounded_length() {
    let most: Vec<_> = (0..MAX_BATCH_OPERATIONS)
        .map(|i| sending(f32s(1), 1 + i % 3))
        .collect();
    assert!(batch(&info(), &most).is_ok());
    let over: Vec<_> = (0..=MAX_BATCH_OPERATIONS)
        .map(|_| sending(f32s(1), 1))
        .collect();
    let error = expect_err(
        batch(&info(), &over),
        &format!(
            "a batch holds at most {MAX_BATCH_OPERATIONS} operations, but {} were given; issue it as several batches",
            MAX_BATCH_OPERATIONS + 1
        ),
    );
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
}

fn splits(
    info: &CommInfo,
    input: BufferDesc<'_>,
    output: BufferDesc<'_>,
    input_splits: &[usize],
    output_splits: &[usize],
) -> nccl_tensor::Result<()> {
    checks::all_to_all_splits(info, &input, &output, input_splits, output_splits)
}

#[test]
fn split_sizes_match_the_world_and_the_buffers() {
    let rank_1 = CommInfo { rank: 1, ..info() };
    // Uneven, with empty blocks.
    assert!(splits(&rank_1, f32s(10), f32s(7), &[1, 2, 3, 4], &[0, 2, 5, 0]).is_ok());
    assert!(splits(&rank_1, f32s(0), f32s(0), &[0; 4], &[0; 4]).is_ok());

    let error = expect_err(
        splits(&rank_1, f32s(10), f32s(7), &[1, 2, 7], &[0, 2, 5, 0]),
        "all_to_all_single: input_split_sizes has 3 entries, expected one per rank (4)",
    );
    assert!(matches!(
        error,
        Error::SplitCount {
            given: 3,
            world_size: 4,
            ..
        }
    ));
    expect_err(
        splits(&rank_1, f32s(10), f32s(7), &[1, 2, 3, 4], &[0, 2, 5, 0, 0]),
        "all_to_all_single: output_split_sizes has 5 entries, expected one per rank (4)",
    );
    let error = expect_err(
        splits(&rank_1, f32s(10), f32s(7), &[1, 2, 3, 3], &[0, 2, 5, 0]),
        "all_to_all_single: input_split_sizes add up to 9 elements, but the input has 10; they must be equal",
    );
    assert!(matches!(
        error,
        Error::SplitSum {
            sum: 9,
            len: 10,
            ..
        }
    ));
    expect_err_starting(
        splits(&rank_1, f32s(10), f32s(7), &[1, 2, 3, 4], &[0, 2, 5, 1]),
        "all_to_all_single: output_split_sizes add up to 8 elements, but the output has 7",
    );
    // Sizes whose sum overflows usize are summed exactly.
    expect_err_starting(
        splits(
            &info(),
            f32s(10),
            f32s(10),
            &[usize::MAX, usize::MAX, 0, 0],
            &[10, 0, 0, 0],
        ),
        "all_to_all_single: input_split_sizes add up to 36893488147419103230 elements, but the input has 10",
    );
    // What this rank sends itself is what it receives from itself.
    let error = expect_err(
        splits(&rank_1, f32s(10), f32s(8), &[1, 2, 3, 4], &[0, 3, 5, 0]),
        "all_to_all_single: output_split_sizes[this rank] has 3 elements, expected 2 \
         (input_split_sizes[this rank]: what this rank sends itself)",
    );
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    expect_err(
        splits(
            &rank_1,
            f32s(10),
            buf(DataType::Int32, 7),
            &[1, 2, 3, 4],
            &[0, 2, 5, 0],
        ),
        "all_to_all_single: the output is int32 but the input is float; both must have the same data type",
    );
    expect_err(
        splits(
            &rank_1,
            f32s_on(10, 1),
            f32s(7),
            &[1, 2, 3, 4],
            &[0, 2, 5, 0],
        ),
        "all_to_all_single: input is on device 1, but the communicator is on device 0",
    );
}

#[test]
fn split_sizes_become_one_send_and_one_receive_per_peer_at_their_offsets() {
    let (send, recv) = (
        0x1000 as *const std::ffi::c_void,
        0x9000 as *mut std::ffi::c_void,
    );
    let calls: Vec<Call<'_>> =
        exchange_calls(send, recv, DataType::Float32, &[1, 2, 0, 4], &[3, 0, 2, 1]).collect();
    let seen: Vec<_> = calls
        .iter()
        .map(|call| match call.op {
            Op::Send { peer } => ("send", peer, call.send as usize, call.count),
            Op::Recv { peer } => ("recv", peer, call.recv as usize, call.count),
            other => panic!("not a send or receive: {other:?}"),
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("send", 0, 0x1000, 1),
            ("recv", 0, 0x9000, 3),
            ("send", 1, 0x1004, 2),
            ("recv", 1, 0x900c, 0),
            ("send", 2, 0x100c, 0),
            ("recv", 2, 0x900c, 2),
            ("send", 3, 0x100c, 4),
            ("recv", 3, 0x9014, 1),
        ]
    );
    assert!(calls.iter().all(|call| call.dtype == DataType::Float32));
    // Elements of 8 bytes move the offsets 8 bytes per element.
    let wide: Vec<_> = exchange_calls(send, recv, DataType::Int64, &[2, 1], &[1, 2])
        .map(|call| (call.send as usize, call.recv as usize))
        .collect();
    assert_eq!(wide, [(0x1000, 0), (0, 0x9000), (0x1010, 0), (0, 0x9008)]);
}

#[test]
fn list_all_to_all_has_one_buffer_per_rank_each_way() {
    let four = [f32s(2), f32s(3), f32s(0), f32s(1)];
    assert!(checks::all_to_all_list(&info(), &four, &four).is_ok());
    let error = expect_err(
        checks::all_to_all_list(&info(), &four[..3], &four),
        "all_to_all: input list has 3 elements, expected 4 (one input per rank)",
    );
    assert!(matches!(
        error,
        Error::WrongLength {
            expected: 4,
            given: 3,
            ..
        }
    ));
    expect_err(
        checks::all_to_all_list(&info(), &four, &[f32s(1); 5]),
        "all_to_all: output list has 5 elements, expected 4 (one output per rank)",
    );
    let (shape, strides) = transposed(8);
    expect_err(
        checks::all_to_all_list(
            &info(),
            &four,
            &[f32s(1), strided(&shape, &strides), f32s(1), f32s(1)],
        ),
        "all_to_all: an output is not contiguous (shape [2, 4], strides [1, 2]); make a contiguous copy first",
    );
    expect_err(
        checks::all_to_all_list(&info(), &[f32s(1), f32s(1), f32s_on(1, 2), f32s(1)], &four),
        "all_to_all: an input is on device 2, but the communicator is on device 0",
    );
}
