//! The lost-rank matrix: no wrong result passes as a success after a
//! rank is lost.
//!
//! Every cell launches `world` ranks with `nccl_launch` (simulated hosts
//! on GPU 0 when there are fewer GPUs than ranks) that loop all_reduces
//! of `rank + 1` over 1024 f32, reading each result one of three ways in
//! turn: `wait()` then `to_vec` (the README's pattern), `synchronize`
//! then `wait()` then `to_vec`, and a copy the GPU makes after `wait()`,
//! read through cudarc (unchecked: the GPU consumer). Half of each cell's
//! runs use `GroupOptions::blocking_wait`. The last rank then:
//! * exits (status 0, no cleanup) between two operations;
//! * is killed with SIGKILL with an operation in flight;
//! * is stopped with SIGSTOP with an operation in flight, and continued
//!   once the others have failed (it must then fail cleanly too).
//!
//! Every survivor must see, on the checked paths, either the right sum or
//! an `Err`; a wrong sum read through the GPU copy must be named among
//! the group failure's `suspects`. Cells: world sizes 2 and 4, blocking
//! and nonblocking communicators, the caller's and the group's streams,
//! the three faults; `LOST_RANK_RUNS` runs each (default 3) and
//! `LOST_RANK_EXIT_RUNS` (default 20) for a rank exiting at world size 4
//! on the default options. The counts are printed as a table.

mod rank;

#[path = "../common/launched.rs"]
mod launched;
use launched::{outputs, verdict};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nccl_group::{CommMode, StreamMode};
use nccl_launch::{Ending, Launch, Outcome, Placement, WaitPolicy};
use nccl_test_support as support;
use nccl_test_support::group::launched_role;
use nccl_test_support::processes::{await_mark_while, publish};

/// What happens to the last rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Exits,
    Killed,
    Stopped,
}

impl Fault {
    const ALL: [Fault; 3] = [Fault::Exits, Fault::Killed, Fault::Stopped];

    fn name(self) -> &'static str {
        match self {
            Fault::Exits => "exits",
            Fault::Killed => "killed",
            Fault::Stopped => "stopped",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|fault| fault.name() == name)
    }
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug)]
struct Cell {
    world: usize,
    comms: CommMode,
    streams: StreamMode,
    fault: Fault,
    runs: usize,
}

const FAULT_VAR: &str = "LOST_RANK_FAULT";
const COMMS_VAR: &str = "LOST_RANK_COMMS";
const STREAMS_VAR: &str = "LOST_RANK_STREAMS";
const BLOCKING_WAIT_VAR: &str = "LOST_RANK_BLOCKING_WAIT";
const CHILD: &str = "gpu_lost_rank_child";

/// The operation at which the last rank's fault happens.
const FAULT_AT: usize = 12;
/// Operations a survivor issues at most (it fails well before).
const OPS: usize = FAULT_AT + 30;
/// The ranks' operation timeout: what a stopped rank costs the others.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// The bound on one launch.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(90);
/// How long marks are waited for.
const MARK_TIMEOUT: Duration = Duration::from_secs(60);
/// Launches run at once (each is a few processes on the same GPU).
const PARALLEL: usize = 3;

/// Marks in a launch's folder.
const VICTIM_READY: &str = "victim-ready";
const VICTIM_CONTINUED: &str = "victim-continued";

fn runs_from(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cells() -> Vec<Cell> {
    let runs = runs_from("LOST_RANK_RUNS", 3);
    let exit_runs = runs_from("LOST_RANK_EXIT_RUNS", 20);
    let mut cells = Vec::new();
    for world in [2, 4] {
        for comms in [CommMode::Blocking, CommMode::Nonblocking] {
            for streams in [StreamMode::Caller, StreamMode::Separate] {
                for fault in Fault::ALL {
                    let default_options =
                        comms == CommMode::Blocking && streams == StreamMode::Caller;
                    let runs = if world == 4 && fault == Fault::Exits && default_options {
                        exit_runs
                    } else {
                        runs
                    };
                    cells.push(Cell {
                        world,
                        comms,
                        streams,
                        fault,
                        runs,
                    });
                }
            }
        }
    }
    cells
}

fn comms_name(mode: CommMode) -> &'static str {
    if mode == CommMode::Nonblocking {
        "nonblocking"
    } else {
        "blocking"
    }
}

fn streams_name(mode: StreamMode) -> &'static str {
    if mode == StreamMode::Separate {
        "separate"
    } else {
        "caller"
    }
}

