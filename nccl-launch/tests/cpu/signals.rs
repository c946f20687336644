//! Signals: SIGTERM and SIGINT sent to `nccl-launch` reach every rank
//! (a second one, or the grace period's end, ends those still running),
//! and no rank outlives a launcher killed with SIGKILL. Liveness only:
//! every wait is bounded by [`PATIENCE`], and the grace periods are long
//! where the test shows that ranks ended before them.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use nccl_test_support::processes::{ChildTest, Ended, await_mark, spawn_captured, wait_children};
use rustix::process::{Pid, Signal, kill_process};

use crate::PATIENCE;

/// The ranks of every launch here.
const RANKS: usize = 3;

/// A grace period no test waits out: ranks that end did so before it.
const LONG_GRACE: &str = "600";

/// The shell script of a rank: it publishes its PID as `$PIDS/$RANK`,
/// then runs `then`.
fn rank_script(before: &str, then: &str) -> String {
    format!(
        "{before} echo $$ > \"$PIDS/$RANK.partial\" && mv \"$PIDS/$RANK.partial\" \"$PIDS/$RANK\" && {then}"
    )
}

/// A running `nccl-launch`; dropped unfinished (a failed assertion), it
/// is killed, and so its ranks.
struct Launcher {
    child: Option<ChildTest>,
    pid: Pid,
}

impl Launcher {
    /// `nccl-launch` of [`RANKS`] simulated hosts running `script`, with
    /// `args` before it, once every rank has published its PID.
    fn start(dir: &Path, args: &[&str], script: &str) -> (Self, Vec<Pid>) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_nccl-launch"));
        command
            .args(["-n", &RANKS.to_string(), "--hosts", "simulated"])
            .args(args)
            .args(["sh", "-c", script])
            .env("PIDS", dir);
        let child = spawn_captured(&mut command);
        let pid = Pid::from_raw(child.id() as i32).expect("a child's pid is positive");
        let launcher = Launcher {
            child: Some(child),
            pid,
        };
        let ranks = (0..RANKS)
            .map(|rank| {
                let text = await_mark(dir, &rank.to_string(), PATIENCE)
                    .unwrap_or_else(|| panic!("rank {rank} did not start in {PATIENCE:?}"));
                let raw = text.trim().parse().expect("a rank's pid");
                Pid::from_raw(raw).expect("a positive pid")
            })
            .collect();
        (launcher, ranks)
    }

    fn signal(&self, signal: Signal) {
        kill_process(self.pid, signal).expect("signal nccl-launch");
    }

    /// How it ended; killed (and the test failed) past [`PATIENCE`].
    fn wait(mut self) -> Ended {
        let child = self.child.take().expect("waited once");
        let ended = wait_children(vec![child], PATIENCE, Duration::ZERO).remove(0);
        assert!(
            ended.status.is_some(),
            "nccl-launch was still running after {PATIENCE:?}, killed\n--- stderr ---\n{}",
            ended.stderr
        );
        ended
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if self.child.is_some() {
            // Not yet collected: the PID is still the launcher's.
            let _ = kill_process(self.pid, Signal::KILL);
        }
    }
}

/// Whether `pid` runs: it exists and is not a zombie (a rank whose new
/// parent has not collected it yet has ended).
fn alive(pid: Pid) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_pid())) else {
        return false;
    };
    // The state follows the command's name, which ends with the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Waits until none of `pids` runs, for at most [`PATIENCE`]; the ones
