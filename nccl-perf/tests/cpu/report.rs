//! `nccl-perf --report ROWS.jsonl`: the `nccl-perf` binary redraws saved
//! rows with no GPU, CUDA driver or NCCL (it never looks for them), and
//! refuses a file that is not rows, naming the line.

use std::path::Path;

use serde_json::json;

use crate::{nccl_perf, text};

/// A row of `--compare raw,tensor -I 1` as `--json` writes it: `layer`'s
/// all_reduce at `size` bytes over 2 ranks, B's with its ratio.
fn row(layer: &str, size: u64, time_us: f64, ratio: Option<f64>) -> serde_json::Value {
    let half = json!({"time_us": time_us, "algbw": size as f64 / time_us / 1e3,
                      "busbw": size as f64 / time_us / 1e3, "wrong": 0});
    let per_iter = json!({"skipped_iterations": 0, "min_us": time_us, "max_us": time_us * 2.0,
                          "avg_us": time_us, "p50_us": time_us, "p95_us": time_us,
                          "p99_us": time_us * 2.0, "stdev_us": 0.5, "cv_pct": 12.5,
                          "times_us": [time_us, time_us * 2.0]});
    let mut row = json!({"collective": "all_reduce", "layer": layer, "world_size": 2,
                         "size": size, "count": size / 4, "type": "float", "redop": "sum",
                         "root": -1, "out_of_place": half, "in_place": half,
                         "out_of_place_per_iter": per_iter, "in_place_per_iter": per_iter});
    if let Some(ratio) = ratio {
        row["ratio"] = json!({"baseline": "raw", "out_of_place": ratio, "in_place": ratio});
    }
    row
}

fn write_rows(path: &Path, rows: &[serde_json::Value]) {
    let text: String = rows.iter().map(|row| format!("{row}\n")).collect();
    std::fs::write(path, text).expect("the rows file");
}

#[test]
fn saved_rows_are_redrawn_without_a_gpu() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let rows_path = dir.path().join("rows.jsonl");
    let mut rows = Vec::new();
    for size in [1024u64, 1 << 20] {
        rows.push(row("raw", size, 10.0, None));
        rows.push(row("tensor", size, 11.0, Some(1.1)));
    }
    write_rows(&rows_path, &rows);
    let rows_arg = rows_path.to_str().expect("a UTF-8 path");
    let output = nccl_perf(&["--report", rows_arg]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
    for says in [
        "row(s), redrawn without running",
        "# Collective all_reduce layer tensor baseline raw world 2",
        "#wrong    i_min    i_max    i_p99    i_cv%   ratio",
        "# Out of bounds values : 0 OK",
        "# Median ratio tensor/raw : out-of-place 1.100 in-place 1.100",
    ] {
        assert!(stdout.contains(says), "{says:?} not in\n{stdout}");
    }
    let table: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(table.len(), 2, "B's rows only:\n{stdout}");
    assert_eq!(
        table[0],
        "        1024           256     float     sum      -1    11.00    0.09    0.09       0    11.00    22.00    22.00    12.50   1.100    11.00    0.09    0.09       0    11.00    22.00    22.00    12.50   1.100"
    );
    // With --plot, the SVG too, from the same rows.
    if cfg!(feature = "plot") {
        let svg_path = dir.path().join("bw.svg");
        let svg_arg = svg_path.to_str().expect("a UTF-8 path");
        let output = nccl_perf(&["--report", rows_arg, "--plot", svg_arg]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        assert_eq!(text(&output.stdout), stdout);
        let svg = std::fs::read_to_string(&svg_path).expect("the SVG");
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"));
        for series in [
            "raw out-of-place",
            "tensor in-place",
            "nccl-perf tensor vs raw: float world 2",
        ] {
            assert!(svg.contains(series), "the SVG lacks {series:?}");
        }
    }
}

#[test]
fn a_file_that_is_not_rows_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let rows_path = dir.path().join("rows.jsonl");
    let mut bad = row("raw", 8, 1.0, None);
    bad["layer"] = json!("fast");
    write_rows(&rows_path, &[row("raw", 8, 1.0, None), bad]);
    let rows_arg = rows_path.to_str().expect("a UTF-8 path");
    for (args, says) in [
        (
            vec!["--report", rows_arg],
            format!(
                "nccl-perf: error: --report {rows_arg}: line 2: expected a layer (raw, raw-fingerprint, core, tensor, group, group-caller), got \"fast\""
            ),
        ),
        (
            vec!["--report", "/nonexistent/rows.jsonl"],
            "nccl-perf: error: --report /nonexistent/rows.jsonl: cannot read it: ".to_string(),
        ),
        (
            vec!["--report", rows_arg, "-b", "8"],
            "only --plot can go with it, given --minbytes".to_string(),
        ),
    ] {
        let output = nccl_perf(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains(&says), "{args:?}: {says:?} not in {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: {}",
            text(&output.stdout)
        );
    }
}
