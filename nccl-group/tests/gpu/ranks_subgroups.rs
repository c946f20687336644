//! Sub-groups at world size N (`ProcessGroup::split_group`, `new_group`):
//! the `ranks_*` tests that run.sh runs on their own (world size 1) and
//! under `nccl-launch -n 2` and `-n 4` (see `gpu/ranks.rs`).
//!
//! * TP x DP: the world split into tensor-parallel groups of 2 (of 1 at
//!   an odd world size) and data-parallel groups across them (2 x 2 at
//!   world size 4), split from the parent's communicator
//!   (`SplitPath::Split`) and made lazily (`SplitPath::Lazy`), on blocking
//!   and nonblocking communicators: every operation, single and list
//!   forms, on both sub-groups of each rank, every element checked, each
//!   sub-group's values from its own range of seeds (values that cross
//!   from one sub-group to another show), and the parent's after;
//! * `new_group` of every rank but 0 (3 of 4 at world size 4): rank 0 gets
//!   `None` and goes on with the parent; the members run collectives and a
//!   ring on pair communicators, which meet through the sub-group's store;
//! * roots and peers named by global rank and by `GroupRank` on the
//!   sub-groups of even and odd ranks (`[1, 3]` at world size 4), every
//!   element checked, and a non-member root refused on every rank;
//! * destroy races: the parent's destroy refused while its sub-groups
//!   live; the sub-groups destroyed from several threads at once, the
//!   ranks in different orders; then `shutdown`, rank 0 leaving last.
//!
//! A sub-group whose member is killed is `gpu_subgroup_loss` (a binary of
//! its own: it launches ranks that die).
//!
//! Without a GPU every test prints `SKIP: ...` and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_group::Lifecycle;
use nccl_group::SubGroups;
use std::sync::Arc;
use std::thread;

use nccl_core::{CudaStream, ReduceOp};
use nccl_group::{CommMode, ErrorKind, GroupError, GroupRank, ProcessGroup, SplitPath};
use nccl_tensor::Tensor;
use nccl_test_support::group::ranks::{
    COMM_MODES, RankContext, STREAM_MODES, Seeds, StoreAt, join, tcp_store,
};
use nccl_test_support::group::{
    SIZES, convert, done, every_rank_values, rank_values, reduce_host, refused,
};
use nccl_test_support::tensor::{download, poison_values, upload};
use nccl_test_support::{assert_same_values, named_tests};

use super::ranks_ops::{list_forms, single_forms};

/// Where each seed range of a sub-group starts: far apart, per sub-group.
const SEED_RANGE: u64 = 1_000_000;

/// The variable that makes NCCL share a split's resources, which the
/// group answers with lazy sub-groups.
const SHARE_VARIABLE: &str = "NCCL_COMM_SPLIT_SHARE_RESOURCES";

/// The tensor-parallel size: 2, or 1 at an odd world size.
fn tp_size(world: usize) -> usize {
    if world.is_multiple_of(2) { 2 } else { 1 }
}

/// The tensor-parallel lists of a world: groups of [`tp_size`]
/// consecutive ranks.
fn tp_lists(world: usize) -> Vec<Vec<usize>> {
    let tp = tp_size(world);
    (0..world / tp)
        .map(|d| (d * tp..(d + 1) * tp).collect())
        .collect()
}

/// The data-parallel lists across the tensor-parallel ones: the ranks at
/// the same place in each.
fn dp_lists(world: usize) -> Vec<Vec<usize>> {
    let tp = tp_size(world);
    (0..tp).map(|t| (t..world).step_by(tp).collect()).collect()
}

/// The sub-group of `lists` this rank got, checked against its list.
fn split(
    ctx: &RankContext,
    parent: &ProcessGroup,
    lists: &[Vec<usize>],
    what: &str,
) -> ProcessGroup {
    let rank = ctx.rank();
    let sub = parent
        .split_group(lists)
        .unwrap_or_else(|e| panic!("{}: {what}: split_group: {e}", ctx.label()))
        .unwrap_or_else(|| panic!("{}: {what}: every rank is in one list", ctx.label()));
    let list = lists
        .iter()
        .find(|list| list.contains(&rank))
        .expect("every rank is in one list");
    assert_eq!(sub.global_ranks(), *list, "{}: {what}", ctx.label());
    assert_eq!(
        (sub.rank(), sub.world_size()),
        (
            list.iter().position(|&r| r == rank).expect("in its list"),
            list.len()
        ),
        "{}: {what}",
        ctx.label()
    );
    assert_eq!(sub.global_rank(sub.rank()), Some(rank));
    assert_eq!(sub.group_rank(rank), Some(sub.rank()));
    sub
}

