//! `nccl-perf` on a machine without a CUDA driver (development machines and
//! CI): one clear line on stderr, exit status 2, nothing on stdout. On a
//! machine with a driver (the GPU machine) these tests are skipped with a note.

use std::process::Output;

use crate::{nccl_perf, skip_with_driver};

fn assert_one_error_line(output: &Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(2),
        "exit status; stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one stderr line, got: {stderr:?}");
    assert!(lines[0].contains("nccl-perf: error:"), "{stderr:?}");
    assert!(
        output.stdout.is_empty(),
        "stdout must stay empty: {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    lines[0].to_string()
}

#[test]
fn without_a_driver_it_exits_2_with_one_line() {
    if skip_with_driver() {
        return;
    }
    let line = assert_one_error_line(&nccl_perf(&[]));
    assert!(
        line.starts_with("nccl-perf: error: no CUDA driver found") && line.contains("libcuda.so.1"),
        "{line}"
    );
}

#[test]
fn every_layer_and_collective_checks_the_driver_first() {
    if skip_with_driver() {
        return;
    }
    for args in [
        &["--layer", "raw", "all_reduce"][..],
        &["--layer", "tensor", "all_gather"],
        &["--layer", "group", "sendrecv"],
        &["--compare", "raw,group", "-b", "8", "-e", "128M", "-f", "2"],
        &["--compare", "raw,tensor", "-G", "100"],
        &[
            "--layer", "core", "-g", "8", "-b", "1M", "-e", "1G", "sendrecv",
        ],
        &[
            "-r",
            "7",
            "--json",
            "/nonexistent/dir/rows.jsonl",
            "broadcast",
        ],
    ] {
        assert_one_error_line(&nccl_perf(args));
    }
    // Without the `plot` feature, --plot is a usage error (the unit tests'
    // `plot_needs_its_feature`).
    if cfg!(feature = "plot") {
        assert_one_error_line(&nccl_perf(&["--plot", "/tmp/never.svg", "all_reduce"]));
    }
}

#[test]
fn help_and_bad_flags_need_no_gpu() {
    let help = nccl_perf(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--minbytes",
        "--maxbytes",
        "--stepfactor",
        "--iters",
        "--warmup_iters",
        "--check",
        "--datatype",
        "--op",
        "--root",
        "--ngpus",
        "--op-name",
        "--layer",
        "--json",
        "--compare",
        "--cudagraph",
        "--batches",
        "--plot",
        "ratio",
        "tensor",
        "group",
    ] {
        assert!(text.contains(flag), "--help lacks {flag}");
    }
    let bad = nccl_perf(&["-d", "float8"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("float8"));
}

#[test]
fn bad_compare_flags_are_usage_errors_without_a_gpu() {
    for (args, says) in [
        (&["--compare", "raw,raw"][..], "two different layers"),
        (&["--compare", "raw,magic"], "unknown layer \"magic\""),
        (&["--compare", "raw"], "separated by a comma"),
        (
            &["--compare", "raw,core", "--layer", "tensor"],
            "cannot be used with",
        ),
        (&["-G", "-3"], "-3"),
    ] {
        let output = nccl_perf(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}
