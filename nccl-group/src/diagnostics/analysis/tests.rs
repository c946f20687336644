use crate::diagnostics::clock;
use std::time::{Duration, Instant};

use nccl_core::DataType;

use super::*;
use crate::devices::DeviceList;
use crate::diagnostics::recorder::FlightRecorder;
use crate::diagnostics::recorder::records::{FlightDump, OpDescription, OpState, PeerProgress};

/// A dump of `recorder`'s records by rank 0 of 1, on request.
fn dump_of(recorder: &FlightRecorder) -> FlightDump {
    recorder.test_dump("g", 0, 1, "on request")
}

/// An all_reduce (sum) of one float on device 0.
fn one_float_sum() -> OpDescription {
    OpDescription {
        op: "all_reduce",
        dtype: Some(DataType::Float32),
        count: 1,
        output_count: 1,
        reduction: Some("sum"),
        peer: None,
        timeout: Duration::from_secs(1),
        devices: DeviceList::one(0).unwrap(),
        collective: true,
    }
}

/// What the recorder writes is what the analysis reads: a dump's JSON
/// gives the same collectives as its records.
#[test]
fn the_analysis_reads_the_recorders_json() {
    let recorder = FlightRecorder::new(8);
    let now = Instant::now();
    let description = |op, collective, peer, reduction| OpDescription {
        op,
        dtype: Some(DataType::Bfloat16),
        count: 1024,
        output_count: 1024,
        reduction,
        peer,
        timeout: Duration::from_secs(5),
        devices: DeviceList::one(0).unwrap(),
        collective,
    };
    recorder.record(
        &description("all_reduce", true, None, Some("sum")),
        clock::nanos(now),
    );
    recorder.record(
        &description("send", false, Some(1), None),
        clock::nanos(now),
    );
    recorder.record(
        &description("broadcast", true, Some(2), None),
        clock::nanos(now),
    );
    let dump = FlightDump {
        group: "trainer".into(),
        generation: 3,
        world_size: 4,
        last_enqueued: Some(1),
        ..dump_of(&recorder)
    };
    let read = FlightDump::from_json(&dump.to_json()).unwrap();
    assert_eq!(read, dump, "a dump reads back as it was written");
    let from_records: Vec<Issued> = dump.ops.iter().filter_map(Issued::from_record).collect();
    assert_eq!(read.collectives(), from_records);
    assert_eq!(from_records.len(), 2, "the send is no collective");
    assert_eq!(
        from_records[0].to_string(),
        "all_reduce(bfloat16 x 1024, sum)"
    );
    assert_eq!(
        from_records[1].to_string(),
        "broadcast(bfloat16 x 1024, root 2)"
    );
    assert_eq!(read.ops[1].state, OpState::Pending);
}

/// Every field a dump has reads back, the lists and the maps too: the
/// progress the ranks exchanged, the lagging ranks, the divergence, RAS's
/// view and the thread names.
#[test]
fn a_dump_with_every_field_set_reads_back_equal() {
    let recorder = FlightRecorder::new(4);
    let now = Instant::now();
    let description = OpDescription {
        op: "my_custom_op",
        dtype: None,
        count: 0,
        output_count: 0,
        reduction: None,
        peer: None,
        timeout: Duration::from_millis(1500),
        devices: DeviceList::checked([1, 0].into_iter()).unwrap(),
        collective: true,
    };
    let seq = recorder.record(&description, clock::nanos(now)).seq;
    // A GPU time of no whole number of microseconds reads back to the
    // nanosecond.
    let gpu_time = Duration::from_nanos(1_234_567);
    recorder.finish(seq, OpState::Suspect, now, 0, Some(gpu_time));
    let issued = recorder
        .get(seq)
        .as_ref()
        .and_then(Issued::from_record)
        .unwrap();
    let dump = FlightDump {
        group: "trainer".into(),
        generation: 1,
        rank: 1,
        world_size: 2,
        reason: "process group failed".into(),
        dumped_us: 42,
        pid: 4242,
        nccl_version: Some("2.28.3".into()),
        last_enqueued: Some(0),
        peers: vec![PeerProgress {
            rank: 0,
            last_enqueued: Some(0),
            last_completed: Some(0),
        }],
        lagging: vec![0],
        divergence: Some(Divergence {
            collective_seq: 0,
            expected: issued,
            expected_ranks: vec![1],
            others: vec![Deviation {
                rank: 0,
                issued: None,
                last_collective: None,
            }],
        }),
        ras: Some(crate::diagnostics::ras::RasReport::unavailable("not asked")),
        threads: [(7, "trainer".to_string())].into(),
        ..dump_of(&recorder)
    };
    let json = dump.to_json();
    assert!(json.contains("\"gpu_duration_us\": 1234.567"), "{json}");
    let read = FlightDump::from_json(&json).unwrap();
    assert_eq!(read.ops[0].gpu_duration, Some(gpu_time));
    assert_eq!(read, dump, "{json}");
}

/// A GPU time that is no duration is refused, naming the field.
#[test]
fn a_negative_gpu_time_is_an_error_naming_the_field() {
    let recorder = FlightRecorder::new(1);
    let now = Instant::now();
    let description = one_float_sum();
    recorder.record(&description, clock::nanos(now));
    recorder.finish(
        0,
        OpState::Completed,
        now,
        1,
        Some(Duration::from_micros(3)),
    );
    let json = dump_of(&recorder).to_json();
    assert!(json.contains("\"gpu_duration_us\": 3.0"), "{json}");
    let negative = json.replace("\"gpu_duration_us\": 3.0", "\"gpu_duration_us\": -3.0");
    let error = FlightDump::from_json(&negative).unwrap_err().to_string();
    assert!(
        error.contains("gpu_duration_us: expected a non-negative number of microseconds, given -3"),
        "{error}"
    );
}

/// A dump cut short, or one with a state no operation has, is an error
/// that says what is wrong, not a panic.
#[test]
fn a_corrupt_dump_is_an_error_naming_what_is_wrong() {
    let cut = FlightDump::from_json("{\"group\": \"trainer\", \"generation\"").unwrap_err();
    assert!(cut.is_eof(), "{cut}");
    let recorder = FlightRecorder::new(1);
    let description = one_float_sum();
    recorder.record(&description, clock::now());
    let mut json: serde_json::Value = serde_json::from_str(&dump_of(&recorder).to_json()).unwrap();
    json["ops"][0]["state"] = "exploded".into();
    let error = FlightDump::from_json(&json.to_string()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("unknown variant `exploded`, expected one of"),
        "{error}"
    );
}

#[test]
fn ranks_print_as_runs() {
    assert_eq!(Ranks(&[3]).to_string(), "rank 3");
    assert_eq!(Ranks(&[2, 0, 1]).to_string(), "ranks 0-2");
    assert_eq!(Ranks(&[0, 1, 2, 5, 7, 8]).to_string(), "ranks 0-2, 5, 7-8");
}
