//! `ProcessGroup` at world size N: the `ranks_*` tests.
//!
//! The GPU bundle's run.sh runs each `ranks_*` test three ways: on its own
//! (world size 1), and under `nccl-launch -n 2` and `-n 4`, one process per
//! rank running only that test (with one GPU, every rank is a simulated host
//! on GPU 0 and NCCL forms a real N-rank communicator over its socket
//! transport). Every test therefore works at any world size: each rank
//! contributes values that depend on its rank, the expected results are
//! computed on the host, and every element of every output is checked
//! (small integers, so the comparisons are exact).
//!
//! * rendezvous over the TCP store (`ProcessGroup::from_env`,
//!   `from_env_with`) and over the file store in the launch's folder;
//! * send/recv between every ordered pair of ranks, single and list forms;
//! * a barrier that returns before the last rank reached it fails;
//! * destroy, then re-create under the same name; abort, then re-create;
//! * the scenario of `gpu_group_multi.rs` (a binary of its own)'s `multi_gpu_process_child`.
//!
//! Every operation's values at world size N, and 8 threads issuing them on
//! one group, are in `gpu/ranks_ops.rs`.
//!
//! Without a GPU every test prints `SKIP: ...` and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_group::Lifecycle;
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use nccl_group::{
    CommMode, GroupError, GroupOptions, ProcessGroup, RendezvousConfig, StoreSpec, StreamMode,
};
use nccl_test_support as support;
use nccl_test_support::assert_same_values;
use nccl_test_support::group::ranks::{
    COMM_MODES, OP_TIMEOUT, RankContext, STORE_TIMEOUT, StoreAt, config_from, connect, join,
    launch_vars, launched, options, tcp_store,
};
use nccl_test_support::group::{
    Closed, SIZES, assert_closed_error, convert, destroy, done, every_call_refused,
    process_scenario, rank_values, refused, works,
};
use nccl_test_support::processes::{publish, unix_us};
use nccl_test_support::tensor::{download, poison_values, upload};

/// The scenario of `ProcessGroup::from_env`: ops, then destroy, then the
/// launch's folder barrier before rank 0's store goes.
fn from_env_scenario(ctx: &RankContext, group: &ProcessGroup, what: &str) {
    assert_eq!(
        (group.rank(), group.world_size()),
        (ctx.rank(), ctx.world()),
        "{}: {what}: the group's rank and world size",
        ctx.label()
    );
    assert!(
        format!("{group:?}").contains("generation: 0"),
        "{}: {group:?}",
        ctx.label()
    );
    works(group, &ctx.stream, what);
    destroy(group);
    ctx.meet(&format!("{what}-done"));
}

/// `ProcessGroup::from_env`: the torchrun variables, rank 0 hosting the TCP
/// store on `MASTER_PORT`. On its own (world 1, no variables) the call
/// must fail naming `WORLD_SIZE`; the group is then made the same way over
/// a world-of-one configuration.
#[test]
fn ranks_from_env_over_the_tcp_store() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let group = if launched() {
        let config = RendezvousConfig::from_env()
            .unwrap_or_else(|e| panic!("{}: RendezvousConfig::from_env: {e}", ctx.label()));
        assert_eq!(
            (config.rank, config.world_size, config.local_rank),
            (ctx.rank(), ctx.world(), ctx.ranks.local_rank),
            "{}",
            ctx.label()
        );
        assert!(
            matches!(&config.store, StoreSpec::Tcp { addr, .. } if addr == "127.0.0.1"),
            "{}: {config:?}",
            ctx.label()
        );
        ProcessGroup::from_env("from-env")
            .unwrap_or_else(|e| panic!("{}: ProcessGroup::from_env: {e}", ctx.label()))
    } else {
        let error = ProcessGroup::from_env("from-env")
            .expect_err("from_env without the launch variables must fail");
        assert!(error.to_string().contains("WORLD_SIZE"), "{error}");
        let store = tcp_store(&ctx);
        ProcessGroup::builder("from-env")
            .rank(0)
            .world_size(1)
            .store(store.store)
            .store_address(store.address)
            .options(GroupOptions::default().with_timeout(STORE_TIMEOUT))
            .build()
            .expect("a world of one over the TCP store")
    };
    from_env_scenario(&ctx, &group, "from_env");
}

