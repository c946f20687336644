//! CPU tests of the group layer's errors: `kind()`, `nccl_code()` and
//! `is_timeout()` of every `StoreError`, `GroupError` and `OpError`
//! variant, answered at the top as the innermost error would through every
//! layer of nesting, and no message printed twice in a `source()` chain.
//! No NCCL and no GPU needed. (`GroupError::Failed` needs a `Failure`,
//! which only the crate builds: its unit tests cover it.)

use std::error::Error as StdError;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use nccl_core::cudarc::driver::{DriverError, sys::CUresult};
use nccl_core::{ErrorChain, ResultCode};
use nccl_group::{ErrorKind, GroupError, OpError, StoreError};

/// Walks `error`'s `source()` chain and fails if any message contains the
/// message of its source (the source would be printed twice). The one
/// exception is `StoreError::Io`, whose message names the operating
/// system's error on purpose (a log line that prints only the error says
/// "No space left on device") while keeping it as its source, for callers
/// that downcast to `io::Error`.
fn assert_no_message_repeats(error: &(dyn StdError + 'static)) {
    let mut current = error;
    while let Some(source) = current.source() {
        let (outer, inner) = (current.to_string(), source.to_string());
        let names_its_os_error = matches!(
            current.downcast_ref::<StoreError>(),
            Some(StoreError::Io { .. })
        ) || matches!(
            current.downcast_ref::<GroupError>(),
            Some(GroupError::Store(StoreError::Io { .. }))
        );
        assert!(
            names_its_os_error || !outer.contains(&inner),
            "{outer:?} repeats its source {inner:?}"
        );
        current = source;
    }
}

fn os_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionRefused,
        "connection refused (os error 111)",
    )
}

/// One store error of every variant, with its kind.
fn one_of_each_store_variant() -> Vec<(StoreError, ErrorKind)> {
    let addr = || "127.0.0.1:29500".to_string();
    let store = || "TCP store at 127.0.0.1:29500".to_string();
    let failed = ErrorKind::Store;
    vec![
        (
            StoreError::Timeout {
                op: "get",
                keys: vec!["k".to_string()],
                store: store(),
                waited: Duration::from_secs(1),
            },
            ErrorKind::Timeout,
        ),
        (
            StoreError::NotAnInteger {
                key: "k".to_string(),
                value: "\"x\" (1 bytes)".to_string(),
                store: store(),
            },
            ErrorKind::InvalidArgument,
        ),
        (
            StoreError::Overflow {
                key: "k".to_string(),
                current: i64::MAX,
                delta: 1,
                store: store(),
            },
            ErrorKind::InvalidArgument,
        ),
        (
            StoreError::Connect {
                addr: addr(),
                attempts: 3,
                waited: Duration::from_secs(5),
                source: os_error(),
            },
            failed,
        ),
        (
            StoreError::Bind {
                addr: addr(),
                source: io::Error::new(io::ErrorKind::AddrInUse, "address in use"),
            },
            failed,
        ),
        (
            StoreError::ConnectionClosed {
                addr: addr(),
                op: "get k".to_string(),
            },
            failed,
        ),
        (
            StoreError::Unresponsive {
                addr: addr(),
                op: "get k".to_string(),
                waited: Duration::from_secs(3),
            },
            failed,
        ),
        (
            StoreError::Auth {
                addr: addr(),
                detail: "wrong secret".to_string(),
            },
            failed,
        ),
        (
            StoreError::TooManyConnections {
                addr: addr(),
                detail: "limit 4".to_string(),
            },
            failed,
        ),
        (
            StoreError::FrameTooLarge {
                context: "set k".to_string(),
                len: 10,
                max: 4,
            },
            failed,
        ),
        (
            StoreError::Excluded {
                rank: 2,
                generation: 1,
                reason: nccl_group::store::meet::agree::ExclusionReason::NotArrived,
                survivors: vec![0, 1, 3],
            },
            ErrorKind::Excluded,
        ),
        (
            StoreError::TooFewSurvivors {
                generation: 1,
                survivors: vec![0],
                min_survivors: 2,
                world_size: 4,
            },
            ErrorKind::TooFewSurvivors,
        ),
        (
            StoreError::Protocol {
                addr: addr(),
                detail: "bad magic".to_string(),
            },
            failed,
        ),
        (
            StoreError::Remote {
                addr: addr(),
                message: "disk full".to_string(),
            },
            failed,
        ),
        (
            StoreError::Io {
                context: "writing /tmp/store/k".to_string(),
                source: io::Error::new(io::ErrorKind::PermissionDenied, "permission denied"),
            },
            failed,
        ),
        (
            StoreError::Lock {
                path: PathBuf::from("/tmp/store/.lock"),
                waited: Duration::from_secs(1),
                age: None,
            },
            failed,
        ),
        (
            StoreError::InvalidArgument {
                what: "store prefix",
                given: "\"a/b\"".to_string(),
                expected: "a name without '/'".to_string(),
            },
            ErrorKind::InvalidArgument,
        ),
        (
            StoreError::Config {
                var: "WORLD_SIZE".to_string(),
                message: "WORLD_SIZE is not set".to_string(),
            },
            ErrorKind::Config,
        ),
    ]
}

