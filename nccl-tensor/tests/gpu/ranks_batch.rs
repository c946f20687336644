//! nccl-tensor's operations made of several NCCL calls in one group, at
//! world size N, one process per rank (`ranks_*` tests: run.sh runs each
//! alone and as every rank of `nccl-launch -n 2` and `-n 4`, on simulated
//! hosts on one GPU):
//!
//! * a [`Batch`](nccl_tensor::Batch) of sends and receives: a ring, every
//!   rank to every rank (itself included) with lengths and data types that
//!   differ per pair, on tensors, `AnyTensor`s, cells and cudarc slices;
//!   collectives of different types coalesced in one batch; a bad batch
//!   refused with nothing enqueued, and the next batch still working;
//! * all_to_all of uneven sizes: tokens routed unevenly (some pairs none),
//!   through `all_to_all_single_split` and the list form `all_to_all`.
//!
//! Every element of every output is checked against what the host
//! computes from every rank's data.

use nccl_core::{Op, ReduceOp, Status};
use nccl_tensor::{AnyTensor, Error, Single, Tensor};
use nccl_test_support::tensor::routing::Routing;
use nccl_test_support::tensor::world::{Rank, all_values, rank_values};
use nccl_test_support::tensor::{
    Elem, assert_cell_holds, assert_holds, assert_same, download, poisoned, poisoned_cell, upload,
    upload_cell,
};

#[track_caller]
fn ok(result: nccl_tensor::Result<Status>, what: &str) {
    if let Err(error) = result {
        panic!("{what}: {error}");
    }
}

/// The elements rank `src` sends rank `dst` in the all-pairs batch.
fn pair_len(src: usize, dst: usize) -> usize {
    1 + src + 2 * dst
}

/// Every rank sends every rank (itself too) a tensor of its own length,
/// `f32` between ranks of even sum and `i64` otherwise, as `AnyTensor`s.
fn all_pairs(rank: &Rank) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let seed = |src: usize, dst: usize| (100 + 10 * src + dst) as u64;
    let even = |src: usize, dst: usize| (src + dst).is_multiple_of(2);
    let outgoing: Vec<AnyTensor> = (0..world)
        .map(|dst| {
            let len = pair_len(me, dst);
            if even(me, dst) {
                upload(stream, &rank_values::<f32>(seed(me, dst), me, len)).into()
            } else {
                upload(stream, &rank_values::<i64>(seed(me, dst), me, len)).into()
            }
        })
        .collect();
    let mut incoming: Vec<AnyTensor> = (0..world)
        .map(|src| {
            let len = pair_len(src, me);
            if even(src, me) {
                poisoned::<f32>(stream, len).into()
            } else {
                poisoned::<i64>(stream, len).into()
            }
        })
        .collect();
    let what = rank.what::<f32>(0, "a batch to and from every rank");
    let mut batch = comm.batch(stream);
    // Receives first on odd ranks, sends first on even ones: the order
    // within a batch does not matter across peers.
    for (peer, (send, recv)) in (0..).zip(outgoing.iter().zip(incoming.iter_mut())) {
        if me % 2 == 0 {
            batch.send(send, peer).recv(recv, peer);
        } else {
            batch.recv(recv, peer).send(send, peer);
        }
    }
    assert_eq!(batch.len(), 2 * world);
    ok(batch.enqueue(), &what);
    for (src, tensor) in incoming.into_iter().enumerate() {
        let what = format!("{what}: from rank {src}");
        assert_eq!(tensor.len(), pair_len(src, me), "{what}");
        if even(src, me) {
            let tensor = Tensor::<f32>::try_from(tensor).expect("an f32 tensor");
            let expected = rank_values::<f32>(seed(src, me), src, pair_len(src, me));
            assert_holds(stream, &tensor, &expected, &what);
        } else {
            let tensor = Tensor::<i64>::try_from(tensor).expect("an i64 tensor");
            let expected = rank_values::<i64>(seed(src, me), src, pair_len(src, me));
            assert_holds(stream, &tensor, &expected, &what);
        }
    }
}

