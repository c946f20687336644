//! The running ranks of one launch: waiting for them, ending them, and
//! what became of each.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

use crate::clock::Clock;
use crate::output::{Forwarder, Route, Sink};
use crate::signals::{self, Arrivals};
use crate::{LaunchError, Placement, Streams, logs};

/// How often the ranks' processes are polled.
const POLL: Duration = Duration::from_millis(5);

/// How long the output of ranks that ended is still waited for (a process
/// a rank left behind may hold its pipes open).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// What one attempt of a launch was given, as [`crate::Launch`] resolved
/// it.
pub(crate) struct Plan {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) world_size: usize,
    pub(crate) placement: Placement,
    pub(crate) master_port: u16,
    /// The bound on the whole launch, as set.
    pub(crate) timeout: Option<Duration>,
    /// When the launch's bound runs out, on `clock`.
    pub(crate) deadline: Option<Duration>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The restarts before this attempt (`TORCHELASTIC_RESTART_COUNT`).
    pub(crate) restart_count: usize,
    /// This attempt's log folder and the streams also shown on the
    /// console, when the launch logs to files.
    pub(crate) logs: Option<(PathBuf, Streams)>,
    pub(crate) forward_signals: bool,
    pub(crate) grace_period: Duration,
    pub(crate) extra_env: Vec<(OsString, OsString)>,
    pub(crate) keep_output: bool,
    pub(crate) dir: tempfile::TempDir,
}

/// How [`Job::wait`] treats a rank that fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitPolicy {
    /// torchrun's: the first rank to fail ends every other rank.
    FailFast,
    /// Every rank runs until it exits or the deadline passes (for tests
    /// in which some ranks are meant to fail).
    All,
}

/// How a rank's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ending {
    /// It exited on its own (or by a signal from outside the launch).
    Exited(ExitStatus),
    /// The launcher ended it because the rank it holds failed first.
    EndedAfterFailureOf(usize),
    /// The launcher ended it at the launch's deadline.
    EndedAtDeadline,
    /// The launcher ended it with SIGKILL because it was still running
    /// after the grace period that followed a forwarded signal, or when
    /// a second signal came ([`crate::Launch::with_forward_signals`]).
    EndedAfterSignal,
    /// [`Job::kill`] ended it.
    Killed,
}

/// What became of one rank.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RankOutcome {
    /// The rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// How it ended.
    pub ending: Ending,
    /// Its exit status (`None` if it could not be collected).
    pub status: Option<ExitStatus>,
    /// Its standard output, when the launch kept output.
    pub stdout: String,
    /// Its standard error, when the launch kept output.
    pub stderr: String,
}

impl RankOutcome {
    /// Whether it exited on its own with status 0.
    pub fn succeeded(&self) -> bool {
        matches!(self.ending, Ending::Exited(status) if status.success())
    }
}

/// What became of a launch.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Outcome {
    /// Each started rank, in the order they were started.
    pub ranks: Vec<RankOutcome>,
    /// The first rank that exited unsuccessfully on its own.
    pub first_failure: Option<usize>,
    /// Whether the deadline passed with ranks still running.
    pub timed_out: bool,
    /// The restarts made before the attempt these ranks are of (its
    /// `TORCHELASTIC_RESTART_COUNT`; see [`crate::Launch::with_max_restarts`]).
    pub restarts: usize,
    /// The signal that stopped the launch, when it forwarded one
    /// ([`crate::Launch::with_forward_signals`]).
    pub signal: Option<i32>,
    /// From the start of the first rank to the end of the last (of every
    /// attempt, from [`crate::Launch::run`]).
    pub elapsed: Duration,
}

impl Outcome {
    /// Whether every rank exited on its own with status 0.
    pub fn success(&self) -> bool {
        self.ranks.iter().all(RankOutcome::succeeded)
    }

    /// The rank's outcome, if it was started.
    pub fn rank(&self, rank: usize) -> Option<&RankOutcome> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    /// The launch's exit status as a shell reads it: 128 + the signal
    /// when a forwarded signal stopped it (as for a process that signal
    /// ended), else the first failure's (128 + the signal for a rank a
    /// signal ended), else 124 if the deadline passed (as `timeout(1)`),
    /// else 0.
    pub fn exit_code(&self) -> i32 {
        if let Some(signal) = self.signal {
            return 128 + signal;
        }
        if let Some(status) = self
            .first_failure
            .and_then(|rank| self.rank(rank))
            .and_then(|r| r.status)
        {
            return shell_code(status);
        }
        if self.timed_out {
            124
        } else if self.success() {
            0
        } else {
            1
        }
    }
}