/// still running then.
fn still_running_after_patience(pids: &[Pid]) -> Vec<Pid> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let running: Vec<Pid> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
        if running.is_empty() || Instant::now() >= deadline {
            return running;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Checks that the launch exited with `code` and said `said` on stderr,
/// and that none of `ranks` is left running.
fn assert_ended(ended: &Ended, code: i32, said: &str, ranks: &[Pid]) {
    assert_eq!(
        ended.status.and_then(|s| s.code()),
        Some(code),
        "{}",
        ended.stderr
    );
    assert!(ended.stderr.contains(said), "{}", ended.stderr);
    let running = still_running_after_patience(ranks);
    assert!(running.is_empty(), "still running: {running:?}");
}

/// Starts a launch with `flags` whose ranks run `trap`, then sleep; sends
/// the launcher `signal` and waits for it: what it did, and the ranks' pids.
fn sleepers_signalled(flags: &[&str], trap: &str, signal: Signal) -> (Ended, Vec<Pid>) {
    let dir = tempfile::tempdir().expect("a folder for the pids");
    let script = rank_script(trap, "exec sleep 600");
    let (launcher, ranks) = Launcher::start(dir.path(), flags, &script);
    launcher.signal(signal);
    (launcher.wait(), ranks)
}

#[test]
fn sigterm_reaches_every_rank_before_the_grace_period_ends() {
    let (ended, ranks) = sleepers_signalled(&["--grace-period", LONG_GRACE], "", Signal::TERM);
    assert_ended(
        &ended,
        128 + 15,
        "SIGTERM received; forwarded to rank 0 (pid ",
        &ranks,
    );
    // They ended by the forwarded SIGTERM: none was left for SIGKILL.
    assert!(
        !ended.stderr.contains("ended with SIGKILL"),
        "{}",
        ended.stderr
    );
}

#[test]
fn ranks_that_ignore_sigterm_are_killed_after_the_grace_period() {
    let (ended, ranks) =
        sleepers_signalled(&["--grace-period", "1"], "trap '' TERM;", Signal::TERM);
    assert_ended(
        &ended,
        128 + 15,
        "still running 1s after SIGTERM; ended with SIGKILL",
        &ranks,
    );
}

#[test]
fn a_second_sigint_ends_the_ranks_at_once() {
    let dir = tempfile::tempdir().expect("a folder for the pids");
    // Each rank notes the forwarded SIGINT and goes on: the signal reached
    // its whole process group (the `sleep` too, which it ends).
    let script = rank_script(
        "trap 'touch \"$PIDS/$RANK.int\"' INT;",
        "while :; do sleep 0.1; done",
    );
    let (launcher, ranks) = Launcher::start(dir.path(), &["--grace-period", LONG_GRACE], &script);
    launcher.signal(Signal::INT);
    for rank in 0..RANKS {
        assert!(
            await_mark(dir.path(), &format!("{rank}.int"), PATIENCE).is_some(),
            "rank {rank} never got the forwarded SIGINT"
        );
    }
    launcher.signal(Signal::INT);
    let ended = launcher.wait();
    assert_ended(
        &ended,
        128 + 2,
        "still running at a second signal (SIGINT); ended with SIGKILL",
        &ranks,
    );
}

#[test]
fn no_rank_outlives_a_killed_launcher() {
    let dir = tempfile::tempdir().expect("a folder for the pids");
    let script = rank_script("", "exec sleep 600");
    let (launcher, ranks) = Launcher::start(dir.path(), &[], &script);
    assert!(ranks.iter().all(|&pid| alive(pid)));
    launcher.signal(Signal::KILL);
    let ended = launcher.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&ended.status.expect("ended")),
        Some(9)
    );
    // Their parent-death signal: the kernel ends them, not the launcher.
    let running = still_running_after_patience(&ranks);
    assert!(running.is_empty(), "still running: {running:?}");
}

#[test]
fn a_launch_a_signal_stopped_is_not_restarted() {
    let flags = ["--max-restarts", "3", "--grace-period", LONG_GRACE];
    let (ended, ranks) = sleepers_signalled(&flags, "", Signal::TERM);
    assert_ended(&ended, 128 + 15, "SIGTERM received; forwarded", &ranks);
    assert!(!ended.stderr.contains("restart"), "{}", ended.stderr);
}
