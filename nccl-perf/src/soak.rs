//! `--soak SECS --stall RANK:MS`: a rank that is slow but alive must
//! never be taken for a lost one.
//!
//! Under `nccl-launch -n N`, every process forms a process group of `N`
//! ranks (the group layer `--layer` names, with `--group-comms`,
//! `--group-mismatch-check` and the group's default liveness beat) and
//! runs `ceil(SECS × 1000 / MS)` steps, each one checked all_reduce of
//! `-b` bytes of f32. The rank of `--stall` sleeps `MS` on its issuing
//! thread before each step, as a rank computing for that long; the others
//! wait for it inside the all_reduce. The beat runs on the group's own
//! thread, so no rank may ever be named: any error (the beat's, the
//! operation timeout's, NCCL's) or wrong result ends the run with exit
//! status 1, naming the step ([`BenchError::Soak`]). After the last step
//! every process shares its longest step with rank 0, and then shuts the
//! group down: a failure that `shutdown` finds counts as one at a step.
//! Rank 0 prints the longest steps (the waiting ranks' are about `MS`:
//! they sat in the collective that long), in a table and one JSON
//! object (`-J FILE`; appended as a line to `--json FILE`): both only for a
//! soak that passed.

use std::time::{Duration, Instant};

use nccl_core::Device;
use nccl_group::{GroupError, Lifecycle, ProcessGroup};

use crate::cli::{Args, Stall};
use crate::error::BenchError;
use crate::timed_group::{
    Outputs, TimedGroup, all_reduce, comms_name, gather_times, nccl_text, wrong,
};
use crate::world::World;

/// The group's name, and the prefix of the keys the processes share.
const NAME: &str = "nccl-perf-soak";

/// The steps of a soak of `secs` seconds whose slow rank sleeps `stall`
/// before each: the same on every rank, from the flags alone.
pub(crate) fn steps(secs: u64, stall: Stall) -> u64 {
    (secs.saturating_mul(1000)).div_ceil(stall.ms.max(1))
}

/// Runs the soak as this process of `world`; rank 0 prints the result.
///
/// # Errors
/// A usage error (fewer than 2 processes, a stalled rank outside the
/// launch, or flags [`TimedGroup::new`] refuses), the group's failure at
/// any step or at the end ([`BenchError::Soak`]), a wrong result, or the
/// store.
pub(crate) fn run(args: &Args, secs: u64, stall: Stall, world: &World) -> Result<(), BenchError> {
    let flag = format!("--soak {secs} --stall {stall}");
    let usage = |text: String| Err(BenchError::Usage(format!("{flag}: {text}")));
    if world.size < 2 {
        return usage(format!(
            "expected 2 or more processes (a slow rank and ranks that wait for it; run under \
             nccl-launch -n N); got world size {}",
            world.size
        ));
    }
    if stall.ms == 0 {
        return usage("expected a stall above 0 ms; got 0".to_string());
    }
    if stall.rank >= world.size {
        return usage(format!(
            "expected the stalled rank in 0..{} (the launch's ranks); got {}",
            world.size, stall.rank
        ));
    }
    let timed = TimedGroup::new(args, &flag)?;
    let outputs = Outputs::open(args, world.rank)?;
    let stream = Device::new(world.local_rank)?.new_stream()?;
    let group = world.group_member(NAME, world.rank, world.size, timed.options.clone())?;
    let steps = steps(secs, stall);
    let mine = (world.rank + 1) as f32;
    let sum = (world.size * (world.size + 1) / 2) as f32;
    let started = Instant::now();
    let failed = |during: String, source: GroupError| BenchError::Soak {
        during,
        source: Box::new(source),
    };
    let mut longest = Duration::ZERO;
    for step in 1..=steps {
        if world.rank == stall.rank {
            std::thread::sleep(stall.duration());
        }
        let issued = Instant::now();
        let at = || {
            format!(
                "at step {step} of {steps}, {:.1} s in",
                started.elapsed().as_secs_f64()
            )
        };
        match all_reduce(&group, &stream, (timed.count, mine, sum)) {
            Ok(true) => {}
            Ok(false) => return Err(wrong(&at())),
            Err(source) => return Err(failed(at(), source)),
        }
        longest = longest.max(issued.elapsed());
    }
    let elapsed = started.elapsed();
    let gathered = gather_times(
        world.meeting(),
        &format!("{NAME}/times"),
        "soak times",
        [ms_of(longest), elapsed.as_secs_f64()],
    )?;
    // A failure after the last step (a rank named late) fails the
    // shutdown: it counts as much as one at a step.
    group
        .shutdown()
        .map_err(|source| failed(format!("after its {steps} steps (shutdown)"), source))?;
    if let Some(gathered) = gathered {
        let ranks: Vec<_> = (gathered.into_iter())
            .map(|[longest_ms, elapsed_s]| RankTimes {
                longest_ms,
                elapsed_s,
            })
            .collect();
        let run = Run {
            secs,
            stall,
            steps,
            group: &group,
            timed: &timed,
        };
        report(args, &run, outputs, world, &ranks)?;
    }
    Ok(())
}

