//! nccl-launch: start N ranks of any program on one host, the way torchrun
//! does, and watch them.
//!
//! Each rank is a process of its own with torchrun's variables set
//! (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`,
//! `MASTER_ADDR`, `MASTER_PORT`, `TORCHELASTIC_RESTART_COUNT`). Where the host has a GPU per rank, rank
//! `r` is local rank `r` and uses GPU `r`. Where it has fewer, every rank
//! runs on GPU 0 as a **simulated host** of its own: a distinct
//! `NCCL_HOSTID` (`simhost<rank>`), NCCL's socket transport on loopback
//! (`NCCL_SOCKET_IFNAME=lo`, `NCCL_IB_DISABLE=1`) and NVLink multicast off
//! (`NCCL_NVLS_ENABLE=0`). NCCL then takes the ranks for separate hosts,
//! so a communicator of N ranks forms on one GPU. That tests what a
//! distributed program does at world size N (results, splits, rendezvous,
//! faults, host cost per call); its GPU time and bandwidth at N > 1 mean
//! nothing (sockets, one GPU time-sliced).
//!
//! The `nccl-launch` command prefixes each rank's output with its rank
//! (or writes it to files, [`Launch::with_log_dir`]), ends the other ranks
//! (each by its own PID) at the first failure, and then starts every rank
//! again, up to [`Launch::with_max_restarts`] times, with the next
//! `TORCHELASTIC_RESTART_COUNT`; it exits with the last attempt's status.
//! As torchrun, it puts no bound on the launch unless asked
//! ([`Launch::with_timeout`]).
//! For operations: it forwards SIGTERM and SIGINT (what Slurm, Kubernetes
//! and a terminal's Ctrl-C send) to the ranks and ends those still
//! running a grace period later ([`Launch::with_forward_signals`],
//! [`Launch::with_grace_period`]), and no rank outlives it: each rank gets
//! SIGKILL when the launcher dies, even by SIGKILL (Linux's parent-death
//! signal). Install it with `cargo install nccl-launch`.
//! [`Launch`] is the same as a library: [`Launch::run`] as the command
//! runs, [`Launch::spawn`] and [`Launch::spawn_ranks`] one attempt, for
//! tests that orchestrate ranks themselves (kill one, start all but one). The library needs no CUDA:
//! it is told how many GPUs there are ([`Launch::with_visible_gpus`]); the
//! command counts them (feature `count-gpus`, on by default). The
//! variables come from nccl-rendezvous
//! ([`RendezvousConfig::launch_vars`]), the table the ranks read them
//! back with.
//!
//! ```no_run
//! use std::time::Duration;
//! use nccl_launch::{Launch, Placement, Streams, WaitPolicy};
//!
//! # fn main() -> Result<(), nccl_launch::LaunchError> {
//! let launch = Launch::new(4)?
//!     .with_placement(Placement::Auto)
//!     .with_visible_gpus(1) // a host of one GPU: four simulated hosts on it
//!     .with_timeout(Some(Duration::from_secs(120)));
//! let job = launch.spawn("./my_trainer", ["--steps", "10"])?;
//! let outcome = job.wait(WaitPolicy::FailFast);
//! assert_eq!(outcome.restarts, 0);
//!
//! // The command's way: restarts, and each rank's output in files.
//! let outcome = Launch::new(4)?
//!     .with_visible_gpus(4)
//!     .with_max_restarts(3)
//!     .with_log_dir("logs", Streams::Stderr) // stderr also on the console
//!     .run("./my_trainer", ["--steps", "10"], |_job| {})?;
//! std::process::exit(outcome.exit_code());
//! # }
//! ```

mod clock;
mod error;
mod job;
mod logs;
mod output;
mod restarts;
mod signals;
#[cfg(test)]
mod tests;

pub use error::LaunchError;
pub use job::{Ending, Job, Outcome, RankOutcome, WaitPolicy};
pub use logs::Streams;

use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clock::{Clock, MonotonicClock};

use nccl_rendezvous::{__with_setters as with_setters, RendezvousConfig, StoreSpec};

/// Set to `1` in every rank's environment when the ranks are simulated
/// hosts on one GPU, `0` when each rank has a GPU of its own.
pub const SIMULATED_HOSTS_VAR: &str = "NCCL_LAUNCH_SIMULATED_HOSTS";

/// Set in every rank's environment: a folder the ranks of one launch share
/// (for a file store, or test scratch), removed when the launch ends.
pub const DIR_VAR: &str = "NCCL_LAUNCH_DIR";

