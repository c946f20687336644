//! `ProcessGroup`'s one-device operations on borrowed cudarc memory, at
//! world size N: the `ranks_*` tests that run.sh runs on their own (world
//! size 1) and under `nccl-launch -n 2` and `-n 4`. The memory is the
//! test's own `CudaSlice`s, lent as `&mut CudaSlice<T>` (pairs with
//! `&CudaSlice<T>`) and as views (`CudaViewMut<T>`, `CudaView<T>`), never
//! given to the group; each rank contributes values that depend on its
//! rank, the host computes what every element must be, and every element
//! is checked (small integers: the comparisons are exact).
//!
//! * Every one-device operation (each reduction of all_reduce, f32 and
//!   bf16; broadcast from and reduce to every root; all_gather,
//!   reduce_scatter with each reduction, all_to_all, gather and scatter;
//!   send and recv between every ordered pair), on views (the elements
//!   around a view untouched), and in a coalesced batch and a ring of
//!   `batch_isend_irecv`: on blocking and nonblocking communicators, on
//!   the group's stream and on the caller's. Each is flight-recorded
//!   with the slices' element counts and type and the group's deadline,
//!   and the watchdog sees every one end.
//! * A work dropped unwaited orders the caller's stream after its
//!   operation: what the caller reads right after the drop is the result.
//! * Bad input is refused before NCCL sees it, with a plain `GroupError`
//!   (the borrow is not handed back) and the memory untouched: a length that does not fit, a root
//!   out of range or past `i32::MAX`, a send to this rank itself, an
//!   operation on a stream being captured into a CUDA graph; and (with
//!   two GPUs, world size 1) memory on another device than the stream.
//!
//! Without a GPU every test prints `SKIP: ...` and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_group::Diagnostics;
use std::sync::Arc;

use half::bf16;
use nccl_core::ReduceOp;
use nccl_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use nccl_group::{
    Borrowed, ErrorKind, GroupError, OpBuffers, OpResult, OpState, P2POp, ProcessGroup,
    Uncapturable,
};
use nccl_test_support::assert_same_values;
use nccl_test_support::group::ranks::{OP_TIMEOUT, RankContext, Seeds, What, each_mode, options};
use nccl_test_support::group::{
    SIZES, blocks_for, check_avg, check_reduce_scatter_block, convert, enqueued, every_rank_values,
    rank_values, reduce_host, reduces, watchdog_drained, world_of_one,
};
use nccl_test_support::require_gpus;
use nccl_test_support::tensor::{Elem, poison_values};

/// `values` in a slice of the test's own, as an engine holds its memory.
fn lent<T: Elem>(stream: &Arc<CudaStream>, values: &[T]) -> CudaSlice<T> {
    stream.clone_htod(values).expect("a slice")
}

/// The elements of a slice or view, copied on `stream` (which the copy
/// synchronises).
fn host<T: Elem>(stream: &Arc<CudaStream>, memory: &impl DevicePtr<T>) -> Vec<T> {
    stream.clone_dtoh(memory).expect("a copy to the host")
}

/// Runs the operation `result` enqueued: checks its flight record (`op`
/// of `count` input and `output` elements of `T`, with the group's
/// deadline), then waits for it, which ends the borrow.
#[track_caller]
fn run<T: Elem, B: OpBuffers>(
    group: &ProcessGroup,
    result: OpResult<B>,
    (op, count, output): (&str, usize, usize),
    what: &str,
) {
    let work = enqueued(result, what);
    let dump = group.flight_record();
    let last = dump
        .ops
        .last()
        .unwrap_or_else(|| panic!("{what}: nothing in the flight recorder"));
    assert_eq!(
        (
            &*last.op,
            last.dtype.as_deref(),
            last.count,
            last.output_count,
            last.timeout
        ),
        (
            op,
            Some(T::DATA_TYPE.short_name()),
            count,
            output,
            OP_TIMEOUT
        ),
        "{what}: the flight record"
    );
    work.wait()
        .unwrap_or_else(|e| panic!("{what}: wait failed: {e}"));
}

/// Every one-device operation on lent memory, at each size, then the
/// watchdog's view of them.
fn every_op(ctx: &RankContext, group: &ProcessGroup, what: What<'_>) {
    let mut seeds = Seeds::default();
    for &len in &SIZES {
        let what = |op: &str| what(&format!("{op}, lent memory, {len} elements"));
        in_place(ctx, group, len, &mut seeds, &what);
        out_of_place(ctx, group, len, &mut seeds, &what);
        views(ctx, group, len, &mut seeds, &what);
        batches(ctx, group, len, &mut seeds, &what);
        every_ordered_pair(ctx, group, len, &mut seeds, &what);
    }
    ctx.stream.synchronize().expect("synchronize");
    watchdog_drained(group, &what("every operation"));
    for record in group.flight_record().ops {
        assert_eq!(
            record.state,
            OpState::Completed,
            "{}: {record:?}",
            what("the watchdog")
        );
    }
}

