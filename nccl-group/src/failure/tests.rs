//! Failure reports as they read: the operation, the cause, the culprits,
//! the dump, the divergence and RAS's view.

use std::sync::Arc;

use super::*;
use crate::diagnostics::recorder::records::OpState;
use nccl_core::ResultCode;

fn record() -> OpRecord {
    OpRecord::sample(41)
}

/// Rank `rank` of 4 of "trainer", failed by [`record`] running 5.02 s past
/// its 5 s timeout.
fn timed_out(rank: usize) -> Failure {
    Failure::new(
        "trainer".into(),
        0,
        rank,
        4,
        FailureCause::Timeout {
            timeout: Duration::from_secs(5),
            ran: Duration::from_millis(5020),
        },
        Some(record()),
        Vec::new(),
    )
}

#[test]
fn the_report_names_op_cause_culprits_and_dump() {
    let failure = timed_out(2);
    let early = failure.to_string();
    assert!(
        early.contains("process group \"trainer\" (rank 2 of 4) failed: all_reduce #57 (collective #41, 1024 x float on devices [0]) did not complete within its timeout of 5s (it had run 5.02s)"),
        "{early}"
    );
    assert!(early.contains("being aborted"), "{early}");
    failure.set_details(FailureDetails {
        abort: AbortOutcome::Aborted(Duration::from_millis(3)),
        peers: Vec::new(),
        lagging: vec![1],
        divergence: None,
        ras: Some(RasReport::Unavailable {
            reason: "RAS is off (NCCL_RAS_ENABLE=0)".into(),
        }),
        dump: Some(Ok(PathBuf::from("/tmp/trainer-g0-rank2.json"))),
    });
    let full = failure.to_string();
    assert!(full.contains("aborted in 3ms"), "{full}");
    for part in [
        "ranks [1] had not issued collective #41 or did not answer",
        "flight recorder: /tmp/trainer-g0-rank2.json",
        "; RAS unavailable: RAS is off (NCCL_RAS_ENABLE=0); flight recorder",
    ] {
        assert!(full.contains(part), "{part:?} missing from: {full}");
    }
    assert!(full.ends_with(&format!(". {TO_CONTINUE}")), "{full}");
}

#[test]
fn details_can_be_waited_for() {
    let failure = Arc::new(Failure::new(
        "g".into(),
        0,
        0,
        1,
        FailureCause::EnqueueBlocked {
            device: 3,
            timeout: Duration::from_secs(2),
            blocked: Duration::from_millis(2040),
        },
        None,
        Vec::new(),
    ));
    let text = failure.to_string();
    assert!(
        text.contains("failed: a communicator on device 3 was stuck enqueueing an operation for 2.04s, past its timeout of 2s"),
        "{text}"
    );
    assert!(failure.wait_details(Duration::from_millis(20)).is_none());
    let setter = {
        let failure = Arc::clone(&failure);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            failure.set_details(FailureDetails {
                abort: AbortOutcome::Aborted(Duration::from_millis(1)),
                peers: Vec::new(),
                lagging: Vec::new(),
                divergence: None,
                ras: None,
                dump: None,
            });
        })
    };
    // The longest timeout there is waits, and returns once they are set.
    let details = failure
        .wait_details(Duration::MAX)
        .expect("set by the other thread");
    assert_eq!(
        details.abort,
        AbortOutcome::Aborted(Duration::from_millis(1))
    );
    setter.join().unwrap();
}

#[test]
fn a_heal_goes_on_once_the_releases_began_or_the_failure_gave_up_on_them() {
    let progress = |rank| PeerProgress {
        rank,
        last_enqueued: Some(57),
        last_completed: Some(56),
    };
    let quiet = timed_out(0);
    assert!(!quiet.wait_quiet(Duration::ZERO), "nothing began yet");
    assert!(quiet.peers().is_empty());
    quiet.set_quiet();
    quiet.set_peers(vec![progress(0), progress(2)]);
    assert!(quiet.wait_quiet(Duration::ZERO));
    assert_eq!(quiet.peers().iter().map(|p| p.rank).collect::<Vec<_>>(), [0, 2]);
    // A release that never began within the bound: the details come
    // anyway, with the stalled abort and the peers, and the heal goes on.
    let stalled = timed_out(1);
    stalled.set_details(FailureDetails {
        abort: AbortOutcome::Stalled(Duration::from_secs(10)),
        peers: vec![progress(1)],
        lagging: Vec::new(),
        divergence: None,
        ras: None,
        dump: None,
    });
    assert!(stalled.wait_quiet(Duration::ZERO));
    assert_eq!(stalled.wait_peers(Duration::ZERO)[0].rank, 1);
}