/// The most ranks one launch starts.
pub const MAX_RANKS: usize = 1024;

/// Set in every rank's environment, as torchrun does: the restarts made
/// before this attempt (0 on the first; see [`Launch::with_max_restarts`]).
pub const RESTART_COUNT_VAR: &str = "TORCHELASTIC_RESTART_COUNT";

/// Set in every rank's environment, as torchrun does: the most restarts
/// the launch makes ([`Launch::with_max_restarts`]).
pub const MAX_RESTARTS_VAR: &str = "TORCHELASTIC_MAX_RESTARTS";

/// The default time ranks get to exit after a forwarded signal (see
/// [`Launch::with_grace_period`]): shorter than the 30 s that Slurm
/// (`KillWait`) and Kubernetes (`terminationGracePeriodSeconds`) give the
/// launcher by default, so the launcher ends its ranks before it is
/// killed itself.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Where the ranks run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// [`Placement::Gpus`] when the host has a GPU per rank (as
    /// [`Launch::with_visible_gpus`] says), else [`Placement::SimulatedHosts`].
    #[default]
    Auto,
    /// Rank `r` is local rank `r` of one host and uses GPU `r`.
    Gpus,
    /// Every rank is local rank 0 of a simulated host of its own, on GPU 0.
    SimulatedHosts,
}

impl Placement {
    /// The placement's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Auto => "auto",
            Placement::Gpus => "gpus",
            Placement::SimulatedHosts => "simulated",
        }
    }
}

/// How to start the ranks of one launch.
///
/// Build with [`Launch::new`], then [`Launch::run`] (every attempt, to the end)
/// or [`Launch::spawn`] (one attempt, to wait for or act on).
#[derive(Clone, Debug)]
pub struct Launch {
    world_size: usize,
    placement: Placement,
    visible_gpus: Option<usize>,
    master_addr: String,
    master_port: Option<u16>,
    timeout: Option<Duration>,
    max_restarts: usize,
    /// How [`Launch::run`] waits for each attempt's ranks.
    wait_policy: WaitPolicy,
    /// The base log folder and the streams also shown on the console.
    logs: Option<(PathBuf, Streams)>,
    forward_signals: bool,
    grace_period: Duration,
    env: Vec<(OsString, OsString)>,
    keep_output: bool,
    clock: Arc<dyn Clock>,
}

/// Which attempt a start is, and what the attempts of one launch share.
pub(crate) struct Attempt {
    /// The restarts before it (`TORCHELASTIC_RESTART_COUNT`).
    pub(crate) restart_count: usize,
    /// When the launch's bound runs out, on the launch's clock.
    pub(crate) deadline: Option<Duration>,
    /// The launch's run folder in the log folder, when it logs to files.
    pub(crate) run_dir: Option<PathBuf>,
}

impl Launch {
    /// A launch of `world_size` ranks: placement [`Placement::Auto`],
    /// `MASTER_ADDR=127.0.0.1`, a free `MASTER_PORT`, no bound on its
    /// time, no restarts, output forwarded to the console and not kept,
    /// signals not forwarded (the [`DEFAULT_GRACE_PERIOD`] once they are).
    ///
    /// # Errors
    /// [`LaunchError::InvalidArgument`] unless `1 <= world_size <= MAX_RANKS`.
    pub fn new(world_size: usize) -> Result<Self, LaunchError> {
        if !(1..=MAX_RANKS).contains(&world_size) {
            return Err(LaunchError::InvalidArgument {
                argument: "number of ranks",
                expected: format!("1 to {MAX_RANKS}"),
                given: world_size.to_string(),
            });
        }
        Ok(Self {
            world_size,
            placement: Placement::Auto,
            visible_gpus: None,
            master_addr: "127.0.0.1".to_string(),
            master_port: None,
            timeout: None,
            max_restarts: 0,
            wait_policy: WaitPolicy::FailFast,
            logs: None,
            forward_signals: false,
            grace_period: DEFAULT_GRACE_PERIOD,
            env: Vec::new(),
            keep_output: false,
            clock: Arc::new(MonotonicClock::new()),
        })
    }

