//! The sections after the per-op groups: one small call measured again
//! under a variation each (the kind of buffer, a user's plain loop, a
//! context without stream tracking, a nonblocking communicator).

use nccl_group::Lifecycle;
use std::sync::Arc;

use criterion::Criterion;
use cudarc::driver::CudaStream;
use nccl_core::{Config, DataType, Device, ReduceOp, UniqueId};
use nccl_perf::{
    BenchError, Collective, CoreLayer, DeviceBuffers, GroupLayer, Launch, Layer, Mode, RawLayer,
    TensorLayer,
};

use super::{call_on, end_section, host_time, process_groups};

/// The group's in-place all_reduce + `Work::wait` in a user's plain loop,
/// on each stream mode, next to the benches' `GroupLayer` launcher.
pub fn group_loop_cost(
    criterion: &mut Criterion,
    stream: &Arc<CudaStream>,
) -> Result<(), BenchError> {
    let [separate, caller] = process_groups("host_cost_group_loop")?;
    let mut small = DeviceBuffers::alloc(DataType::Float32, 2, stream)?;
    let call = call_on(Collective::AllReduce, Mode::InPlace, 2, &small, stream);
    let mut failure: Option<BenchError> = None;
    let mut group = criterion.benchmark_group("host_cost_group_loop/all_reduce_in_place_8B");
    for (name, process_group) in [("separate", &separate), ("caller", &caller)] {
        let mut slot = Some(nccl_tensor::Tensor::<f32>::zeros(stream, &[2])?);
        let mut plain: Launch<'_> = Box::new(|_| {
            let tensor = slot.take().ok_or_else(|| {
                BenchError::Usage("internal error: a failed wait released the tensor".into())
            })?;
            let work = process_group
                .all_reduce(tensor, ReduceOp::Sum, stream)
                .map_err(|failed| failed.error)?;
            slot = Some(work.wait()?);
            Ok(())
        });
        group.bench_function(format!("{name}/plain-loop"), |bencher| {
            bencher.iter_custom(|iters| host_time(&mut plain, iters, stream, &mut failure))
        });
        drop(plain);
        let layer = GroupLayer::new(process_group, stream);
        let mut launch = layer.bind(&call, &mut small)?;
        group.bench_function(format!("{name}/group-layer"), |bencher| {
            bencher.iter_custom(|iters| host_time(&mut launch, iters, stream, &mut failure))
        });
    }
    end_section(group, failure, small, stream)?;
    separate.destroy()?;
    caller.destroy()?;
    Ok(())
}

/// nccl-tensor's in-place all_reduce of 8 bytes on each kind of buffer it
/// takes, with raw for reference: what a cudarc slice's per-call tracking
/// costs next to a tensor's deferred one.
pub fn buffer_cost(
    criterion: &mut Criterion,
    comm: &nccl_tensor::Communicator,
    stream: &Arc<CudaStream>,
) -> Result<(), BenchError> {
    let raw = RawLayer::new(comm.core(), stream)?;
    let tensor = TensorLayer::new(comm, stream);
    let mut small = DeviceBuffers::alloc(DataType::Float32, 2, stream)?;
    let mut slice = stream
        .alloc_zeros::<f32>(2)
        .map_err(nccl_core::Error::cuda("allocating a cudarc slice"))?;
    let call = call_on(Collective::AllReduce, Mode::InPlace, 2, &small, stream);
    let mut failure: Option<BenchError> = None;
    let mut group = criterion.benchmark_group("host_cost_buffers/all_reduce_in_place_8B");
    for layer in [&raw as &dyn Layer, &tensor] {
        let mut launch = layer.bind(&call, &mut small)?;
        group.bench_function(layer.kind().name(), |bencher| {
            bencher.iter_custom(|iters| host_time(&mut launch, iters, stream, &mut failure))
        });
    }
    let mut on_slice: Launch<'_> = Box::new(|_| {
        let _ = comm.all_reduce(&mut slice, ReduceOp::Sum, stream)?;
        Ok(())
    });
    group.bench_function("cudarc-slice", |bencher| {
        bencher.iter_custom(|iters| host_time(&mut on_slice, iters, stream, &mut failure))
    });
    drop(on_slice);
    end_section(group, failure, small, stream)
}