#[test]
fn causes_read_as_sentences() {
    let mut send = record();
    send.op = "send".into();
    send.collective_seq = None;
    send.peer = Some(3);
    let failure = Failure::new(
        "g".into(),
        1,
        0,
        4,
        FailureCause::AsyncError {
            error: "remote process exited".into(),
            nccl_code: Some(ResultCode(6)),
        },
        Some(send),
        Vec::new(),
    );
    failure.set_details(FailureDetails {
        abort: AbortOutcome::Stalled(Duration::from_secs(10)),
        peers: Vec::new(),
        lagging: vec![3],
        divergence: None,
        ras: None,
        dump: Some(Err("permission denied".into())),
    });
    let text = failure.to_string();
    assert!(text.contains("send #57 (1024 x float, peer 3 on devices [0]) failed: NCCL reported an asynchronous error: remote process exited"), "{text}");
    assert!(
        text.contains("had not finished after 10s and was left running"),
        "{text}"
    );
    assert!(text.contains("ranks [3] did not answer"), "{text}");
    assert!(
        text.contains("could not be written: permission denied"),
        "{text}"
    );
    let none = Failure::new("g".into(), 0, 0, 1, FailureCause::Dropped, None, Vec::new());
    let text = none.to_string();
    assert!(
        text.contains("(rank 0 of 1) was dropped with no operation pending"),
        "{text}"
    );
    assert!(!text.contains("was pending"), "{text}");
}

#[test]
fn suspect_operations_are_named_up_to_a_few() {
    let suspects: Vec<OpRecord> = (0..6)
        .map(|n| {
            let mut op = record();
            op.seq = 50 + n;
            op.collective_seq = Some(40 + n);
            op.state = OpState::Suspect;
            op
        })
        .collect();
    let failure = Failure::new(
        "g".into(),
        0,
        1,
        4,
        FailureCause::AsyncError {
            error: "remote process exited".into(),
            nccl_code: Some(ResultCode(6)),
        },
        None,
        suspects,
    );
    let text = failure.to_string();
    assert!(
        text.contains("the results of 6 operation(s) that ended since the last clean check"),
        "{text}"
    );
    assert!(text.contains("all_reduce #50 (collective #40"), "{text}");
    assert!(text.contains("all_reduce #53 (collective #43"), "{text}");
    assert!(!text.contains("all_reduce #54"), "{text}");
    assert!(text.contains(" and 2 more"), "{text}");
}

/// `failure`'s text once aborted quietly, the ranks' records showing
/// [`Divergence::sample`]`(1025)`.
fn text_with_divergence(failure: &Failure) -> String {
    failure.set_details(FailureDetails {
        divergence: Some(Divergence::sample(1025)),
        ..aborted_quietly()
    });
    failure.to_string()
}

#[test]
fn a_timeout_report_names_the_divergence_of_the_ranks_records() {
    let failure = timed_out(0);
    let text = text_with_divergence(&failure);
    assert!(
        text.contains(
            "; the ranks' last records part at collective #57: rank 3 issued all_reduce(float x 1025, sum) \
             as collective #57; ranks 0-2 issued all_reduce(float x 1024, sum) (the element count differs). \
             To continue, heal the group"
        ),
        "{text}"
    );
    assert!(!text.contains("culprits"), "{text}");
}

