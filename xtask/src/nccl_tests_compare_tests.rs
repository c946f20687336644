//! The comparison of nccl-tests' and nccl-perf's `-J` documents, on
//! documents written the way each tool writes them.

use std::path::Path;

use serde_json::{Value, json};

use super::*;

/// A half as both tools write it: its time, or `null`.
fn half(time: Option<f64>) -> Value {
    time.map_or(
        Value::Null,
        |time| json!({"time": time, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0.0}),
    )
}

/// A result of a sum over floats of `size` bytes, with no root.
fn result(size: u64, oop: Option<f64>, ip: Option<f64>) -> Value {
    json!({"size": size, "count": size / 4, "type": "float", "redop": "sum", "root": "    -1",
           "out_of_place": half(oop), "in_place": half(ip),
           "actual_iterations": 20, "experiment_name": ""})
}

/// nccl-tests' document of `program`: no result names its collective.
fn nccl_tests(program: &str, results: Vec<Value>) -> Value {
    json!({"version": 3, "args": [program, "-b", "8"], "results": results})
}

/// nccl-perf's document: every result names its collective.
fn nccl_perf(collective: &str, mut results: Vec<Value>) -> Value {
    for result in &mut results {
        result["collective"] = json!(collective);
    }
    json!({"version": 3, "args": ["nccl-perf"], "results": results})
}

#[test]
fn sizes_read_as_both_tools_read_them() {
    assert_eq!(parse_bytes("1M"), Ok(1 << 20));
    assert_eq!(parse_bytes("8"), Ok(8));
    assert_eq!(parse_bytes("4k"), Ok(4096));
    assert_eq!(parse_bytes("2G"), Ok(2 << 30));
    for bad in ["", "M", "1.5M", "-1", "1T", "99999999999G"] {
        let error = parse_bytes(bad).unwrap_err();
        assert!(error.contains("expected a size in bytes"), "{bad}: {error}");
    }
}

#[test]
fn rows_of_both_documents() {
    let tests = nccl_tests(
        "/tmp/nccl-tests-build/alltoall_perf",
        vec![result(1024, Some(6.5), None)],
    );
    let collective = program_collective(&tests).unwrap();
    assert_eq!(collective, "alltoall");
    let read = rows(&tests, Some(&collective)).unwrap();
    assert_eq!(
        read,
        [JsonRow {
            collective: "alltoall".into(),
            size: 1024,
            dtype: "float".into(),
            redop: "sum".into(),
            root: -1,
            out_of_place_us: Some(6.5),
            in_place_us: None,
        }]
    );
    let perf = nccl_perf("all_to_all", vec![result(1024, Some(6.0), Some(0.2))]);
    let read = rows(&perf, None).unwrap();
    assert_eq!(read[0].collective, "all_to_all");
    assert!(same_collective("alltoall", "all_to_all"));
    assert!(!same_collective("all_gather", "all_reduce"));
    // -C 1 writes cpu_time; "nan" is no time.
    let mut cpu = result(8, None, None);
    cpu["out_of_place"] = json!({"cpu_time": 7.25});
    cpu["in_place"] = json!({"time": "nan"});
    let read = rows(&nccl_perf("all_reduce", vec![cpu]), None).unwrap();
    assert_eq!(
        (read[0].out_of_place_us, read[0].in_place_us),
        (Some(7.25), None)
    );
    // What cannot be read is named.
    let no_root = json!({"results": [{"size": 8, "type": "float", "redop": "sum"}]});
    let error = rows(&no_root, Some("all_reduce")).unwrap_err();
    assert_eq!(error.to_string(), "result 0 has no \"root\"");
    let unnamed = nccl_tests("x", vec![result(8, None, None)]);
    assert_eq!(
        rows(&unnamed, None).unwrap_err().to_string(),
        "result 0 names no collective"
    );
    assert!(rows(&json!({}), None).is_err());
}

