use crate::diagnostics::clock;
use std::time::{Duration, Instant};

use nccl_core::DataType;

use super::*;
use crate::devices::DeviceList;
use crate::diagnostics::recorder::FlightRecorder;
use crate::diagnostics::recorder::records::{OpDescription, OpState};

fn description(op: &'static str, collective: bool) -> OpDescription {
    OpDescription {
        op,
        dtype: Some(DataType::Float32),
        count: 1024,
        output_count: 1024,
        reduction: None,
        peer: None,
        timeout: Duration::from_secs(5),
        devices: DeviceList::one(0).unwrap(),
        collective,
    }
}

/// Rank `rank` of 4 of group `trainer`, after an all_reduce (completed,
/// 1.5 ms on the GPU),
/// a send to rank 1, an all_gather, a barrier and a custom operation
/// (pending, then failed).
fn dump(rank: usize) -> FlightDump {
    let recorder = FlightRecorder::new(16);
    let now = Instant::now();
    let reduce = OpDescription {
        reduction: Some("sum"),
        ..description("all_reduce", true)
    };
    recorder.record(&reduce, clock::nanos(now));
    recorder.finish(
        0,
        OpState::Completed,
        now,
        1,
        Some(Duration::from_micros(1500)),
    );
    let send = OpDescription {
        peer: Some(1),
        ..description("send", false)
    };
    recorder.record(&send, clock::nanos(now));
    let gather = OpDescription {
        output_count: 4096,
        ..description("all_gather", true)
    };
    recorder.record(&gather, clock::nanos(now));
    let barrier = OpDescription {
        dtype: None,
        count: 0,
        output_count: 0,
        ..description("barrier", true)
    };
    recorder.record(&barrier, clock::nanos(now));
    recorder.record(&description("my_custom_op", true), clock::nanos(now));
    recorder.fail_pending(now);
    FlightDump {
        dumped_us: recorder.micros(now),
        pid: std::process::id(),
        nccl_version: Some("2.28.3".into()),
        last_enqueued: Some(3),
        last_completed: Some(0),
        ..recorder.test_dump("trainer", rank, 4, "on request")
    }
}

#[test]
fn incident_names_cannot_escape_their_folder() {
    assert_eq!(incident_name("trainer", 0, "failure"), "trainer-g0-failure");
    assert_eq!(
        incident_name("../../etc/passwd", 2, "../x y"),
        "______etc_passwd-g2-___x_y"
    );
    assert_eq!(incident_name("a b/c", 1, "  "), "a_b_c-g1-request");
    let long = incident_name(&"g".repeat(500), 7, &"l".repeat(500));
    assert!(long.len() < 200, "{}", long.len());
}

#[test]
fn each_incident_has_a_folder_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_incident(dir.path(), "failure", &dump(2)).unwrap();
    assert_eq!(first.folder, dir.path().join("trainer-g0-failure"));
    assert_eq!(first.json, first.folder.join("rank2.json"));
    assert_eq!(first.done, first.folder.join("rank2.done"));
    // Another rank of the same incident joins the folder.
    let other = write_incident(dir.path(), "failure", &dump(0)).unwrap();
    assert_eq!(other.folder, first.folder);
    // The same incident name again (a second job with the same group
    // name, or a label used twice) takes the next folder.
    let mut second_dump = dump(2);
    second_dump.reason = "the second incident".into();
    let second = write_incident(dir.path(), "failure", &second_dump).unwrap();
    assert_eq!(second.folder, dir.path().join("trainer-g0-failure.1"));
    let first_json = std::fs::read_to_string(&first.json).unwrap();
    let second_json = std::fs::read_to_string(&second.json).unwrap();
    assert!(first_json.contains("\"on request\""), "{first_json}");
    assert!(second_json.contains("the second incident"), "{second_json}");
    // The marker lists the dump's files; no temporary file is left.
    let listing = std::fs::read_to_string(&first.done).unwrap();
    let mut expected = "rank2.json\n".to_string();
    if let Some(torch) = &first.torch {
        assert_eq!(torch, &first.folder.join("nccl_trace_rank_2"));
        expected.push_str("nccl_trace_rank_2\n");
    }
    assert_eq!(listing, expected);
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["trainer-g0-failure", "trainer-g0-failure.1"]);
}

#[test]
fn a_dump_that_cannot_be_written_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, "").unwrap();
    let error = write_incident(&file, "failure", &dump(0)).unwrap_err();
    assert!(matches!(error, DumpError::Io { .. }), "{error:?}");
    assert!(error.to_string().contains("not-a-folder"), "{error}");
}

