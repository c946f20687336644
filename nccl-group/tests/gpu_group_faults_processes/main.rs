//! The fault suite across processes.
//!
//! * `FailurePolicy::AbortProcess`: a timed-out operation ends its process
//!   (a child of the test) with SIGABRT, after the failure is printed and
//!   the flight recorder written.
//! * `gpu_rank_*` (one GPU or more): ranks launched with `nccl_launch` at
//!   world sizes 2 and 4, on nonblocking and blocking communicators (with
//!   fewer GPUs than ranks, simulated hosts on GPU 0 over NCCL's socket
//!   transport). A rank killed with SIGKILL in the middle of an all_reduce
//!   loop, a rank that stalls, a rank that exits cleanly: every other rank
//!   gets `GroupError::Failed` within the operation's timeout plus a second,
//!   and its failure and flight-recorder dump name the faulty rank as
//!   lagging. A rank that never starts: creation fails with `InitTimeout`
//!   naming it, within the group's timeout. The launched ranks' side is in
//!   the `rank` module.

mod rank;

#[path = "../common/launched.rs"]
mod launched;
use launched::{outputs, verdict};
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nccl_group::{CommMode, GroupOptions};
use nccl_launch::{Ending, Launch, Outcome, Placement, WaitPolicy};
use nccl_test_support::group::faults::{Gate, never_completes, serial};
use nccl_test_support::group::{enqueued, launched_role, world_of_one};
use nccl_test_support::processes::{publish, spawn_child_test, unix_us, wait_children};
use nccl_test_support::{self as support, named_tests};

const ABORT_CHILD: &str = "gpu_abort_process_child";

/// With `FailurePolicy::AbortProcess` a timed-out operation ends the
/// process with SIGABRT, after the failure is printed and the flight
/// recorder written, and before any waiter sees an error.
#[test]
fn gpu_abort_process_policy_writes_the_dump_then_aborts() {
    use std::os::unix::process::ExitStatusExt;

    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let child = spawn_child_test(ABORT_CHILD, |command| {
        command
            .env(ROLE_VAR, "abort-process")
            .env("NCCL_GROUP_DUMP_DIR", dumps.path());
    });
    let ended = wait_children(vec![child], Duration::from_secs(60), Duration::ZERO).remove(0);
    let (out, err) = (&ended.stdout, &ended.stderr);
    println!("----- child stdout -----\n{out}\n----- child stderr -----\n{err}");
    let Some(status) = ended.status else {
        panic!("the child did not abort within 60 s");
    };
    assert_eq!(status.signal(), Some(6), "the child ended with {status}");
    assert!(
        err.contains("aborting the process (FailurePolicy::AbortProcess)"),
        "{err}"
    );
    assert!(err.contains("did not complete within its timeout"), "{err}");
    assert!(!out.contains("child: the wait returned"), "{out}");
    // The incident's folder, with the dump complete (its marker written).
    let incident = dumps.path().join("abort-process-g0-failure");
    let dumped: Vec<_> = std::fs::read_dir(&incident)
        .expect("the incident's folder")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        ["rank0.json", "rank0.done"]
            .iter()
            .all(|name| dumped.iter().any(|file| file == name)),
        "{dumped:?}"
    );
}

/// The child of the test above (SKIP unless spawned by it).
#[test]
fn gpu_abort_process_child() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    if std::env::var(ROLE_VAR).as_deref() != Ok("abort-process") {
        println!("SKIP: {ABORT_CHILD} runs only as a child of gpu_abort_process_policy_*");
        return;
    }
    let stream = devices[0].new_stream().expect("stream");
    let group = world_of_one(
        "abort-process",
        GroupOptions::default()
            .with_op_timeout(Duration::from_secs(1))
            .with_abort_timeout(Duration::from_secs(1))
            .with_failure_policy(nccl_group::FailurePolicy::AbortProcess),
    );
    let gate = Arc::new(Gate::new(&devices[0]));
    let work = enqueued(never_completes(&group, &stream, &gate), "blocked op");
    let result = work.synchronize(Duration::from_secs(30));
    println!("child: the wait returned {result:?}");
}

const ROLE_VAR: &str = "NCCL_GROUP_FAULT_TEST_ROLE";

/// The ranks' communicator kind (`blocking` or `nonblocking`).
const COMMS_VAR: &str = "NCCL_GROUP_FAULT_TEST_COMMS";

/// The ranks' test.
const FAULT_CHILD: &str = "gpu_rank_fault_child";

/// The iteration of the all_reduce loop at which the faulty rank fails.
const DIE_AT: usize = 20;

