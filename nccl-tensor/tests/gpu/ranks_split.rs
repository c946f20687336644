//! nccl-tensor's splits and nonblocking communicators at world size N, one
//! process per rank: every test here is a `ranks_*` test, which run.sh
//! runs alone (world size 1) and as every rank of `nccl-launch -n 2` and
//! `-n 4` (on one GPU, each rank a simulated host of its own; see
//! `nccl_test_support::ranks`).

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Config, ReduceOp, Status};
use nccl_tensor::{Communicator, Result};
use nccl_test_support as support;
use nccl_test_support::tensor::matrix::ok;
use nccl_test_support::tensor::world::{Rank, all_values, reduced};
use nccl_test_support::tensor::{assert_holds, upload};

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
    assert_holds(stream, &tensor, &vec![sum as f32; 4097], &label);
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
    assert_eq!((child.rank(), child.world_size()), (me, world));
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
    for nocolor in [false, true] {
        let member = members.contains(&me);
        let list: &[usize] = if nocolor && !member { &[] } else { &members };
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
                    (position, members.len()),
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
        .with_blocking(false)
        .with_comm_name("ranks-nonblocking")
        .with_timeout(std::time::Duration::from_secs(120));
    let comm = Communicator::with_config(
        device.clone(),
        ranks.world,
        ranks.unique_id("nonblocking"),
        ranks.rank,
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
        assert_holds(
            &stream,
            &tensor,
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
