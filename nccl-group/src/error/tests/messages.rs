//! Every kind's message, as a user reads it: one error of each
//! [`ErrorKind`] (the group's failures several), printed (`cargo test -p
//! nccl-group --lib messages -- --nocapture` shows them) and checked for
//! what it must say: what happened, which rank, which collective, what to
//! do.

use std::path::PathBuf;

use nccl_core::cudarc::driver::{DriverError, sys::CUresult};
use nccl_core::nccl_sys::{MissingSymbol, Version};
use nccl_rendezvous::meet::agree::ExclusionReason;

use super::*;
use crate::diagnostics::analysis::Divergence;
use crate::diagnostics::recorder::records::OpRecord;
use crate::failure::{AbortOutcome, FailureCause, FailureDetails, FoundBy};

/// One error and the words its message must hold.
struct Example {
    error: GroupError,
    says: &'static [&'static str],
}

fn example(error: impl Into<GroupError>, says: &'static [&'static str]) -> Example {
    Example {
        error: error.into(),
        says,
    }
}

/// The examples of each kind, and the list of every kind, from one table:
/// the `match` has no wildcard arm, so a kind added to [`ErrorKind`] does
/// not compile until it has its row.
macro_rules! examples_by_kind {
    ($($kind:ident => $examples:expr,)*) => {
        /// Every kind, in the table's order.
        const KINDS: &[ErrorKind] = &[$(ErrorKind::$kind),*];

        /// The examples of `kind`.
        fn examples(kind: ErrorKind) -> Vec<Example> {
            match kind {
                $(ErrorKind::$kind => $examples,)*
            }
        }
    };
}