    with_setters! {
        /// With this placement.
        with_placement(placement: Placement) => placement = placement;
        /// With `count` GPUs visible on this host (the CUDA driver's count,
        /// which honours `CUDA_VISIBLE_DEVICES`): what [`Placement::Auto`]
        /// decides by, and what [`Placement::Gpus`] is checked against.
        ///
        /// Unset, `Auto` cannot decide and `Gpus` is taken on trust.
        with_visible_gpus(count: usize) => visible_gpus = Some(count);
        /// With this `MASTER_ADDR` (default `127.0.0.1`).
        with_master_addr(addr: impl Into<String>) => master_addr = addr.into();
        /// With this `MASTER_PORT` on every attempt (default: one the system
        /// reports free, chosen again for each attempt).
        with_master_port(port: u16) => master_port = Some(port);
        /// With this bound on the whole launch, every attempt together
        /// (`None`, the default: unbounded, as torchrun).
        ///
        /// Past it the ranks still running are ended, the launch reports a
        /// timeout and makes no further restart.
        with_timeout(timeout: Option<Duration>) => timeout = timeout;
        /// With up to `restarts` restarts (default 0), as torchrun's
        /// `--max-restarts`: when a rank fails, [`Launch::run`] ends every
        /// other rank and starts every rank again, with the next
        /// `TORCHELASTIC_RESTART_COUNT` ([`RESTART_COUNT_VAR`]), a fresh
        /// `NCCL_LAUNCH_DIR`, and a fresh `MASTER_PORT` unless one was set.
        ///
        /// A launch stopped by a forwarded signal or its timeout is not
        /// restarted.
        with_max_restarts(restarts: usize) => max_restarts = restarts;
        /// With this way of waiting for each attempt in [`Launch::run`]:
        /// [`WaitPolicy::FailFast`] (the default, torchrun's: the first rank
        /// to fail ends the others) or [`WaitPolicy::All`] (a rank that fails
        /// leaves the others running, for elastic programs whose survivors go
        /// on without it; the attempt still fails, and may restart, once every
        /// rank has ended).
        with_wait_policy(policy: WaitPolicy) => wait_policy = policy;
        /// Forwarding SIGTERM and SIGINT to the ranks (the `nccl-launch`
        /// command does): a signal that reaches this process is sent on to
        /// every rank still running, which then has the
        /// [grace period](Launch::with_grace_period) to exit; past it, or at a
        /// second signal, the ranks still running are ended with SIGKILL
        /// ([`Job::wait`]), and the launch exits with 128 + the signal
        /// ([`Outcome::exit_code`]).
        ///
        /// Each rank then runs in a process group of its own, so a terminal's
        /// Ctrl-C reaches it once (through the launcher), and the launcher's
        /// signals reach the rank's own children too.
        ///
        /// The handlers are the process's from the first spawn on, for the
        /// rest of its life: these signals no longer end it, they are noted
        /// for a job to forward. So this is for a program whose job is the
        /// launch, not for a library inside a larger one.
        with_forward_signals(forward: bool) => forward_signals = forward;
        /// With this time for the ranks to exit after a forwarded signal
        /// before they are ended with SIGKILL (default
        /// [`DEFAULT_GRACE_PERIOD`]); see [`Launch::with_forward_signals`].
        with_grace_period(grace: Duration) => grace_period = grace;
        /// Keeping a copy of each rank's output in its [`RankOutcome`] (it is
        /// forwarded, prefixed, either way).
        with_keep_output(keep: bool) => keep_output = keep;
    }

    /// Writing each rank's standard output and error to files under `dir`
    /// (created if need be), as torchrun's `--log-dir`: every launch gets
    /// a fresh run folder there, `dir/run_<k>` (the first `k` from 0 not
    /// yet taken), and in it `attempt_<n>/<rank>/stdout.log` and
    /// `stderr.log` for each attempt `n` (its `TORCHELASTIC_RESTART_COUNT`)
    /// and rank; no file is ever overwritten.
    ///
    /// The streams in `tee` also go to the console, prefixed, as torchrun's
    /// `--tee`; the others only to the files.
    pub fn with_log_dir(mut self, dir: impl Into<PathBuf>, tee: Streams) -> Self {
        self.logs = Some((dir.into(), tee));
        self
    }

