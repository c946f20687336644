//! Releasing a generation's communicators, each on a helper thread of its
//! own, so that a caller needing only the GPU quiet goes on before the
//! slow part ends.
//!
//! `ncclCommAbort` first sets the communicator's abort flags, which its
//! kernels still running stop at, and then tears it down: its proxy thread,
//! sockets and memory, most of its time (about half a second after a lost
//! peer). A heal needs only the first step before its next generation
//! issues on the same streams, so it waits for every release to have
//! [begun](Release::wait_begun), and the teardown ends off its path. A
//! revoke counts as begun once it has ended: a shrink needs it whole. One
//! thread per communicator also keeps one stalled abort from holding up
//! the others.

use std::sync::{Arc, Mutex, PoisonError};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use crate::engine::local_comms::LocalComms;
use crate::failure::{AbortOutcome, Failure};

/// What a release thread reports, in this order.
enum Step {
    /// The GPU is quiet, or about to be: revoked, or the abort called.
    Begun,
    /// The call returned, then.
    Ended(Instant),
}

/// The releases of a set of communicators, under way.
pub(crate) struct Release {
    started: Instant,
    threads: usize,
    begun: usize,
    ended: usize,
    /// When the last release to end ended.
    last_end: Option<Instant>,
    steps: Receiver<Step>,
}

impl Release {
    /// Starts releasing every communicator of `comms`: revoked where
    /// `revoke` asks and the communicator can be
    /// ([`Member::release`](crate::engine::member::Member::release)),
    /// aborted otherwise. A release whose thread cannot be spawned runs
    /// on the calling thread.
    pub(crate) fn begin(comms: &[Arc<LocalComms>], revoke: bool) -> Self {
        let each = comms.iter().flat_map(|comms| {
            (0..comms.members.len()).map(move |index| {
                let comms = Arc::clone(comms);
                move |begun: &dyn Fn()| comms.members[index].release(revoke, begun)
            })
        });
        Self::spawn(each)
    }

    /// Runs each release on a thread of its own (on this one where no
    /// thread can be spawned); a release calls the function it is given
    /// once it has begun.
    fn spawn<F>(releases: impl IntoIterator<Item = F>) -> Self
    where
        F: FnOnce(&dyn Fn()) + Send + 'static,
    {
        let started = Instant::now();
        let (sender, steps) = channel();
        let mut threads = 0;
        for release in releases {
            threads += 1;
            let sender = sender.clone();
            let run = move |release: F| {
                release(&|| {
                    let _ = sender.send(Step::Begun);
                });
                let _ = sender.send(Step::Ended(Instant::now()));
            };
            // The spawn hands the release back when it fails, through
            // this slot, so that it runs here instead.
            let slot = Arc::new(Mutex::new(Some((release, run))));
            let theirs = Arc::clone(&slot);
            let spawned = std::thread::Builder::new()
                .name("nccl-group-release".to_string())
                .spawn(move || {
                    if let Some((release, run)) = take(&theirs) {
                        run(release);
                    }
                });
            if spawned.is_err()
                && let Some((release, run)) = take(&slot)
            {
                run(release);
            }
        }
        Self {
            started,
            threads,
            begun: 0,
            ended: 0,
            last_end: None,
            steps,
        }
    }

    /// Waits until every release has begun, at most `bound` after
    /// [`begin`](Self::begin); whether they all did.
    pub(crate) fn wait_begun(&mut self, bound: Duration) -> bool {
        self.wait_until(bound, Self::all_begun)
    }

    /// Waits until every release has ended, at most `bound` after
    /// [`begin`](Self::begin): how long they took (not how long this
    /// waited, which may be later); one still running then is left to end
    /// on its own thread.
    pub(crate) fn wait_ended(&mut self, bound: Duration) -> AbortOutcome {
        if self.wait_until(bound, |release| release.ended == release.threads) {
            let last = self.last_end.unwrap_or(self.started);
            AbortOutcome::Aborted(last.saturating_duration_since(self.started))
        } else {
            AbortOutcome::Stalled(self.started.elapsed())
        }
    }

    /// Whether every release has begun, as far as the steps counted so
    /// far tell.
    pub(crate) fn all_begun(&self) -> bool {
        self.begun == self.threads
    }

    /// Counts the threads' steps until `done` holds or `bound` after the
    /// start has passed; whether `done` holds.
    fn wait_until(&mut self, bound: Duration, done: impl Fn(&Self) -> bool) -> bool {
        let deadline = self.started.checked_add(bound);
        while !done(self) {
            let left =
                deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
            match self.steps.recv_timeout(left) {
                Ok(Step::Begun) => self.begun += 1,
                Ok(Step::Ended(at)) => {
                    self.ended += 1;
                    self.last_end = self.last_end.max(Some(at));
                }
                // Past the bound (the threads still hold senders), or every
                // thread gone without its steps.
                Err(_) => return done(self),
            }
        }
        true
    }
}

