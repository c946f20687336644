//! Bounded helper threads: a call (an abort, a destroy) that may stall
//! inside NCCL runs on a thread of its own, and its caller waits for it
//! only so long.

use std::time::Duration;

/// The outcome of a bounded call.
#[derive(Debug, PartialEq, Eq)]
pub enum Bounded<T> {
    /// It returned this within the bound.
    Returned(T),
    /// It was still running when the bound passed; it was left running on
    /// its own thread.
    Stalled,
}

/// Runs `work` on a new thread and waits for it at most `bound`: an abort
/// that stalls inside NCCL must not take its caller with it.
pub fn run_bounded<T: Send + 'static>(
    name: &str,
    bound: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Bounded<T> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let _ = sender.send(work());
        });
    if spawned.is_err() {
        return Bounded::Stalled;
    }
    match receiver.recv_timeout(bound) {
        Ok(value) => Bounded::Returned(value),
        Err(_) => Bounded::Stalled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Longer than any wait that must end: a hang guard, not a
    /// performance claim.
    const PATIENCE: Duration = Duration::from_secs(60);

    #[test]
    fn bounded_calls_return_or_are_left_behind() {
        assert_eq!(run_bounded("quick", PATIENCE, || 7), Bounded::Returned(7));
        // The stuck call ends on its own only after the hang guard; a
        // bound not kept would give `Returned(false)` then, not `Stalled`.
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let outcome = run_bounded("stuck", Duration::from_millis(50), move || {
            wait.recv_timeout(PATIENCE).is_ok()
        });
        assert_eq!(outcome, Bounded::Stalled);
        drop(release);
    }
}
