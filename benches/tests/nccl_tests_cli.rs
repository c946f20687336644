//! nccl-tests command lines given to the `nccl-perf` binary, and
//! `nccl-tests-compare` on recorded tables. Without a CUDA driver (CI, the
//! development machines), an accepted command line ends at the driver
//! check (exit status 2, that one line) and a refused one at clap's usage
//! error (exit status 2, naming the flag); on the GPU machine the tests of
//! accepted command lines are skipped with a note (they would run).

use std::process::{Command, Output};

fn nccl_perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nccl-perf"))
        .args(args)
        .output()
        .expect("nccl-perf runs")
}

fn compare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nccl-tests-compare"))
        .args(args)
        .output()
        .expect("nccl-tests-compare runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

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
    ] {
        let output = nccl_perf(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn recorded_tables_compare_side_by_side() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    // nccl-tests' all_reduce table of the recorded baseline, as its binary prints it.
    let baseline = std::fs::read_to_string(format!(
        "{root}/../docs/measurements/h200-2026-12-02-baselines/h200-1gpu.md"
    ))
    .unwrap();
    let table: Vec<&str> = baseline
        .lines()
        .skip_while(|line| *line != "### all_reduce_perf")
        .skip(2)
        .take_while(|line| *line != "```")
        .collect();
    let tests_path = dir.path().join("all_reduce.nccl-tests.txt");
    std::fs::write(
        &tests_path,
        format!(
            "# Collective test starting: all_reduce_perf\n{}\n",
            table.join("\n")
        ),
    )
    .unwrap();
    // The same table as nccl-perf prints it, 2 % slower from 32 MiB on.
    let perf: Vec<String> = table
        .iter()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.first().and_then(|size| size.parse::<u64>().ok()) {
                Some(size) if size >= 32 << 20 => {
                    let time: f64 = fields[5].parse().unwrap();
                    line.replacen(fields[5], &format!("{:.2}", time * 1.02), 1)
                }
                _ => line.to_string(),
            }
        })
        .collect();
    let perf_path = dir.path().join("all_reduce.nccl-perf.txt");
    std::fs::write(
        &perf_path,
        format!(
            "# Collective all_reduce layer raw nccl 2.28.3 world 1\n{}\n",
            perf.join("\n")
        ),
    )
    .unwrap();
    let (tests, perf) = (tests_path.to_str().unwrap(), perf_path.to_str().unwrap());
    let met = compare(&["--nccl-tests", tests, "--nccl-perf", perf]);
    assert_eq!(met.status.code(), Some(0), "{}", text(&met.stderr));
    let stdout = text(&met.stdout);
    assert!(
        stdout.starts_with("# all_reduce: nccl-tests and nccl-perf"),
        "{stdout}"
    );
    assert!(
        stdout.contains("   33554432         19.20         19.58   1.020    yes"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("# all_reduce: 10 of 10 halves from 1048576 B within 3 %\n"),
        "{stdout}"
    );
    // A 1 % target: the 2 % rows miss it, exit status 1.
    let missed = compare(&[
        "--nccl-tests",
        tests,
        "--nccl-perf",
        perf,
        "--target-percent",
        "1",
    ]);
    assert_eq!(missed.status.code(), Some(1));
    assert!(
        text(&missed.stdout).contains("# all_reduce: 7 of 10 halves"),
        "{}",
        text(&missed.stdout)
    );
    // Input that holds no table: exit status 2, one line.
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "# nothing\n").unwrap();
    let bad = compare(&["--nccl-tests", empty.to_str().unwrap(), "--nccl-perf", perf]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("holds no nccl-tests table"),
        "{}",
        text(&bad.stderr)
    );
}
