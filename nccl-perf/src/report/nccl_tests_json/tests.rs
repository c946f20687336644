//! The `-J` document's shape, values and files.

use std::process::Command;

use serde_json::{Value, json};

use super::super::tests::{eight_byte_sum, m, row, sample_row};
use super::*;
use crate::per_iter::tests::PER_ITER_KEYS;

fn head() -> JsonHead {
    JsonHead {
        args: vec!["nccl-perf".into(), "-J".into(), "a \"b\".json".into()],
        env: vec!["PATH=/usr/bin".into()],
        nccl_version: 22803,
        nthreads: 1,
        ngpus: 1,
        minimum_bytes: 8,
        maximum_bytes: 128 << 20,
        step: Step::Factor(2),
        warmup_iters: 5,
        iterations: 20,
        aggregated_iterations: 1,
        validation: 1,
        graph: 0,
        blocking: false,
        parallel_init: true,
        cpu_time: false,
        per_iter_timing: false,
        per_iter_skip: 0,
        devices: vec![JsonDevice {
            rank: 0,
            pid: 42,
            hostname: "vm".into(),
            device: 0,
            device_hex: "0000:00:06".into(),
            device_info: "NVIDIA H200".into(),
        }],
    }
}

/// The keys of `value`'s object, in the order the text has them.
fn keys(text: &str) -> Vec<String> {
    let value: serde_json::Map<String, Value> = serde_json::from_str(text).unwrap();
    let mut keys: Vec<(usize, String)> = value
        .keys()
        .map(|key| (text.find(&format!("\"{key}\":")).unwrap(), key.clone()))
        .collect();
    keys.sort();
    keys.into_iter().map(|(_, key)| key).collect()
}

#[test]
fn the_document_has_nccl_tests_schema() {
    let r = sample_row();
    let gather = Row {
        collective: "all_gather",
        in_place: None,
        ..r.clone()
    };
    let text = head_text(&head(), "2026-12-03 10:00:00")
        + &result_text(&r, "time", 20)
        + ","
        + &result_text(&gather, "time", 20)
        + &tail_text(0, 8.0, &[], "2026-12-03 10:00:05");
    assert_eq!(
        keys(&text),
        [
            "version",
            "start_time",
            "args",
            "env",
            "nccl_version",
            "config",
            "results",
            "out_of_bounds",
            "average_bus_bandwidth",
            "errors",
            "end_time"
        ]
    );
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["version"], 3);
    assert_eq!(value["args"][2], "a \"b\".json");
    assert_eq!(value["nccl_version"], 22803);
    let config = &value["config"];
    assert_eq!(config["step_factor"], 2);
    assert!(config.get("step_bytes").is_none());
    assert_eq!(config["blocking_collectives"], "false");
    assert_eq!(config["parallel_init"], "true");
    assert_eq!(
        config["devices"][0],
        json!({"rank": 0, "group": 0, "pid": 42, "hostname": "vm", "device": 0,
               "device_hex": "0000:00:06", "device_info": "NVIDIA H200"})
    );
    let results = value["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(
        results[0],
        json!({"size": 8, "count": 2, "type": "float", "redop": "sum", "root": "    -1",
               "out_of_place": {"time": 6.5, "alg_bw": 0.5, "bus_bw": 0.0, "nwrong": 0.0},
               "in_place": {"time": 0.25, "alg_bw": 32.0, "bus_bw": 0.0, "nwrong": null},
               "actual_iterations": 20, "experiment_name": "", "collective": "all_reduce"})
    );
    assert_eq!(results[1]["in_place"], Value::Null);
    assert_eq!(results[1]["collective"], "all_gather");
    assert_eq!(value["out_of_bounds"], json!({"count": 0, "okay": "true"}));
    assert_eq!(
        value["average_bus_bandwidth"],
        json!({"bandwidth": 8.0, "okay": "unchecked"})
    );
    assert_eq!(value["errors"], json!([]));
    // nccl-tests' number forms, byte for byte.
    for form in [
        "\"time\":6.500000,\"alg_bw\":0.500000",
        "\"nwrong\":0.000000}",
    ] {
        assert!(text.contains(form), "{form} is not in {text}");
    }
}

