//! Timing one rank's batches: iterations of launches (each at its
//! places of nccl-tests' rotation, `-m` calls in one NCCL group) and one
//! stream synchronisation, waiting and meeting the other ranks in between
//! as `-z` says, or replays of a CUDA graph that captured the launches
//! (`-G`); every wait bounded by `-T`; with `-I 1` each iteration between
//! CUDA events ([`IterEvents`]); and the median over batches.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream};

use crate::error::BenchError;
use crate::layer::{Launch, Shift};
use crate::method::Blocking;

/// Waits for a stream's work, for at most a timeout (`-T`) when one is set.
pub struct Waiter<'a> {
    stream: &'a CudaStream,
    /// The timeout and the event polled until it passes.
    bounded: Option<(Duration, CudaEvent)>,
}

impl<'a> Waiter<'a> {
    /// A waiter for `stream`'s work; with a `timeout`, its event is made
    /// here, before any timed loop.
    ///
    /// # Errors
    /// The driver's error creating the event.
    pub fn new(stream: &'a CudaStream, timeout: Option<Duration>) -> Result<Self, BenchError> {
        let bounded = match timeout {
            Some(timeout) => Some((
                timeout,
                stream
                    .context()
                    .new_event(None)
                    .map_err(nccl_core::Error::cuda("creating the event of -T's waits"))?,
            )),
            None => None,
        };
        Ok(Self { stream, bounded })
    }

