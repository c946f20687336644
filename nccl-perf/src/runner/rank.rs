//! One rank thread: its GPU, stream, communicator and process groups, the
//! plan run through every layer, and each measurement sent to its
//! process's main thread.

use nccl_group::Lifecycle;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, Device, UniqueId};
use nccl_group::ProcessGroup;

use super::barrier::RankBarrier;
use super::meeting::Meeting;
use super::plan::Plan;
use super::protocol::{Message, RowKey, Sample};
use crate::buffers::DeviceBuffers;
use crate::check::{CheckData, CheckSetup, count_wrong};
use crate::collective::{Collective, Mode};
use crate::error::BenchError;
use crate::layer::{Call, Layer, Rotation, Shift, new_layer};
use crate::memory::MemoryWatch;
use crate::report::DeviceInfo;
use crate::selection::RowSpec;
use crate::timing::{
    Captured, IterEvents, Pacing, Timed, Waiter, capture, median, time_launches, time_replays,
};

/// The name of the group layers' process groups (one per layer and run),
/// before the layer's name.
const GROUP_NAME: &str = "nccl-perf";

/// Which rank a thread is, on which GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankPlace {
    /// The rank, over every process.
    pub rank: usize,
    /// Its GPU (CUDA ordinal in this process).
    pub gpu: usize,
}

/// A rank thread's body: runs the plan as `place` and tells the main
/// thread how it ended. `id` is the bench communicator's unique id;
/// `meeting` where the ranks of every process meet. A failure is published
/// there at once, so that no rank of any process waits for this one while
/// the main thread is busy elsewhere.
pub fn rank_thread(
    place: RankPlace,
    plan: &Plan,
    id: UniqueId,
    meeting: &Meeting,
    sender: &Sender<Message>,
) {
    let message = match run_rank(place, plan, id, meeting, sender) {
        Ok(()) => Message::Finished,
        Err(error) => Message::Failed(meeting.fail(BenchError::Rank {
            rank: place.rank,
            gpu: place.gpu,
            source: Box::new(error),
        })),
    };
    let _ = sender.send(message);
}

