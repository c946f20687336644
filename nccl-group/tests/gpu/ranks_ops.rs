//! `ProcessGroup` at world size N, every operation: the `ranks_*` tests
//! that run.sh runs on their own (world size 1) and under `nccl-launch -n
//! 2` and `-n 4` (see `gpu/ranks.rs`). Each rank contributes values
//! that depend on its rank, the expected results are computed on the host,
//! and every element of every output is checked (small integers, so the
//! comparisons are exact).
//!
//! Every operation (each reduction, a pre-multiplied sum through `custom`,
//! broadcast from every root, reduce to every root, all_gather, gather and
//! scatter, reduce_scatter, all_to_all, their list forms, barrier) on blocking and
//! nonblocking communicators, each on the group's streams and on the
//! caller's; and 8 threads issuing operations on one group, in an order
//! every rank shares.
//!
//! Without a GPU every test prints `SKIP: ...` and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_group::SubGroups;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::{CudaStream, ReduceOp};
use nccl_group::{CommMode, GroupRank, ProcessGroup, Rank};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::ranks::{RankContext, STREAM_MODES, Seeds, join, on_mode, tcp_store};
use nccl_test_support::group::{
    SIZES, blocks_for, check_avg, check_reduce_scatter_block, convert, destroy, done,
    every_rank_values, rank_values, reduce_host, reduces,
};
use nccl_test_support::tensor::{Elem, download, poison_values, upload};
use nccl_test_support::{assert_same_values, named_tests};

/// Every operation of the group, single and list forms, on `mode`
/// communicators, through a handle on each stream mode.
fn every_op(ctx: &RankContext, mode: CommMode) {
    let store = tcp_store(ctx);
    let group = join(ctx, &format!("every-op-{mode:?}"), &store, mode);
    let mut seeds = Seeds::default();
    for &len in &SIZES {
        for stream_mode in STREAM_MODES {
            let g = group.with_stream_mode(stream_mode);
            let what = |op: &str| {
                format!(
                    "{}: {op} ({mode:?} communicators, {stream_mode:?} stream, {len} elements)",
                    ctx.label()
                )
            };
            single_forms(ctx, &g, len, &mut seeds, &what);
            list_forms(ctx, &g, len, &mut seeds, &what);
            let barrier = what("barrier");
            g.barrier(&ctx.stream)
                .unwrap_or_else(|e| panic!("{barrier}: {e}"))
                .wait()
                .unwrap_or_else(|e| panic!("{barrier}: wait: {e}"));
        }
    }
    ctx.stream.synchronize().expect("synchronize");
    destroy(&group);
    ctx.meet(&format!("every-op-{mode:?}-done"));
}

/// Group rank `root` of `group` as a root argument in one numbering or
/// the other, by turns: an even root as its global rank (a plain
/// `usize`, torch's `src=`), an odd one as a [`GroupRank`]. On a
/// sub-group (`gpu/ranks_subgroups.rs`) the two differ, and a root read
/// in the wrong numbering shows as wrong values.
pub(crate) fn root_arg(group: &ProcessGroup, root: usize) -> Rank {
    if root.is_multiple_of(2) {
        Rank::from(group.global_rank(root).expect("a root in the group"))
    } else {
        GroupRank(root).into()
    }
}

/// `values` as `T`, all_reduced by `op` on `group`.
fn all_reduced<T: Elem>(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    values: &[f64],
    op: ReduceOp,
    what: &str,
) -> Vec<T> {
    let t = done(
        group.all_reduce(upload(stream, &convert::<T>(values)), op, stream),
        what,
    );
    download(stream, &t)
}

/// `values` as `T` all_gathered on `group` into a poisoned output: the
/// output and the input.
fn all_gathered<T: Elem>(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    values: &[f64],
    what: &str,
) -> (Tensor<T>, Tensor<T>) {
    let output = poison_values::<T>(group.world_size() * values.len());
    let gathered = group.all_gather_into_tensor(
        upload(stream, &output),
        upload(stream, &convert::<T>(values)),
        stream,
    );
    done(gathered, what)
}

