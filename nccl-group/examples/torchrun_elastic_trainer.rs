//! An elastic trainer the torchft way, launched as `W` processes: the
//! first `W - 1` train as one process group, the last is a warm spare
//! (CUDA and libnccl loaded, parked in `join_grown_from_env` on the
//! group's store). With `W >= 4` the trainer of rank `W - 2` is lost at
//! step [`LOST_AT`] (it exits between steps without leaving its group, as a
//! preempted process does); the others' next all_reduce fails, they heal
//! and go on. After step [`GROW_AT`], rank 0 waits for the spare to be
//! parked (`pending_joins`, as an orchestrator that started a replacement
//! would) and every rank grows the group by it (with `ncclCommGrow` from
//! NCCL 2.29.2, else with fresh communicators), so the group is back to
//! `W - 1` ranks. Every step ends with the ranks' commit vote (`agree`),
//! torchft's `should_commit`.
//!
//! Each step all-reduces a 1 in every element from every rank and checks
//! that every element is the group's world size; a step commits only when
//! every rank found that. Every process prints what it saw; the exit
//! status is 0 when every step it took part in committed right, 1
//! otherwise, 2 when this host has no GPU `LOCAL_RANK`.
//!
//! ```text
//! cargo build --release -p nccl-group --example torchrun_elastic_trainer
//! nccl-launch -n 4 target/release/examples/torchrun_elastic_trainer
//! ```
//!
//! With `W = 2` the one trainer grows by the spare and nothing is lost;
//! with `W = 3` the spare joins two trainers and nothing is lost either
//! (a group of one rank cannot lose a peer).

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::CudaStream;
use nccl_core::{Device, ReduceOp};
use nccl_group::{
    ErrorKind, GroupError, GrowOptions, HealOptions, Lifecycle, ProcessGroup, Recovery,
    RendezvousConfig,
};
use nccl_tensor::Tensor;

/// The group's name, for its ranks and the spare.
const NAME: &str = "torchrun_elastic_trainer";
/// Steps every trainer runs, counted across generations.
const STEPS: u64 = 12;
/// The step before which the lost trainer exits.
const LOST_AT: u64 = 4;
/// The step after which the group grows by the spare.
const GROW_AT: u64 = LOST_AT + 2;
/// Elements of a step's all_reduce.
const LEN: usize = 4096;
/// How long the spare waits to be taken in.
const SPARE_WAIT: Duration = Duration::from_secs(300);

fn main() -> ExitCode {
    common::run_placed(run)
}

/// This process's part: a trainer's, or the spare's.
fn run(rank: usize, world: usize, gpu: usize) -> Result<bool, Box<dyn std::error::Error>> {
    if world < 2 {
        return Err(format!(
            "expected 2 or more processes (the trainers and a spare); got WORLD_SIZE={world}"
        )
        .into());
    }
    let stream = Device::new(gpu)?.new_stream()?;
    let spare = rank + 1 == world;
    let (group, step) = if spare {
        // Warm: the device and libnccl are loaded; the grow gives the rank.
        nccl_core::version()?;
        let group = ProcessGroup::join_grown_from_env(NAME, SPARE_WAIT)?;
        let step = shared_step(&group, &stream, 0)?;
        println!(
            "spare (process {rank}): joined as rank {} of {} at step {step}",
            group.rank(),
            group.world_size()
        );
        (group, step)
    } else {
        let mut config = RendezvousConfig::from_env()?;
        config.world_size = world - 1;
        let group = ProcessGroup::builder(NAME).config(&config).build()?;
        (group, 0)
    };
    let lost = (world >= 4).then_some(world - 2);
    train(group, &stream, step, (rank, lost))
}

