//! What the process group's communicator cache costs per operation:
//!
//! * `group_cache/hit`: the communicator-cache lookup an operation does on
//!   a cached key (a fake factory, so it runs without a GPU too).
//! * `flight_recorder/record`: what the always-on flight recorder adds to
//!   the thread issuing an operation (a record, with its timestamp);
//!   `flight_recorder/finish`: the completion mark the watchdog makes
//!   later, off the caller's thread.
//! * `group_parts/*`: the primitives a group operation is built of, each
//!   alone: `instant_now` (a timestamp: an operation takes two, its
//!   enqueue time and its completion's), `arc_alloc` (the record an
//!   operation shares with the watchdog), and on a GPU the driver calls
//!   through cudarc: `event_record` and `stream_wait_event` (two of each
//!   per operation on the group's own stream, one record on the caller's),
//!   `event_query` (the watchdog's poll: when the pending operations end
//!   on one stream, about ten per 256 operations reaped; one per operation
//!   otherwise). Without a GPU the driver calls are skipped (`SKIP:`).
//! * `group_handoff/all_gather_out_of_place_64MiB/*`: what the separate
//!   stream's event handoff costs on the GPU, per operation, outside the
//!   group: nccl-tensor's 64 MiB out-of-place all_gather at world size 1
//!   (a device copy) back to back on one stream (`one-stream`), on a
//!   second stream that waits for the first through an event
//!   (`events-one-way`), and with the first stream also waiting for the
//!   second after each (`events-both-ways`, what `StreamMode::Separate`
//!   and `Work::wait` enqueue), on a normal and on a high-priority second
//!   stream. Each sample ends with a synchronisation, so the time is the
//!   GPU's.
//!
//! The group's whole per-operation host cost (`ProcessGroup` op +
//! `Work::wait`, against raw NCCL and the other layers in the same run) is
//! the `group` entry of the `host_cost` bench.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use nccl_core::{DataType, UniqueId};
use nccl_group::OpState;
use nccl_group::recorder::{FlightRecorder, OpDescription};
use nccl_group::testing::{CommCache, CommFactory, CommKey, DeviceList, Membership};
use nccl_group::{InProcessStore, Store};

/// A factory that makes plain numbers: the cache's own cost, without NCCL.
struct Numbers;

impl CommFactory for Numbers {
    type Comms = u64;

    fn unique_id(&self) -> nccl_group::Result<UniqueId> {
        Ok(UniqueId::from_bytes([1; UniqueId::BYTES]))
    }

    fn create(&self, _: &CommKey, _: UniqueId, world_size: i32, _: i32) -> nccl_group::Result<u64> {
        Ok(world_size as u64)
    }
}

fn cache_hit(criterion: &mut Criterion) {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let membership = Membership::join(
        "bench",
        0,
        1,
        store,
        "in-process".into(),
        Duration::from_secs(5),
    )
    .expect("join an in-process store");
    let cache = CommCache::new(membership, Numbers);
    let key = CommKey::Collective(DeviceList::one(0).expect("one device"));
    cache.get(&key).expect("create the key once");
    criterion.bench_function("group_cache/hit", |b| {
        b.iter(|| black_box(cache.get(black_box(&key)).expect("cached")))
    });
}

fn flight_recorder(criterion: &mut Criterion) {
    let recorder = FlightRecorder::new(2048);
    let description = OpDescription {
        op: "all_reduce",
        dtype: Some(DataType::Float32),
        count: 2,
        peer: None,
        devices: DeviceList::one(0).expect("one device"),
        collective: true,
    };
    // What the thread issuing an operation pays.
    criterion.bench_function("flight_recorder/record", |b| {
        b.iter(|| black_box(recorder.record(black_box(&description), Instant::now()).seq))
    });
    // What the watchdog pays later, off the caller's thread.
    let seq = recorder.record(&description, Instant::now()).seq;
    criterion.bench_function("flight_recorder/finish", |b| {
        b.iter(|| recorder.finish(black_box(seq), OpState::Completed, Instant::now()))
    });
}

