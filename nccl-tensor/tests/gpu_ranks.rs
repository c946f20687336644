//! nccl-core and nccl-tensor at world size N, one process per rank: every
//! test here is a `ranks_*` test, which run.sh runs alone (world size 1)
//! and as every rank of `nccl-launch -n 2` and `-n 4` (on one GPU, each
//! rank a simulated host of its own; see `support::ranks`).
//!
//! Every rank contributes data of its own and every element of every
//! output is checked against what the host computes from all ranks' data.
//! Reductions use magnitudes 1 and 2 (2 only on ranks 0 and 1), so sums,
//! products and pre-multiplied sums of any world size stay exact in every
//! type, fp8 included; data movement uses the same per-rank data.

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;
mod tensor_support;

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Config, Group, ReduceOp, Reduction, Status};
use nccl_tensor::{AllToAllMethod, Communicator, Result, Tensor};

use support::Ranks;
use tensor_support::matrix::{self, nccl_reduces, ok};
use tensor_support::{Elem, assert_same, download, poison_values, poisoned, upload};

/// The per-rank data repeats with this period (a prime above 4097, so the
/// 4097-element case has no repeat and 64 MiB needs no per-element work).
const PERIOD: usize = 4099;

/// The sizes of the matrix, in elements; 64 MiB follows.
const SIZES: [usize; 3] = [0, 1, 4097];

/// One rank's communicator and stream in a test.
struct Rank {
    ranks: Ranks,
    comm: Communicator,
    stream: Arc<CudaStream>,
}

impl Rank {
    /// This rank of the launch (or the only one), with a blocking
    /// communicator of every rank meeting under `tag`; `None` on a machine
    /// without a GPU (after SKIP).
    fn join(tag: &str) -> Option<Self> {
        support::require_gpus(1)?;
        let ranks = support::ranks();
        let device = ranks.device();
        let comm = Communicator::new(
            device.clone(),
            ranks.world as i32,
            ranks.unique_id(tag),
            ranks.rank as i32,
        )
        .unwrap_or_else(|e| panic!("{}: init: {e}", ranks.label()));
        assert_eq!(
            (comm.rank(), comm.world_size()),
            (ranks.rank as i32, ranks.world as i32)
        );
        let stream = device.new_stream().expect("stream");
        Some(Self {
            ranks,
            comm,
            stream,
        })
    }

    fn world(&self) -> usize {
        self.ranks.world
    }

    fn me(&self) -> usize {
        self.ranks.rank
    }

    fn what<T: Elem>(&self, len: usize, op: &str) -> String {
        format!("{}: {} x{len}: {op}", self.ranks.label(), T::NAME)
    }
}

/// Rank `rank`'s `len` elements of `T` for stream `seed`: +-1 or +-2 (2
/// only on ranks 0 and 1; no signs on unsigned types), periodic.
fn rank_values<T: Elem>(seed: u64, rank: usize, len: usize) -> Vec<T> {
    let period: Vec<T> = (0..PERIOD.min(len))
        .map(|i| {
            let mut h = (seed ^ T::SEED.rotate_left(17) ^ (rank as u64).rotate_left(40))
                .wrapping_add(i as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            h ^= h >> 32;
            let magnitude = if rank < 2 && h & 1 == 1 { 2.0 } else { 1.0 };
            let negative = T::SIGNED && h & 2 == 2;
            T::from_f64(if negative { -magnitude } else { magnitude })
        })
        .collect();
    period.iter().copied().cycle().take(len).collect()
}

/// Every rank's data for `seed`, in rank order.
fn all_values<T: Elem>(seed: u64, world: usize, len: usize) -> Vec<Vec<T>> {
    (0..world).map(|r| rank_values(seed, r, len)).collect()
}

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

/// `fold` of every rank's element `offset + i`, for `i < len`.
fn reduced<T: Elem>(
    data: &[Vec<T>],
    offset: usize,
    len: usize,
    fold: &dyn Fn(&[f64]) -> f64,
) -> Vec<T> {
    let mut column = vec![0.0; data.len()];
    let mut one = |i: usize| {
        for (slot, rank) in column.iter_mut().zip(data) {
            *slot = rank[offset + i].to_f64();
        }
        T::from_f64(fold(&column))
    };
    if len <= PERIOD {
        return (0..len).map(&mut one).collect();
    }
    // Every rank's data repeats with PERIOD, and so does the result.
    assert_eq!(offset % PERIOD, 0, "a long reduction starts at a period");
    let period: Vec<T> = (0..PERIOD).map(&mut one).collect();
    period.iter().copied().cycle().take(len).collect()
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
        assert_same(&download(stream, &tensor), &expected, &label("all_reduce"));

        let source = upload(stream, mine);
        let mut target = poisoned::<T>(stream, len);
        ok(
            comm.all_reduce_into(&source, &mut target, op.reduction, stream),
            &label("all_reduce_into"),
        );
        assert_same(
            &download(stream, &target),
            &expected,
            &label("all_reduce_into"),
        );
        assert_same(
            &download(stream, &source),
            mine,
            &label("all_reduce_into: input"),
        );

        let root = index % world;
        let label = |form: &str| label(&format!("{form} root {root}"));
        let mut tensor = upload(stream, mine);
        ok(
            comm.reduce(&mut tensor, op.reduction, root as i32, stream),
            &label("reduce"),
        );
        // Off the root an in-place reduce leaves the buffer as it was.
        let want: &[T] = if me == root { &expected } else { mine };
        assert_same(&download(stream, &tensor), want, &label("reduce"));

        let mut target = poisoned::<T>(stream, len);
        ok(
            comm.reduce_into(&source, &mut target, op.reduction, root as i32, stream),
            &label("reduce_into"),
        );
        let untouched = poison_values::<T>(len);
        let want: &[T] = if me == root { &expected } else { &untouched };
        assert_same(&download(stream, &target), want, &label("reduce_into"));

        let source = upload(stream, &scatter[me]);
        let mut target = poisoned::<T>(stream, len);
        let label = rank.what::<T>(len, &format!("reduce_scatter_tensor {}", op.name));
        ok(
            comm.reduce_scatter_tensor(&mut target, &source, op.reduction, stream),
            &label,
        );
        assert_same(
            &download(stream, &target),
            &reduced(&scatter, me * len, len, &*op.fold),
            &label,
        );
    }
}