/// The ranks' operation timeout.
const CHILD_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// The ranks' communicator-creation timeout when a rank never starts.
const CHILD_INIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The ranks' communicator-creation timeout otherwise.
const CHILD_TIMEOUT: Duration = Duration::from_secs(30);

/// The bound on one launch (every rank ended past it).
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a rank waits for another's mark in the launch's folder.
const MARK_TIMEOUT: Duration = Duration::from_secs(40);

/// Elements of the loop's all_reduce.
const CHILD_LEN: usize = 1 << 16;

/// The world sizes and communicator kinds every fault runs at, in sequence.
const WORLD_SIZES: [usize; 2] = [2, 4];

const FAULT_COMM_MODES: [CommMode; 2] = [CommMode::Nonblocking, CommMode::Blocking];

/// Marks in the launch's folder.
const VICTIM_READY: &str = "victim-ready";

const KILLED_AT: &str = "killed-at";

const EXITED_AT: &str = "exited-at";

/// What happens to one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The last rank is killed with SIGKILL in the middle of an all_reduce
    /// loop (by the launching test).
    Killed,
    /// Rank 0 (which hosts the TCP store) stays alive but never issues the
    /// next all_reduce, until the others have failed.
    Stalls,
    /// The last rank is never started: creating the first communicator
    /// times out.
    NeverStarts,
    /// The last rank exits with status 0 (dropping its group) while the
    /// others wait in an all_reduce.
    ExitsCleanly,
}

impl Fault {
    const ALL: [Fault; 4] = [
        Fault::Killed,
        Fault::Stalls,
        Fault::NeverStarts,
        Fault::ExitsCleanly,
    ];

    fn role(self) -> &'static str {
        match self {
            Fault::Killed => "rank-killed",
            Fault::Stalls => "rank-stalls",
            Fault::NeverStarts => "rank-never-starts",
            Fault::ExitsCleanly => "rank-exits-cleanly",
        }
    }

    fn from_role(role: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|fault| fault.role() == role)
    }

    /// The rank the fault happens to.
    fn victim(self, world: usize) -> usize {
        match self {
            Fault::Stalls => 0,
            _ => world - 1,
        }
    }
}

fn comm_mode_name(mode: CommMode) -> &'static str {
    match mode {
        CommMode::Blocking => "blocking",
        _ => "nonblocking",
    }
}

