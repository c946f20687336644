//! Mismatched collectives at world size N (issue 28): the last rank
//! issues something else as collective 57 of 120 mixed collectives
//! (all_reduce, all_gather_into_tensor, broadcast): more elements, int32
//! for float, a broadcast for an all_reduce, another root, another
//! reduction, or nothing (it skips it).
//!
//! * With default options (the mismatch check, `GroupOptions::mismatch_check`,
//!   both communicator modes), each collective read on the host
//!   (`wait()`, then `to_vec`): every rank gets an error of kind `Mismatch`
//!   naming the last rank and collective 57 when it reads collective 57,
//!   every earlier read passes, and no rank reads collective 57 as a
//!   success, the count mismatch (which hangs NCCL) included.
//! * With the collective check (`GroupOptions::collective_checks`, K = 1
//!   and 16, both communicator modes; the mismatch check off), every rank gets
//!   `GroupError::Mismatch` naming the last rank and collective 57, from
//!   its check of a collective between 57 and 57 + K - 1; with K = 1
//!   collective 57 itself is refused on every rank, so no rank gets an
//!   `Ok` with mixed data. Without a mismatch the check passes all 120.
//! * Without either, a mismatch that hangs NCCL fails the group on its
//!   timeout, and the failure's report names the divergence from the
//!   ranks' last records (a count mismatch hangs, as seen on the H200;
//!   the others are reported as they come: NCCL may finish a data type
//!   or reduction mismatch with mixed data).
//! * A stopped rank: the failure report carries NCCL's RAS view, or one
//!   line saying why there is none.
//!
//! `ranks_*` tests: run.sh runs them alone (a world of one: only the
//! agreeing run) and under `nccl-launch -n 2` and `-n 4`.

use nccl_group::Lifecycle;
use std::time::Duration;

use nccl_core::ReduceOp;
use nccl_group::analysis::Divergence;
use nccl_group::ras::RasReport;
use nccl_group::{
    CommMode, ErrorKind, FailureCause, GroupError, GroupOptions, Liveness, OpBuffers, OpResult,
    ProcessGroup,
};
use nccl_tensor::Tensor;
use nccl_test_support::group::destroy;
use nccl_test_support::group::ranks::{COMM_MODES, RankContext, StoreAt, options, tcp_store};
use nccl_test_support::processes::{await_mark, publish};

/// Collectives each rank issues.
const ISSUED: u64 = 120;
/// The collective the last rank issues differently.
const AT: u64 = 57;
/// Waits that only a hang outlasts.
const PATIENCE: Duration = Duration::from_secs(120);
/// The operation timeout of the runs without the check: what a hang costs.
const HANG_TIMEOUT: Duration = Duration::from_secs(5);

/// What the last rank does to collective [`AT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Count,
    DataType,
    Operation,
    Root,
    Reduction,
    Skip,
}

impl Fault {
    const ALL: [Fault; 6] = [
        Fault::Count,
        Fault::DataType,
        Fault::Operation,
        Fault::Root,
        Fault::Reduction,
        Fault::Skip,
    ];

    /// The difference the report names (`None`: a skip, whose next
    /// collective differs in its operation).
    fn difference(self) -> &'static str {
        match self {
            Fault::Count => "element count",
            Fault::DataType => "data type",
            Fault::Root => "root",
            Fault::Reduction => "reduction",
            Fault::Operation | Fault::Skip => "operation",
        }
    }
}

/// One collective as a rank issues it.
#[derive(Clone, Copy, Debug)]
enum Planned {
    AllReduce {
        count: usize,
        int32: bool,
        max: bool,
    },
    AllGather,
    Broadcast {
        root: usize,
    },
}

const ALL_REDUCE: Planned = Planned::AllReduce {
    count: 1024,
    int32: false,
    max: false,
};

/// What every rank issues as collective `n` (the root case broadcasts at
/// [`AT`], where the others all_reduce).
fn base(n: u64, fault: Option<Fault>) -> Planned {
    if fault == Some(Fault::Root) && n == AT {
        return Planned::Broadcast { root: 0 };
    }
    match n % 3 {
        0 => ALL_REDUCE,
        1 => Planned::AllGather,
        _ => Planned::Broadcast { root: 0 },
    }
}