fn run_rank(
    place: RankPlace,
    plan: &Plan,
    id: UniqueId,
    meeting: &Meeting,
    sender: &Sender<Message>,
) -> Result<(), BenchError> {
    let RankPlace { rank, gpu } = place;
    let barrier = RankBarrier::new(meeting, rank, plan.world)?;
    let device = Device::new(gpu)?;
    device.bind_to_thread()?;
    let stream = if plan.method.stream_null {
        device.default_stream()
    } else {
        device.new_stream()?
    };
    // NCCL's creation waits for every rank without a bound: meet first, so
    // that a rank that never comes is named instead.
    barrier.wait("the creation of the communicators")?;
    let mut memory = (plan.method.memory_report)
        .then(|| MemoryWatch::new(device.context().clone()))
        .transpose()?;
    let core = Communicator::with_config(
        device.clone(),
        plan.world,
        id,
        rank,
        &plan.group_options.config,
    )?;
    let abort = core.abort_handle();
    // The tensor layer needs nccl-tensor's communicator; the raw and core
    // layers use the nccl-core communicator inside it.
    let comm = nccl_tensor::Communicator::from_core(core)?;
    let groups = plan
        .layers
        .iter()
        .filter_map(|&kind| Some((kind, kind.stream_mode()?)))
        .map(|(kind, mode)| {
            meeting.world().group_member(
                &format!("{GROUP_NAME}-{}", kind.name()),
                rank,
                plan.world,
                plan.group_options.clone().with_stream_mode(mode),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let groups_to_abort: Vec<ProcessGroup> = groups.clone();
    let _ = sender.send(Message::Ready {
        device: device_info(rank, &device),
        stop: Box::new(move || {
            let _ = abort.abort();
            for group in &groups_to_abort {
                // The process exits next, so an abort that stalls changes nothing.
                let _ = group.abort();
            }
        }),
    });
    for group in &groups {
        // The group's first operation creates its communicator, with every
        // rank; a barrier now keeps that out of the timed batches and CUDA
        // graph captures, whatever -w and -c are.
        group.barrier(&stream)?.wait()?;
    }
    if let Some(memory) = &mut memory {
        memory.initialized()?;
    }
    {
        let layers = plan
            .layers
            .iter()
            .map(|&kind| new_layer(kind, &comm, &groups, &stream))
            .collect::<Result<Vec<_>, _>>()?;
        let measuring = Measuring {
            rank,
            plan,
            comm: &comm,
            stream: &stream,
            barrier: &barrier,
            sender,
            memory: memory.as_ref(),
        };
        for (index, &collective) in plan.collectives.iter().enumerate() {
            measuring.run_collective(index, collective, &layers)?;
        }
    }
    stream.synchronize().map_err(nccl_core::Error::cuda(
        "synchronizing the stream at the end",
    ))?;
    if let Some(memory) = &memory {
        let usage = memory.usage(&stream)?;
        let _ = sender.send(Message::Memory { rank, usage });
    }
    // Collective, like the finalize below: every rank gets here.
    for group in &groups {
        group.destroy()?;
    }
    comm.core().finalize()?;
    Ok(())
}

/// Runs `check_once` `checks` times (`-c`; every rank runs them all, so the
/// ranks stay in step): the wrong elements of the first run that found any,
/// else 0.
fn first_wrong(
    checks: u32,
    mut check_once: impl FnMut() -> Result<u64, BenchError>,
) -> Result<u64, BenchError> {
    let mut found = 0;
    for _ in 0..checks {
        let wrong = check_once()?;
        if found == 0 {
            found = wrong;
        }
    }
    Ok(found)
}

/// A row and mode as errors name them: `reduce of 8 B (f8e4m3, avg, root
/// 0), out of place`.
fn row_name(collective: Collective, spec: &RowSpec, mode: Mode) -> String {
    format!(
        "{} of {} B ({}, {}, root {}), {}",
        collective.name(),
        spec.size,
        spec.dtype.short_name(),
        collective.redop_column(spec.op),
        collective.root_column(spec.root),
        mode.key().replace('_', " ")
    )
}

/// `rank`'s `device` as the table's preamble describes it.
fn device_info(rank: usize, device: &Device) -> DeviceInfo {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let context = device.context();
    let attribute = |a| context.attribute(a).unwrap_or(0);
    DeviceInfo {
        rank,
        host: crate::env::hostname(),
        pid: std::process::id(),
        ordinal: device.ordinal(),
        name: context.name().unwrap_or_else(|_| "unknown GPU".to_string()),
        pci: format!(
            "{:04x}:{:02x}:{:02x}",
            attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            attribute(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)
        ),
    }
}

/// A rank's buffers for one element type: with `-R 1`, registered with its
/// communicator (the registrations are declared first, so they are
/// dropped, and the buffers deregistered, before the memory is freed).
struct Held<'c> {
    /// Held only to be dropped first.
    _registrations: Vec<nccl_core::Registration<'c>>,
    buffers: DeviceBuffers,
    /// Elements each buffer holds for the rotation (without `-u`'s).
    capacity: usize,
}

/// The barrier before each timed batch, as a rank that misses it is told.
const BEFORE_BATCH: &str = "the barrier before a timed batch";

/// What a rank's measurements share: who it is, what it runs, on which
/// stream, where it meets the other ranks and where its results go.
struct Measuring<'a> {
    rank: usize,
    plan: &'a Plan,
    /// The rank's communicator, which `-R 1` registers the buffers with.
    comm: &'a nccl_tensor::Communicator,
    stream: &'a Arc<CudaStream>,
    barrier: &'a RankBarrier<'a>,
    sender: &'a Sender<Message>,
    /// Counts the buffers' memory (`-M 1`).
    memory: Option<&'a MemoryWatch>,
}

impl<'a> Measuring<'a> {
    /// Every row and mode of `collective` (the `index`-th of the plan)
    /// through every layer, on buffers allocated once per element type,
    /// for the largest size (`-e` bytes each, as nccl-tests allocates them).
    fn run_collective(
        &self,
        index: usize,
        collective: Collective,
        layers: &[Box<dyn Layer + '_>],
    ) -> Result<(), BenchError> {
        let (plan, stream) = (self.plan, self.stream);
        let rows = plan.rows(collective);
        let mut held: Option<Held<'_>> = None;
        for (row_index, spec) in rows.iter().enumerate() {
            let Held {
                buffers, capacity, ..
            } = match held.take() {
                Some(same) if same.buffers.dtype() == spec.dtype => held.insert(same),
                other => {
                    // Free the last type's buffers before allocating the next.
                    if let Some(last) = other {
                        self.waiter()?
                            .wait("synchronizing before freeing the buffers")?;
                        drop(last);
                    }
                    held.insert(self.alloc(&rows, spec)?)
                }
            };
            let (send_base, recv_base) = buffers.addresses(stream);
            let call_of = |spec: &RowSpec, mode: Mode| {
                Call::new(
                    collective,
                    mode,
                    &spec.counts,
                    send_base,
                    recv_base,
                    spec.dtype,
                    spec.op,
                    spec.root,
                    self.rank,
                    plan.world,
                )
                .rotated(self.rotation(spec, *capacity))
            };
            if row_index == 0 || rows[row_index - 1].dtype != spec.dtype {
                let same_type = rows[row_index..]
                    .iter()
                    .take_while(|row| row.dtype == spec.dtype);
                let calls: Vec<Call> = same_type
                    .map(|row| call_of(row, Mode::OutOfPlace))
                    .collect();
                self.warm_up(&calls, layers, buffers)?;
            }
            for mode in Mode::BOTH {
                let call = call_of(spec, mode);
                let setup = CheckSetup {
                    collective,
                    mode,
                    counts: spec.counts,
                    dtype: spec.dtype,
                    op: spec.op,
                    root: spec.root,
                    rank: self.rank,
                    world: plan.world,
                };
                let samples = self
                    .measure_mode(&call, &setup, layers, buffers)
                    .map_err(|error| error.in_row(|| row_name(collective, spec, mode)))?;
                for (slot, sample) in samples.into_iter().enumerate() {
                    let key = RowKey {
                        collective: index,
                        row: row_index,
                        mode,
                        layer: slot,
                    };
                    let _ = self.sender.send(Message::Measured {
                        rank: self.rank,
                        key,
                        sample,
                    });
                }
            }
        }
        self.waiter()?
            .wait("synchronizing before freeing the buffers")?;
        Ok(())
    }

    /// [`Measuring::allocate`], counted for `-M 1`.
    fn alloc(&self, rows: &[RowSpec], spec: &RowSpec) -> Result<Held<'a>, BenchError> {
        match self.memory {
            Some(memory) => memory.allocation(self.stream, || self.allocate(rows, spec)),
            None => self.allocate(rows, spec),
        }
    }

    /// Buffers for the rows of `spec`'s element type among `rows`, and
    /// the elements each holds for the rotation (without `-u`'s), from the
    /// plan's allocator (`--alloc`); with `-R 1`, registered with the
    /// rank's communicator.
    fn allocate(&self, rows: &[RowSpec], spec: &RowSpec) -> Result<Held<'a>, BenchError> {
        let method = &self.plan.method;
        let largest = rows
            .iter()
            .filter(|row| row.dtype == spec.dtype)
            .map(|row| row.counts.buffer_elems())
            .max()
            .unwrap_or(0);
        let capacity = method.capacity_elems(spec.dtype.size_bytes(), largest);
        let buffers = DeviceBuffers::alloc_in(
            spec.dtype,
            capacity + method.unalign,
            self.stream,
            method.memory,
        )?;
        let registrations = if method.register {
            let (send, recv) = buffers.addresses(self.stream);
            [send, recv]
                .into_iter()
                .map(|address| {
                    // SAFETY: `address` is the start of one of `buffers`'
                    // two allocations of `bytes()` bytes on the rank's
                    // device; `Held` drops its registrations before its
                    // buffers, so the memory outlives them.
                    unsafe {
                        self.comm
                            .core()
                            .register(address as *mut std::ffi::c_void, buffers.bytes())
                    }
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        Ok(Held {
            _registrations: registrations,
            buffers,
            capacity,
        })
    }

    /// The places the calls of `spec` rotate through in buffers of
    /// `capacity` elements: nccl-tests' rotation, or none with --no-rotate.
    fn rotation(&self, spec: &RowSpec, capacity: usize) -> Rotation {
        let method = &self.plan.method;
        if method.rotate {
            Rotation::new(
                spec.counts.buffer_elems(),
                capacity,
                method.unalign,
                self.plan.warmup.max(self.timed_calls()) as usize,
            )
        } else {
            Rotation::fixed(method.unalign)
        }
    }

    /// Calls per timed batch (and in each captured graph): `-n` iterations
    /// of `-m` calls.
    fn timed_calls(&self) -> u32 {
        self.plan.iters.saturating_mul(self.plan.method.agg_iters)
    }

    /// A waiter for this rank's stream, bounded by `-T`.
    fn waiter(&self) -> Result<Waiter<'_>, BenchError> {
        Waiter::new(self.stream, self.plan.method.timeout)
    }

    /// nccl-tests' warm-up: `-w` out-of-place launches of each of `calls`
    /// (every size of one element type, smallest first) through every
    /// layer that supports them, then one wait; done once before the
    /// first row of the type is timed, as nccl-tests warms every size
    /// before its first timed one. Warming each size right before timing
    /// it instead reads faster than nccl-tests where launches bound the
    /// time (1 to 8 MiB on one H200).
    fn warm_up(
        &self,
        calls: &[Call],
        layers: &[Box<dyn Layer + '_>],
        buffers: &mut DeviceBuffers,
    ) -> Result<(), BenchError> {
        let warmup = self.plan.warmup as usize;
        for call in calls {
            let shifts = call.rotation.shifts(warmup);
            for layer in layers
                .iter()
                .filter(|layer| layer.supports(call.collective, call.mode))
            {
                let mut launch = layer.bind(call, buffers)?;
                for shift in &shifts {
                    launch(std::slice::from_ref(shift))?;
                }
            }
        }
        self.waiter()?.wait("synchronizing after the warm-up")
    }

    /// Checks, (captures) and times one call through every layer
    /// of the plan: per layer, the median time per call (`None` where the
    /// layer cannot issue the call), with `-I 1` each timed iteration's
    /// time, and this rank's wrong elements. Each
    /// launch is at the next place of the call's rotation, computed here
    /// before the loops.
    fn measure_mode(
        &self,
        call: &Call,
        setup: &CheckSetup,
        layers: &[Box<dyn Layer + '_>],
        buffers: &mut DeviceBuffers,
    ) -> Result<Vec<Sample>, BenchError> {
        let (plan, stream, barrier) = (self.plan, self.stream, self.barrier);
        let method = &plan.method;
        let supported: Vec<bool> = layers
            .iter()
            .map(|layer| layer.supports(call.collective, call.mode))
            .collect();
        let active = || {
            layers
                .iter()
                .zip(&supported)
                .enumerate()
                .filter(|(_, (_, supported))| **supported)
                .map(|(slot, (layer, _))| (slot, layer.as_ref()))
        };
        let waiter = self.waiter()?;
        let calls = self.timed_calls() as usize;
        let shifts = call.rotation.shifts(calls.max(1));
        let mut wrong = vec![None; layers.len()];
        if method.checks_results()
            && let Some(data) = setup.data()
        {
            for (slot, layer) in active() {
                wrong[slot] = Some(first_wrong(self.plan.method.checks, || {
                    self.check_once(layer, call, setup, &data, buffers, &waiter)
                })?);
            }
        }
        // nccl-tests' "sync" call: one launch, waited for, right before
        // the timed ones (the warm-up ran before the first row).
        for (_, layer) in active() {
            let mut launch = layer.bind(call, buffers)?;
            launch(&shifts[..1])?;
        }
        waiter.wait("synchronizing after the sync call")?;
        let agg = method.agg_iters as usize;
        let mut graphs: Vec<Option<Captured>> = (0..layers.len()).map(|_| None).collect();
        if plan.graph > 0 {
            for (slot, layer) in active() {
                let mut launch = layer.bind(call, buffers)?;
                let captured =
                    capture(&mut launch, &shifts[..calls], agg, stream).map_err(|source| {
                        BenchError::Capture {
                            layer: layer.kind().name(),
                            collective: call.collective.name(),
                            iters: self.timed_calls(),
                            source: Box::new(source),
                        }
                    })?;
                // No untimed replay: nccl-tests times the first replays of
                // a graph just instantiated, whose first launch uploads it,
                // so the first batch carries the upload here too.
                graphs[slot] = Some(captured);
            }
        }
        let meet = || barrier.wait("the barrier after a blocking iteration (-z)");
        let events = method
            .per_iter
            .map(|_| IterEvents::new(stream, plan.iters as usize, method.blocking))
            .transpose()?;
        let pacing = Pacing {
            agg,
            blocking: method.blocking,
            meet: &meet,
            events: events.as_ref(),
        };
        let mut times: Vec<Vec<f64>> =
            vec![Vec::with_capacity(plan.batches as usize); layers.len()];
        let mut iter_us: Vec<Vec<f64>> = vec![Vec::new(); layers.len()];
        for _ in 0..plan.batches {
            for (slot, layer) in active() {
                let timed: Timed = match &graphs[slot] {
                    Some(graph) => {
                        barrier.wait(BEFORE_BATCH)?;
                        time_replays(graph, plan.graph, calls, &waiter)?
                    }
                    None => {
                        let mut launch = layer.bind(call, buffers)?;
                        barrier.wait(BEFORE_BATCH)?;
                        let timed = time_launches(&mut launch, &shifts[..calls], &pacing, &waiter)?;
                        if let Some(events) = &events {
                            iter_us[slot].extend(events.iteration_us(agg)?);
                        }
                        timed
                    }
                };
                times[slot].push(if method.cpu_time {
                    timed.cpu_us
                } else {
                    timed.wall_us
                });
            }
        }
        Ok(times
            .iter()
            .zip(wrong)
            .zip(iter_us)
            .map(|((times, wrong), iter_us)| Sample {
                time_us: median(times),
                wrong,
                iter_us: (events.is_some() && !times.is_empty()).then_some(iter_us),
            })
            .collect())
    }

    /// Fills the inputs, poisons the outputs, runs the call once through
    /// `layer` at the first place of its rotation (nccl-tests checks
    /// iteration 0) and counts this rank's wrong elements.
    fn check_once(
        &self,
        layer: &dyn Layer,
        call: &Call,
        setup: &CheckSetup,
        data: &CheckData,
        buffers: &mut DeviceBuffers,
        waiter: &Waiter<'_>,
    ) -> Result<u64, BenchError> {
        let stream = self.stream;
        let place: Shift = call.rotation.shift(0);
        buffers.upload(&data.send, &data.recv, place.elems, stream)?;
        waiter.wait("synchronizing after the check inputs")?;
        self.barrier.wait("the barrier before a checked run")?;
        {
            let mut launch = layer.bind(call, buffers)?;
            launch(std::slice::from_ref(&place))?;
        }
        waiter.wait("synchronizing after the checked run")?;
        let Some(expected) = &data.expected else {
            return Ok(0);
        };
        if expected.is_empty() {
            return Ok(0);
        }
        let elem = setup.dtype.size_bytes();
        let got = buffers.download_recv(
            place.elems + data.result_offset,
            expected.len() / elem,
            stream,
        )?;
        Ok(count_wrong(setup.dtype, &got, expected))
    }
}
