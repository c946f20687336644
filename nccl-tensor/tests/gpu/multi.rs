//! nccl-tensor's `Communicator` across every visible GPU (at least two):
//! one thread per GPU, rank = GPU index, one shared `UniqueId`, each rank's
//! communicator made with `nccl_tensor::Communicator::new` on its thread.
//! Results are checked against the host reduction over all ranks' inputs.
//! On a machine with one GPU every test prints `SKIP: ...`.

use nccl_core::{Group, ReduceOp};
use nccl_tensor::AllToAllMethod;
use nccl_test_support as support;
use nccl_test_support::tensor::matrix::ok;
use nccl_test_support::tensor::{
    assert_same, download, download_cell, per_rank, poison_values, poisoned, poisoned_cell, upload,
    upload_cell, values,
};

/// Rank `rank`'s input of `len` elements.
fn input(rank: usize, len: usize) -> Vec<f32> {
    values::<f32>(rank as u64 + 1, len)
}

/// Element-wise sum over every rank's input.
fn sum_over_ranks(world: usize, len: usize) -> Vec<f32> {
    let mut total = vec![0.0f32; len];
    for rank in 0..world {
        for (t, v) in total.iter_mut().zip(input(rank, len)) {
            *t += v;
        }
    }
    total
}

/// [`assert_same`] for rank `rank`'s result of `what`.
fn assert_rank_same(rank: usize, got: &[f32], expected: &[f32], what: &str) {
    assert_same(got, expected, &format!("rank {rank}: {what}"));
}

const LEN: usize = 4099;
/// Elements per rank block of reduce_scatter and all_to_all.
const BLOCK: usize = 1027;

#[test]
fn multi_gpu_all_reduce_sum() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let world = devices.len();
    let results = per_rank(devices, |comm, stream| {
        let rank = comm.rank();
        let mut tensor = upload(&stream, &input(rank, LEN));
        ok(
            comm.all_reduce(&mut tensor, ReduceOp::Sum, &stream),
            "all_reduce in place",
        );
        let source = upload_cell(&stream, &input(rank, LEN));
        let target = poisoned_cell::<f32>(&stream, LEN);
        ok(
            comm.all_reduce_into(&source, &target, ReduceOp::Sum, &stream),
            "all_reduce_into (cells)",
        );
        let max = upload(&stream, &input(rank, LEN));
        let mut max_out = poisoned::<f32>(&stream, LEN);
        ok(
            comm.all_reduce_into(&max, &mut max_out, ReduceOp::Max, &stream),
            "all_reduce_into max",
        );
        (
            download(&stream, &tensor),
            download_cell::<f32>(&stream, &target),
            download(&stream, &max_out),
        )
    });
    let expected = sum_over_ranks(world, LEN);
    let expected_max: Vec<f32> = (0..LEN)
        .map(|i| {
            (0..world)
                .map(|r| input(r, LEN)[i])
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .collect();
    for (rank, (in_place, cells, max)) in results.iter().enumerate() {
        assert_rank_same(rank, in_place, &expected, "all_reduce sum in place");
        assert_rank_same(rank, cells, &expected, "all_reduce_into sum (cells)");
        assert_rank_same(rank, max, &expected_max, "all_reduce_into max");
    }
}

#[test]
fn multi_gpu_broadcast_from_root_1() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let results = per_rank(devices, |comm, stream| {
        let rank = comm.rank();
        let mut tensor = upload(&stream, &input(rank, LEN));
        ok(
            comm.broadcast(&mut tensor, 1, &stream),
            "broadcast in place",
        );
        let source = upload_cell(&stream, &input(rank, LEN));
        let target = poisoned_cell::<f32>(&stream, LEN);
        ok(
            comm.broadcast_into(&source, &target, 1, &stream),
            "broadcast_into (cells)",
        );
        (
            download(&stream, &tensor),
            download_cell::<f32>(&stream, &target),
        )
    });
    let expected = input(1, LEN);
    for (rank, (in_place, cells)) in results.iter().enumerate() {
        assert_rank_same(rank, in_place, &expected, "broadcast from 1");
        assert_rank_same(rank, cells, &expected, "broadcast_into from 1");
    }
}

