//! Launches longer than a test can wait for: the supervisor on a clock
//! the test moves. Liveness only: every real wait is bounded by
//! [`PATIENCE`], and what the supervisor saw is read off the clock.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use nccl_test_support::processes::await_mark;

use crate::clock::Clock;
use crate::{Ending, Launch, Outcome, Placement};

/// The hang guard of every real wait here.
const PATIENCE: Duration = Duration::from_secs(120);

/// The job's length on the test's clock: past any bound a launch once had.
const TWENTY_MINUTES: Duration = Duration::from_secs(20 * 60);

/// The ranks of every launch here.
const RANKS: usize = 2;

/// A clock that stands still until the test moves it, counting how often
/// it was read.
#[derive(Debug, Default)]
struct ManualClock {
    now_us: AtomicU64,
    readings: AtomicU64,
}

impl ManualClock {
    fn advance(&self, by: Duration) {
        let by_us = u64::try_from(by.as_micros()).expect("a test's step fits");
        self.now_us.fetch_add(by_us, Ordering::SeqCst);
    }

    /// Waits (at most [`PATIENCE`]) until the clock has been read twice
    /// more: the second of those reads began after this call did, so it saw
    /// every advance before it.
    fn await_fresh_read(&self) {
        let seen = self.readings.load(Ordering::SeqCst);
        let read_twice = || self.readings.load(Ordering::SeqCst) >= seen + 2;
        let mut waited = Duration::ZERO;
        while !read_twice() && waited < PATIENCE {
            thread::sleep(Duration::from_millis(5));
            waited += Duration::from_millis(5);
        }
        assert!(read_twice(), "the supervisor stopped reading its clock");
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        let now = Duration::from_micros(self.now_us.load(Ordering::SeqCst));
        self.readings.fetch_add(1, Ordering::SeqCst);
        now
    }
}

/// Each rank marks `$MARKS/<rank>` once it runs, then waits for
/// `$MARKS/go` and exits 0; without it, it exits 9 after about
/// [`PATIENCE`].
const WAIT_FOR_GO: &str = "touch \"$MARKS/$RANK\"; i=0; \
     while [ ! -e \"$MARKS/go\" ]; do i=$((i + 1)); [ $i -gt 12000 ] && exit 9; sleep 0.01; done";

/// Runs `launch` (on a fresh [`ManualClock`]) of ranks that wait for the
/// test; once every rank runs, moves the clock 20 minutes on, waits until
/// the supervisor has seen it, and lets the ranks finish.
fn run_twenty_minutes(launch: Launch) -> Outcome {
    let marks = tempfile::tempdir().expect("a folder for the marks");
    let clock = Arc::new(ManualClock::default());
    let launch = launch
        .with_placement(Placement::SimulatedHosts)
        .with_keep_output(true)
        .with_env("MARKS", marks.path())
        .with_clock(clock.clone());
    thread::scope(|scope| {
        let run = scope.spawn(|| launch.run("sh", ["-c", WAIT_FOR_GO], |_job| {}));
        await_ranks(marks.path());
        clock.advance(TWENTY_MINUTES);
        clock.await_fresh_read();
        std::fs::write(marks.path().join("go"), "").expect("mark go");
        run.join()
            .expect("the launch's thread")
            .expect("the launch starts")
    })
}

fn await_ranks(marks: &Path) {
    for rank in 0..RANKS {
        assert!(
            await_mark(marks, &rank.to_string(), PATIENCE).is_some(),
            "rank {rank} did not start in {PATIENCE:?}"
        );
    }
}

#[test]
fn a_twenty_minute_job_runs_to_completion_with_no_bound_by_default() {
    let outcome = run_twenty_minutes(Launch::new(RANKS).expect("launch"));
    assert!(outcome.success(), "{outcome:?}");
    assert!(!outcome.timed_out, "{outcome:?}");
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(outcome.restarts, 0);
    // `elapsed` is read on the injected clock, which only the test moves:
    // no wall-clock bound.
    assert!(outcome.elapsed >= TWENTY_MINUTES, "{outcome:?}");
}

#[test]
fn a_bound_that_is_asked_for_ends_the_same_job_on_the_same_clock() {
    let launch = Launch::new(RANKS)
        .expect("launch")
        .with_timeout(Some(TWENTY_MINUTES / 2))
        .with_max_restarts(3);
    let outcome = run_twenty_minutes(launch);
    assert!(outcome.timed_out, "{outcome:?}");
    assert_eq!(outcome.exit_code(), 124);
    // A launch its bound ended is not restarted.
    assert_eq!(outcome.restarts, 0);
    for rank in &outcome.ranks {
        assert_eq!(rank.ending, Ending::EndedAtDeadline, "{rank:?}");
    }
}

#[test]
fn master_port_is_picked_outside_the_ephemeral_range_and_binds() {
    let low = std::fs::read_to_string(super::EPHEMERAL_RANGE)
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok());
    for _ in 0..16 {
        let port = super::free_port().expect("a free port");
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port binds");
        if let Some(low) = low.filter(|&low| low > super::LOWEST_PICKED + 1) {
            assert!(
                (super::LOWEST_PICKED..low).contains(&port),
                "{port} outside {}..{low}",
                super::LOWEST_PICKED
            );
        }
    }
}
