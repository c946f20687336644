//! One launched rank of the heal tests: checked rounds of operations, the
//! faults, the heals, and each survivor's `heal ...` lines.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use std::io::Write;
use std::ops::Range;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nccl_core::{Capabilities, Capability, CudaStream, ReduceOp};
use nccl_group::{
    CommMode, ErrorKind, GroupError, GroupOptions, HealOptions, HealPath, Healed, P2POp,
    ProcessGroup, RendezvousConfig, Work,
};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::processes::{await_mark, publish};

use super::{COMMS_VAR, SHRINK_VAR, Scenario};

const LEN: usize = 1024;
const GATHER: usize = 256;
/// Rounds before the first fault.
const FAULT_AT: usize = 10;
/// Checked rounds after each heal.
pub(super) const ROUNDS: usize = 100;
/// Rounds before and after the stopped rank is continued.
const STOPPED_ROUNDS: usize = 20;
pub(super) const OP_TIMEOUT: Duration = Duration::from_secs(3);
/// The operation timeout where ranks die: longer than the failure's
/// exchange and a heal, so a survivor NCCL told nothing (not connected to
/// the lost rank) fails only by the other ranks' failure alarm, in time
/// to report, and is not left out of the heal as silent.
const LOSS_OP_TIMEOUT: Duration = Duration::from_secs(60);
pub(super) const PATIENCE: Duration = Duration::from_secs(90);

type Result<T> = std::result::Result<T, GroupError>;

/// This process in the current generation: its group, and every
/// member's rank in generation 0 (by its current rank; a process that
/// joined a grow has an id past generation 0's ranks).
pub(super) struct Member {
    pub(super) group: ProcessGroup,
    pub(super) olds: Vec<usize>,
    pub(super) stream: Arc<CudaStream>,
}

pub(super) fn refused<B: nccl_group::OpBuffers>(
    result: nccl_group::OpResult<B>,
) -> Result<Work<B>> {
    result.map_err(Into::into)
}

impl Member {
    pub(super) fn old(&self) -> usize {
        self.olds[self.group.rank()]
    }

    pub(super) fn filled(&self, len: usize, value: f32) -> Tensor<f32> {
        Tensor::from_host(&self.stream, &vec![value; len], &[len]).expect("upload")
    }

    fn read(&self, tensor: &Tensor<f32>) -> Result<Vec<f32>> {
        Ok(tensor.to_vec(&self.stream)?)
    }

    /// One checked round: an all_reduce, an all_gather, a batched ring and
    /// a ring on pair communicators, each value compared with what the
    /// members' old ranks make it. A wrong value panics.
    pub(super) fn round(&self, n: usize) -> Result<()> {
        let (rank, world) = (self.group.rank(), self.group.world_size());
        let mine = (self.old() + 1) as f32;
        let what = |op: &str| format!("round {n}: {op} as rank {rank} of {world}");
        let sum: f32 = self.olds.iter().map(|&o| (o + 1) as f32).sum();
        let s = &self.stream;

        let t = refused(
            self.group
                .all_reduce(self.filled(LEN, mine), ReduceOp::Sum, s),
        )?
        .wait()?;
        assert!(
            self.read(&t)?.iter().all(|&v| v == sum),
            "{}",
            what("all_reduce")
        );

        let output = self.filled(GATHER * world, -1.0);
        let (output, _) = refused(self.group.all_gather_into_tensor(
            output,
            self.filled(GATHER, mine),
            s,
        ))?
        .wait()?;
        let gathered = self.read(&output)?;
        for (member, block) in gathered.chunks(GATHER).enumerate() {
            let expected = (self.olds[member] + 1) as f32;
            assert!(
                block.iter().all(|&v| v == expected),
                "{}",
                what("all_gather")
            );
        }

        let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
        let from_prev = (self.olds[prev] + 1) as f32;
        let ops = vec![
            P2POp::send(self.filled(LEN, mine), next),
            P2POp::recv(self.filled(LEN, -1.0), prev),
        ];
        let back = refused(self.group.batch_isend_irecv(ops, s))?.wait()?;
        assert!(
            self.read(&back[1])?.iter().all(|&v| v == from_prev),
            "{}",
            what("batched ring")
        );

        // On pair communicators: even ranks send first, odd ones receive
        // first, so no cycle of waits forms.
        let send = |g: &ProcessGroup| -> Result<()> {
            refused(g.send(self.filled(LEN, mine), next, s))?.wait()?;
            Ok(())
        };
        let recv = |g: &ProcessGroup| -> Result<Tensor<f32>> {
            refused(g.recv(self.filled(LEN, -1.0), prev, s))?.wait()
        };
        let received = if rank % 2 == 0 {
            send(&self.group)?;
            recv(&self.group)?
        } else {
            let received = recv(&self.group)?;
            send(&self.group)?;
            received
        };
        assert!(
            self.read(&received)?.iter().all(|&v| v == from_prev),
            "{}",
            what("pair ring")
        );
        Ok(())
    }