/// What one rank shares at the end.
#[derive(Clone, Copy, Debug)]
struct RankTimes {
    /// Its longest step, from its issue to its checked result (a waiting
    /// rank's holds the slow rank's stall).
    longest_ms: f64,
    /// Its steps' time in all.
    elapsed_s: f64,
}

/// What rank 0 reports of the run.
struct Run<'a> {
    secs: u64,
    stall: Stall,
    steps: u64,
    group: &'a ProcessGroup,
    timed: &'a TimedGroup,
}

fn ms_of(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Rank 0's table and JSON object of a soak that passed.
fn report(
    args: &Args,
    run: &Run<'_>,
    outputs: Outputs,
    world: &World,
    ranks: &[RankTimes],
) -> Result<(), BenchError> {
    let (nccl, comms) = (nccl_text(), comms_name(args));
    let liveness = format!("{:?}", run.timed.options.liveness);
    let op_timeout = run.timed.options.op_timeout;
    let mut lines = vec![
        format!(
            "# nccl-perf --soak {} --stall {}: all_reduce of {} x f32 through {}, {comms} communicators, \
             world size {}, NCCL {nccl}",
            run.secs,
            run.stall,
            run.timed.count,
            run.timed.layer.name(),
            world.size
        ),
        format!(
            "# liveness {liveness}, operation timeout {op_timeout:?}; every step checked, no failure, \
             group {:?} shut down",
            run.group.name()
        ),
        "#   rank      steps  longest_ms   elapsed_s".to_string(),
    ];
    for (rank, times) in ranks.iter().enumerate() {
        lines.push(format!(
            "{rank:>8} {:>10} {:>11.1} {:>11.1}{}",
            run.steps,
            times.longest_ms,
            times.elapsed_s,
            if rank == run.stall.rank {
                "  (stalls)"
            } else {
                ""
            }
        ));
    }
    let json = serde_json::json!({
        "tool": "nccl-perf",
        "soak": {"secs": run.secs, "stall_rank": run.stall.rank, "stall_ms": run.stall.ms},
        "layer": run.timed.layer.name(),
        "comms": comms,
        "count": run.timed.count,
        "world": world.size,
        "simulated_hosts": world.simulated_hosts,
        "nccl": nccl,
        "liveness": liveness,
        "op_timeout_ms": ms_of(op_timeout),
        "steps": run.steps,
        "ranks": ranks.iter().enumerate().map(|(rank, t)| serde_json::json!({
            "rank": rank, "longest_ms": t.longest_ms, "elapsed_s": t.elapsed_s,
        })).collect::<Vec<_>>(),
    });
    outputs.report(&lines, &json)
}

#[cfg(test)]
mod tests;