    /// Waits until the stream's work so far is done (`during` says what
    /// the wait is for, in errors).
    ///
    /// # Errors
    /// The driver's error, or [`nccl_core::Error::Timeout`] after the
    /// timeout (the run then fails, and its communicators are aborted, as
    /// nccl-tests does).
    pub fn wait(&self, during: &'static str) -> Result<(), BenchError> {
        let Some((timeout, event)) = &self.bounded else {
            return Ok(self
                .stream
                .synchronize()
                .map_err(nccl_core::Error::cuda(during))?);
        };
        event
            .record(self.stream)
            .map_err(nccl_core::Error::cuda(during))?;
        let start = Instant::now();
        while !event
            .try_is_complete()
            .map_err(nccl_core::Error::cuda(during))?
        {
            if start.elapsed() > *timeout {
                return Err(nccl_core::Error::Timeout {
                    operation: during,
                    waited: *timeout,
                }
                .into());
            }
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// `-I 1`: CUDA events that time each iteration of a timed loop on the
/// GPU, as nccl-tests' `recordEvents` and `getElapsedTimes` do: an event
/// before each iteration and one after the last, or with `-z 3` a start
/// and a stop event per iteration, the stop recorded after the wait, so
/// that the meeting of the ranks is left out. Made before the loop and
/// read after its wait.
pub struct IterEvents<'a> {
    stream: &'a CudaStream,
    /// Start and stop events are separate (`-z 3`).
    paired: bool,
    events: Vec<CudaEvent>,
}

impl<'a> IterEvents<'a> {
    /// The events of a loop of `iterations` iterations on `stream`, paired
    /// with `blocking`'s untimed meetings (`-z 3`).
    ///
    /// # Errors
    /// The driver's error creating an event.
    pub fn new(
        stream: &'a CudaStream,
        iterations: usize,
        blocking: Blocking,
    ) -> Result<Self, BenchError> {
        let paired = blocking == Blocking::WaitAndBarrierUntimed;
        let count = if paired {
            2 * iterations
        } else {
            iterations + 1
        };
        let context = stream.context();
        let events = (0..count)
            .map(|_| {
                context
                    .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(nccl_core::Error::cuda("creating the events of -I"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            stream,
            paired,
            events,
        })
    }

    /// Records event `index` on the stream.
    fn record(&self, index: usize) -> Result<(), BenchError> {
        let event = self.events.get(index).ok_or_else(|| {
            BenchError::Usage(format!(
                "internal error: -I has {} events, iteration event {index} asked",
                self.events.len()
            ))
        })?;
        Ok(event
            .record(self.stream)
            .map_err(nccl_core::Error::cuda("recording an event of -I"))?)
    }

    /// Marks the start of iteration `iteration`.
    fn start(&self, iteration: usize) -> Result<(), BenchError> {
        self.record(if self.paired {
            2 * iteration
        } else {
            iteration
        })
    }

    /// Marks the end of iteration `iteration`, after its wait; with
    /// shared events the next start marks it instead.
    fn stop(&self, iteration: usize) -> Result<(), BenchError> {
        if self.paired {
            self.record(2 * iteration + 1)?;
        }
        Ok(())
    }

    /// Marks the end of the loop of `iterations` iterations.
    fn end(&self, iterations: usize) -> Result<(), BenchError> {
        if self.paired {
            Ok(())
        } else {
            self.record(iterations)
        }
    }

    /// Each iteration's time per call in microseconds (`agg` calls per
    /// iteration), once the loop's work is done.
    ///
    /// # Errors
    /// The driver's error reading an event.
    pub fn iteration_us(&self, agg: usize) -> Result<Vec<f64>, BenchError> {
        let step = if self.paired { 2 } else { 1 };
        let iterations = if self.paired {
            self.events.len() / 2
        } else {
            self.events.len().saturating_sub(1)
        };
        (0..iterations)
            .map(|iteration| {
                let start = &self.events[step * iteration];
                let stop = &self.events[step * iteration + 1];
                let ms = start
                    .elapsed_ms(stop)
                    .map_err(nccl_core::Error::cuda("reading the events of -I"))?;
                Ok(f64::from(ms / agg.max(1) as f32) * 1.0e3)
            })
            .collect()
    }
}

/// How a timed loop paces its iterations.
pub struct Pacing<'a> {
    /// Calls per iteration (`-m`): each launch gets this many places.
    pub agg: usize,
    /// Where the loop waits and meets the other ranks (`-z`).
    pub blocking: Blocking,
    /// Meets the other ranks.
    pub meet: &'a dyn Fn() -> Result<(), BenchError>,
    /// Times each iteration (`-I 1`).
    pub events: Option<&'a IterEvents<'a>>,
}

/// One timed batch, per call, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timed {
    /// Until the GPU finished the calls (nccl-tests' `time`).
    pub wall_us: f64,
    /// Until the host had issued them (nccl-tests' `cputime`, `-C 1`).
    pub cpu_us: f64,
}

/// The median of `values` (the mean of the middle two for an even count);
/// `None` when empty. NaNs sort by sign ([`f64::total_cmp`]): a negative
/// NaN first, a positive one last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    })
}

/// A distribution-free confidence interval, of 95 % at least, of the
/// median of the population `values` were drawn from, independently: the
/// `k`-th smallest and the `k`-th largest value, `k` the largest rank such
/// that fewer than `k` of `n` values fall below the median with probability
/// 2.5 % at most (the binomial sign test): it covers the median with
/// probability `1 - 2 P(Bin(n, 1/2) < k)`, 95 % or more (the two extremes
/// of 7 values, 98.4 %). `None` for fewer than 6 values, too few for any
/// such interval (with 5, the two extremes cover 93.75 %). NaNs sort by
/// sign, as in [`median`].
pub fn median_interval(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    // P(at most j of n fall below the median) = sum_{i <= j} C(n, i) / 2^n,
    // its terms taken from logarithms (2^-n underflows past 1074 values).
    let mut below = 0.0_f64;
    let mut log_choose = 0.0_f64;
    let mut k = 0;
    for j in 0..n {
        below += (log_choose - n as f64 * std::f64::consts::LN_2).exp();
        if below > 0.025 {
            break;
        }
        k = j + 1;
        log_choose += ((n - j) as f64 / (j + 1) as f64).ln();
    }
    if k == 0 {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some((sorted[k - 1], sorted[n - k]))
}

/// Microseconds per call of a batch of `calls` calls that took `seconds`.
pub fn per_call_us(seconds: f64, calls: u64) -> f64 {
    seconds * 1.0e6 / calls.max(1) as f64
}

/// Launches the calls at `shifts` (one per call, computed before the
/// loop), `pacing.agg` per iteration, then waits: the time per call.
/// With `-z 3` the meetings after each iteration are left out of it; with
/// `pacing.events` (`-I 1`) each iteration is marked with them, inside the
/// timed loop as in nccl-tests. The loop is nccl-tests' `BenchTime` loop
/// step for step, its clock read at the start of every iteration included
/// ([`timed_loop`]).
///
/// # Errors
/// A failed launch, wait or meeting.
pub fn time_launches(
    launch: &mut Launch<'_>,
    shifts: &[Shift],
    pacing: &Pacing<'_>,
    waiter: &Waiter<'_>,
) -> Result<Timed, BenchError> {
    let mark = |mark: Mark| match (pacing.events, mark) {
        (None, _) => Ok(()),
        (Some(events), Mark::Start(iteration)) => events.start(iteration),
        (Some(events), Mark::Stop(iteration)) => events.stop(iteration),
        (Some(events), Mark::End(iterations)) => events.end(iterations),
    };
    let steps = LoopSteps {
        launch,
        wait: &|during| waiter.wait(during),
        meet: pacing.meet,
        mark: &mark,
    };
    let start = Instant::now();
    let (issued, done) = timed_loop(
        shifts,
        pacing.agg,
        pacing.blocking,
        &mut || start.elapsed(),
        steps,
    )?;
    let calls = shifts.len() as u64;
    Ok(Timed {
        wall_us: per_call_us(done.as_secs_f64(), calls),
        cpu_us: per_call_us(issued.as_secs_f64(), calls),
    })
}

/// A point of a timed loop that `-I 1` marks with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Before iteration `i`'s launches.
    Start(usize),
    /// After iteration `i`'s wait (only `-z 3` records an event there).
    Stop(usize),
    /// After the last of `n` iterations.
    End(usize),
}

/// What a timed loop does besides reading its clock: launch an
/// iteration's calls, wait for the GPU, meet the other ranks, mark a
/// point with an event.
struct LoopSteps<'s, L> {
    launch: L,
    wait: &'s dyn Fn(&'static str) -> Result<(), BenchError>,
    meet: &'s dyn Fn() -> Result<(), BenchError>,
    mark: &'s dyn Fn(Mark) -> Result<(), BenchError>,
}

