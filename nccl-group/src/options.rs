//! The options of a [`ProcessGroup`](super::ProcessGroup): streams,
//! communicator kind, timeouts, failure policy, flight recorder, the
//! collective check, NCCL's RAS in failure reports, GPU timing, the
//! liveness beat and the NCCL configuration of the group's communicators.

use std::path::PathBuf;
use std::time::Duration;

use nccl_core::Config;

use nccl_rendezvous::__with_setters as with_setters;

use crate::diagnostics::checks::MAX_CHECK_INTERVAL;
use crate::diagnostics::dumps::DUMP_DIR_VARIABLE;
use crate::diagnostics::recorder::MAX_RECORDER_CAPACITY;
use crate::error::{GroupError, Result};
use crate::failure::FailurePolicy;

/// Options of a [`ProcessGroup`](super::ProcessGroup).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupOptions {
    /// NCCL streams per device (round robin across communicators); used by
    /// the operations issued with [`StreamMode::Separate`].
    pub streams_per_device: usize,
    /// Which stream operations run on.
    ///
    /// Default [`StreamMode::Caller`]; override per call with
    /// [`ProcessGroup::with_stream_mode`](super::ProcessGroup::with_stream_mode)
    /// (e.g. [`StreamMode::Separate`] for an operation that should overlap
    /// compute queued after it).
    pub stream_mode: StreamMode,
    /// Nonblocking or blocking NCCL communicators.
    ///
    /// Default [`CommMode::Blocking`] (as PyTorch's), the one whose
    /// per-operation cost stays near nccl-tensor's at world sizes above 1 (the
    /// world-size table of `docs/measurements/README.md` has the figures).
    pub comm_mode: CommMode,
    /// Create the NCCL streams with the device's highest priority.
    pub high_priority: bool,
    /// How long each of the two steps of creating a communicator may take:
    /// waiting in the store for another rank's unique id, then NCCL's
    /// init, which waits for every rank to join.
    ///
    /// Past it the communicators are aborted (with [`CommMode::Blocking`], the
    /// init is left to finish or hang on a thread of its own), the error names
    /// the ranks that never joined, and the group fails (the ranks no longer
    /// agree on what to create next). Default 5 min (the stores' default
    /// timeout).
    pub timeout: Duration,
    /// How long each operation may run on the GPU before the watchdog
    /// fails the group (override per call with
    /// [`ProcessGroup::with_op_timeout`](super::ProcessGroup::with_op_timeout)).
    ///
    /// Default 10 min.
    pub op_timeout: Duration,
    /// How long an abort may take before it is left running on its own
    /// thread and reported as stalled.
    ///
    /// Default 10 s.
    pub abort_timeout: Duration,
    /// When the group fails, revoke its communicators
    /// (`ncclCommRevoke`, NCCL 2.28.7) instead of aborting them, where the
    /// loaded NCCL can, no thread is inside a NCCL call on them and the
    /// group is not known to have lost a process (NCCL's lost-peer error on
    /// a collective communicator here, or the failure alarm of a rank that
    /// saw one or was exiting, read before the release: the shrink would be
    /// refused there, so the heal re-creates anyway): a
    /// revoked communicator stops its work but stays allocated, so that
    /// [`ProcessGroup::heal`](crate::Recovery::heal) can shrink it
    /// (`ncclCommShrink`) instead of making a new one.
    ///
    /// Either way the group is failed and every later call gets the failure.
    /// Default `true`; `false` always aborts (the heal then creates fresh
    /// communicators).
    pub revoke_on_failure: bool,
    /// What the watchdog does after it fails the group.
    pub on_failure: FailurePolicy,
    /// How many operations the flight recorder keeps (0 counts as 1).
    ///
    /// Its ring takes 192 bytes an operation (384 KiB for the default),
    /// allocated and written when the group is built, so that no operation
    /// faults a page of it in.
    ///
    /// At most [`MAX_RECORDER_CAPACITY`] (2^20), which
    /// [`GroupBuilder::build`](crate::GroupBuilder::build) checks. Default
    /// 2048.
    pub recorder_capacity: usize,
    /// Where the flight recorder's dumps are written, one folder per
    /// incident ([`crate::dumps`]): when the group fails or is aborted, and
    /// on request (`None`: never; no request file is watched).
    ///
    /// Default: the folder in `NCCL_GROUP_DUMP_DIR`, else the system's
    /// temporary folder.
    pub dump_dir: Option<PathBuf>,
    /// Strict waits, as PyTorch's `TORCH_NCCL_BLOCKING_WAIT`:
    /// [`Work::wait`](crate::Work::wait) blocks the CPU until the operation
    /// has ended and checks that it produced its result
    /// ([`Work::synchronize`](crate::Work::synchronize)), so that even work
    /// the GPU runs on its tensors afterwards reads a checked result.
    ///
    /// It costs the overlap of the CPU with the GPU. Default `false`: `wait`
    /// only orders the caller's stream, and host reads of the tensors are
    /// checked instead.
    pub blocking_wait: bool,
    /// The collective check, like PyTorch's `TORCH_DISTRIBUTED_DEBUG=DETAIL`
    /// but cheap: every `K` collectives (`Some(K)`, 1 to
    /// [`MAX_CHECK_INTERVAL`]), the ranks compare a fingerprint of each of
    /// them (operation, data type, element count, root, reduction and
    /// collective number) through the rendezvous store before the `K`-th
    /// is enqueued; ranks that did not issue the same collectives get
    /// [`GroupError::Mismatch`] (the rank whose check found it) and the
    /// group fails ([`FailureCause::Mismatch`](crate::FailureCause::Mismatch)),
    /// instead of a hang or mixed data.
    ///
    /// With `K = 1` every collective is checked before it is enqueued; with
    /// `K > 1` up to `K - 1` collectives may run mismatched before the error, and
    /// collectives after the last full window are not checked. Point-to-point
    /// operations (send, recv, batches of them alone) are not: only pairs issue
    /// them. A group of one process has nothing to compare. Each check costs a
    /// store round trip per rank (the `group_checks` bench of `group_cost`
    /// measures it); `docs/group/mismatches.md` has the rules. Default `None`:
    /// off, at the cost of one branch per operation: the mismatch check
    /// ([`GroupOptions::mismatch_check`]) is on by default instead; this one
    /// compares before enqueueing, to explain a hang or to keep mixed data
    /// from the GPU.
    pub collective_checks: Option<u32>,
    /// The mismatch check: every rank's collectives (operation, data type,
    /// element count, root, reduction, in order) are compared with every
    /// other rank's off the issuing thread, through the rendezvous store, so
    /// that ranks that did not issue the same collectives get an error of
    /// kind [`ErrorKind::Mismatch`](crate::ErrorKind::Mismatch) instead of a
    /// wrong result or a hang.
    ///
    /// An operation costs a push onto a queue. Host reads of a collective's
    /// result (`Work::synchronize`, a strict `Work::wait`, a tensor's
    /// `to_vec`) wait for its verdict: one exchange through the store at
    /// most. Without a host read the group still fails soon after a
    /// mismatch, and the operations not yet verified are the failure's
    /// [`suspects`](crate::Failure::suspects). A group of one process has
    /// nothing to compare; point-to-point operations are not compared.
    /// `docs/group/mismatches.md` has the rules.
    ///
    /// Default `true`.
    pub mismatch_check: bool,
    /// When the group fails, ask the loaded NCCL's RAS service for its
    /// view of dead and unresponsive ranks ([`crate::ras`]) and put it in
    /// the failure's report and dump, or one line saying why there is
    /// none; at most a few seconds, asked on a thread of its own just
    /// before the communicators' release begins (RAS lists a communicator
    /// only until its abort), which waits for the answer at most 50 ms
    /// and then goes on beside it (the failure's details wait for it). A failure the liveness
    /// beat found is not asked about: the beat named the rank.
    ///
    /// Default `true`.
    pub ras_report: bool,
    /// GPU times in the flight recorder, like PyTorch's
    /// `TORCH_NCCL_ENABLE_TIMING`.
    ///
    /// Each operation records a timed CUDA event on its stream just before
    /// its enqueue and ends with a timed one, and the watchdog, seeing it
    /// end, notes the time between them in its record
    /// ([`OpRecord::gpu_duration`](crate::OpRecord::gpu_duration);
    /// `duration_ms` in PyTorch-format dumps). Operations captured in a CUDA
    /// graph are not timed.
    ///
    /// It costs an event record and two timed events per operation (pooled),
    /// and a time query when the watchdog reaps it. Default: the
    /// [`TIMING_VARIABLE`] (`NCCL_GROUP_ENABLE_TIMING`) environment variable,
    /// `1` (or `true`, `yes`, `on`) for on, else off; a value it cannot read
    /// is refused by [`GroupBuilder::build`](crate::GroupBuilder::build).
    pub gpu_timing: bool,
    /// The liveness beat ([`Liveness`]): a hung rank (stopped, wedged)
    /// fails the group once its beat has stood still for the bound, without
    /// waiting for the operation timeout, and every rank learns of it at
    /// once through the failure alarm.
    ///
    /// Default [`Liveness::DEFAULT`]: a beat every 125 ms, a bound of
    /// 750 ms.
    pub liveness: Liveness,
    /// NCCL's options (`ncclConfig_t`) for every communicator the group
    /// creates: CTAs, CTA policy, NVLink SHARP, network, traffic class and
    /// the rest of [`Config`].
    ///
    /// The group sets two of them itself: `blocking` follows
    /// [`GroupOptions::comm_mode`] (a `Config::with_blocking` that contradicts
    /// it is refused by [`GroupBuilder::build`](crate::GroupBuilder::build),
    /// naming both; one left unset or equal is fine), and a nonblocking
    /// creation waits [`GroupOptions::timeout`], which wins over
    /// `Config::with_timeout`. An option the loaded NCCL is too old for is
    /// refused when the first communicator is created, naming the option and
    /// its release. Default [`Config::new`]: every option at NCCL's default.
    pub config: Config,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self {
            streams_per_device: 1,
            stream_mode: StreamMode::Caller,
            comm_mode: CommMode::Blocking,
            high_priority: false,
            timeout: nccl_rendezvous::DEFAULT_TIMEOUT,
            op_timeout: DEFAULT_OP_TIMEOUT,
            abort_timeout: Duration::from_secs(10),
            revoke_on_failure: true,
            on_failure: FailurePolicy::ReturnErrors,
            recorder_capacity: 2048,
            dump_dir: Some(
                std::env::var_os(DUMP_DIR_VARIABLE).map_or_else(std::env::temp_dir, PathBuf::from),
            ),
            blocking_wait: false,
            collective_checks: None,
            mismatch_check: true,
            ras_report: true,
            gpu_timing: timing_variable().unwrap_or(false),
            liveness: Liveness::DEFAULT,
            config: Config::new(),
        }
    }
}