#[test]
fn cpu_time_bytes_steps_and_nan() {
    let head = JsonHead {
        step: Step::Bytes(1 << 20),
        blocking: true,
        cpu_time: true,
        ..head()
    };
    let text = head_text(&head, "t")
        + &result_text(
            &row(
                8,
                2,
                "max",
                3,
                m(f64::NAN, 1.0, 1.0, Some(2)),
                m(1.0, 1.0, 1.0, Some(0)),
            ),
            "cpu_time",
            50,
        )
        + &tail_text(2, 1.0, &["boom".to_string()], "t");
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["config"]["step_bytes"], 1 << 20);
    assert_eq!(value["config"]["blocking_collectives"], "true");
    let result = &value["results"][0];
    assert_eq!(result["out_of_place"]["cpu_time"], "nan");
    assert_eq!(double(f64::INFINITY), "\"inf\"");
    assert_eq!(double(-f64::INFINITY), "\"-inf\"");
    assert_eq!(double(2.5), "2.500000");
    assert_eq!(result["in_place"]["cpu_time"], 1.0);
    assert_eq!(result["root"], "     3");
    assert_eq!(result["actual_iterations"], 50);
    assert_eq!(value["out_of_bounds"], json!({"count": 2, "okay": "false"}));
    assert_eq!(value["errors"], json!(["boom"]));
}

#[test]
fn files_are_never_replaced_and_always_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    std::fs::write(&path, "kept").unwrap();
    let first = {
        let mut document = JsonDocument::create(&path, &head()).unwrap();
        let r = eight_byte_sum(m(1.0, 1.0, 0.0, Some(1)), m(1.0, 1.0, 2.0, Some(0)));
        document.result(&r).unwrap();
        document.result(&r).unwrap();
        document.finish(&[]).unwrap();
        document.path().to_path_buf()
    };
    assert_eq!(first, dir.path().join("out.json.0"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept");
    let value: Value = serde_json::from_str(&std::fs::read_to_string(&first).unwrap()).unwrap();
    assert_eq!(value["results"].as_array().unwrap().len(), 2);
    assert_eq!(value["out_of_bounds"]["count"], 2);
    assert_eq!(value["average_bus_bandwidth"]["bandwidth"], 1.0);
    // A run that stops early still leaves valid JSON, with its error.
    let second = JsonDocument::create(&path, &head()).unwrap();
    let second_path = second.path().to_path_buf();
    drop(second);
    assert_eq!(second_path, dir.path().join("out.json.1"));
    let value: Value =
        serde_json::from_str(&std::fs::read_to_string(&second_path).unwrap()).unwrap();
    assert_eq!(value["results"], json!([]));
    assert_eq!(
        value["errors"][0],
        "nccl-perf stopped before the end of the run"
    );
    // A directory that does not exist is an error, not a panic.
    assert!(JsonDocument::create(&dir.path().join("no/such/out.json"), &head()).is_err());
}

/// Two processes of two ranks, `iters` iterations of 10 µs but iteration
/// 4 of rank 3 (process 1), 30 µs: its per-iteration report, `-K 1`.
fn straggler(iters: usize) -> PerIter {
    let ranks: Vec<Vec<f64>> = (0..4)
        .map(|rank| {
            (0..iters)
                .map(|i| {
                    if rank == 3 && i == 4 {
                        30.0
                    } else {
                        10.0 + rank as f64 * 0.1
                    }
                })
                .collect()
        })
        .collect();
    let given: Vec<Option<&[f64]>> = ranks.iter().map(|times| Some(times.as_slice())).collect();
    PerIter::of_ranks(&given, 2, iters, 1).unwrap()
}

/// A float sum row of `size` bytes timed per iteration in both modes, with
/// [`straggler`]'s 10 iterations.
fn straggler_row(size: u64) -> Row {
    let mut r = row(
        size,
        size as usize / 4,
        "sum",
        -1,
        m(12.0, 0.5, 0.0, Some(0)),
        m(11.0, 0.5, 0.0, Some(0)),
    );
    r.out_of_place_per_iter = Some(straggler(10));
    r.in_place_per_iter = Some(straggler(10));
    r
}

#[test]
fn per_iteration_reports_follow_their_modes() {
    let mut r = straggler_row(1024);
    let head = JsonHead {
        per_iter_timing: true,
        per_iter_skip: 1,
        ..head()
    };
    let result = result_text(&r, "time", 10);
    let text = head_text(&head, "t") + &result + &tail_text(0, 0.0, &[], "t");
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["config"]["per_iter_timing"], "true");
    assert_eq!(value["config"]["per_iter_skip"], 1);
    assert_eq!(
        keys(&result),
        [
            "size",
            "count",
            "type",
            "redop",
            "root",
            "out_of_place",
            "out_of_place_per_iter",
            "in_place",
            "in_place_per_iter",
            "actual_iterations",
            "experiment_name",
            "collective"
        ]
    );
    let report = &value["results"][0]["out_of_place_per_iter"];
    let object = per_iter_text("key", r.out_of_place_per_iter.as_ref());
    assert_eq!(
        keys(object.trim_start_matches(",\"key\":")),
        [&PER_ITER_KEYS[..], &["per_process_max_times_us"]].concat()
    );
    assert_eq!(report["skipped_iterations"], 1);
    assert_eq!(report["max_us"], 30.0);
    assert_eq!(report["times_us"].as_array().unwrap().len(), 10);
    assert_eq!(report["per_process_max_times_us"][1][4], 30.0);
    // Parsed back, the report is the one written (to %lf's six decimals).
    let back: PerIter = serde_json::from_value(report.clone()).unwrap();
    let written = straggler(10);
    assert_eq!(back.times_us, written.times_us);
    assert!((back.stats.cv_pct - written.stats.cv_pct).abs() < 1e-6);
    assert!(text.contains(",\"p99_us\":30.000000,"), "{text}");
    // Without a report, the mode is alone, as without -I.
    r.in_place_per_iter = None;
    assert!(!result_text(&r, "time", 10).contains("in_place_per_iter"));
}