/// What `rank` issues, in order; the last rank of `world` has `fault`.
fn plan(rank: usize, world: usize, fault: Option<Fault>) -> Vec<Planned> {
    (0..ISSUED)
        .filter_map(|n| {
            let planned = base(n, fault);
            let Some(fault) = fault.filter(|_| rank + 1 == world && n == AT) else {
                return Some(planned);
            };
            Some(match fault {
                Fault::Count => Planned::AllReduce {
                    count: 1025,
                    int32: false,
                    max: false,
                },
                Fault::DataType => Planned::AllReduce {
                    count: 1024,
                    int32: true,
                    max: false,
                },
                Fault::Operation => Planned::Broadcast { root: 0 },
                Fault::Root => Planned::Broadcast { root: 1 },
                Fault::Reduction => Planned::AllReduce {
                    count: 1024,
                    int32: false,
                    max: true,
                },
                Fault::Skip => return None,
            })
        })
        .collect()
}

/// The operation's error, or (after the caller's stream waits for it,
/// and first the CPU when `synchronize`) nothing.
fn finish<B: OpBuffers>(result: OpResult<B>, synchronize: bool) -> Result<(), GroupError> {
    let work = result.map_err(Into::into)?;
    if synchronize {
        work.synchronize(PATIENCE)?;
    }
    work.wait().map(drop)
}

/// Issues `planned` on tensors of ones.
fn issue(
    ctx: &RankContext,
    group: &ProcessGroup,
    planned: Planned,
    sync: bool,
) -> Result<(), GroupError> {
    let stream = &ctx.stream;
    let ones =
        |len: usize| Tensor::<f32>::from_host(stream, &vec![1.0; len], &[len]).expect("a tensor");
    match planned {
        Planned::AllReduce { count, int32, max } => {
            let op = if max { ReduceOp::Max } else { ReduceOp::Sum };
            match int32 {
                false => finish(group.all_reduce(ones(count), op, stream), sync),
                true => {
                    let ints = Tensor::<i32>::from_host(stream, &vec![1; count], &[count])
                        .expect("a tensor");
                    finish(group.all_reduce(ints, op, stream), sync)
                }
            }
        }
        Planned::AllGather => {
            let output = Tensor::<f32>::zeros(stream, &[256 * ctx.world()]).expect("a tensor");
            finish(
                group.all_gather_into_tensor(output, ones(256), stream),
                sync,
            )
        }
        Planned::Broadcast { root } => finish(group.broadcast(ones(1024), root, stream), sync),
    }
}

/// Which check a run's group has.
#[derive(Clone, Copy)]
enum Check {
    /// The default options: the mismatch check.
    Default,
    /// The collective check every `K` collectives, the mismatch check off.
    Every(u32),
    /// Neither, with a short operation timeout: what a hang costs.
    Off,
}

/// Joins `name` with `check`.
fn join(
    ctx: &RankContext,
    store: &StoreAt,
    name: &str,
    mode: CommMode,
    check: Check,
) -> ProcessGroup {
    join_with(ctx, store, name, checked_options(mode, check))
}

/// The options of a group of `mode` with `check`.
fn checked_options(mode: CommMode, check: Check) -> GroupOptions {
    match check {
        Check::Default => options(mode),
        Check::Every(every) => options(mode)
            .with_collective_checks(every)
            .with_mismatch_check(false),
        Check::Off => options(mode)
            .with_mismatch_check(false)
            .with_op_timeout(HANG_TIMEOUT),
    }
}

/// The group `name` over `store`, with `options`.
fn join_with(
    ctx: &RankContext,
    store: &StoreAt,
    name: &str,
    options: GroupOptions,
) -> ProcessGroup {
    ProcessGroup::builder(name)
        .rank(ctx.rank())
        .world_size(ctx.world())
        .store(std::sync::Arc::clone(&store.store))
        .store_address(store.address.clone())
        .options(options)
        .build()
        .unwrap_or_else(|e| panic!("{}: joining {name}: {e}", ctx.label()))
}

