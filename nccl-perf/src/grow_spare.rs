//! `--grow-spare ITER`: what taking a warm spare into a running group
//! costs, measured as the group's ranks and the spare see it.
//!
//! Under `nccl-launch -n N`, every process but the last forms a process
//! group of `N - 1` ranks (the group layer `--layer` names, with
//! `--group-comms` and `--group-mismatch-check`) and runs `ITER` checked
//! all_reduces of `-b` bytes of f32. The last process is the spare: its
//! GPU and libnccl are loaded, and it waits in `join_grown` on the
//! launch's store, as a replacement an orchestrator started ahead would.
//! Once rank 0 sees it waiting (`pending_joins`), it notes the time and
//! every rank grows the group by one (`ncclCommGrow` where the loaded NCCL
//! has it, from 2.29.2; else fresh communicators), then runs one
//! all_reduce over the grown group, checked against the `N` ranks' sum.
//! Each process times two phases from rank 0's start of the grow: `grow`
//! (to its grown group) and `first` (to that group's first correct
//! all_reduce); rank 0 prints the slowest process's (the group is not
//! whole until it is), in a table and one JSON object (`-J FILE`; appended
//! as a line to `--json FILE`).
//!
//! The times compare the processes' clocks: they are right on one host
//! (nccl-launch, simulated hosts) or on hosts whose clocks agree.

use std::time::{Duration, Instant};

use nccl_core::Device;
use nccl_group::{ErrorKind, GroupError, GrowOptions, Lifecycle, ProcessGroup, Recovery};

use crate::cli::Args;
use crate::error::BenchError;
use crate::timed_group::{
    Outputs, TimedGroup, all_reduce, comms_name, gather_times, ms_between, nccl_text, now_us,
    shared_by, slowest, stamp_of, wrong,
};
use crate::world::World;

/// The group's name, and the prefix of the keys the processes share.
const NAME: &str = "nccl-perf-grow";

/// How often rank 0 looks for the waiting spare.
const SPARE_POLL: Duration = Duration::from_millis(5);

/// A process's phases, in ms from rank 0's start of the grow.
#[derive(Clone, Copy, Debug)]
struct Phases {
    grow: f64,
    first: f64,
}

impl Phases {
    fn total(&self) -> f64 {
        self.grow + self.first
    }
}

/// Runs the grow as this process of `world`; rank 0 prints the result.
///
/// # Errors
/// A usage error (fewer than 2 processes, or flags [`TimedGroup::new`]
/// refuses), a failed operation, a wrong result, a spare that did not
/// wait in time, a failed grow, or the store.
pub(crate) fn run(args: &Args, iter: usize, world: &World) -> Result<(), BenchError> {
    let flag = format!("--grow-spare {iter}");
    if world.size < 2 {
        return Err(BenchError::Usage(format!(
            "{flag}: expected 2 or more processes (the group and the spare; run under nccl-launch -n \
             N); got world size {}",
            world.size
        )));
    }
    let timed = TimedGroup::new(args, &flag)?;
    let outputs = Outputs::open(args, world.rank)?;
    let stream = Device::new(world.local_rank)?.new_stream()?;
    let spare = world.rank + 1 == world.size;
    // Rank 0's start of the grow, on rank 0 (the others read it later).
    let mut started = None;
    let (grown, path) = if spare {
        // Warm: the device is set up and libnccl loaded before it waits.
        nccl_core::version()?;
        (world.join_grown(NAME, timed.options.clone())?, None)
    } else {
        let group = world.group_member(NAME, world.rank, world.size - 1, timed.options.clone())?;
        let mine = (world.rank + 1) as f32;
        let sum = ((world.size - 1) * world.size / 2) as f32;
        for _ in 0..iter {
            if !all_reduce(&group, &stream, (timed.count, mine, sum))? {
                return Err(wrong("before the grow"));
            }
        }
        if world.rank == 0 {
            await_the_spare(&group, world.timeout)?;
            let stamp = now_us();
            world.meeting().share_from(0, &key("started"), || {
                Ok::<_, BenchError>(stamp.to_le_bytes().to_vec())
            })?;
            started = Some(stamp);
        }
        let (grown, path) = grow_by_one(&group)?;
        (grown, Some(path))
    };
    let joined = now_us();
    let mine = (grown.rank() + 1) as f32;
    let sum = (world.size * (world.size + 1) / 2) as f32;
    if !all_reduce(&grown, &stream, (timed.count, mine, sum))? {
        return Err(wrong("after the grow"));
    }
    let first = now_us();
    let meeting = world.meeting();
    let started = match started {
        Some(stamp) => stamp,
        None => stamp_of(
            0,
            "the start of the grow",
            &shared_by(meeting, 0, &key("started"), "the start of the grow")?,
        )?,
    };
    let phases = Phases {
        grow: ms_between(started, joined),
        first: ms_between(joined, first),
    };
    let gathered = gather_times(
        meeting,
        &key("times"),
        "grow times",
        [phases.grow, phases.first],
    )?;
    grown.destroy()?;
    if let Some(gathered) = gathered {
        let all: Vec<_> = (gathered.into_iter().enumerate())
            .map(|(rank, [grow, first])| (rank, Phases { grow, first }))
            .collect();
        let path = path.unwrap_or_default();
        report(args, (iter, &timed), outputs, world, &path, &all)?;
    }
    Ok(())
}