/// What one run's survivors reported.
#[derive(Default)]
struct Tally {
    runs: usize,
    /// Runs in which every survivor ended with an error and none read a
    /// wrong value as a success.
    clean: usize,
    /// Checked reads that returned a wrong value as `Ok`.
    silent_wrong: usize,
    /// Wrong values read through the GPU copy, and how many of them the
    /// failure named as suspect.
    gpu_wrong: usize,
    gpu_named: usize,
    problems: Vec<String>,
}

#[test]
fn gpu_lost_rank_never_passes_a_wrong_result_as_a_success() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let exe = std::env::current_exe().expect("the test binary");
    let jobs: Vec<(Cell, usize)> = cells()
        .into_iter()
        .flat_map(|cell| (0..cell.runs).map(move |run| (cell, run)))
        .collect();
    let next = Mutex::new(0usize);
    let tallies: Mutex<Vec<(String, Tally)>> = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| {
                loop {
                    let index = {
                        let mut next = next.lock().unwrap();
                        let index = *next;
                        *next += 1;
                        index
                    };
                    let Some(&(cell, run)) = jobs.get(index) else {
                        return;
                    };
                    let label = format!(
                        "world {} {} comms {} streams {}",
                        cell.world,
                        comms_name(cell.comms),
                        streams_name(cell.streams),
                        cell.fault.name()
                    );
                    let result = launch_with_a_free_port(&exe, cell, run);
                    let mut tallies = tallies.lock().unwrap();
                    let tally = match tallies.iter().position(|(l, _)| *l == label) {
                        Some(i) => &mut tallies[i].1,
                        None => {
                            tallies.push((label.clone(), Tally::default()));
                            &mut tallies.last_mut().unwrap().1
                        }
                    };
                    tally.runs += 1;
                    match result {
                        Ok(report) => {
                            tally.silent_wrong += report.silent_wrong;
                            tally.gpu_wrong += report.gpu_wrong;
                            tally.gpu_named += report.gpu_named;
                            if report.silent_wrong == 0 && report.gpu_wrong == report.gpu_named {
                                tally.clean += 1;
                            } else {
                                tally.problems.push(format!("run {run}: {}", report.text));
                            }
                        }
                        Err(problem) => tally.problems.push(format!("run {run}: {problem}")),
                    }
                }
            });
        }
    });
    let mut tallies = tallies.into_inner().unwrap();
    tallies.sort_by(|a, b| a.0.cmp(&b.0));
    println!(
        "lost-rank matrix in {:?}: cell | runs | clean | silent wrong | GPU-copy wrong | named suspect",
        started.elapsed()
    );
    let mut failures = Vec::new();
    for (label, t) in &tallies {
        println!(
            "| {label} | {} | {} | {} | {} | {} |",
            t.runs, t.clean, t.silent_wrong, t.gpu_wrong, t.gpu_named
        );
        for problem in &t.problems {
            failures.push(format!("{label}: {problem}"));
        }
    }
    let silent: usize = tallies.iter().map(|(_, t)| t.silent_wrong).sum();
    println!("lost-rank matrix: {silent} silent wrong results in all");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What the survivors of one run reported, summed.
struct Report {
    silent_wrong: usize,
    gpu_wrong: usize,
    gpu_named: usize,
    text: String,
}

/// How many launches of one run a port taken between nccl-launch's pick
/// and rank 0's bind may cost.
const PORT_TRIES: usize = 3;
/// What a rank prints when its store's port was taken.
const PORT_TAKEN: &str = "Address already in use";

/// [`launch`], launched again when rank 0 could not bind its store's
/// port (another launch running beside it took it first): the run
/// never reached its fault, so it is the harness's, not the group's.
fn launch_with_a_free_port(exe: &Path, cell: Cell, run: usize) -> Result<Report, String> {
    let mut tries = 1;
    loop {
        match launch(exe, cell, run) {
            Err(problem) if problem.contains(PORT_TAKEN) && tries < PORT_TRIES => {
                println!("run {run}: rank 0's store port was taken: launching again");
                tries += 1;
            }
            result => return result,
        }
    }
}

