use crate::diagnostics::clock;
use std::time::Duration;

use nccl_core::DataType;

use super::*;
use crate::devices::DeviceList;

fn description(op: &'static str, collective: bool) -> OpDescription {
    OpDescription {
        op,
        dtype: Some(DataType::Float32),
        count: 4,
        output_count: 4,
        reduction: None,
        peer: None,
        timeout: Duration::from_secs(5),
        devices: DeviceList::one(0).unwrap(),
        collective,
    }
}

/// A recorder of `capacity` records after `count` all_reduces at `now`.
fn all_reduces(capacity: usize, count: usize, now: Instant) -> FlightRecorder {
    let recorder = FlightRecorder::new(capacity);
    for _ in 0..count {
        recorder.record(&description("all_reduce", true), clock::nanos(now));
    }
    recorder
}

#[test]
fn sequence_numbers_count_collectives_apart_from_point_to_point() {
    let recorder = FlightRecorder::new(8);
    let now = Instant::now();
    let numbers = [
        recorder.record(&description("all_reduce", true), clock::nanos(now)),
        recorder.record(&description("send", false), clock::nanos(now)),
        recorder.record(&description("broadcast", true), clock::nanos(now)),
    ];
    let seqs = numbers.map(|numbers| numbers.seq);
    assert_eq!(seqs, [0, 1, 2]);
    let collectives = numbers.map(|numbers| numbers.collective);
    assert_eq!(collectives, [Some(0), None, Some(1)]);
    let [a, s, b] = seqs.map(|seq| recorder.get(seq).expect("in the ring"));
    assert_eq!((a.seq, a.collective_seq, a.p2p_seq), (0, Some(0), None));
    assert_eq!((s.seq, s.collective_seq, s.p2p_seq), (1, None, Some(0)));
    assert_eq!((b.seq, b.collective_seq, b.p2p_seq), (2, Some(1), None));
    assert_eq!(recorder.progress(), (Some(1), None));
    recorder.finish(0, OpState::Completed, now, 1, None);
    assert_eq!(recorder.progress(), (Some(1), Some(0)));
    // A finished point-to-point op does not move the collective progress.
    recorder.finish(1, OpState::Completed, now, 1, None);
    assert_eq!(recorder.progress(), (Some(1), Some(0)));
}

#[test]
fn the_ring_keeps_the_last_records_oldest_first() {
    // A slot's index is a mask for a power of two, a division otherwise.
    for capacity in [3, 4] {
        let now = Instant::now();
        let total = capacity as u64 + 2;
        let recorder = all_reduces(capacity, total as usize, now);
        let (records, recorded) = recorder.snapshot();
        assert_eq!(recorded, total);
        let kept: Vec<u64> = (2..total).collect();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), kept);
        // Finishing an overwritten op is a no-op; a live one is updated.
        recorder.finish(0, OpState::Completed, now, 1, None);
        recorder.finish(3, OpState::Completed, now, 1, None);
        let (records, _) = recorder.snapshot();
        assert_eq!(records[1].state, OpState::Completed);
        assert!(records[1].finished_us.is_some());
        assert!(
            records
                .iter()
                .filter(|r| r.seq != 3)
                .all(|r| r.state == OpState::Pending)
        );
        recorder.fail_pending(now);
        let (records, _) = recorder.snapshot();
        let states: Vec<OpState> = records.iter().map(|r| r.state).collect();
        let mut expected = vec![OpState::Failed; capacity];
        expected[1] = OpState::Completed;
        assert_eq!(states, expected, "capacity {capacity}");
    }
}