    /// With `clock` as the time the supervisor reads, for tests of long
    /// launches.
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// With `key=value` in every rank's environment (after the launch's own
    /// variables, so it may override them).
    pub fn with_env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The placement this launch resolves to: [`Placement::Auto`] becomes
    /// [`Placement::Gpus`] or [`Placement::SimulatedHosts`] by the GPU
    /// count.
    ///
    /// # Errors
    /// [`LaunchError::InvalidArgument`] for `Auto` without
    /// [`Launch::with_visible_gpus`], and for `Gpus` with fewer visible GPUs
    /// than ranks.
    pub fn resolved_placement(&self) -> Result<Placement, LaunchError> {
        match (self.placement, self.visible_gpus) {
            (Placement::Auto, None) => Err(LaunchError::InvalidArgument {
                argument: "placement",
                expected: "the number of visible GPUs for `auto` (Launch::with_visible_gpus), or \
                           `gpus` or `simulated`"
                    .to_string(),
                given: "`auto` with no GPU count".to_string(),
            }),
            (Placement::Auto, Some(gpus)) if gpus >= self.world_size => Ok(Placement::Gpus),
            (Placement::Auto, Some(_)) => Ok(Placement::SimulatedHosts),
            (Placement::Gpus, Some(gpus)) if gpus < self.world_size => {
                Err(LaunchError::InvalidArgument {
                    argument: "placement",
                    expected: format!("a GPU per rank for `gpus` ({} ranks)", self.world_size),
                    given: format!("{gpus} visible GPU(s); use `simulated` or `auto`"),
                })
            }
            (other, _) => Ok(other),
        }
    }

    /// Starts every rank of `program` with `args`, once: restarts are
    /// [`Launch::run`]'s ([`Launch::spawn_ranks`] has how long the ranks
    /// may live).
    ///
    /// # Errors
    /// As [`Launch::spawn_ranks`].
    pub fn spawn<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> Result<Job, LaunchError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.spawn_ranks(program, args, 0..self.world_size)
    }

    /// Starts only `ranks` of the world (each once, in the order given):
    /// the others never come, as when a node fails to start.
    ///
    /// On Linux each rank gets SIGKILL when the thread that called this
    /// ends (the kernel's parent-death signal is tied to that thread, not
    /// to the process), so no rank outlives a launcher that was killed:
    /// call it from a thread that lives as long as the ranks should, the
    /// one that waits for them. (Dropping the [`Job`] ends its ranks too.)
    ///
    /// # Errors
    /// [`LaunchError::InvalidArgument`] for a rank out of range or given
    /// twice, or a placement [`Launch::resolved_placement`] refuses;
    /// [`LaunchError::Io`] when no port, scratch folder or log folder can
    /// be had; [`LaunchError::Spawn`] when a rank cannot be started (the
    /// ranks already started are ended).
    pub fn spawn_ranks<I, S>(
        &self,
        program: impl AsRef<OsStr>,
        args: I,
        ranks: impl IntoIterator<Item = usize>,
    ) -> Result<Job, LaunchError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let ranks: Vec<usize> = ranks.into_iter().collect();
        for (index, &rank) in ranks.iter().enumerate() {
            if rank >= self.world_size || ranks[..index].contains(&rank) {
                return Err(LaunchError::InvalidArgument {
                    argument: "ranks to start",
                    expected: format!("distinct ranks below the world size {}", self.world_size),
                    given: format!("{ranks:?}"),
                });
            }
        }
        let attempt = self.first_attempt()?;
        self.start_attempt(program.as_ref(), &args, &ranks, &attempt)
    }

    /// The first attempt of a launch starting now: its deadline and its
    /// run folder.
    pub(crate) fn first_attempt(&self) -> Result<Attempt, LaunchError> {
        // Refused before a log folder is made for it.
        self.resolved_placement()?;
        let run_dir = match &self.logs {
            Some((base, _)) => Some(logs::new_run_dir(base)?),
            None => None,
        };
        Ok(Attempt {
            restart_count: 0,
            deadline: self.timeout.map(|timeout| self.clock.now() + timeout),
            run_dir,
        })
    }

    /// Starts `ranks` (distinct, below the world size) as `attempt`.
    pub(crate) fn start_attempt(
        &self,
        program: &OsStr,
        args: &[OsString],
        ranks: &[usize],
        attempt: &Attempt,
    ) -> Result<Job, LaunchError> {
        let placement = self.resolved_placement()?;
        let port = match self.master_port {
            Some(port) => port,
            None => free_port().map_err(|source| LaunchError::Io {
                what: "find a free port for MASTER_PORT".to_string(),
                source,
            })?,
        };
        let dir = tempfile::Builder::new()
            .prefix("nccl-launch-")
            .tempdir()
            .map_err(|source| LaunchError::Io {
                what: "create the launch's shared folder".to_string(),
                source,
            })?;
        let logs = match (&attempt.run_dir, &self.logs) {
            (Some(run), Some((_, tee))) => {
                Some((logs::new_attempt_dir(run, attempt.restart_count)?, *tee))
            }
            _ => None,
        };
        let dir_path = dir.path().display().to_string();
        let mut envs = Vec::with_capacity(self.world_size);
        for rank in 0..self.world_size {
            let mut env = rank_variables(
                rank,
                self.world_size,
                placement == Placement::SimulatedHosts,
                &self.master_addr,
                port,
            )?;
            env.push((DIR_VAR.to_string(), dir_path.clone()));
            env.push((
                RESTART_COUNT_VAR.to_string(),
                attempt.restart_count.to_string(),
            ));
            env.push((MAX_RESTARTS_VAR.to_string(), self.max_restarts.to_string()));
            envs.push(env);
        }
        let rank_env = |rank: usize| envs.get(rank).cloned().unwrap_or_default();
        job::Job::start(
            job::Plan {
                program: program.to_owned(),
                args: args.to_vec(),
                world_size: self.world_size,
                placement,
                master_port: port,
                timeout: self.timeout,
                deadline: attempt.deadline,
                clock: Arc::clone(&self.clock),
                restart_count: attempt.restart_count,
                logs,
                forward_signals: self.forward_signals,
                grace_period: self.grace_period,
                extra_env: self.env.clone(),
                keep_output: self.keep_output,
                dir,
            },
            ranks,
            rank_env,
        )
    }
}