/// broadcast from the first and the last rank (in place and into),
/// all_gather_into_tensor, the all_gather list form, all_to_all_single by
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
            ok(comm.broadcast(&mut tensor, root as i32, stream), &label);
            assert_same(&download(stream, &tensor), &data[root], &label);

            let label = rank.what::<T>(len, &format!("broadcast_into root {root}"));
            let source = upload(stream, mine);
            let mut target = poisoned::<T>(stream, len);
            ok(
                comm.broadcast_into(&source, &mut target, root as i32, stream),
                &label,
            );
            assert_same(&download(stream, &target), &data[root], &label);
        }

        let gathered: Vec<T> = data.concat();
        let label = rank.what::<T>(len, "all_gather_into_tensor");
        let source = upload(stream, mine);
        let mut target = poisoned::<T>(stream, world * len);
        ok(
            comm.all_gather_into_tensor(&mut target, &source, stream),
            &label,
        );
        assert_same(&download(stream, &target), &gathered, &label);

        let label = rank.what::<T>(len, "all_gather into [Tensor]");
        let mut list: Vec<Tensor<T>> = (0..world).map(|_| poisoned::<T>(stream, len)).collect();
        ok(comm.all_gather(&mut list[..], &source, stream), &label);
        for (from, tensor) in list.iter().enumerate() {
            assert_same(
                &download(stream, tensor),
                &data[from],
                &format!("{label}: from rank {from}"),
            );
        }

        let label = rank.what::<T>(
            len,
            "send to the next rank, recv from the previous, one Group",
        );
        let next = ((me + 1) % world) as i32;
        let previous = ((me + world - 1) % world) as i32;
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
        assert_same(&download(stream, &target), &data[previous as usize], &label);
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
        assert_same(&download(stream, &target), &expected, &label);
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
    assert_same(&download(stream, &tensor), &sum, &label);
    drop(tensor);

    let label = rank.what::<T>(len, "all_reduce_into sum (64 MiB)");
    let source = upload(stream, &data[me]);
    let mut target = poisoned::<T>(stream, len);
    ok(
        comm.all_reduce_into(&source, &mut target, ReduceOp::Sum, stream),
        &label,
    );
    assert_same(&download(stream, &target), &sum, &label);

    let root = world - 1;
    let label = rank.what::<T>(len, &format!("broadcast root {root} (64 MiB)"));
    ok(
        comm.broadcast_into(&source, &mut target, root as i32, stream),
        &label,
    );
    assert_same(&download(stream, &target), &data[root], &label);
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
    assert_same(&download(stream, &target), &parts.concat(), &label);
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
    assert_same(
        &download(stream, &target),
        &reduced(&whole, me * part, part, &fold),
        &label,
    );

    let label = rank.what::<T>(part, "all_to_all_single (64 MiB in all)");
    let mut target = poisoned::<T>(stream, world * part);
    ok(comm.all_to_all_single(&mut target, &source, stream), &label);
    let expected: Vec<T> = (0..world)
        .flat_map(|from| whole[from][me * part..(me + 1) * part].to_vec())
        .collect();
    assert_same(&download(stream, &target), &expected, &label);
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

/// An all_reduce sum of each member's `rank + 1` (as f32, 4097 elements)
/// on `comm`, whose members are `members` (parent ranks, by new rank).
fn sum_of_members(comm: &Communicator, stream: &Arc<CudaStream>, me: usize, members: &[usize]) {
    let label = format!(
        "parent rank {me}, rank {} of {}: all_reduce over {members:?}",
        comm.rank(),
        comm.world_size()
    );
    let mut tensor = upload(stream, &vec![(me + 1) as f32; 4097]);
    ok(comm.all_reduce(&mut tensor, ReduceOp::Sum, stream), &label);
    let sum: usize = members.iter().map(|m| m + 1).sum();
    assert_same(&download(stream, &tensor), &vec![sum as f32; 4097], &label);
}