#[test]
fn operations_finished_together_share_their_time_but_keep_their_stamps() {
    let now = Instant::now();
    let recorder = all_reduces(4, 6, now);
    {
        let mut finishing = recorder.finishing(42);
        // Operation 1 was overwritten by 5: skipped.
        for (seq, stamp) in [(1, 7), (3, 8), (2, 9)] {
            finishing.finish(seq, OpState::Completed, stamp, None);
        }
        finishing.finish(4, OpState::Failed, 10, None);
    }
    let get = |seq| recorder.get(seq).expect("in the ring");
    assert!(recorder.get(1).is_none());
    for (seq, state) in [
        (2, OpState::Completed),
        (3, OpState::Completed),
        (4, OpState::Failed),
    ] {
        assert_eq!(
            (get(seq).state, get(seq).finished_us),
            (state, Some(42)),
            "op {seq}"
        );
    }
    assert_eq!(get(5).state, OpState::Pending);
    let stamps: Vec<u64> = recorder
        .ring()
        .slots
        .iter()
        .filter(|slot| (2..=4).contains(&slot.seq))
        .map(|slot| (slot.seq, slot.end_stamp))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect();
    assert_eq!(stamps, [9, 8, 10]);
    // The last completed collective is the highest, not the last finished.
    assert_eq!(recorder.progress(), (Some(5), Some(3)));
}

#[test]
fn the_ring_is_whole_before_the_first_record_and_never_grows() {
    let now = Instant::now();
    let recorder = FlightRecorder::new(4);
    let (len, capacity) = {
        let ring = recorder.ring();
        (ring.slots.len(), ring.slots.capacity())
    };
    assert_eq!(len, 4);
    for _ in 0..100 {
        recorder.record(&description("all_reduce", true), clock::nanos(now));
    }
    let ring = recorder.ring();
    assert_eq!((ring.slots.len(), ring.slots.capacity()), (len, capacity));
}

#[test]
fn a_ring_not_yet_gone_round_holds_only_what_was_recorded() {
    // A slot's index is a mask for a power of two, a division otherwise.
    for capacity in [6, 8] {
        let now = Instant::now();
        let recorder = all_reduces(capacity, 3, now);
        assert_eq!(recorder.snapshot().1, 3);
        let seqs = |recorder: &FlightRecorder| -> Vec<u64> {
            recorder.snapshot().0.iter().map(|r| r.seq).collect()
        };
        assert_eq!(seqs(&recorder), [0, 1, 2]);
        // Not the unused slots, whatever number is asked for.
        for seq in [3, u64::MAX] {
            assert!(recorder.get(seq).is_none(), "capacity {capacity}: {seq}");
        }
        recorder.finish(u64::MAX, OpState::Completed, now, 1, None);
        recorder.finish(0, OpState::Completed, now, 1, None);
        assert_eq!(recorder.mark_suspect(|_, _| false).len(), 1);
        recorder.fail_pending(now);
        let states: Vec<OpState> = recorder.snapshot().0.iter().map(|r| r.state).collect();
        assert_eq!(states, [OpState::Suspect, OpState::Failed, OpState::Failed]);
        assert_eq!(seqs(&recorder), [0, 1, 2]);
        // The unused slots are as they were made: neither finished nor failed.
        let ring = recorder.ring();
        assert_eq!(ring.slots.len(), capacity);
        assert!(
            ring.slots
                .iter()
                .skip(3)
                .all(|slot| slot.seq == u64::MAX && slot.state == OpState::Pending),
            "capacity {capacity}"
        );
    }
}

#[test]
fn dumps_are_json_with_every_field() {
    let recorder = FlightRecorder::new(4);
    let now = Instant::now();
    let mut d = description("recv", false);
    d.peer = Some(3);
    d.devices = DeviceList::new([2, 5].into_iter()).unwrap();
    recorder.record(&d, clock::nanos(now));
    let dump = FlightDump {
        generation: 1,
        dumped_us: recorder.micros(Instant::now()),
        pid: std::process::id(),
        peers: vec![PeerProgress {
            rank: 0,
            last_enqueued: Some(7),
            last_completed: Some(6),
        }],
        lagging: vec![1, 3],
        ..recorder.test_dump("trainer", 2, 4, "on request")
    };
    let json: serde_json::Value = serde_json::from_str(&dump.to_json()).unwrap();
    assert_eq!(json["group"], "trainer");
    assert_eq!(json["rank"], 2);
    assert_eq!(json["lagging"], serde_json::json!([1, 3]));
    assert_eq!(json["peers"][0]["last_enqueued"], 7);
    let op = &json["ops"][0];
    assert_eq!(op["op"], "recv");
    assert_eq!(op["dtype"], "float");
    assert_eq!(op["peer"], 3);
    assert_eq!(op["devices"], serde_json::json!([2, 5]));
    assert_eq!(op["state"], "pending");
    assert_eq!(op["timeout_ms"], 5000);
    assert_eq!(op["p2p_seq"], 0);
    // The issuing thread (this test's), named as the system has it.
    let thread = op["thread"].as_u64().unwrap();
    assert_ne!(thread, 0, "Linux has /proc/thread-self");
    assert!(json["threads"][thread.to_string()].is_string(), "{json}");
    assert_eq!(op["collective_seq"], serde_json::Value::Null);
    assert_eq!(op["finished_us"], serde_json::Value::Null);
    assert_eq!(json["divergence"], serde_json::Value::Null);
    assert_eq!(json["ras"], serde_json::Value::Null);
}