    /// The rounds of `range`, each failure panicking with `at` (where this
    /// member stands) and the round.
    pub(super) fn rounds(&self, range: Range<usize>, at: &str) {
        for n in range {
            self.round(n)
                .unwrap_or_else(|e| panic!("{at}, round {n}: {e}"));
        }
    }

    /// Rounds until one fails (a member was lost); its error.
    pub(super) fn until_failure(&self) -> GroupError {
        for n in 0.. {
            if let Err(error) = self.round(n) {
                return error;
            }
        }
        unreachable!("rounds run until one fails")
    }

    /// Heals from 8 threads at once (one heal: every thread gets the same
    /// generation), checks the path against what the loaded NCCL can do,
    /// and goes on in the new generation. `shrinks`: whether NCCL can
    /// shrink after this fault (not after a death: the closed socket's
    /// error survives the revoke, and ncclCommShrink refuses it).
    pub(super) fn heal(self, shrink: bool, shrinks: bool, label: &str) -> Member {
        let options = HealOptions::new()
            .with_timeout(Duration::from_secs(60))
            .with_shrink(shrink);
        let started = Instant::now();
        let healed: Vec<Healed> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| self.group.heal(&options)))
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("no panic").expect("healed"))
                .collect()
        });
        let took = started.elapsed();
        let first = &healed[0];
        for other in &healed[1..] {
            assert_eq!(other.group().generation(), first.group().generation());
            assert_eq!(other.group().rank(), first.group().rank());
            assert_eq!(other.path(), first.path());
        }
        let caps = Capabilities::loaded().expect("a loaded NCCL");
        let can_shrink = caps.has(Capability::Revoke) && caps.has(Capability::Shrink);
        match first.path() {
            HealPath::Shrunk { shrunk, .. } => {
                assert!(
                    shrink && can_shrink && *shrunk >= 1,
                    "{label}: {:?}",
                    first.path()
                )
            }
            // NCCL refuses to shrink a communicator with an error: from
            // 2.30 a survivor's revoke closes its sockets, which gives that
            // error to another survivor whose operation was still in
            // flight (a race the heal reports, rank by rank).
            HealPath::Recreated { reason } if reason.contains("NCCL reports an error on it") => {
                println!("heal {label}: re-created after NCCL's error on a survivor: {reason}")
            }
            other => assert!(
                !(shrink && can_shrink && shrinks),
                "{label}: NCCL {} can shrink, but the heal took {other:?}",
                caps.version()
            ),
        }
        // The old generation refuses, naming the new one.
        let stale = refused(self.group.all_reduce(
            self.filled(LEN, 0.0),
            ReduceOp::Sum,
            &self.stream,
        ))
        .expect_err("the old generation refuses");
        assert_eq!(stale.kind(), ErrorKind::Healed, "{stale}");
        let olds: Vec<usize> = first
            .agreement()
            .survivors()
            .iter()
            .map(|&survivor| self.olds[survivor])
            .collect();
        println!(
            "heal {label}: generation {} rank {} of {} (old ranks {olds:?}), lost {:?}, {:?}, in {took:?}",
            first.group().generation(),
            first.group().rank(),
            first.group().world_size(),
            first.lost(),
            first.path(),
        );
        Member {
            group: first.group().clone(),
            olds,
            stream: self.stream,
        }
    }
}

