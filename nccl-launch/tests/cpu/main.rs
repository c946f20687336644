//! The launcher on the CPU: shell programs as ranks. The variables each
//! rank gets, the prefixed output, the first failure ending the others,
//! exit statuses, the deadline, and the library's partial launches;
//! `signals`: the signals it forwards and its ranks' parent-death signal;
//! `restarts`: `--max-restarts`; `logs`: `--log-dir` and `--tee`;
//! `torchrun_flags`: torchrun's spellings and the flags it refuses.

mod logs;
mod restarts;
mod signals;
mod torchrun_flags;

use std::process::{Command, Output};
use std::time::Duration;

use nccl_launch::{Ending, Launch, Placement, WaitPolicy};
use nccl_test_support::processes::{spawn_captured, wait_children};

/// The hang guard of every launch here: ranks that must end sleep longer,
/// so one left running fails the test instead of passing late. Only a
/// launcher that never ends them outlasts it, however loaded the machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// What `nccl-launch args` did; killed past [`PATIENCE`], failing the test.
fn launcher(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nccl-launch"));
    command.args(args);
    let ended =
        wait_children(vec![spawn_captured(&mut command)], PATIENCE, Duration::ZERO).remove(0);
    let Some(status) = ended.status else {
        panic!(
            "nccl-launch {args:?} was still running after {PATIENCE:?}, killed\n\
             --- stdout ---\n{}\n--- stderr ---\n{}",
            ended.stdout, ended.stderr
        );
    };
    Output {
        status,
        stdout: ended.stdout.into_bytes(),
        stderr: ended.stderr.into_bytes(),
    }
}