/// nccl-tests' timed loop (`BenchTime`, common.cu), on a clock `now` that
/// gives the time since the loop's start: per iteration of `agg` calls,
/// the clock is read (nccl-tests' `t0 = tim.elapsed()`, read whatever
/// `-z` is: where the host bounds the time, as for a world-size-1 copy of
/// a few MiB, this read is part of what an iteration costs there), the
/// start is marked, the calls are launched, and as `blocking` says the
/// GPU is waited for, the stop marked and the ranks met; after the loop
/// the end is marked and the GPU waited for. Returns the time until the
/// calls were issued and until they were done (nccl-tests' `cputime` and
/// `time` before the division); with `-z 3` both are nccl-tests'
/// `collOnlySec`, each iteration from its clock read to after its wait
/// and stop mark, the meetings left out.
fn timed_loop<L>(
    shifts: &[Shift],
    agg: usize,
    blocking: Blocking,
    now: &mut dyn FnMut() -> Duration,
    mut steps: LoopSteps<'_, L>,
) -> Result<(Duration, Duration), BenchError>
where
    L: FnMut(&[Shift]) -> Result<(), BenchError>,
{
    let untimed_meetings = blocking == Blocking::WaitAndBarrierUntimed;
    let mut coll_only = Duration::ZERO;
    let mut iterations = 0;
    for iteration in shifts.chunks(agg.max(1)) {
        let began = now();
        (steps.mark)(Mark::Start(iterations))?;
        (steps.launch)(iteration)?;
        if blocking.waits() {
            (steps.wait)("waiting for an iteration's calls (-z)")?;
        }
        (steps.mark)(Mark::Stop(iterations))?;
        iterations += 1;
        if untimed_meetings {
            coll_only += now().saturating_sub(began);
        }
        if blocking.meets() {
            (steps.meet)()?;
        }
    }
    (steps.mark)(Mark::End(iterations))?;
    let issued = if untimed_meetings { coll_only } else { now() };
    (steps.wait)("waiting for the timed calls")?;
    let done = if untimed_meetings { coll_only } else { now() };
    Ok((issued, done))
}

/// A CUDA graph of a loop's launches; `Empty` when they enqueued nothing
/// (in-place collectives at world size 1), which replays as nothing.
pub enum Captured {
    /// The instantiated graph.
    Graph(CudaGraph),
    /// The capture recorded no work.
    Empty,
}

