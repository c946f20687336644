//! CPU tests of `nccl_tensor::Error`'s `kind()`, `nccl_code()` and
//! `is_timeout()`: every variant has its kind, and a wrapped core error
//! answers what the core error would. No NCCL and no GPU needed.

use std::time::Duration;

use nccl_core::cudarc::driver::{DriverError, sys::CUresult};
use nccl_core::nccl_sys::Version;
use nccl_core::{DataType, ResultCode};
use nccl_tensor::{Error, ErrorKind};

/// One error of every variant but `Core` and `Cuda`, with its kind.
fn one_of_each_own_variant() -> Vec<(Error, ErrorKind)> {
    let op = "all_reduce";
    let invalid = ErrorKind::InvalidArgument;
    vec![
        (
            Error::DtypeMismatch {
                op,
                input: DataType::Float32,
                output: DataType::Float16,
            },
            invalid,
        ),
        (
            Error::WrongLength {
                op,
                what: "output",
                expected: 8,
                given: 7,
                rule: "a rule",
            },
            invalid,
        ),
        (
            Error::NotDivisible {
                op,
                what: "input",
                given: 6,
                world_size: 4,
            },
            invalid,
        ),
        (
            Error::WrongDevice {
                op,
                what: "stream",
                expected: 0,
                given: 1,
            },
            ErrorKind::WrongDevice,
        ),
        (
            Error::NotContiguous {
                op,
                what: "input",
                shape: vec![2, 4],
                strides: vec![1, 2],
            },
            invalid,
        ),
        (
            Error::RankOutOfRange {
                op,
                what: "root",
                given: 4,
                world_size: 4,
            },
            ErrorKind::RankOutOfRange,
        ),
        (Error::SelfPeerOutsideGroup { op, peer: 0 }, invalid),
        (
            Error::UnsupportedDataType {
                op,
                dtype: DataType::Bfloat16,
                needed: Version::new(2, 10, 0),
                loaded: Version::new(2, 9, 9),
            },
            ErrorKind::Unsupported,
        ),
        (
            Error::UnsupportedReduction {
                op,
                reduction: "avg",
                dtype: DataType::Float32,
                reason: "a reason".to_string(),
            },
            ErrorKind::Unsupported,
        ),
        (Error::AliasedCells { op }, invalid),
        (
            Error::ShapeMismatch {
                shape: vec![3],
                expected: 3,
                given: 2,
            },
            invalid,
        ),
        (
            Error::ShapeOverflow {
                shape: vec![usize::MAX, 2],
            },
            invalid,
        ),
        (
            Error::StridesOutOfBounds {
                shape: vec![2],
                strides: vec![4],
                needed: 5,
                storage: 2,
            },
            invalid,
        ),
        (
            Error::RangeOutOfBounds {
                start: 2,
                end: 9,
                len: 4,
            },
            invalid,
        ),
        (
            Error::WrongType {
                actual: DataType::Float32,
                requested: DataType::Int32,
            },
            invalid,
        ),
        (
            Error::InBatch {
                index: 3,
                error: Box::new(Error::RankOutOfRange {
                    op: "send",
                    what: "dst",
                    given: 9,
                    world_size: 4,
                }),
            },
            ErrorKind::RankOutOfRange,
        ),
        (
            Error::InBatch {
                index: 0,
                error: Box::new(Error::AliasedCells { op }),
            },
            invalid,
        ),
        (
            Error::BatchTooLong {
                given: 600,
                max: 512,
            },
            invalid,
        ),
        (
            Error::CellTwiceInBatch {
                first: 0,
                second: 2,
            },
            invalid,
        ),
        (
            Error::UnpairedSelfExchange {
                rank: 1,
                sends: 2,
                recvs: 1,
            },
            invalid,
        ),
        (
            Error::SelfExchangeMismatch {
                send: 0,
                recv: 1,
                sent: 4,
                sent_dtype: DataType::Float32,
                received: 8,
                received_dtype: DataType::Float32,
            },
            invalid,
        ),
        (
            Error::SplitCount {
                op: "all_to_all_single",
                what: "input_split_sizes",
                given: 3,
                world_size: 4,
            },
            invalid,
        ),
        (
            Error::SplitSum {
                op: "all_to_all_single",
                what: "input_split_sizes",
                buffer: "input",
                sum: 9,
                len: 10,
            },
            invalid,
        ),
    ]
}

