//! NCCL's RAS asked beside a failure's release, not before it.
//!
//! Why: once a peer is gone, RAS answers in about half a second (NCCL
//! 2.28.9 and 2.30.7; 2.28.3 answered at once), and a heal waits for the
//! release to begin: asked first, RAS held every heal up by that long
//! (`docs/measurements/h200-2026-12-06g`). RAS lists a communicator only
//! until its abort, so the question gets a head start: the release begins
//! once RAS answered or [`HEAD_START`] passed, time enough for a question
//! on a local socket to arrive and for an answer that comes at once (no
//! peer gone, or NCCL 2.28.3) to be whole. A communicator whose abort ends
//! before a slower answer looks may be missing from it.

use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use crate::diagnostics::ras::{self, RasLimits, RasReport};

/// How long the release waits for RAS's answer before it begins.
pub(crate) const HEAD_START: Duration = Duration::from_millis(50);

/// RAS's answer to a failure, or the question still open.
pub(crate) enum RasBeside {
    /// The answer (or why there is none).
    Answered(RasReport),
    /// Asked on a thread of its own, which sends the answer.
    Asked(Receiver<RasReport>),
}

impl RasBeside {
    /// Asks the RAS service the environment names, within `limits`, on a
    /// thread of its own, and waits for the answer at most [`HEAD_START`];
    /// where no thread can be spawned, asks here and waits for it all.
    pub(crate) fn ask(limits: RasLimits) -> Self {
        let (answer, answered) = mpsc::channel();
        let asked = limits.clone();
        let asking = std::thread::Builder::new()
            .name("nccl-group-ras".to_string())
            .spawn(move || {
                // No one listening any more: the failure ended without it.
                let _ = answer.send(ras::query_from_env(&asked));
            });
        if asking.is_err() {
            return RasBeside::Answered(ras::query_from_env(&limits));
        }
        match answered.recv_timeout(HEAD_START) {
            Ok(report) => RasBeside::Answered(report),
            Err(_) => RasBeside::Asked(answered),
        }
    }

    /// The answer, waited for (the question is bounded by its limits).
    pub(crate) fn answer(self) -> RasReport {
        match self {
            RasBeside::Answered(report) => report,
            RasBeside::Asked(answered) => answered.recv().unwrap_or_else(|_| {
                RasReport::unavailable("the thread asking RAS ended without an answer")
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_that_came_in_time_or_late_is_the_answer() {
        let answered = RasBeside::Answered(RasReport::unavailable("off"));
        assert_eq!(answered.answer(), RasReport::unavailable("off"));
        let (answer, answered) = mpsc::channel();
        let late = RasBeside::Asked(answered);
        answer.send(RasReport::unavailable("late")).expect("sent");
        assert_eq!(late.answer(), RasReport::unavailable("late"));
        let (answer, answered) = mpsc::channel::<RasReport>();
        drop(answer);
        let lost = RasBeside::Asked(answered);
        assert_eq!(
            lost.answer(),
            RasReport::unavailable("the thread asking RAS ended without an answer")
        );
    }
}