impl Captured {
    /// Enqueues one replay of the captured calls.
    ///
    /// # Errors
    /// The driver's error.
    pub fn replay(&self) -> Result<(), BenchError> {
        match self {
            Captured::Graph(graph) => Ok(graph
                .launch()
                .map_err(nccl_core::Error::cuda("launching a CUDA graph"))?),
            Captured::Empty => Ok(()),
        }
    }
}

/// Captures the launches of the calls at `shifts`, `agg` per iteration
/// (as [`time_launches`] issues them), on `stream` into a CUDA graph
/// (thread-local capture mode, so each rank thread captures on its own)
/// and instantiates it. Nothing runs on the GPU until the graph is
/// replayed.
///
/// cudarc's stream tracking is paused during the capture: it would make the
/// stream wait on events recorded before the capture began, which CUDA
/// refuses inside a capture. Every buffer of a rank lives on that rank's one
/// stream, so the tracking has nothing to order there anyway.
///
/// # Errors
/// A launch that fails while capturing (the capture is ended and dropped
/// first), or the driver's error.
pub fn capture(
    launch: &mut Launch<'_>,
    shifts: &[Shift],
    agg: usize,
    stream: &Arc<CudaStream>,
) -> Result<Captured, BenchError> {
    let context = stream.context();
    let tracking = context.is_event_tracking();
    // SAFETY: the rank's buffers are allocated on, and used only on,
    // `stream`, so no cross-stream synchronisation is lost while tracking
    // is off; it is turned back on below before anything else runs.
    unsafe { context.disable_event_tracking() };
    let captured = capture_calls(launch, shifts, agg, stream);
    if tracking {
        // SAFETY: no buffer was created while tracking was off.
        unsafe { context.enable_event_tracking() };
    }
    captured
}

fn capture_calls(
    launch: &mut Launch<'_>,
    shifts: &[Shift],
    agg: usize,
    stream: &Arc<CudaStream>,
) -> Result<Captured, BenchError> {
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(nccl_core::Error::cuda("beginning a CUDA graph capture"))?;
    let launched = shifts.chunks(agg.max(1)).try_for_each(&mut *launch);
    // Always end the capture, so that the stream is usable again.
    let ended = stream.end_capture(CUgraphInstantiate_flags(0));
    launched?;
    match ended.map_err(nccl_core::Error::cuda("ending the CUDA graph capture"))? {
        Some(graph) => Ok(Captured::Graph(graph)),
        None => Ok(Captured::Empty),
    }
}

