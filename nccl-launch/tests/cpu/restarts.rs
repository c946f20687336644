//! `--max-restarts`: after a rank fails, every rank starts again with the
//! next `TORCHELASTIC_RESTART_COUNT`, up to N times; the launch's status
//! is the last attempt's.

use crate::{exited, lines_of, simulated, simulated_launch, text};

/// Each rank says which attempt it is; on the first, rank 1 fails and the
/// others wait to be ended.
const FAILS_ON_THE_FIRST_ATTEMPT: &str = "echo \"attempt $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS\"; \
     if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then \
     if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 600; fi";

#[test]
fn a_rank_that_fails_on_the_first_attempt_succeeds_on_the_restart() {
    let out = simulated(3, &["--max-restarts", "2"], FAILS_ON_THE_FIRST_ATTEMPT);
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    assert_eq!(
        lines_of(&stdout, 1),
        ["attempt 0 of 2", "attempt 1 of 2"],
        "{stdout}"
    );
    // The others may have been ended on the first attempt before a word.
    for rank in [0, 2] {
        assert_eq!(
            lines_of(&stdout, rank).last().map(String::as_str),
            Some("attempt 1 of 2"),
            "{stdout}"
        );
    }
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("rank 1 failed; restart 1 of 2: starting every rank again"),
        "{stderr}"
    );
    assert!(!stderr.contains("restart 2 of 2"), "{stderr}");
    assert!(stderr.contains("all 3 rank(s) exited 0"), "{stderr}");
}

#[test]
fn a_rank_that_always_fails_gives_up_after_n_restarts_with_the_last_status() {
    // Its status tells the attempts apart: 5, 6, then 7 on the last.
    let out = simulated(
        2,
        &["--max_restarts=2"],
        "echo attempt $TORCHELASTIC_RESTART_COUNT; \
         if [ \"$RANK\" = 0 ]; then exit $((5 + TORCHELASTIC_RESTART_COUNT)); fi; exec sleep 600",
    );
    exited(
        &out,
        7,
        &[
            "restart 2 of 2",
            "rank 0 failed and the 2 restart(s) allowed are spent; giving up",
            "exit status 7",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(
        lines_of(&stdout, 0),
        ["attempt 0", "attempt 1", "attempt 2"],
        "{stdout}"
    );
}

#[test]
fn without_max_restarts_the_first_failure_is_final() {
    let out = simulated(
        2,
        &[],
        "echo attempt $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS; \
         if [ \"$RANK\" = 0 ]; then exit 4; fi; exec sleep 600",
    );
    let stderr = exited(&out, 4, &[]);
    let stdout = text(&out.stdout);
    assert_eq!(lines_of(&stdout, 0), ["attempt 0 of 0"], "{stdout}");
    assert!(!stderr.contains("restart"), "{stderr}");
}

#[test]
fn the_library_reports_each_attempt_and_the_last_outcome() {
    let launch = simulated_launch(2).with_max_restarts(3);
    let mut attempts = Vec::new();
    let outcome = launch
        .run(
            "sh",
            [
                "-c",
                "echo $TORCHELASTIC_RESTART_COUNT; [ $TORCHELASTIC_RESTART_COUNT = 1 ] || exit 3",
            ],
            |job| attempts.push((job.restart_count(), job.log_dir().is_none())),
        )
        .expect("run");
    assert_eq!(attempts, [(0, true), (1, true)]);
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(outcome.restarts, 1);
    assert_eq!(outcome.rank(1).expect("rank 1").stdout, "1\n");
}

/// Rank 1 fails at once; the others finish their work after it.
const SURVIVORS_GO_ON: &str = "if [ \"$RANK\" = 1 ]; then exit 3; fi; \
     sleep 0.5; echo \"rank $RANK went on\"";

#[test]
fn with_keep_going_the_others_go_on_after_a_failure_and_the_launch_still_fails() {
    let out = simulated(3, &["--keep-going"], SURVIVORS_GO_ON);
    exited(&out, 3, &[]);
    let stdout = text(&out.stdout);
    for rank in [0, 2] {
        assert_eq!(
            lines_of(&stdout, rank),
            [format!("rank {rank} went on")],
            "{stdout}"
        );
    }
}