fn in_place(
    ctx: &RankContext,
    group: &ProcessGroup,
    len: usize,
    seeds: &mut Seeds,
    what: What<'_>,
) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    for op in ReduceOp::ALL {
        let seed = seeds.next_op();
        let w = what(&format!("all_reduce {op:?} f32"));
        let mut grads = lent(stream, &convert::<f32>(&rank_values(seed, rank, len)));
        let result = group.all_reduce(&mut grads, op, stream);
        run::<f32, _>(group, result, ("all_reduce", len, len), &w);
        let expected = reduce_host(op, &every_rank_values(seed, world, len));
        check_avg(&w, &host(stream, &grads), &expected, world);
    }

    // bf16, as an engine keeps its gradients.
    let seed = seeds.next_op();
    let w = what("all_reduce Sum bf16");
    let mut grads = lent(stream, &convert::<bf16>(&rank_values(seed, rank, len)));
    let result = group.all_reduce(&mut grads, ReduceOp::Sum, stream);
    run::<bf16, _>(group, result, ("all_reduce", len, len), &w);
    let expected = reduce_host(ReduceOp::Sum, &every_rank_values(seed, world, len));
    assert_same_values(&host(stream, &grads), &convert::<bf16>(&expected), &w);

    for root in 0..world {
        let seed = seeds.next_op();
        let w = what(&format!("broadcast from root {root}"));
        let start = if rank == root {
            convert::<f32>(&rank_values(seed, root, len))
        } else {
            poison_values(len)
        };
        let mut weights = lent(stream, &start);
        let result = group.broadcast(&mut weights, root, stream);
        run::<f32, _>(group, result, ("broadcast", len, len), &w);
        let expected = convert::<f32>(&rank_values(seed, root, len));
        assert_same_values(&host(stream, &weights), &expected, &w);
    }

    for (op, root) in reduces(world) {
        let seed = seeds.next_op();
        let w = what(&format!("reduce {op:?} to root {root}"));
        let mut grads = lent(stream, &convert::<f32>(&rank_values(seed, rank, len)));
        let result = group.reduce(&mut grads, op, root, stream);
        run::<f32, _>(group, result, ("reduce", len, len), &w);
        // Only the root has a result.
        if rank == root {
            let expected = reduce_host(op, &every_rank_values(seed, world, len));
            check_avg(&w, &host(stream, &grads), &expected, world);
        }
    }
}

fn out_of_place(
    ctx: &RankContext,
    group: &ProcessGroup,
    len: usize,
    seeds: &mut Seeds,
    what: What<'_>,
) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let seed = seeds.next_op();
    let w = what("all_gather");
    let mine = convert::<f32>(&rank_values(seed, rank, len));
    let (mut out, input) = (
        lent(stream, &poison_values(world * len)),
        lent(stream, &mine),
    );
    let result = group.all_gather_into_tensor(&mut out, &input, stream);
    run::<f32, _>(group, result, ("all_gather", len, world * len), &w);
    let expected = convert(&every_rank_values(seed, world, len).concat());
    assert_same_values(&host(stream, &out), &expected, &w);
    assert_same_values(&host(stream, &input), &mine, &format!("{w}: the input"));

    for op in ReduceOp::ALL {
        let seed = seeds.next_op();
        let w = what(&format!("reduce_scatter {op:?}"));
        let mut out = lent(stream, &poison_values::<f32>(len));
        let input = lent(
            stream,
            &convert::<f32>(&rank_values(seed, rank, world * len)),
        );
        let result = group.reduce_scatter_tensor(&mut out, &input, op, stream);
        run::<f32, _>(group, result, ("reduce_scatter", world * len, len), &w);
        check_reduce_scatter_block(&w, &host(stream, &out), op, seed, rank, world);
    }

    let seed = seeds.next_op();
    let w = what("all_to_all");
    let mut out = lent(stream, &poison_values::<f32>(world * len));
    let input = lent(
        stream,
        &convert::<f32>(&rank_values(seed, rank, world * len)),
    );
    let result = group.all_to_all_single(&mut out, &input, stream);
    run::<f32, _>(group, result, ("all_to_all", world * len, world * len), &w);
    let expected = blocks_for(&every_rank_values(seed, world, world * len), rank, len);
    assert_same_values(&host(stream, &out), &convert(&expected), &w);

    // The spread buffer of gather and scatter exists on the root only
    // (empty elsewhere).
    for root in [0, world - 1] {
        let on_root = |len: usize| if rank == root { len } else { 0 };
        let seed = seeds.next_op();
        let w = what(&format!("gather to root {root}"));
        let mut out = lent(stream, &poison_values::<f32>(on_root(world * len)));
        let input = lent(stream, &convert::<f32>(&rank_values(seed, rank, len)));
        let result = group.gather(&mut out, &input, root, stream);
        run::<f32, _>(group, result, ("gather", len, on_root(world * len)), &w);
        if rank == root {
            let expected = convert(&every_rank_values(seed, world, len).concat());
            assert_same_values(&host(stream, &out), &expected, &w);
        }

        let seed = seeds.next_op();
        let w = what(&format!("scatter from root {root}"));
        let spread = every_rank_values(seed, world, len).concat();
        let mut out = lent(stream, &poison_values::<f32>(len));
        let input = lent(stream, &convert::<f32>(&spread[..on_root(spread.len())]));
        let result = group.scatter(&mut out, &input, root, stream);
        run::<f32, _>(group, result, ("scatter", on_root(world * len), len), &w);
        let expected = convert(&rank_values(seed, rank, len));
        assert_same_values(&host(stream, &out), &expected, &w);
    }
}

