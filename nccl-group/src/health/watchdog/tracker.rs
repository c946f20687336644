//! A group's tracker of outstanding operations: queued as they are
//! issued, reaped once finished, and scanned by the watchdog for the first
//! one past its deadline or broken ([`Tracker::scan`]: the state machine,
//! tested here with fake completions).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Completion, PendingOp, Progress, Verdict};

/// More pending operations than this make the enqueuing thread reap the
/// finished ones at the front itself, so a fast loop cannot pile up
/// events between two watchdog scans.
const REAP_ABOVE: usize = 256;

/// After a push's reap finds the oldest operation still running, the pushes
/// after it leave the backlog alone until this many more are pending: a loop
/// that runs ahead of the GPU would otherwise pay a driver call (the oldest
/// end's poll) on every operation, for an answer that changes once a batch of
/// operations sharing an end (`engine::shared_end`) has run.
const REAP_RETRY: usize = 32;

/// How many finished operations' allocations a tracker keeps for later
/// ones ([`Tracker::push_with`]) at first: as many as one reap frees in a
/// fast loop (it runs once more than [`REAP_ABOVE`] are pending), so that a
/// loop whose operations finish within a reap's window allocates none.
const SPARES: usize = REAP_ABOVE + 1;

/// The most it keeps: room grows to the longest backlog seen, so that a loop
/// that runs ahead of the GPU, with as many operations pending as the GPU's
/// launch queue holds (about a thousand kernels, past which a launch waits),
/// makes each one in an allocation of the last time round. Allocations of
/// 136 bytes each (`Tracked`) and their list: about 0.6 MiB at most per
/// group, kept for the group's life once a backlog that long was seen.
const MAX_SPARES: usize = 4096;

/// How long [`Tracker::take_ended`] waits for ends it has just recorded.
const SETTLE: Duration = Duration::from_millis(1);

/// Which streams the pending operations end on ([`Completion::lane`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lanes {
    /// No operation is pending.
    None,
    /// Every pending operation ends on this one stream.
    One(usize),
    /// Some end on other streams, or on several (until the queue empties).
    Mixed,
}

impl Lanes {
    fn with(self, lane: Option<usize>) -> Self {
        match (self, lane) {
            (Lanes::None, Some(lane)) => Lanes::One(lane),
            (Lanes::One(one), Some(lane)) if one == lane => self,
            _ => Lanes::Mixed,
        }
    }
}

/// The allocations of finished operations, released, for later ones.
struct Spares {
    kept: Vec<Arc<dyn Completion>>,
    /// The most kept: [`SPARES`], or the longest backlog seen, up to
    /// [`MAX_SPARES`].
    room: usize,
}

impl Default for Spares {
    fn default() -> Self {
        Self {
            kept: Vec::with_capacity(SPARES),
            room: SPARES,
        }
    }
}

impl Spares {
    /// Makes room for as many spares as `backlog` operations, within
    /// [`MAX_SPARES`].
    fn make_room_for(&mut self, backlog: usize) {
        self.room = self.room.max(backlog.min(MAX_SPARES));
    }

    /// Keeps the finished `completion`'s allocation, released, if nothing
    /// else shares it and there is room.
    fn keep(&mut self, mut completion: Arc<dyn Completion>) {
        if self.kept.len() < self.room
            && let Some(finished) = Arc::get_mut(&mut completion)
        {
            finished.release();
            self.kept.push(completion);
        }
    }
}

/// The outstanding operations, oldest first, their lanes, the
/// allocations of finished ones for later ones, and how long the queue
/// grows before a push reaps it.
struct Queue {
    ops: VecDeque<PendingOp>,
    lanes: Lanes,
    spares: Spares,
    /// A push reaps once more operations than this are pending:
    /// [`REAP_ABOVE`], or, after a reap that found the oldest one not done,
    /// one less than that reap's length and [`REAP_RETRY`].
    reap_above: usize,
}

impl Queue {
    /// Notes that operations left: an empty queue has no lanes, and a
    /// queue that shrank is reaped again from [`REAP_ABOVE`] on, or from its
    /// length if that is more (something finished: the next push looks).
    fn settle(&mut self) {
        if self.ops.is_empty() {
            self.lanes = Lanes::None;
        }
        self.reap_above = self.reap_above.min(self.ops.len().max(REAP_ABOVE));
    }
}

