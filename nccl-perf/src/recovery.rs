//! `--inject`: what losing a rank costs, measured as the survivors see it.
//!
//! Every rank runs checked all_reduces of `-b` bytes of f32 through a
//! process group (the group layer `--layer` names, with `--group-comms` and
//! `--group-mismatch-check`). After `ITER` of them, and a barrier in the
//! launch's store once every rank has its `ITER`-th result, rank `RANK`
//! notes the time there and is lost as `FAULT` says. The survivors
//! go on issuing until an operation fails, heal as `--heal` says (told who
//! is lost with `--tell`, as a launcher that saw the loss could), and run
//! one more all_reduce, checked against the survivors' sum. Each survivor
//! times three phases from the loss: `detect` (to its failed operation),
//! `heal` (to its next group), `first` (to that group's first correct
//! all_reduce); rank 0 prints the slowest survivor's (the one whose total
//! is longest: the group is down until it is back), in a table and one
//! JSON object (`-J FILE`; appended as a line to `--json FILE`).
//!
//! The times compare the lost rank's clock with the survivors': they are
//! right on one host (nccl-launch, simulated hosts) or on hosts whose
//! clocks agree. Rank 0 hosts the launch's store and prints, so it is
//! never the one lost. Run it under `nccl-launch --keep-going`: without it
//! the launcher ends the survivors when the lost rank fails. Each launch
//! measures one loss; repeat launches for a spread.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::Device;
use nccl_group::{GroupError, HealOptions, Lifecycle, ProcessGroup, Recovery};

use crate::cli::{Args, Fault, HealMode, Injection};
use crate::error::BenchError;
use crate::timed_group::{
    Outputs, TimedGroup, all_reduce, comms_name, f64s_bytes, f64s_of, ms_between, nccl_text,
    now_us, shared_by, slowest, stamp_of, wrong,
};
use crate::world::World;

/// The group's name, and the prefix of the keys the ranks share.
const NAME: &str = "nccl-perf-recovery";

/// What a recovery run measures, from the flags; checked before any GPU
/// work.
struct Plan {
    injection: Injection,
    heal: HealMode,
    told: bool,
    group: TimedGroup,
}

impl Plan {
    /// The plan of `args` in a world of `world` ranks.
    ///
    /// # Errors
    /// [`BenchError::Usage`] naming the flag, what it must be and what it
    /// was.
    fn new(args: &Args, injection: Injection, world: usize) -> Result<Self, BenchError> {
        let usage = |text: String| Err(BenchError::Usage(text));
        if world < 2 {
            return usage(format!(
                "--inject {injection}: expected 2 or more ranks (one is lost; run under nccl-launch -n N \
                 --keep-going); got world size {world}"
            ));
        }
        if injection.rank == 0 || injection.rank >= world {
            return usage(format!(
                "--inject {injection}: expected RANK in 1..{world} (rank 0 hosts the store and reports); got \
                 {}",
                injection.rank
            ));
        }
        Ok(Self {
            injection,
            heal: args.heal,
            told: args.tell,
            group: TimedGroup::new(args, &format!("--inject {injection}"))?,
        })
    }
}

/// A survivor's phases, in ms from the loss.
#[derive(Clone, Copy, Debug)]
struct Phases {
    detect: f64,
    heal: f64,
    first: f64,
}

impl Phases {
    /// The phases as a survivor shares them: three little-endian `f64`s.
    fn to_bytes(self) -> Vec<u8> {
        f64s_bytes(&[self.detect, self.heal, self.first])
    }

    /// [`Phases::to_bytes`] read back, as survivor `rank` shared them.
    fn from_bytes(rank: usize, bytes: &[u8]) -> Result<Self, BenchError> {
        let [detect, heal, first] = f64s_of(rank, "recovery times", bytes)?;
        Ok(Self {
            detect,
            heal,
            first,
        })
    }

    fn total(&self) -> f64 {
        self.detect + self.heal + self.first
    }
}