/// Every operation's single form on `group`, its values by the group's
/// own ranks (a sub-group's too: `gpu/ranks_subgroups.rs`), each root
/// given by [`root_arg`].
pub(crate) fn single_forms(
    ctx: &RankContext,
    group: &ProcessGroup,
    len: usize,
    seeds: &mut Seeds,
    what: &dyn Fn(&str) -> String,
) {
    let (rank, world, stream) = (group.rank(), group.world_size(), &ctx.stream);

    // all_reduce, each reduction, f32 and (but the average) i32.
    for op in ReduceOp::ALL {
        let seed = seeds.next_op();
        let expected = reduce_host(op, &every_rank_values(seed, world, len));
        let mine = rank_values(seed, rank, len);
        let w = what(&format!("all_reduce {op:?} f32"));
        check_avg(
            &w,
            &all_reduced::<f32>(group, stream, &mine, op, &w),
            &expected,
            world,
        );
        if op != ReduceOp::Avg {
            let w = what(&format!("all_reduce {op:?} i32"));
            let got = all_reduced::<i32>(group, stream, &mine, op, &w);
            assert_same_values(&got, &convert(&expected), &w);
        }
    }

    // A pre-multiplied sum (the group has none of its own: through
    // `custom`), with a multiplier that depends on the rank.
    let seed = seeds.next_op();
    let inputs = every_rank_values(seed, world, len);
    let expected: Vec<f64> = (0..len)
        .map(|i| (0..world).map(|r| (r + 1) as f64 * inputs[r][i]).sum())
        .collect();
    let w = what("pre-multiplied sum (custom)");
    let scalar = (rank + 1) as f64;
    let t = done(
        group.custom(
            "pre_mul_sum",
            ctx.device.ordinal(),
            upload(stream, &convert::<f32>(&inputs[rank])),
            stream,
            move |comm, s, t| {
                let op = comm.pre_mul_sum::<f32>(scalar)?;
                comm.all_reduce(&mut *t, &op, s)
            },
        ),
        &w,
    );
    assert_same_values(&download(stream, &t), &convert(&expected), &w);

    // broadcast from every root.
    for root in 0..world {
        let seed = seeds.next_op();
        let start = if rank == root {
            convert::<f32>(&rank_values(seed, root, len))
        } else {
            poison_values(len)
        };
        let w = what(&format!("broadcast from root {root}"));
        let t = done(
            group.broadcast(upload(stream, &start), root_arg(group, root), stream),
            &w,
        );
        assert_same_values(
            &download(stream, &t),
            &convert(&rank_values(seed, root, len)),
            &w,
        );
    }

    for (op, root) in reduces(world) {
        let seed = seeds.next_op();
        let w = what(&format!("reduce {op:?} to root {root}"));
        let t = done(
            group.reduce(
                upload(stream, &convert::<f32>(&rank_values(seed, rank, len))),
                op,
                root_arg(group, root),
                stream,
            ),
            &w,
        );
        // Only the root has a result.
        if rank == root {
            let expected = reduce_host(op, &every_rank_values(seed, world, len));
            check_avg(&w, &download(stream, &t), &expected, world);
        }
    }

    // all_gather, f32 and f16: every rank's values in rank order.
    let seed = seeds.next_op();
    let w = what("all_gather f32");
    let mine = rank_values(seed, rank, len);
    let (out, inp) = all_gathered::<f32>(group, stream, &mine, &w);
    let gathered = every_rank_values(seed, world, len).concat();
    assert_same_values(&download(stream, &out), &convert(&gathered), &w);
    assert_same_values(
        &download(stream, &inp),
        &convert(&mine),
        &format!("{w}: input"),
    );
    let seed = seeds.next_op();
    let w = what("all_gather f16");
    let (out, _) = all_gathered::<half::f16>(group, stream, &rank_values(seed, rank, len), &w);
    let gathered = every_rank_values(seed, world, len).concat();
    assert_same_values(&download(stream, &out), &convert(&gathered), &w);

    // gather and scatter from the first and the last rank: the spread
    // buffer only exists on the root (empty elsewhere).
    for root in [0, world - 1] {
        let spread = |values: Vec<f32>| if rank == root { values } else { Vec::new() };
        let seed = seeds.next_op();
        let w = what(&format!("gather to root {root}"));
        let (out, _) = done(
            group.gather(
                upload(stream, &spread(poison_values::<f32>(world * len))),
                upload(stream, &convert::<f32>(&rank_values(seed, rank, len))),
                root_arg(group, root),
                stream,
            ),
            &w,
        );
        if rank == root {
            let expected = convert(&every_rank_values(seed, world, len).concat());
            assert_same_values(&download(stream, &out), &expected, &w);
        }
        let seed = seeds.next_op();
        let w = what(&format!("scatter from root {root}"));
        let (out, _) = done(
            group.scatter(
                upload(stream, &poison_values::<f32>(len)),
                upload(
                    stream,
                    &spread(convert(&every_rank_values(seed, world, len).concat())),
                ),
                root_arg(group, root),
                stream,
            ),
            &w,
        );
        let expected = convert(&rank_values(seed, rank, len));
        assert_same_values(&download(stream, &out), &expected, &w);
    }

    // reduce_scatter, each reduction: rank r gets block r of the reduction.
    for op in ReduceOp::ALL {
        let seed = seeds.next_op();
        let w = what(&format!("reduce_scatter {op:?}"));
        let (out, _) = done(
            group.reduce_scatter_tensor(
                upload(stream, &poison_values::<f32>(len)),
                upload(
                    stream,
                    &convert::<f32>(&rank_values(seed, rank, world * len)),
                ),
                op,
                stream,
            ),
            &w,
        );
        check_reduce_scatter_block(&w, &download(stream, &out), op, seed, rank, world);
    }

    // all_to_all: block j of rank i's input lands in block i of rank j's output.
    let seed = seeds.next_op();
    let w = what("all_to_all");
    let (out, _) = done(
        group.all_to_all_single(
            upload(stream, &poison_values::<f32>(world * len)),
            upload(
                stream,
                &convert::<f32>(&rank_values(seed, rank, world * len)),
            ),
            stream,
        ),
        &w,
    );
    let expected = blocks_for(&every_rank_values(seed, world, world * len), rank, len);
    assert_same_values(&download(stream, &out), &convert(&expected), &w);
}