/// Which stream a group's operations run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamMode {
    /// On the group's own NCCL streams (Ray's design): the NCCL stream
    /// waits for an event recorded on the caller's stream, and
    /// [`Work::wait`](crate::Work::wait) makes the caller's stream wait for the operation's
    /// end.
    ///
    /// The caller's stream is free for other work meanwhile (compute overlaps
    /// communication), at the price of the handoff: two event records and two
    /// stream waits per operation.
    Separate,
    /// On the caller's stream: no event handoff between streams (three
    /// driver calls fewer per operation, and no cross-stream latency on
    /// the GPU), [`Work::wait`](crate::Work::wait) has nothing to do, but everything queued
    /// after the operation on that stream waits for it.
    ///
    /// For callers that wait at once anyway (as PyTorch's `async_op=False`).
    /// The default: the group's call then costs about what nccl-tensor's does.
    #[default]
    Caller,
}

/// Which kind of NCCL communicator a group creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommMode {
    /// Nonblocking communicators: NCCL never blocks the calling thread, so
    /// every wait (creation, an operation's enqueue) is polled and bounded
    /// by a deadline, and an abort interrupts any of them.
    ///
    /// But NCCL 2.28 ends every group that involves other ranks on a new thread
    /// of its own and answers `ncclInProgress`, which the group then waits out:
    /// each operation at world size 2 and above costs many times what it costs
    /// on a blocking communicator (the world-size table of
    /// `docs/measurements/README.md` has the figures). At world size 1 NCCL
    /// shortcuts the collectives, so their cost there does not show it. For
    /// whoever needs an abort to interrupt any call, even one stuck inside NCCL
    /// before its deadline.
    Nonblocking,
    /// Blocking communicators: operations are enqueued on the calling
    /// thread at NCCL's normal cost.
    ///
    /// Creation is still bounded by [`GroupOptions::timeout`]: the init runs on
    /// a helper thread, which a timeout leaves behind (it ends when NCCL gives
    /// up or the missing ranks come; each such timeout leaves one). An enqueue
    /// that blocks (a peer that never connects) is seen by the watchdog once it
    /// passes the operation's timeout: it fails the group, and the abort
    /// releases the NCCL call (as PyTorch's watchdog does). An NCCL error
    /// returned by an operation's calls fails the group as well, since part of
    /// the operation may have launched. `destroy` runs each finalize on a
    /// helper thread bounded by the timeout. The default.
    #[default]
    Blocking,
}