/// Operations on parts of slices: one poison element either side of
/// each part stays as it was.
fn views(ctx: &RankContext, group: &ProcessGroup, len: usize, seeds: &mut Seeds, what: What<'_>) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let poison = f32::from_f64(f32::POISON);
    let padded = |values: Vec<f32>| [vec![poison], values, vec![poison]].concat();

    let seed = seeds.next_op();
    let w = what("all_reduce Sum of a view");
    let mut grads = lent(stream, &padded(convert(&rank_values(seed, rank, len))));
    let result = group.all_reduce(grads.slice_mut(1..=len), ReduceOp::Sum, stream);
    run::<f32, _>(group, result, ("all_reduce", len, len), &w);
    let expected = reduce_host(ReduceOp::Sum, &every_rank_values(seed, world, len));
    assert_same_values(&host(stream, &grads), &padded(convert(&expected)), &w);

    let root = world - 1;
    let seed = seeds.next_op();
    let w = what(&format!("broadcast of a view from root {root}"));
    let start = if rank == root {
        convert(&rank_values(seed, root, len))
    } else {
        poison_values(len)
    };
    let mut weights = lent(stream, &padded(start));
    let result = group.broadcast(weights.slice_mut(1..=len), root, stream);
    run::<f32, _>(group, result, ("broadcast", len, len), &w);
    let expected = padded(convert(&rank_values(seed, root, len)));
    assert_same_values(&host(stream, &weights), &expected, &w);

    let seed = seeds.next_op();
    let w = what("all_gather of views");
    let mut out = lent(stream, &padded(poison_values(world * len)));
    let input = lent(stream, &padded(convert(&rank_values(seed, rank, len))));
    let (output_part, input_part) = (out.slice_mut(1..=world * len), input.slice(1..=len));
    let result = group.all_gather_into_tensor(output_part, input_part, stream);
    run::<f32, _>(group, result, ("all_gather", len, world * len), &w);
    let expected = padded(convert(&every_rank_values(seed, world, len).concat()));
    assert_same_values(&host(stream, &out), &expected, &w);

    let seed = seeds.next_op();
    let w = what("reduce_scatter Max of views");
    let mut out = lent(stream, &padded(poison_values(len)));
    let input = lent(
        stream,
        &padded(convert(&rank_values(seed, rank, world * len))),
    );
    let (output_part, input_part) = (out.slice_mut(1..=len), input.slice(1..=world * len));
    let result = group.reduce_scatter_tensor(output_part, input_part, ReduceOp::Max, stream);
    run::<f32, _>(group, result, ("reduce_scatter", world * len, len), &w);
    let full = reduce_host(ReduceOp::Max, &every_rank_values(seed, world, world * len));
    let expected = padded(convert(&full[rank * len..(rank + 1) * len]));
    assert_same_values(&host(stream, &out), &expected, &w);
}