fn core_timeout() -> nccl_core::Error {
    nccl_core::Error::Timeout {
        operation: "ncclCommInitRankConfig",
        waited: Duration::from_secs(2),
    }
}

fn core_nccl_error() -> nccl_core::Error {
    nccl_core::Error::from_code("ncclCommInitRankConfig", ResultCode(6), None, None)
}

/// One group error of every variant but `Failed` and `Cuda`, with its kind.
fn one_of_each_group_variant() -> Vec<(GroupError, ErrorKind)> {
    let name = || "trainer".to_string();
    vec![
        (
            GroupError::Store(StoreError::ConnectionClosed {
                addr: "127.0.0.1:29500".to_string(),
                op: "get k".to_string(),
            }),
            ErrorKind::Store,
        ),
        (
            GroupError::Tensor(nccl_tensor::Error::AliasedCells { op: "all_reduce" }),
            ErrorKind::InvalidArgument,
        ),
        (
            GroupError::Rendezvous {
                key: "trainer/0/comm/x1/0".to_string(),
                creator: 0,
                store: "127.0.0.1:29500".to_string(),
                waited: Duration::from_secs(1),
            },
            ErrorKind::Timeout,
        ),
        (GroupError::Aborted { name: name() }, ErrorKind::Aborted),
        (
            GroupError::AbortStalled {
                name: name(),
                waited: Duration::from_secs(10),
            },
            ErrorKind::Timeout,
        ),
        (
            GroupError::InitTimeout {
                key: "trainer/0/comm/x1/0".to_string(),
                waited: Duration::from_secs(2),
                missing: vec![1, 3],
                source: Box::new(GroupError::from(core_timeout())),
            },
            ErrorKind::Timeout,
        ),
        (GroupError::Closed { name: name() }, ErrorKind::Closed),
        (GroupError::Destroyed { name: name() }, ErrorKind::Closed),
        (
            GroupError::InvalidArgument {
                argument: "rank",
                expected: "0..4".to_string(),
                given: "4".to_string(),
            },
            ErrorKind::InvalidArgument,
        ),
        (
            GroupError::Timeout {
                operation: "barrier",
                waited: Duration::from_secs(1),
            },
            ErrorKind::Timeout,
        ),
        (
            GroupError::WatchdogStart {
                source: io::Error::other("the process could not start the thread"),
            },
            ErrorKind::Io,
        ),
        (
            GroupError::Capture {
                op: "all_reduce",
                reason: nccl_group::Uncapturable::SeparateStream,
            },
            ErrorKind::Unsupported,
        ),
        (
            GroupError::GraphsAlive {
                name: name(),
                action: "healed",
                graphs: 2,
            },
            ErrorKind::InvalidArgument,
        ),
        (
            GroupError::SubGroupsAlive {
                name: name(),
                subgroups: vec!["trainer/sub0".into()],
            },
            ErrorKind::InvalidArgument,
        ),
        (
            GroupError::Healed {
                name: name(),
                generation: 0,
                successor: 1,
            },
            ErrorKind::Healed,
        ),
        (
            GroupError::Suspended {
                name: name(),
                action: "issuing operations",
            },
            ErrorKind::Suspended,
        ),
        (
            GroupError::NotOffered {
                name: name(),
                ticket: 3,
                store: "127.0.0.1:29500".into(),
                offers: 2,
                timeout: Duration::from_secs(60),
            },
            ErrorKind::Timeout,
        ),
        (
            GroupError::Dump(nccl_group::dumps::DumpError::NoFolder),
            ErrorKind::InvalidArgument,
        ),
        (
            GroupError::Dump(nccl_group::dumps::DumpError::Io {
                path: "/tmp/dumps/trainer-g0-failure/rank0.json".into(),
                source: io::Error::other("no space left on device"),
            }),
            ErrorKind::Io,
        ),
    ]
}

#[test]
fn every_store_variant_has_its_kind_and_only_a_store_timeout_is_a_timeout() {
    for (error, kind) in one_of_each_store_variant() {
        assert_eq!(ErrorKind::from(error.kind()), kind, "{error}");
        assert_eq!(error.is_timeout(), kind == ErrorKind::Timeout, "{error}");
        assert_no_message_repeats(&error);
    }
}