/// Runs the recovery as this rank of `world`; rank 0 prints the result.
///
/// # Errors
/// A usage error, a failed operation before the loss or after the heal,
/// a wrong result, a failed heal, or the store.
pub(crate) fn run(args: &Args, injection: Injection, world: &World) -> Result<(), BenchError> {
    let plan = Plan::new(args, injection, world.size)?;
    let outputs = Outputs::open(args, world.rank)?;
    let group = world.group(NAME, plan.group.options.clone())?;
    let stream = Device::new(world.local_rank)?.new_stream()?;
    let mine = (world.rank + 1) as f32;
    let sum = (world.size * (world.size + 1) / 2) as f32;
    for _ in 0..injection.iter {
        if !all_reduce(&group, &stream, (plan.group.count, mine, sum))? {
            return Err(wrong("before the loss"));
        }
    }
    let meeting = world.meeting();
    // Every rank has its ITER-th result before the loss: a rank lost while
    // another still waited for that one failed it before the loss was
    // timed (seen once at world size 8 on an H200).
    meeting.barrier(&key("before-the-loss"))?;
    let (died_key, pid_key) = (key("died"), key("stopped-pid"));
    if world.rank == injection.rank {
        meeting.share_from(world.rank, &pid_key, || {
            Ok::<_, BenchError>(std::process::id().to_string().into_bytes())
        })?;
        meeting.share_from(world.rank, &died_key, || {
            Ok::<_, BenchError>(now_us().to_le_bytes().to_vec())
        })?;
        lose_this_process(injection.fault)?;
        // Continued after a stop: the survivors are done with it.
        std::process::exit(0);
    }
    let survived = survive(args, &plan, outputs, world, group, (&stream, mine, sum));
    // Whatever the survivors met, a rank left stopped would keep the
    // launch waiting: rank 0 continues it (its pid was shared before).
    let continued = match injection.fault {
        Fault::Stop if world.rank == 0 => shared_by(meeting, injection.rank, &pid_key, "its pid")
            .and_then(|pid| signal(&String::from_utf8_lossy(&pid), "-CONT")),
        _ => Ok(()),
    };
    survived.and(continued)
}

/// A survivor's part of [`run`]: the operation that detects the loss, the
/// next group, its first all_reduce (of `mine` from every survivor over
/// the stream, whose sum before the loss was `sum`), the phases shared
/// with rank 0, which reports them.
fn survive(
    args: &Args,
    plan: &Plan,
    outputs: Outputs,
    world: &World,
    group: ProcessGroup,
    (stream, mine, sum): (&Arc<CudaStream>, f32, f32),
) -> Result<(), BenchError> {
    let injection = plan.injection;
    let meeting = world.meeting();
    let detected = loop {
        match all_reduce(&group, stream, (plan.group.count, mine, sum)) {
            Ok(true) => {}
            Ok(false) => return Err(wrong("after the loss")),
            Err(error) => break error,
        }
    };
    let failed = now_us();
    let survivors_sum = sum - (injection.rank + 1) as f32;
    let (next, path) = go_on(plan, world, group)?;
    let healed = now_us();
    if !all_reduce(&next, stream, (plan.group.count, mine, survivors_sum))? {
        return Err(wrong("after the heal"));
    }
    let first = now_us();
    let died = stamp_of(
        injection.rank,
        "the time of its loss",
        &shared_by(
            meeting,
            injection.rank,
            &key("died"),
            "the time of its loss",
        )?,
    )?;
    let phases = Phases {
        detect: ms_between(died, failed),
        heal: ms_between(failed, healed),
        first: ms_between(healed, first),
    };
    let times_key = |rank: usize| key(&format!("times/{rank}"));
    meeting.share_from(world.rank, &times_key(world.rank), || {
        Ok::<_, BenchError>(phases.to_bytes())
    })?;
    next.destroy()?;
    if world.rank == 0 {
        let others = (1..world.size).filter(|&rank| rank != injection.rank);
        let mut all = vec![(0, phases)];
        for rank in others {
            let bytes = shared_by(meeting, rank, &times_key(rank), "its times")?;
            all.push((rank, Phases::from_bytes(rank, &bytes)?));
        }
        report(args, plan, outputs, world, (&detected, &path), &all)?;
    }
    Ok(())
}

/// The store key `leaf` of this run's meeting.
fn key(leaf: &str) -> String {
    format!("{NAME}/{leaf}")
}

