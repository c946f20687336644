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
    let now = Instant::now();
    let recorder = all_reduces(8, 3, now);
    assert_eq!(recorder.snapshot().1, 3);
    let seqs = |recorder: &FlightRecorder| -> Vec<u64> {
        recorder.snapshot().0.iter().map(|r| r.seq).collect()
    };
    assert_eq!(seqs(&recorder), [0, 1, 2]);
    assert!(recorder.get(3).is_none());
    recorder.finish(0, OpState::Completed, now, 1, None);
    // None of the unused slots is marked suspect or failed.
    assert_eq!(recorder.mark_suspect(|_, _| false).len(), 1);
    recorder.fail_pending(now);
    let states: Vec<OpState> = recorder.snapshot().0.iter().map(|r| r.state).collect();
    assert_eq!(states, [OpState::Suspect, OpState::Failed, OpState::Failed]);
    assert_eq!(seqs(&recorder), [0, 1, 2]);
}
