//! CPU tests of the error types: `ResultCode` names, hints and display for
//! every `ncclResult_t` of the pinned header and for unknown codes,
//! `Error::from_code`, the display of every other `Error` variant that can
//! be built without a GPU, and what `kind()`, `nccl_code()` and
//! `is_timeout()` answer for each. No NCCL and no GPU needed.

use std::time::Duration;

use nccl_core::cudarc::driver::{DriverError, sys::CUresult};
use nccl_core::nccl_sys::{Attempt, LoadError, MissingSymbol};
use nccl_core::{Error, ErrorChain, ErrorKind, ResultCode, Version};

/// The hint for codes this binding does not know.
const UNKNOWN_HINT: &str = "a result code this binding does not know (newer libnccl?)";

/// The last-error label the message carries when NCCL left text behind.
const LAST_ERROR_LABEL: &str =
    "; last NCCL error text (process-wide, may belong to another call): ";

/// `(code, name, hint)` for the error codes 1..=6.
const ERROR_CODES: [(u32, &str, &str); 6] = [
    (
        1,
        "ncclUnhandledCudaError",
        "a CUDA call inside NCCL failed",
    ),
    (
        2,
        "ncclSystemError",
        "a system call failed (network, shared memory or files)",
    ),
    (3, "ncclInternalError", "NCCL hit an internal error"),
    (4, "ncclInvalidArgument", "an argument was rejected by NCCL"),
    (
        5,
        "ncclInvalidUsage",
        "NCCL was called in a way it does not allow",
    ),
    (6, "ncclRemoteError", "a remote rank failed or went away"),
];

/// Codes no header version of ours defines (9 is `ncclNumResults`, a count).
const UNKNOWN_CODES: [u32; 4] = [9, 42, 1000, u32::MAX];

#[test]
fn result_code_names_match_the_header() {
    assert_eq!(ResultCode(0).name(), Some("ncclSuccess"));
    assert_eq!(ResultCode(7).name(), Some("ncclInProgress"));
    for (code, name, _) in ERROR_CODES {
        assert_eq!(ResultCode(code).name(), Some(name), "code {code}");
    }
    assert_eq!(ResultCode(8).name(), Some("ncclTimeout"));
    for code in UNKNOWN_CODES {
        assert_eq!(ResultCode(code).name(), None, "code {code}");
    }
}

#[test]
fn result_code_names_agree_with_nccl_sys_constants() {
    use nccl_core::nccl_sys::ncclResult_t;
    // Each constant with its name, written once.
    macro_rules! named {
        ($($constant:ident),*) => {
            [$((ncclResult_t::$constant, stringify!($constant))),*]
        };
    }
    let constants = named![
        ncclSuccess,
        ncclUnhandledCudaError,
        ncclSystemError,
        ncclInternalError,
        ncclInvalidArgument,
        ncclInvalidUsage,
        ncclRemoteError,
        ncclInProgress,
        ncclTimeout
    ];
    for (constant, name) in constants {
        assert_eq!(ResultCode(constant.0).name(), Some(name));
    }
    assert_eq!(ResultCode(ncclResult_t::ncclNumResults.0).name(), None);
}

#[test]
fn result_code_hints_for_error_codes() {
    for (code, _, hint) in ERROR_CODES {
        assert_eq!(ResultCode(code).hint(), hint, "code {code}");
    }
}

#[test]
fn result_code_hints_for_unknown_codes() {
    for code in UNKNOWN_CODES {
        assert_eq!(ResultCode(code).hint(), UNKNOWN_HINT, "code {code}");
    }
}

/// `ncclSuccess` and `ncclInProgress` have names, so their hint should not
/// call them unknown. Today `hint()` falls through to the unknown-code text
/// for both (nccl-core/src/error.rs, `ResultCode::hint`).
#[test]
fn result_code_hints_for_known_non_error_codes_do_not_say_unknown() {
    for code in [0, 7] {
        assert_ne!(ResultCode(code).hint(), UNKNOWN_HINT, "code {code}");
    }
}

