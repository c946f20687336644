use std::time::{Duration, Instant};

use nccl_core::DataType;

use super::*;
use crate::devices::DeviceList;
use crate::diagnostics::recorder::FlightRecorder;
use crate::diagnostics::recorder::records::{FlightDump, OpDescription};

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
    recorder.record(&description("all_reduce", true, None, Some("sum")), now);
    recorder.record(&description("send", false, Some(1), None), now);
    recorder.record(&description("broadcast", true, Some(2), None), now);
    let (ops, total_recorded) = recorder.snapshot();
    let dump = FlightDump {
        group: "trainer".into(),
        generation: 3,
        rank: 0,
        world_size: 4,
        reason: "on request".into(),
        epoch_unix_us: recorder.epoch_unix_us(),
        dumped_us: 0,
        pid: 1,
        nccl_version: None,
        last_enqueued: Some(1),
        last_completed: None,
        peers: Vec::new(),
        lagging: Vec::new(),
        divergence: None,
        ras: None,
        total_recorded,
        threads: Default::default(),
        ops,
    };
    let read: RankDump = serde_json::from_str(&dump.to_json()).unwrap();
    assert_eq!((read.group.as_str(), read.generation), ("trainer", 3));
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
    assert_eq!(read.ops[1].state, "pending");
}

#[test]
fn ranks_print_as_runs() {
    assert_eq!(Ranks(&[3]).to_string(), "rank 3");
    assert_eq!(Ranks(&[2, 0, 1]).to_string(), "ranks 0-2");
    assert_eq!(Ranks(&[0, 1, 2, 5, 7, 8]).to_string(), "ranks 0-2, 5, 7-8");
}