/// Lent slices in one NCCL group: a coalesced batch of all_reduces, and
/// a ring of sends and receives (at world size 1, to and from itself).
fn batches(ctx: &RankContext, group: &ProcessGroup, len: usize, seeds: &mut Seeds, what: What<'_>) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let (first, second) = (seeds.next_op(), seeds.next_op());
    let w = what("coalesced all_reduce Sum and Min");
    let mut a = lent(stream, &convert::<f32>(&rank_values(first, rank, len)));
    let mut b = lent(stream, &convert::<f32>(&rank_values(second, rank, len)));
    let mut batch = group.coalesced();
    batch.all_reduce(&mut a, ReduceOp::Sum);
    batch.all_reduce(&mut b, ReduceOp::Min);
    let result = batch.issue(stream);
    run::<f32, _>(group, result, ("coalesced", 2 * len, 2 * len), &w);
    let expected = reduce_host(ReduceOp::Sum, &every_rank_values(first, world, len));
    assert_same_values(
        &host(stream, &a),
        &convert(&expected),
        &format!("{w}: the first"),
    );
    let expected = reduce_host(ReduceOp::Min, &every_rank_values(second, world, len));
    assert_same_values(
        &host(stream, &b),
        &convert(&expected),
        &format!("{w}: the second"),
    );

    let seed = seeds.next_op();
    let (next, previous) = ((rank + 1) % world, (rank + world - 1) % world);
    let w = what(&format!(
        "batch_isend_irecv ring: to {next}, from {previous}"
    ));
    let mine = convert::<f32>(&rank_values(seed, rank, len));
    let (mut sent, mut received) = (lent(stream, &mine), lent(stream, &poison_values(len)));
    let ring = vec![
        P2POp::send(&mut sent, next),
        P2POp::recv(&mut received, previous),
    ];
    let result = group.batch_isend_irecv(ring, stream);
    run::<f32, _>(group, result, ("batch_isend_irecv", 2 * len, 2 * len), &w);
    let expected = convert(&rank_values(seed, previous, len));
    assert_same_values(&host(stream, &received), &expected, &w);
    assert_same_values(&host(stream, &sent), &mine, &format!("{w}: the sent slice"));
}

/// send and recv of lent slices between every ordered pair of ranks, one
/// pair at a time in an order every rank shares (`src` major).
fn every_ordered_pair(
    ctx: &RankContext,
    group: &ProcessGroup,
    len: usize,
    seeds: &mut Seeds,
    what: What<'_>,
) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    for src in 0..world {
        for dst in (0..world).filter(|&d| d != src) {
            let seed = seeds.next_op();
            if rank != src && rank != dst {
                continue;
            }
            let w = what(&format!("send/recv {src} -> {dst}"));
            let data = convert::<f32>(&rank_values(seed, src, len));
            if rank == src {
                let mut sent = lent(stream, &data);
                let result = group.send(&mut sent, dst, stream);
                run::<f32, _>(group, result, ("send", len, len), &w);
                assert_same_values(&host(stream, &sent), &data, &format!("{w}: the sent slice"));
            } else {
                let mut received = lent(stream, &poison_values::<f32>(len));
                let result = group.recv(&mut received, src, stream);
                run::<f32, _>(group, result, ("recv", len, len), &w);
                assert_same_values(&host(stream, &received), &data, &format!("{w}: received"));
            }
        }
    }
}

#[test]
fn ranks_borrowed_every_op() {
    each_mode("borrowed-ops", every_op);
}

/// A work of lent memory dropped unwaited: the caller's stream reads the
/// results right after the drop, in place and out of place.
#[test]
fn ranks_borrowed_work_dropped_unwaited_orders_the_callers_stream() {
    each_mode("borrowed-drop", |ctx, group, what| {
        let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
        // Large enough that the operation is still running at the drop.
        let len = 1 << 22;
        let w = what("all_reduce Sum, dropped unwaited");
        let mut grads = lent(stream, &convert::<f32>(&rank_values(1, rank, len)));
        drop(enqueued(
            group.all_reduce(&mut grads, ReduceOp::Sum, stream),
            &w,
        ));
        let expected = reduce_host(ReduceOp::Sum, &every_rank_values(1, world, len));
        assert_same_values(&host(stream, &grads), &convert(&expected), &w);

        let w = what("all_gather, dropped unwaited");
        let mut out = lent(stream, &poison_values::<f32>(world * len));
        let input = lent(stream, &convert::<f32>(&rank_values(2, rank, len)));
        drop(enqueued(
            group.all_gather_into_tensor(&mut out, &input, stream),
            &w,
        ));
        let expected = convert(&every_rank_values(2, world, len).concat());
        assert_same_values(&host(stream, &out), &expected, &w);
    });
}

/// The refusal of an operation on borrowed memory: a plain
/// [`GroupError`] (the borrow is not handed back), so the caller's memory
/// is free to read again.
#[track_caller]
fn refusal<B: OpBuffers<Ownership = Borrowed>>(result: OpResult<B>, what: &str) -> GroupError {
    match result {
        Ok(_work) => panic!("{what}: expected a refusal, the operation was enqueued"),
        Err(error) => error,
    }
}

