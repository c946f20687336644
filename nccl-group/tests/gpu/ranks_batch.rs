//! `ProcessGroup`'s operations of several NCCL calls in one group, at
//! world size N: the `ranks_*` tests that run.sh runs on their own (world
//! size 1) and under `nccl-launch -n 2` and `-n 4` (simulated hosts on one
//! GPU). On blocking and nonblocking communicators, each on the group's
//! stream and on the caller's:
//!
//! * `batch_isend_irecv`: a ring of tensors, and every process to every
//!   process (itself included) with lengths and data types that differ
//!   per pair (`AnyTensor`s); a refused batch hands its tensors back and
//!   the group goes on;
//! * `coalesced`: several all_reduces of one type (a DDP bucket), and
//!   collectives of mixed types and layouts;
//! * all_to_all of uneven sizes: tokens routed unevenly (some pairs none)
//!   through `all_to_all_split` and `all_to_all_list`.
//!
//! Every element of every output is checked against what the host
//! computes from every rank's data.

use nccl_core::{Op, ReduceOp};
use nccl_group::Recovery;
use nccl_group::{P2POp, ProcessGroup};
use nccl_tensor::{AnyTensor, Tensor};
use nccl_test_support::group::ranks::{RankContext, What, each_mode};
use nccl_test_support::group::{done, refused};
use nccl_test_support::tensor::routing::Routing;
use nccl_test_support::tensor::world::{all_values, rank_values};
use nccl_test_support::tensor::{Elem, assert_same, download, poisoned, upload};

