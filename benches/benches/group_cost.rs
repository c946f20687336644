//! What the process group costs per operation, side by side with raw NCCL
//! in one run:
//!
//! * `group_cache/hit`: the communicator-cache lookup an operation does on
//!   a cached key (a fake factory, so it runs without a GPU too).
//! * `group_host_cost/all_reduce_in_place_8B`: one in-place all-reduce of
//!   2 f32 at world size 1 (no GPU work: the time is the host's), `raw`
//!   (`ncclAllReduce` through nccl-sys on a communicator of its own) against
//!   `group` (`ProcessGroup::all_reduce` + `Work::wait`: both event syncs, the
//!   cache lookup and the communicator lock included). Launches are timed
//!   in chunks with a stream synchronisation between chunks outside the
//!   measured time.
//!
//! Without a GPU the GPU part prints `SKIP: needs 1 GPU(s), found 0` and
//! succeeds, unless `NCCL_TEST_REQUIRE_GPU=1` is set.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use nccl_core::{Communicator, DataType, Device, ReduceOp, UniqueId};
use nccl_group::{
    CommCache, CommFactory, CommKey, DeviceList, GroupOptions, InProcessStore, Membership,
    ProcessGroup, Store,
};
use nccl_tensor::Tensor;

/// Launches timed between two synchronisations.
const CHUNK: u64 = 256;

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

fn gpu_count() -> usize {
    if nccl_core::cuda_driver_available() {
        Device::count().unwrap_or(0)
    } else {
        0
    }
}

/// Times `iterations` calls of `call`, synchronising `stream` every
/// [`CHUNK`] calls outside the measured time.
fn chunked(
    iterations: u64,
    stream: &cudarc::driver::CudaStream,
    mut call: impl FnMut(),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iterations;
    while left > 0 {
        let n = left.min(CHUNK);
        let start = Instant::now();
        for _ in 0..n {
            call();
        }
        total += start.elapsed();
        stream.synchronize().expect("synchronise the stream");
        left -= n;
    }
    total
}

fn host_cost(criterion: &mut Criterion) {
    let device = Device::new(0).expect("GPU 0");
    let stream = device.new_stream().expect("a stream");

    let raw_comm =
        Communicator::new(device.clone(), 1, UniqueId::new().expect("unique id"), 0).expect("init");
    let lib = raw_comm.library();
    let all_reduce = lib.functions().ncclAllReduce().expect("ncclAllReduce");
    let raw_handle = raw_comm.as_raw().expect("live communicator");
    let raw_buffer = stream.alloc_zeros::<f32>(2).expect("alloc");
    let (pointer, _record) = cudarc::driver::DevicePtr::device_ptr(&raw_buffer, &stream);
    let pointer = pointer as *mut std::ffi::c_void;
    let raw_stream = stream.cu_stream() as nccl_core::nccl_sys::cudaStream_t;

    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let group = ProcessGroup::new("bench", 0, 1, store, "in-process", GroupOptions::default())
        .expect("group");
    let mut tensor = Some(Tensor::<f32>::zeros(&stream, &[2]).expect("tensor"));
    // Creates the cached communicator outside the measurement.
    let work = group
        .all_reduce(tensor.take().expect("tensor"), ReduceOp::Sum, &stream)
        .expect("first all_reduce");
    tensor = Some(work.wait().expect("wait"));

    let mut bench = criterion.benchmark_group("group_host_cost/all_reduce_in_place_8B");
    bench.bench_function("raw", |b| {
        b.iter_custom(|iterations| {
            chunked(iterations, &stream, || {
                // SAFETY: `raw_buffer` holds 2 f32 on GPU 0 and outlives the
                // bench; the communicator and stream are live.
                let result = unsafe {
                    all_reduce(
                        pointer,
                        pointer,
                        2,
                        DataType::Float32.to_raw(),
                        ReduceOp::Sum.to_raw(),
                        raw_handle,
                        raw_stream,
                    )
                };
                black_box(result);
            })
        })
    });
    bench.bench_function("group", |b| {
        b.iter_custom(|iterations| {
            chunked(iterations, &stream, || {
                let input = tensor.take().expect("the tensor is handed back each time");
                let work = group
                    .all_reduce(input, ReduceOp::Sum, &stream)
                    .expect("all_reduce");
                tensor = Some(work.wait().expect("wait"));
            })
        })
    });
    bench.finish();
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    cache_hit(&mut criterion);
    let found = gpu_count();
    if found >= 1 {
        host_cost(&mut criterion);
    } else if std::env::var("NCCL_TEST_REQUIRE_GPU").as_deref() == Ok("1") {
        eprintln!(
            "group_cost: NCCL_TEST_REQUIRE_GPU=1 but this bench needs 1 GPU(s), found {found}"
        );
        std::process::exit(1);
    } else {
        println!("SKIP: needs 1 GPU(s), found {found}");
    }
    criterion.final_summary();
}