/// `split_all` keeps every rank in its place; the split works on its own
/// and alongside the parent.
#[test]
fn ranks_split_all() {
    let Some(rank) = Rank::join("split-all") else {
        return;
    };
    let (world, me) = (rank.world(), rank.me());
    let child = rank
        .comm
        .split_all(None)
        .unwrap_or_else(|e| panic!("{}: split_all: {e}", rank.ranks.label()));
    assert_eq!(
        (child.rank(), child.world_size()),
        (me as i32, world as i32)
    );
    let everyone: Vec<usize> = (0..world).collect();
    sum_of_members(&child, &rank.stream, me, &everyone);
    sum_of_members(&rank.comm, &rank.stream, me, &everyone);
    child.core().finalize().expect("finalize the split");
}

/// `split_from` with a subset listed in reverse (the new ranks follow the
/// list), once with every rank listing it and once with the excluded ranks
/// passing no list (`NCCL_SPLIT_NOCOLOR`).
#[test]
fn ranks_split_from_subset_and_excluded_ranks() {
    let Some(rank) = Rank::join("split-from") else {
        return;
    };
    let (world, me) = (rank.world(), rank.me());
    // The odd ranks, last first; at world size 1 rank 0 alone.
    let members: Vec<usize> = if world == 1 {
        vec![0]
    } else {
        (0..world).filter(|r| r % 2 == 1).rev().collect()
    };
    let listed: Vec<i32> = members.iter().map(|&r| r as i32).collect();
    for nocolor in [false, true] {
        let member = members.contains(&me);
        let list: &[i32] = if nocolor && !member { &[] } else { &listed };
        let how = if nocolor {
            "excluded ranks NOCOLOR"
        } else {
            "every rank lists"
        };
        let split = rank
            .comm
            .split_from(list, None)
            .unwrap_or_else(|e| panic!("{}: split_from {list:?} ({how}): {e}", rank.ranks.label()));
        match (member, split) {
            (true, Some(child)) => {
                let position = members.iter().position(|&r| r == me).unwrap();
                assert_eq!(
                    (child.rank(), child.world_size()),
                    (position as i32, members.len() as i32),
                    "{}: split_from {list:?} ({how})",
                    rank.ranks.label()
                );
                sum_of_members(&child, &rank.stream, me, &members);
            }
            (false, None) => {}
            (member, split) => panic!(
                "{}: split_from {list:?} ({how}): member {member}, got a communicator: {}",
                rank.ranks.label(),
                split.is_some()
            ),
        }
    }
    // The parent still serves every rank.
    let everyone: Vec<usize> = (0..world).collect();
    sum_of_members(&rank.comm, &rank.stream, me, &everyone);
}

/// A nonblocking communicator made with a config: its calls may answer
/// `InProgress`, after which `wait_ready` lets the rank go on; the results
/// are right, and `finalize` ends it cleanly on every rank.
#[test]
fn ranks_nonblocking_init_with_config_and_finalize() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let ranks = support::ranks();
    let device = ranks.device();
    let config = Config::new()
        .blocking(false)
        .comm_name("ranks-nonblocking")
        .timeout(std::time::Duration::from_secs(120));
    let comm = Communicator::with_config(
        device.clone(),
        ranks.world as i32,
        ranks.unique_id("nonblocking"),
        ranks.rank as i32,
        &config,
    )
    .unwrap_or_else(|e| panic!("{}: nonblocking init: {e}", ranks.label()));
    assert!(!comm.core().is_blocking());
    let stream = device.new_stream().expect("stream");
    let world = ranks.world;
    let data = all_values::<f32>(3, world, 4097);
    let expected = reduced(&data, 0, 4097, &|v: &[f64]| v.iter().sum());
    let settle = |status: Result<Status>, what: &'static str| match status {
        Ok(Status::Success) => {}
        Ok(Status::InProgress) => comm
            .core()
            .wait_ready(what)
            .unwrap_or_else(|e| panic!("{}: {what}: wait_ready: {e}", ranks.label())),
        Err(e) => panic!("{}: {what}: {e}", ranks.label()),
    };
    for round in 0..3 {
        let mut tensor = upload(&stream, &data[ranks.rank]);
        settle(
            comm.all_reduce(&mut tensor, ReduceOp::Sum, &stream),
            "all_reduce",
        );
        assert_same(
            &download(&stream, &tensor),
            &expected,
            &format!("{}: nonblocking all_reduce, round {round}", ranks.label()),
        );
    }
    settle(comm.barrier(&stream), "barrier");
    stream.synchronize().expect("synchronize");
    comm.core()
        .finalize()
        .unwrap_or_else(|e| panic!("{}: finalize: {e}", ranks.label()));
    drop(comm);
    println!("{}: nonblocking communicator finalized", ranks.label());
}
