//! nccl-tensor's operations at world size N, one process per rank: every
//! test here is a `ranks_*` test, which run.sh runs alone (world size 1)
//! and as every rank of `nccl-launch -n 2` and `-n 4` (on one GPU, each
//! rank a simulated host of its own; see `nccl_test_support::ranks`).
//!
//! Every rank contributes data of its own and every element of every
//! output is checked against what the host computes from all ranks' data.
//! Reductions use magnitudes 1 and 2 (2 only on ranks 0 and 1), so sums,
//! products and pre-multiplied sums of any world size stay exact in every
//! type, fp8 included; data movement uses the same per-rank data.

use nccl_core::{Group, ReduceOp, Reduction, Status};
use nccl_tensor::{AllToAllMethod, Result, Tensor};
use nccl_test_support::tensor::matrix::{self, nccl_reduces, ok};
use nccl_test_support::tensor::world::{PERIOD, Rank, all_values, reduced};
use nccl_test_support::tensor::{Elem, assert_holds, poison_values, poisoned, upload};

/// The sizes of the matrix, in elements; 64 MiB follows.
const SIZES: [usize; 3] = [0, 1, 4097];

/// How the host computes a reduction from every rank's value.
type Fold = Box<dyn Fn(&[f64]) -> f64>;

/// A reduction of the matrix: its name, how NCCL is asked for it, and how
/// the host computes it from every rank's value.
struct Op<'a> {
    name: String,
    reduction: Reduction<'a>,
    fold: Fold,
}

/// The five built-in reductions and a pre-multiplied sum by `T::PREMUL`.
/// Avg of integers is NCCL's sum divided by the world size, rounded toward
/// zero; of floats, each value times 1/N summed (exact for N a power of
/// two, the world sizes run.sh uses).
fn ops<'a, T: Elem>(pre_mul_sum: &'a nccl_core::PreMulSum<'_>, world: usize) -> Vec<Op<'a>> {
    let n = world as f64;
    let avg: Fold = if T::FLOAT {
        Box::new(move |v| v.iter().map(|x| x / n).sum())
    } else {
        Box::new(move |v| (v.iter().sum::<f64>() / n).trunc())
    };
    let scalar = T::PREMUL;
    vec![
        Op {
            name: "sum".into(),
            reduction: ReduceOp::Sum.into(),
            fold: Box::new(|v| v.iter().sum()),
        },
        Op {
            name: "prod".into(),
            reduction: ReduceOp::Prod.into(),
            fold: Box::new(|v| v.iter().product()),
        },
        Op {
            name: "max".into(),
            reduction: ReduceOp::Max.into(),
            fold: Box::new(|v| v.iter().copied().fold(f64::MIN, f64::max)),
        },
        Op {
            name: "min".into(),
            reduction: ReduceOp::Min.into(),
            fold: Box::new(|v| v.iter().copied().fold(f64::MAX, f64::min)),
        },
        Op {
            name: "avg".into(),
            reduction: ReduceOp::Avg.into(),
            fold: avg,
        },
        Op {
            name: format!("premulsum({scalar})"),
            reduction: pre_mul_sum.into(),
            fold: Box::new(move |v| v.iter().map(|x| scalar * x).sum()),
        },
    ]
}

/// Every reduction through all_reduce (in place and into), reduce (in
/// place and into, the root moving with the reduction) and
/// reduce_scatter_tensor.
fn reductions<T: Elem>(rank: &Rank, len: usize) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let pre_mul_sum = comm
        .pre_mul_sum::<T>(T::PREMUL)
        .unwrap_or_else(|e| panic!("{}: pre_mul_sum: {e}", rank.ranks.label()));
    let data = all_values::<T>(len as u64, world, len);
    let scatter = all_values::<T>(len as u64 + 7, world, world * len);
    for (index, op) in ops::<T>(&pre_mul_sum, world).iter().enumerate() {
        if !nccl_reduces::<T>(op.reduction) {
            println!(
                "NOTE: {} {}: NCCL has no such reduction for this type",
                T::NAME,
                op.name
            );
            continue;
        }
        let expected = reduced(&data, 0, len, &*op.fold);
        let mine = &data[me];
        let label = |form: &str| rank.what::<T>(len, &format!("{form} {}", op.name));

        let mut tensor = upload(stream, mine);
        ok(
            comm.all_reduce(&mut tensor, op.reduction, stream),
            &label("all_reduce"),
        );
        assert_holds(stream, &tensor, &expected, &label("all_reduce"));

        let source = upload(stream, mine);
        let mut target = poisoned::<T>(stream, len);
        ok(
            comm.all_reduce_into(&source, &mut target, op.reduction, stream),
            &label("all_reduce_into"),
        );
        assert_holds(stream, &target, &expected, &label("all_reduce_into"));
        assert_holds(stream, &source, mine, &label("all_reduce_into: input"));

        let root = index % world;
        let label = |form: &str| label(&format!("{form} root {root}"));
        let mut tensor = upload(stream, mine);
        ok(
            comm.reduce(&mut tensor, op.reduction, root, stream),
            &label("reduce"),
        );
        // Off the root an in-place reduce leaves the buffer as it was.
        let want: &[T] = if me == root { &expected } else { mine };
        assert_holds(stream, &tensor, want, &label("reduce"));

        let mut target = poisoned::<T>(stream, len);
        ok(
            comm.reduce_into(&source, &mut target, op.reduction, root, stream),
            &label("reduce_into"),
        );
        let untouched = poison_values::<T>(len);
        let want: &[T] = if me == root { &expected } else { &untouched };
        assert_holds(stream, &target, want, &label("reduce_into"));

        let source = upload(stream, &scatter[me]);
        let mut target = poisoned::<T>(stream, len);
        let label = rank.what::<T>(len, &format!("reduce_scatter_tensor {}", op.name));
        ok(
            comm.reduce_scatter_tensor(&mut target, &source, op.reduction, stream),
            &label,
        );
        assert_holds(
            stream,
            &target,
            &reduced(&scatter, me * len, len, &*op.fold),
            &label,
        );
    }
}