/// A ring: send to the next process, receive from the previous.
fn ring(ctx: &RankContext, group: &ProcessGroup, what: What<'_>) {
    let (me, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let (next, previous) = ((me + 1) % world, (me + world - 1) % world);
    let len = 4097;
    let data = all_values::<f32>(51, world, len);
    let w = what("batch_isend_irecv ring");
    let ops = vec![
        P2POp::recv(poisoned::<f32>(stream, len), previous),
        P2POp::send(upload(stream, &data[me]), next),
    ];
    let tensors = done(group.batch_isend_irecv(ops, stream), &w);
    assert_eq!(tensors.len(), 2, "{w}");
    assert_same(&download(stream, &tensors[0]), &data[previous], &w);
    assert_same(
        &download(stream, &tensors[1]),
        &data[me],
        &format!("{w}: sent tensor kept"),
    );
}

/// The elements process `src` sends process `dst`.
fn pair_len(src: usize, dst: usize) -> usize {
    2 + 3 * src + dst
}

/// Every process to every process, itself included: `f32` between
/// processes of even sum, `i64` otherwise, as `AnyTensor`s.
fn all_pairs(ctx: &RankContext, group: &ProcessGroup, what: What<'_>) {
    let (me, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let seed = |src: usize, dst: usize| (200 + 10 * src + dst) as u64;
    let even = |src: usize, dst: usize| (src + dst).is_multiple_of(2);
    let values = |src: usize, dst: usize| -> AnyTensor {
        let len = pair_len(src, dst);
        if even(src, dst) {
            upload(stream, &rank_values::<f32>(seed(src, dst), src, len)).into()
        } else {
            upload(stream, &rank_values::<i64>(seed(src, dst), src, len)).into()
        }
    };
    let poison = |src: usize, dst: usize| -> AnyTensor {
        let len = pair_len(src, dst);
        if even(src, dst) {
            poisoned::<f32>(stream, len).into()
        } else {
            poisoned::<i64>(stream, len).into()
        }
    };
    let mut ops = Vec::new();
    for peer in 0..world {
        ops.push(P2POp::send(values(me, peer), peer));
        ops.push(P2POp::recv(poison(peer, me), peer));
    }
    let w = what("batch_isend_irecv to and from every process");
    let tensors = done(group.batch_isend_irecv(ops, stream), &w);
    for (src, received) in tensors.into_iter().skip(1).step_by(2).enumerate() {
        let w = format!("{w}: from process {src}");
        let expected = values(src, me);
        assert_eq!(received.dtype(), expected.dtype(), "{w}");
        if even(src, me) {
            check_any::<f32>(stream, received, expected, &w);
        } else {
            check_any::<i64>(stream, received, expected, &w);
        }
    }
}

/// `got` holds `expected`'s elements, both of type `T`.
fn check_any<T: Elem>(
    stream: &std::sync::Arc<nccl_core::CudaStream>,
    got: AnyTensor,
    expected: AnyTensor,
    what: &str,
) {
    let got = Tensor::<T>::try_from(got).expect("the type it was made with");
    let expected = Tensor::<T>::try_from(expected).expect("the type it was made with");
    assert_same(&download(stream, &got), &download(stream, &expected), what);
}

/// A batch refused by its checks hands every tensor back, in order, and
/// the group goes on.
fn refusal(ctx: &RankContext, group: &ProcessGroup, what: What<'_>) {
    let (me, stream) = (ctx.rank(), &ctx.stream);
    let w = what("batch_isend_irecv of a send to itself alone");
    let data = rank_values::<f32>(61, me, 16);
    let ops = vec![P2POp::send(upload(stream, &data), me)];
    let failed = refused(group.batch_isend_irecv(ops, stream), &w);
    let text = failed.error.to_string();
    assert!(text.contains("1 send(s) to this rank"), "{w}: {text}");
    assert_eq!(failed.buffers.len(), 1, "{w}");
    assert_same(
        &download(stream, &failed.buffers[0]),
        &data,
        &format!("{w}: handed back"),
    );
    assert!(
        group.failure().is_none(),
        "{w}: a refusal does not fail the group"
    );
}

/// A DDP bucket: several all_reduces of one type, coalesced; then
/// collectives of mixed types and layouts as `(output, input)` pairs of
/// `AnyTensor`s.
fn coalesced(ctx: &RankContext, group: &ProcessGroup, what: What<'_>) {
    let (me, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let lens = [1, 4097, 33, 1 << 16];
    let data: Vec<Vec<Vec<f32>>> = (0..lens.len())
        .map(|i| all_values::<f32>(70 + i as u64, world, lens[i]))
        .collect();
    let mut bucket = group.coalesced::<Tensor<f32>>();
    for per_rank in &data {
        bucket.all_reduce(upload(stream, &per_rank[me]), ReduceOp::Sum);
    }
    assert_eq!(bucket.len(), lens.len());
    let w = what("coalesced all_reduces");
    let reduced = done(bucket.issue(stream), &w);
    for (i, (tensor, per_rank)) in reduced.iter().zip(&data).enumerate() {
        let sum: Vec<f32> = (0..lens[i])
            .map(|e| f32::from_f64(per_rank.iter().map(|r| r[e].to_f64()).sum()))
            .collect();
        assert_same(&download(stream, tensor), &sum, &format!("{w}: tensor {i}"));
    }

    let len = 1025;
    let floats = all_values::<f32>(80, world, len);
    let ints = all_values::<i64>(81, world, len);
    let root = world - 1;
    let pair = |output: AnyTensor, input: AnyTensor| (output, input);
    let mut mixed = group.coalesced::<(AnyTensor, AnyTensor)>();
    mixed
        .all_reduce(
            pair(
                poisoned::<i64>(stream, len).into(),
                upload(stream, &ints[me]).into(),
            ),
            ReduceOp::Min,
        )
        .all_gather_into_tensor(pair(
            poisoned::<f32>(stream, world * len).into(),
            upload(stream, &floats[me]).into(),
        ))
        .push(
            Op::Broadcast { root },
            pair(
                poisoned::<f32>(stream, len).into(),
                upload(stream, &floats[me]).into(),
            ),
        );
    let w = what("coalesced all_reduce i64, all_gather f32, broadcast f32");
    let mut results = done(mixed.issue(stream), &w)
        .into_iter()
        .map(|(output, _)| output);
    let min: Vec<i64> = (0..len)
        .map(|e| i64::from_f64(ints.iter().map(|r| r[e].to_f64()).fold(f64::MAX, f64::min)))
        .collect();
    let next = |results: &mut dyn Iterator<Item = AnyTensor>| {
        results.next().expect("one output per operation")
    };
    let reduced = Tensor::<i64>::try_from(next(&mut results)).expect("i64");
    assert_same(
        &download(stream, &reduced),
        &min,
        &format!("{w}: all_reduce"),
    );
    let gathered = Tensor::<f32>::try_from(next(&mut results)).expect("f32");
    assert_eq!(gathered.len(), world * len);
    assert_same(
        &download(stream, &gathered),
        &floats.concat(),
        &format!("{w}: all_gather"),
    );
    let broadcast = Tensor::<f32>::try_from(next(&mut results)).expect("f32");
    assert_same(
        &download(stream, &broadcast),
        &floats[root],
        &format!("{w}: broadcast"),
    );
}

/// Tokens routed unevenly through `all_to_all_split` and `all_to_all_list`.
fn uneven<T: Elem>(ctx: &RankContext, group: &ProcessGroup, routing: Routing, what: What<'_>) {
    let (me, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let (send_counts, recv_counts) = (
        routing.send_counts(me, world),
        routing.recv_counts(me, world),
    );
    let input: Vec<T> = routing.input(me, world);
    let expected: Vec<T> = routing.output(me, world);
    let w = what(&format!(
        "all_to_all_split {} tokens {send_counts:?} out, {recv_counts:?} in",
        T::NAME
    ));
    let (output, kept) = done(
        group.all_to_all_single_split(
            poisoned::<T>(stream, expected.len()),
            upload(stream, &input),
            &recv_counts,
            &send_counts,
            stream,
        ),
        &w,
    );
    assert_same(&download(stream, &output), &expected, &w);
    assert_same(
        &download(stream, &kept),
        &input,
        &format!("{w}: input kept"),
    );

    let w = what(&format!("all_to_all_list {} blocks", T::NAME));
    let inputs = (0..world)
        .map(|dst| upload(stream, &routing.block::<T>(me, dst)))
        .collect();
    let outputs = recv_counts
        .iter()
        .map(|&len| poisoned::<T>(stream, len))
        .collect();
    let (outputs, _) = done(group.all_to_all(outputs, inputs, stream), &w);
    for (src, output) in outputs.iter().enumerate() {
        assert_same(
            &download(stream, output),
            &routing.block::<T>(src, me),
            &format!("{w}: from process {src}"),
        );
    }
}

#[test]
fn ranks_group_batch_isend_irecv() {
    each_mode("batch", |ctx, group, what| {
        ring(ctx, group, what);
        all_pairs(ctx, group, what);
        refusal(ctx, group, what);
        ring(ctx, group, what);
    });
}

#[test]
fn ranks_group_coalesced() {
    each_mode("coalesced", coalesced);
}

#[test]
fn ranks_group_all_to_all_uneven_token_routing() {
    each_mode("uneven", |ctx, group, what| {
        for seed in 0..5 {
            uneven::<f32>(ctx, group, Routing { seed, hidden: 3 }, what);
        }
        uneven::<i64>(
            ctx,
            group,
            Routing {
                seed: 1,
                hidden: 1 << 16,
            },
            what,
        );
    });
}