/// One launch of `cell`, run `run`: the fault, then every rank's report.
fn launch(exe: &Path, cell: Cell, run: usize) -> Result<Report, String> {
    let victim = cell.world - 1;
    let launch = Launch::new(cell.world)
        .map_err(|e| format!("launch: {e}"))?
        .with_placement(Placement::Auto)
        .with_visible_gpus(nccl_core::Device::count().map_err(|e| format!("counting GPUs: {e}"))?)
        .with_timeout(Some(LAUNCH_TIMEOUT))
        .with_keep_output(true)
        .with_env(FAULT_VAR, cell.fault.name())
        .with_env(COMMS_VAR, comms_name(cell.comms))
        .with_env(STREAMS_VAR, streams_name(cell.streams))
        .with_env(BLOCKING_WAIT_VAR, if run % 2 == 1 { "1" } else { "0" })
        .with_env("NCCL_RS_STORE", "tcp")
        .with_env("NCCL_RS_STORE_TIMEOUT_SECS", "30");
    let args = ["--exact", CHILD, "--nocapture", "--test-threads=1"];
    let mut job = launch
        .spawn(exe, args)
        .map_err(|e| format!("launch: {e}"))?;
    // A rank that ended early (a library that does not load, a failed
    // creation) publishes no mark: the waits below end with it.
    let dir = job.dir().to_path_buf();
    if cell.fault != Fault::Exits {
        let ready = await_mark_while(&dir, VICTIM_READY, MARK_TIMEOUT, || {
            job.status(victim).is_none()
        });
        if ready.is_none() {
            (0..cell.world).for_each(|rank| job.kill(rank));
            let outcome = job.wait(WaitPolicy::All);
            return Err(format!(
                "rank {victim} never reached operation {FAULT_AT}{}",
                outputs(&outcome)
            ));
        }
        match cell.fault {
            Fault::Killed => job.kill(victim),
            _ => signal(job.pid(victim), "-STOP")?,
        }
    }
    if cell.fault == Fault::Stopped {
        // The survivors fail within the operation timeout; then the
        // stopped rank goes on, and must fail cleanly too.
        for rank in 0..victim {
            let done = await_mark_while(&dir, &format!("done.{rank}"), MARK_TIMEOUT, || {
                job.status(rank).is_none()
            });
            if done.is_none() {
                break;
            }
        }
        signal(job.pid(victim), "-CONT")?;
        publish(job.dir(), VICTIM_CONTINUED, "");
    }
    let outcome = job.wait(WaitPolicy::All);
    check(cell, &outcome)
}

fn signal(pid: Option<u32>, signal: &str) -> Result<(), String> {
    let pid = pid.ok_or("the victim has no process id")?;
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .map_err(|e| format!("kill {signal} {pid}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill {signal} {pid}: {status}"))
    }
}

/// Sums the survivors' `lost-rank report` lines; any rank that did not
/// end as its part says is a problem.
fn check(cell: Cell, outcome: &Outcome) -> Result<Report, String> {
    let victim = cell.world - 1;
    if let Some(r) = outcome
        .ranks
        .iter()
        .find(|r| format!("{}{}", r.stdout, r.stderr).contains(PORT_TAKEN))
    {
        return Err(format!("rank {}: {PORT_TAKEN}", r.rank));
    }
    let mut report = Report {
        silent_wrong: 0,
        gpu_wrong: 0,
        gpu_named: 0,
        text: String::new(),
    };
    let mut problems = Vec::new();
    if outcome.timed_out {
        problems.push(format!(
            "the launch ran past {LAUNCH_TIMEOUT:?} (a rank hung)"
        ));
    }
    for r in &outcome.ranks {
        if r.rank == victim {
            let ok = match cell.fault {
                Fault::Exits => r.succeeded(),
                Fault::Killed => r.ending == Ending::Killed,
                Fault::Stopped => {
                    r.succeeded() && r.stdout.contains("lost-rank victim: failed cleanly")
                }
            };
            if !ok {
                problems.push(format!("the victim ended {:?}", r.ending));
            }
            continue;
        }
        let Some(line) = r
            .stdout
            .lines()
            .find(|l| l.starts_with("lost-rank report:"))
        else {
            problems.push(format!(
                "rank {} ended {:?} without a report",
                r.rank, r.ending
            ));
            continue;
        };
        let field = |name: &str| -> usize {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or(usize::MAX)
        };
        report.silent_wrong += field("silent_wrong");
        report.gpu_wrong += field("gpu_wrong");
        report.gpu_named += field("gpu_named");
        report.text.push_str(&format!("\nrank {}: {line}", r.rank));
        if !r.succeeded() {
            problems.push(format!("rank {} ended {:?}", r.rank, r.ending));
        }
    }
    verdict(problems, report, outcome)
}

/// One rank of a cell (SKIP unless launched by the matrix).
#[test]
fn gpu_lost_rank_child() {
    let not_launched = format!("{CHILD} runs only as a rank launched by the lost-rank matrix");
    if let Some(fault) = launched_role(FAULT_VAR, Fault::from_name, &not_launched) {
        rank::run(fault);
    }
}