#[test]
fn every_own_variant_has_its_kind_no_code_and_no_timeout() {
    for (error, kind) in one_of_each_own_variant() {
        assert_eq!(error.kind(), kind, "{error}");
        assert_eq!(error.nccl_code(), None, "{error}");
        assert!(!error.is_timeout(), "{error}");
        assert!(std::error::Error::source(&error).is_none(), "{error}");
    }
}

#[test]
fn a_core_error_answers_as_it_would_unwrapped() {
    let cores = [
        nccl_core::Error::Timeout {
            operation: "ncclCommInitRankConfig",
            waited: Duration::from_secs(2),
        },
        nccl_core::Error::from_code("ncclAllReduce", ResultCode(6), None, None),
        nccl_core::Error::WrongDevice {
            what: "stream",
            expected: 0,
            given: 1,
        },
        nccl_core::Error::Finalized,
    ];
    for core in cores {
        let text = core.to_string();
        let (kind, code, timeout) = (core.kind(), core.nccl_code(), core.is_timeout());
        let error = Error::from(core);
        assert_eq!(error.kind(), kind, "{error}");
        assert_eq!(error.nccl_code(), code, "{error}");
        assert_eq!(error.is_timeout(), timeout, "{error}");
        assert_eq!(error.to_string(), text, "transparent");
    }
}

/// The driver's error is the source only (showing it needs a driver); a
/// tensor's CUDA error is nccl-core's one `Cuda` variant.
#[test]
fn cuda_error_leaves_the_driver_error_to_its_source() {
    let error = Error::from(nccl_core::Error::cuda("an allocation")(DriverError(
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    )));
    assert_eq!(error.kind(), ErrorKind::Cuda);
    assert_eq!(error.nccl_code(), None);
    assert!(!error.is_timeout());
    assert_eq!(error.to_string(), "CUDA error during an allocation");
    assert!(
        std::error::Error::source(&error).is_some_and(|source| source.is::<DriverError>()),
        "the driver's error is the source"
    );
}

/// `Debug` leads with the message and its sources (so `fn main() ->
/// Result<(), Error>` prints the sentence), then names the variant and
/// the kind.
#[test]
fn debug_prints_the_sentence_first() {
    for (error, kind) in one_of_each_own_variant() {
        let debug = format!("{error:?}");
        assert!(debug.starts_with(&error.to_string()), "{debug}");
        assert!(debug.contains("(nccl_tensor::Error::"), "{debug}");
        assert!(debug.ends_with(&format!(", kind {kind:?})")), "{debug}");
    }
    let core = Error::from(nccl_core::Error::from_code(
        "ncclAllReduce",
        ResultCode(6),
        None,
        None,
    ));
    assert!(
        format!("{core:?}").ends_with("(nccl_tensor::Error::Core, kind PeerLost)"),
        "{core:?}"
    );
}

/// The producer's failure is part of the message, so printing the error
/// alone says why, and a chain of sources (`Debug`, `ErrorChain`) says it
/// once.
#[test]
fn a_refused_read_says_why_its_producer_failed() {
    let cause = std::io::Error::other("rank 3 left during all_reduce #57 (ncclRemoteError)");
    let error = Error::ProducerFailed {
        error: std::sync::Arc::new(cause),
    };
    assert_eq!(error.kind(), ErrorKind::Aborted);
    let message = error.to_string();
    assert!(message.starts_with("the operation that produced this tensor's contents failed"));
    assert!(
        message.ends_with(": rank 3 left during all_reduce #57 (ncclRemoteError)"),
        "{message}"
    );
    assert!(std::error::Error::source(&error).is_none());
    let debug = format!("{error:?}");
    assert_eq!(debug.matches("rank 3 left").count(), 1, "{debug}");
}