/// The variables of rank `rank` of `world_size`: torchrun's, as
/// [`RendezvousConfig::launch_vars`] writes them (a simulated host is a
/// node of its own), and for a simulated host the NCCL settings that make
/// it one.
///
/// The recipe's NCCL settings other than the host id give way to values already
/// in the launcher's environment.
///
/// # Errors
/// [`LaunchError::InvalidArgument`] when `rank` is not below
/// `world_size`, or `world_size` is 0 or above what NCCL accepts.
pub fn rank_variables(
    rank: usize,
    world_size: usize,
    simulated_hosts: bool,
    master_addr: &str,
    master_port: u16,
) -> Result<Vec<(String, String)>, LaunchError> {
    let store = StoreSpec::Tcp {
        addr: master_addr.to_string(),
        port: master_port,
    };
    let mut place = RendezvousConfig::new(rank, world_size, store).map_err(|error| {
        LaunchError::InvalidArgument {
            argument: "rank and world size",
            expected: "a rank below a world size of 1 to 2147483647".to_string(),
            given: error.to_string(),
        }
    })?;
    (place.local_rank, place.local_world_size, place.node_rank) = if simulated_hosts {
        (0, Some(1), Some(rank))
    } else {
        (rank, Some(world_size), Some(0))
    };
    let mut env: Vec<(String, String)> = place
        .launch_vars()
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect();
    env.push((
        SIMULATED_HOSTS_VAR.to_string(),
        u8::from(simulated_hosts).to_string(),
    ));
    if simulated_hosts {
        env.push(("NCCL_HOSTID".to_string(), format!("simhost{rank}")));
        for (key, value) in [
            ("NCCL_SOCKET_IFNAME", "lo"),
            ("NCCL_IB_DISABLE", "1"),
            ("NCCL_NVLS_ENABLE", "0"),
        ] {
            if std::env::var_os(key).is_none() {
                env.push((key.to_string(), value.to_string()));
            }
        }
    }
    Ok(env)
}

/// Where the kernel's ephemeral ports are listed: the range it hands to
/// every outgoing connection and to every `bind` of port 0.
const EPHEMERAL_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
/// The lowest port picked outside the ephemeral range (below it, the
/// well-known services).
const LOWEST_PICKED: u16 = 10_000;
/// How many ports outside the ephemeral range are tried before falling
/// back to one the system hands out.
const PICK_TRIES: u32 = 64;

/// A port free on loopback now, for rank 0's store.
///
/// Taken outside the kernel's ephemeral range where it can: a port from that
/// range (what `bind` to port 0 returns) is also what NCCL's sockets and every
/// outgoing connection are given, so another process could take it between this
/// check and rank 0's bind; outside it, only an explicit bind to that very port
/// can.
fn free_port() -> std::io::Result<u16> {
    let ephemeral_low = std::fs::read_to_string(EPHEMERAL_RANGE)
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok());
    if let Some(low) = ephemeral_low.filter(|&low| low > LOWEST_PICKED + 1) {
        let span = u64::from(low - LOWEST_PICKED);
        let mut random = std::collections::hash_map::RandomState::new().build_hasher();
        for attempt in 0..PICK_TRIES {
            random.write_u32(attempt);
            let port = LOWEST_PICKED + (random.finish() % span) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}