/// A group's outstanding operations, oldest first.
pub struct Tracker {
    pending: Mutex<Queue>,
}

impl Default for Tracker {
    /// Room for twice the reaping threshold up front, so a steady loop
    /// never grows the queue (no allocation per operation).
    fn default() -> Self {
        Self {
            pending: Mutex::new(Queue {
                ops: VecDeque::with_capacity(2 * REAP_ABOVE),
                lanes: Lanes::None,
                spares: Spares::default(),
                reap_above: REAP_ABOVE,
            }),
        }
    }
}

impl Tracker {
    fn pending(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds the operation `make` returns (with a value of its own for the
    /// caller), made while the tracker is locked: operations whose ends
    /// `make` records are queued in the order of those records.
    ///
    /// With a long backlog, first removes the finished operations at the front
    /// ([`reap`]), calling `finished(seq, gpu_time)` for each
    /// ([`Completion::gpu_time`]); a reap that removed none is tried again
    /// [`REAP_RETRY`] pushes later. `make` gets the allocation of a finished
    /// operation that nothing else held, released ([`Completion::release`]),
    /// if the tracker kept one, to make the new one in. An error of `make`
    /// adds nothing.
    pub fn push_with<T, E>(
        &self,
        make: impl FnOnce(Option<Arc<dyn Completion>>) -> Result<(PendingOp, T), E>,
        finished: impl FnMut(u64, Option<Duration>),
    ) -> Result<T, E> {
        let mut pending = self.pending();
        let backlog = pending.ops.len();
        if backlog > pending.reap_above {
            reap(&mut pending, finished);
            if pending.ops.len() == backlog {
                // The next reap once `backlog + REAP_RETRY` are pending.
                pending.reap_above = backlog + REAP_RETRY - 1;
            }
        }
        let spare = pending.spares.kept.pop();
        let (op, value) = make(spare)?;
        pending.lanes = pending.lanes.with(op.completion.lane());
        pending.ops.push_back(op);
        let backlog = pending.ops.len();
        pending.spares.make_room_for(backlog);
        Ok(value)
    }

    /// How many operations are outstanding.
    pub fn len(&self) -> usize {
        self.pending().ops.len()
    }

    /// The oldest outstanding operation's sequence number.
    pub fn oldest(&self) -> Option<u64> {
        self.pending().ops.front().map(|op| op.seq)
    }

    /// When the oldest outstanding operation was enqueued.
    pub fn oldest_enqueued(&self) -> Option<Instant> {
        self.pending().ops.front().map(|op| op.enqueued)
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.pending().ops.is_empty()
    }

    /// Polls every pending operation at `now`: finished ones are removed
    /// (`finished(seq, gpu_time)` is called for each); the oldest one past its
    /// deadline, or whose polling failed, is the verdict (it and the rest
    /// stay pending until [`Tracker::drain`]).
    ///
    /// The polls (a driver call each) and the GPU times run on a snapshot,
    /// outside the lock, so a thread issuing an operation never waits for a
    /// scan's driver calls (but for the record of an end it shares with the
    /// operation being issued, at most once a scan: `engine::shared_end`).
    pub fn scan(
        &self,
        now: Instant,
        mut finished: impl FnMut(u64, Option<Duration>),
    ) -> Option<Verdict> {
        let snapshot: Vec<(u64, Instant, Duration, Arc<dyn Completion>)> = self
            .pending()
            .ops
            .iter()
            .map(|op| (op.seq, op.enqueued, op.timeout, Arc::clone(&op.completion)))
            .collect();
        let mut verdict = None;
        let mut done = Vec::new();
        for (seq, enqueued, timeout, completion) in snapshot {
            match completion.poll_closing() {
                Progress::Done => done.push((seq, completion.gpu_time())),
                Progress::Running => {
                    let ran = now.saturating_duration_since(enqueued);
                    if verdict.is_none() && ran >= timeout {
                        verdict = Some(Verdict::TimedOut { seq, ran, timeout });
                    }
                }
                Progress::Broken(error) => {
                    if verdict.is_none() {
                        verdict = Some(Verdict::Broken { seq, error });
                    }
                }
            }
        }
        if !done.is_empty() {
            done.sort_unstable_by_key(|&(seq, _)| seq);
            // Those the issuing thread reaped meanwhile (or a failure
            // drained) are gone already, and not reported twice.
            let mut pending = self.pending();
            let Queue { ops, spares, .. } = &mut *pending;
            // Each operation once round the ring, in order: the finished
            // ones leave, the rest go back behind.
            for _ in 0..ops.len() {
                let Some(op) = ops.pop_front() else { break };
                match done.binary_search_by_key(&op.seq, |&(seq, _)| seq) {
                    Ok(index) => {
                        finished(op.seq, done[index].1);
                        spares.keep(op.completion);
                    }
                    Err(_) => ops.push_back(op),
                }
            }
            pending.settle();
        }
        verdict
    }

    /// Removes the pending operations that have ended (polling each) and
    /// returns their sequence numbers and GPU times, oldest first: when the
    /// group ends without a failure, so that only the others fail.
    ///
    /// An end recorded only now ([`Completion::poll_closing`]) gets
    /// [`SETTLE`] to complete, as it does on a stream that is idle.
    pub fn take_ended(&self) -> Vec<(u64, Option<Duration>)> {
        let mut pending = self.pending();
        let started = Instant::now();
        // Every end is polled (and recorded) in each pass, none skipped.
        let running = |queue: &Queue| {
            queue
                .ops
                .iter()
                .filter(|op| op.completion.poll_closing() == Progress::Running)
                .count()
        };
        while running(&pending) > 0 && started.elapsed() < SETTLE {
            std::thread::yield_now();
        }
        let mut ended = Vec::new();
        pending.ops.retain(|op| {
            let done = op.completion.poll() == Progress::Done;
            if done {
                ended.push((op.seq, op.completion.gpu_time()));
            }
            !done
        });
        pending.settle();
        ended
    }

    /// Removes and returns every pending operation (when the group fails).
    pub fn drain(&self) -> Vec<PendingOp> {
        let mut pending = self.pending();
        let drained = pending.ops.drain(..).collect();
        pending.settle();
        drained
    }
}

/// Removes the finished operations at the front of `queue`, calling
/// `finished(seq, gpu_time)` for each, oldest first.
///
/// When every pending operation ends on one stream they finish in order, so
/// after the front, a binary search finds the last finished one: a handful of
/// driver calls for the whole backlog instead of one per operation, which a
/// fast loop would otherwise pay on every operation. Otherwise they are polled
/// one by one from the front.
fn reap(queue: &mut Queue, mut finished: impl FnMut(u64, Option<Duration>)) {
    let Some(front) = queue.ops.front() else {
        return;
    };
    if front.completion.poll() != Progress::Done {
        return;
    }
    if matches!(queue.lanes, Lanes::One(_)) {
        // ops[..=done] are done; ops[running..] are not (or past the end).
        let (mut done, mut running) = (0, queue.ops.len());
        while running - done > 1 {
            let middle = done + (running - done) / 2;
            if queue.ops[middle].completion.poll() == Progress::Done {
                done = middle;
            } else {
                running = middle;
            }
        }
        let Queue { ops, spares, .. } = &mut *queue;
        ops.drain(..=done)
            .for_each(|op| ended(op, &mut finished, spares));
    } else {
        let Queue { ops, spares, .. } = &mut *queue;
        if let Some(front) = ops.pop_front() {
            ended(front, &mut finished, spares);
        }
        reap_front(ops, finished, spares);
    }
    queue.settle();
}

fn reap_front(
    pending: &mut VecDeque<PendingOp>,
    mut finished: impl FnMut(u64, Option<Duration>),
    spares: &mut Spares,
) {
    while pending
        .front()
        .is_some_and(|front| front.completion.poll() == Progress::Done)
    {
        if let Some(op) = pending.pop_front() {
            ended(op, &mut finished, spares);
        }
    }
}

/// Reports the finished `op` to `finished`, with its GPU time, and keeps
/// its allocation ([`Spares::keep`]).
fn ended(
    op: PendingOp,
    finished: &mut impl FnMut(u64, Option<Duration>),
    spares: &mut Spares,
) {
    finished(op.seq, op.completion.gpu_time());
    spares.keep(op.completion);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Failure;
    use cudarc::driver::DriverError;
    use std::any::Any;
    use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

    /// A completion the test finishes or breaks by hand.
    #[derive(Default)]
    struct Fake {
        state: AtomicU8,
        polls: AtomicUsize,
        lane: Option<usize>,
        gpu_time: Option<Duration>,
        /// An end shared with later operations and not recorded yet:
        /// running until polled to close it.
        unrecorded: AtomicBool,
        /// Released for a later operation ([`Completion::release`]).
        released: bool,
        /// Counts the releases of every fake that shares it.
        releases: Option<Arc<AtomicUsize>>,
    }

    impl Fake {
        fn finish(&self) {
            self.state.store(1, Ordering::SeqCst);
        }
        fn fail(&self) {
            self.state.store(2, Ordering::SeqCst);
        }
    }

    impl Completion for Fake {
        fn poll(&self) -> Progress {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.unrecorded.load(Ordering::SeqCst) {
                return Progress::Running;
            }
            match self.state.load(Ordering::SeqCst) {
                0 => Progress::Running,
                1 => Progress::Done,
                _ => Progress::Broken(launch_failed()),
            }
        }

        fn poll_closing(&self) -> Progress {
            self.unrecorded.store(false, Ordering::SeqCst);
            self.poll()
        }

        fn lane(&self) -> Option<usize> {
            self.lane
        }

        // The tracker never marks operations failed; the group does.
        fn fail(&self, _failure: &Arc<Failure>) {}

        fn gpu_time(&self) -> Option<Duration> {
            self.gpu_time
        }

        fn release(&mut self) {
            self.released = true;
            if let Some(releases) = &self.releases {
                releases.fetch_add(1, Ordering::SeqCst);
            }
        }

        fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
            self
        }
    }

    fn launch_failed() -> DriverError {
        DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_LAUNCH_FAILED)
    }