#[test]
fn the_collective_checks_failures_name_the_check() {
    let mismatch = Failure::new(
        "trainer".into(),
        0,
        2,
        4,
        FailureCause::Mismatch {
            divergence: Divergence::sample(1025),
            found_by: FoundBy::CollectiveCheck,
        },
        None,
        Vec::new(),
    );
    let text = text_with_divergence(&mismatch);
    assert!(
        text.starts_with(
            "process group \"trainer\" (rank 2 of 4) failed: the collective check found that the ranks did \
             not issue the same collectives: rank 3 issued all_reduce(float x 1025, sum) as collective #57"
        ),
        "{text}"
    );
    assert_eq!(
        text.matches("rank 3 issued").count(),
        1,
        "said once: {text}"
    );
    assert!(!mismatch.cause.is_timeout());
    let incomplete = FailureCause::CheckIncomplete {
        first: 112,
        last: 119,
        absent: vec![3],
        waited: Duration::from_secs(5),
        error: None,
        found_by: FoundBy::CollectiveCheck,
    };
    assert!(incomplete.is_timeout());
    let text = Failure::new("g".into(), 0, 0, 4, incomplete, None, Vec::new()).to_string();
    assert!(
        text.contains(
            "failed: the collective check of collectives #112-#119 had no fingerprints from rank 3 after 5s: \
             they had not issued these collectives"
        ),
        "{text}"
    );
    let store = FailureCause::CheckIncomplete {
        first: 4,
        last: 4,
        absent: Vec::new(),
        waited: Duration::ZERO,
        error: Some("connection refused".into()),
        found_by: FoundBy::MismatchCheck,
    };
    assert!(!store.is_timeout());
    let by_the_mismatch_check = Failure::new("g".into(), 0, 0, 4, store.clone(), None, Vec::new());
    assert!(
        by_the_mismatch_check
            .to_string()
            .contains("failed: the mismatch check of collective #4 failed: the store failed"),
        "{by_the_mismatch_check}"
    );
    assert!(
        store
            .to_string()
            .starts_with("of collective #4 failed: the store failed: connection refused"),
        "{store}"
    );
}

#[test]
fn a_sub_groups_report_names_global_ranks() {
    let subgroup = crate::lineage::SubGroup {
        parent: "world/sub0.0".into(),
        parent_generation: 0,
        index: 1,
        color: 0,
        parent_ranks: vec![2, 0],
        root: "world".into(),
        global_ranks: vec![5, 1],
        path: crate::lineage::SplitPath::Split,
    };
    let failure = Failure::new(
        "world/sub0.0/sub1.0".into(),
        0,
        1,
        2,
        FailureCause::Timeout {
            timeout: Duration::from_secs(5),
            ran: Duration::from_secs(6),
        },
        Some(record()),
        Vec::new(),
    )
    .in_subgroup(Some(Arc::new(subgroup)));
    failure.set_details(FailureDetails {
        lagging: vec![0],
        ..aborted_quietly()
    });
    let text = failure.to_string();
    assert!(
        text.starts_with(
            "process group \"world/sub0.0/sub1.0\" (rank 1 of 2; rank 0 of its parent \"world/sub0.0\"; \
             global rank 1 of \"world\") failed: all_reduce #57"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "; ranks [0] (global ranks [5] of \"world\") had not issued collective #41 or did not answer"
        ),
        "{text}"
    );
}

#[test]
fn a_failed_split_reads_as_one_and_counts_as_a_timeout_only_when_it_was() {
    let split = |timed_out| FailureCause::Split {
        index: 2,
        timed_out,
        error: "ncclCommSplit did not complete within 60s".into(),
    };
    let text = Failure::new("g".into(), 0, 0, 4, split(true), None, Vec::new()).to_string();
    assert!(
        text.contains(
            "failed: a communicator could not be split into the group's sub-groups (split #2, \
             ncclCommSplit): ncclCommSplit did not complete within 60s"
        ),
        "{text}"
    );
    assert!(split(true).is_timeout());
    assert!(!split(false).is_timeout());
}

/// Details of a failure whose abort took 3 ms and that learnt nothing
/// else: the base the tests above change one field of.
fn aborted_quietly() -> FailureDetails {
    FailureDetails {
        abort: AbortOutcome::Aborted(Duration::from_millis(3)),
        peers: Vec::new(),
        lagging: Vec::new(),
        divergence: None,
        ras: None,
        dump: None,
    }
}

#[test]
fn collectives_print_as_one_or_a_range() {
    assert_eq!(Collectives(57, 57).to_string(), "collective #57");
    assert_eq!(Collectives(48, 63).to_string(), "collectives #48-#63");
}