/// The list forms (`*_multi`) with this process's one GPU, on `group`
/// as [`single_forms`].
pub(crate) fn list_forms(
    ctx: &RankContext,
    group: &ProcessGroup,
    len: usize,
    seeds: &mut Seeds,
    what: &dyn Fn(&str) -> String,
) {
    let (rank, world, stream) = (group.rank(), group.world_size(), &ctx.stream);
    let streams = std::slice::from_ref(stream);
    let one = |values: &[f64]| vec![upload(stream, &convert::<f32>(values))];
    let pair = |out: usize, input: &[f64]| {
        vec![(
            upload(stream, &poison_values::<f32>(out)),
            upload(stream, &convert::<f32>(input)),
        )]
    };

    for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Avg] {
        let seed = seeds.next_op();
        let w = what(&format!("all_reduce_multi {op:?}"));
        let ts = done(
            group
                .multi()
                .all_reduce(one(&rank_values(seed, rank, len)), op, streams),
            &w,
        );
        assert_eq!(ts.len(), 1, "{w}");
        let expected = reduce_host(op, &every_rank_values(seed, world, len));
        check_avg(&w, &download(stream, &ts[0]), &expected, world);
    }

    for root in [0, world - 1] {
        let seed = seeds.next_op();
        let w = what(&format!("broadcast_multi from root {root}"));
        let start = if rank == root {
            rank_values(seed, root, len)
        } else {
            vec![f64::from(support::POISON); len]
        };
        let ts = done(
            group
                .multi()
                .broadcast(one(&start), root_arg(group, root), streams),
            &w,
        );
        assert_same_values(
            &download(stream, &ts[0]),
            &convert(&rank_values(seed, root, len)),
            &w,
        );

        let seed = seeds.next_op();
        let w = what(&format!("reduce_multi Max to root {root}"));
        let ts = done(
            group.multi().reduce(
                one(&rank_values(seed, rank, len)),
                ReduceOp::Max,
                root_arg(group, root),
                streams,
            ),
            &w,
        );
        if rank == root {
            let expected = reduce_host(ReduceOp::Max, &every_rank_values(seed, world, len));
            assert_same_values(&download(stream, &ts[0]), &convert(&expected), &w);
        }
    }

    let seed = seeds.next_op();
    let w = what("all_gather_into_tensor_multi");
    let ps = done(
        group
            .multi()
            .all_gather_into_tensor(pair(world * len, &rank_values(seed, rank, len)), streams),
        &w,
    );
    assert_eq!(ps.len(), 1, "{w}");
    assert_same_values(
        &download(stream, &ps[0].0),
        &convert(&every_rank_values(seed, world, len).concat()),
        &w,
    );

    let root = world - 1;
    let on_root = |len: usize| if rank == root { len } else { 0 };
    let seed = seeds.next_op();
    let w = what("gather_multi to the last rank");
    let ps = done(
        group.multi().gather(
            pair(on_root(world * len), &rank_values(seed, rank, len)),
            root_arg(group, root),
            streams,
        ),
        &w,
    );
    if rank == root {
        let expected = convert(&every_rank_values(seed, world, len).concat());
        assert_same_values(&download(stream, &ps[0].0), &expected, &w);
    }
    let seed = seeds.next_op();
    let w = what("scatter_multi from the last rank");
    let spread = every_rank_values(seed, world, len).concat();
    let ps = done(
        group.multi().scatter(
            pair(len, &spread[..on_root(spread.len())]),
            root_arg(group, root),
            streams,
        ),
        &w,
    );
    let expected = convert(&rank_values(seed, rank, len));
    assert_same_values(&download(stream, &ps[0].0), &expected, &w);

    let seed = seeds.next_op();
    let w = what("reduce_scatter_multi Sum");
    let ps = done(
        group.multi().reduce_scatter_tensor(
            pair(len, &rank_values(seed, rank, world * len)),
            ReduceOp::Sum,
            streams,
        ),
        &w,
    );
    let full = reduce_host(ReduceOp::Sum, &every_rank_values(seed, world, world * len));
    assert_same_values(
        &download(stream, &ps[0].0),
        &convert(&full[rank * len..(rank + 1) * len]),
        &w,
    );

    let seed = seeds.next_op();
    let w = what("all_to_all_single_multi");
    let ps = done(
        group.multi().all_to_all_single(
            pair(world * len, &rank_values(seed, rank, world * len)),
            streams,
        ),
        &w,
    );
    let expected = blocks_for(&every_rank_values(seed, world, world * len), rank, len);
    assert_same_values(&download(stream, &ps[0].0), &convert(&expected), &w);
}