/// The pickle loads in plain Python (no torch) with every key and type
/// PyTorch's writer gives (`FlightRecorderDetail.hpp`), and the values
/// torchfrtrace reads.
#[cfg(feature = "torch-dumps")]
#[test]
fn the_torch_dump_loads_in_python_with_torchs_keys() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIP: python3 is not installed; the pickle was not loaded");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let files = write_incident(dir.path(), "failure", &dump(2)).unwrap();
    let torch = files.torch.expect("the feature is on");
    let script = r#"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
assert set(d) == {"version", "comm_lib_version", "pg_config", "pg_status", "nccl_comm_state", "entries"}, set(d)
assert d["version"] == "2.10" and d["comm_lib_version"] == "2.28.3", d
assert d["pg_config"] == {"trainer": {"name": "trainer", "desc": "g0", "ranks": "[0, 1, 2, 3]"}}, d["pg_config"]
assert d["pg_status"] == {"0": {"last_enqueued_collective": 3, "last_started_collective": -1, "last_completed_collective": 0}}, d["pg_status"]
assert d["nccl_comm_state"] == {}
keys = {"record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
        "time_created_ns", "timeout_ms", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state",
        "time_discovered_started_ns", "time_discovered_completed_ns", "retired", "is_p2p", "frames", "thread_id",
        "thread_name"}
e = d["entries"]
assert [x["profiling_name"] for x in e] == ["nccl:all_reduce", "nccl:send 2->1", "nccl:all_gather",
    "nccl:all_reduce_barrier", "nccl:coalesced my_custom_op"], e
for x in e:
    assert set(x) - {"duration_ms"} == keys, set(x) ^ keys
    assert isinstance(x["process_group"], tuple) and x["process_group"] == ("trainer", "g0")
    assert type(x["time_created_ns"]) is int and x["time_created_ns"] > 1_600_000_000 * 10**9
    assert x["timeout_ms"] == 5000 and x["frames"] == [] and x["time_discovered_started_ns"] is None
    assert isinstance(x["thread_id"], str) and isinstance(x["thread_name"], str)
assert [x["record_id"] for x in e] == [0, 1, 2, 3, 4] and [x["op_id"] for x in e] == [0, 1, 2, 3, 4]
assert [x["collective_seq_id"] for x in e] == [0, 0, 1, 2, 3], e
assert [x["p2p_seq_id"] for x in e] == [-1, 0, 0, 0, 0], e
assert [x["is_p2p"] for x in e] == [False, True, False, False, False]
assert [x["state"] for x in e] == ["completed"] + ["scheduled"] * 4
assert [x["retired"] for x in e] == [True] * 5
assert type(e[0]["time_discovered_completed_ns"]) is int and e[1]["time_discovered_completed_ns"] is None
assert e[0]["input_sizes"] == [[1024]] and e[0]["input_dtypes"] == ["Float"] and e[0]["output_dtypes"] == ["Float"]
assert e[2]["output_sizes"] == [[4096]]
assert e[3]["input_sizes"] == [[0]] and e[3]["input_dtypes"] == []
assert e[0]["thread_name"] != "", e[0]
assert type(e[0]["duration_ms"]) is float and e[0]["duration_ms"] == 1.5, e[0]
assert list(e[0]).index("duration_ms") == list(e[0]).index("time_created_ns") + 1, list(e[0])
assert all("duration_ms" not in x for x in e[1:]), e
print("ok")
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&torch)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), "ok", "{stderr}");
}

/// A timed record's GPU time is PyTorch's `duration_ms` (a float, in
/// milliseconds); an untimed one has no `duration_ms`, as PyTorch leaves it
/// out without timing.
#[cfg(feature = "torch-dumps")]
#[test]
fn the_torch_dump_has_duration_ms_for_timed_records_only() {
    use serde_pickle::{HashableValue, Value};

    let pickled = torch::encode(&dump(0)).unwrap();
    let Value::Dict(dump) = serde_pickle::value_from_slice(&pickled, Default::default()).unwrap()
    else {
        panic!("the dump is not a dictionary");
    };
    let Some(Value::List(entries)) = dump.get(&HashableValue::String("entries".into())) else {
        panic!("no entries in {dump:?}");
    };
    let durations: Vec<Option<&Value>> = entries
        .iter()
        .map(|entry| match entry {
            Value::Dict(entry) => entry.get(&HashableValue::String("duration_ms".into())),
            other => panic!("an entry that is not a dictionary: {other:?}"),
        })
        .collect();
    assert_eq!(durations[0], Some(&Value::F64(1.5)));
    assert!(durations[1..].iter().all(Option::is_none), "{durations:?}");
}

/// The thread names of a dump are those of the threads in its records.
#[test]
fn threads_are_named_as_the_system_names_them() {
    let dump = dump(0);
    assert_eq!(dump.threads.len(), 1, "{:?}", dump.threads);
    let (&thread, name) = dump.threads.iter().next().unwrap();
    assert!(dump.ops.iter().all(|op| op.thread == thread));
    assert!(!name.is_empty());
}