/// A ring (send to the next rank, receive from the previous) on tensors,
/// on cells and on cudarc slices; at world size 1 each rank is its own
/// neighbour.
fn rings(rank: &Rank) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let (next, previous) = ((me + 1) % world, (me + world - 1) % world);
    let len = 4097;
    let data = all_values::<f32>(7, world, len);

    let what = rank.what::<f32>(len, "batch ring on tensors");
    let source = upload(stream, &data[me]);
    let mut target = poisoned::<f32>(stream, len);
    let mut batch = comm.batch(stream);
    batch.send(&source, next).recv(&mut target, previous);
    ok(batch.enqueue(), &what);
    assert_holds(stream, &target, &data[previous], &what);

    let what = rank.what::<f32>(len, "batch ring on cells");
    let (source, target) = (
        upload_cell(stream, &data[me]),
        poisoned_cell::<f32>(stream, len),
    );
    let mut batch = comm.batch(stream);
    batch.recv(&target, previous).send(&source, next);
    ok(batch.enqueue(), &what);
    assert_cell_holds(stream, &target, &data[previous], &what);

    let what = rank.what::<f32>(len, "batch ring on cudarc slices");
    let source = stream.clone_htod(&data[me]).expect("upload a slice");
    let mut target = stream.alloc_zeros::<f32>(len).expect("a slice");
    let mut batch = comm.batch(stream);
    batch.send(&source, next).recv(&mut target, previous);
    ok(batch.enqueue(), &what);
    let got = stream.clone_dtoh(&target).expect("download a slice");
    assert_same(&got, &data[previous], &what);
}

/// Collectives of different types and layouts in one batch.
fn coalesced(rank: &Rank) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let len = 1031;
    let floats = all_values::<f32>(21, world, len);
    let ints = all_values::<i64>(22, world, len);
    let sum = |data: &[Vec<f64>]| -> Vec<f64> {
        (0..len)
            .map(|i| data.iter().map(|rank| rank[i]).sum())
            .collect()
    };
    let as_f64 = |data: &[Vec<f32>]| -> Vec<Vec<f64>> {
        data.iter()
            .map(|r| r.iter().map(|&v| v.to_f64()).collect())
            .collect()
    };
    let int_f64: Vec<Vec<f64>> = ints
        .iter()
        .map(|r| r.iter().map(|&v| v.to_f64()).collect())
        .collect();

    let mut reduced = upload(stream, &floats[me]);
    let int_input = upload(stream, &ints[me]);
    let mut int_output = poisoned::<i64>(stream, len);
    let gather_input = upload(stream, &floats[me]);
    let mut gathered = poisoned::<f32>(stream, world * len);
    let root = world - 1;
    let mut broadcast = upload(stream, &ints[me]);
    let what = rank.what::<f32>(
        len,
        "coalesced all_reduce, all_reduce_into, all_gather, broadcast",
    );
    let mut batch = comm.batch(stream);
    batch
        .push(Op::AllReduce(ReduceOp::Sum.into()), Single(&mut reduced))
        // The named methods are pushes of one operation each.
        .all_reduce_into(&int_input, &mut int_output, ReduceOp::Max)
        .all_gather_into_tensor(&mut gathered, &gather_input)
        .broadcast(&mut broadcast, root);
    ok(batch.enqueue(), &what);
    let expected: Vec<f32> = sum(&as_f64(&floats))
        .into_iter()
        .map(f32::from_f64)
        .collect();
    assert_holds(stream, &reduced, &expected, &format!("{what}: all_reduce"));
    let max: Vec<i64> = (0..len)
        .map(|i| i64::from_f64(int_f64.iter().map(|r| r[i]).fold(f64::MIN, f64::max)))
        .collect();
    assert_holds(
        stream,
        &int_output,
        &max,
        &format!("{what}: all_reduce_into"),
    );
    assert_holds(
        stream,
        &gathered,
        &floats.concat(),
        &format!("{what}: all_gather"),
    );
    assert_holds(
        stream,
        &broadcast,
        &ints[root],
        &format!("{what}: broadcast"),
    );
}

/// Batches refused before NCCL sees them, then a batch that works: the
/// refusals enqueued nothing that a peer could wait for.
fn refusals(rank: &Rank) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let source = upload(stream, &rank_values::<f32>(31, me, 8));
    let mut target = poisoned::<f32>(stream, 8);
    let mut batch = comm.batch(stream);
    batch.send(&source, me);
    let error = batch
        .enqueue()
        .expect_err("a send to itself with no receive");
    assert!(
        matches!(
            error,
            Error::UnpairedSelfExchange {
                sends: 1,
                recvs: 0,
                ..
            }
        ),
        "{error}"
    );

    let mut batch = comm.batch(stream);
    batch.send(&source, world).recv(&mut target, 0);
    let error = batch.enqueue().expect_err("a peer out of range");
    assert!(matches!(error, Error::InBatch { index: 0, .. }), "{error}");

    let cell = upload_cell(stream, &rank_values::<f32>(32, me, 8));
    let mut batch = comm.batch(stream);
    batch.send(&cell, me).recv(&cell, me);
    let error = batch.enqueue().expect_err("one cell sent and received");
    assert!(
        matches!(
            error,
            Error::CellTwiceInBatch {
                first: 0,
                second: 1
            }
        ),
        "{error}"
    );

    let mut batch = comm.batch(stream);
    batch.send(&source, me).recv(&mut target, me);
    ok(
        batch.enqueue(),
        &rank.what::<f32>(8, "a send to itself after refusals"),
    );
    assert_holds(stream, &target, &download(stream, &source), "self exchange");
    assert_eq!(
        comm.batch(stream).enqueue().expect("an empty batch"),
        Status::Success
    );
    assert_eq!(nccl_core::group_depth(), 0, "every group was closed");
}