/// Whether and how each rank of a group beats in the store so that the
/// others know it alive ([`GroupOptions::liveness`]).
///
/// Each rank's beat runs on a thread of the group's own, never on the
/// thread that issues operations nor on the GPU: a rank that computes for
/// seconds between collectives, or waits in a long kernel, keeps beating.
/// A process that is stopped (`SIGSTOP`, a debugger) or wedged as a whole
/// stops. `docs/group/failures.md` says what a failure it finds looks
/// like, and `nccl-group/src/engine/liveness.rs` has the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Liveness {
    /// No beat: a hung rank is found by the operation timeout only.
    Off,
    /// A beat every `every`; a rank whose beat has stood still for `bound`
    /// fails the group ([`FailureCause::PeerUnresponsive`](crate::FailureCause::PeerUnresponsive)).
    Beat {
        /// How often each rank beats (and the watching rank reads the
        /// beats).
        every: Duration,
        /// How long a beat may stand still before its rank is named.
        bound: Duration,
    },
}

/// The longest interval between two beats [`Liveness::beat`] takes.
pub const MAX_BEAT_INTERVAL: Duration = Duration::from_secs(3600);

impl Liveness {
    /// The default: a beat every 125 ms, a bound of 750 ms (six beats
    /// missed in a row), so that a stopped rank is named within 1 s of its
    /// last beat (between the bound and the bound plus two beats).
    pub const DEFAULT: Liveness = Liveness::Beat {
        every: Duration::from_millis(125),
        bound: Duration::from_millis(750),
    };