#[test]
fn result_code_display_names_the_code_and_its_number() {
    assert_eq!(ResultCode(0).to_string(), "ncclSuccess (0)");
    assert_eq!(ResultCode(7).to_string(), "ncclInProgress (7)");
    for (code, name, _) in ERROR_CODES {
        assert_eq!(ResultCode(code).to_string(), format!("{name} ({code})"));
    }
    assert_eq!(ResultCode(8).to_string(), "ncclTimeout (8)");
    assert_eq!(
        ResultCode(8).hint(),
        "a wait inside NCCL ran out of time (NCCL 2.30.3+)"
    );
    assert_eq!(ResultCode(9).to_string(), "unknown NCCL result 9");
    assert_eq!(ResultCode(42).to_string(), "unknown NCCL result 42");
    assert_eq!(
        ResultCode(u32::MAX).to_string(),
        "unknown NCCL result 4294967295"
    );
}

/// [`Error::from_code`] of `function` failing with `code`, with NCCL's
/// description and last error text.
fn nccl_failure(
    function: &'static str,
    code: u32,
    description: Option<&str>,
    last_error: Option<&str>,
) -> Error {
    Error::from_code(
        function,
        ResultCode(code),
        description.map(str::to_owned),
        last_error.map(str::to_owned),
    )
}

#[test]
fn from_code_display_for_every_error_code_with_last_error_text() {
    for (code, name, hint) in ERROR_CODES {
        let (description, detail) = (
            format!("description of {code}"),
            format!("detail of {code}"),
        );
        let error = nccl_failure("ncclAllReduce", code, Some(&description), Some(&detail));
        assert_eq!(
            error.to_string(),
            format!(
                "ncclAllReduce failed: {name} ({code}): description of {code} ({hint}){LAST_ERROR_LABEL}detail of {code}"
            )
        );
        assert_eq!(error.nccl_code(), Some(ResultCode(code)));
    }
}

#[test]
fn from_code_display_exact_message() {
    let error = nccl_failure(
        "ncclCommInitRankConfig",
        4,
        Some("invalid argument (run with NCCL_DEBUG=WARN for details)"),
        Some("Invalid config blocking attribute value -2"),
    );
    assert_eq!(
        error.to_string(),
        "ncclCommInitRankConfig failed: ncclInvalidArgument (4): invalid argument (run with \
         NCCL_DEBUG=WARN for details) (an argument was rejected by NCCL); last NCCL error text \
         (process-wide, may belong to another call): Invalid config blocking attribute value -2"
    );
}

#[test]
fn from_code_without_last_error_text_has_no_last_error_part() {
    for last_error in [None, Some(String::new())] {
        let error = nccl_failure(
            "ncclGroupEnd",
            6,
            Some("remote process exited or there was a network error"),
            last_error.as_deref(),
        );
        let text = error.to_string();
        assert_eq!(
            text,
            "ncclGroupEnd failed: ncclRemoteError (6): remote process exited or there was a network \
             error (a remote rank failed or went away)",
            "last_error = {last_error:?}"
        );
        assert!(!text.contains("last NCCL error text"), "{text}");
    }
}

#[test]
fn from_code_without_description_says_so() {
    let error = Error::from_code("ncclSend", ResultCode(3), None, None);
    assert_eq!(
        error.to_string(),
        "ncclSend failed: ncclInternalError (3): no description (NCCL hit an internal error)"
    );
}

#[test]
fn from_code_for_unknown_codes_names_the_number() {
    for code in UNKNOWN_CODES {
        let error = nccl_failure("ncclBroadcast", code, None, Some("boom"));
        assert_eq!(
            error.to_string(),
            format!(
                "ncclBroadcast failed: unknown NCCL result {code}: no description ({UNKNOWN_HINT}){LAST_ERROR_LABEL}boom"
            )
        );
        assert_eq!(error.nccl_code(), Some(ResultCode(code)));
    }
}