/// The agreeing run, then each fault at every world size above 1, with
/// the check every `every` collectives on both communicator modes.
fn checked(every: u32) {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    let (world, last) = (ctx.world(), ctx.world() - 1);
    for mode in COMM_MODES {
        let name = format!("checked-{every}-{mode:?}-agree");
        let group = join(&ctx, &store, &name, mode, Check::Every(every));
        for (n, planned) in plan(ctx.rank(), world, None).into_iter().enumerate() {
            issue(&ctx, &group, planned, false)
                .unwrap_or_else(|e| panic!("{}: {name}: collective {n}: {e}", ctx.label()));
        }
        ctx.stream.synchronize().expect("synchronize");
        destroy(&group);
        ctx.meet(&name);
        if world == 1 {
            continue;
        }
        for fault in Fault::ALL {
            let name = format!("checked-{every}-{mode:?}-{fault:?}");
            let what = format!("{}: {name}", ctx.label());
            let group = join(&ctx, &store, &name, mode, Check::Every(every));
            let mut stopped = None;
            for (call, planned) in plan(ctx.rank(), world, Some(fault)).into_iter().enumerate() {
                match issue(&ctx, &group, planned, false) {
                    Ok(()) => {}
                    Err(GroupError::Mismatch(mismatch)) => {
                        stopped = Some((call, mismatch));
                        break;
                    }
                    Err(other) => panic!("{what}: call {call}: not a mismatch: {other}"),
                }
            }
            let (call, mismatch) =
                stopped.unwrap_or_else(|| panic!("{what}: every call passed the check"));
            println!("{what}: call {call}: {mismatch}");
            let (first, found) = mismatch.checked;
            let k = u64::from(every);
            assert!(
                (AT..AT + k).contains(&found),
                "{what}: found by the check of #{found}"
            );
            assert_eq!(
                found + 1 - first,
                k,
                "{what}: the check covers K collectives"
            );
            let divergence = &mismatch.divergence;
            assert_eq!(divergence.collective_seq, AT, "{what}: {divergence}");
            let named: Vec<usize> = divergence.others.iter().map(|d| d.rank).collect();
            assert_eq!(named, [last], "{what}: {divergence}");
            let text = divergence.to_string();
            assert!(
                text.ends_with(&format!("(the {} differs)", fault.difference())),
                "{what}: {text}"
            );
            if every == 1 && fault != Fault::Skip {
                // Refused before NCCL saw it, on every rank: no mixed data.
                assert_eq!(call as u64, AT, "{what}");
            }
            // Every later call gets the group's failure.
            let again = issue(&ctx, &group, ALL_REDUCE, false).expect_err("the group failed");
            assert!(matches!(again, GroupError::Failed(_)), "{what}: {again}");
            let _ = ctx.stream.synchronize();
            ctx.meet(&name);
            let _ = group.abort();
        }
    }
}

/// Issues `planned` on tensors of ones, waits for it on the caller's
/// stream and reads its result on the host.
fn issue_and_read(
    ctx: &RankContext,
    group: &ProcessGroup,
    planned: Planned,
) -> Result<(), GroupError> {
    let stream = &ctx.stream;
    let ones =
        |len: usize| Tensor::<f32>::from_host(stream, &vec![1.0; len], &[len]).expect("a tensor");
    let read = |tensor: Tensor<f32>| tensor.to_vec(stream).map(drop).map_err(GroupError::from);
    match planned {
        Planned::AllReduce { count, int32, max } => {
            let op = if max { ReduceOp::Max } else { ReduceOp::Sum };
            match int32 {
                false => read(group.all_reduce(ones(count), op, stream)?.wait()?),
                true => {
                    let ints = Tensor::<i32>::from_host(stream, &vec![1; count], &[count])
                        .expect("a tensor");
                    let ints = group.all_reduce(ints, op, stream)?.wait()?;
                    ints.to_vec(stream).map(drop).map_err(GroupError::from)
                }
            }
        }
        Planned::AllGather => {
            let output = Tensor::<f32>::zeros(stream, &[256 * ctx.world()]).expect("a tensor");
            let (output, _input) = group
                .all_gather_into_tensor(output, ones(256), stream)?
                .wait()?;
            read(output)
        }
        Planned::Broadcast { root } => read(group.broadcast(ones(1024), root, stream)?.wait()?),
    }
}

