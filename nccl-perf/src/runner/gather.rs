//! A process's main thread: it gathers its rank threads' messages (their
//! GPUs, then every rank's sample of every row), shares them with process
//! 0, and there collects every process's, in rank order; and it stops its
//! ranks should any rank of any process fail.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use nccl_group::store::meet::WATCH_SLICE;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::layout::Layout;
use super::meeting::Meeting;
use super::protocol::{Message, RowKey, Sample, Stop};
use crate::error::BenchError;
use crate::memory::MemoryUsage;
use crate::report::DeviceInfo;

/// Gathers the messages of one process's rank threads, and what it takes
/// to stop them.
pub struct Gatherer {
    receiver: Receiver<Message>,
    pending: HashMap<RowKey, Vec<(usize, Sample)>>,
    devices: Vec<DeviceInfo>,
    memory: Vec<(usize, MemoryUsage)>,
    stops: Vec<Stop>,
    finished: usize,
    layout: Layout,
    meeting: Arc<Meeting>,
}

/// `value` as shared between processes.
fn encode(value: &impl Serialize) -> Result<Vec<u8>, BenchError> {
    serde_json::to_vec(value).map_err(|error| {
        BenchError::Usage(format!(
            "internal error: a shared value cannot be written ({error})"
        ))
    })
}

/// What process `process` shared as `name`.
fn decode<T: DeserializeOwned>(bytes: &[u8], process: usize, name: &str) -> Result<T, BenchError> {
    serde_json::from_slice(bytes).map_err(|error| {
        BenchError::Usage(format!(
            "process {process}'s {name} cannot be read here ({error}): run the same nccl-perf build \
             in every process"
        ))
    })
}

impl Gatherer {
    /// The gatherer of the rank threads of `layout`'s process, which meets
    /// the other processes at `meeting`.
    pub fn new(receiver: Receiver<Message>, layout: Layout, meeting: Arc<Meeting>) -> Self {
        Self {
            receiver,
            pending: HashMap::new(),
            devices: Vec::new(),
            memory: Vec::new(),
            stops: Vec::new(),
            finished: 0,
            layout,
            meeting,
        }
    }

    /// Where this process meets the others.
    pub fn meeting(&self) -> &Meeting {
        &self.meeting
    }