#[test]
fn from_code_fills_every_field() {
    let error = nccl_failure("ncclRecv", 5, Some("usage"), Some("text"));
    match error {
        Error::Nccl {
            function,
            code,
            description,
            hint,
            last_error,
        } => {
            assert_eq!(function, "ncclRecv");
            assert_eq!(code, ResultCode(5));
            assert_eq!(description, "usage");
            assert_eq!(hint, "NCCL was called in a way it does not allow");
            assert_eq!(last_error.as_deref(), Some("text"));
        }
        other => panic!("expected Error::Nccl, got {other:?}"),
    }
}

#[test]
fn nccl_code_is_none_for_other_variants() {
    let others = [
        Error::Aborted,
        Error::Finalized,
        Error::NoCudaDriver,
        Error::Timeout {
            operation: "ncclCommInitRank",
            waited: Duration::from_secs(1),
        },
        Error::RankOutOfRange {
            what: "rank",
            given: 3,
            world_size: 2,
        },
        Error::InvalidArgument {
            argument: "count",
            expected: "more".to_string(),
            given: "less".to_string(),
        },
    ];
    for error in others {
        assert_eq!(error.nccl_code(), None, "{error:?}");
    }
}

#[test]
fn rank_out_of_range_names_the_argument_the_value_and_the_range() {
    let error = Error::RankOutOfRange {
        what: "root",
        given: 5,
        world_size: 4,
    };
    assert_eq!(error.to_string(), "root 5 is out of range: expected 0..4");
    let error = Error::RankOutOfRange {
        what: "peer",
        given: 1 << 31,
        world_size: 8,
    };
    assert_eq!(
        error.to_string(),
        "peer 2147483648 is out of range: expected 0..8"
    );
}

#[test]
fn invalid_argument_names_expected_and_given() {
    let error = Error::InvalidArgument {
        argument: "count",
        expected: "a multiple of the world size 4".to_string(),
        given: "7".to_string(),
    };
    assert_eq!(
        error.to_string(),
        "invalid count: expected a multiple of the world size 4, got 7"
    );
}

#[test]
fn unsupported_names_feature_needed_and_loaded_versions() {
    let error = Error::Unsupported {
        feature: "ncclAlltoAll".to_string(),
        needed: Version::new(2, 28, 0),
        loaded: Version::new(2, 27, 3),
    };
    assert_eq!(
        error.to_string(),
        "ncclAlltoAll needs NCCL 2.28.0 or newer, but the loaded libnccl is 2.27.3; load a newer \
         libnccl (set NCCL_LIBRARY to its full path)"
    );
}

#[test]
fn timeout_names_the_operation_and_the_wait() {
    let error = Error::Timeout {
        operation: "ncclCommInitRankConfig",
        waited: Duration::from_millis(1500),
    };
    assert_eq!(
        error.to_string(),
        "ncclCommInitRankConfig did not complete within 1.5s; the communicator was aborted (are all \
         ranks running and reachable?)"
    );
}

#[test]
fn aborted_finalized_and_no_cuda_driver_messages() {
    assert_eq!(
        Error::Aborted.to_string(),
        "the communicator was aborted; create a new one"
    );
    assert_eq!(
        Error::Finalized.to_string(),
        "the communicator was finalized; create a new one"
    );
    assert_eq!(
        Error::NoCudaDriver.to_string(),
        "no CUDA driver found: libcuda.so.1 could not be loaded; this machine needs an NVIDIA GPU \
         with its driver installed (is the driver's library folder on the loader path?)"
    );
}