/// `nccl_group::communicator`: a bare nccl-tensor communicator from the
/// launch variables (rank 0's unique id met through the store), whose
/// all_reduce every rank checks, finalized together before its drop; then
/// `ProcessGroup::from_config` over the same configuration, whose
/// `local_rank` is the launch's (and `new`'s is unknown).
#[test]
fn ranks_bare_communicator_and_local_rank_from_the_launch_variables() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let config = config_from(&ctx, launch_vars());
    let comm = nccl_group::communicator(&config, &ctx.device, "bare")
        .unwrap_or_else(|e| panic!("{}: nccl_group::communicator: {e}", ctx.label()));
    assert_eq!(
        (comm.rank(), comm.world_size()),
        (ctx.rank(), ctx.world()),
        "{}",
        ctx.label()
    );
    let mut tensor = upload(&ctx.stream, &[ctx.rank() as f32 + 1.0; 16]);
    let _ = comm
        .all_reduce(&mut tensor, nccl_core::ReduceOp::Sum, &ctx.stream)
        .unwrap_or_else(|e| panic!("{}: all_reduce: {e}", ctx.label()));
    let world = ctx.world() as f32;
    assert_eq!(
        download(&ctx.stream, &tensor),
        vec![world * (world + 1.0) / 2.0; 16],
        "{}: the bare communicator's all_reduce",
        ctx.label()
    );
    comm.core()
        .finalize()
        .unwrap_or_else(|e| panic!("{}: finalize: {e}", ctx.label()));
    drop(comm);
    ctx.meet("bare-done");

    let group = ProcessGroup::builder("from-config")
        .options(options(CommMode::Nonblocking))
        .config(&config)
        .build()
        .unwrap_or_else(|e| panic!("{}: GroupBuilder::config: {e}", ctx.label()));
    assert_eq!(
        group.local_rank(),
        Some(ctx.ranks.local_rank),
        "{}",
        ctx.label()
    );
    from_env_scenario(&ctx, &group, "from_config");
    drop(group);
    if !launched() {
        let store = tcp_store(&ctx);
        let by_hand = ProcessGroup::builder("by-hand")
            .rank(0)
            .world_size(1)
            .store(store.store)
            .store_address(store.address)
            .options(options(CommMode::Nonblocking))
            .build()
            .expect("a world of one over the TCP store");
        assert_eq!(by_hand.local_rank(), None);
    }
}

/// `ProcessGroup::from_env_with` passes its options through: blocking
/// communicators on the caller's stream, over the TCP store.
#[test]
fn ranks_from_env_with_options() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let options = options(CommMode::Blocking).with_stream_mode(StreamMode::Caller);
    let group = if launched() {
        ProcessGroup::builder("from-env-with")
            .options(options)
            .config(&RendezvousConfig::from_env().expect("the launch variables"))
            .build()
            .unwrap_or_else(|e| panic!("{}: ProcessGroup::from_env_with: {e}", ctx.label()))
    } else {
        let store = tcp_store(&ctx);
        ProcessGroup::builder("from-env-with")
            .rank(0)
            .world_size(1)
            .store(store.store)
            .store_address(store.address)
            .options(options)
            .build()
            .expect("a world of one over the TCP store")
    };
    assert_eq!(group.options().comm_mode, CommMode::Blocking);
    assert_eq!(group.stream_mode(), StreamMode::Caller);
    from_env_scenario(&ctx, &group, "from_env_with");
}

/// The file store (`NCCL_RS_STORE=file:<dir>`, read the torchrun way) in
/// the launch's shared folder: two groups meet in it, one per kind of
/// communicator.
#[test]
fn ranks_rendezvous_over_the_file_store() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let own_dir = tempfile::tempdir().expect("a temporary folder");
    let dir: PathBuf = ctx
        .ranks
        .dir
        .as_ref()
        .map_or_else(|| own_dir.path().to_path_buf(), |d| d.join("file-store"));
    let spec = format!("file:{}", dir.display());
    let vars = launch_vars();
    // A launch by hand names no job: the file store needs a namespace.
    let config = config_from(&ctx, move |name| match name {
        "NCCL_RS_STORE" => Some(spec.clone()),
        "NCCL_RS_NAMESPACE" => Some("file-store-test".to_owned()),
        _ => vars(name),
    });
    assert_eq!(config.store, StoreSpec::File { dir: dir.clone() });
    let store = connect(&ctx, &config);
    for mode in COMM_MODES {
        let name = format!("file-store-{mode:?}");
        let group = join(&ctx, &name, &store, mode);
        works(
            &group,
            &ctx.stream,
            &format!("{name} over {}", dir.display()),
        );
        destroy(&group);
    }
    ctx.meet("file-store-done");
}