    /// Handles the next message of a rank thread. It waits at most the
    /// meeting's timeout (a rank silent that long is taken as stuck), and
    /// stops within a slice when a process has failed.
    fn receive(&mut self) -> Result<(), BenchError> {
        // A timeout past what `Instant` holds (NCCL_RS_STORE_TIMEOUT_SECS
        // is any u64) is no bound, rather than an overflow.
        let deadline = Instant::now().checked_add(self.meeting.timeout());
        let message = loop {
            match self.receiver.recv_timeout(WATCH_SLICE) {
                Ok(message) => break message,
                Err(RecvTimeoutError::Disconnected) => return Err(BenchError::Lost),
                Err(RecvTimeoutError::Timeout) => {
                    self.meeting.check()?;
                    if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        let ranks = self.layout.ranks();
                        return Err(BenchError::Absent {
                            missing: format!(
                                "ranks {}..{} of this process",
                                ranks.start, ranks.end
                            ),
                            what: "their next result (stuck in NCCL or CUDA? a batch that takes \
                                   longer needs a larger NCCL_RS_STORE_TIMEOUT_SECS)"
                                .to_string(),
                            waited: self.meeting.timeout(),
                        });
                    }
                }
            }
        };
        match message {
            Message::Ready { device, stop } => {
                self.stops.push(stop);
                self.devices.push(device);
            }
            Message::Measured { rank, key, sample } => {
                self.pending.entry(key).or_default().push((rank, sample));
            }
            Message::Memory { rank, usage } => self.memory.push((rank, usage)),
            Message::Finished => self.finished += 1,
            Message::Failed(error) => return Err(error),
        }
        Ok(())
    }

    /// Stops every rank of this process, so that none stays blocked.
    pub fn stop_everyone(&self) {
        for stop in &self.stops {
            stop();
        }
    }

    /// The GPUs of every rank, in rank order (on process 0; an empty list
    /// elsewhere, once this process's are shared).
    ///
    /// # Errors
    /// A rank failed here or elsewhere, did not come, or the store's.
    pub fn devices(&mut self) -> Result<Vec<DeviceInfo>, BenchError> {
        while self.devices.len() < self.layout.per_process() {
            self.receive()?;
        }
        let mut local = std::mem::take(&mut self.devices);
        local.sort_by_key(|device| device.rank);
        self.everyone(local, "devices", "the exchange of GPUs")
    }

    /// Every rank's sample of `key`, in rank order (on process 0; an
    /// empty list elsewhere, once this process's are shared).
    ///
    /// # Errors
    /// As [`Gatherer::devices`].
    pub fn samples(&mut self, key: RowKey) -> Result<Vec<Sample>, BenchError> {
        let per_process = self.layout.per_process();
        while self
            .pending
            .get(&key)
            .is_none_or(|samples| samples.len() < per_process)
        {
            self.receive()?;
        }
        let mut local = self.pending.remove(&key).unwrap_or_default();
        local.sort_by_key(|(rank, _)| *rank);
        let local: Vec<Sample> = local.into_iter().map(|(_, sample)| sample).collect();
        self.everyone(local, &key.name(), "the exchange of a row's results")
    }

    /// This process's `local` values (one per rank) shared as `name`;
    /// process 0 returns every process's, in rank order.
    fn everyone<T: Serialize + DeserializeOwned>(
        &self,
        local: Vec<T>,
        name: &str,
        what: &str,
    ) -> Result<Vec<T>, BenchError> {
        let Some(shared) = self.meeting.gather(name, what, &encode(&local)?)? else {
            return Ok(Vec::new());
        };
        let mut all = local;
        for (process, bytes) in shared.iter().enumerate().skip(1) {
            let values: Vec<T> = decode(bytes, process, name)?;
            if values.len() != self.layout.per_process() {
                return Err(BenchError::Usage(format!(
                    "process {process}'s {name} are of {} rank(s), process 0 expected {}: start every \
                     process with the same -t and -g",
                    values.len(),
                    self.layout.per_process()
                )));
            }
            all.extend(values);
        }
        Ok(all)
    }

    /// Every rank's memory usage (`-M 1`), in rank order (on process 0; an
    /// empty list elsewhere, once this process's are shared).
    ///
    /// # Errors
    /// As [`Gatherer::devices`].
    pub fn memory(&mut self) -> Result<Vec<MemoryUsage>, BenchError> {
        while self.memory.len() < self.layout.per_process() {
            self.receive()?;
        }
        let mut local = std::mem::take(&mut self.memory);
        local.sort_by_key(|(rank, _)| *rank);
        let local: Vec<MemoryUsage> = local.into_iter().map(|(_, usage)| usage).collect();
        self.everyone(local, "memory", "the exchange of the memory report")
    }

    /// Waits until every rank of this process is done.
    ///
    /// # Errors
    /// As [`Gatherer::devices`].
    pub fn finished(&mut self) -> Result<(), BenchError> {
        while self.finished < self.layout.per_process() {
            self.receive()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use nccl_group::{InProcessStore, Store};

    use super::*;
    use crate::collective::Mode;
    use crate::error::tests::assert_timeout_starting;
    use crate::threads::on_threads;
    use crate::world::World;

    /// The store's timeout where every process comes: a hang guard, which
    /// only a deadlock outlasts, however loaded the machine.
    const PATIENCE: Duration = Duration::from_secs(60);

    const KEY: RowKey = RowKey {
        collective: 0,
        row: 0,
        mode: Mode::OutOfPlace,
        layer: 0,
    };

    /// What a process's gatherer returned (its devices and the row), and
    /// how often its ranks were stopped.
    type Ended = (
        Result<(Vec<DeviceInfo>, Vec<Sample>, Vec<MemoryUsage>), BenchError>,
        usize,
    );

    fn device(rank: usize) -> DeviceInfo {
        DeviceInfo {
            rank,
            ordinal: rank % 2,
            name: "GPU".to_string(),
            pci: "0000:00:00".to_string(),
            host: format!("host{}", rank / 2),
            pid: rank as u32,
        }
    }

    /// Process `process` of `processes` with two ranks (threads that send
    /// what a rank thread sends, rank r's sample `r + 1` µs with `r`
    /// wrong, two iterations of `r` µs and `r` bytes of initialization,
    /// or a failure of `failing_rank`), over `store`.
    fn process(
        process: usize,
        processes: usize,
        store: &Arc<dyn Store>,
        failing_rank: Option<usize>,
    ) -> Ended {
        let mut world = World::in_store(process, processes, Arc::clone(store), "test");
        world.local_rank = 0;
        let layout = Layout::new(&world, 1, Some(2), 2).unwrap();
        let meeting = Arc::new(Meeting::new(world));
        let stopped = Arc::new(AtomicUsize::new(0));
        let (sender, receiver) = mpsc::channel();
        for rank in layout.ranks() {
            let (sender, stopped) = (sender.clone(), Arc::clone(&stopped));
            std::thread::spawn(move || {
                let stop: Stop = Box::new(move || {
                    stopped.fetch_add(1, Ordering::Relaxed);
                });
                let _ = sender.send(Message::Ready {
                    device: device(rank),
                    stop,
                });
                if failing_rank == Some(rank) {
                    let _ = sender.send(Message::Failed(BenchError::Rank {
                        rank,
                        gpu: rank % 2,
                        source: Box::new(BenchError::Usage("a test failure".to_string())),
                    }));
                    return;
                }
                let sample = Sample {
                    time_us: Some(rank as f64 + 1.0),
                    wrong: Some(rank as u64),
                    iter_us: Some(vec![rank as f64; 2]),
                };
                let _ = sender.send(Message::Measured {
                    rank,
                    key: KEY,
                    sample,
                });
                let usage = MemoryUsage {
                    init: rank as i64,
                    ..MemoryUsage::default()
                };
                let _ = sender.send(Message::Memory { rank, usage });
                let _ = sender.send(Message::Finished);
            });
        }
        drop(sender);
        let mut gatherer = Gatherer::new(receiver, layout, Arc::clone(&meeting));
        let result = (|| {
            let devices = gatherer.devices()?;
            let samples = gatherer.samples(KEY)?;
            let memory = gatherer.memory()?;
            gatherer.finished()?;
            let wrong: u64 = samples.iter().filter_map(|s| s.wrong).sum();
            meeting.conclude(wrong)?;
            Ok((devices, samples, memory))
        })();
        let result = result.map_err(|error| {
            let error = meeting.fail(error);
            gatherer.stop_everyone();
            error
        });
        (result, stopped.load(Ordering::Relaxed))
    }

    fn run_processes(
        processes: usize,
        timeout: Duration,
        failing_rank: Option<usize>,
    ) -> Vec<Ended> {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::with_timeout(timeout));
        on_threads(processes, |p| process(p, processes, &store, failing_rank))
    }

    #[test]
    fn process_0_gets_every_rank_in_rank_order() {
        let results = run_processes(3, PATIENCE, None);
        let (first, stopped) = &results[0];
        let (devices, samples, memory) = first.as_ref().unwrap();
        assert_eq!(
            devices.iter().map(|d| d.rank).collect::<Vec<_>>(),
            (0..6).collect::<Vec<_>>()
        );
        assert_eq!(devices[5].host, "host2");
        let times: Vec<f64> = samples.iter().filter_map(|s| s.time_us).collect();
        assert_eq!(times, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let combined = crate::runner::reduce::combine(samples, crate::method::Average::Mean);
        assert_eq!(
            combined,
            Sample {
                time_us: Some(3.5),
                wrong: Some(15),
                iter_us: None
            }
        );
        // Each rank's per-iteration times cross the store with it, and
        // so does its memory usage.
        assert_eq!(samples[5].iter_us, Some(vec![5.0, 5.0]));
        let inits: Vec<i64> = memory.iter().map(|usage| usage.init).collect();
        assert_eq!(inits, [0, 1, 2, 3, 4, 5]);
        assert_eq!(*stopped, 0);
        for (result, _) in &results[1..] {
            let (devices, samples, memory) = result.as_ref().unwrap();
            assert!(devices.is_empty() && samples.is_empty() && memory.is_empty());
        }
        // Alone, a process's own ranks are every rank.
        let alone = run_processes(1, PATIENCE, None);
        let (_, samples, _) = alone[0].0.as_ref().unwrap();
        assert_eq!(samples.len(), 2);
    }

    #[test]
    fn a_failing_rank_stops_every_process_with_its_status() {
        // Rank 3 is process 1's second rank.
        let results = run_processes(3, PATIENCE, Some(3));
        let own = results[1].0.as_ref().unwrap_err();
        assert_eq!(own.to_string(), "rank 3 (GPU 1)");
        assert_eq!(own.exit_code(), 2);
        for process in [0, 2] {
            let (result, _) = &results[process];
            let error = result.as_ref().unwrap_err();
            assert_eq!(
                error.to_string(),
                "process 1 failed: rank 3 (GPU 1): a test failure"
            );
            assert_eq!(error.exit_code(), 2, "{error}");
        }
        // Every process stopped the ranks it had started.
        assert!(
            results.iter().all(|(_, stopped)| *stopped >= 1),
            "{:?}",
            results.iter().map(|r| r.1).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_process_that_never_comes_is_named() {
        // A launch of 2 where only process 0 runs.
        let store: Arc<dyn Store> =
            Arc::new(InProcessStore::with_timeout(Duration::from_millis(400)));
        let (result, _) = process(0, 2, &store, None);
        let error = result.unwrap_err();
        assert_timeout_starting(
            &error,
            "process 1 did not reach the exchange of GPUs within",
        );
    }
}