examples_by_kind! {
    InvalidArgument => vec![example(
        GroupError::InvalidArgument {
            argument: "root",
            expected: "a rank of the group, 0..4".into(),
            given: "global rank 5, not a member".into(),
        },
        &["invalid root", "0..4", "global rank 5"],
    )],
    WrongDevice => vec![example(
        nccl_tensor::Error::WrongDevice { op: "all_reduce", what: "input", expected: 0, given: 1 },
        &["all_reduce", "input is on device 1", "communicator is on device 0"],
    )],
    RankOutOfRange => vec![example(
        nccl_tensor::Error::RankOutOfRange { op: "broadcast", what: "root", given: 4, world_size: 4 },
        &["broadcast", "root 4", "0..4"],
    )],
    Unsupported => vec![
        example(
            GroupError::Capture { op: "barrier", reason: Uncapturable::Barrier },
            &["barrier in a CUDA graph capture", "capture an all_reduce of a one-element tensor"],
        ),
        example(
            StoreError::Unsupported {
                capability: "session keys",
                store: "file store".into(),
                instead: "use a TCP store",
            },
            &["file store does not support session keys", "use a TCP store"],
        ),
    ],
    MissingFunction => vec![example(
        nccl_core::Error::MissingFunction(MissingSymbol {
            function: "ncclCommShrink",
            introduced_in: Some(Version { major: 2, minor: 27, patch: 0 }),
            loaded: Version { major: 2, minor: 21, patch: 5 },
        }),
        &["ncclCommShrink", "2.21.5", "2.27.0", "load a newer libnccl"],
    )],
    Unavailable => vec![example(
        nccl_core::Error::NoCudaDriver,
        &["no CUDA driver", "libcuda.so.1", "driver installed"],
    )],
    Nccl => vec![example(
        nccl_core::Error::from_code("ncclAllReduce", ResultCode(3), None, None),
        &["ncclAllReduce failed", "ncclInternalError"],
    )],
    PeerLost => vec![example(
        failed(
            1,
            FailureCause::AsyncError {
                error: "ncclCommGetAsyncError: ncclRemoteError (6): remote process exited".into(),
                nccl_code: Some(ResultCode(6)),
            },
            Some(answered(vec![3])),
        ),
        &[
            "(rank 1 of 4)",
            "all_reduce #57 (collective #57, 1024 x float",
            "NCCL reported an asynchronous error",
            "remote process exited",
            "ranks [3] had not issued collective #57",
            "flight recorder: dumps/trainer-g0-rank1.json",
            "heal the group",
        ],
    )],
    Cuda => vec![example(
        // The driver's own words are the source: formatting them needs a
        // driver.
        nccl_core::Error::cuda("recording an operation's end event")(DriverError(
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
        )),
        &["CUDA error during recording an operation's end event"],
    )],
    Timeout => vec![
        example(
            GroupError::Timeout { operation: "Work::synchronize", waited: Duration::from_secs(2) },
            &["Work::synchronize did not complete within 2s", "did not fail the group", "ProcessGroup::failure"],
        ),
        example(
            GroupError::InitTimeout {
                key: "trainer/0/comm/x1/0".into(),
                waited: Duration::from_secs(30),
                missing: vec![3],
                source: Box::new(GroupError::from(nccl_core::Error::Timeout {
                    operation: "ncclCommInitRankConfig",
                    waited: Duration::from_secs(30),
                })),
            },
            &["trainer/0/comm/x1/0", "ranks [3] never joined", "disagree on the group name"],
        ),
    ],
    Aborted => vec![example(
        GroupError::Aborted { name: "trainer".into() },
        &["\"trainer\" was aborted", "create a new group"],
    )],
    Closed => vec![example(
        GroupError::Destroyed { name: "trainer".into() },
        &["\"trainer\" was destroyed", "create a new group"],
    )],
    Io => vec![example(
        GroupError::WatchdogStart { source: std::io::Error::other("Resource temporarily unavailable") },
        &["could not start the nccl-group watchdog thread", "out of threads or memory"],
    )],
    PeerFailed => vec![example(
        failed(
            1,
            FailureCause::PeerFailed {
                rank: 3,
                cause: "all_reduce #57 (collective #57) failed: NCCL reported an asynchronous error".into(),
            },
            None,
        ),
        &[
            "(rank 1 of 4)",
            "all_reduce #57 (collective #57, 1024 x float",
            "rank 3 of the group failed first",
            "NCCL reported an asynchronous error",
            "wait_details",
            "heal the group",
        ],
    )],
    GroupFailed => vec![
        // The rank 3 passing 1025 elements: the others time out,
        // and the ranks' records show the divergence.
        example(
            failed(0, timed_out(), Some(FailureDetails {
                divergence: Some(Divergence::sample(1025)),
                ..answered(vec![3])
            })),
            &[
                "(rank 0 of 4)",
                "all_reduce #57 (collective #57, 1024 x float",
                "did not complete within its timeout of 5s",
                "GroupOptions::op_timeout",
                "ranks [3] had not issued collective #57",
                "rank 3 issued all_reduce(float x 1025, sum) as collective #57",
                "ranks 0-2 issued all_reduce(float x 1024, sum)",
                "the element count differs",
                "flight recorder: dumps/trainer-g0-rank0.json",
                "heal the group",
            ],
        ),
        // The same read before the ranks have compared their records:
        // where the rest will be.
        example(
            failed(0, timed_out(), None),
            &[
                "(rank 0 of 4)",
                "all_reduce #57 (collective #57, 1024 x float",
                "did not complete within its timeout of 5s",
                "Failure::wait_details",
                "flight recorder's path",
                "heal the group",
            ],
        ),
        example(
            failed(
                0,
                FailureCause::CheckIncomplete {
                    first: 49,
                    last: 57,
                    absent: vec![3],
                    waited: Duration::from_secs(5),
                    error: None,
                    found_by: FoundBy::CollectiveCheck,
                },
                None,
            ),
            &[
                "(rank 0 of 4)",
                "failed: the collective check of collectives #49-#57 had no fingerprints from rank 3 after 5s",
                "; found at all_reduce #57 (collective #57",
                "heal the group",
            ],
        ),
    ],
    Mismatch => vec![
        example(
            mismatch(FoundBy::CollectiveCheck),
            &[
                "(rank 0 of 4)",
                "the collective check of collective #57",
                "rank 3 issued all_reduce(float x 1025, sum) as collective #57",
                "ranks 0-2 issued all_reduce(float x 1024, sum)",
                "the element count differs",
                "was not enqueued",
                "heal the group",
            ],
        ),
        // A host read of collective #57 with default options.
        example(
            mismatch(FoundBy::MismatchCheck),
            &[
                "(rank 0 of 4)",
                "the mismatch check found",
                "rank 3 issued all_reduce(float x 1025, sum) as collective #57",
                "ranks 0-2 issued all_reduce(float x 1024, sum)",
                "the element count differs",
                "no collective from #57 on is a result",
                "heal the group",
            ],
        ),
        // A later call of a group the mismatch failed.
        example(
            failed(
                0,
                FailureCause::Mismatch {
                    divergence: Divergence::sample(1025),
                    found_by: FoundBy::MismatchCheck,
                },
                None,
            ),
            &[
                "(rank 0 of 4)",
                "rank 3 issued all_reduce(float x 1025, sum) as collective #57",
                "the element count differs",
                "heal the group",
            ],
        ),
    ],
    Excluded => vec![example(
        StoreError::Excluded {
            rank: 2,
            generation: 1,
            reason: ExclusionReason::NotArrived,
            survivors: vec![0, 1, 3],
        },
        &["rank 2 was excluded from generation 1", "leave the job"],
    )],
    TooFewSurvivors => vec![example(
        StoreError::TooFewSurvivors { generation: 1, survivors: vec![0], min_survivors: 2, world_size: 4 },
        &["only", "of 4", "min_survivors", "restart the job"],
    )],
    Healed => vec![example(
        GroupError::Healed { name: "trainer".into(), generation: 0, successor: 1 },
        &["generation 0 was replaced by generation 1", "use the group the heal or grow returned"],
    )],
    Suspended => vec![example(
        GroupError::Suspended { name: "trainer".into(), action: "issuing operations" },
        &["\"trainer\" is suspended", "call resume on every rank"],
    )],
    Store => vec![example(
        StoreError::ConnectionClosed { addr: "10.0.0.1:29500".into(), op: "get trainer/0/uid".into() },
        &["10.0.0.1:29500", "get trainer/0/uid"],
    )],
    Config => vec![example(
        StoreError::Config { var: "WORLD_SIZE".into(), message: "WORLD_SIZE is not set".into() },
        &["WORLD_SIZE is not set"],
    )],
    // No error of the workspace answers `Other`: it is what a kind that a
    // newer nccl-core or nccl-rendezvous adds maps to until this crate
    // names it.
    Other => Vec::new(),
}

