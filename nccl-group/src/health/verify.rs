//! Whether an operation that was seen to end produced its result: the
//! clean checks of a group's communicators, and each operation's
//! [`Outcome`], which host reads of its tensors consult
//! ([`nccl_tensor::ResultCheck`]).
//!
//! An operation whose peer died can end without producing its result:
//! NCCL reports the error on the communicator (`ncclCommGetAsyncError`)
//! and its kernels stop early once the communicator is aborted, so the
//! end event completes over partial data. An end seen *before* a check
//! that found every communicator clean is a real end: the error, once
//! set, stays set, and it is set before the kernels stop. An end not yet
//! followed by a clean check is unverified; if the group fails first, its
//! result is suspect.
//!
//! Checks and ends are ordered by an epoch: seeing an end stamps it with
//! the current epoch; a check first moves the epoch on, then reads every
//! communicator's error, and when all are clean it verifies every stamp
//! below its own epoch. A stamp taken while a check runs equals that
//! check's epoch, so only a later check verifies it.
//!
//! A collective's result is also the one its ranks meant only if they
//! issued it alike: with the mismatch check on
//! ([`crate::diagnostics::fingerprints`]), its outcome also waits for the
//! check's verdict.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use nccl_tensor::{ProducerError, ResultCheck};

use crate::diagnostics::fingerprints::Fingerprints;
use crate::error::{GroupError, Result};
use crate::failure::Failure;

/// How long a host read waits between two looks while a communicator is
/// busy (another thread enqueueing): the watchdog's next tick settles it.
const BUSY_WAIT: Duration = Duration::from_millis(1);

/// A group's clean checks (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Verification {
    /// The current epoch: an end seen now gets this stamp.
    epoch: AtomicU64,
    /// Every stamp below this is verified.
    verified: AtomicU64,
    /// The group's name, for an error once the group is gone.
    name: Arc<str>,
}