#[test]
fn library_error_is_transparent() {
    let load_error = LoadError::NotFound {
        attempts: vec![
            Attempt {
                candidate: "libnccl.so.2".to_string(),
                error: "not found".to_string(),
            },
            Attempt {
                candidate: "libnccl.so".to_string(),
                error: "also not found".to_string(),
            },
        ],
        nccl_library_env: None,
    };
    let error = Error::from(load_error.clone());
    assert_eq!(error.to_string(), load_error.to_string());
    assert_eq!(
        error.to_string(),
        "could not load the NCCL library: libnccl.so.2 (not found), libnccl.so (also not found); \
         install NCCL or set NCCL_LIBRARY to the full path of libnccl.so.2"
    );
    assert!(matches!(error, Error::Library(ref inner) if *inner == load_error));
    assert_eq!(error.nccl_code(), None);
}

#[test]
fn missing_function_error_is_transparent() {
    let missing = MissingSymbol {
        function: "ncclAlltoAll",
        introduced_in: Some(Version::new(2, 28, 3)),
        loaded: Version::new(2, 27, 3),
    };
    let error = Error::from(missing.clone());
    assert_eq!(error.to_string(), missing.to_string());
    assert_eq!(
        error.to_string(),
        "ncclAlltoAll is not exported by the loaded libnccl 2.27.3: it was introduced in NCCL \
         2.28.3; load a newer libnccl (set NCCL_LIBRARY to its full path)"
    );
    assert_eq!(error.nccl_code(), None);
}

/// `Error` can cross threads and be boxed as a `std::error::Error`.
#[test]
fn error_is_a_thread_safe_std_error() {
    fn assert_std_error<E: std::error::Error + Send + Sync + 'static>() {}
    assert_std_error::<Error>();
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(Error::Aborted);
    assert_eq!(
        boxed.to_string(),
        "the communicator was aborted; create a new one"
    );
    assert!(
        boxed
            .downcast_ref::<Error>()
            .is_some_and(|e| matches!(e, Error::Aborted))
    );
}

/// One error of every variant but `Cuda` (whose driver error cannot be
/// shown without a driver), with the kind it must have.
fn one_of_each_variant() -> Vec<(Error, ErrorKind)> {
    vec![
        (
            Error::from_code("ncclAllReduce", ResultCode(3), None, None),
            ErrorKind::Nccl,
        ),
        (
            Error::Library(LoadError::NotNccl {
                path: "libfoo.so".to_string(),
            }),
            ErrorKind::Unavailable,
        ),
        (Error::NoCudaDriver, ErrorKind::Unavailable),
        (
            Error::MissingFunction(MissingSymbol {
                function: "ncclGather",
                introduced_in: Some(Version::new(2, 28, 3)),
                loaded: Version::new(2, 27, 3),
            }),
            ErrorKind::MissingFunction,
        ),
        (
            Error::Unsupported {
                feature: "ncclAlltoAll".to_string(),
                needed: Version::new(2, 28, 0),
                loaded: Version::new(2, 27, 3),
            },
            ErrorKind::Unsupported,
        ),
        (
            Error::RankOutOfRange {
                what: "peer",
                given: 9,
                world_size: 2,
            },
            ErrorKind::RankOutOfRange,
        ),
        (
            Error::WrongDevice {
                what: "stream",
                expected: 0,
                given: 1,
            },
            ErrorKind::WrongDevice,
        ),
        (
            Error::InvalidArgument {
                argument: "count",
                expected: "more".to_string(),
                given: "less".to_string(),
            },
            ErrorKind::InvalidArgument,
        ),
        (Error::Aborted, ErrorKind::Aborted),
        (Error::Finalized, ErrorKind::Closed),
        (Error::Revoked, ErrorKind::Aborted),
        (Error::Suspended, ErrorKind::Closed),
        (
            Error::Timeout {
                operation: "ncclCommInitRankConfig",
                waited: Duration::from_secs(1),
            },
            ErrorKind::Timeout,
        ),
    ]
}

