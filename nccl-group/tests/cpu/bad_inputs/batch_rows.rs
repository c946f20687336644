//! The bad-input rows of operations made of several NCCL calls in one
//! group: a batch (`plan_batch`: sends and receives, coalesced
//! collectives) and all_to_all of any sizes (`checks::all_to_all_splits`,
//! `checks::all_to_all_list`).

use nccl_core::{DataType, Version};
use nccl_tensor::checks::{self, CommInfo};
use nccl_tensor::{BatchEntry, BufferDesc, Layout, MAX_BATCH_OPERATIONS, Op, plan_batch};

use super::{F32, Row, SUM, calls, err};

/// Rank 1 of 4 on device 0, NCCL 2.28.3, compute capability 9.0, no group.
fn info() -> CommInfo {
    CommInfo {
        rank: 1,
        world_size: 4,
        device: 0,
        nccl_version: Version::new(2, 28, 3),
        compute_capability: (9, 0),
        in_group: false,
    }
}

fn f32s(len: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(F32, len, 0)
}

fn send(len: usize, peer: usize) -> BatchEntry<'static, 'static> {
    BatchEntry {
        op: Op::Send { peer },
        layout: Layout::Input(f32s(len)),
        cells: [None, None],
    }
}

fn recv(len: usize, peer: usize) -> BatchEntry<'static, 'static> {
    BatchEntry {
        op: Op::Recv { peer },
        layout: Layout::Output(f32s(len)),
        cells: [None, None],
    }
}

/// A receive into the cell of identity `cell`.
fn recv_cell(len: usize, peer: usize, cell: usize) -> BatchEntry<'static, 'static> {
    BatchEntry {
        cells: [Some(cell), None],
        ..recv(len, peer)
    }
}

fn batch(entries: &[BatchEntry<'static, 'static>]) -> nccl_tensor::Result<()> {
    plan_batch(&info(), 0, entries).map(drop)
}

fn splits(
    input: usize,
    output: usize,
    input_splits: &[usize],
    output_splits: &[usize],
) -> nccl_tensor::Result<()> {
    checks::all_to_all_splits(
        &info(),
        &f32s(input),
        &f32s(output),
        input_splits,
        output_splits,
    )
}

/// The rows of this area, in the order of the Markdown table.
pub fn rows() -> Vec<Row> {
    [
        calls(
            "batch",
            "plan_batch",
            &[
                (
                    "send to rank 4 of world size 4, second in the batch",
                    &["operation 1 of the batch", "dst 4", "expected 0..4"],
                    || err(batch(&[recv(8, 0), send(8, 4)])),
                ),
                (
                    "all_reduce given an input only",
                    &[
                        "operation 0 of the batch",
                        "takes one buffer in place",
                        "an input only",
                    ],
                    || {
                        err(batch(&[BatchEntry {
                            op: Op::AllReduce(SUM),
                            layout: Layout::Input(f32s(4)),
                            cells: [None, None],
                        }]))
                    },
                ),
                (
                    "a send to this rank (1) with no receive from it",
                    &["1 send(s) to this rank (1) itself", "0 receive(s) from it"],
                    || err(batch(&[send(8, 1), recv(8, 0)])),
                ),
                (
                    "8 f32 sent to this rank, 4 f32 received from it",
                    &["sends 8 elements of float", "takes 4 elements of float"],
                    || err(batch(&[send(8, 1), recv(4, 1)])),
                ),
                (
                    "one TensorCell received into twice",
                    &["operations 0 and 2", "same TensorCell"],
                    || err(batch(&[recv_cell(8, 0, 7), send(8, 2), recv_cell(8, 2, 7)])),
                ),
                (
                    "one more operation than MAX_BATCH_OPERATIONS",
                    &["at most 512 operations", "but 513 were given"],
                    || {
                        let entries = vec![send(1, 0); MAX_BATCH_OPERATIONS + 1];
                        err(batch(&entries))
                    },
                ),
            ],
        ),
        calls(
            "all_to_all splits",
            "checks::all_to_all_splits",
            &[
                (
                    "3 input split sizes at world size 4",
                    &["input_split_sizes has 3 entries", "one per rank (4)"],
                    || err(splits(6, 6, &[2, 2, 2], &[1, 2, 2, 1])),
                ),
                (
                    "output split sizes adding up to 7, output of 6",
                    &["output_split_sizes add up to 7", "the output has 6"],
                    || err(splits(6, 6, &[1, 2, 2, 1], &[1, 2, 2, 2])),
                ),
                (
                    "rank 1 sends itself 2 elements but receives 3",
                    &["output_split_sizes[this rank] has 3 elements", "expected 2"],
                    || err(splits(6, 7, &[1, 2, 2, 1], &[1, 3, 2, 1])),
                ),
                (
                    "f32 input, i32 output",
                    &["output is int32", "input is float"],
                    || {
                        err(checks::all_to_all_splits(
                            &info(),
                            &f32s(4),
                            &BufferDesc::contiguous(DataType::Int32, 4, 0),
                            &[1; 4],
                            &[1; 4],
                        ))
                    },
                ),
            ],
        ),
        calls(
            "all_to_all splits",
            "checks::all_to_all_list",
            &[(
                "3 outputs at world size 4",
                &["output list has 3 elements", "expected 4"],
                || {
                    err(checks::all_to_all_list(
                        &info(),
                        &[f32s(1); 4],
                        &[f32s(1); 3],
                    ))
                },
            )],
        ),
    ]
    .concat()
}