/// The operation the failures below failed on: all_reduce #57 (collective
/// #57) of 1024 floats, summed, on device 0.
fn all_reduce_57() -> OpRecord {
    OpRecord::sample(57)
}

fn timed_out() -> FailureCause {
    FailureCause::Timeout {
        timeout: Duration::from_secs(5),
        ran: Duration::from_millis(5020),
    }
}

/// What a rank of "trainer" learns once the abort is done: `lagging`, and
/// its dump's path.
fn answered(lagging: Vec<usize>) -> FailureDetails {
    FailureDetails {
        abort: AbortOutcome::Aborted(Duration::from_millis(3)),
        peers: Vec::new(),
        lagging,
        divergence: None,
        ras: None,
        dump: Some(Ok(PathBuf::from("dumps/trainer-g0-rank1.json"))),
    }
}

/// Rank `rank` of 4 of "trainer", failed by `cause` on [`all_reduce_57`],
/// with `details` once learnt (the dump's path named after the rank).
fn failure(rank: usize, cause: FailureCause, details: Option<FailureDetails>) -> Arc<Failure> {
    let failure = Failure::new(
        "trainer".into(),
        0,
        rank,
        4,
        cause,
        Some(all_reduce_57()),
        Vec::new(),
    );
    if let Some(details) = details {
        let dump = PathBuf::from(format!("dumps/trainer-g0-rank{rank}.json"));
        failure.set_details(FailureDetails {
            dump: Some(Ok(dump)),
            ..details
        });
    }
    Arc::new(failure)
}