/// After a failure the dump holds the divergence (its fields and its
/// text) and RAS's view.
#[test]
fn a_failure_dump_holds_the_divergence_and_ras() {
    use crate::diagnostics::analysis::Divergence;
    use crate::diagnostics::ras::RasReport;
    let divergence = Divergence::sample(1025);
    let recorder = FlightRecorder::new(4);
    let dump = FlightDump {
        divergence: Some(divergence.clone()),
        ras: Some(RasReport::unavailable("RAS is off (NCCL_RAS_ENABLE=0)")),
        ..recorder.test_dump("trainer", 0, 4, "failed")
    };
    let json: serde_json::Value = serde_json::from_str(&dump.to_json()).unwrap();
    let dumped = &json["divergence"];
    assert_eq!(dumped["collective_seq"], 57);
    assert_eq!(dumped["others"][0]["rank"], 3);
    assert_eq!(dumped["others"][0]["issued"]["count"], 1025);
    assert_eq!(dumped["expected_ranks"], serde_json::json!([0, 1, 2]));
    assert_eq!(dumped["message"], divergence.to_string());
    assert_eq!(json["ras"]["format"], "unavailable");
    assert_eq!(json["ras"]["reason"], "RAS is off (NCCL_RAS_ENABLE=0)");
}

#[test]
fn lagging_ranks_are_those_behind_or_silent() {
    let progress = |rank, enqueued| PeerProgress {
        rank,
        last_enqueued: enqueued,
        last_completed: None,
    };
    let peers = [
        progress(0, Some(9)),
        progress(1, Some(8)),
        progress(3, None),
    ];
    // Rank 2 (me) is stuck on collective 9: rank 1 never issued it,
    // rank 3 issued nothing, rank 4 did not answer.
    assert_eq!(lagging_ranks(Some(9), &peers, 5, 2), vec![1, 3, 4]);
    // Stuck on nothing collective (e.g. a recv): only the silent ones.
    assert_eq!(lagging_ranks(None, &peers, 5, 2), vec![4]);
}

#[test]
fn unverified_completions_become_suspect_when_the_group_fails() {
    let now = Instant::now();
    let recorder = all_reduces(8, 4, now);
    // Ends stamped 1 and 1 (verified), 2 (not), and one still pending.
    recorder.finish(0, OpState::Completed, now, 1, None);
    recorder.finish(1, OpState::Completed, now, 1, None);
    recorder.finish(2, OpState::Completed, now, 2, None);
    let suspects = recorder.mark_suspect(|_, stamp| stamp < 2);
    assert_eq!(suspects.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2]);
    assert_eq!(suspects[0].state, OpState::Suspect);
    let states: Vec<OpState> = recorder.snapshot().0.iter().map(|r| r.state).collect();
    assert_eq!(
        states,
        vec![
            OpState::Completed,
            OpState::Completed,
            OpState::Suspect,
            OpState::Pending
        ]
    );
    let json = serde_json::to_string(&recorder.snapshot().0[2]).unwrap();
    assert!(json.contains("\"state\":\"suspect\""), "{json}");
    assert!(!json.contains("end_stamp"), "{json}");
}