/// What `slot` holds, taken out of it.
fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// The releases of earlier generations that may still be ending, which a
/// generation inherits from the one it replaced and waits for when it
/// drops: a process must not exit while NCCL tears a communicator down
/// (its exit handlers would unload what the abort still uses). The old
/// generation's handles then drop at once, and the wait comes when the
/// lineage ends, long after the releases did.
#[derive(Default)]
pub(crate) struct Unfinished {
    /// Failures whose threads release their generation's communicators
    /// and set the details when done.
    failures: Vec<Arc<Failure>>,
    /// Aborts of retired generations' communicators.
    releases: Vec<Release>,
}

impl Unfinished {
    /// Takes on a retired generation's: its failure's release, if it
    /// failed, the aborts its retirement began, and what it inherited.
    pub(crate) fn inherit(
        &mut self,
        failure: Option<Arc<Failure>>,
        retirement: Release,
        earlier: Unfinished,
    ) {
        self.failures.extend(failure);
        self.failures.extend(earlier.failures);
        self.releases.push(retirement);
        self.releases.extend(earlier.releases);
    }

    /// Waits until every release has ended, at most `bound` for each.
    pub(crate) fn wait(&mut self, bound: Duration) {
        for failure in self.failures.drain(..) {
            let _ = failure.wait_details(bound);
        }
        for mut release in self.releases.drain(..) {
            let _ = release.wait_ended(bound);
        }
    }
}

/// Aborts every communicator of `comms`, waiting at most `bound` for the
/// aborts to end.
pub(crate) fn abort_bounded(comms: Vec<Arc<LocalComms>>, bound: Duration) -> AbortOutcome {
    Release::begin(&comms, false).wait_ended(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Longer than any wait that must end: a hang guard, not a
    /// performance claim.
    const PATIENCE: Duration = Duration::from_secs(60);

    /// A release that calls its `begun` when it likes.
    type FakeRelease = Box<dyn FnOnce(&dyn Fn()) + Send>;

    #[test]
    fn nothing_to_release_has_begun_and_ended_at_once() {
        let mut release = Release::begin(&[], true);
        assert!(release.wait_begun(Duration::ZERO));
        assert!(matches!(
            release.wait_ended(Duration::ZERO),
            AbortOutcome::Aborted(_)
        ));
    }

    #[test]
    fn a_release_stuck_after_it_began_holds_up_its_end_only() {
        let (unstick, stuck) = std::sync::mpsc::channel::<()>();
        let releases: Vec<FakeRelease> = vec![
            Box::new(|begun: &dyn Fn()| begun()),
            Box::new(move |begun: &dyn Fn()| {
                begun();
                let _ = stuck.recv_timeout(PATIENCE);
            }),
        ];
        let mut release = Release::spawn(releases);
        assert!(release.wait_begun(PATIENCE));
        assert!(matches!(
            release.wait_ended(Duration::from_millis(50)),
            AbortOutcome::Stalled(_)
        ));
        drop(unstick);
    }

    #[test]
    fn an_heir_waits_for_the_releases_of_every_generation_before_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let ended = Arc::new(AtomicBool::new(false));
        let (unstick, stuck) = std::sync::mpsc::channel::<()>();
        let flag = Arc::clone(&ended);
        let slow: Vec<FakeRelease> = vec![Box::new(move |begun: &dyn Fn()| {
            begun();
            let _ = stuck.recv_timeout(PATIENCE);
            flag.store(true, Ordering::SeqCst);
        })];
        let mut first = Unfinished::default();
        first.inherit(None, Release::spawn(slow), Unfinished::default());
        let mut heir = Unfinished::default();
        heir.inherit(None, Release::spawn(Vec::<FakeRelease>::new()), first);
        let unsticking = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(unstick);
        });
        heir.wait(PATIENCE);
        assert!(
            ended.load(Ordering::SeqCst),
            "the wait returned before the first generation's release ended"
        );
        unsticking.join().expect("the unsticking thread");
    }

    #[test]
    fn a_release_that_never_begins_is_not_waited_for_past_the_bound() {
        let (unstick, stuck) = std::sync::mpsc::channel::<()>();
        let releases: Vec<FakeRelease> = vec![
            Box::new(|begun: &dyn Fn()| begun()),
            Box::new(move |_begun: &dyn Fn()| {
                let _ = stuck.recv_timeout(PATIENCE);
            }),
        ];
        let mut release = Release::spawn(releases);
        assert!(!release.wait_begun(Duration::from_millis(50)));
        drop(unstick);
        // Ending without beginning (a release that returned early) still
        // counts as its end.
        assert!(matches!(
            release.wait_ended(PATIENCE),
            AbortOutcome::Aborted(_)
        ));
    }
}