/// nccl-core's all_reduce and sendrecv (a send and a receive to itself in
/// one group) at world size 1, in place, on a blocking and on a
/// nonblocking communicator, each call followed by `wait_ready`: what a
/// nonblocking communicator adds per call. At world size 1 NCCL takes a
/// shortcut for the collectives, but not for point-to-point, whose group
/// end is what NCCL hands to a thread of its own on a nonblocking
/// communicator (the group layer's communicators are nonblocking).
pub fn nonblocking_cost(criterion: &mut Criterion) -> Result<(), BenchError> {
    let device = Device::new(0)?;
    device.bind_to_thread()?;
    let stream = device.new_stream()?;
    let blocking = nccl_core::Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
    let nonblocking = nccl_core::Communicator::with_config(
        device.clone(),
        1,
        UniqueId::new()?,
        0,
        &Config::default().with_blocking(false),
    )?;
    let mut small = DeviceBuffers::alloc(DataType::Float32, 2, &stream)?;
    let mut failure: Option<BenchError> = None;
    let mut group = criterion.benchmark_group("host_cost_nonblocking");
    for collective in [Collective::AllReduce, Collective::SendRecv] {
        let call = call_on(collective, Mode::InPlace, 2, &small, &stream);
        for (name, comm) in [("blocking", &blocking), ("nonblocking", &nonblocking)] {
            let layer = CoreLayer::new(comm, &stream);
            let mut launch = layer.bind(&call, &mut small)?;
            let mut until_ready: Launch<'_> = Box::new(move |shifts| {
                launch(shifts)?;
                comm.wait_ready("the benchmarked call")?;
                Ok(())
            });
            group.bench_function(
                format!("{}_{}_8B/{name}", collective.name(), Mode::InPlace.key()),
                |bencher| {
                    bencher.iter_custom(|iters| {
                        host_time(&mut until_ready, iters, &stream, &mut failure)
                    })
                },
            );
        }
    }
    end_section(group, failure, small, &stream)?;
    blocking.finalize()?;
    nonblocking.finalize()?;
    Ok(())
}

/// The in-place all-reduce again, every layer but core, on a context with
/// cudarc's stream tracking switched off: what the tensor and group layers
/// cost without the event wait and record that tracking adds to every
/// buffer access.
pub fn untracked_cost(criterion: &mut Criterion) -> Result<(), BenchError> {
    let context = cudarc::driver::CudaContext::new(0)
        .map_err(nccl_core::Error::cuda("creating a context"))?;
    // SAFETY: every buffer of this context is used on one stream only
    // (`stream` below), except by the group with its own NCCL stream,
    // which orders that stream after `stream` and `stream` after it with
    // events of its own; no cross-stream ordering is left to cudarc.
    unsafe { context.disable_event_tracking() };
    let device = Device::from_context(context);
    let stream = device.new_stream()?;
    let comm = nccl_tensor::Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
    let [separate, caller] = process_groups("host_cost_untracked")?;
    let raw = RawLayer::new(comm.core(), &stream)?;
    let tensor = TensorLayer::new(&comm, &stream);
    let group_layer = GroupLayer::new(&separate, &stream);
    let group_caller_layer = GroupLayer::new(&caller, &stream);
    let mut small = DeviceBuffers::alloc(DataType::Float32, 2, &stream)?;
    let call = call_on(Collective::AllReduce, Mode::InPlace, 2, &small, &stream);
    let mut failure: Option<BenchError> = None;
    let mut group = criterion.benchmark_group("host_cost_untracked/all_reduce_in_place_8B");
    for layer in [
        &raw as &dyn Layer,
        &tensor,
        &group_layer,
        &group_caller_layer,
    ] {
        let mut launch = layer.bind(&call, &mut small)?;
        group.bench_function(layer.kind().name(), |bencher| {
            bencher.iter_custom(|iters| host_time(&mut launch, iters, &stream, &mut failure))
        });
    }
    end_section(group, failure, small, &stream)?;
    separate.destroy()?;
    caller.destroy()?;
    comm.core().finalize()?;
    Ok(())
}