/// The survivors' next group, as `--heal` says, and how it was made.
fn go_on(
    plan: &Plan,
    world: &World,
    group: ProcessGroup,
) -> Result<(ProcessGroup, String), BenchError> {
    let lost = plan.injection.rank;
    match plan.heal {
        HealMode::Shrink | HealMode::Recreate => {
            let suspects = if plan.told { vec![lost] } else { Vec::new() };
            let healed = group.heal(
                &HealOptions::new()
                    .with_timeout(world.timeout)
                    .with_shrink(plan.heal == HealMode::Shrink)
                    .with_suspects(suspects),
            )?;
            let path = format!("{:?}", healed.path());
            Ok((healed.into_group(), path))
        }
        HealMode::Full => {
            drop(group);
            let rank = world.rank - usize::from(world.rank > lost);
            let next = world.group_member(
                &format!("{NAME}-full"),
                rank,
                world.size - 1,
                plan.group.options.clone(),
            )?;
            Ok((next, "a new group".to_string()))
        }
    }
}

/// Loses this process as `fault` says; returns only after a stop, once
/// the process is continued.
fn lose_this_process(fault: Fault) -> Result<(), BenchError> {
    let pid = std::process::id().to_string();
    match fault {
        Fault::Exit => std::process::exit(1),
        Fault::Kill => {
            signal(&pid, "-KILL")?;
            std::process::exit(1)
        }
        Fault::Stop => signal(&pid, "-STOP"),
    }
}

/// Sends `signal` (`-STOP`, `-CONT`, `-KILL`) to process `pid` with kill(1).
fn signal(pid: &str, signal: &str) -> Result<(), BenchError> {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .map_err(|error| {
            BenchError::Environment(format!("running kill {signal} {pid}: {error}"))
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Environment(format!(
            "kill {signal} {pid}: {status}"
        )))
    }
}

/// Rank 0's table and JSON object of the run.
fn report(
    args: &Args,
    plan: &Plan,
    outputs: Outputs,
    world: &World,
    (detected, path): (&GroupError, &str),
    survivors: &[(usize, Phases)],
) -> Result<(), BenchError> {
    let Some((slowest, phases)) = slowest(survivors, Phases::total) else {
        return Ok(());
    };
    let (nccl, comms) = (nccl_text(), comms_name(args));
    let injection = plan.injection;
    let lines = [
        format!(
            "# nccl-perf --inject {injection}: all_reduce of {} x f32 through {}, {comms} communicators, world size \
             {} -> {}, NCCL {nccl}",
            plan.group.count,
            plan.group.layer.name(),
            world.size,
            world.size - 1
        ),
        format!(
            "# the survivors heal by {} (told who is lost: {}); ms from the loss, for the slowest survivor (rank \
             {slowest}); it detected: {detected}",
            plan.heal.name(),
            if plan.told { "yes" } else { "no" },
        ),
        "#  fault  rank   iter  world  detect_ms    heal_ms   first_ms   total_ms  path"
            .to_string(),
        format!(
            "{:>8} {:>5} {:>6} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1}  {path}",
            injection.fault.name(),
            injection.rank,
            injection.iter,
            format!("{}->{}", world.size, world.size - 1),
            phases.detect,
            phases.heal,
            phases.first,
            phases.total()
        ),
    ];
    let json = serde_json::json!({
        "tool": "nccl-perf",
        "inject": {"fault": injection.fault.name(), "rank": injection.rank, "iter": injection.iter},
        "heal": plan.heal.name(),
        "told": plan.told,
        "layer": plan.group.layer.name(),
        "comms": comms,
        "count": plan.group.count,
        "world": world.size,
        "simulated_hosts": world.simulated_hosts,
        "nccl": nccl,
        "detected": detected.to_string(),
        "detected_kind": format!("{:?}", detected.kind()),
        "slowest_rank": slowest,
        "detect_ms": phases.detect,
        "heal_ms": phases.heal,
        "first_ms": phases.first,
        "total_ms": phases.total(),
        "path": path,
        "survivors": survivors.iter().map(|(rank, p)| serde_json::json!({
            "rank": rank, "detect_ms": p.detect, "heal_ms": p.heal, "first_ms": p.first, "total_ms": p.total(),
        })).collect::<Vec<_>>(),
    });
    outputs.report(&lines, &json)
}

#[cfg(test)]
mod tests;