#[test]
fn multi_gpu_reduce_to_root_1() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let world = devices.len();
    let results = per_rank(devices, |comm, stream| {
        let rank = comm.rank();
        let source = upload(&stream, &input(rank, LEN));
        let mut target = poisoned::<f32>(&stream, LEN);
        ok(
            comm.reduce_into(&source, &mut target, ReduceOp::Sum, 1, &stream),
            "reduce_into root 1",
        );
        let mut tensor = upload(&stream, &input(rank, LEN));
        ok(
            comm.reduce(&mut tensor, ReduceOp::Sum, 1, &stream),
            "reduce in place root 1",
        );
        (download(&stream, &target), download(&stream, &tensor))
    });
    let expected = sum_over_ranks(world, LEN);
    for (rank, (out_of_place, in_place)) in results.iter().enumerate() {
        if rank == 1 {
            assert_same(out_of_place, &expected, "root: reduce_into");
            assert_same(in_place, &expected, "root: reduce in place");
        } else {
            // Other ranks' outputs are not written.
            assert_rank_same(
                rank,
                out_of_place,
                &poison_values::<f32>(LEN),
                "reduce_into output",
            );
            assert_rank_same(
                rank,
                in_place,
                &input(rank, LEN),
                "reduce in place leaves the tensor",
            );
        }
    }
}

#[test]
fn multi_gpu_all_gather_into_tensor_and_list() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let world = devices.len();
    let results = per_rank(devices, move |comm, stream| {
        let rank = comm.rank();
        let source = upload(&stream, &input(rank, LEN));
        let mut gathered = poisoned::<f32>(&stream, world * LEN);
        ok(
            comm.all_gather_into_tensor(&mut gathered, &source, &stream),
            "all_gather_into_tensor",
        );
        let source_cell = upload_cell(&stream, &input(rank, LEN));
        let list: Vec<_> = (0..world)
            .map(|_| poisoned_cell::<f32>(&stream, LEN))
            .collect();
        ok(
            comm.all_gather(&list[..], &source_cell, &stream),
            "all_gather (cells)",
        );
        let mut typed_list: Vec<_> = (0..world).map(|_| poisoned::<f32>(&stream, LEN)).collect();
        ok(
            comm.all_gather(&mut typed_list[..], &source, &stream),
            "all_gather (tensors)",
        );
        (
            download(&stream, &gathered),
            list.iter()
                .map(|c| download_cell::<f32>(&stream, c))
                .collect::<Vec<_>>(),
            typed_list
                .iter()
                .map(|t| download(&stream, t))
                .collect::<Vec<_>>(),
        )
    });
    let expected: Vec<f32> = (0..world).flat_map(|r| input(r, LEN)).collect();
    for (rank, (gathered, cells, tensors)) in results.iter().enumerate() {
        assert_rank_same(rank, gathered, &expected, "all_gather_into_tensor");
        for from in 0..world {
            let block = input(from, LEN);
            assert_rank_same(rank, &cells[from], &block, &format!("cell list [{from}]"));
            assert_rank_same(
                rank,
                &tensors[from],
                &block,
                &format!("tensor list [{from}]"),
            );
        }
    }
}

#[test]
fn multi_gpu_reduce_scatter_tensor() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let world = devices.len();
    let results = per_rank(devices, move |comm, stream| {
        let rank = comm.rank();
        let source = upload(&stream, &input(rank, world * BLOCK));
        let mut target = poisoned::<f32>(&stream, BLOCK);
        ok(
            comm.reduce_scatter_tensor(&mut target, &source, ReduceOp::Sum, &stream),
            "reduce_scatter_tensor",
        );
        let source_cell = upload_cell(&stream, &input(rank, world * BLOCK));
        let target_cell = poisoned_cell::<f32>(&stream, BLOCK);
        ok(
            comm.reduce_scatter_tensor(&target_cell, &source_cell, ReduceOp::Sum, &stream),
            "reduce_scatter_tensor (cells)",
        );
        (
            download(&stream, &target),
            download_cell::<f32>(&stream, &target_cell),
        )
    });
    let total = sum_over_ranks(world, world * BLOCK);
    for (rank, (typed, cells)) in results.iter().enumerate() {
        let expected = &total[rank * BLOCK..(rank + 1) * BLOCK];
        assert_rank_same(rank, typed, expected, "reduce_scatter_tensor");
        assert_rank_same(rank, cells, expected, "reduce_scatter_tensor (cells)");
    }
}