/// Runs `fault` at every world size and communicator kind, in sequence,
/// each launch bounded, and reports every combination that failed. Skips
/// without a GPU; one fault test runs at a time ([`serial`]).
fn run_fault(fault: Fault) {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let exe = std::env::current_exe().expect("the test binary");
    let started = Instant::now();
    let mut failures = Vec::new();
    for world in WORLD_SIZES {
        for mode in FAULT_COMM_MODES {
            let label = format!("{fault:?} at world size {world} on {mode:?} communicators");
            let launched = Instant::now();
            match launch_fault(&exe, fault, world, mode, &label) {
                Ok(()) => println!("{label}: ok in {:?}", launched.elapsed()),
                Err(problem) => {
                    println!("{label}: FAILED in {:?}", launched.elapsed());
                    failures.push(format!("{label}: {problem}"));
                }
            }
        }
    }
    println!("{fault:?}: every combination in {:?}", started.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// One launch of `world` ranks of [`FAULT_CHILD`] with `fault`.
fn launch_fault(
    exe: &Path,
    fault: Fault,
    world: usize,
    mode: CommMode,
    label: &str,
) -> Result<(), String> {
    let victim = fault.victim(world);
    let launch = Launch::new(world)
        .map_err(|e| format!("launch: {e}"))?
        .with_placement(Placement::Auto)
        .with_visible_gpus(nccl_core::Device::count().map_err(|e| format!("counting GPUs: {e}"))?)
        .with_timeout(Some(LAUNCH_TIMEOUT))
        .with_keep_output(true)
        .with_env(ROLE_VAR, fault.role())
        .with_env(COMMS_VAR, comm_mode_name(mode))
        .with_env("NCCL_RS_STORE", "tcp")
        .with_env("NCCL_RS_STORE_TIMEOUT_SECS", "30");
    let args = ["--exact", FAULT_CHILD, "--nocapture", "--test-threads=1"];
    let mut job = if fault == Fault::NeverStarts {
        launch.spawn_ranks(exe, args, (0..world).filter(|&r| r != victim))
    } else {
        launch.spawn(exe, args)
    }
    .map_err(|e| format!("launch: {e}"))?;
    println!("{label}: ranks placed as {:?}", job.placement());
    if fault == Fault::Killed {
        let ready = job.dir().join(VICTIM_READY);
        let deadline = Instant::now() + LAUNCH_TIMEOUT;
        while !ready.exists() {
            if Instant::now() >= deadline || job.status(victim).is_some() {
                for rank in 0..world {
                    job.kill(rank);
                }
                let outcome = job.wait(WaitPolicy::All);
                return Err(format!(
                    "rank {victim} never reached iteration {DIE_AT} to be killed there{}",
                    outputs(&outcome)
                ));
            }
            thread::sleep(Duration::from_millis(2));
        }
        let killed_at = unix_us();
        job.kill(victim);
        publish(job.dir(), KILLED_AT, &killed_at.to_string());
        println!("{label}: killed rank {victim} with SIGKILL");
    }
    let outcome = job.wait(WaitPolicy::All);
    check_outcome(fault, world, victim, &outcome)
}

/// Every rank's output, for a failure message.
/// What each rank must have done: the faulty one its fault, every other
/// rank failed as expected (its own checks passed) and exited with 0.
fn check_outcome(
    fault: Fault,
    world: usize,
    victim: usize,
    outcome: &Outcome,
) -> Result<(), String> {
    let mut problems = Vec::new();
    if outcome.timed_out {
        problems.push(format!(
            "the launch ran past its {LAUNCH_TIMEOUT:?} timeout (a rank hung)"
        ));
    }
    let expected_ranks = if fault == Fault::NeverStarts {
        world - 1
    } else {
        world
    };
    if outcome.ranks.len() != expected_ranks {
        problems.push(format!(
            "{} ranks were started, expected {expected_ranks}",
            outcome.ranks.len()
        ));
    }
    for r in &outcome.ranks {
        let said = |line: &str| r.stdout.contains(line);
        let problem = match (fault, r.rank == victim) {
            (Fault::NeverStarts, true) => Some("was started, but must never start".to_string()),
            (Fault::Killed, true) => (r.ending != Ending::Killed)
                .then(|| format!("ended {:?}, expected to be killed", r.ending)),
            (Fault::Stalls, true) => (!r.succeeded()
                || !said(&format!("fault child {victim}: stalled rank done")))
            .then(|| format!("ended {:?} without finishing its stall", r.ending)),
            (Fault::ExitsCleanly, true) => (!r.succeeded()
                || !said(&format!("fault child {victim}: exiting cleanly")))
            .then(|| format!("ended {:?}, expected a clean exit (status 0)", r.ending)),
            (_, false) => (!r.succeeded()
                || !said(&format!("fault child {}: failed as expected", r.rank)))
            .then(|| {
                format!(
                    "ended {:?} without failing as expected (its assertion is in its stderr)",
                    r.ending
                )
            }),
        };
        if let Some(problem) = problem {
            problems.push(format!("rank {}: {problem}", r.rank));
        }
    }
    verdict(problems, (), outcome)
}

named_tests! {
    /// A rank killed with SIGKILL after iteration 20 of an all_reduce
    /// loop: every other rank gets `GroupError::Failed` within the
    /// operation's timeout plus a second of the kill, and its failure and
    /// flight-recorder dump name the dead rank as lagging. At world sizes 2
    /// and 4, on nonblocking and blocking communicators. With fewer GPUs
    /// than ranks the ranks are simulated hosts on GPU 0 (NCCL's socket
    /// transport).
    gpu_rank_killed_mid_loop_fails_the_others_within_the_deadline: run_fault(Fault::Killed);
    /// A rank that stays alive but never issues the next all_reduce (rank
    /// 0, which hosts the TCP store): the others fail within the
    /// operation's timeout plus a second and name it as the lagging rank.
    gpu_rank_that_stalls_is_named_as_the_lagging_rank: run_fault(Fault::Stalls);
    /// A rank that never starts: creating the first communicator fails
    /// with `GroupError::InitTimeout` naming it, within the group's
    /// timeout.
    gpu_rank_that_never_starts_fails_creation_within_the_timeout: run_fault(Fault::NeverStarts);
    /// A rank that exits with status 0 while the others wait in an
    /// all_reduce: they get `GroupError::Failed` naming it within the
    /// deadline, not a hang.
    gpu_rank_that_exits_cleanly_fails_the_others_within_the_deadline:
        run_fault(Fault::ExitsCleanly);
}

/// One rank of the fault scenarios above, launched by them through
/// `nccl_launch` (SKIP otherwise).
#[test]
fn gpu_rank_fault_child() {
    let not_launched = format!("{FAULT_CHILD} runs only as a rank launched by gpu_rank_*");
    if let Some(fault) = launched_role(ROLE_VAR, Fault::from_role, &not_launched) {
        rank::run(fault);
    }
}