/// The divergence an error names: a mismatch's, or that of the failure
/// whose cause is a mismatch.
fn divergence_of(error: &GroupError) -> Option<Divergence> {
    if let GroupError::Mismatch(mismatch) = error {
        return Some(mismatch.divergence.clone());
    }
    match &error.failure()?.cause {
        FailureCause::Mismatch { divergence, .. } => Some(divergence.clone()),
        _ => None,
    }
}

/// With default options, every fault at world sizes 2 and 4 on both
/// communicator modes: each rank reads each collective on the host; every
/// read before collective 57 passes, and every rank's read of collective 57
/// fails with a `Mismatch` naming the last rank and collective 57.
#[test]
fn ranks_mismatch_default_options_fail_every_rank_at_the_collective() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    let (world, last) = (ctx.world(), ctx.world() - 1);
    for mode in COMM_MODES {
        let name = format!("default-{mode:?}-agree");
        let group = join(&ctx, &store, &name, mode, Check::Default);
        for (n, planned) in plan(ctx.rank(), world, None).into_iter().enumerate() {
            issue_and_read(&ctx, &group, planned)
                .unwrap_or_else(|e| panic!("{}: {name}: collective {n}: {e}", ctx.label()));
        }
        destroy(&group);
        ctx.meet(&name);
        if world == 1 {
            continue;
        }
        for fault in Fault::ALL {
            let name = format!("default-{mode:?}-{fault:?}");
            let what = format!("{}: {name}", ctx.label());
            let group = join(&ctx, &store, &name, mode, Check::Default);
            let failed = plan(ctx.rank(), world, Some(fault))
                .into_iter()
                .enumerate()
                .find_map(|(call, planned)| {
                    issue_and_read(&ctx, &group, planned)
                        .err()
                        .map(|error| (call, error))
                });
            let (call, error) = failed.unwrap_or_else(|| panic!("{what}: every read passed"));
            println!("{what}: call {call}: {error}");
            assert_eq!(call as u64, AT, "{what}: the first failed read: {error}");
            assert_eq!(error.kind(), ErrorKind::Mismatch, "{what}: {error}");
            let divergence = divergence_of(&error)
                .unwrap_or_else(|| panic!("{what}: no divergence named: {error}"));
            assert_eq!(divergence.collective_seq, AT, "{what}: {divergence}");
            let named: Vec<usize> = divergence.others.iter().map(|d| d.rank).collect();
            assert_eq!(named, [last], "{what}: {divergence}");
            let text = error.to_string();
            assert!(
                text.contains(&format!("rank {last}")) && text.contains(&format!("#{AT}")),
                "{what}: the message names the rank and the collective: {text}"
            );
            let _ = ctx.stream.synchronize();
            ctx.meet(&name);
            let _ = group.abort();
        }
    }
}

#[test]
fn ranks_mismatch_checked_every_collective() {
    checked(1);
}

#[test]
fn ranks_mismatch_checked_every_16_collectives() {
    checked(16);
}

/// Without the check: each collective waited for on the CPU; a hang
/// fails the group on its timeout, and the report names the divergence
/// of the ranks' records.
#[test]
fn ranks_mismatch_unchecked_timeout_report_names_the_divergence() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    if ctx.world() == 1 {
        println!(
            "SKIP: a mismatch needs 2 or more ranks (run.sh runs this under nccl-launch -n 2 and -n 4)"
        );
        return;
    }
    let store = tcp_store(&ctx);
    let (world, last) = (ctx.world(), ctx.world() - 1);
    for mode in COMM_MODES {
        for fault in Fault::ALL {
            let name = format!("unchecked-{mode:?}-{fault:?}");
            let what = format!("{}: {name}", ctx.label());
            let group = join(&ctx, &store, &name, mode, Check::Off);
            let failed = plan(ctx.rank(), world, Some(fault))
                .into_iter()
                .find_map(|planned| issue(&ctx, &group, planned, true).err());
            match failed {
                None => {
                    assert_ne!(fault, Fault::Count, "{what}: a count mismatch hangs NCCL");
                    println!("{what}: every collective returned Ok (NCCL mixed the data)");
                }
                Some(GroupError::Failed(failure)) => {
                    let details = failure
                        .wait_details(PATIENCE)
                        .expect("the failure's details");
                    println!("{what}: {failure}");
                    let answered = details.peers.len();
                    match &details.divergence {
                        Some(divergence) => {
                            assert_eq!(divergence.collective_seq, AT, "{what}: {divergence}");
                            let named: Vec<usize> =
                                divergence.others.iter().map(|d| d.rank).collect();
                            assert_eq!(named, [last], "{what}: {divergence}");
                            assert!(failure.to_string().contains(&divergence.to_string()));
                        }
                        None => assert!(
                            answered < world || fault == Fault::Skip && ctx.rank() == last,
                            "{what}: every rank answered, yet no divergence: {failure}"
                        ),
                    }
                }
                Some(other) => panic!("{what}: {other}"),
            }
            let _ = ctx.stream.synchronize();
            ctx.meet(&name);
            let _ = group.abort();
        }
    }
}