/// broadcast from the first and the last rank (in place and into),
/// all_gather_into_tensor, gather and scatter from the first and the last
/// rank, the all_gather list form, all_to_all_single by
/// both methods, a send/recv ring in one group, barrier.
fn data_movement<T: Elem>(rank: &mut Rank, len: usize) {
    let (world, me) = (rank.world(), rank.me());
    let data = all_values::<T>(len as u64 + 11, world, len);
    {
        let (comm, stream) = (&rank.comm, &rank.stream);
        let mine = &data[me];
        for root in [0, world - 1] {
            let label = rank.what::<T>(len, &format!("broadcast root {root}"));
            let mut tensor = upload(stream, mine);
            ok(comm.broadcast(&mut tensor, root, stream), &label);
            assert_holds(stream, &tensor, &data[root], &label);

            let label = rank.what::<T>(len, &format!("broadcast_into root {root}"));
            let source = upload(stream, mine);
            let mut target = poisoned::<T>(stream, len);
            ok(
                comm.broadcast_into(&source, &mut target, root, stream),
                &label,
            );
            assert_holds(stream, &target, &data[root], &label);
        }

        let gathered: Vec<T> = data.concat();
        let label = rank.what::<T>(len, "all_gather_into_tensor");
        let source = upload(stream, mine);
        let mut target = poisoned::<T>(stream, world * len);
        ok(
            comm.all_gather_into_tensor(&mut target, &source, stream),
            &label,
        );
        assert_holds(stream, &target, &gathered, &label);

        for root in [0, world - 1] {
            // The spread buffer is used on the root only: elsewhere an
            // empty one will do.
            let on_root = me == root;
            let label = rank.what::<T>(len, &format!("gather root {root}"));
            let mut target = poisoned::<T>(stream, if on_root { world * len } else { 0 });
            ok(comm.gather(&mut target, &source, root, stream), &label);
            if on_root {
                assert_holds(stream, &target, &gathered, &label);
            }

            let label = rank.what::<T>(len, &format!("scatter root {root}"));
            let spread = upload(stream, if on_root { &gathered[..] } else { &[] });
            let mut target = poisoned::<T>(stream, len);
            ok(comm.scatter(&mut target, &spread, root, stream), &label);
            assert_holds(stream, &target, mine, &label);
        }

        let label = rank.what::<T>(len, "all_gather into [Tensor]");
        let mut list: Vec<Tensor<T>> = (0..world).map(|_| poisoned::<T>(stream, len)).collect();
        ok(comm.all_gather(&mut list[..], &source, stream), &label);
        for (from, tensor) in list.iter().enumerate() {
            assert_holds(
                stream,
                tensor,
                &data[from],
                &format!("{label}: from rank {from}"),
            );
        }

        let label = rank.what::<T>(
            len,
            "send to the next rank, recv from the previous, one Group",
        );
        let next = (me + 1) % world;
        let previous = (me + world - 1) % world;
        let mut target = poisoned::<T>(stream, len);
        ok(
            (|| -> Result<Status> {
                let group = Group::start()?;
                let _ = comm.send(&source, next, stream)?;
                let _ = comm.recv(&mut target, previous, stream)?;
                Ok(group.end()?)
            })(),
            &label,
        );
        assert_holds(stream, &target, &data[previous], &label);
        assert_eq!(nccl_core::group_depth(), 0, "{label}: the group was closed");

        ok(comm.barrier(stream), &rank.what::<T>(len, "barrier"));
    }

    // Rank r's chunk j goes to rank j, as chunk r there.
    let chunks = all_values::<T>(len as u64 + 13, world, world * len);
    let expected: Vec<T> = (0..world)
        .flat_map(|from| chunks[from][me * len..(me + 1) * len].to_vec())
        .collect();
    for method in [AllToAllMethod::Auto, AllToAllMethod::SendRecv] {
        rank.comm.set_all_to_all_method(method);
        let (comm, stream) = (&rank.comm, &rank.stream);
        let label = rank.what::<T>(len, &format!("all_to_all_single ({method:?})"));
        let source = upload(stream, &chunks[me]);
        let mut target = poisoned::<T>(stream, world * len);
        ok(comm.all_to_all_single(&mut target, &source, stream), &label);
        assert_holds(stream, &target, &expected, &label);
    }
    rank.comm.set_all_to_all_method(AllToAllMethod::Auto);
}