/// The store key `leaf` of this run's meeting.
fn key(leaf: &str) -> String {
    format!("{NAME}/{leaf}")
}

/// Waits until the spare waits to join `group`, at most `timeout`.
///
/// # Errors
/// [`BenchError::Absent`] when it did not; the store's error.
fn await_the_spare(group: &ProcessGroup, timeout: Duration) -> Result<(), BenchError> {
    let started = Instant::now();
    while group.pending_joins()? == 0 {
        if started.elapsed() >= timeout {
            return Err(BenchError::Absent {
                missing: format!("the spare (process {})", group.world_size()),
                what: "the queue of processes waiting to join".to_string(),
                waited: started.elapsed(),
            });
        }
        std::thread::sleep(SPARE_POLL);
    }
    Ok(())
}

/// `group` grown by one, and how: with `ncclCommGrow` where the loaded
/// NCCL has it, else with fresh communicators.
fn grow_by_one(group: &ProcessGroup) -> Result<(ProcessGroup, String), GroupError> {
    let grown = match group.grow(1, &GrowOptions::new()) {
        Err(error) if error.kind() == ErrorKind::Unsupported => {
            group.grow(1, &GrowOptions::new().with_grow(false))?
        }
        other => other?,
    };
    let path = format!("{:?}", grown.path());
    Ok((grown.into_group(), path))
}

/// Rank 0's table and JSON object of the run.
fn report(
    args: &Args,
    (iter, timed): (usize, &TimedGroup),
    outputs: Outputs,
    world: &World,
    path: &str,
    processes: &[(usize, Phases)],
) -> Result<(), BenchError> {
    let Some((slowest, phases)) = slowest(processes, Phases::total) else {
        return Ok(());
    };
    let (nccl, comms) = (nccl_text(), comms_name(args));
    let spare = world.size - 1;
    let lines = [
        format!(
            "# nccl-perf --grow-spare {iter}: all_reduce of {} x f32 through {}, {comms} communicators, world size \
             {spare} -> {}, NCCL {nccl}",
            timed.count,
            timed.layer.name(),
            world.size
        ),
        format!(
            "# process {spare} waited as a warm spare; ms from rank 0's start of the grow, for the slowest \
             process ({slowest})"
        ),
        "#   iter  world    grow_ms   first_ms   total_ms  path".to_string(),
        format!(
            "{:>8} {:>6} {:>10.1} {:>10.1} {:>10.1}  {path}",
            iter,
            format!("{spare}->{}", world.size),
            phases.grow,
            phases.first,
            phases.total()
        ),
    ];
    let json = serde_json::json!({
        "tool": "nccl-perf",
        "grow_spare": {"iter": iter},
        "layer": timed.layer.name(),
        "comms": comms,
        "count": timed.count,
        "world": world.size,
        "simulated_hosts": world.simulated_hosts,
        "nccl": nccl,
        "slowest_process": slowest,
        "grow_ms": phases.grow,
        "first_ms": phases.first,
        "total_ms": phases.total(),
        "path": path,
        "processes": processes.iter().map(|(rank, p)| serde_json::json!({
            "process": rank, "grow_ms": p.grow, "first_ms": p.first, "total_ms": p.total(),
        })).collect::<Vec<_>>(),
    });
    outputs.report(&lines, &json)
}

#[cfg(test)]
mod tests;