/// Replays `graph` `replays` times and waits once: the time per captured
/// call (`calls` calls in the graph).
///
/// # Errors
/// A failed replay or wait.
pub fn time_replays(
    graph: &Captured,
    replays: u32,
    calls: usize,
    waiter: &Waiter<'_>,
) -> Result<Timed, BenchError> {
    let start = Instant::now();
    for _ in 0..replays {
        graph.replay()?;
    }
    let issued = start.elapsed();
    waiter.wait("waiting for the graph replays")?;
    let calls = u64::from(replays) * calls as u64;
    Ok(Timed {
        wall_us: per_call_us(start.elapsed().as_secs_f64(), calls),
        cpu_us: per_call_us(issued.as_secs_f64(), calls),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotation::Rotation;

    #[test]
    fn median_intervals_are_the_sign_tests_order_statistics() {
        let ranks = |n: usize| {
            let values: Vec<f64> = (1..=n).map(|v| v as f64).collect();
            median_interval(&values)
        };
        assert_eq!(ranks(5), None);
        // The textbook table: n = 6 -> 1st and 6th, 15 -> 4th and 12th,
        // 25 -> 8th and 18th, 100 -> 40th and 61st.
        assert_eq!(ranks(6), Some((1.0, 6.0)));
        assert_eq!(ranks(15), Some((4.0, 12.0)));
        assert_eq!(ranks(25), Some((8.0, 18.0)));
        assert_eq!(ranks(100), Some((40.0, 61.0)));
        // Past 2^-1074: still the middle, about sqrt(n) either side.
        let (low, high) = ranks(5000).expect("an interval");
        assert!(
            (2400.0..2500.0).contains(&low) && (2501.0..2601.0).contains(&high),
            "{low} {high}"
        );
        assert_eq!(
            median_interval(&[3.0, 9.0, 1.0, 7.0, 5.0, 2.0]),
            Some((1.0, 9.0))
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, 100.0, 2.0, 2.5, 1.5]), Some(2.0));
    }

    /// `timed_loop` on a fake clock and GPU: a launched call takes 3 µs
    /// of the host's time, a wait 1 µs, a meeting 100 µs; every step and
    /// clock read is logged, in order.
    fn fake_loop(shifts: &[Shift], agg: usize, blocking: Blocking) -> (Vec<String>, (u64, u64)) {
        use std::cell::{Cell, RefCell};
        let clock = Cell::new(Duration::ZERO);
        let log = RefCell::new(Vec::new());
        let pass = |step: String, took: u64| {
            log.borrow_mut().push(step);
            clock.set(clock.get() + Duration::from_micros(took));
            Ok(())
        };
        let steps = LoopSteps {
            launch: |calls: &[Shift]| {
                let at: Vec<usize> = calls.iter().map(|shift| shift.elems).collect();
                pass(format!("launch {at:?}"), 3 * calls.len() as u64)
            },
            wait: &|_| pass("wait".to_string(), 1),
            meet: &|| pass("meet".to_string(), 100),
            mark: &|mark| pass(format!("{mark:?}"), 0),
        };
        let mut now = || {
            log.borrow_mut().push("now".to_string());
            clock.get()
        };
        let (issued, done) = timed_loop(shifts, agg, blocking, &mut now, steps).unwrap();
        let micros = |time: Duration| u64::try_from(time.as_micros()).unwrap();
        (log.into_inner(), (micros(issued), micros(done)))
    }

    #[test]
    fn the_timed_loop_is_nccl_tests_loop() {
        let shifts = Rotation::new(4, 8, 0, 20).shifts(4);
        // -z 0: the clock read at the start of every iteration (nccl-tests'
        // t0), the start marked, the calls launched; after the loop the end
        // marked, the issue time read, one wait, the completion time read.
        let (log, times) = fake_loop(&shifts[..2], 1, Blocking::None);
        assert_eq!(
            log,
            [
                "now",
                "Start(0)",
                "launch [0]",
                "Stop(0)",
                "now",
                "Start(1)",
                "launch [4]",
                "Stop(1)",
                "End(2)",
                "now",
                "wait",
                "now"
            ]
        );
        assert_eq!(times, (6, 7));
        // -m 2: one read per iteration of two calls.
        let (log, times) = fake_loop(&shifts, 2, Blocking::None);
        assert_eq!(log.iter().filter(|step| *step == "now").count(), 2 + 2);
        assert_eq!(times, (12, 13));
        // -z 1: the wait and meeting of each iteration are in the time.
        let (log, times) = fake_loop(&shifts[..2], 1, Blocking::WaitAndBarrier);
        assert_eq!(
            &log[..6],
            ["now", "Start(0)", "launch [0]", "wait", "Stop(0)", "meet"]
        );
        assert_eq!(times, (2 * (3 + 1 + 100), 2 * (3 + 1 + 100) + 1));
        // -z 3: nccl-tests' collOnlySec, each iteration from its first
        // clock read to a second one after its wait and stop mark, the
        // meetings left out, for both times.
        let (log, times) = fake_loop(&shifts[..2], 1, Blocking::WaitAndBarrierUntimed);
        assert_eq!(
            log,
            [
                "now",
                "Start(0)",
                "launch [0]",
                "wait",
                "Stop(0)",
                "now",
                "meet",
                "now",
                "Start(1)",
                "launch [4]",
                "wait",
                "Stop(1)",
                "now",
                "meet",
                "End(2)",
                "wait"
            ]
        );
        assert_eq!(times, (2 * (3 + 1), 2 * (3 + 1)));
    }

    #[test]
    fn per_call_times() {
        assert_eq!(per_call_us(1.0, 1_000_000), 1.0);
        assert_eq!(per_call_us(0.002, 100 * 20), 1.0);
        assert_eq!(per_call_us(0.5, 0), 500_000.0);
    }
}