fn kill_self(signal: &str) {
    let _ = std::io::stdout().flush();
    let status = Command::new("kill")
        .args([signal, &std::process::id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal}: {status}");
}

/// The options of every rank's group, and of a process joining a grow:
/// the communicator mode the launch names, and `op_timeout`.
pub(super) fn group_options(op_timeout: Duration) -> GroupOptions {
    let comms = if std::env::var(COMMS_VAR).as_deref() == Ok("nonblocking") {
        CommMode::Nonblocking
    } else {
        CommMode::Blocking
    };
    GroupOptions::default()
        .with_comm_mode(comms)
        .with_timeout(Duration::from_secs(60))
        .with_op_timeout(op_timeout)
        .without_dump_dir()
}

/// This process's part of `scenario`.
pub fn run(scenario: Scenario) {
    if scenario == Scenario::GrowJoiner {
        return super::grow::join();
    }
    let ranks = support::ranks();
    let dir = ranks
        .dir
        .clone()
        .expect("NCCL_LAUNCH_DIR is set by nccl-launch");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let op_timeout = match scenario {
        Scenario::LoseTwo => LOSS_OP_TIMEOUT,
        _ => OP_TIMEOUT,
    };
    let me = Member {
        group: ProcessGroup::builder("heal")
            .options(group_options(op_timeout))
            .config(&RendezvousConfig::from_env().expect("the launch variables"))
            .build()
            .expect("the group"),
        olds: (0..ranks.world).collect(),
        stream: ranks.device().new_stream().expect("a stream"),
    };
    for n in 0..FAULT_AT {
        me.round(n).expect("a round before any fault");
    }
    let shrink = var(SHRINK_VAR) == "1";
    match scenario {
        Scenario::LoseTwo => lose_two(me, shrink, &dir),
        Scenario::Stopped => stopped(me, &dir),
        Scenario::GrowBack => super::grow::grow_back(me, &dir),
        Scenario::GrowJoiner => unreachable!("a joining process runs its own part above"),
    }
}

/// World 4: rank 3 exits, the others heal to 3; old rank 2 is killed, the
/// others heal to 2.
fn lose_two(me: Member, shrink: bool, dir: &Path) {
    let old = me.old();
    if old == 3 {
        println!("heal victim: exiting between operations");
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    // Outstanding when the rank is lost: each must end in an error.
    let outstanding: Vec<Work<Tensor<f32>>> = (0..2)
        .filter_map(|_| {
            refused(
                me.group
                    .all_reduce(me.filled(LEN, 1.0), ReduceOp::Sum, &me.stream),
            )
            .ok()
        })
        .collect();
    let error = me.until_failure();
    println!("heal phase 0 failed ({:?}): {error}", error.kind());
    for work in outstanding {
        work.synchronize(PATIENCE)
            .expect_err("an all_reduce that rank 3 never joined cannot succeed");
    }
    let me = me.heal(shrink, false, "4 -> 3");
    me.rounds(0..ROUNDS, "world 3");
    if old == 2 {
        let _in_flight = refused(me.group.all_reduce(
            me.filled(LEN, 1.0),
            ReduceOp::Sum,
            &me.stream,
        ));
        kill_self("-KILL");
        panic!("not killed");
    }
    let error = me.until_failure();
    println!("heal phase 1 failed ({:?}): {error}", error.kind());
    let me = me.heal(shrink, false, "3 -> 2");
    me.rounds(0..ROUNDS, "world 2");
    me.group.destroy().expect("destroy the healed group");
    println!("heal report: ok after two heals");
    finish(dir, old, &["done.1"]);
}

/// World 3: rank 2 stops with an operation in flight; the others heal to
/// 2; continued, rank 2 fails cleanly and is excluded.
fn stopped(me: Member, dir: &Path) {
    let old = me.old();
    if old == 2 {
        publish(dir, "stopped-pid", &std::process::id().to_string());
        let work = refused(
            me.group
                .all_reduce(me.filled(LEN, 1.0), ReduceOp::Sum, &me.stream),
        )
        .expect("issued before stopping");
        kill_self("-STOP");
        // Continued once the others healed without this rank.
        let error = work
            .synchronize(PATIENCE)
            .expect_err("the others left this all_reduce");
        println!("heal stopped rank: its operation failed: {error}");
        let error = me
            .group
            .heal(&HealOptions::new().with_timeout(Duration::from_secs(20)))
            .expect_err("healed without this rank");
        assert_eq!(error.kind(), ErrorKind::Excluded, "{error}");
        println!("heal stopped rank: excluded: {error}");
        publish(dir, "stopped-done", "");
        return;
    }
    let error = me.until_failure();
    println!("heal phase 0 failed ({:?}): {error}", error.kind());
    let me = me.heal(true, true, "3 -> 2 (stopped)");
    me.rounds(0..STOPPED_ROUNDS, "world 2");
    if old == 0 {
        let pid = await_mark(dir, "stopped-pid", PATIENCE).expect("rank 2's pid");
        let status = Command::new("kill")
            .args(["-CONT", pid.trim()])
            .status()
            .expect("kill -CONT");
        assert!(status.success(), "kill -CONT: {status}");
    }
    me.rounds(
        STOPPED_ROUNDS..2 * STOPPED_ROUNDS,
        "world 2 after continuing",
    );
    me.group.destroy().expect("destroy the healed group");
    println!("heal report: ok, the stopped rank disturbed nothing");
    finish(dir, old, &["done.1", "stopped-done"]);
}

/// Rank 0 hosts the store: it leaves last, once the marks `waits_for`
/// (each other survivor's `done.<old rank>`, or the stopped rank's own)
/// are published.
pub(super) fn finish(dir: &Path, old: usize, waits_for: &[&str]) {
    publish(dir, &format!("done.{old}"), "");
    if old == 0 {
        for mark in waits_for {
            let _ = await_mark(dir, mark, PATIENCE);
        }
    }
}