    /// A beat every `every`, a bound of `bound`.
    pub const fn beat(every: Duration, bound: Duration) -> Self {
        Liveness::Beat { every, bound }
    }

    /// Refuses a beat that cannot tell a live rank from a hung one.
    fn check(self) -> Result<()> {
        let Liveness::Beat { every, bound } = self else {
            return Ok(());
        };
        if every.is_zero() || bound.is_zero() || every >= bound || every > MAX_BEAT_INTERVAL {
            return Err(GroupError::InvalidArgument {
                argument: "liveness",
                expected: format!(
                    "an interval and a bound above zero, the interval shorter than the bound \
                     and at most {MAX_BEAT_INTERVAL:?} (e.g. Liveness::beat(250 ms, 1 s)), or \
                     Liveness::Off"
                ),
                given: format!("a beat every {every:?} with a bound of {bound:?}"),
            });
        }
        Ok(())
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::DEFAULT
    }
}

/// The environment variable that turns [`GroupOptions::gpu_timing`] on by
/// default: `NCCL_GROUP_ENABLE_TIMING=1`.
pub const TIMING_VARIABLE: &str = "NCCL_GROUP_ENABLE_TIMING";

/// [`TIMING_VARIABLE`]'s setting ([`timing_setting`]).
fn timing_variable() -> Result<bool> {
    timing_setting(std::env::var_os(TIMING_VARIABLE).as_deref())
}

/// Whether `value`, [`TIMING_VARIABLE`]'s, turns GPU timing on: `false`
/// when it is unset.
///
/// # Errors
/// [`GroupError::InvalidArgument`] for a value that is not a yes or a no.
fn timing_setting(value: Option<&std::ffi::OsStr>) -> Result<bool> {
    let Some(value) = value else {
        return Ok(false);
    };
    let value = value.to_string_lossy();
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(GroupError::InvalidArgument {
            argument: TIMING_VARIABLE,
            expected: "1, true, yes or on (GPU timing), or 0, false, no, off or nothing (none)"
                .to_string(),
            given: value.into_owned(),
        }),
    }
}

/// The default [`GroupOptions::op_timeout`] (as PyTorch's NCCL process group).
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(600);