/// The refusal of `result` on borrowed memory, of `kind`, naming each of
/// `names`.
#[track_caller]
fn refused_as<B: OpBuffers<Ownership = Borrowed>>(
    result: OpResult<B>,
    kind: ErrorKind,
    names: &[&str],
    what: &str,
) {
    let error = refusal(result, what);
    assert_eq!(error.kind(), kind, "{what}: {error}");
    let text = error.to_string();
    for name in names {
        assert!(text.contains(name), "{what}: {name:?} missing from: {text}");
    }
}

/// Bad input on lent memory is refused before NCCL sees it, with a plain
/// `GroupError`, the memory untouched; nothing is recorded.
#[test]
fn ranks_borrowed_refusals_are_plain_errors() {
    each_mode("borrowed-refusals", |ctx, group, what| {
        let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
        let len = 33;
        let mine = convert::<f32>(&rank_values(3, rank, len));
        let mut grads = lent(stream, &mine);
        let mut out = lent(stream, &poison_values::<f32>(world * len + 1));
        let recorded = group.flight_record().ops.len();

        let result = group.all_gather_into_tensor(&mut out, &grads, stream);
        let expected = format!("expected {}", world * len);
        let given = format!("output has {} elements", world * len + 1);
        let w = what("all_gather into an output one element too long");
        refused_as(result, ErrorKind::InvalidArgument, &[&expected, &given], &w);

        let result = group.broadcast(&mut grads, world, stream);
        let w = what("broadcast from a root past the world");
        refused_as(
            result,
            ErrorKind::InvalidArgument,
            &["root", "not a member of this group"],
            &w,
        );

        let result = group.reduce(&mut grads, ReduceOp::Sum, usize::MAX, stream);
        let w = what("reduce to a root past i32::MAX");
        refused_as(result, ErrorKind::InvalidArgument, &["root"], &w);

        let result = group.send(&mut grads, rank, stream);
        let w = what("send to this rank itself");
        refused_as(
            result,
            ErrorKind::InvalidArgument,
            &["dst", "another process"],
            &w,
        );

        let w = what("all_reduce on a stream being captured");
        let capture = group
            .begin_capture(stream)
            .unwrap_or_else(|e| panic!("{w}: begin_capture: {e}"));
        let result = capture
            .group()
            .all_reduce(&mut grads, ReduceOp::Sum, stream);
        match refusal(result, &w) {
            GroupError::Capture {
                reason: Uncapturable::BorrowedMemory,
                ..
            } => {}
            other => panic!("{w}: {other}"),
        }
        let graph = capture
            .end(())
            .unwrap_or_else(|e| panic!("{w}: end: {}", e.error));
        // No operation captured (the graph may still hold the capture's
        // own stream ordering).
        assert_eq!(graph.operations(), 0, "{w}");
        drop(graph);

        let w = what("the memory after the refusals");
        assert_same_values(&host(stream, &grads), &mine, &w);
        assert_same_values(&host(stream, &out), &poison_values(world * len + 1), &w);
        assert_eq!(
            group.flight_record().ops.len(),
            recorded,
            "{w}: nothing recorded"
        );
    });
}

/// Lent memory on one device with the caller's stream on another: refused
/// (world size 1, two GPUs), in place and as a pair split across devices.
#[test]
fn multi_gpu_borrowed_memory_on_another_device_than_the_stream_is_refused() {
    let Some(devices) = require_gpus(2) else {
        return;
    };
    let group = world_of_one("borrowed-devices", options(nccl_group::CommMode::Blocking));
    let (zero, one) = (
        devices[0].new_stream().expect("a stream on device 0"),
        devices[1].new_stream().expect("a stream on device 1"),
    );
    let mine = convert::<f32>(&rank_values(4, 0, 17));
    let mut there = lent(&one, &mine);
    let result = group.all_reduce(&mut there, ReduceOp::Sum, &zero);
    refused_as(
        result,
        ErrorKind::WrongDevice,
        &["stream", "device"],
        "all_reduce",
    );

    let mut out = lent(&zero, &poison_values::<f32>(17));
    let result = group.all_gather_into_tensor(&mut out, &there, &zero);
    refused_as(
        result,
        ErrorKind::WrongDevice,
        &["device"],
        "all_gather across devices",
    );
    assert_same_values(&host(&one, &there), &mine, "the memory after the refusals");
    assert_same_values(
        &host(&zero, &out),
        &poison_values(17),
        "the output after the refusal",
    );
}
