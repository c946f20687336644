//! The kinds, codes and conversions of group failures, which only this
//! crate can make.

use super::*;
use crate::failure::FailureCause;

fn failed(cause: FailureCause) -> GroupError {
    GroupError::Failed(Arc::new(Failure::new(
        "trainer".into(),
        0,
        0,
        2,
        cause,
        None,
        Vec::new(),
    )))
}

#[test]
fn a_failed_group_is_a_timeout_only_when_something_ran_past_its_timeout() {
    let timeout = Duration::from_secs(2);
    let timeouts = [
        FailureCause::Timeout {
            timeout,
            ran: Duration::from_millis(2010),
        },
        FailureCause::EnqueueBlocked {
            device: 0,
            timeout,
            blocked: Duration::from_millis(2010),
        },
        FailureCause::Creation {
            error: "creating the communicator did not finish".into(),
        },
    ];
    let others = [
        FailureCause::AsyncError {
            error: "an internal error".into(),
            nccl_code: Some(ResultCode(3)),
        },
        FailureCause::Cuda {
            error: "an illegal address".into(),
        },
        FailureCause::Aborted,
        FailureCause::Dropped,
        FailureCause::Enqueue {
            error: "an event record failed".into(),
        },
    ];
    for (causes, is_timeout) in [(timeouts.to_vec(), true), (others.to_vec(), false)] {
        for cause in causes {
            assert_eq!(cause.is_timeout(), is_timeout, "{cause}");
            let error = failed(cause);
            assert_eq!(error.kind(), ErrorKind::GroupFailed, "{error}");
            assert_eq!(error.is_timeout(), is_timeout, "{error}");
            assert_eq!(error.nccl_code(), cause_code(&error), "{error}");
            let op_error = OpError { error, buffers: () };
            assert_eq!(op_error.is_timeout(), is_timeout, "{op_error}");
            assert!(std::error::Error::source(&op_error).is_none());
            // `?` from a refusal keeps the failure itself.
            let converted = GroupError::from(Box::new(op_error));
            assert!(converted.failure().is_some(), "{converted}");
        }
    }
}

/// The code of the cause behind a failed group's error.
fn cause_code(error: &GroupError) -> Option<ResultCode> {
    error
        .failure()
        .and_then(|failure| failure.cause.nccl_code())
}

#[test]
fn a_lost_peer_is_one_kind_with_its_code_kept() {
    let lost = failed(FailureCause::AsyncError {
        error: "ncclCommGetAsyncError failed: ncclRemoteError (6): remote process exited".into(),
        nccl_code: Some(ResultCode(6)),
    });
    assert_eq!(lost.kind(), ErrorKind::PeerLost, "{lost}");
    assert_eq!(lost.nccl_code(), Some(ResultCode(6)));
    assert!(!lost.is_timeout());
    let failure = lost.failure().expect("the group's failure");
    assert!(failure.cause.is_peer_lost());
    assert_eq!(failure.rank, 0);

    // Another NCCL code fails the group, and keeps its code too.
    let internal = failed(FailureCause::AsyncError {
        error: "ncclInternalError".into(),
        nccl_code: Some(ResultCode(3)),
    });
    assert_eq!(internal.kind(), ErrorKind::GroupFailed);
    assert_eq!(internal.nccl_code(), Some(ResultCode(3)));
    assert!(!internal.failure().expect("failed").cause.is_peer_lost());

    // A call that NCCL answered with ncclRemoteError is a lost peer too.
    let call = GroupError::from(nccl_core::Error::from_code(
        "ncclGroupEnd",
        ResultCode(6),
        None,
        None,
    ));
    assert_eq!(call.kind(), ErrorKind::PeerLost);
    assert!(call.failure().is_none());
}

#[test]
fn a_host_read_refused_by_a_failure_still_names_it() {
    let failure = failed(FailureCause::Aborted);
    let GroupError::Failed(inner) = &failure else {
        unreachable!("made as Failed")
    };
    let inner = Arc::clone(inner);
    let error: nccl_tensor::ProducerError = Arc::new(failure);
    let wrapped = GroupError::Tensor(nccl_tensor::Error::ProducerFailed { error });
    let found = wrapped.failure().expect("the failure behind the read");
    assert!(Arc::ptr_eq(found, &inner));
}

#[test]
fn debug_leads_with_the_message_then_names_variant_and_kind() {
    let aborted = GroupError::Aborted {
        name: "trainer".into(),
    };
    let text = format!("{aborted:?}");
    assert!(text.starts_with(&aborted.to_string()), "{text}");
    assert!(
        text.ends_with("(nccl_group::GroupError::Aborted, kind Aborted)"),
        "{text}"
    );
    let refused = OpError {
        error: aborted,
        buffers: vec![0u8; 4],
    };
    let text = format!("{:?}", Box::new(refused));
    assert!(
        text.starts_with("process group \"trainer\" was aborted"),
        "{text}"
    );
    assert!(text.ends_with("refused with its buffers"), "{text}");
}

mod messages;