impl GroupOptions {
    with_setters! {
        /// With `streams` NCCL streams per device.
        with_streams_per_device(streams: usize) => streams_per_device = streams;
        /// With operations on this stream ([`StreamMode`]).
        with_stream_mode(mode: StreamMode) => stream_mode = mode;
        /// With this kind of NCCL communicator ([`CommMode`]).
        with_comm_mode(mode: CommMode) => comm_mode = mode;
        /// With high-priority NCCL streams.
        with_high_priority(high: bool) => high_priority = high;
        /// With this communicator-creation timeout ([`GroupOptions::timeout`]).
        with_timeout(timeout: Duration) => timeout = timeout;
        /// With this default per-operation timeout.
        with_op_timeout(timeout: Duration) => op_timeout = timeout;
        /// With this bound on aborts.
        with_abort_timeout(timeout: Duration) => abort_timeout = timeout;
        /// With or without revoking the communicators when the group fails
        /// ([`GroupOptions::revoke_on_failure`]).
        with_revoke_on_failure(revoke: bool) => revoke_on_failure = revoke;
        /// With this failure policy.
        with_failure_policy(policy: FailurePolicy) => on_failure = policy;
        /// Keeping the last `capacity` operations in the flight recorder (at
        /// most [`MAX_RECORDER_CAPACITY`]).
        with_recorder_capacity(capacity: usize) => recorder_capacity = capacity;
        /// Writing flight-recorder dumps to `dir`.
        with_dump_dir(dir: impl Into<PathBuf>) => dump_dir = Some(dir.into());
        /// Sets [`GroupOptions::blocking_wait`].
        with_blocking_wait(blocking: bool) => blocking_wait = blocking;
        /// With the collective check every `every` collectives
        /// ([`GroupOptions::collective_checks`]; 1 checks each before it is
        /// enqueued).
        ///
        /// [`GroupBuilder::build`](crate::GroupBuilder::build) refuses 0 and
        /// more than [`MAX_CHECK_INTERVAL`].
        with_collective_checks(every: u32) => collective_checks = Some(every);
        /// Sets [`GroupOptions::mismatch_check`].
        with_mismatch_check(check: bool) => mismatch_check = check;
        /// Sets [`GroupOptions::ras_report`].
        with_ras_report(ask: bool) => ras_report = ask;
        /// Sets [`GroupOptions::gpu_timing`].
        with_gpu_timing(timed: bool) => gpu_timing = timed;
        /// With this liveness beat ([`GroupOptions::liveness`];
        /// [`Liveness::Off`] for none).
        ///
        /// [`GroupBuilder::build`](crate::GroupBuilder::build) refuses a
        /// zero interval or bound, an interval not shorter than the bound,
        /// and one above [`MAX_BEAT_INTERVAL`].
        with_liveness(liveness: Liveness) => liveness = liveness;
        /// With these NCCL options for every communicator the group creates
        /// ([`GroupOptions::config`]).
        with_config(config: Config) => config = config;
    }

    /// Writing no flight-recorder dumps at all.
    pub fn without_dump_dir(mut self) -> Self {
        self.dump_dir = None;
        self
    }

    /// The config each communicator of the group is created with:
    /// [`GroupOptions::config`], with `blocking` from
    /// [`GroupOptions::comm_mode`] and, for nonblocking communicators, the
    /// wait of [`GroupOptions::timeout`] (a blocking creation is bounded by
    /// the group itself). nccl-core validates it at creation.
    ///
    /// # Errors
    /// [`GroupError::InvalidArgument`] when the config's `blocking`
    /// contradicts the communicator mode, naming both.
    pub(crate) fn comm_config(&self) -> Result<Config> {
        let blocking = self.comm_mode == CommMode::Blocking;
        if let Some(given) = self.config.blocking_option()
            && given != blocking
        {
            return Err(GroupError::InvalidArgument {
                argument: "config",
                expected: format!(
                    "Config::with_blocking unset or {blocking}, as comm_mode is CommMode::{:?}",
                    self.comm_mode
                ),
                given: format!("Config::with_blocking({given})"),
            });
        }
        let config = self.config.clone().with_blocking(blocking);
        Ok(if blocking {
            config
        } else {
            config.with_timeout(self.timeout)
        })
    }

