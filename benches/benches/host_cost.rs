//! Host cost of one call: an in-place all_reduce of 2 f32 (8 bytes) at
//! world size 1 on GPU 0, issued through the raw layer and the core layer
//! in one criterion group, so the two are compared in the same run. At
//! world size 1 an in-place all_reduce enqueues no GPU work: the time is the
//! host cost of the call alone. The stream is synchronised outside the
//! measured time after every batch.
//!
//! Without a GPU it prints `SKIP: needs 1 GPU(s), found 0` and succeeds,
//! unless `NCCL_TEST_REQUIRE_GPU=1` is set, when it fails instead.

use std::time::{Duration, Instant};

use benches::BenchError;
use benches::collective::{Collective, Mode};
use benches::layer::{Call, CoreLayer, Layer, RawLayer};
use benches::sizes::OpCounts;
use criterion::Criterion;
use cudarc::driver::DevicePtr;
use nccl_core::{Communicator, DataType, Device, ReduceOp, UniqueId};

const GPUS_NEEDED: usize = 1;

fn main() {
    let found = visible_gpus();
    if found < GPUS_NEEDED {
        println!("SKIP: needs {GPUS_NEEDED} GPU(s), found {found}");
        if std::env::var("NCCL_TEST_REQUIRE_GPU").is_ok_and(|value| value == "1") {
            eprintln!("host_cost: NCCL_TEST_REQUIRE_GPU=1 is set, so a missing GPU is a failure");
            std::process::exit(1);
        }
        return;
    }
    if let Err(error) = run() {
        eprintln!("host_cost: error: {}", error.one_line());
        std::process::exit(1);
    }
}

/// The number of visible GPUs, 0 without a CUDA driver.
fn visible_gpus() -> usize {
    if !nccl_core::cuda_driver_available() {
        return 0;
    }
    Device::count().unwrap_or(0)
}

fn run() -> Result<(), BenchError> {
    let device = Device::new(0)?;
    device.bind_to_thread()?;
    let stream = device.new_stream()?;
    let comm = Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
    let buffer = stream
        .alloc_zeros::<f32>(2)
        .map_err(BenchError::cuda("allocating 2 f32"))?;
    let address = {
        let (address, _record) = buffer.device_ptr(&stream);
        address
    };
    let counts = OpCounts::new(Collective::AllReduce, 8, DataType::Float32.size_bytes(), 1);
    let call = Call::new(
        Collective::AllReduce,
        Mode::InPlace,
        &counts,
        address,
        address,
        DataType::Float32,
        ReduceOp::Sum,
        0,
        0,
        1,
    );
    let raw = RawLayer::new(&comm, &stream)?;
    let core = CoreLayer::new(&comm, &stream);
    let layers: [&dyn Layer; 2] = [&raw, &core];

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut failure: Option<BenchError> = None;
    {
        let mut group = criterion.benchmark_group("host_cost/all_reduce_in_place_8B_world1");
        for layer in layers {
            // SAFETY: `buffer` holds the 2 f32 the call reads and writes, on
            // the communicator's device, and outlives the launcher; at world
            // size 1 there is no other rank to match.
            let mut launch = unsafe { layer.bind(&call) }?;
            group.bench_function(layer.kind().name(), |bencher| {
                bencher.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        if let Err(error) = launch() {
                            failure.get_or_insert(error);
                            break;
                        }
                    }
                    let elapsed = start.elapsed();
                    if let Err(error) = stream.synchronize() {
                        failure.get_or_insert(BenchError::Cuda {
                            during: "synchronizing the stream",
                            source: error,
                        });
                    }
                    elapsed
                })
            });
        }
        group.finish();
    }
    criterion.final_summary();
    if let Some(error) = failure {
        return Err(error);
    }
    drop(buffer);
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing the stream"))?;
    comm.finalize()?;
    Ok(())
}
