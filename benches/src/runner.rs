//! Running a benchmark: one thread per GPU (rank = GPU index), one
//! communicator and one non-blocking stream per rank (and, for the group
//! layer, one process of a `ProcessGroup` per rank, meeting the others in
//! one in-process store), and the main thread gathering every rank's
//! measurements into table rows.
//!
//! Per collective, each rank allocates its typed send and receive buffers
//! once (for the largest size). Then, per size and mode (out-of-place, then
//! in-place), for each layer of the run (one, or A and B of `--compare`):
//! it checks the result once (untimed, with `-c 1`); then runs each
//! layer's warm-up; with `-G N` captures each layer's `iters` calls in a
//! CUDA graph; then times `batches` batches per layer, alternating the
//! layers (A, B, A, B, ...), each batch after a barrier of every rank:
//! `iters` back-to-back launches (or `N` graph replays) followed by one
//! stream synchronisation. A layer's time is the median of its batches on
//! each rank; a row's time is the mean over the ranks, as nccl-tests
//! reports by default.
//!
//! Submodules: `plan` (what every rank runs), `barrier` (where the
//! ranks meet), `rank` (a rank thread), `gather` (the main thread's
//! side); the text around the rows is `report`'s.

mod barrier;
mod gather;
mod plan;
mod rank;

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nccl_core::UniqueId;
use nccl_group::InProcessStore;

use crate::cli::Args;
use crate::env::{Environment, world_size};
use crate::error::BenchError;
use crate::report::Reporter;
use barrier::RankBarrier;
use gather::{Gatherer, Summary};
pub use plan::Plan;
use rank::rank_thread;

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

/// Runs the benchmark of `args` on `env`, writing the table to `out`.
///
/// # Errors
/// Bad flag combinations, a failing rank, or output that cannot be written.
pub fn run(args: &Args, env: &Environment, out: impl Write) -> Result<Summary, BenchError> {
    let world = world_size(args.ngpus, env.gpu_count)?;
    let plan = Arc::new(Plan::new(args, world)?);
    let json: Option<Box<dyn Write>> = match &args.json {
        Some(path) => Some(Box::new(io::BufWriter::new(create_file(path)?))),
        None => None,
    };
    if let Some(path) = &args.plot {
        // Fail now, not after the run, when the plot cannot be written.
        create_file(path)?;
    }
    let progress = progress_bar(plan.row_count());
    let mut reporter = Reporter::new(out, json).with_progress(progress.clone());
    let id = UniqueId::new()?;
    // Where the group layer's processes (the rank threads) meet.
    let store = Arc::new(InProcessStore::new());
    let barrier = Arc::new(RankBarrier::new(world));
    let (sender, receiver) = mpsc::channel();
    let mut threads = Vec::with_capacity(world);
    for rank in 0..world {
        let (plan, barrier, sender) = (Arc::clone(&plan), Arc::clone(&barrier), sender.clone());
        let store = Arc::clone(&store);
        let thread = std::thread::Builder::new()
            .name(format!("nccl-perf rank {rank}"))
            .spawn(move || rank_thread(rank, &plan, id, &store, &barrier, &sender))
            .map_err(|source| BenchError::Io {
                what: "a rank thread".to_string(),
                source,
            })?;
        threads.push(thread);
    }
    drop(sender);
    let mut gatherer = Gatherer::new(receiver, world, barrier, progress.clone());
    let summary = gatherer.report(&plan, env, &mut reporter);
    progress.finish_and_clear();
    if summary.is_err() {
        // Ranks may be blocked inside NCCL: abort them all and leave the
        // threads behind (the process exits next).
        gatherer.stop_everyone();
        return summary;
    }
    for thread in threads {
        let _ = thread.join();
    }
    if let (Some(path), Ok(summary)) = (&args.plot, &summary) {
        let title = format!(
            "nccl-perf {}: {} world {} {}",
            plan.layers_title(),
            plan.selection.dtype_names(),
            plan.world,
            if plan.graph > 0 {
                format!("(CUDA graph x{})", plan.graph)
            } else {
                String::new()
            }
        );
        crate::plot::write_svg(path, &summary.rows, title.trim_end())?;
    }
    summary
}

/// The whole command: checks the machine, runs, and maps the outcome to an
/// exit status (0 ok, 1 failed or wrong results, 2 usage or missing
/// driver/GPU/NCCL). Errors are one line on stderr.
pub fn main_with(args: &Args) -> u8 {
    let outcome = crate::env::probe().and_then(|env| run(args, &env, io::stdout()));
    match outcome {
        Ok(summary) if summary.wrong == 0 => 0,
        Ok(summary) => {
            eprintln!(
                "nccl-perf: error: {} wrong element(s) found; see the #wrong columns",
                summary.wrong
            );
            1
        }
        Err(error) => {
            eprintln!("nccl-perf: error: {}", error.one_line());
            error.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_progress_bar_without_a_terminal() {
        // Under the test harness stderr is a pipe or a file, never drawn on.
        if !io::stderr().is_terminal() {
            assert!(progress_bar(10).is_hidden());
        }
    }
}
