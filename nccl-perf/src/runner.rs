//! Running a benchmark: in each process of the run (one alone, or each of
//! a launch), one thread per GPU, one communicator and one non-blocking
//! stream per rank (and, for the group layers, one member of a
//! `ProcessGroup` per rank), and the main thread gathering the ranks'
//! measurements; process 0 turns every rank's into table rows.
//!
//! Per collective, each rank allocates its typed send and receive buffers
//! once (for the largest size). Then, per size and mode (out-of-place, then
//! in-place), for each layer of the run (one, or A and B of `--compare`):
//! it checks the result once (untimed, with `-c 1`); then runs each
//! layer's warm-up; with `-G N` captures each layer's `iters` calls in a
//! CUDA graph; then times `batches` batches per layer, alternating the
//! layers (A, B, A, B, ...), each batch after a barrier of every rank of
//! every process: `iters` back-to-back launches (or `N` graph replays)
//! followed by one stream synchronisation. A layer's time is the median of
//! its batches on each rank; a row's time is reduced over the ranks as
//! `-a` says (the mean by default, as nccl-tests), its `#wrong` summed.
//!
//! The processes meet at their launch's store (`meeting`): they check they
//! run the same plan before any communicator is created, share the unique
//! id, hold the barriers, send their ranks' samples to process 0 and learn
//! from it how the run ended; a failing process publishes its failure
//! there, and every other stops its ranks and exits with its status.
//!
//! Submodules: `layout` (which ranks and GPUs a process has), `plan` (what
//! every rank runs), `meeting` (where the processes meet), `barrier` (a
//! rank's side of the barriers), `rank` (a rank thread), `gather` (the main
//! thread's side), `reduce` (`-a`), `rows` (process 0's tables); the text
//! around the rows is `report`'s.

mod barrier;
mod gather;
mod layout;
mod meeting;
mod plan;
mod protocol;
mod rank;
mod reduce;
mod rows;

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::Args;
use crate::env::Environment;
use crate::error::BenchError;
use crate::report::{Machine, Reporter};
use crate::world::World;
use gather::Gatherer;
pub use layout::Layout;
use meeting::Meeting;
pub use plan::Plan;
#[cfg(test)]
pub(crate) use plan::tests::{COMPARE_AND_GRAPH, plan_of};
use rank::{RankPlace, rank_thread};
use rows::{Summary, Tables, finish};

/// How long process 0 waits for the others to leave after a failure,
/// before it exits and takes a launch's TCP store with it.
const FAILURE_GRACE: Duration = Duration::from_secs(10);

fn create_file(path: &Path) -> Result<std::fs::File, BenchError> {
    std::fs::File::create(path).map_err(|source| BenchError::Io {
        what: path.display().to_string(),
        source,
    })
}

/// A progress bar of `rows` table rows on stderr, or a hidden one when
/// stderr is not a terminal (so logs and pipes get no control characters).
pub fn progress_bar(rows: u64) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(rows), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} rows (eta {eta}) {msg}",
    ) {
        bar.set_style(style);
    }
    bar.set_message("starting the ranks");
    bar
}

/// Checks that every process runs `plan`, before any of them creates a
/// communicator (NCCL would wait forever for ranks that count another
/// world size).
fn agree(meeting: &Meeting, layout: &Layout, plan: &Plan) -> Result<(), BenchError> {
    let mine = plan.fingerprint();
    let bytes = serde_json::to_vec(&mine).map_err(|error| {
        BenchError::Usage(format!(
            "internal error: the plan cannot be shared ({error})"
        ))
    })?;
    let what = "the check that every process runs the same plan";
    for (process, bytes) in meeting.all_gather("plan", what, &bytes)?.iter().enumerate() {
        let theirs: Vec<(String, String)> = serde_json::from_slice(bytes).unwrap_or_default();
        let differs = mine
            .iter()
            .zip(theirs.iter().map(Some).chain(std::iter::repeat(None)))
            .find(|(a, b)| Some(*a) != *b);
        if let Some(((name, value), other)) = differs {
            let other = other.map_or("unreadable", |(_, other)| other.as_str());
            return Err(BenchError::Usage(format!(
                "process {process}'s {name} is {other}, process {}'s is {value}: start every process \
                 with the same flags and GPUs per process",
                layout.process
            )));
        }
    }
    Ok(())
}