named_tests! {
    ranks_every_op_nonblocking: on_mode(every_op, CommMode::Nonblocking);
    ranks_every_op_blocking: on_mode(every_op, CommMode::Blocking);
}

/// Turns shared by the threads of one process: operation `k` of thread `t`
/// is issued at turn `k * THREADS + t` on every rank, so every rank issues
/// the group's collectives in the same order although 8 threads issue
/// them (the group serialises concurrent callers only in the order they
/// come, which differs between processes).
struct Turns {
    next: Mutex<u64>,
    moved: Condvar,
}

impl Turns {
    fn wait_for(&self, turn: u64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        while *next != turn {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{what}: turn {turn} never came (at {})",
                *next
            );
            next = self
                .moved
                .wait_timeout(next, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn pass(&self) {
        *self.next.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.moved.notify_all();
    }
}

/// 8 threads, each on a stream of its own, issue collectives on one group
/// and wait for and check their results concurrently; only the issuing
/// takes turns (in an order every rank shares).
#[test]
fn ranks_eight_threads_issue_on_one_group() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 12;
    const LEN: usize = 1025;
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    let group = join(&ctx, "threads", &store, CommMode::Nonblocking);
    let turns = Turns {
        next: Mutex::new(0),
        moved: Condvar::new(),
    };
    let (rank, world) = (ctx.rank(), ctx.world());
    thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (group, turns, ctx) = (&group, &turns, &ctx);
                scope.spawn(move || {
                    let stream = ctx.device.new_stream().expect("stream");
                    for round in 0..ROUNDS {
                        let turn = (round * THREADS + t) as u64;
                        let seed = 50_000 + turn;
                        let kind = (t + round) % 5;
                        let root = (t + round) % world;
                        let what = format!("{}: thread {t} round {round} (op {kind})", ctx.label());
                        // Everything but the issue runs concurrently.
                        let single =
                            upload(&stream, &convert::<f32>(&rank_values(seed, rank, LEN)));
                        let wide = upload(
                            &stream,
                            &convert::<f32>(&rank_values(seed, rank, world * LEN)),
                        );
                        let out_wide = upload(&stream, &poison_values::<f32>(world * LEN));
                        let out_one = upload(&stream, &poison_values::<f32>(LEN));
                        turns.wait_for(turn, &what);
                        let (got, expected) = match kind {
                            0 => {
                                let issued = group.all_reduce(single, ReduceOp::Sum, &stream);
                                turns.pass();
                                let t = done(issued, &what);
                                (
                                    download(&stream, &t),
                                    reduce_host(
                                        ReduceOp::Sum,
                                        &every_rank_values(seed, world, LEN),
                                    ),
                                )
                            }
                            1 => {
                                let issued =
                                    group.all_gather_into_tensor(out_wide, single, &stream);
                                turns.pass();
                                let (out, _) = done(issued, &what);
                                (
                                    download(&stream, &out),
                                    every_rank_values(seed, world, LEN).concat(),
                                )
                            }
                            2 => {
                                let start = if rank == root { single } else { out_one };
                                let issued = group.broadcast(start, root, &stream);
                                turns.pass();
                                let t = done(issued, &what);
                                (download(&stream, &t), rank_values(seed, root, LEN))
                            }
                            3 => {
                                let issued = group.reduce_scatter_tensor(
                                    out_one,
                                    wide,
                                    ReduceOp::Max,
                                    &stream,
                                );
                                turns.pass();
                                let (out, _) = done(issued, &what);
                                let full = reduce_host(
                                    ReduceOp::Max,
                                    &every_rank_values(seed, world, world * LEN),
                                );
                                (
                                    download(&stream, &out),
                                    full[rank * LEN..(rank + 1) * LEN].to_vec(),
                                )
                            }
                            _ => {
                                let issued = group.all_to_all_single(out_wide, wide, &stream);
                                turns.pass();
                                let (out, _) = done(issued, &what);
                                let expected = blocks_for(
                                    &every_rank_values(seed, world, world * LEN),
                                    rank,
                                    LEN,
                                );
                                (download(&stream, &out), expected)
                            }
                        };
                        assert_same_values(&got, &convert::<f32>(&expected), &what);
                    }
                    stream.synchronize().expect("synchronize");
                })
            })
            .collect();
        for (t, handle) in handles.into_iter().enumerate() {
            if let Err(panic) = handle.join() {
                eprintln!("{}: thread {t} failed", ctx.label());
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert_eq!(
        *turns.next.lock().unwrap_or_else(PoisonError::into_inner),
        (THREADS * ROUNDS) as u64
    );
    destroy(&group);
    ctx.meet("threads-done");
}