#[test]
fn ranks_batch_send_recv_and_coalesced() {
    let Some(rank) = Rank::join("batch") else {
        return;
    };
    rings(&rank);
    all_pairs(&rank);
    coalesced(&rank);
    refusals(&rank);
    rank.stream.synchronize().expect("synchronize");
    println!("{}: every batch checked", rank.ranks.label());
}

/// One routing through `all_to_all_single_split` (tensors and cells) and
/// the list form.
fn route<T: Elem>(rank: &Rank, routing: Routing) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let (send_counts, recv_counts) = (
        routing.send_counts(me, world),
        routing.recv_counts(me, world),
    );
    let input: Vec<T> = routing.input(me, world);
    let expected: Vec<T> = routing.output(me, world);
    let what = |form: &str| {
        rank.what::<T>(
            input.len(),
            &format!(
                "{form}: tokens {send_counts:?} out, {recv_counts:?} in (seed {}, hidden {})",
                routing.seed, routing.hidden
            ),
        )
    };

    let source = upload(stream, &input);
    let mut target = poisoned::<T>(stream, expected.len());
    ok(
        comm.all_to_all_single_split(&mut target, &source, &recv_counts, &send_counts, stream),
        &what("all_to_all_single_split"),
    );
    assert_holds(stream, &target, &expected, &what("all_to_all_single_split"));
    assert_holds(
        stream,
        &source,
        &input,
        &what("all_to_all_single_split: input kept"),
    );

    let (source, target) = (
        upload_cell(stream, &input),
        poisoned_cell::<T>(stream, expected.len()),
    );
    ok(
        comm.all_to_all_single_split(&target, &source, &recv_counts, &send_counts, stream),
        &what("all_to_all_single_split on cells"),
    );
    assert_cell_holds(
        stream,
        &target,
        &expected,
        &what("all_to_all_single_split on cells"),
    );

    let inputs: Vec<Tensor<T>> = (0..world)
        .map(|dst| upload(stream, &routing.block::<T>(me, dst)))
        .collect();
    let mut outputs: Vec<Tensor<T>> = recv_counts
        .iter()
        .map(|&len| poisoned::<T>(stream, len))
        .collect();
    ok(
        comm.all_to_all(outputs.iter_mut(), inputs.iter(), stream),
        &what("all_to_all (lists)"),
    );
    for (src, output) in outputs.iter().enumerate() {
        assert_holds(
            stream,
            output,
            &routing.block::<T>(src, me),
            &format!("{}: from rank {src}", what("all_to_all (lists)")),
        );
    }
}

#[test]
fn ranks_all_to_all_uneven_token_routing() {
    let Some(rank) = Rank::join("uneven") else {
        return;
    };
    for seed in 0..5 {
        route::<f32>(&rank, Routing { seed, hidden: 3 });
        route::<i64>(&rank, Routing { seed, hidden: 5 });
    }
    // Large blocks (up to 4 tokens of 2^18 elements per pair).
    route::<i32>(
        &rank,
        Routing {
            seed: 2,
            hidden: 1 << 18,
        },
    );

    // Bad split sizes are refused before anything is enqueued.
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let source = upload(stream, &rank_values::<f32>(41, me, 2 * world));
    let mut target = poisoned::<f32>(stream, 2 * world);
    let error = comm
        .all_to_all_single_split(
            &mut target,
            &source,
            &vec![2; world],
            &vec![2; world + 1],
            stream,
        )
        .expect_err("one split too many");
    assert!(
        matches!(error, Error::SplitCount { given, .. } if given == world + 1),
        "{error}"
    );
    let mut short = vec![2; world];
    short[0] = 1;
    let error = comm
        .all_to_all_single_split(&mut target, &source, &short, &vec![2; world], stream)
        .expect_err("the output splits fall one short");
    assert!(matches!(error, Error::SplitSum { .. }), "{error}");
    // Equal splits through the split form match all_to_all_single.
    let data = all_values::<f32>(42, world, 2 * world);
    let source = upload(stream, &data[me]);
    ok(
        comm.all_to_all_single_split(
            &mut target,
            &source,
            &vec![2; world],
            &vec![2; world],
            stream,
        ),
        "equal splits",
    );
    let expected: Vec<f32> = (0..world)
        .flat_map(|src| data[src][2 * me..2 * me + 2].to_vec())
        .collect();
    assert_holds(
        stream,
        &target,
        &expected,
        &rank.what::<f32>(2 * world, "equal splits"),
    );
    rank.stream.synchronize().expect("synchronize");
    println!("{}: uneven all_to_all checked", rank.ranks.label());
}