/// Runs this process's part of the benchmark of `args` on `env`; process
/// 0 writes the table to `out`.
///
/// # Errors
/// Bad flags or flags that differ between processes, a failing rank in
/// any process, or output that cannot be written.
pub fn run(
    args: &Args,
    env: &Environment,
    meeting: &Arc<Meeting>,
    out: impl Write,
) -> Result<Summary, BenchError> {
    let layout = Layout::new(meeting.world(), args.threads, args.ngpus, env.gpu_count)?;
    let plan = Arc::new(Plan::new(args, &layout)?);
    agree(meeting, &layout, &plan)?;
    let lead = layout.process == 0;
    let json: Option<Box<dyn Write>> = match &args.json {
        Some(path) if lead => Some(Box::new(io::BufWriter::new(create_file(path)?))),
        _ => None,
    };
    if let (Some(path), true) = (&args.plot, lead) {
        // Fail now, not after the run, when the plot cannot be written.
        create_file(path)?;
    }
    let id = meeting.unique_id()?;
    let (sender, receiver) = mpsc::channel();
    let mut threads = Vec::with_capacity(layout.per_process());
    for (index, rank) in layout.ranks().enumerate() {
        let place = RankPlace {
            rank,
            gpu: layout.gpu(index),
        };
        let (plan, meeting, sender) = (Arc::clone(&plan), Arc::clone(meeting), sender.clone());
        let thread = std::thread::Builder::new()
            .name(format!("nccl-perf rank {rank}"))
            .spawn(move || rank_thread(place, &plan, id, &meeting, &sender))
            .map_err(|source| BenchError::Io {
                what: "a rank thread".to_string(),
                source,
            })?;
        threads.push(thread);
    }
    drop(sender);
    let progress = if lead {
        progress_bar(plan.row_count())
    } else {
        ProgressBar::hidden()
    };
    let mut gatherer = Gatherer::new(receiver, layout, Arc::clone(meeting));
    let summary = gather(&mut gatherer, &plan, env, json, out, &progress);
    progress.finish_and_clear();
    let summary = match summary {
        Ok(summary) => summary,
        Err(error) => {
            // Tell the other processes first, then free this one's ranks
            // from NCCL (aborting them) and leave them behind: the process
            // exits next.
            let error = meeting.fail(error);
            gatherer.stop_everyone();
            return Err(error);
        }
    };
    for thread in threads {
        let _ = thread.join();
    }
    #[cfg(feature = "plot")]
    if let (Some(path), true) = (&args.plot, lead) {
        crate::plot::write_svg(path, &summary.rows)?;
    }
    Ok(summary)
}

/// The main thread's part: process 0 writes the tables as the rows
/// complete (and `-M`'s report after them), the others share their ranks'
/// samples (and memory usage); then every process waits for its ranks and
/// learns the run's wrong elements.
fn gather(
    gatherer: &mut Gatherer,
    plan: &Plan,
    env: &Environment,
    json: Option<Box<dyn Write>>,
    out: impl Write,
    progress: &ProgressBar,
) -> Result<Summary, BenchError> {
    let devices = gatherer.devices()?;
    let mut summary = Summary::default();
    let memory_report = plan.method.memory_report;
    if gatherer.meeting().process() != 0 {
        for key in plan.row_keys() {
            gatherer.samples(key)?;
        }
        if memory_report {
            gatherer.memory()?;
        }
    } else {
        let mut reporter = Reporter::new(out, json).with_progress(progress.clone());
        summary = Tables {
            plan,
            reporter: &mut reporter,
            progress,
            samples: |key| gatherer.samples(key),
        }
        .write(&Machine::new(env, devices))?;
        let memory = memory_report.then(|| gatherer.memory()).transpose()?;
        finish(&mut reporter, memory.as_deref())?;
    }
    gatherer.finished()?;
    summary.wrong = gatherer.meeting().conclude(summary.wrong)?;
    Ok(summary)
}

/// 0 for `outcome`'s success; else its error, one line on stderr after
/// `prefix`, and its exit code.
fn exit_status(prefix: &str, outcome: Result<(), BenchError>) -> u8 {
    match outcome {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{prefix} error: {}", error.one_line());
            error.exit_code()
        }
    }
}