#[test]
fn a_store_error_answers_the_same_inside_a_group_error() {
    for (store, kind) in one_of_each_store_variant() {
        let timeout = store.is_timeout();
        let error = GroupError::from(store);
        assert_eq!(error.kind(), kind, "{error}");
        assert_eq!(error.is_timeout(), timeout, "{error}");
        assert_eq!(error.nccl_code(), None, "{error}");
        assert_no_message_repeats(&error);
    }
}

#[test]
fn every_group_variant_has_its_kind_and_says_whether_it_is_a_timeout() {
    for (error, kind) in one_of_each_group_variant() {
        assert_eq!(error.kind(), kind, "{error}");
        assert_eq!(error.is_timeout(), kind == ErrorKind::Timeout, "{error}");
        assert_no_message_repeats(&error);
    }
}

/// `GroupError::Tensor(nccl_tensor::Error::Core(..))` answers at the top
/// what the core error would, for every core kind that reaches the group.
#[test]
fn a_core_error_three_layers_down_answers_at_the_top() {
    let cores = [
        core_timeout(),
        core_nccl_error(),
        nccl_core::Error::WrongDevice {
            what: "stream",
            expected: 0,
            given: 1,
        },
        nccl_core::Error::Aborted,
        nccl_core::Error::NoCudaDriver,
    ];
    for core in cores {
        let (kind, code, timeout, text) = (
            core.kind(),
            core.nccl_code(),
            core.is_timeout(),
            core.to_string(),
        );
        let nested = GroupError::Tensor(nccl_tensor::Error::Core(core));
        assert_eq!(nested.kind(), ErrorKind::from(kind), "{nested}");
        assert_eq!(nested.nccl_code(), code, "{nested}");
        assert_eq!(nested.is_timeout(), timeout, "{nested}");
        assert_eq!(nested.to_string(), text, "transparent layers");
        assert_no_message_repeats(&nested);
    }
    let timeout = GroupError::Tensor(nccl_tensor::Error::Core(core_timeout()));
    assert_eq!(timeout.kind(), ErrorKind::Timeout);
    assert!(timeout.is_timeout());
    // ncclRemoteError is a lost peer, at every layer, with its code.
    let nccl = GroupError::from(core_nccl_error());
    assert_eq!(nccl.kind(), ErrorKind::PeerLost);
    assert_eq!(nccl.nccl_code(), Some(ResultCode(6)));
    let internal = nccl_core::Error::from_code("ncclAllReduce", ResultCode(3), None, None);
    assert_eq!(GroupError::from(internal).kind(), ErrorKind::Nccl);
}

/// The tensor layer's wrong-device check reaches the group as it is.
#[test]
fn a_wrong_device_is_one_kind_at_every_layer() {
    let tensor = GroupError::Tensor(nccl_tensor::Error::WrongDevice {
        op: "all_reduce",
        what: "tensor",
        expected: 0,
        given: 1,
    });
    let core = GroupError::from(nccl_core::Error::WrongDevice {
        what: "stream",
        expected: 0,
        given: 1,
    });
    assert_eq!(tensor.kind(), ErrorKind::WrongDevice);
    assert_eq!(core.kind(), ErrorKind::WrongDevice);
}

/// An init timeout is a timeout whatever NCCL said; its NCCL code is the
/// wrapped error's; its message names the missing ranks and leaves NCCL's
/// message to the source, which the chain prints once.
#[test]
fn an_init_timeout_forwards_the_code_and_prints_nccls_message_once() {
    let init_timeout = |source: nccl_core::Error| GroupError::InitTimeout {
        key: "absent/0/comm/x1/0".to_string(),
        waited: Duration::from_secs(2),
        missing: vec![1],
        source: Box::new(GroupError::from(source)),
    };
    let with_code = init_timeout(core_nccl_error());
    assert_eq!(with_code.kind(), ErrorKind::Timeout);
    assert!(with_code.is_timeout());
    assert_eq!(with_code.nccl_code(), Some(ResultCode(6)));

    let error = init_timeout(core_timeout());
    assert_eq!(error.nccl_code(), None);
    let message = error.to_string();
    assert!(message.contains("ranks [1] never joined"), "{message}");
    assert!(!message.contains("ncclCommInitRankConfig"), "{message}");
    let chain = ErrorChain(&error).to_string();
    assert_eq!(chain, format!("{message}: {}", core_timeout()));
    assert_eq!(
        chain.matches("ncclCommInitRankConfig").count(),
        1,
        "{chain}"
    );
    assert_no_message_repeats(&error);
}

