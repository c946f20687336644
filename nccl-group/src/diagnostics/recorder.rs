//! The flight recorder: the last operations of a group, always on, so a
//! hang or a failure can be explained after the fact.
//!
//! Each operation takes one uncontended lock to claim its sequence numbers
//! and write a record (which borrows its names: no allocation) into a ring
//! allocated and written whole when the recorder is made, so no operation
//! faults a page of it in; the watchdog marks records completed as it sees
//! their end events. A dump ([`FlightDump`]) is a JSON document: the group,
//! this process's rank, why it was taken, how far this process got (and,
//! after a timeout, how far every other rank got, exchanged through the
//! store), and the records oldest first. [`crate::dumps`] writes dumps to files (and in PyTorch's
//! format); [`crate::analysis`] reads them back.

pub(crate) mod records;

#[cfg(feature = "cuda")]
pub use records::OpDescription;
pub use records::{FlightDump, OpRecord, OpState, PeerProgress, lagging_ranks, thread_name};

// The ring is the group's (feature `cuda`); without it the module is
// the records a dump holds.
with_cuda! {
    use std::borrow::Cow;
    use std::sync::{Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use crate::devices::DeviceList;
    use crate::diagnostics::clock;
    use crate::diagnostics::metrics::GroupMetrics;

    thread_local! {
        /// The calling thread's id as the operating system knows it: read once
        /// per thread, so recording an operation costs a thread-local read.
        static OS_THREAD_ID: u64 = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|link| link.file_name()?.to_str()?.parse().ok())
            .unwrap_or(0);
    }

    /// The most operations a flight recorder keeps: 2^20 records (192 MiB,
    /// allocated when the group is built).
    ///
    /// [`GroupBuilder::build`](crate::GroupBuilder::build) refuses a larger
    /// [`GroupOptions::recorder_capacity`](crate::GroupOptions::recorder_capacity).
    pub const MAX_RECORDER_CAPACITY: usize = 1 << 20;

    /// An operation as the ring keeps it: its description as given, its
    /// numbers and times, and the verification stamp of its end
    /// (`crate::health::verify`, 0 before: the watchdog's, not the dump's).
    ///
    /// Plain values only, on three cache lines of their own: recording
    /// writes a whole slot over the one it replaces without reading it (no
    /// field has a destructor to run), and two records never share a line.
    /// The [`OpRecord`] a dump holds is built from it when one is asked for.
    #[derive(Clone, Copy)]
    #[repr(align(64))]
    struct Slot {
        description: OpDescription,
        seq: u64,
        /// Its number among the collectives or, for a point-to-point
        /// operation, among those (`description.collective` says which).
        number: u64,
        thread: u64,
        enqueued_us: u64,
        /// Meaningful once `state` is no longer pending.
        finished_us: u64,
        gpu_duration: Option<Duration>,
        end_stamp: u64,
        state: OpState,
    }

    const _: () = assert!(std::mem::size_of::<Slot>() == 192, "a slot is three cache lines");

    impl Slot {
        /// The `seq` of a slot no operation was recorded in: no operation's.
        const UNUSED: u64 = u64::MAX;

        /// Whether this is operation `seq`'s record (an unused slot is no
        /// operation's, whatever number is asked for).
        fn holds(&self, seq: u64) -> bool {
            self.seq == seq && seq != Self::UNUSED
        }

        /// A slot no operation has been recorded in yet (beyond the ring's
        /// `recorded` ones, never read).
        fn unused() -> Self {
            Self {
                description: OpDescription {
                    op: "",
                    dtype: None,
                    count: 0,
                    output_count: 0,
                    reduction: None,
                    peer: None,
                    timeout: Duration::ZERO,
                    devices: DeviceList::single(0),
                    collective: false,
                },
                seq: Self::UNUSED,
                number: 0,
                thread: 0,
                enqueued_us: 0,
                finished_us: 0,
                gpu_duration: None,
                end_stamp: 0,
                state: OpState::Pending,
            }
        }

        /// The record a dump, a failure or a test reads.
        fn record(&self) -> OpRecord {
            let description = &self.description;
            let (collective_seq, p2p_seq) = if description.collective {
                (Some(self.number), None)
            } else {
                (None, Some(self.number))
            };
            OpRecord {
                seq: self.seq,
                collective_seq,
                p2p_seq,
                op: Cow::Borrowed(description.op),
                dtype: description.dtype.map(|dtype| Cow::Borrowed(dtype.short_name())),
                count: description.count,
                output_count: description.output_count,
                reduction: description.reduction.map(Cow::Borrowed),
                peer: description.peer,
                timeout: description.timeout,
                thread: self.thread,
                devices: description.devices,
                enqueued_us: self.enqueued_us,
                finished_us: (self.state != OpState::Pending).then_some(self.finished_us),
                gpu_duration: self.gpu_duration,
                state: self.state,
            }
        }
    }

    struct Ring {
        /// Every slot, written when the recorder is made: the pages they
        /// are on are the process's before the first operation.
        slots: Vec<Slot>,
        next_seq: u64,
        next_collective: u64,
        next_p2p: u64,
        last_completed: Option<u64>,
    }

    impl Ring {
        /// How many slots hold a record, from the first: all of them once
        /// the ring has gone round.
        fn recorded(&self) -> usize {
            usize::try_from(self.next_seq).map_or(self.slots.len(), |n| n.min(self.slots.len()))
        }
    }

    /// An operation's numbers, as [`FlightRecorder::record`] gave them.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Numbers {
        /// Its number among the group's operations ([`OpRecord::seq`]).
        pub(crate) seq: u64,
        /// Its number among the group's collectives, if it is one
        /// ([`OpRecord::collective_seq`]).
        pub(crate) collective: Option<u64>,
    }

    /// The ring of the last `capacity` operations of one group.
    pub struct FlightRecorder {
        ring: Mutex<Ring>,
        capacity: usize,
        /// `capacity - 1` where the capacity is a power of two (as the
        /// default is): a slot's index is then a mask, not a division.
        mask: Option<u64>,
        /// Where the operations it records and their ends are counted too.
        metrics: GroupMetrics,
    }

    impl std::fmt::Debug for FlightRecorder {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("FlightRecorder")
                .field("capacity", &self.capacity)
                .finish()
        }
    }

    impl FlightRecorder {
        /// A recorder keeping the last `capacity` operations (at least one, at
        /// most [`MAX_RECORDER_CAPACITY`]: a larger capacity is clamped to it
        /// rather than attempting an allocation that would abort the process).
        pub fn new(capacity: usize) -> Self {
            let capacity = capacity.clamp(1, MAX_RECORDER_CAPACITY);
            clock::fix();
            Self {
                ring: Mutex::new(Ring {
                    slots: vec![Slot::unused(); capacity],
                    next_seq: 0,
                    next_collective: 0,
                    next_p2p: 0,
                    last_completed: None,
                }),
                capacity,
                mask: capacity.is_power_of_two().then(|| capacity as u64 - 1),
                metrics: GroupMetrics::default(),
            }
        }

        /// The same recorder, counting what it records in `metrics` too.
        pub(crate) fn with_metrics(self, metrics: GroupMetrics) -> Self {
            Self { metrics, ..self }
        }

        /// The group's metrics.
        pub(crate) fn metrics(&self) -> &GroupMetrics {
            &self.metrics
        }

        /// The slot of operation `seq`.
        fn index(&self, seq: u64) -> usize {
            match self.mask {
                Some(mask) => (seq & mask) as usize,
                None => (seq % self.capacity as u64) as usize,
            }
        }

        fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
            self.ring.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// Microseconds from the epoch ([`FlightRecorder::epoch_unix_us`]) to `at`.
        pub fn micros(&self, at: Instant) -> u64 {
            clock::nanos(at) / 1000
        }

        /// Records an operation about to be enqueued, at `enqueued`
        /// nanoseconds from the epoch (`diagnostics::clock`, the clock the
        /// enqueue watch reads too: one conversion per operation); returns its
        /// [`Numbers`].
        ///
        /// The record is written into its slot once (nothing is copied
        /// back out, nothing is allocated).
        pub(crate) fn record(&self, description: &OpDescription, enqueued: u64) -> Numbers {
            self.metrics.issued(description);
            let thread = OS_THREAD_ID.with(|id| *id);
            let enqueued_us = enqueued / 1000;
            let mut ring = self.ring();
            let seq = ring.next_seq;
            ring.next_seq += 1;
            let counter = if description.collective {
                &mut ring.next_collective
            } else {
                &mut ring.next_p2p
            };
            let number = *counter;
            *counter += 1;
            let slot = Slot {
                description: *description,
                seq,
                number,
                thread,
                enqueued_us,
                finished_us: 0,
                gpu_duration: None,
                end_stamp: 0,
                state: OpState::Pending,
            };
            let index = self.index(seq);
            if let Some(old) = ring.slots.get_mut(index) {
                *old = slot;
            }
            Numbers {
                seq,
                collective: description.collective.then_some(number),
            }
        }

        /// Marks operation `seq` finished at `at` (if it is still in the
        /// ring), its end stamped `end_stamp` (`crate::health::verify`),
        /// after `gpu_duration` on the GPU where it was timed.
        pub(crate) fn finish(
            &self,
            seq: u64,
            state: OpState,
            at: Instant,
            end_stamp: u64,
            gpu_duration: Option<Duration>,
        ) {
            self.finishing(self.micros(at))
                .finish(seq, state, end_stamp, gpu_duration);
        }

        /// The ring locked once for operations that finish together, at
        /// `finished` microseconds from the epoch ([`FlightRecorder::micros`]):
        /// for a reap of many operations, which takes the lock and converts
        /// the time once.
        pub(crate) fn finishing(&self, finished: u64) -> Finishing<'_> {
            Finishing {
                ring: Some(self.ring()),
                recorder: self,
                finished,
                #[cfg(feature = "metrics")]
                ended: Vec::new(),
            }
        }

        /// The sequence number the next recorded operation gets.
        #[cfg(feature = "nvtx")]
        pub(crate) fn next_seq(&self) -> u64 {
            self.ring().next_seq
        }

        /// Operation `seq`'s record, if it is still in the ring.
        pub fn get(&self, seq: u64) -> Option<OpRecord> {
            let index = self.index(seq);
            self.ring()
                .slots
                .get(index)
                .filter(|s| s.holds(seq))
                .map(Slot::record)
        }

        /// Marks every operation still pending as failed at `at`.
        pub(crate) fn fail_pending(&self, at: Instant) {
            let mut finishing = self.finishing(self.micros(at));
            let pending: Vec<u64> = finishing
                .ring
                .iter()
                .flat_map(|ring| ring.slots.iter().take(ring.recorded()))
                .filter(|slot| slot.state == OpState::Pending)
                .map(|slot| slot.seq)
                .collect();
            for seq in pending {
                finishing.finish(seq, OpState::Failed, 0, None);
            }
        }

        /// Marks every completed operation that `verified` (given its record and
        /// its end's stamp) does not verify
        /// as [`OpState::Suspect`] (when the group fails); returns them,
        /// oldest first.
        pub(crate) fn mark_suspect(
            &self,
            verified: impl Fn(&OpRecord, u64) -> bool,
        ) -> Vec<OpRecord> {
            let mut ring = self.ring();
            let recorded = ring.recorded();
            let mut suspects: Vec<OpRecord> = ring
                .slots
                .iter_mut()
                .take(recorded)
                .filter(|s| s.state == OpState::Completed && !verified(&s.record(), s.end_stamp))
                .map(|slot| {
                    slot.state = OpState::Suspect;
                    slot.record()
                })
                .collect();
            suspects.sort_unstable_by_key(|r| r.seq);
            suspects
        }

        /// `(last collective enqueued, last collective completed)`.
        pub fn progress(&self) -> (Option<u64>, Option<u64>) {
            let ring = self.ring();
            (ring.next_collective.checked_sub(1), ring.last_completed)
        }

        /// The records, oldest first, and how many were recorded in all.
        pub fn snapshot(&self) -> (Vec<OpRecord>, u64) {
            let ring = self.ring();
            let mut records: Vec<OpRecord> = ring.slots.iter().take(ring.recorded()).map(Slot::record).collect();
            records.sort_unstable_by_key(|r| r.seq);
            (records, ring.next_seq)
        }

        /// The moment the recorder's times count from, in microseconds
        /// since the Unix epoch: one for every recorder of the process, fixed
        /// at the first use of the process's clock (`diagnostics::clock`),
        /// at the latest when the first recorder was made.
        pub fn epoch_unix_us(&self) -> u64 {
            clock::epoch_unix_us()
        }

        /// The tests' dump of this recorder's records: rank `rank` of
        /// `world_size` in generation 0 of `group`, for `reason`, taken at
        /// 0 µs by process 1, every optional part empty.
        #[cfg(test)]
        pub(crate) fn test_dump(
            &self,
            group: &str,
            rank: usize,
            world_size: usize,
            reason: &str,
        ) -> FlightDump {
            let (ops, total_recorded) = self.snapshot();
            FlightDump {
                group: group.into(),
                generation: 0,
                rank,
                world_size,
                reason: reason.into(),
                epoch_unix_us: self.epoch_unix_us(),
                dumped_us: 0,
                pid: 1,
                nccl_version: None,
                last_enqueued: None,
                last_completed: None,
                peers: Vec::new(),
                lagging: Vec::new(),
                divergence: None,
                ras: None,
                total_recorded,
                threads: FlightDump::thread_names(&ops),
                ops,
            }
        }
    }

    /// Operations finishing together ([`FlightRecorder::finishing`]): the
    /// ring stays locked until this drops, so a thread recording an
    /// operation of the group meanwhile waits for the rest of the reap (its
    /// polls of ends not shared, and their GPU times, are driver calls).
    pub(crate) struct Finishing<'a> {
        /// `None` only while this drops.
        ring: Option<std::sync::MutexGuard<'a, Ring>>,
        recorder: &'a FlightRecorder,
        finished: u64,
        /// Each finished operation's name, state and latency, for the
        /// metrics, which are reported once the ring is unlocked (the
        /// metrics recorder is the application's code).
        #[cfg(feature = "metrics")]
        ended: Vec<(&'static str, OpState, Duration)>,
    }

    impl Finishing<'_> {
        /// Marks operation `seq` finished as `state` (if it is still in the
        /// ring), its end stamped `end_stamp` (`crate::health::verify`: read
        /// when its end was seen, so each its own), after `gpu_duration` on
        /// the GPU where it was timed.
        pub(crate) fn finish(
            &mut self,
            seq: u64,
            state: OpState,
            end_stamp: u64,
            gpu_duration: Option<Duration>,
        ) {
            let Some(ring) = self.ring.as_deref_mut() else {
                return;
            };
            let index = self.recorder.index(seq);
            let Some(slot) = ring.slots.get_mut(index).filter(|s| s.holds(seq)) else {
                return;
            };
            slot.state = state;
            slot.finished_us = self.finished;
            slot.gpu_duration = gpu_duration;
            slot.end_stamp = end_stamp;
            if state == OpState::Completed && slot.description.collective {
                let n = slot.number;
                ring.last_completed = Some(ring.last_completed.map_or(n, |last| last.max(n)));
            }
            #[cfg(feature = "metrics")]
            {
                let latency = self.finished.saturating_sub(slot.enqueued_us);
                let latency = Duration::from_micros(latency);
                self.ended.push((slot.description.op, state, latency));
            }
        }
    }

    impl Drop for Finishing<'_> {
        fn drop(&mut self) {
            drop(self.ring.take());
            #[cfg(feature = "metrics")]
            for (op, state, latency) in self.ended.drain(..) {
                match state {
                    OpState::Completed => self.recorder.metrics.completed(op, latency),
                    OpState::Failed => self.recorder.metrics.failed(op),
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