    /// Adds `op` (made before the lock is taken, as tests need no order).
    fn push(tracker: &Tracker, op: PendingOp, finished: impl FnMut(u64, Option<Duration>)) {
        let pushed: Result<(), std::convert::Infallible> =
            tracker.push_with(|_| Ok((op, ())), finished);
        assert!(pushed.is_ok());
    }

    fn op(seq: u64, enqueued: Instant, timeout_ms: u64, fake: &Arc<Fake>) -> PendingOp {
        PendingOp {
            seq,
            enqueued,
            timeout: Duration::from_millis(timeout_ms),
            completion: Arc::clone(fake) as Arc<dyn Completion>,
        }
    }

    fn fakes(n: usize) -> Vec<Arc<Fake>> {
        (0..n).map(|_| Arc::new(Fake::default())).collect()
    }

    #[test]
    fn finished_operations_leave_in_any_order() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let f = fakes(3);
        for (seq, fake) in f.iter().enumerate() {
            push(&tracker, op(seq as u64, t0, 1000, fake), |_, _| {});
        }
        f[1].finish();
        let mut seen = Vec::new();
        assert_eq!(tracker.scan(t0, |s, _| seen.push(s)), None);
        assert_eq!(seen, vec![1]);
        assert_eq!(tracker.len(), 2);
        f[0].finish();
        f[2].finish();
        assert_eq!(tracker.scan(t0, |s, _| seen.push(s)), None);
        assert_eq!(seen, vec![1, 0, 2]);
        assert!(tracker.is_empty());
    }

    #[test]
    fn each_finished_operation_is_reported_with_its_gpu_time() {
        let t0 = Instant::now();
        let timed = |micros: u64| {
            let fake = Fake {
                gpu_time: Some(Duration::from_micros(micros)),
                ..Fake::default()
            };
            fake.finish();
            Arc::new(fake)
        };
        let untimed = fakes(1).remove(0);
        untimed.finish();
        let tracker = Tracker::default();
        push(&tracker, op(0, t0, 1000, &timed(5)), |_, _| {});
        push(&tracker, op(1, t0, 1000, &untimed), |_, _| {});
        let mut seen = Vec::new();
        assert_eq!(tracker.scan(t0, |s, gpu| seen.push((s, gpu))), None);
        assert_eq!(seen, vec![(0, Some(Duration::from_micros(5))), (1, None)]);

        push(&tracker, op(2, t0, 1000, &timed(7)), |_, _| {});
        assert_eq!(tracker.take_ended(), vec![(2, Some(Duration::from_micros(7)))]);

        let mut reaped = Vec::new();
        for seq in 3..=(REAP_ABOVE as u64 + 4) {
            push(&tracker, op(seq, t0, 1000, &timed(seq)), |s, gpu| {
                reaped.push((s, gpu));
            });
        }
        assert!(!reaped.is_empty());
        for (seq, gpu) in reaped {
            assert_eq!(gpu, Some(Duration::from_micros(seq)));
        }
    }

    #[test]
    fn the_scan_and_the_last_check_record_an_end_the_reap_leaves_alone() {
        let t0 = Instant::now();
        let shared = || {
            let fake = Fake::default();
            fake.finish();
            fake.unrecorded.store(true, Ordering::SeqCst);
            Arc::new(fake)
        };
        let tracker = Tracker::default();
        let (first, second) = (shared(), shared());
        push(&tracker, op(0, t0, 1000, &first), |_, _| {});
        // The issuing thread's reap only polls: the unrecorded end stays.
        let mut reaped = Vec::new();
        for seq in 1..=(REAP_ABOVE as u64 + 1) {
            push(&tracker, op(seq, t0, 1000, &fakes(1)[0]), |s, _| reaped.push(s));
        }
        assert!(reaped.is_empty(), "{reaped:?}");
        assert!(first.unrecorded.load(Ordering::SeqCst));
        // The watchdog's scan records it, and sees it end.
        let mut seen = Vec::new();
        assert_eq!(tracker.scan(t0, |s, _| seen.push(s)), None);
        assert_eq!(seen, vec![0]);
        // So does the last check of a group that ends.
        push(&tracker, op(1000, t0, 1000, &second), |_, _| {});
        assert_eq!(tracker.take_ended(), vec![(1000, None)]);
    }

    #[test]
    fn the_oldest_operation_past_its_deadline_is_the_verdict() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let f = fakes(3);
        push(&tracker, op(0, t0, 100, &f[0]), |_, _| {});
        push(&tracker, op(1, t0, 50, &f[1]), |_, _| {});
        push(&tracker, op(2, t0, 10, &f[2]), |_, _| {});
        // Nothing is late at 5 ms.
        assert_eq!(tracker.scan(t0 + Duration::from_millis(5), |_, _| {}), None);
        // At 60 ms ops 1 and 2 are late; op 1 was enqueued first.
        let verdict = tracker.scan(t0 + Duration::from_millis(60), |_, _| {});
        assert_eq!(
            verdict,
            Some(Verdict::TimedOut {
                seq: 1,
                ran: Duration::from_millis(60),
                timeout: Duration::from_millis(50),
            })
        );
        // The late ops stay pending until the group drains them.
        assert_eq!(tracker.len(), 3);
        assert_eq!(
            tracker.drain().iter().map(|p| p.seq).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(tracker.is_empty());
    }

    #[test]
    fn an_operation_that_finishes_late_is_not_a_timeout() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let f = fakes(1);
        push(&tracker, op(0, t0, 10, &f[0]), |_, _| {});
        f[0].finish();
        // Done wins over a deadline that passed before the scan.
        let mut seen = Vec::new();
        assert_eq!(
            tracker.scan(t0 + Duration::from_secs(5), |s, _| seen.push(s)),
            None
        );
        assert_eq!(seen, vec![0]);
    }

    #[test]
    fn a_broken_poll_is_a_verdict_even_before_the_deadline() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let f = fakes(2);
        push(&tracker, op(0, t0, 1000, &f[0]), |_, _| {});
        push(&tracker, op(1, t0, 1000, &f[1]), |_, _| {});
        f[1].fail();
        assert_eq!(
            tracker.scan(t0, |_, _| {}),
            Some(Verdict::Broken {
                seq: 1,
                error: launch_failed()
            })
        );
    }

    /// A completion whose poll blocks until released.
    struct Slow {
        polling: std::sync::Barrier,
        release: std::sync::Barrier,
    }

    impl Completion for Slow {
        fn poll(&self) -> Progress {
            self.polling.wait();
            self.release.wait();
            Progress::Running
        }

        fn fail(&self, _failure: &Arc<Failure>) {}

        fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
            self
        }
    }

    #[test]
    fn an_operation_is_issued_while_a_scan_polls() {
        let tracker = Arc::new(Tracker::default());
        let slow = Arc::new(Slow {
            polling: std::sync::Barrier::new(2),
            release: std::sync::Barrier::new(2),
        });
        let t0 = Instant::now();
        push(
            &tracker,
            PendingOp {
                seq: 0,
                enqueued: t0,
                timeout: Duration::from_secs(60),
                completion: Arc::clone(&slow) as Arc<dyn Completion>,
            },
            |_, _| {},
        );
        let scanner = {
            let tracker = Arc::clone(&tracker);
            std::thread::spawn(move || tracker.scan(t0, |_, _| {}))
        };
        // The scan is inside the poll now; a push must not wait for it.
        slow.polling.wait();
        let f = fakes(1);
        push(&tracker, op(1, t0, 1000, &f[0]), |_, _| {});
        assert_eq!(tracker.len(), 2);
        slow.release.wait();
        assert_eq!(scanner.join().unwrap(), None);
        assert_eq!(tracker.len(), 2);
    }

    #[test]
    fn a_long_backlog_is_reaped_by_the_enqueuing_thread() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let f = fakes(REAP_ABOVE + 10);
        let mut reaped = Vec::new();
        for (seq, fake) in f.iter().enumerate() {
            fake.finish();
            push(&tracker, op(seq as u64, t0, 1000, fake), |s, _| reaped.push(s));
        }
        // Every push past the threshold reaped the finished front.
        assert!(tracker.len() <= REAP_ABOVE + 1, "{}", tracker.len());
        assert_eq!(reaped, (0..reaped.len() as u64).collect::<Vec<_>>());
        // Below the threshold nobody polls at push time.
        let small = Tracker::default();
        let g = fakes(2);
        push(&small, op(0, t0, 1000, &g[0]), |_, _| {});
        push(&small, op(1, t0, 1000, &g[1]), |_, _| {});
        assert_eq!(g[0].polls.load(Ordering::SeqCst), 0);
    }

    /// `n` fakes on `lane`, the first `finished` of them finished.
    fn on_lane(n: usize, finished: usize, lane: impl Fn(usize) -> Option<usize>) -> Vec<Arc<Fake>> {
        (0..n)
            .map(|i| {
                let fake = Fake {
                    lane: lane(i),
                    ..Fake::default()
                };
                if i < finished {
                    fake.finish();
                }
                Arc::new(fake)
            })
            .collect()
    }

    fn polls(fakes: &[Arc<Fake>]) -> usize {
        fakes.iter().map(|f| f.polls.load(Ordering::SeqCst)).sum()
    }

    /// Pushes `fakes` as operations 0.. enqueued at `t0` (the last push
    /// reaps), returning what was reaped.
    fn push_all(tracker: &Tracker, fakes: &[Arc<Fake>], t0: Instant) -> Vec<u64> {
        let mut reaped = Vec::new();
        for (seq, fake) in fakes.iter().enumerate() {
            push(tracker, op(seq as u64, t0, 1000, fake), |s, _| reaped.push(s));
        }
        reaped
    }

    #[test]
    fn a_backlog_on_one_stream_is_reaped_with_a_binary_search() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let f = on_lane(REAP_ABOVE + 2, 200, |_| Some(7));
        let reaped = push_all(&tracker, &f, t0);
        assert_eq!(reaped, (0..200).collect::<Vec<_>>());
        assert_eq!(tracker.len(), REAP_ABOVE + 2 - 200);
        // The front, then about log2(257) polls, not one per operation.
        let made = polls(&f);
        assert!((2..=10).contains(&made), "{made} polls");
        // Everything finished: the whole backlog goes, oldest first.
        let tracker = Tracker::default();
        let f = on_lane(REAP_ABOVE + 2, REAP_ABOVE + 2, |_| Some(7));
        let reaped = push_all(&tracker, &f, t0);
        assert_eq!(reaped, (0..=REAP_ABOVE as u64).collect::<Vec<_>>());
        assert_eq!(tracker.len(), 1);
        let made = polls(&f);
        assert!(made <= 10, "{made} polls");
    }

    #[test]
    fn a_running_backlog_is_polled_once_per_retry_not_once_per_push() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let ahead = 4 * REAP_RETRY;
        // The last push finds REAP_ABOVE + 1 + ahead pending.
        let f = on_lane(REAP_ABOVE + 2 + ahead, 0, |_| Some(3));
        assert!(push_all(&tracker, &f, t0).is_empty());
        // A poll of the oldest at REAP_ABOVE + 1 pending, then one each
        // REAP_RETRY more, where a push used to poll it every time.
        assert_eq!(f[0].polls.load(Ordering::SeqCst), 1 + ahead / REAP_RETRY);
        assert_eq!(polls(&f), 1 + ahead / REAP_RETRY);

        // Once the GPU catches up, a push within REAP_RETRY reaps it all.
        f.iter().for_each(|fake| fake.finish());
        let mut reaped = Vec::new();
        let more = on_lane(REAP_RETRY, REAP_RETRY, |_| Some(3));
        for (seq, fake) in more.iter().enumerate() {
            push(&tracker, op((f.len() + seq) as u64, t0, 1000, fake), |s, _| {
                reaped.push(s);
            });
        }
        assert!(reaped.len() >= f.len(), "{} reaped", reaped.len());
        assert_eq!(reaped, (0..reaped.len() as u64).collect::<Vec<_>>());
        assert!(tracker.len() <= REAP_RETRY, "{}", tracker.len());

        // A queue the watchdog's scan shrinks is reaped from REAP_ABOVE on
        // again, not from the length it had grown to.
        let tracker = Tracker::default();
        let f = on_lane(REAP_ABOVE + 2 + ahead, 0, |_| Some(3));
        push_all(&tracker, &f, t0);
        f.iter().for_each(|fake| fake.finish());
        assert_eq!(tracker.scan(t0, |_, _| {}), None);
        assert!(tracker.is_empty());
        let g = on_lane(REAP_ABOVE + 2, REAP_ABOVE + 2, |_| Some(3));
        assert_eq!(push_all(&tracker, &g, t0).len(), REAP_ABOVE + 1);
    }

    #[test]
    fn a_backlog_on_several_streams_is_polled_one_by_one() {
        let t0 = Instant::now();
        for lane in [|i: usize| Some(i % 2), |_| None] {
            let tracker = Tracker::default();
            let f = on_lane(REAP_ABOVE + 2, 200, lane);
            let reaped = push_all(&tracker, &f, t0);
            assert_eq!(reaped, (0..200).collect::<Vec<_>>());
            // Each finished one, and the first running one.
            assert_eq!(polls(&f), 201);
        }
    }

    #[test]
    fn lanes_start_again_once_the_queue_empties() {
        let tracker = Tracker::default();
        let t0 = Instant::now();
        let mixed = on_lane(3, 3, Some);
        push_all(&tracker, &mixed, t0);
        assert_eq!(tracker.pending().lanes, Lanes::Mixed);
        assert_eq!(tracker.drain().len(), 3);
        assert_eq!(tracker.pending().lanes, Lanes::None);
        let one = on_lane(2, 0, |_| Some(4));
        push_all(&tracker, &one, t0);
        assert_eq!(tracker.pending().lanes, Lanes::One(4));
        one.iter().for_each(|f| f.finish());
        assert_eq!(tracker.scan(t0, |_, _| {}), None);
        assert_eq!(tracker.pending().lanes, Lanes::None);
        assert_eq!(Lanes::One(4).with(Some(4)), Lanes::One(4));
        assert_eq!(Lanes::One(4).with(None), Lanes::Mixed);
        assert_eq!(Lanes::None.with(None), Lanes::Mixed);
        assert_eq!(Lanes::Mixed.with(Some(4)), Lanes::Mixed);
    }

    #[test]
    fn reaping_stops_at_the_first_running_operation() {
        let mut pending = VecDeque::new();
        let t0 = Instant::now();
        let f = fakes(3);
        for (seq, fake) in f.iter().enumerate() {
            pending.push_back(op(seq as u64, t0, 1000, fake));
        }
        f[0].finish();
        f[2].finish();
        let mut reaped = Vec::new();
        reap_front(&mut pending, |s, _| reaped.push(s), &mut Spares::default());
        assert_eq!(reaped, vec![0]);
        assert_eq!(pending.len(), 2);
    }

    /// A finished fake with sequence number `seq` on `lane`, made in the
    /// spare the tracker lends, if any; whether it got one, released.
    fn push_finished(tracker: &Tracker, seq: u64, lane: Option<usize>) -> bool {
        let mut lent = false;
        let pushed: Result<(), std::convert::Infallible> = tracker.push_with(
            |spare| {
                let spare = spare.and_then(|spare| spare.into_any().downcast::<Fake>().ok());
                lent = spare.is_some_and(|spare| spare.released);
                let fake = Arc::new(Fake {
                    lane,
                    ..Fake::default()
                });
                fake.finish();
                // The tracker's reference is the only one once `fake` drops.
                Ok((op(seq, Instant::now(), 60_000, &fake), ()))
            },
            |_, _| {},
        );
        assert!(pushed.is_ok());
        lent
    }

    #[test]
    fn a_finished_operation_nothing_else_holds_lends_its_allocation_to_the_next() {
        let tracker = Tracker::default();
        let held = Arc::new(Fake::default());
        held.finish();
        push_finished(&tracker, 0, None);
        push(&tracker, op(1, Instant::now(), 60_000, &held), |_, _| {});
        assert_eq!(tracker.scan(Instant::now(), |_, _| {}), None);
        assert!(tracker.is_empty());
        // The first one's allocation, released; the second is still the
        // test's, untouched.
        assert!(push_finished(&tracker, 2, None));
        assert!(!push_finished(&tracker, 3, None));
        assert!(!held.released);
    }

    #[test]
    fn a_reaped_backlog_lends_its_allocations_to_the_operations_after_it() {
        // Polled one by one (no lane) and by a binary search (one lane).
        for lane in [None, Some(7)] {
            let tracker = Tracker::default();
            let backlog = REAP_ABOVE as u64 + 1;
            for seq in 0..backlog {
                assert!(!push_finished(&tracker, seq, lane), "{lane:?}: operation {seq}");
            }
            // The next push reaps the whole backlog first, then makes its
            // operation in one of the backlog's allocations, as does every
            // push until the next reap.
            for seq in backlog..2 * backlog {
                assert!(push_finished(&tracker, seq, lane), "{lane:?}: operation {seq}");
            }
        }
    }

    /// Pushes `count` fakes that finish once pushed, scans them away, and
    /// counts the allocations the tracker kept (released).
    fn kept_after_a_backlog_of(tracker: &Tracker, count: usize) -> usize {
        let releases = Arc::new(AtomicUsize::new(0));
        let fakes: Vec<Arc<Fake>> = (0..count)
            .map(|_| {
                Arc::new(Fake {
                    releases: Some(Arc::clone(&releases)),
                    ..Fake::default()
                })
            })
            .collect();
        let t0 = Instant::now();
        for (seq, fake) in (0..count as u64).zip(&fakes) {
            push(tracker, op(seq, t0, 60_000, fake), |_, _| {});
        }
        // Finished and held by the tracker alone: the scan removes them all
        // and keeps as many as it has room for.
        fakes.iter().for_each(|fake| fake.finish());
        drop(fakes);
        assert_eq!(tracker.scan(t0, |_, _| {}), None);
        assert!(tracker.is_empty());
        releases.load(Ordering::SeqCst)
    }

    #[test]
    fn the_tracker_keeps_a_spare_per_operation_of_its_longest_backlog_up_to_its_most() {
        assert_eq!(kept_after_a_backlog_of(&Tracker::default(), 10), 10);
        let backlog = 3 * SPARES;
        assert_eq!(kept_after_a_backlog_of(&Tracker::default(), backlog), backlog);
        assert_eq!(
            kept_after_a_backlog_of(&Tracker::default(), MAX_SPARES + 100),
            MAX_SPARES
        );
    }

    #[test]
    fn the_spares_room_stays_at_the_longest_backlog_after_a_shorter_one() {
        let tracker = Tracker::default();
        let backlog = 3 * SPARES;
        assert_eq!(kept_after_a_backlog_of(&tracker, backlog), backlog);
        // A backlog of one (its push takes a spare, which the helper drops):
        // its allocation is kept beside the `backlog - 1` left, past the
        // first room of `SPARES`.
        assert_eq!(kept_after_a_backlog_of(&tracker, 1), 1);
    }

    #[test]
    fn a_loop_ahead_of_the_gpu_makes_its_operations_in_the_last_loops_allocations() {
        let tracker = Tracker::default();
        let backlog = 4 * SPARES;
        assert_eq!(kept_after_a_backlog_of(&tracker, backlog), backlog);
        // The next loop of as many operations, none of which finishes
        // meanwhile (the GPU behind), finds a spare for each.
        let running: Vec<Arc<Fake>> = (0..backlog).map(|_| Arc::new(Fake::default())).collect();
        for (seq, fake) in (0..backlog as u64).zip(&running) {
            let mut lent = false;
            let pushed: Result<(), std::convert::Infallible> = tracker.push_with(
                |spare| {
                    lent = spare.is_some();
                    Ok((op(seq, Instant::now(), 60_000, fake), ()))
                },
                |_, _| {},
            );
            assert!(pushed.is_ok());
            assert!(lent, "operation {seq} found no spare");
        }
    }
}