/// Sends from every rank to every other, one ordered pair at a time in an
/// order every rank shares (`src` major, `dst` minor): each step involves
/// two ranks whose earlier steps all come earlier in that order, so
/// nothing waits on a step that cannot happen.
fn every_ordered_pair(ctx: &RankContext, group: &ProcessGroup, multi: bool, what: &str, base: u64) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let streams = std::slice::from_ref(stream);
    for &len in &SIZES {
        for src in 0..world {
            for dst in (0..world).filter(|&d| d != src) {
                if rank != src && rank != dst {
                    continue;
                }
                let seed = base + (src * world + dst) as u64;
                let data = convert::<f32>(&rank_values(seed, src, len));
                let w = format!(
                    "{}: {what}: {} {src} -> {dst} ({len} elements)",
                    ctx.label(),
                    if multi {
                        "send_multi/recv_multi"
                    } else {
                        "send/recv"
                    }
                );
                if rank == src {
                    let sent = if multi {
                        let mut ts = done(
                            group
                                .multi()
                                .send(vec![upload(stream, &data)], dst, streams),
                            &w,
                        );
                        assert_eq!(ts.len(), 1, "{w}");
                        ts.remove(0)
                    } else {
                        done(group.send(upload(stream, &data), dst, stream), &w)
                    };
                    assert_same_values(
                        &download(stream, &sent),
                        &data,
                        &format!("{w}: the sent tensor"),
                    );
                } else {
                    let got = if multi {
                        let mut ts = done(
                            group.multi().recv(
                                vec![upload(stream, &poison_values::<f32>(len))],
                                src,
                                streams,
                            ),
                            &w,
                        );
                        assert_eq!(ts.len(), 1, "{w}");
                        ts.remove(0)
                    } else {
                        done(
                            group.recv(upload(stream, &poison_values::<f32>(len)), src, stream),
                            &w,
                        )
                    };
                    assert_same_values(&download(stream, &got), &data, &format!("{w}: received"));
                }
            }
        }
    }
}

/// send/recv between every ordered pair of ranks, single and list forms,
/// on both kinds of communicator (and through a caller's-stream handle);
/// a send to this rank itself is refused with the tensor handed back.
#[test]
fn ranks_send_recv_between_every_ordered_pair() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for (i, mode) in COMM_MODES.into_iter().enumerate() {
        let group = join(&ctx, &format!("pairs-{mode:?}"), &store, mode);
        let what = format!("{mode:?} communicators");
        let base = 10_000 * (i as u64 + 1);
        every_ordered_pair(&ctx, &group, false, &what, base);
        every_ordered_pair(&ctx, &group, true, &what, base + 1000);
        let caller = group.with_stream_mode(StreamMode::Caller);
        every_ordered_pair(
            &ctx,
            &caller,
            false,
            &format!("{what}, caller's stream"),
            base + 2000,
        );

        let data = convert::<f32>(&rank_values(7, ctx.rank(), 33));
        let e = refused(
            group.send(upload(&ctx.stream, &data), ctx.rank(), &ctx.stream),
            "send to itself",
        );
        assert!(
            matches!(
                e.error,
                GroupError::InvalidArgument {
                    argument: "dst",
                    ..
                }
            ),
            "{}: send to itself: {:?}",
            ctx.label(),
            e.error
        );
        assert_same_values(
            &download(&ctx.stream, &e.buffers),
            &data,
            &format!("{}: the tensor a refused send hands back", ctx.label()),
        );
        ctx.stream.synchronize().expect("synchronize");
        destroy(&group);
    }
    ctx.meet("pairs-done");
}

/// The group's barrier returns on no rank before every rank has called it:
/// rank r calls it r x 150 ms late and publishes when; after the barrier
/// completes, every rank finds every call time in the past. On both kinds
/// of communicator, waited for with `Work::wait` then with
/// `Work::synchronize`.
#[test]
fn ranks_barrier_waits_for_every_rank() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let group = join(&ctx, &format!("barrier-{mode:?}"), &store, mode);
        // The first barrier creates the communicator.
        group
            .barrier(&ctx.stream)
            .and_then(|work| work.synchronize(OP_TIMEOUT))
            .unwrap_or_else(|e| panic!("{}: first barrier: {e}", ctx.label()));
        for round in 0..2 {
            let tag = format!("barrier-{mode:?}-{round}");
            ctx.meet(&format!("{tag}-start"));
            thread::sleep(Duration::from_millis(150) * ctx.rank() as u32);
            let called = unix_us();
            if let Some(dir) = &ctx.ranks.dir {
                publish(
                    dir,
                    &format!("{tag}.called.{}", ctx.rank()),
                    &called.to_string(),
                );
            }
            let work = group
                .barrier(&ctx.stream)
                .unwrap_or_else(|e| panic!("{}: {tag}: {e}", ctx.label()));
            if round == 0 {
                work.wait()
                    .unwrap_or_else(|e| panic!("{}: {tag}: wait: {e}", ctx.label()));
                ctx.stream.synchronize().expect("synchronize");
            } else {
                work.synchronize(OP_TIMEOUT)
                    .unwrap_or_else(|e| panic!("{}: {tag}: synchronize: {e}", ctx.label()));
            }
            let passed = unix_us();
            let Some(dir) = &ctx.ranks.dir else {
                continue;
            };
            for r in 0..ctx.world() {
                let path = dir.join(format!("{tag}.called.{r}"));
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                    panic!(
                        "{}: {tag}: rank {r} had not published its call time ({e}) when the barrier \
                         completed: the barrier did not wait for it",
                        ctx.label()
                    )
                });
                let their: u64 = text.trim().parse().expect("a time in microseconds");
                assert!(
                    passed >= their,
                    "{}: {tag} ({mode:?} communicators): completed at {passed} us, before rank {r} \
                     called it at {their} us",
                    ctx.label()
                );
            }
        }
        destroy(&group);
    }
    ctx.meet("barrier-done");
}