/// `OpError` is transparent: its message, source and answers are its
/// error's, so the chain does not print the error twice.
#[test]
fn an_op_error_is_transparent() {
    let buffers = vec![1.0f32; 4];
    for (error, kind) in one_of_each_group_variant() {
        let (text, timeout) = (error.to_string(), error.is_timeout());
        let source_text = error.source().map(ToString::to_string);
        let op_error = OpError {
            error,
            buffers: buffers.clone(),
        };
        assert_eq!(op_error.to_string(), text);
        assert_eq!(op_error.source().map(ToString::to_string), source_text);
        assert_eq!(op_error.kind(), kind, "{op_error}");
        assert_eq!(op_error.is_timeout(), timeout, "{op_error}");
        assert_no_message_repeats(&op_error);
    }
    let op_error = OpError {
        error: GroupError::from(core_nccl_error()),
        buffers,
    };
    assert_eq!(op_error.nccl_code(), Some(ResultCode(6)));
    assert_eq!(op_error.buffers.len(), 4, "the caller keeps the buffers");
}

#[test]
fn a_watchdog_that_cannot_start_has_its_own_variant() {
    let error = GroupError::WatchdogStart {
        source: io::Error::other("the process could not start the nccl-group watchdog thread"),
    };
    assert_eq!(error.kind(), ErrorKind::Io);
    assert!(!error.is_timeout());
    assert!(error.to_string().contains("watchdog thread"), "{error}");
    assert!(
        error
            .source()
            .is_some_and(|source| source.is::<io::Error>())
    );
}

/// The driver's error is the source only (showing it needs a driver); a
/// group's CUDA error is nccl-core's one `Cuda` variant.
#[test]
fn a_group_cuda_error_leaves_the_driver_error_to_its_source() {
    let error = GroupError::from(nccl_core::Error::cuda("an event record")(DriverError(
        CUresult::CUDA_ERROR_LAUNCH_FAILED,
    )));
    assert_eq!(error.kind(), ErrorKind::Cuda);
    assert!(!error.is_timeout());
    assert_eq!(error.nccl_code(), None);
    assert_eq!(error.to_string(), "CUDA error during an event record");
    assert!(
        error
            .source()
            .is_some_and(|source| source.is::<DriverError>())
    );
}

#[test]
fn store_messages_leave_the_os_error_to_the_source() {
    let error = StoreError::Connect {
        addr: "127.0.0.1:29500".to_string(),
        attempts: 3,
        waited: Duration::from_secs(5),
        source: os_error(),
    };
    let message = error.to_string();
    assert!(
        message.contains("127.0.0.1:29500") && message.contains("3 attempt(s)"),
        "{message}"
    );
    assert!(!message.contains("os error 111"), "{message}");
    assert_eq!(
        ErrorChain(&error).to_string(),
        format!("{message}: connection refused (os error 111)")
    );
}

/// `?` takes an operation's refusal (boxed, as `OpResult` has it) into
/// `GroupError`, the error `wait` gives too: one error path.
#[test]
fn question_mark_takes_a_refusal_into_the_group_error() {
    fn issue(refusal: GroupError) -> Result<Vec<f32>, Box<OpError<Vec<f32>>>> {
        Err(Box::new(OpError {
            error: refusal,
            buffers: vec![1.0; 4],
        }))
    }
    fn step(refusal: GroupError) -> Result<Vec<f32>, GroupError> {
        let buffers = issue(refusal)?;
        Ok(buffers)
    }
    for (error, kind) in one_of_each_group_variant() {
        let text = error.to_string();
        let converted = step(error).expect_err("refused");
        assert_eq!(converted.kind(), kind, "{converted}");
        assert_eq!(converted.to_string(), text);
    }
    let unboxed = GroupError::from(OpError {
        error: GroupError::from(core_nccl_error()),
        buffers: (),
    });
    assert_eq!(unboxed.nccl_code(), Some(ResultCode(6)));
}

/// `Debug` leads with the message and its sources, so `fn main() ->
/// Result<(), GroupError>` prints the sentence, then names the variant
/// and the kind.
#[test]
fn debug_prints_the_sentence_first() {
    for (error, kind) in one_of_each_group_variant() {
        let debug = format!("{error:?}");
        let chain = ErrorChain(&error).to_string();
        assert!(debug.starts_with(&chain), "{debug}");
        assert!(debug.ends_with(&format!(", kind {kind:?})")), "{debug}");
        assert!(debug.contains("(nccl_group::GroupError::"), "{debug}");
    }
    let config = GroupError::Store(StoreError::Config {
        var: "WORLD_SIZE".to_string(),
        message: "WORLD_SIZE is not set".to_string(),
    });
    assert!(
        format!("{config:?}").starts_with("WORLD_SIZE is not set"),
        "{config:?}"
    );
}