/// Whether the sub-group's path is the one its parent allows: a split
/// when the parent had a communicator everywhere (and NCCL does not share
/// a split's resources), lazy otherwise.
fn check_path(ctx: &RankContext, sub: &ProcessGroup, parent_had_comm: bool) {
    let path = sub.subgroup().expect("a sub-group").path();
    let splits = parent_had_comm && std::env::var_os(SHARE_VARIABLE).is_none();
    match path {
        SplitPath::Split => assert!(splits, "{}: split without a communicator", ctx.label()),
        other => assert!(
            !splits,
            "{}: {other:?} although the parent could split",
            ctx.label()
        ),
    }
}

/// An all_reduce on `group` checked against its ranks' values.
fn checked_all_reduce(ctx: &RankContext, group: &ProcessGroup, seed: u64, what: &str) {
    let (rank, world, stream) = (group.rank(), group.world_size(), &ctx.stream);
    let len = 1031;
    let t = done(
        group.all_reduce(
            upload(stream, &convert::<f32>(&rank_values(seed, rank, len))),
            ReduceOp::Sum,
            stream,
        ),
        what,
    );
    let expected = reduce_host(ReduceOp::Sum, &every_rank_values(seed, world, len));
    assert_same_values(&download(stream, &t), &convert::<f32>(&expected), what);
}

/// The parent `{prefix}-{mode:?}` joined on `store`, after its first
/// checked all_reduce (of `seed`): its name, the group and its label.
fn first_parent(
    ctx: &RankContext,
    store: &StoreAt,
    prefix: &str,
    mode: CommMode,
    seed: u64,
) -> (String, ProcessGroup, String) {
    let name = format!("{prefix}-{mode:?}");
    let parent = join(ctx, &name, store, mode);
    let label = format!("{} ({mode:?})", ctx.label());
    checked_all_reduce(
        ctx,
        &parent,
        seed,
        &format!("{label}: the parent's first all_reduce"),
    );
    (name, parent, label)
}

/// TP x DP on `mode` communicators, split from the parent's communicator
/// (`first_collective`: after the parent's first all_reduce) or lazily.
fn tp_by_dp(ctx: &RankContext, mode: CommMode, first_collective: bool) {
    let world = ctx.world();
    let store = tcp_store(ctx);
    let name = format!("tpdp-{mode:?}-{first_collective}");
    let parent = join(ctx, &name, &store, mode);
    let label = format!(
        "{} ({mode:?}, split after a collective: {first_collective})",
        ctx.label()
    );
    if first_collective {
        checked_all_reduce(
            ctx,
            &parent,
            1,
            &format!("{label}: the parent's first all_reduce"),
        );
    }
    let (tp_lists, dp_lists) = (tp_lists(world), dp_lists(world));
    let tp = split(ctx, &parent, &tp_lists, "tensor parallel");
    let dp = split(ctx, &parent, &dp_lists, "data parallel");
    check_path(ctx, &tp, first_collective);
    check_path(ctx, &dp, first_collective);
    let color = |sub: &ProcessGroup| sub.subgroup().expect("a sub-group").color() as u64;
    let mut tp_seeds = Seeds::after((1 + color(&tp)) * SEED_RANGE);
    let mut dp_seeds = Seeds::after((10 + color(&dp)) * SEED_RANGE);
    for &len in &SIZES {
        for stream_mode in STREAM_MODES {
            for (sub, seeds, kind) in [(&tp, &mut tp_seeds, "TP"), (&dp, &mut dp_seeds, "DP")] {
                let g = sub.with_stream_mode(stream_mode);
                let what = |op: &str| {
                    format!(
                        "{label}: {kind} {} rank {} of {}: {op} ({stream_mode:?} stream, {len} elements)",
                        g.name(),
                        g.rank(),
                        g.world_size()
                    )
                };
                single_forms(ctx, &g, len, seeds, &what);
                list_forms(ctx, &g, len, seeds, &what);
            }
        }
    }
    // The parent goes on beside its sub-groups.
    checked_all_reduce(
        ctx,
        &parent,
        2,
        &format!("{label}: the parent after its sub-groups"),
    );
    ctx.stream.synchronize().expect("synchronize");
    leave(ctx, &label, &name, &parent, &[&tp, &dp]);
}