#[test]
fn rows_pair_by_collective_size_type_redop_and_root() {
    let row = |collective: &str, size, oop, ip| JsonRow {
        collective: collective.into(),
        size,
        dtype: "float".into(),
        redop: "sum".into(),
        root: -1,
        out_of_place_us: oop,
        in_place_us: ip,
    };
    let tests = [
        row("all_reduce", 1024, Some(6.0), Some(0.4)),
        row("all_reduce", 1 << 20, Some(10.0), Some(0.4)),
        row("all_reduce", 1 << 21, Some(20.0), None),
        row("all_reduce", 1 << 20, Some(10.0), Some(0.4)),
    ];
    let perf = [
        row("all_gather", 1 << 20, Some(1.0), Some(1.0)),
        row("all_reduce", 1 << 20, Some(10.2), Some(0.2)),
        row("all_reduce", 1024, Some(5.0), Some(0.2)),
        row("all_reduce", 1 << 21, Some(21.0), Some(0.2)),
        row("all_reduce", 1 << 20, Some(9.0), Some(0.4)),
    ];
    let rows = pair(&tests, &perf);
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0].halves[0].subject_us, Some(5.0));
    assert!((rows[1].halves[0].ratio().unwrap() - 1.02).abs() < 1e-9);
    assert_eq!(rows[1].halves[0].within(0.03), Some(true));
    assert_eq!(rows[1].halves[1].within(0.03), Some(false));
    assert_eq!(rows[2].halves[1].ratio(), None);
    // The second 1 MiB row (a second -N cycle) pairs with the second.
    assert_eq!(rows[3].halves[0].subject_us, Some(9.0));
    let judgement = Judgement {
        operation: "all_reduce".into(),
        target: 0.03,
        from_bytes: 1 << 20,
        in_place: true,
    };
    let (text, verdict) = render(&rows, &judgement);
    assert_eq!(
        verdict,
        Verdict {
            judged: 5,
            met: 2,
            missing: 1
        }
    );
    assert!(!verdict.all_met());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 + 4 + 1, "{text}");
    assert_eq!(
        lines[0],
        "# all_reduce: nccl-tests and nccl-perf, time in us; ratio = nccl-perf / nccl-tests; \
         target: within 3 % from 1048576 B"
    );
    assert_eq!(
        lines[1],
        "#       size     oop_tests      oop_perf   ratio  meets      ip_tests       ip_perf   ratio  meets"
    );
    assert_eq!(
        lines[2],
        "        1024          6.00          5.00   0.833      -          0.40          0.20   0.500      -"
    );
    assert_eq!(
        lines[3],
        "     1048576         10.00         10.20   1.020    yes          0.40          0.20   0.500     NO"
    );
    assert!(
        lines[4].ends_with("         N/A          0.20     N/A    N/A"),
        "{text}"
    );
    assert_eq!(
        lines[6],
        "# all_reduce: 2 of 5 halves from 1048576 B within 3 %, 1 without both times"
    );
    // Every data line has the fields of the header line (but its '#').
    let fields = |line: &str| line.split_whitespace().count();
    assert!(
        lines[2..6]
            .iter()
            .all(|line| fields(line) == fields(lines[1]) - 1),
        "{text}"
    );
    // Out of place only: the in-place halves print but are not judged.
    let out_of_place = Judgement {
        in_place: false,
        ..judgement
    };
    let (text, verdict) = render(&rows, &out_of_place);
    assert_eq!(
        verdict,
        Verdict {
            judged: 3,
            met: 1,
            missing: 0
        },
        "{text}"
    );
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("from 1048576 B, out of place")
    );
    assert!(
        text.lines()
            .nth(3)
            .unwrap()
            .ends_with("1.020    yes          0.40          0.20   0.500      -"),
        "{text}"
    );
}

/// Writes `document` as `dir/name`.
fn write(dir: &Path, name: &str, document: &Value) {
    std::fs::write(dir.join(name), document.to_string()).unwrap();
}

fn args(dir: &Path, target_percent: f64) -> Args {
    Args {
        out_dirs: vec![dir.to_path_buf()],
        target_percent,
        from: 1 << 20,
        out_of_place_only: false,
    }
}

/// The table and verdict of `operation` in `dir`, as `run` prints it.
fn compare_operation(dir: &Path, operation: &str, args: &Args) -> (String, Verdict) {
    render(
        &paired_rows(dir, operation).unwrap(),
        &judgement(operation, args),
    )
}

#[test]
fn a_folder_of_both_documents_per_operation() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = [8u64, 1 << 20, 32 << 20];
    // nccl-perf 2 % slower out of place from 1 MiB on, as fast in place.
    let tests: Vec<Value> = sizes
        .iter()
        .map(|&size| result(size, Some(10.0), Some(5.0)))
        .collect();
    let perf: Vec<Value> = sizes
        .iter()
        .map(|&size| {
            result(
                size,
                Some(if size >= 1 << 20 { 10.2 } else { 1.0 }),
                Some(5.0),
            )
        })
        .collect();
    write(
        dir.path(),
        "all_reduce.nccl-tests.json",
        &nccl_tests("/b/all_reduce_perf", tests.clone()),
    );
    write(
        dir.path(),
        "all_reduce.nccl-perf.json",
        &nccl_perf("all_reduce", perf.clone()),
    );
    write(
        dir.path(),
        "alltoall.nccl-tests.json",
        &nccl_tests("/b/alltoall_perf", tests),
    );
    write(
        dir.path(),
        "alltoall.nccl-perf.json",
        &nccl_perf("all_to_all", perf),
    );
    std::fs::write(dir.path().join("all_reduce.nccl-tests.txt"), "a log").unwrap();
    assert_eq!(operations(dir.path()).unwrap(), ["all_reduce", "alltoall"]);
    let (text, verdict) = compare_operation(dir.path(), "alltoall", &args(dir.path(), 3.0));
    assert_eq!(
        verdict,
        Verdict {
            judged: 4,
            met: 4,
            missing: 0
        },
        "{text}"
    );
    assert!(
        text.contains("    33554432         10.00         10.20   1.020    yes          5.00          5.00   1.000    yes"),
        "{text}"
    );
    assert!(run(args(dir.path(), 3.0)).is_ok());
    // A 1 % target: the 2 % halves miss it in both operations.
    let missed = run(args(dir.path(), 1.0)).unwrap_err().to_string();
    assert_eq!(
        missed,
        "target 1 % from 1048576 B: missed by all_reduce, alltoall"
    );
    assert!(run(args(dir.path(), -1.0)).is_err());
}