/// What `nccl-launch -n ranks --hosts simulated flags... sh -c script` did, as [`launcher`].
fn simulated(ranks: usize, flags: &[&str], script: &str) -> Output {
    let ranks = ranks.to_string();
    let mut args = vec!["-n", &ranks, "--hosts", "simulated"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["sh", "-c", script]);
    launcher(&args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A library launch of `ranks` simulated hosts that keeps their output and
/// ends them after [`PATIENCE`].
fn simulated_launch(ranks: usize) -> Launch {
    Launch::new(ranks)
        .expect("launch")
        .with_placement(Placement::SimulatedHosts)
        .with_keep_output(true)
        .with_timeout(Some(PATIENCE))
}

/// Checks that `out` exited with `code` and that its stderr says each of
/// `says`; returns the stderr, for further checks.
#[track_caller]
fn exited(out: &Output, code: i32, says: &[&str]) -> String {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let stderr = text(&out.stderr);
    for said in says {
        assert!(stderr.contains(said), "{said:?} is not in: {stderr}");
    }
    stderr
}

/// The lines of `out` from `rank`, without the prefix.
fn lines_of(out: &str, rank: usize) -> Vec<String> {
    let prefix = format!("[rank {rank}] ");
    out.lines()
        .filter_map(|line| line.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

const PRINT_ENV: &str = "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK \
     $MASTER_ADDR $MASTER_PORT $NCCL_LAUNCH_SIMULATED_HOSTS ${NCCL_HOSTID:-none} \
     ${NCCL_SOCKET_IFNAME:-none} ${NCCL_IB_DISABLE:-none} ${NCCL_NVLS_ENABLE:-none}\"; \
     test -d \"$NCCL_LAUNCH_DIR\" && echo shared-dir-ok";

#[test]
fn simulated_hosts_get_torchruns_variables_and_a_host_each() {
    let out = simulated(3, &["--master-port", "29555"], PRINT_ENV);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for rank in 0..3 {
        assert_eq!(
            lines_of(&stdout, rank),
            [
                format!("{rank} 3 0 1 {rank} 127.0.0.1 29555 1 simhost{rank} lo 1 0"),
                "shared-dir-ok".to_string()
            ],
            "{stdout}"
        );
    }
    let stderr = text(&out.stderr);
    assert!(stderr.contains("simulated hosts"), "{stderr}");
    assert!(stderr.contains("all 3 rank(s) exited 0"), "{stderr}");
}

#[test]
fn the_recipes_nccl_settings_give_way_to_the_callers() {
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-launch"))
        .args(["-n", "2", "--hosts", "simulated", "sh", "-c", PRINT_ENV])
        .env("NCCL_SOCKET_IFNAME", "eth9")
        .env("NCCL_HOSTID", "not-per-rank")
        .output()
        .expect("run nccl-launch");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let first = &lines_of(&stdout, 1)[0];
    assert!(first.ends_with(" simhost1 eth9 1 0"), "{first}");
}

#[test]
fn one_gpu_per_rank_makes_every_rank_local_to_one_host() {
    let env = nccl_launch::rank_variables(2, 4, false, "10.0.0.1", 1234).expect("variables");
    let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    assert_eq!(get("RANK"), Some("2"));
    assert_eq!(get("LOCAL_RANK"), Some("2"));
    assert_eq!(get("LOCAL_WORLD_SIZE"), Some("4"));
    assert_eq!(get("GROUP_RANK"), Some("0"));
    assert_eq!(get("MASTER_ADDR"), Some("10.0.0.1"));
    assert_eq!(get(nccl_launch::SIMULATED_HOSTS_VAR), Some("0"));
    assert_eq!(get("NCCL_HOSTID"), None);
}

#[test]
fn a_rank_outside_the_world_gets_no_variables() {
    let refused = nccl_launch::rank_variables(4, 4, true, "127.0.0.1", 1234).unwrap_err();
    let message = refused.to_string();
    assert!(
        message.starts_with("invalid rank and world size: expected a rank below"),
        "{message}"
    );
    assert!(
        message.contains("rank 4 must be below world_size 4"),
        "{message}"
    );
}

#[test]
fn auto_needs_a_gpu_count_and_the_library_never_counts() {
    let refused = Launch::new(2)
        .expect("launch")
        .resolved_placement()
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("the number of visible GPUs for `auto` (Launch::with_visible_gpus)"),
        "{message}"
    );
    let trusted = Launch::new(2)
        .expect("launch")
        .with_placement(Placement::Gpus);
    assert_eq!(trusted.resolved_placement().unwrap(), Placement::Gpus);
    let enough = Launch::new(2).expect("launch").with_visible_gpus(2);
    assert_eq!(enough.resolved_placement().unwrap(), Placement::Gpus);
}

#[test]
fn without_a_gpu_per_rank_auto_simulates_and_gpus_is_refused() {
    let launch = Launch::new(3).expect("launch").with_visible_gpus(2);
    assert_eq!(
        launch.resolved_placement().unwrap(),
        Placement::SimulatedHosts
    );
    let refused = launch
        .with_placement(Placement::Gpus)
        .spawn("true", [""; 0])
        .expect_err("gpus without a GPU per rank");
    let message = refused.to_string();
    assert!(
        message.starts_with("invalid placement: expected a GPU per rank"),
        "{message}"
    );
}

#[test]
fn output_is_prefixed_line_by_line_on_both_streams() {
    let out = simulated(
        2,
        &[],
        "echo out-$RANK; echo err-$RANK >&2; printf 'no newline'",
    );
    assert!(out.status.success(), "{out:?}");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    for rank in 0..2 {
        assert_eq!(
            lines_of(&stdout, rank),
            [format!("out-{rank}"), "no newline".to_string()]
        );
        assert_eq!(lines_of(&stderr, rank), [format!("err-{rank}")]);
    }
}

#[test]
fn ranks_of_ten_or_more_are_aligned() {
    let out = simulated(11, &[], "echo hi");
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("[rank  3] hi"), "{stdout}");
    assert!(stdout.contains("[rank 10] hi"), "{stdout}");
}

#[test]
fn the_first_failure_ends_the_others_and_gives_its_status() {
    let out = simulated(
        4,
        &[],
        "if [ \"$RANK\" = 2 ]; then sleep 0.2; exit 3; fi; exec sleep 600",
    );
    exited(
        &out,
        3,
        &[
            "rank 2 failed (exit status: 3); ending rank 0 (pid ",
            "rank 3 (pid ",
        ],
    );
}

#[test]
fn a_rank_ended_by_a_signal_gives_128_plus_the_signal() {
    let out = simulated(
        2,
        &[],
        "if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 600",
    );
    exited(&out, 137, &[]);
}

#[test]
fn ranks_that_hang_are_ended_at_the_deadline() {
    let out = launcher(&[
        "-n",
        "2",
        "--hosts",
        "simulated",
        "--timeout",
        "1",
        "sleep",
        "600",
    ]);
    exited(
        &out,
        124,
        &["rank 0 (pid ", "still running after the 1s timeout"],
    );
}

#[test]
fn bad_settings_are_usage_errors() {
    exited(
        &launcher(&["-n", "0", "true"]),
        2,
        &["invalid number of ranks: expected 1 to 1024, got 0"],
    );
    exited(
        &launcher(&["-n", "2", "--hosts", "simulated", "/no/such/program"]),
        2,
        &["could not start rank 0 (\"/no/such/program\")"],
    );
    exited(&launcher(&["-n", "2"]), 2, &[]);
}

#[test]
fn the_library_starts_some_ranks_kills_one_and_waits_for_all() {
    let mut job = simulated_launch(3)
        .spawn_ranks(
            "sh",
            [
                "-c",
                "echo started $RANK; if [ \"$RANK\" = 2 ]; then exec sleep 600; fi; exit $RANK",
            ],
            [2, 0],
        )
        .expect("spawn");
    assert!(job.pid(1).is_none() && job.pid(2).is_some());
    assert_eq!(job.world_size(), 3);
    job.kill(2);
    let outcome = job.wait(WaitPolicy::All);
    assert_eq!(outcome.ranks.len(), 2);
    let two = outcome.rank(2).expect("rank 2");
    assert_eq!(two.ending, Ending::Killed);
    let zero = outcome.rank(0).expect("rank 0");
    assert!(zero.succeeded(), "{zero:?}");
    assert_eq!(zero.stdout, "started 0\n");
    assert_eq!(outcome.first_failure, None);
    assert!(!outcome.success());
}

#[test]
fn waiting_for_all_lets_the_others_finish_after_a_failure() {
    let job = simulated_launch(2)
        .spawn(
            "sh",
            [
                "-c",
                "if [ \"$RANK\" = 0 ]; then exit 5; fi; sleep 0.3; echo finished",
            ],
        )
        .expect("spawn");
    let outcome = job.wait(WaitPolicy::All);
    assert_eq!(outcome.first_failure, Some(0));
    assert_eq!(outcome.exit_code(), 5);
    let one = outcome.rank(1).expect("rank 1");
    assert!(one.succeeded() && one.stdout == "finished\n", "{one:?}");
}

#[test]
fn ranks_out_of_range_or_twice_are_refused() {
    let launch = Launch::new(2).expect("launch");
    for ranks in [vec![2], vec![0, 0]] {
        let error = launch
            .spawn_ranks("true", [""; 0], ranks)
            .expect_err("bad ranks");
        assert!(
            error.to_string().starts_with(
                "invalid ranks to start: expected distinct ranks below the world size 2"
            ),
            "{error}"
        );
    }
}