/// The end of a test's group `name`: its sub-groups `subs` destroyed,
/// then the parent shut down (the store's host leaves last), then every
/// rank meets.
fn leave(
    ctx: &RankContext,
    label: &str,
    name: &str,
    parent: &ProcessGroup,
    subs: &[&ProcessGroup],
) {
    for sub in subs {
        sub.destroy()
            .unwrap_or_else(|e| panic!("{label}: destroy {}: {e}", sub.name()));
    }
    parent
        .shutdown()
        .unwrap_or_else(|e| panic!("{label}: shutdown: {e}"));
    ctx.meet(&format!("{name}-done"));
}

/// `check` of this rank on each communicator mode.
fn on_each_mode(check: impl Fn(&RankContext, CommMode)) {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    for mode in COMM_MODES {
        check(&ctx, mode);
    }
}

named_tests! {
    ranks_subgroups_tp_by_dp_split_from_the_parent:
        on_each_mode(|ctx, mode| tp_by_dp(ctx, mode, true));
    ranks_subgroups_tp_by_dp_made_lazily: on_each_mode(|ctx, mode| tp_by_dp(ctx, mode, false));
}

/// `send` then `recv` when `send_first`, else the other way round (so
/// that two peers never both wait to receive): what `recv` received.
fn exchange<T>(send_first: bool, send: impl FnOnce(), recv: impl FnOnce() -> T) -> T {
    if send_first {
        send();
        recv()
    } else {
        let received = recv();
        send();
        received
    }
}

/// `len` values received from group rank `peer` of `group` (named by its
/// `GroupRank`) into a poisoned tensor.
fn recv_from(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    peer: usize,
    len: usize,
    what: &str,
) -> Tensor<f32> {
    let received = group.recv(
        upload(stream, &poison_values::<f32>(len)),
        GroupRank(peer),
        stream,
    );
    done(received, what)
}

/// A ring of sends and receives on the pair communicators of `group`,
/// which meet through its store: even ranks send first, odd ones
/// receive first, so no cycle of waits forms. The next rank is named by
/// its global rank (a plain `usize`), the previous by its `GroupRank`.
fn pair_ring(ctx: &RankContext, group: &ProcessGroup, seed: u64, what: &str) {
    let (rank, world, stream) = (group.rank(), group.world_size(), &ctx.stream);
    if world < 2 {
        return;
    }
    let len = 515;
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
    let send = || {
        done(
            group.send(
                upload(stream, &convert::<f32>(&rank_values(seed, rank, len))),
                group.global_rank(next).expect("a member"),
                stream,
            ),
            &format!("{what}: send to {next}"),
        );
    };
    let recv = || {
        recv_from(
            group,
            stream,
            prev,
            len,
            &format!("{what}: recv from {prev}"),
        )
    };
    let received = exchange(rank % 2 == 0, send, recv);
    assert_same_values(
        &download(stream, &received),
        &convert::<f32>(&rank_values(seed, prev, len)),
        &format!("{what}: recv from {prev}"),
    );
}

#[test]
fn ranks_subgroups_new_group_leaves_rank_0_out() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let (rank, world) = (ctx.rank(), ctx.world());
    if world < 2 {
        println!("SKIP: new_group of every rank but 0 needs world size 2 or more (it is {world})");
        return;
    }
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let (name, parent, label) = first_parent(&ctx, &store, "all-but-0", mode, 3);
        let members: Vec<usize> = (1..world).collect();
        let sub = parent
            .new_group(&members)
            .unwrap_or_else(|e| panic!("{label}: new_group: {e}"));
        match (rank, &sub) {
            (0, None) => {}
            (0, Some(sub)) => panic!("{label}: rank 0 got {}", sub.name()),
            (_, None) => panic!("{label}: a member got no sub-group"),
            (_, Some(sub)) => {
                assert_eq!((sub.rank(), sub.world_size()), (rank - 1, world - 1));
                assert_eq!(sub.global_ranks(), members);
                assert_eq!(sub.group_rank(0), None);
                check_path(&ctx, sub, true);
                for n in 0..3 {
                    let seed = 20_000 + n;
                    checked_all_reduce(
                        &ctx,
                        sub,
                        seed,
                        &format!("{label}: sub-group all_reduce {n}"),
                    );
                    pair_ring(
                        &ctx,
                        sub,
                        seed,
                        &format!("{label}: sub-group pair ring {n}"),
                    );
                }
            }
        }
        // Every rank, rank 0 included, goes on with the parent.
        checked_all_reduce(
            &ctx,
            &parent,
            4,
            &format!("{label}: the parent after new_group"),
        );
        pair_ring(
            &ctx,
            &parent,
            5,
            &format!("{label}: the parent's pair ring"),
        );
        let subs: Vec<&ProcessGroup> = sub.iter().collect();
        leave(&ctx, &label, &name, &parent, &subs);
    }
}