#[test]
fn what_cannot_be_compared_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let none = run(args(dir.path(), 3.0)).unwrap_err().to_string();
    assert!(none.contains("holds no OP.nccl-tests.json"), "{none}");
    // nccl-perf's document missing, then cut short (a run that stopped).
    write(
        dir.path(),
        "reduce.nccl-tests.json",
        &nccl_tests("reduce_perf", vec![result(8, Some(1.0), Some(1.0))]),
    );
    let missing = run(args(dir.path(), 3.0)).unwrap_err().to_string();
    assert!(
        missing.starts_with("cannot read ") && missing.contains("reduce.nccl-perf.json"),
        "{missing}"
    );
    std::fs::write(dir.path().join("reduce.nccl-perf.json"), "{\"results\":[").unwrap();
    let cut = run(args(dir.path(), 3.0)).unwrap_err().to_string();
    assert!(cut.contains("is not a whole JSON document"), "{cut}");
    // A row nccl-perf lacks is judged as missing.
    write(
        dir.path(),
        "reduce.nccl-perf.json",
        &nccl_perf("reduce", vec![]),
    );
    let (_, verdict) = compare_operation(dir.path(), "reduce", &args(dir.path(), 3.0));
    assert_eq!(verdict.missing, 0, "8 B is below --from");
    let lacking = Args {
        from: 0,
        ..args(dir.path(), 3.0)
    };
    let (_, verdict) = compare_operation(dir.path(), "reduce", &lacking);
    assert_eq!(verdict.missing, 2);
}

#[test]
fn repeated_runs_show_each_programs_spread() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // nccl-tests reads 10, 13, 10 us at 1 MiB from run to run, nccl-perf
    // 10, 10, 12: neither within 3 % of itself; at 2 MiB both steady.
    let two_sizes = |one_mib: f64, two_mib: f64| {
        vec![
            result(1 << 20, Some(one_mib), None),
            result(2 << 20, Some(two_mib), None),
        ]
    };
    for (dir, (tests, perf)) in dirs.iter().zip([(10.0, 10.0), (13.0, 10.0), (10.0, 12.0)]) {
        let tests = nccl_tests("all_reduce_perf", two_sizes(tests, 20.0));
        write(dir.path(), "all_reduce.nccl-tests.json", &tests);
        let perf = nccl_perf("all_reduce", two_sizes(perf, 20.2));
        write(dir.path(), "all_reduce.nccl-perf.json", &perf);
    }
    let runs: Vec<_> = dirs
        .iter()
        .map(|dir| paired_rows(dir.path(), "all_reduce").unwrap())
        .collect();
    let text = render_spread("all_reduce", &runs).unwrap();
    assert!(text.starts_with("# all_reduce over 3 runs"), "{text}");
    assert!(
        text.contains(
            "     1048576       30.0%       20.0%         1.000         N/A         N/A           N/A"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "     2097152        0.0%        0.0%         1.010         N/A         N/A           N/A"
        ),
        "{text}"
    );
    // The second run misses the target at 1 MiB, and the error says which.
    let all = Args {
        out_dirs: dirs.iter().map(|dir| dir.path().to_path_buf()).collect(),
        ..args(dirs[0].path(), 3.0)
    };
    let missed = run(all).unwrap_err().to_string();
    let second = dirs[1].path().display().to_string();
    assert!(
        missed.contains(&format!("all_reduce in {second}")),
        "{missed}"
    );
    // Runs of different sizes are refused, naming both.
    let short = vec![runs[0][..1].to_vec(), runs[1].clone()];
    let refused = render_spread("all_reduce", &short).unwrap_err().to_string();
    assert!(
        refused.contains("run 2 has the sizes [1048576, 2097152] but run 1 has [1048576]"),
        "{refused}"
    );
}