#[test]
fn nccl_tests_analyze_perf_json_reads_the_document() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nccl-tests/analyze_perf_json.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    if !script.exists() || Command::new(&python).arg("--version").output().is_err() {
        println!("SKIP: needs {python} and {}", script.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per-iter.json");
    let head = JsonHead {
        per_iter_timing: true,
        per_iter_skip: 1,
        iterations: 10,
        // One device per process, as nccl-tests lists them.
        devices: [0, 2]
            .into_iter()
            .map(|rank| JsonDevice {
                rank,
                hostname: format!("node{}", rank / 2),
                ..head().devices[0].clone()
            })
            .collect(),
        ..head()
    };
    let mut document = JsonDocument::create(&path, &head).unwrap();
    for size in [8, 1024] {
        document.result(&straggler_row(size)).unwrap();
    }
    document.finish(&[]).unwrap();
    for placement in [&[][..], &["--in-place"]] {
        let output = Command::new(&python)
            .arg(&script)
            .arg(&path)
            .arg("--all")
            .args(placement)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{placement:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let label = if placement.is_empty() { "OOP" } else { "IP" };
        for says in [
            "Results:    2".to_string(),
            "Summary skip: 1 leading iterations".to_string(),
            "Process rows: 2".to_string(),
            format!("Consistency (times_us == max over process rows, {label}): PASS"),
            format!("PER-ITERATION STATS ({label})"),
            "iter  4:  1/2 processes spiked  max=30.0  [STRAGGLER: process 1]".to_string(),
            "ITERATION 0 WARMUP IMPACT".to_string(),
            "PER-NODE ANALYSIS (2 nodes".to_string(),
        ] {
            assert!(
                stdout.contains(&says),
                "{placement:?}: {says:?} not in\n{stdout}"
            );
        }
    }
}

#[test]
fn devices_are_listed_one_per_process_as_nccl_tests_lists_them() {
    use clap::Parser;

    use crate::cli::Args;
    use crate::report::DeviceInfo;
    use crate::runner::Layout;

    let args = Args::try_parse_from(["nccl-perf", "-I", "1", "-K", "3"]).unwrap();
    // One process of two ranks: its first GPU only.
    let plan = Plan::new(&args, &Layout::single_process(2)).unwrap();
    let machine = Machine {
        nccl_version: nccl_sys::Version::new(2, 28, 3),
        nccl_path: "libnccl.so.2".to_string(),
        native_all_to_all: true,
        devices: (0..2)
            .map(|rank| DeviceInfo {
                rank,
                ordinal: rank,
                name: "NVIDIA H200".to_string(),
                pci: "0000:00:06".to_string(),
                host: "vm".to_string(),
                pid: 7,
            })
            .collect(),
    };
    let head = JsonHead::new(&plan, &machine);
    assert_eq!(head.devices.len(), 1);
    assert_eq!(head.devices[0].rank, 0);
    assert_eq!((head.per_iter_timing, head.per_iter_skip), (true, 3));
}
