//! `nccl-perf` as every process of a launch, on a machine without a CUDA
//! driver: each process meets the launch's store, finds no driver, and
//! exits 2 with one line naming it; none waits for the others until its
//! store's timeout (the launch's deadline, shorter, would end it). On a
//! machine with a driver these tests are skipped with a note (the GPU
//! bundle's perf-procs.sh runs the real thing there).

use std::time::Duration;

use nccl_launch::{Ending, Launch, Placement, WaitPolicy};

use crate::skip_with_driver;

#[test]
fn every_process_of_a_launch_exits_2_with_its_own_line() {
    if skip_with_driver() {
        return;
    }
    let world = 3;
    // A process that waited for the others until its store's timeout would
    // be ended at the launch's deadline, which is shorter: a hang guard
    // that only such a wait outlasts.
    let deadline = Duration::from_secs(120);
    let job = Launch::new(world)
        .unwrap()
        .with_placement(Placement::SimulatedHosts)
        .with_env(
            "NCCL_RS_STORE_TIMEOUT_SECS",
            (3 * deadline).as_secs().to_string(),
        )
        .with_timeout(Some(deadline))
        .with_keep_output(true)
        .spawn(
            env!("CARGO_BIN_EXE_nccl-perf"),
            ["--layer", "raw", "-b", "8", "-e", "8", "all_reduce"],
        )
        .unwrap();
    let outcome = job.wait(WaitPolicy::All);
    assert!(!outcome.timed_out, "{outcome:?}");
    for rank in 0..world {
        let ran = outcome.rank(rank).unwrap();
        assert!(matches!(ran.ending, Ending::Exited(_)), "{ran:?}");
        assert_eq!(ran.status.and_then(|s| s.code()), Some(2), "{ran:?}");
        assert!(ran.stdout.is_empty(), "{ran:?}");
        let lines: Vec<&str> = ran.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{ran:?}");
        assert!(
            lines[0].starts_with(&format!(
                "nccl-perf: process {rank}/{world}: error: no CUDA driver found"
            )),
            "{ran:?}"
        );
    }
}