#[test]
fn ranks_subgroups_destroy_races() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let (rank, world) = (ctx.rank(), ctx.world());
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let (name, parent, label) = first_parent(&ctx, &store, "destroy-race", mode, 6);
        let tp = split(&ctx, &parent, &tp_lists(world), "tensor parallel");
        let dp = split(&ctx, &parent, &dp_lists(world), "data parallel");
        checked_all_reduce(&ctx, &tp, 7, &format!("{label}: TP all_reduce"));
        checked_all_reduce(&ctx, &dp, 8, &format!("{label}: DP all_reduce"));
        ctx.stream.synchronize().expect("synchronize");

        let refused = parent.destroy().expect_err("its sub-groups live");
        assert!(
            matches!(&refused, GroupError::SubGroupsAlive { subgroups, .. } if subgroups.len() == 2),
            "{label}: {refused:?}"
        );
        // The ranks destroy in different orders: even ranks DP then TP on
        // one thread, odd ranks both at once from four threads.
        if rank % 2 == 0 {
            for sub in [&dp, &tp] {
                sub.destroy()
                    .unwrap_or_else(|e| panic!("{label}: destroy {}: {e}", sub.name()));
            }
        } else {
            let outcomes: Vec<(String, Result<(), GroupError>)> = thread::scope(|scope| {
                let threads: Vec<_> = [&tp, &dp, &tp, &dp]
                    .into_iter()
                    .map(|sub| scope.spawn(move || (sub.name().to_string(), sub.destroy())))
                    .collect();
                threads
                    .into_iter()
                    .map(|t| t.join().expect("a destroy thread"))
                    .collect()
            });
            for sub in [&tp, &dp] {
                let mine: Vec<_> = outcomes.iter().filter(|(n, _)| n == sub.name()).collect();
                assert_eq!(
                    mine.iter().filter(|(_, o)| o.is_ok()).count(),
                    1,
                    "{label}: {} destroyed once: {mine:?}",
                    sub.name()
                );
                assert!(
                    mine.iter()
                        .all(|(_, o)| matches!(o, Ok(()) | Err(GroupError::Destroyed { .. }))),
                    "{label}: {mine:?}"
                );
            }
        }
        match tp.all_reduce(
            upload(&ctx.stream, &[1.0f32; 8]),
            ReduceOp::Sum,
            &ctx.stream,
        ) {
            Ok(_) => panic!("{label}: a destroyed sub-group issued an all_reduce"),
            Err(stale) => assert!(
                matches!(stale.error, GroupError::Destroyed { .. }),
                "{label}: {}",
                stale.error
            ),
        }
        // The parent still works, and ends last.
        checked_all_reduce(
            &ctx,
            &parent,
            9,
            &format!("{label}: the parent after its sub-groups"),
        );
        leave(&ctx, &label, &name, &parent, &[]);
    }
}