    /// Refuses settings that cannot be honoured, before anything is built.
    pub(crate) fn validate(&self) -> Result<()> {
        self.comm_config()?;
        self.config.validate()?;
        if let Some(every) = self
            .collective_checks
            .filter(|&every| every == 0 || every > MAX_CHECK_INTERVAL)
        {
            return Err(GroupError::InvalidArgument {
                argument: "collective_checks",
                expected: format!(
                    "a check every 1 to {MAX_CHECK_INTERVAL} collectives (None: no check)"
                ),
                given: every.to_string(),
            });
        }
        timing_variable()?;
        self.liveness.check()?;
        if self.recorder_capacity > MAX_RECORDER_CAPACITY {
            return Err(GroupError::InvalidArgument {
                argument: "recorder_capacity",
                expected: format!("at most {MAX_RECORDER_CAPACITY} records (default 2048)"),
                given: self.recorder_capacity.to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seam between the options and NCCL: the `ncclConfig_t` each
    /// communicator of the group is created with.
    #[test]
    fn the_group_s_config_reaches_the_raw_config_of_its_communicators() {
        let options = GroupOptions::default()
            .with_comm_mode(CommMode::Nonblocking)
            .with_timeout(Duration::from_secs(7))
            .with_config(
                Config::new()
                    .with_cta_policy(nccl_core::CtaPolicy::Efficiency)
                    .with_ctas(2, 8)
                    .with_nvls_ctas(4)
                    .with_comm_name("dp")
                    .with_timeout(Duration::from_secs(99)),
            );
        let config = options.comm_config().unwrap();
        // The group's timeout wins over the config's.
        assert_eq!(config.wait_timeout(), Duration::from_secs(7));
        let raw_config = config.to_raw().unwrap();
        let raw = raw_config.as_raw();
        assert_eq!(
            (raw.blocking, raw.CTAPolicy, raw.minCTAs, raw.maxCTAs),
            (0, 1, 2, 8)
        );
        assert_eq!(raw.nvlsCTAs, 4);
        assert!(!raw.commName.is_null());
        // Unset options stay NCCL_CONFIG_UNDEF_INT.
        assert_eq!(raw.trafficClass, i32::MIN);

        let blocking = GroupOptions::default().with_config(Config::new().with_blocking(true));
        let raw_config = blocking.comm_config().unwrap().to_raw().unwrap();
        assert_eq!(raw_config.as_raw().blocking, 1);
        let default = GroupOptions::default().comm_config().unwrap();
        assert_eq!(default.blocking_option(), Some(true));
    }

    #[test]
    fn a_config_that_contradicts_the_comm_mode_is_refused_naming_both() {
        let options = GroupOptions::default().with_config(Config::new().with_blocking(false));
        let error = options.validate().unwrap_err().to_string();
        for says in [
            "config",
            "Config::with_blocking unset or true, as comm_mode is CommMode::Blocking",
            "Config::with_blocking(false)",
        ] {
            assert!(error.contains(says), "{says:?} in {error}");
        }
        let options = GroupOptions::default()
            .with_comm_mode(CommMode::Nonblocking)
            .with_config(Config::new().with_blocking(true));
        assert!(options.validate().is_err());
        // An option out of range is refused before anything is built.
        let options = GroupOptions::default().with_config(Config::new().with_nvls_ctas(0));
        let error = options.validate().unwrap_err().to_string();
        assert!(error.contains("nvls_ctas"), "{error}");
    }

    #[test]
    fn the_timing_variable_reads_yes_and_no_and_refuses_the_rest() {
        let setting = |value: Option<&str>| timing_setting(value.map(std::ffi::OsStr::new));
        assert!(!setting(None).unwrap());
        for yes in ["1", "true", "YES", " on "] {
            assert!(setting(Some(yes)).unwrap(), "{yes:?}");
        }
        for no in ["0", "false", "No", "off", ""] {
            assert!(!setting(Some(no)).unwrap(), "{no:?}");
        }
        let error = setting(Some("sometimes")).unwrap_err().to_string();
        for says in [TIMING_VARIABLE, "1, true, yes or on", "sometimes"] {
            assert!(error.contains(says), "{says:?} in {error}");
        }
        assert!(!GroupOptions::default().with_gpu_timing(false).gpu_timing);
        assert!(GroupOptions::default().with_gpu_timing(true).gpu_timing);
    }
}