/// The group `name` joined again on `store` once its first generation
/// closed: the next generation, which works.
fn rejoined(ctx: &RankContext, name: &str, store: &StoreAt, mode: CommMode) -> ProcessGroup {
    let fresh = join(ctx, name, store, mode);
    assert!(
        format!("{fresh:?}").contains("generation: 1"),
        "{}: {fresh:?}",
        ctx.label()
    );
    works(&fresh, &ctx.stream, &format!("{name} re-created"));
    fresh
}

/// Every rank destroys its group (collectively), every later call fails
/// with `Destroyed`, and a group re-created under the same name (the next
/// generation) works; on both kinds of communicator.
#[test]
fn ranks_destroy_then_recreate_under_the_same_name() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let name = format!("recreated-{mode:?}");
        let group = join(&ctx, &name, &store, mode);
        works(&group, &ctx.stream, &format!("{name} before destroy"));
        destroy(&group);
        every_call_refused(&group, &ctx.stream, Closed::Destroyed);
        let again = group.destroy().expect_err("a second destroy fails");
        assert_closed_error(&again, &group, Closed::Destroyed, "second destroy");
        group
            .abort()
            .expect("abort of a destroyed group is a no-op");

        let fresh = rejoined(&ctx, &name, &store, mode);
        destroy(&fresh);
    }
    ctx.meet("recreated-done");
}

/// Every rank aborts its group (from another thread) once all are idle;
/// every later call fails; a group re-created under the same name works,
/// and keeps working after the aborted one is dropped; on both kinds of
/// communicator.
#[test]
fn ranks_abort_then_recreate_under_the_same_name() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let name = format!("aborted-{mode:?}");
        let group = join(&ctx, &name, &store, mode);
        works(&group, &ctx.stream, &format!("{name} before abort"));
        ctx.meet(&format!("{name}-idle"));
        let other = group.clone();
        support::within(
            "abort from another thread",
            Duration::from_secs(60),
            move || other.abort(),
        )
        .unwrap_or_else(|e| panic!("{}: abort: {e}", ctx.label()));
        every_call_refused(&group, &ctx.stream, Closed::Aborted);
        let error = group.destroy().expect_err("destroy after abort fails");
        assert_closed_error(&error, &group, Closed::Aborted, "destroy after abort");
        group.abort().expect("a second abort is a no-op");
        ctx.meet(&format!("{name}-aborted"));

        let fresh = rejoined(&ctx, &name, &store, mode);
        drop(group);
        works(
            &fresh,
            &ctx.stream,
            &format!("{name} re-created, after dropping the aborted one"),
        );
        destroy(&fresh);
    }
    ctx.meet("aborted-done");
}

/// The scenario of `gpu_group_multi.rs` (a binary of its own)'s `multi_gpu_process_child` at any
/// world size: `ProcessGroup::from_env`, all_reduce, broadcast from the last
/// rank, all_gather in f16, send/recv both ways between ranks 0 and 1,
/// barrier, then a collective destroy after which every call is refused.
#[test]
fn ranks_process_scenario() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let group = if launched() {
        ProcessGroup::from_env("test")
            .unwrap_or_else(|e| panic!("{}: ProcessGroup::from_env: {e}", ctx.label()))
    } else {
        let store = tcp_store(&ctx);
        ProcessGroup::builder("test")
            .rank(0)
            .world_size(1)
            .store(store.store)
            .store_address(store.address)
            .options(GroupOptions::default())
            .build()
            .expect("a world of one over the TCP store")
    };
    assert_eq!(
        (group.rank(), group.world_size()),
        (ctx.rank(), ctx.world())
    );
    let label = ctx.label();
    process_scenario(&group, &ctx.stream, &label);
    destroy(&group);
    every_call_refused(&group, &ctx.stream, Closed::Destroyed);
    println!("{label}: destroyed");
    ctx.meet("scenario-done");
}