impl Verification {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            epoch: AtomicU64::new(1),
            verified: AtomicU64::new(0),
            name: name.into(),
        }
    }

    /// The stamp of an end seen now.
    pub(crate) fn stamp(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Starts a check: its epoch, to give [`Verification::passed`] once
    /// every communicator was read clean after this call.
    pub(crate) fn begin(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The check of `epoch` found every communicator clean.
    pub(crate) fn passed(&self, epoch: u64) {
        self.verified.fetch_max(epoch, Ordering::SeqCst);
    }

    /// Every end, seen or not yet, is real: the communicators were
    /// finalized cleanly, which waits for all their work.
    pub(crate) fn seal(&self) {
        self.verified.store(u64::MAX, Ordering::SeqCst);
    }

    /// Whether an end stamped `stamp` is verified.
    pub(crate) fn covers(&self, stamp: u64) -> bool {
        stamp < self.verified.load(Ordering::SeqCst)
    }
}

/// What an operation's outcome needs from its group.
pub(crate) trait GroupChecks: Send + Sync {
    /// One clean check now: `Some(Ok)` when every communicator was read
    /// clean (the check passed), `Some(Err)` when the group is not live or
    /// a communicator reported an error (the group then fails),
    /// `None` when a communicator was busy and could not be read.
    fn check_now(self: Arc<Self>) -> Option<Result<()>>;

    /// Waits for the mismatch check's verdict on collective `seq`: `Ok`
    /// once every rank issued it alike, the group's error otherwise (the
    /// group then fails).
    fn verdict(self: Arc<Self>, seq: u64) -> Result<()>;

    /// `error`, the group's failure that a read of collective `seq` got,
    /// or the mismatch that caused it, if the mismatch check finds one
    /// soon.
    fn mismatch_instead(self: Arc<Self>, seq: u64, error: GroupError) -> GroupError;
}

/// What the outcomes of one group's operations share, made once with the
/// group: an operation takes one reference to it rather than one to each
/// part.
pub(crate) struct OutcomeScope {
    verification: Arc<Verification>,
    group: Weak<dyn GroupChecks>,
    /// The mismatch check, when it is on.
    fingerprints: Option<Arc<Fingerprints>>,
}

impl OutcomeScope {
    pub(crate) fn new(
        verification: Arc<Verification>,
        group: Weak<dyn GroupChecks>,
        fingerprints: Option<Arc<Fingerprints>>,
    ) -> Self {
        Self {
            verification,
            group,
            fingerprints,
        }
    }
}

/// What became of one operation, shared by its [`Work`](crate::Work), the
/// watchdog and the tensors it handed back.
pub(crate) struct Outcome {
    /// Why its group failed before it ended, if it did.
    failure: OnceLock<Arc<Failure>>,
    /// The stamp of its end, once seen (0: not yet).
    ended: AtomicU64,
    scope: Arc<OutcomeScope>,
    /// The operation's collective number, when the mismatch check
    /// compares it.
    collective: Option<u64>,
}

impl Outcome {
    /// The outcome of an operation of the group of `scope`; `collective`,
    /// its collective number where the scope's mismatch check compares it.
    pub(crate) fn new(scope: Arc<OutcomeScope>, collective: Option<u64>) -> Self {
        Self {
            failure: OnceLock::new(),
            ended: AtomicU64::new(0),
            scope,
            collective,
        }
    }

    /// Makes this the outcome of a new operation of the group of `scope`
    /// (in a finished operation's allocation: the same scope, the group's,
    /// is kept rather than counted again); `collective` as in
    /// [`Outcome::new`].
    pub(crate) fn renew(&mut self, scope: &Arc<OutcomeScope>, collective: Option<u64>) {
        let Self {
            failure,
            ended,
            scope: slot_scope,
            collective: slot_collective,
        } = self;
        *failure = OnceLock::new();
        *ended.get_mut() = 0;
        if !Arc::ptr_eq(slot_scope, scope) {
            *slot_scope = Arc::clone(scope);
        }
        *slot_collective = collective;
    }

    /// The mismatch check and the collective number it compares, if it
    /// does (none without the check, whatever the number).
    fn compared(&self) -> Option<(&Fingerprints, u64)> {
        Some((self.scope.fingerprints.as_deref()?, self.collective?))
    }

    /// Marks the operation failed with its group (the first failure stays).
    pub(crate) fn fail(&self, failure: &Arc<Failure>) {
        let _ = self.failure.set(Arc::clone(failure));
    }

    /// [`Outcome::failed`] for a caller that reports it: the mismatch
    /// that caused the failure instead, if the mismatch check finds one
    /// soon after it ([`GroupChecks::mismatch_instead`]). It may wait a
    /// moment once after a failure: not for polls.
    pub(crate) fn failed_error(&self) -> Option<GroupError> {
        let error = self.failed()?;
        match (self.compared(), self.scope.group.upgrade()) {
            (Some((fingerprints, seq)), Some(group)) if !fingerprints.agreed(seq) => {
                Some(group.mismatch_instead(seq, error))
            }
            _ => Some(error),
        }
    }

    /// The error of an operation its group failed under, if it did.
    pub(crate) fn failed(&self) -> Option<GroupError> {
        self.failure
            .get()
            .map(|failure| GroupError::Failed(Arc::clone(failure)))
    }

    /// Notes that the operation was seen to end (the first time counts).
    pub(crate) fn saw_end(&self) {
        let stamp = self.scope.verification.stamp();
        let _ = self
            .ended
            .compare_exchange(0, stamp, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether the operation produced its result: `Ok` once an end seen
    /// by the caller is followed by a clean check (running one now if
    /// none has yet, waiting for the watchdog while a communicator is
    /// busy) and, for a collective the mismatch check compares, once every
    /// rank issued it alike; the group's failure when it failed before that.
    ///
    /// The caller has seen the end (it synchronized with the operation).
    pub(crate) fn verify(&self) -> Result<()> {
        let ended = self.verify_end();
        let Some((fingerprints, seq)) = self.compared() else {
            return ended;
        };
        if fingerprints.agreed(seq) {
            return ended;
        }
        match (self.scope.group.upgrade(), ended) {
            (Some(group), Ok(())) => group.verdict(seq),
            (Some(group), Err(error)) => Err(group.mismatch_instead(seq, error)),
            (None, Err(error)) => Err(error),
            (None, Ok(())) => Err(GroupError::Destroyed {
                name: self.scope.verification.name.to_string(),
            }),
        }
    }

    /// The first half of [`Outcome::verify`]: the end and a clean check.
    fn verify_end(&self) -> Result<()> {
        if let Some(error) = self.failed() {
            return Err(error);
        }
        self.saw_end();
        let stamp = self.ended.load(Ordering::SeqCst);
        let verification = &self.scope.verification;
        loop {
            if verification.covers(stamp) {
                return Ok(());
            }
            if let Some(error) = self.failed() {
                return Err(error);
            }
            let Some(group) = self.scope.group.upgrade() else {
                return Err(GroupError::Destroyed {
                    name: verification.name.to_string(),
                });
            };
            match group.check_now() {
                Some(Ok(())) if verification.covers(stamp) => return Ok(()),
                Some(Ok(())) => {}
                Some(Err(error)) => return Err(error),
                None => std::thread::sleep(BUSY_WAIT),
            }
        }
    }
}

impl ResultCheck for Outcome {
    fn check(&self) -> std::result::Result<(), ProducerError> {
        self.verify()
            .map_err(|error| Arc::new(error) as ProducerError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureCause;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    /// A group whose checks answer from a script, one answer per call
    /// (the last one repeats), counting the calls.
    struct Scripted {
        verification: Arc<Verification>,
        answers: Mutex<Vec<Answer>>,
        calls: AtomicUsize,
        /// The collectives whose verdict was asked for.
        verdicts: Mutex<Vec<u64>>,
    }

    #[derive(Clone, Copy)]
    enum Answer {
        Clean,
        Busy,
        Failed,
    }

    impl GroupChecks for Scripted {
        fn check_now(self: Arc<Self>) -> Option<Result<()>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let answer = {
                let mut answers = self.answers.lock().unwrap();
                if answers.len() > 1 {
                    answers.remove(0)
                } else {
                    answers[0]
                }
            };
            match answer {
                Answer::Clean => {
                    let epoch = self.verification.begin();
                    self.verification.passed(epoch);
                    Some(Ok(()))
                }
                Answer::Busy => None,
                Answer::Failed => Some(Err(GroupError::Failed(failure()))),
            }
        }

        fn verdict(self: Arc<Self>, seq: u64) -> Result<()> {
            self.verdicts.lock().unwrap().push(seq);
            Ok(())
        }

        fn mismatch_instead(self: Arc<Self>, _seq: u64, error: GroupError) -> GroupError {
            error
        }
    }

    fn failure() -> Arc<Failure> {
        Arc::new(Failure::new(
            "test".into(),
            0,
            0,
            2,
            FailureCause::AsyncError {
                error: "remote process exited".into(),
                nccl_code: Some(nccl_core::ResultCode(6)),
            },
            None,
            Vec::new(),
        ))
    }

    fn scripted(answers: &[Answer]) -> (Arc<Scripted>, Outcome) {
        let (group, scope) = scripted_scope(answers, None);
        (group, Outcome::new(scope, None))
    }

    /// A scripted group and its outcome scope, with `fingerprints` as its
    /// mismatch check.
    fn scripted_scope(
        answers: &[Answer],
        fingerprints: Option<Arc<Fingerprints>>,
    ) -> (Arc<Scripted>, Arc<OutcomeScope>) {
        let verification = Arc::new(Verification::new("test"));
        let group = Arc::new(Scripted {
            verification: Arc::clone(&verification),
            answers: Mutex::new(answers.to_vec()),
            calls: AtomicUsize::new(0),
            verdicts: Mutex::default(),
        });
        let weak: Weak<dyn GroupChecks> = Arc::downgrade(&group) as _;
        let scope = Arc::new(OutcomeScope::new(verification, weak, fingerprints));
        (group, scope)
    }

    #[test]
    fn a_collective_waits_for_its_own_verdict_only_with_the_check() {
        let checked = Some(Arc::new(Fingerprints::new(0, 2)));
        let (group, scope) = scripted_scope(&[Answer::Clean], checked);
        Outcome::new(Arc::clone(&scope), Some(7))
            .verify()
            .expect("verified");
        Outcome::new(scope, None)
            .verify()
            .expect("not a collective");
        assert_eq!(*group.verdicts.lock().unwrap(), [7]);

        let (group, scope) = scripted_scope(&[Answer::Clean], None);
        Outcome::new(scope, Some(7)).verify().expect("verified");
        assert!(group.verdicts.lock().unwrap().is_empty(), "no check, no verdict");
    }

    #[test]
    fn a_renewed_outcome_is_a_new_operation_s_of_its_scope() {
        let checked = Some(Arc::new(Fingerprints::new(0, 2)));
        let (group, scope) = scripted_scope(&[Answer::Clean], checked);
        let (_, other) = scripted_scope(&[Answer::Clean], None);
        let mut outcome = Outcome::new(Arc::clone(&other), None);
        outcome.saw_end();
        outcome.fail(&failure());
        assert!(outcome.failed().is_some());

        outcome.renew(&scope, Some(3));
        assert!(outcome.failed().is_none(), "the last operation's failure is gone");
        assert_eq!(*outcome.ended.get_mut(), 0, "its end is not seen yet");
        assert!(Arc::ptr_eq(&outcome.scope, &scope));
        // The new collective number's verdict, in the new scope's check.
        outcome.verify().expect("verified");
        assert_eq!(*group.verdicts.lock().unwrap(), [3]);
    }

    #[test]
    fn an_end_followed_by_a_clean_check_is_the_result() {
        let (group, outcome) = scripted(&[Answer::Clean]);
        outcome.verify().expect("verified");
        // Verified once: later reads ask the group nothing.
        outcome.verify().expect("still verified");
        assert_eq!(group.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_end_the_watchdog_already_verified_needs_no_check() {
        let (group, outcome) = scripted(&[Answer::Failed]);
        outcome.saw_end();
        let epoch = group.verification.begin();
        group.verification.passed(epoch);
        outcome.verify().expect("verified by the earlier check");
        assert_eq!(group.calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_group_that_fails_before_a_clean_check_refuses_the_result() {
        let (_group, outcome) = scripted(&[Answer::Busy, Answer::Busy, Answer::Failed]);
        match outcome.verify() {
            Err(GroupError::Failed(failure)) => {
                assert!(matches!(failure.cause, FailureCause::AsyncError { .. }))
            }
            other => panic!("expected the group's failure, got {other:?}"),
        }
    }

    #[test]
    fn a_busy_communicator_is_waited_out() {
        let (group, outcome) = scripted(&[Answer::Busy, Answer::Busy, Answer::Clean]);
        outcome
            .verify()
            .expect("verified once the communicator was free");
        assert_eq!(group.calls.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn an_operation_failed_with_its_group_is_refused_without_a_check() {
        let (group, outcome) = scripted(&[Answer::Clean]);
        outcome.fail(&failure());
        assert!(matches!(outcome.verify(), Err(GroupError::Failed(_))));
        assert_eq!(group.calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_unverified_end_of_a_dropped_group_is_refused() {
        let (group, outcome) = scripted(&[Answer::Clean]);
        drop(group);
        match outcome.verify() {
            Err(GroupError::Destroyed { name }) => assert_eq!(name, "test"),
            other => panic!("expected Destroyed, got {other:?}"),
        }
    }

    #[test]
    fn the_result_check_hands_the_group_error_to_the_tensor() {
        let (_group, outcome) = scripted(&[Answer::Failed]);
        let error = ResultCheck::check(&outcome).expect_err("the group failed");
        assert!(matches!(
            error.downcast_ref::<GroupError>(),
            Some(GroupError::Failed(_))
        ));
        let converted: GroupError = nccl_tensor::Error::ProducerFailed { error }.into();
        assert!(matches!(converted, GroupError::Failed(_)), "{converted:?}");
    }

    #[test]
    fn an_end_is_verified_only_by_a_check_that_began_after_it() {
        let v = Verification::new("test");
        let before = v.stamp();
        let check = v.begin();
        // Seen while the check runs: not covered by it.
        let during = v.stamp();
        v.passed(check);
        assert!(v.covers(before));
        assert!(!v.covers(during));
        let next = v.begin();
        v.passed(next);
        assert!(v.covers(during));
    }

    #[test]
    fn a_check_that_finds_an_error_verifies_nothing_new() {
        let v = Verification::new("test");
        let first = v.begin();
        v.passed(first);
        let seen = v.stamp();
        let _failed = v.begin(); // an error was read: no `passed`
        assert!(!v.covers(seen));
    }

    #[test]
    fn an_older_check_passing_late_does_not_undo_a_newer_one() {
        let v = Verification::new("test");
        let older = v.begin();
        let seen = v.stamp();
        let newer = v.begin();
        v.passed(newer);
        v.passed(older);
        assert!(v.covers(seen));
    }

    #[test]
    fn a_sealed_group_verifies_every_end() {
        let v = Verification::new("test");
        let _ = v.begin();
        let seen = v.stamp();
        v.seal();
        assert!(v.covers(seen));
        assert!(v.covers(u64::MAX - 1));
    }
}
