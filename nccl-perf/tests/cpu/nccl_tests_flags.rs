//! nccl-tests command lines given to the `nccl-perf` binary. Without a
//! CUDA driver (CI, the development machines), an accepted command line
//! ends at the driver check (exit status 2, that one line) and a refused
//! one at clap's usage error (exit status 2, naming the flag); on the GPU
//! machine the tests of accepted command lines are skipped with a note
//! (they would run).

use crate::{nccl_perf, text};

#[test]
fn nccl_tests_command_lines_are_accepted() {
    if nccl_core::cuda_driver_available() {
        println!("SKIP: a CUDA driver is present; these command lines would run");
        return;
    }
    for args in [
        &[
            "-b", "8", "-e", "1G", "-f", "4", "-g", "1", "-w", "20", "-n", "200", "-c", "1",
        ][..],
        &["-V", "16"],
        &["-d", "all", "-o", "all", "-r", "all", "reduce"],
        &[
            "-m", "4", "-N", "2", "-z", "3", "-y", "1", "-T", "30", "-C", "1", "-S", "1",
        ],
        &[
            "-J",
            "/tmp/never.json",
            "-u",
            "1",
            "-p",
            "1",
            "-R",
            "1",
            "-x",
            "0",
        ],
        &[
            "-D",
            "1",
            "-M",
            "1",
            "-I",
            "1",
            "-K",
            "2",
            "-r",
            "-1",
            "broadcast",
        ],
        &[
            "--stepfactor=2",
            "--agg_iters=2",
            "--output_file=x.json",
            "--no-rotate",
        ],
        &["--alloc", "nccl", "all_reduce"],
        &["--alloc", "nccl", "-R", "1"],
    ] {
        let output = nccl_perf(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.starts_with("nccl-perf: error: no CUDA driver found"),
            "{args:?} should reach the driver check: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn version_is_long_only_and_v_takes_a_value() {
    let version = nccl_perf(&["--version"]);
    assert_eq!(version.status.code(), Some(0));
    assert!(text(&version.stdout).starts_with("nccl-perf "));
    // `-V 16` is nccl-tests' device CTA count: never the version, never 0.
    let output = nccl_perf(&["-V", "16"]);
    assert_ne!(output.status.code(), Some(0));
    assert!(!text(&output.stdout).starts_with("nccl-perf "));
    let alone = nccl_perf(&["-V"]);
    assert_eq!(alone.status.code(), Some(2));
    assert!(
        text(&alone.stderr).contains("--device_cta_count"),
        "{}",
        text(&alone.stderr)
    );
}

#[test]
fn usage_errors_need_no_gpu_and_name_the_flag() {
    for (args, says) in [
        (&["-N", "0"][..], "-N 0"),
        (&["-o", "mulsum"], "-o mulsum"),
        (&["-z", "2", "-G", "10"], "-z 2"),
        (&["-b", "2M", "-e", "1M"], "-b/--minbytes"),
        (&["-z", "7"], "--blocking"),
        (&["-c", "x"], "--check"),
        (&["-r", "some"], "--root"),
        (&["-d", "fp8"], "--datatype"),
        (&["-T", "-1"], "--timeout"),
        (
            &["--alloc", "cudarc", "-R", "1"],
            "--alloc cudarc with -R 1",
        ),
        (&["--alloc", "pool"], "--alloc"),
        (&["-K", "20"], "-K/--per_iter_skip 20"),
        (&["-I", "2"], "--per_iter_timing"),
        (&["-M", "2"], "--memory"),
    ] {
        let output = nccl_perf(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}