/// `status` as a shell's `$?`.
fn shell_code(status: ExitStatus) -> i32 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    match status.code() {
        Some(0) | None => 1,
        Some(code) => code,
    }
}

/// A rank's process while the launch runs.
struct Running {
    rank: usize,
    child: Child,
    stdout: Forwarder,
    stderr: Forwarder,
    ending: Option<Ending>,
    status: Option<ExitStatus>,
    /// Whether it leads a process group of its own (a launch that
    /// forwards signals): signals then go to the whole group, its own
    /// children too.
    own_group: bool,
}

impl Running {
    /// Collects its status if it has exited.
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.status = Some(status);
        }
        self.status
    }

    /// Sends `signal` to it (to its process group when it has its own),
    /// unless it has exited: its status not yet collected, its PID is
    /// still its own.
    ///
    /// Whether it was sent.
    fn signal(&mut self, signal: Signal) -> bool {
        if self.ending.is_some() || self.poll().is_some() {
            return false;
        }
        let pid = Pid::from_child(&self.child);
        let sent = if self.own_group {
            kill_process_group(pid, signal)
        } else {
            kill_process(pid, signal)
        };
        sent.is_ok()
    }

    /// Ends it with SIGKILL by its own PID (and its process group when it
    /// has its own), unless it has already exited, and collects its
    /// status.
    ///
    /// Whether it was still running.
    fn end(&mut self, ending: Ending) -> bool {
        if self.ending.is_some() {
            return false;
        }
        if let Some(status) = self.poll() {
            self.ending = Some(Ending::Exited(status));
            return false;
        }
        if self.own_group {
            let _ = kill_process_group(Pid::from_child(&self.child), Signal::KILL);
        }
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
        self.ending = Some(ending);
        true
    }
}

/// The ranks of one launch, running.
///
/// Dropping a job ends the ranks still running.
pub struct Job {
    plan: Plan,
    ranks: Vec<Running>,
    /// When the first rank started, on the plan's clock.
    started: Duration,
    /// The signals to forward, when the launch forwards them.
    arrivals: Option<Arrivals>,
}