/// 64 MiB buffers: all_reduce sum in place and into, broadcast from the
/// last rank; all_gather_into_tensor, reduce_scatter_tensor sum and
/// all_to_all_single over 64 MiB in all.
fn large<T: Elem>(rank: &Rank) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let len = (64 << 20) / size_of::<T>();
    let data = all_values::<T>(64, world, len);
    let sum = reduced(&data, 0, len, &|v: &[f64]| v.iter().sum());

    let label = rank.what::<T>(len, "all_reduce sum (64 MiB)");
    let mut tensor = upload(stream, &data[me]);
    ok(comm.all_reduce(&mut tensor, ReduceOp::Sum, stream), &label);
    assert_holds(stream, &tensor, &sum, &label);
    drop(tensor);

    let label = rank.what::<T>(len, "all_reduce_into sum (64 MiB)");
    let source = upload(stream, &data[me]);
    let mut target = poisoned::<T>(stream, len);
    ok(
        comm.all_reduce_into(&source, &mut target, ReduceOp::Sum, stream),
        &label,
    );
    assert_holds(stream, &target, &sum, &label);

    let root = world - 1;
    let label = rank.what::<T>(len, &format!("broadcast root {root} (64 MiB)"));
    ok(
        comm.broadcast_into(&source, &mut target, root, stream),
        &label,
    );
    assert_holds(stream, &target, &data[root], &label);
    drop((source, target));

    // The gathered, scattered and exchanged buffers are 64 MiB in all; the
    // per-rank part is a whole number of periods.
    let part = len / world / PERIOD * PERIOD;
    let parts = all_values::<T>(65, world, part);
    let label = rank.what::<T>(part, "all_gather_into_tensor (64 MiB in all)");
    let source = upload(stream, &parts[me]);
    let mut target = poisoned::<T>(stream, world * part);
    ok(
        comm.all_gather_into_tensor(&mut target, &source, stream),
        &label,
    );
    assert_holds(stream, &target, &parts.concat(), &label);
    drop((source, target));

    let whole = all_values::<T>(66, world, world * part);
    let label = rank.what::<T>(part, "reduce_scatter_tensor sum (64 MiB in all)");
    let source = upload(stream, &whole[me]);
    let mut target = poisoned::<T>(stream, part);
    ok(
        comm.reduce_scatter_tensor(&mut target, &source, ReduceOp::Sum, stream),
        &label,
    );
    let fold = |v: &[f64]| v.iter().sum();
    assert_holds(
        stream,
        &target,
        &reduced(&whole, me * part, part, &fold),
        &label,
    );

    let label = rank.what::<T>(part, "all_to_all_single (64 MiB in all)");
    let mut target = poisoned::<T>(stream, world * part);
    ok(comm.all_to_all_single(&mut target, &source, stream), &label);
    let expected: Vec<T> = (0..world)
        .flat_map(|from| whole[from][me * part..(me + 1) * part].to_vec())
        .collect();
    assert_holds(stream, &target, &expected, &label);
}

/// The matrix for `T` at 0, 1 and 4097 elements, then 64 MiB.
fn every_op<T: Elem>(tag: &str) {
    let Some(mut rank) = Rank::join(tag) else {
        return;
    };
    for len in SIZES {
        if len == 0 {
            matrix::empty::<T>(&rank.comm, &rank.stream);
            continue;
        }
        data_movement::<T>(&mut rank, len);
        reductions::<T>(&rank, len);
    }
    large::<T>(&rank);
    rank.stream.synchronize().expect("synchronize");
    println!(
        "{}: every {} operation checked",
        rank.ranks.label(),
        T::NAME
    );
}

#[test]
fn ranks_every_op_f32() {
    every_op::<f32>("f32");
}

#[test]
fn ranks_every_op_bf16() {
    every_op::<half::bf16>("bf16");
}

#[test]
fn ranks_every_op_f8e4m3() {
    every_op::<float8::F8E4M3>("f8e4m3");
}

#[test]
fn ranks_every_op_i64() {
    every_op::<i64>("i64");
}