/// The whole command, in this process: meets the launch (if any), checks
/// the machine, runs, and maps the outcome to an exit status (0 ok, 1
/// failed or wrong results, 2 usage or missing driver/GPU/NCCL), the same
/// in every process. With `--report` it only redraws the saved rows (2
/// for a file that is not rows). Errors are one line on stderr, after `nccl-perf:`
/// and, in a launch, the process (`process 1/4:`).
pub fn main_with(args: &Args) -> u8 {
    if let Some(rows) = &args.report {
        return exit_status(
            "nccl-perf:",
            crate::redraw::redraw(rows, args.plot.as_deref(), io::stdout()),
        );
    }
    let world = match World::from_env("nccl-perf") {
        Ok(world) => world,
        Err(error) => return exit_status("nccl-perf:", Err(error)),
    };
    let prefix = if world.launched {
        format!("nccl-perf: process {}/{}:", world.rank, world.size)
    } else {
        "nccl-perf:".to_string()
    };
    // The measurements that time one process group instead of the sweep
    // (clap lets at most one through).
    let timed = |run: &dyn Fn() -> Result<(), BenchError>| {
        exit_status(&prefix, crate::env::probe().and_then(|_| run()))
    };
    if let Some(injection) = args.inject {
        return timed(&|| crate::recovery::run(args, injection, &world));
    }
    if let Some(iter) = args.grow_spare {
        return timed(&|| crate::grow_spare::run(args, iter, &world));
    }
    if let Some((secs, stall)) = args.soak.zip(args.stall) {
        return timed(&|| crate::soak::run(args, secs, stall, &world));
    }
    let meeting = Arc::new(Meeting::new(world));
    let outcome = crate::env::probe()
        .and_then(|env| run(args, &env, &meeting, io::stdout()))
        .map_err(|error| meeting.fail(error));
    let grace = match &outcome {
        Ok(_) => meeting.timeout(),
        Err(_) => FAILURE_GRACE,
    };
    let outcome = outcome.and_then(|summary| meeting.leave(grace).map(|()| summary));
    match outcome {
        Ok(summary) if summary.wrong == 0 => 0,
        Ok(summary) => {
            eprintln!(
                "{prefix} error: {} wrong element(s) found over every rank; see the #wrong columns",
                summary.wrong
            );
            1
        }
        Err(error) => {
            // Process 0 lets the others read the failure before the store
            // goes; they say they leave.
            let _ = meeting.leave(grace);
            eprintln!("{prefix} error: {}", error.one_line());
            error.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use nccl_group::{InProcessStore, Store};

    use super::*;
    use crate::threads::on_threads;

    #[test]
    fn no_progress_bar_without_a_terminal() {
        // Under the test harness stderr is a pipe or a file, never drawn on.
        if !io::stderr().is_terminal() {
            assert!(progress_bar(10).is_hidden());
        }
    }

    /// What `agree` says in each of two processes started with these flags
    /// and GPUs per thread.
    fn agreement(flags: [&[&str]; 2], gpus: [u32; 2]) -> Vec<Result<(), BenchError>> {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::with_timeout(Duration::from_secs(10)));
        on_threads(2, |process| {
            let world = World::in_store(process, 2, Arc::clone(&store), "test");
            let layout = Layout::new(&world, 1, Some(gpus[process]), 8).unwrap();
            let args = Args::try_parse_from([&["nccl-perf"], flags[process]].concat()).unwrap();
            let plan = Plan::new(&args, &layout).unwrap();
            let meeting = Meeting::new(world);
            agree(&meeting, &layout, &plan).map_err(|error| meeting.fail(error))
        })
    }

    #[test]
    fn processes_agree_on_the_plan_or_all_stop_with_status_2() {
        assert!(agreement([&[], &[]], [1, 1]).iter().all(Result::is_ok));
        for (flags, gpus, named) in [
            ([&[][..], &[]], [1, 2], "world size"),
            ([&["-n", "5"][..], &[]], [1, 1], "iterations (-n) is"),
        ] {
            let results = agreement(flags, gpus);
            for result in &results {
                let error = result.as_ref().unwrap_err();
                assert_eq!(error.exit_code(), 2, "{error}");
                assert!(error.to_string().contains(named), "{error}");
                assert!(
                    error
                        .to_string()
                        .contains("start every process with the same flags"),
                    "{error}"
                );
            }
        }
    }
}