#[test]
fn multi_gpu_all_to_all_single_both_methods() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let world = devices.len();
    let results = per_rank(devices, move |mut comm, stream| {
        let rank = comm.rank();
        let mut outputs = Vec::new();
        for method in [AllToAllMethod::Auto, AllToAllMethod::SendRecv] {
            comm.set_all_to_all_method(method);
            let source = upload(&stream, &input(rank, world * BLOCK));
            let mut target = poisoned::<f32>(&stream, world * BLOCK);
            ok(
                comm.all_to_all_single(&mut target, &source, &stream),
                &format!("all_to_all_single ({method:?})"),
            );
            let source_cell = upload_cell(&stream, &input(rank, world * BLOCK));
            let target_cell = poisoned_cell::<f32>(&stream, world * BLOCK);
            ok(
                comm.all_to_all_single(&target_cell, &source_cell, &stream),
                &format!("all_to_all_single cells ({method:?})"),
            );
            outputs.push((
                method,
                download(&stream, &target),
                download_cell::<f32>(&stream, &target_cell),
            ));
        }
        outputs
    });
    for (rank, outputs) in results.iter().enumerate() {
        // Block `from` of rank `rank`'s output is block `rank` of rank `from`'s input.
        let expected: Vec<f32> = (0..world)
            .flat_map(|from| input(from, world * BLOCK)[rank * BLOCK..(rank + 1) * BLOCK].to_vec())
            .collect();
        for (method, typed, cells) in outputs {
            assert_rank_same(
                rank,
                typed,
                &expected,
                &format!("all_to_all_single ({method:?})"),
            );
            assert_rank_same(
                rank,
                cells,
                &expected,
                &format!("all_to_all_single cells ({method:?})"),
            );
        }
    }
}

#[test]
fn multi_gpu_send_recv_ring() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let world = devices.len();
    let results = per_rank(devices, move |comm, stream| {
        let rank = comm.rank();
        let next = (rank + 1) % world;
        let previous = (rank + world - 1) % world;
        let source = upload(&stream, &input(rank, LEN));
        let mut target = poisoned::<f32>(&stream, LEN);
        let group = Group::start().expect("group");
        let _ = comm
            .send(&source, next, &stream)
            .expect("send to the next rank");
        let _ = comm
            .recv(&mut target, previous, &stream)
            .expect("recv from the previous rank");
        let _ = group.end().expect("group end");
        // The same ring with cells, the other way round.
        let source_cell = upload_cell(&stream, &input(rank, LEN));
        let target_cell = poisoned_cell::<f32>(&stream, LEN);
        let group = Group::start().expect("group");
        let _ = comm
            .send(&source_cell, previous, &stream)
            .expect("send (cell)");
        let _ = comm.recv(&target_cell, next, &stream).expect("recv (cell)");
        let _ = group.end().expect("group end");
        ok(comm.barrier(&stream), "barrier");
        stream.synchronize().expect("synchronize");
        (
            download(&stream, &target),
            download_cell::<f32>(&stream, &target_cell),
        )
    });
    for (rank, (forward, backward)) in results.iter().enumerate() {
        let previous = (rank + world - 1) % world;
        let next = (rank + 1) % world;
        assert_rank_same(
            rank,
            forward,
            &input(previous, LEN),
            &format!("from rank {previous}"),
        );
        assert_rank_same(
            rank,
            backward,
            &input(next, LEN),
            &format!("from rank {next}"),
        );
    }
}

/// The same cell twice in the output list would have ranks overwrite each
/// other: every rank refuses it before any collective is issued.
#[test]
fn multi_gpu_all_gather_same_cell_twice_is_refused() {
    let Some(devices) = support::require_every_gpu() else {
        return;
    };
    let results = per_rank(devices, |comm, stream| {
        let world = comm.world_size();
        let rank = comm.rank();
        let source = upload(&stream, &input(rank, LEN));
        let shared = poisoned_cell::<f32>(&stream, LEN);
        let mut list = vec![shared.clone(), shared];
        list.extend((2..world).map(|_| poisoned_cell::<f32>(&stream, LEN)));
        assert_eq!(list.len(), world);
        let refused = comm.all_gather(&list[..], &source, &stream);
        // Everyone still agrees afterwards.
        ok(comm.barrier(&stream), "barrier after the refusal");
        stream.synchronize().expect("synchronize");
        (
            matches!(
                refused,
                Err(nccl_tensor::Error::AliasedCells { op: "all_gather" })
            ),
            format!("{refused:?}"),
            download_cell::<f32>(&stream, &list[0]),
        )
    });
    for (rank, (refused, text, first)) in results.iter().enumerate() {
        assert!(refused, "rank {rank}: {text}");
        assert_rank_same(rank, first, &poison_values::<f32>(LEN), "untouched");
    }
}