/// Every root and peer of a sub-group named both ways: each operation
/// from each member as root, once by its global rank (a plain `usize`,
/// torch's `src=`) and once by its [`GroupRank`] (torch's `group_src=`),
/// every element checked against the values of the member meant; and a
/// rank that is not a member refused on every rank, the tensor handed
/// back. At world size 4 the sub-groups are `[0, 2]` and `[1, 3]`, where
/// global rank 3 is group rank 1: reading one numbering as the other
/// would take the wrong rank's data or be refused.
fn roots_and_peers_by_either_numbering(ctx: &RankContext, mode: CommMode) {
    let world = ctx.world();
    let store = tcp_store(ctx);
    let name = format!("numberings-{mode:?}");
    let parent = join(ctx, &name, &store, mode);
    let label = format!("{} ({mode:?})", ctx.label());
    checked_all_reduce(
        ctx,
        &parent,
        11,
        &format!("{label}: the parent's all_reduce"),
    );
    let lists: Vec<Vec<usize>> = [(0..world).step_by(2), (1..world).step_by(2)]
        .into_iter()
        .map(Iterator::collect)
        .filter(|list: &Vec<usize>| !list.is_empty())
        .collect();
    let sub = split(ctx, &parent, &lists, "even and odd ranks");
    let (rank, size, stream) = (sub.rank(), sub.world_size(), &ctx.stream);
    let globals = sub.global_ranks();
    let len = 257;
    let mut seed = 2_000;
    for root in 0..size {
        let numberings: [(nccl_group::Rank, String); 2] = [
            (
                globals[root].into(),
                format!("global rank {}", globals[root]),
            ),
            (GroupRank(root).into(), format!("GroupRank({root})")),
        ];
        for (arg, named) in numberings {
            let what = |op: &str| format!("{label}: {op} with root {named} of {globals:?}");
            seed += 10;
            let start = if rank == root {
                convert::<f32>(&rank_values(seed, root, len))
            } else {
                poison_values(len)
            };
            let w = what("broadcast");
            let t = done(sub.broadcast(upload(stream, &start), arg, stream), &w);
            assert_same_values(
                &download(stream, &t),
                &convert::<f32>(&rank_values(seed, root, len)),
                &w,
            );

            let w = what("reduce");
            let t = done(
                sub.reduce(
                    upload(stream, &convert::<f32>(&rank_values(seed + 1, rank, len))),
                    ReduceOp::Sum,
                    arg,
                    stream,
                ),
                &w,
            );
            if rank == root {
                let expected = reduce_host(ReduceOp::Sum, &every_rank_values(seed + 1, size, len));
                assert_same_values(&download(stream, &t), &convert::<f32>(&expected), &w);
            }

            let spread = |values: Vec<f32>| if rank == root { values } else { Vec::new() };
            let w = what("gather");
            let (out, _) = done(
                sub.gather(
                    upload(stream, &spread(poison_values::<f32>(size * len))),
                    upload(stream, &convert::<f32>(&rank_values(seed + 2, rank, len))),
                    arg,
                    stream,
                ),
                &w,
            );
            if rank == root {
                let expected = every_rank_values(seed + 2, size, len).concat();
                assert_same_values(&download(stream, &out), &convert::<f32>(&expected), &w);
            }

            let w = what("scatter");
            let blocks = every_rank_values(seed + 3, size, len).concat();
            let (out, _) = done(
                sub.scatter(
                    upload(stream, &poison_values::<f32>(len)),
                    upload(stream, &spread(convert::<f32>(&blocks))),
                    arg,
                    stream,
                ),
                &w,
            );
            assert_same_values(
                &download(stream, &out),
                &convert::<f32>(&rank_values(seed + 3, rank, len)),
                &w,
            );
        }
    }
    // Sends between the first two members: to the peer by its global rank,
    // from it by its group rank.
    if size >= 2 && rank < 2 {
        let peer = 1 - rank;
        let sent = convert::<f32>(&rank_values(seed + 4, rank, len));
        let w = format!(
            "{label}: send to global rank {}, recv from GroupRank({peer})",
            globals[peer]
        );
        let send = || {
            done(sub.send(upload(stream, &sent), globals[peer], stream), &w);
        };
        let recv = || recv_from(&sub, stream, peer, len, &w);
        let received = exchange(rank == 0, send, recv);
        assert_same_values(
            &download(stream, &received),
            &convert::<f32>(&rank_values(seed + 4, peer, len)),
            &w,
        );
    }
    // A global rank that is not a member (the other list's first, or one
    // past the world at world size 1), and a group rank past the size.
    let outsider = lists
        .iter()
        .find(|list| !list.contains(&ctx.rank()))
        .map_or(world, |list| list[0]);
    for (arg, given) in [
        (
            nccl_group::Rank::from(outsider),
            format!("global rank {outsider}, not a member"),
        ),
        (
            GroupRank(size).into(),
            format!("group rank {size}, past the group's size"),
        ),
    ] {
        let w = format!("{label}: broadcast with root {arg}");
        let error = refused(
            sub.broadcast(upload(stream, &poison_values::<f32>(len)), arg, stream),
            &w,
        );
        assert_eq!(error.error.kind(), ErrorKind::InvalidArgument, "{w}");
        let message = error.error.to_string();
        assert!(message.contains(&given), "{w}: {message}");
        assert!(message.contains(&format!("{globals:?}")), "{w}: {message}");
        assert_eq!(error.buffers.len(), len, "{w}: the tensor is handed back");
    }
    ctx.stream.synchronize().expect("synchronize");
    leave(ctx, &label, &name, &parent, &[&sub]);
}

#[test]
fn ranks_subgroups_roots_and_peers_by_either_numbering() {
    on_each_mode(roots_and_peers_by_either_numbering);
}