/// Rank 1 stops itself (SIGSTOP) before collective 20; the others time
/// out, and their report carries RAS's view of it, or says why not
/// (several simulated hosts share RAS's port unless each has its own
/// `NCCL_RAS_ADDR`: docs/group/ras.md). Rank 0 continues it once its
/// report is complete; rank 1 then aborts its group.
///
/// The liveness beat is off: it names a stopped rank in about a second,
/// before RAS's own timeouts have missed it, and this is the case RAS
/// serves, a hang the operation timeout found.
#[test]
fn ranks_ras_view_of_a_stopped_rank() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let Some(dir) = ctx.ranks.dir.clone().filter(|_| ctx.world() > 1) else {
        println!(
            "SKIP: a stopped rank needs 2 or more launched ranks (run.sh runs this under nccl-launch)"
        );
        return;
    };
    let store = tcp_store(&ctx);
    let options = checked_options(CommMode::Blocking, Check::Off).with_liveness(Liveness::Off);
    let group = join_with(&ctx, &store, "ras-stopped", options);
    let what = ctx.label();
    for n in 0..20 {
        issue(&ctx, &group, base(n, None), true)
            .unwrap_or_else(|e| panic!("{what}: collective {n}: {e}"));
    }
    if ctx.rank() == 1 {
        publish(&dir, "stopped-pid", &std::process::id().to_string());
        let stopped = std::process::Command::new("kill")
            .args(["-STOP", &std::process::id().to_string()])
            .status()
            .expect("kill -STOP");
        assert!(stopped.success(), "{what}: kill -STOP: {stopped}");
        // Continued by rank 0 once the others have their reports.
        let _ = group.abort();
        return;
    }
    // An all_reduce: a root's broadcast of a few kilobytes can complete
    // without its receivers.
    let error = issue(&ctx, &group, ALL_REDUCE, true).expect_err("rank 1 is stopped");
    let GroupError::Failed(failure) = error else {
        panic!("{what}: {error}");
    };
    let details = failure.wait_details(PATIENCE);
    if ctx.rank() == 0 {
        // First, so that no failed check below leaves it stopped.
        let pid = await_mark(&dir, "stopped-pid", PATIENCE).expect("rank 1's pid");
        let continued = std::process::Command::new("kill")
            .args(["-CONT", pid.trim()])
            .status()
            .expect("kill -CONT");
        assert!(continued.success(), "{what}: kill -CONT: {continued}");
    }
    let details = details.expect("the failure's details");
    println!("{what}: {failure}");
    assert!(details.lagging.contains(&1), "{what}: {failure}");
    let ras = details
        .ras
        .as_ref()
        .expect("RAS was asked (GroupOptions::ras_report)");
    let line = ras.to_string();
    assert!(!line.contains('\n'), "{what}: one line: {line}");
    match ras {
        RasReport::Json { missing, .. } => {
            assert!(missing.iter().any(|m| m.rank == 1), "{what}: {line}")
        }
        RasReport::Text { report, .. } => {
            assert!(report.contains("INCOMPLETE"), "{what}: {report}")
        }
        _ => assert!(line.starts_with("RAS unavailable: "), "{what}: {line}"),
    }
    assert!(failure.to_string().contains(&line), "{what}: {failure}");
    let _ = group.abort();
}