/// A forwarded signal that is stopping the launch.
struct Stop {
    signal: Signal,
    /// When it came, on the plan's clock.
    since: Duration,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("program", &self.plan.program)
            .field("world_size", &self.plan.world_size)
            .field("placement", &self.plan.placement)
            .field(
                "pids",
                &self
                    .ranks
                    .iter()
                    .map(|r| (r.rank, r.child.id()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Job {
    pub(crate) fn start(
        plan: Plan,
        ranks: &[usize],
        rank_env: impl Fn(usize) -> Vec<(String, String)>,
    ) -> Result<Self, LaunchError> {
        let width = (plan.world_size - 1).to_string().len();
        // Before the first rank starts: a signal that comes while they
        // start is forwarded to them once `wait` runs.
        let arrivals = if plan.forward_signals {
            Some(Arrivals::install().map_err(|source| LaunchError::Io {
                what: "install the SIGTERM and SIGINT handlers that forward them".to_string(),
                source,
            })?)
        } else {
            None
        };
        let mut job = Job {
            ranks: Vec::with_capacity(ranks.len()),
            started: plan.clock.now(),
            plan,
            arrivals,
        };
        for &rank in ranks {
            let mut command = Command::new(&job.plan.program);
            command
                .args(&job.plan.args)
                .envs(rank_env(rank))
                .envs(job.plan.extra_env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            signals::die_with_parent(&mut command);
            if job.plan.forward_signals {
                // A group of its own: a terminal's Ctrl-C reaches it once,
                // through the launcher, and the launcher's signals reach
                // its children too.
                command.process_group(0);
            }
            let prefix = format!("[rank {rank:>width$}] ");
            let [out_route, err_route] = job.routes(rank, &prefix, job.plan.keep_output)?;
            // On failure the ranks already started are ended by `job`'s Drop.
            let mut child = command.spawn().map_err(|source| LaunchError::Spawn {
                rank,
                program: job.plan.program.clone(),
                source,
            })?;
            let pipe_missing = || LaunchError::Io {
                what: format!("read rank {rank}'s output"),
                source: std::io::Error::other("the child has no pipe"),
            };
            let stdout = child.stdout.take().ok_or_else(pipe_missing)?;
            let stderr = child.stderr.take().ok_or_else(pipe_missing)?;
            job.ranks.push(Running {
                rank,
                stdout: Forwarder::start(stdout, format!("rank {rank} stdout"), out_route),
                stderr: Forwarder::start(stderr, format!("rank {rank} stderr"), err_route),
                child,
                ending: None,
                status: None,
                own_group: job.plan.forward_signals,
            });
        }
        Ok(job)
    }

    /// Where `rank`'s two streams go: the console (unless the launch logs
    /// to files and does not tee that stream) and its log files.
    fn routes(&self, rank: usize, prefix: &str, keep: bool) -> Result<[Route; 2], LaunchError> {
        let (files, tee) = match &self.plan.logs {
            Some((attempt, tee)) => (Some(logs::rank_files(attempt, rank)?), *tee),
            // Without files, the console has both.
            None => (None, Streams::Both),
        };
        let [out_file, err_file] = match files {
            Some([out, err]) => [Some(out), Some(err)],
            None => [None, None],
        };
        let console = |sink, shown: bool| shown.then(|| (sink, prefix.to_string()));
        Ok([
            Route {
                console: console(Sink::Stdout, tee.stdout()),
                file: out_file,
                keep,
            },
            Route {
                console: console(Sink::Stderr, tee.stderr()),
                file: err_file,
                keep,
            },
        ])
    }

    /// The number of ranks in the world (started or not).
    pub fn world_size(&self) -> usize {
        self.plan.world_size
    }

    /// Where the ranks run ([`Placement::Gpus`] or [`Placement::SimulatedHosts`]).
    pub fn placement(&self) -> Placement {
        self.plan.placement
    }

    /// The `MASTER_PORT` the ranks were given.
    pub fn master_port(&self) -> u16 {
        self.plan.master_port
    }

    /// The folder the ranks share (`NCCL_LAUNCH_DIR`).
    pub fn dir(&self) -> &Path {
        self.plan.dir.path()
    }

    /// The restarts before this attempt (the ranks'
    /// `TORCHELASTIC_RESTART_COUNT`).
    pub fn restart_count(&self) -> usize {
        self.plan.restart_count
    }

    /// This attempt's log folder, holding a folder per rank with its
    /// `stdout.log` and `stderr.log`, when the launch logs to files
    /// ([`crate::Launch::with_log_dir`]).
    pub fn log_dir(&self) -> Option<&Path> {
        self.plan.logs.as_ref().map(|(dir, _)| dir.as_path())
    }

    /// The process id of `rank`, if it was started.
    pub fn pid(&self, rank: usize) -> Option<u32> {
        self.find(rank).map(|r| r.child.id())
    }

    /// `rank`'s exit status once it has exited (`None` while it runs or if
    /// it was not started).
    pub fn status(&mut self, rank: usize) -> Option<ExitStatus> {
        self.ranks
            .iter_mut()
            .find(|r| r.rank == rank)
            .and_then(Running::poll)
    }

    /// Ends `rank` with SIGKILL, by its PID (and its process group when
    /// the launch forwards signals; nothing if it has exited or was not
    /// started).
    pub fn kill(&mut self, rank: usize) {
        if let Some(running) = self.ranks.iter_mut().find(|r| r.rank == rank) {
            let _ = running.end(Ending::Killed);
        }
    }

    fn find(&self, rank: usize) -> Option<&Running> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    /// Waits for every rank under `policy` and the launch's deadline, and
    /// reports what became of each.
    ///
    /// What the launcher does to a rank is said on its standard error, prefixed
    /// `nccl-launch:`.
    ///
    /// When the launch forwards signals, a SIGTERM or SIGINT that reaches
    /// this process is sent on to every rank still running, which then
    /// has the grace period to exit ([`crate::Launch::with_grace_period`]);
    /// past it, or at a second signal, the ranks still running are ended
    /// with SIGKILL. Ranks that exit after the signal are not failures:
    /// the signal stopped the launch ([`Outcome::signal`]).
    pub fn wait(mut self, policy: WaitPolicy) -> Outcome {
        let clock = Arc::clone(&self.plan.clock);
        let mut first_failure = None;
        let mut timed_out = false;
        let mut stop: Option<Stop> = None;
        loop {
            if let Some(signal) = self.arrivals.as_ref().and_then(Arrivals::take) {
                if stop.is_none() {
                    self.forward(signal);
                    stop = Some(Stop {
                        signal,
                        since: clock.now(),
                    });
                } else {
                    self.end_after_signal(&format!(
                        "at a second signal ({})",
                        signals::name(signal)
                    ));
                }
            }
            let mut running = 0;
            for index in 0..self.ranks.len() {
                let r = &mut self.ranks[index];
                if r.ending.is_some() {
                    continue;
                }
                let Some(status) = r.poll() else {
                    running += 1;
                    continue;
                };
                r.ending = Some(Ending::Exited(status));
                if !status.success() && first_failure.is_none() && stop.is_none() {
                    first_failure = Some(r.rank);
                    if policy == WaitPolicy::FailFast {
                        self.end_after_failure(index, status);
                    }
                }
            }
            if running == 0 {
                break;
            }
            // Read every round, bound or not: the grace period and the
            // deadline go by this one reading.
            let now = clock.now();
            if let Some(stop) = &stop
                && now.saturating_sub(stop.since) >= self.plan.grace_period
            {
                let grace = self.plan.grace_period;
                self.end_after_signal(&format!("{grace:.0?} after {}", signals::name(stop.signal)));
            }
            if self.plan.deadline.is_some_and(|deadline| now >= deadline) {
                timed_out = true;
                self.end_at_deadline();
                break;
            }
            thread::sleep(POLL);
        }
        let elapsed = clock.now().saturating_sub(self.started);
        let output_deadline = Instant::now() + OUTPUT_GRACE;
        let ranks = std::mem::take(&mut self.ranks)
            .into_iter()
            .map(|r| RankOutcome {
                rank: r.rank,
                pid: r.child.id(),
                ending: r.ending.unwrap_or(Ending::EndedAtDeadline),
                status: r.status,
                stdout: r.stdout.finish(output_deadline),
                stderr: r.stderr.finish(output_deadline),
            })
            .collect();
        Outcome {
            ranks,
            first_failure,
            timed_out,
            restarts: self.plan.restart_count,
            signal: stop.map(|stop| stop.signal.as_raw()),
            elapsed,
        }
    }

    /// Sends `signal`, which reached the launcher, to every rank still
    /// running.
    fn forward(&mut self, signal: Signal) {
        let sent: Vec<String> = self
            .ranks
            .iter_mut()
            .filter_map(|r| {
                r.signal(signal)
                    .then(|| format!("rank {} (pid {})", r.rank, r.child.id()))
            })
            .collect();
        let name = signals::name(signal);
        if sent.is_empty() {
            eprintln!("nccl-launch: {name} received; no rank is still running");
        } else {
            eprintln!(
                "nccl-launch: {name} received; forwarded to {}; SIGKILL to those still running after {:.0?} \
                 (at once on a second signal)",
                sent.join(", "),
                self.plan.grace_period
            );
        }
    }

    /// Ends every rank still running as `ending`, naming each one ended
    /// (`rank R (pid P)`) for the launcher's message.
    fn end_running(&mut self, ending: Ending) -> Vec<String> {
        self.ranks
            .iter_mut()
            .filter_map(|r| {
                r.end(ending)
                    .then(|| format!("rank {} (pid {})", r.rank, r.child.id()))
            })
            .collect()
    }

    /// Ends every rank still running, `when` (past the grace period, or
    /// at a second signal).
    fn end_after_signal(&mut self, when: &str) {
        let ended = self.end_running(Ending::EndedAfterSignal);
        if !ended.is_empty() {
            eprintln!(
                "nccl-launch: {} still running {when}; ended with SIGKILL",
                ended.join(", ")
            );
        }
    }

    /// Ends every rank still running after the rank at `index` failed.
    fn end_after_failure(&mut self, index: usize, status: ExitStatus) {
        let failed = self.ranks[index].rank;
        let ended = self.end_running(Ending::EndedAfterFailureOf(failed));
        if ended.is_empty() {
            eprintln!("nccl-launch: rank {failed} failed ({status})");
        } else {
            eprintln!(
                "nccl-launch: rank {failed} failed ({status}); ending {} with SIGKILL",
                ended.join(", ")
            );
        }
    }

    /// Ends every rank still running at the deadline.
    fn end_at_deadline(&mut self) {
        let timeout = self.plan.timeout.unwrap_or_default();
        let ended = self.end_running(Ending::EndedAtDeadline);
        eprintln!(
            "nccl-launch: {} still running after the {:.0?} timeout; ended with SIGKILL",
            ended.join(", "),
            timeout
        );
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for running in &mut self.ranks {
            let _ = running.end(Ending::Killed);
        }
    }
}