fn failed(rank: usize, cause: FailureCause, details: Option<FailureDetails>) -> GroupError {
    GroupError::Failed(failure(rank, cause, details))
}

/// Rank 0's check (`found_by`) of collective #57 finding
/// [`Divergence::sample`]`(1025)`.
fn mismatch(found_by: FoundBy) -> GroupError {
    let divergence = Divergence::sample(1025);
    let cause = FailureCause::Mismatch {
        divergence: divergence.clone(),
        found_by,
    };
    GroupError::Mismatch(Arc::new(Mismatch {
        divergence,
        checked: (57, 57),
        found_by,
        failure: failure(0, cause, None),
    }))
}

/// Asserts that `message` holds every fact of `says`, on one line.
fn assert_says(message: &str, says: &[&str]) {
    let missing: Vec<&&str> = says.iter().filter(|fact| !message.contains(**fact)).collect();
    assert!(missing.is_empty(), "{missing:?} missing from: {message}");
    assert!(!message.contains('\n'), "not one paragraph: {message}");
}

#[test]
fn every_kind_says_what_happened_where_and_what_to_do() {
    for &kind in KINDS {
        let examples = examples(kind);
        assert!(
            !examples.is_empty() || kind == ErrorKind::Other,
            "{kind:?} has no example"
        );
        for Example { error, says } in examples {
            let message = format!("{error}");
            println!("{kind:?}: {message}\n");
            assert_eq!(error.kind(), kind, "{message}");
            assert_says(&message, says);
        }
    }
}

/// A host read of a tensor whose operation the group's failure refused
/// (`to_vec` fails with the error the group's `ResultCheck` gives, as
/// `health::verify`'s `Outcome` makes it) names the cause, the rank and the
/// collective in its own message; `?` into a `GroupError` gives the
/// failure back.
/// A host read of a collective the mismatch check refused: the tensor's
/// error is of kind `Mismatch`, and `?` gives the group's `Mismatch` back
/// (as the GPU test of default options reads it with `to_vec`).
#[test]
fn a_read_refused_by_the_mismatch_check_is_a_mismatch() {
    let refused = nccl_tensor::Error::ProducerFailed {
        error: Arc::new(mismatch(FoundBy::MismatchCheck)) as nccl_tensor::ProducerError,
    };
    let wrapped = GroupError::Tensor(refused);
    assert_eq!(wrapped.kind(), ErrorKind::Mismatch, "{wrapped:?}");
    assert!(wrapped.failure().is_some(), "{wrapped:?}");
    let GroupError::Tensor(refused) = wrapped else {
        unreachable!("made as Tensor")
    };
    let back = GroupError::from(refused);
    assert!(matches!(back, GroupError::Mismatch(_)), "{back:?}");
    assert_eq!(back.kind(), ErrorKind::Mismatch);
}

#[test]
fn a_refused_read_says_why_where_and_which_collective() {
    let timed_out = failed(0, timed_out(), Some(answered(vec![3])));
    let refused = nccl_tensor::Error::ProducerFailed {
        error: Arc::new(timed_out) as nccl_tensor::ProducerError,
    };
    let message = format!("{refused}");
    println!("to_vec: {message}\n");
    assert_says(
        &message,
        &[
            "the operation that produced this tensor's contents failed, so they are not its result",
            "(rank 0 of 4)",
            "all_reduce #57 (collective #57, 1024 x float",
            "did not complete within its timeout of 5s",
            "ranks [3] had not issued collective #57",
            "flight recorder: dumps/trainer-g0-rank0.json",
        ],
    );
    // Said once, whether printed alone or with its sources.
    let debug = format!("{refused:?}");
    assert_eq!(debug.matches("(rank 0 of 4)").count(), 1, "{debug}");
    let wrapped = GroupError::Tensor(refused);
    assert_eq!(wrapped.to_string(), message);
    let GroupError::Tensor(refused) = wrapped else {
        unreachable!("made as Tensor")
    };
    let back = GroupError::from(refused);
    assert!(matches!(back, GroupError::Failed(_)), "{back:?}");
    assert!(message.ends_with(&back.to_string()), "{message}");
}