/// Steps from `step` to [`STEPS`]: all_reduce, vote, heal on a failure,
/// grow back when a spare waits. `Ok(false)`: a wrong result.
fn train(
    mut group: ProcessGroup,
    stream: &Arc<CudaStream>,
    mut step: u64,
    (process, lost): (usize, Option<usize>),
) -> Result<bool, Box<dyn std::error::Error>> {
    let mut committed = 0;
    while step < STEPS {
        if Some(process) == lost && step == LOST_AT {
            println!("trainer (process {process}): lost before step {step}");
            std::process::exit(0);
        }
        let verdict = match step_all_reduce(&group, stream) {
            Ok(right) => group.agree(right).map(|commit| (right, commit)),
            Err(error) => Err(error),
        };
        match verdict {
            Ok((right, commit)) => {
                if !right {
                    eprintln!("process {process}: step {step}: a wrong all_reduce result");
                    return Ok(false);
                }
                if commit {
                    committed += 1;
                }
                step += 1;
            }
            Err(error) if recoverable(&error) => {
                let healed = group.heal(&HealOptions::new())?;
                println!(
                    "trainer (process {process}): step {step} failed ({:?}); healed to rank {} of {}, lost {:?}",
                    error.kind(),
                    healed.group().rank(),
                    healed.group().world_size(),
                    healed.lost()
                );
                group = healed.into_group();
                continue;
            }
            Err(error) => return Err(error.into()),
        }
        if step == GROW_AT {
            // Rank 0's count of parked spares reaches every rank through a
            // collective, so all grow by the same number.
            let parked = if group.rank() == 0 {
                wait_for_a_spare(&group)?
            } else {
                0
            };
            let joining = shared_count(&group, stream, parked)?;
            group = grow(&group, joining)?;
            shared_step(&group, stream, step)?;
            println!(
                "trainer (process {process}): grew by {joining} before step {step}, now rank {} of {}",
                group.rank(),
                group.world_size()
            );
        }
    }
    println!(
        "process {process}: {committed} step(s) committed, every result right; rank {} of {} at the end",
        group.rank(),
        group.world_size()
    );
    group.destroy()?;
    Ok(true)
}

/// The group grown by `joining`: with `ncclCommGrow` where the loaded
/// NCCL has it (2.29.2), else with every communicator made afresh.
fn grow(group: &ProcessGroup, joining: usize) -> Result<ProcessGroup, GroupError> {
    let grown = match group.grow(joining, &GrowOptions::new()) {
        Err(error) if error.kind() == ErrorKind::Unsupported => {
            group.grow(joining, &GrowOptions::new().with_grow(false))?
        }
        other => other?,
    };
    Ok(grown.into_group())
}

/// How many spares are parked, once one is (at most [`SPARE_WAIT`]).
fn wait_for_a_spare(group: &ProcessGroup) -> Result<usize, GroupError> {
    let started = std::time::Instant::now();
    loop {
        let parked = group.pending_joins()?;
        if parked > 0 || started.elapsed() > SPARE_WAIT {
            return Ok(parked);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the survivors heal from `error`: a lost or failed peer.
fn recoverable(error: &GroupError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::PeerLost | ErrorKind::PeerFailed | ErrorKind::GroupFailed
    )
}

/// One step's all_reduce of ones: whether every element is the world size.
fn step_all_reduce(group: &ProcessGroup, stream: &Arc<CudaStream>) -> Result<bool, GroupError> {
    let ones = Tensor::from_host(stream, &[1.0f32; LEN], &[LEN])?;
    let sum = group
        .all_reduce(ones, ReduceOp::Sum, stream)
        .map_err(|refused| refused.error)?
        .wait()?
        .to_vec(stream)?;
    let world = group.world_size() as f32;
    Ok(sum.iter().all(|&v| v == world))
}

/// `value` from rank 0, on every rank (the others give 0).
fn shared_count(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    value: usize,
) -> Result<usize, GroupError> {
    let mine = if group.rank() == 0 { value as f32 } else { 0.0 };
    let tensor = Tensor::from_host(stream, &[mine], &[1])?;
    let sum = group
        .all_reduce(tensor, ReduceOp::Sum, stream)
        .map_err(|refused| refused.error)?
        .wait()?
        .to_vec(stream)?;
    Ok(sum.first().map_or(0, |&v| v as usize))
}

/// The step rank 0 is at, on every rank: a grown group's first collective,
/// which tells the new ranks where the others are.
fn shared_step(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    step: u64,
) -> Result<u64, GroupError> {
    Ok(shared_count(group, stream, step as usize)? as u64)
}
