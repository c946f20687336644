//! `--log-dir` and `--tee`: each rank's streams in files of a fresh run
//! folder, per attempt, never overwritten; the streams teed also on the
//! console.

use std::fs;
use std::path::Path;

use crate::{exited, launcher, lines_of, simulated, text};

/// Each rank writes a line to each stream, naming its rank and attempt;
/// rank 0 fails on the first attempt, once rank 1 has written (or after
/// about two minutes).
const WRITES_BOTH: &str = "echo out-$RANK-$TORCHELASTIC_RESTART_COUNT; \
     echo err-$RANK-$TORCHELASTIC_RESTART_COUNT >&2; touch \"$NCCL_LAUNCH_DIR/$RANK\"; \
     if [ \"$RANK$TORCHELASTIC_RESTART_COUNT\" = 00 ]; then i=0; \
     while [ ! -e \"$NCCL_LAUNCH_DIR/1\" ] && [ $i -lt 12000 ]; do i=$((i + 1)); sleep 0.01; done; \
     exit 1; fi";

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// `nccl-launch` of 2 ranks running [`WRITES_BOTH`] with a restart, its
/// logs under `dir`, and `extra` arguments.
fn launch_logged(dir: &Path, extra: &[&str]) -> std::process::Output {
    let dir = dir.to_str().expect("a UTF-8 temporary path");
    let mut flags = vec!["--max-restarts", "1", "--log_dir", dir];
    flags.extend_from_slice(extra);
    simulated(2, &flags, WRITES_BOTH)
}

#[test]
fn each_ranks_streams_go_to_its_files_and_the_teed_one_to_the_console() {
    let base = tempfile::tempdir().expect("a folder");
    let logs = base.path().join("not/yet/made");
    let out = launch_logged(&logs, &["--tee", "2"]);
    assert!(out.status.success(), "{out:?}");
    for attempt in 0..2 {
        for rank in 0..2 {
            let folder = logs.join(format!("run_0/attempt_{attempt}/{rank}"));
            assert_eq!(
                read(&folder.join("stdout.log")),
                format!("out-{rank}-{attempt}\n")
            );
            assert_eq!(
                read(&folder.join("stderr.log")),
                format!("err-{rank}-{attempt}\n")
            );
        }
    }
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(lines_of(&stdout, 0).is_empty(), "{stdout}");
    assert_eq!(lines_of(&stderr, 1), ["err-1-0", "err-1-1"], "{stderr}");
    assert!(
        stderr.contains(&format!(
            "output in {}",
            logs.join("run_0/attempt_1").display()
        )),
        "{stderr}"
    );
}

#[test]
fn without_tee_the_console_gets_no_rank_output() {
    let base = tempfile::tempdir().expect("a folder");
    let out = launch_logged(base.path(), &[]);
    assert!(out.status.success(), "{out:?}");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stdout.contains("[rank"), "{stdout}");
    assert!(!stderr.contains("[rank"), "{stderr}");
    let log = base.path().join("run_0/attempt_0/1/stdout.log");
    assert_eq!(read(&log), "out-1-0\n");
}

#[test]
fn a_second_launch_gets_a_fresh_run_folder_and_the_first_stays() {
    let base = tempfile::tempdir().expect("a folder");
    for _ in 0..2 {
        let out = launch_logged(base.path(), &["-t", "3"]);
        assert!(out.status.success(), "{out:?}");
    }
    for run in 0..2 {
        let log = base
            .path()
            .join(format!("run_{run}/attempt_1/0/stderr.log"));
        assert_eq!(read(&log), "err-0-1\n");
    }
    assert!(!base.path().join("run_2").exists());
}

#[test]
fn bad_log_settings_are_usage_errors() {
    let base = tempfile::tempdir().expect("a folder");
    let file = base.path().join("a-file");
    fs::write(&file, "").expect("write a file");
    let under_a_file = file.join("logs");
    let not_a_directory = format!(
        "could not create the log folder {}: Not a directory",
        under_a_file.display()
    );
    exited(&launch_logged(&under_a_file, &[]), 2, &[&not_a_directory]);
    exited(
        &launch_logged(base.path(), &["--tee", "4"]),
        2,
        &["expected 0 (neither), 1 (stdout), 2 (stderr) or 3 (both)"],
    );
    exited(
        &launcher(&["-n", "1", "--tee", "3", "true"]),
        2,
        &["--log-dir <DIR>"],
    );
}
