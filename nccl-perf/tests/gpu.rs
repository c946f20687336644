//! nccl-perf on the GPU with nccl-tests' method and flags: every layer
//! with the rotation (and without), CUDA graphs, aggregation, blocking
//! modes, misalignment, `-d`/`-o`/`-r all`, repeated checks, `-I`, `-M`
//! and `-J`; each run must end with exit status 0 (every check right).
//! Without a GPU the test prints `SKIP:` and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_perf::{Args, main_with};

/// Whether a GPU is there; without one, `SKIP:` (or a failure when GPUs
/// are required, as run.sh requires them).
fn have_gpu() -> bool {
    nccl_test_support::require_gpus(1).is_some()
}

/// Runs nccl-perf with `flags` (small sizes, few iterations) and checks
/// its exit status.
fn assert_runs(flags: &[&str]) {
    let small = [
        "-b", "8", "-e", "256K", "-f", "8", "-n", "5", "-w", "2", "-g", "1",
    ];
    let args = Args::try_parse_checked(["nccl-perf"].iter().chain(&small).chain(flags))
        .unwrap_or_else(|error| panic!("{flags:?}: {error}"));
    assert_eq!(main_with(&args), 0, "nccl-perf {flags:?}");
}

/// Runs nccl-perf as [`assert_runs`] does, with `-J` to a file of its own
/// and `flags`, and reads back the JSON document it wrote, with its text.
fn json_document(flags: &[&str]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("results.json");
    let path_text = path.to_str().expect("a UTF-8 path");
    assert_runs(&[&["-J", path_text][..], flags].concat());
    let text = std::fs::read_to_string(&path).expect("the -J file");
    let document = serde_json::from_str(&text).expect("valid JSON");
    (document, text)
}

#[test]
fn gpu_every_layer_rotates_and_checks() {
    if !have_gpu() {
        return;
    }
    for layer in ["raw", "core", "tensor", "group", "group-caller"] {
        assert_runs(&["--layer", layer, "-c", "2"]);
        assert_runs(&["--layer", layer, "-m", "3", "-u", "3", "all_reduce"]);
    }
    // The group layer's operations run on its own NCCL stream and are not
    // captured: -G with it is refused before anything runs.
    for layer in ["raw", "core", "tensor", "group-caller"] {
        assert_runs(&["--layer", layer, "-G", "2"]);
    }
    let refused = Args::try_parse_checked(["nccl-perf", "--layer", "group", "-G", "2"]);
    assert!(refused.is_err(), "-G with the group layer must be refused");
    assert_runs(&["--compare", "raw,tensor", "--no-rotate", "all_gather"]);
    // Both allocators, NCCL's with and without registration.
    for alloc in [
        &["--alloc", "nccl"][..],
        &["--alloc", "nccl", "-R", "1"],
        &["--alloc", "cudarc"],
    ] {
        assert_runs(&[&["--layer", "raw", "all_reduce"], alloc].concat());
    }
}

#[test]
fn gpu_nccl_tests_method_flags_run() {
    if !have_gpu() {
        return;
    }
    for flags in [
        &["-z", "1", "--layer", "raw", "all_reduce"][..],
        &["-z", "2", "--layer", "tensor", "reduce_scatter"],
        &["-z", "3", "-m", "2", "--layer", "core", "broadcast"],
        &[
            "-C", "1", "-S", "1", "-T", "60", "--layer", "raw", "sendrecv",
        ],
        &["-y", "1", "--layer", "tensor", "all_to_all"],
        &["-N", "2", "-c", "3", "--layer", "raw", "reduce"],
        // Every type with one reduction, and every reduction of one type:
        // NCCL 2.28 refuses avg on the 8-bit floats for reduce.
        &[
            "-d", "all", "-o", "max", "-r", "all", "-e", "1K", "--layer", "raw", "reduce",
        ],
        &[
            "-d", "float", "-o", "all", "-r", "all", "-e", "1K", "--layer", "raw", "reduce",
        ],
        &[
            "-d",
            "bfloat16",
            "-o",
            "all",
            "--layer",
            "group",
            "all_reduce",
        ],
        // -I with every blocking mode (-z 3: paired events), -M, and a layer
        // on the group's own stream.
        &[
            "-I",
            "1",
            "-K",
            "1",
            "-M",
            "1",
            "--layer",
            "raw",
            "all_reduce",
        ],
        &[
            "-I",
            "1",
            "-z",
            "3",
            "-m",
            "2",
            "--layer",
            "core",
            "all_gather",
        ],
        &["-I", "1", "-z", "1", "--layer", "tensor", "sendrecv"],
        &["-I", "1", "--compare", "raw,group", "-M", "1", "reduce"],
    ] {
        assert_runs(flags);
    }
}

#[test]
fn gpu_output_file_is_nccl_tests_json() {
    if !have_gpu() {
        return;
    }
    let (document, text) = json_document(&["--layer", "raw", "all_reduce"]);
    assert_eq!(document["version"], 3);
    let results = document["results"].as_array().expect("results");
    // -b 8 -e 256K -f 8: 8, 64, 512, 4K, 32K, 256K.
    assert_eq!(results.len(), 6, "{text}");
    assert!(
        results
            .iter()
            .all(|result| result["out_of_place"]["nwrong"] == 0.0)
    );
    assert_eq!(document["out_of_bounds"]["okay"], "true");
}

#[test]
fn gpu_per_iteration_timing_is_in_the_json_document() {
    if !have_gpu() {
        return;
    }
    let (document, _) = json_document(&["-I", "1", "-K", "1", "--layer", "raw", "all_reduce"]);
    assert_eq!(document["config"]["per_iter_timing"], "true");
    assert_eq!(document["config"]["per_iter_skip"], 1);
    for result in document["results"].as_array().expect("results") {
        for key in ["out_of_place_per_iter", "in_place_per_iter"] {
            let report = &result[key];
            let times = report["times_us"].as_array().expect("times_us");
            // -n 5 iterations of one batch, each timed.
            assert_eq!(times.len(), 5, "{key}: {report}");
            assert!(
                times
                    .iter()
                    .all(|time| time.as_f64().is_some_and(|t| t >= 0.0))
            );
            assert_eq!(report["skipped_iterations"], 1);
            let (p50, p99) = (report["p50_us"].as_f64(), report["p99_us"].as_f64());
            assert!(p50.is_some() && p99 >= p50, "{report}");
        }
    }
}