#[test]
fn every_variant_has_its_kind_and_only_timeouts_are_timeouts() {
    for (error, kind) in one_of_each_variant() {
        assert_eq!(error.kind(), kind, "{error}");
        assert_eq!(error.is_timeout(), kind == ErrorKind::Timeout, "{error}");
    }
    let cuda = Error::Cuda {
        during: "an event record",
        source: DriverError(CUresult::CUDA_ERROR_INVALID_VALUE),
    };
    assert_eq!(cuda.kind(), ErrorKind::Cuda);
    assert!(!cuda.is_timeout());
    assert_eq!(cuda.nccl_code(), None);
}

/// `ncclRemoteError` is its own kind, one match arm for "a peer is
/// gone", and keeps its code; every other NCCL code stays `Nccl`.
#[test]
fn a_remote_error_is_a_lost_peer_with_its_code() {
    let remote = Error::from_code("ncclGroupEnd", ResultCode(6), None, None);
    assert_eq!(remote.kind(), ErrorKind::PeerLost);
    assert_eq!(remote.nccl_code(), Some(ResultCode(6)));
    assert!(ResultCode(6).is_remote_error());
    assert!(!remote.is_timeout());
    for code in [1, 2, 3, 4, 5, 7, 8, 9, 99] {
        assert!(!ResultCode(code).is_remote_error(), "{code}");
        let error = Error::from_code("ncclAllReduce", ResultCode(code), None, None);
        assert_eq!(error.kind(), ErrorKind::Nccl, "{error}");
    }
}

#[test]
fn nccl_code_is_the_nccl_calls_or_the_version_querys() {
    let codes: Vec<_> = one_of_each_variant()
        .iter()
        .map(|(error, _)| error.nccl_code())
        .collect();
    assert_eq!(codes[0], Some(ResultCode(3)));
    assert!(codes[1..].iter().all(Option::is_none), "{codes:?}");
    let version_query = Error::Library(LoadError::VersionQuery {
        path: "libnccl.so.2".to_string(),
        code: 3,
    });
    assert_eq!(version_query.nccl_code(), Some(ResultCode(3)));
    assert_eq!(version_query.kind(), ErrorKind::Unavailable);
    let negative = Error::Library(LoadError::VersionQuery {
        path: "libnccl.so.2".to_string(),
        code: -1,
    });
    assert_eq!(negative.nccl_code(), None);
}

#[test]
fn wrong_device_names_what_and_both_devices() {
    let error = Error::WrongDevice {
        what: "stream",
        expected: 0,
        given: 3,
    };
    assert_eq!(
        error.to_string(),
        "stream is on device 3, but the communicator is on device 0"
    );
}

/// The driver's error is the source, so the message does not repeat it
/// (showing a `DriverError` needs the driver, so only the outer message
/// is shown here).
#[test]
fn cuda_error_leaves_the_driver_error_to_its_source() {
    let error = Error::Cuda {
        during: "an event record",
        source: DriverError(CUresult::CUDA_ERROR_INVALID_VALUE),
    };
    assert_eq!(error.to_string(), "CUDA error during an event record");
    let source = std::error::Error::source(&error).expect("the driver's error");
    assert_eq!(
        source.downcast_ref::<DriverError>().map(|e| e.0),
        Some(CUresult::CUDA_ERROR_INVALID_VALUE)
    );
}

#[test]
fn no_variant_has_a_source_it_repeats() {
    for (error, _) in one_of_each_variant() {
        assert!(std::error::Error::source(&error).is_none(), "{error}");
    }
}

/// A wrapper whose message leaves its source out, for `ErrorChain`.
#[derive(Debug, thiserror::Error)]
#[error("rank 2")]
struct Wrapper(#[source] Error);

#[test]
fn error_chain_joins_every_message_of_the_chain() {
    let error = Wrapper(Error::Aborted);
    assert_eq!(
        ErrorChain(&error).to_string(),
        "rank 2: the communicator was aborted; create a new one"
    );
    assert_eq!(
        ErrorChain(&Error::Finalized).to_string(),
        Error::Finalized.to_string()
    );
}