/// The record an operation shares with the watchdog, in size.
struct SharedRecord {
    _ends: [u64; 6],
}

fn group_parts(criterion: &mut Criterion) {
    criterion.bench_function("group_parts/instant_now", |b| b.iter(Instant::now));
    criterion.bench_function("group_parts/arc_alloc", |b| {
        b.iter(|| black_box(Arc::new(SharedRecord { _ends: [0; 6] })))
    });
    let gpus = if nccl_core::cuda_driver_available() {
        nccl_core::Device::count().unwrap_or(0)
    } else {
        0
    };
    if gpus == 0 {
        println!("SKIP: group_parts driver calls need 1 GPU(s), found 0");
        return;
    }
    let device = nccl_core::Device::new(0).expect("device 0");
    let stream = device.new_stream().expect("stream");
    let other = device.new_stream().expect("second stream");
    let event = device
        .context()
        .new_event(None)
        .expect("event without timing");
    criterion.bench_function("group_parts/event_record", |b| {
        b.iter(|| event.record(&stream).expect("record"))
    });
    criterion.bench_function("group_parts/stream_wait_event", |b| {
        b.iter(|| other.wait(&event).expect("wait"))
    });
    criterion.bench_function("group_parts/event_query", |b| {
        b.iter(|| black_box(event.try_is_complete().expect("query")))
    });
    stream.synchronize().expect("synchronize");
    other.synchronize().expect("synchronize");
    group_handoff(criterion, &device);
}

/// How an operation reaches its stream in `group_handoff`.
#[derive(Clone, Copy)]
enum Handoff {
    /// On the caller's stream.
    None,
    /// On the second stream, after an event from the caller's.
    OneWay,
    /// As `OneWay`, and the caller's stream then waits for the second.
    BothWays,
}

fn group_handoff(criterion: &mut Criterion, device: &nccl_core::Device) {
    const BYTES: usize = 64 << 20;
    let comm = nccl_tensor::Communicator::new(device.clone(), 1, UniqueId::new().expect("id"), 0)
        .expect("communicator of one rank");
    let caller = device.new_stream().expect("stream");
    let second = device.new_stream().expect("second stream");
    let (_least, greatest) =
        cudarc::driver::result::stream::get_priority_range().expect("stream priorities");
    let high = device
        .context()
        .new_stream_with_priority(greatest)
        .expect("high-priority stream");
    let start = device.context().new_event(None).expect("event");
    let end = device.context().new_event(None).expect("event");
    let elements = BYTES / std::mem::size_of::<f32>();
    let input = nccl_tensor::Tensor::<f32>::zeros(&caller, &[elements]).expect("input");
    let mut output = nccl_tensor::Tensor::<f32>::zeros(&caller, &[elements]).expect("output");
    caller.synchronize().expect("synchronize");
    let mut group = criterion.benchmark_group("group_handoff/all_gather_out_of_place_64MiB");
    group.sample_size(10);
    let variants = [
        ("one-stream", Handoff::None, &caller),
        ("events-one-way", Handoff::OneWay, &second),
        ("events-both-ways", Handoff::BothWays, &second),
        ("events-both-ways-high-priority", Handoff::BothWays, &high),
    ];
    for (name, handoff, stream) in variants {
        let mut issue = || {
            if !matches!(handoff, Handoff::None) {
                start.record(&caller).expect("record");
                stream.wait(&start).expect("wait");
            }
            let _ = comm
                .all_gather_into_tensor(&mut output, &input, stream)
                .expect("all_gather");
            if matches!(handoff, Handoff::BothWays) {
                end.record(stream).expect("record");
                caller.wait(&end).expect("wait");
            }
        };
        group.bench_function(name, |bencher| {
            bencher.iter_custom(|iters| {
                let began = Instant::now();
                for _ in 0..iters {
                    issue();
                }
                caller.synchronize().expect("synchronize");
                stream.synchronize().expect("synchronize");
                began.elapsed()
            })
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    cache_hit(&mut criterion);
    flight_recorder(&mut criterion);
    group_parts(&mut criterion);
    criterion.final_summary();
}
