//! No heap allocation in steady state: after one warm-up call, 100 more
//! calls of each operation (typed buffers and tensor cells) allocate
//! nothing on the Rust heap. The support crate's counting global allocator
//! counts the `alloc` and `realloc` calls a thread makes while it counts,
//! so other tests' threads never disturb a window. (NCCL's and CUDA's own
//! C allocations are not Rust allocations and are not counted.)

use std::sync::Arc;

use nccl_core::{CudaStream, Group, ReduceOp};
use nccl_tensor::{AllToAllMethod, Communicator, Tensor, TensorCell};
use nccl_test_support::alloc::{CountingAllocator, counted};
use nccl_test_support::tensor::{
    self, one_rank_on_first_gpu, poisoned, poisoned_cell, upload, upload_cell, values,
};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// The counter must see an allocation, or a zero below proves nothing.
fn counter_works() {
    let ((), seen) = counted(|| drop(std::hint::black_box(Box::new(7u64))));
    assert!(
        seen >= 1,
        "the counting allocator saw {seen} allocations of a Box"
    );
}

const CALLS: usize = 100;

/// One warm-up call of `op`, then `CALLS` calls that must not allocate.
#[track_caller]
fn steady(name: &str, stream: &Arc<CudaStream>, mut op: impl FnMut()) {
    op();
    stream.synchronize().expect("synchronize after the warm-up");
    let ((), seen) = counted(|| {
        for _ in 0..CALLS {
            op();
        }
    });
    stream.synchronize().expect("synchronize after the window");
    assert_eq!(
        seen, 0,
        "{name}: {seen} heap allocations in {CALLS} steady-state calls"
    );
}

/// 4097 elements: just past nccl-core's single-rank split, so the scaling
/// reductions issue two NCCL calls.
const LEN: usize = 4097;

#[test]
fn gpu_steady_state_typed_ops_do_not_allocate() {
    let Some((mut comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    counter_works();
    let data = values::<f32>(1, LEN);
    let mut a: Tensor<f32> = upload(&stream, &data);
    let mut b: Tensor<f32> = poisoned(&stream, LEN);
    let sum = ReduceOp::Sum;

    for method in [AllToAllMethod::Auto, AllToAllMethod::SendRecv] {
        comm.set_all_to_all_method(method);
        steady(&format!("all_to_all_single ({method:?})"), &stream, || {
            let _ = comm.all_to_all_single(&mut b, &a, &stream).unwrap();
        });
    }
    comm.set_all_to_all_method(AllToAllMethod::Auto);
    let comm: &Communicator = &comm;
    let pre_mul_sum = comm.pre_mul_sum::<f32>(1.0).expect("pre_mul_sum");

    steady("all_reduce in place", &stream, || {
        let _ = comm.all_reduce(&mut a, sum, &stream).unwrap();
    });
    steady("all_reduce avg in place", &stream, || {
        let _ = comm.all_reduce(&mut a, ReduceOp::Avg, &stream).unwrap();
    });
    steady("all_reduce_into", &stream, || {
        let _ = comm.all_reduce_into(&a, &mut b, sum, &stream).unwrap();
    });
    steady("all_reduce_into premulsum", &stream, || {
        let _ = comm
            .all_reduce_into(&a, &mut b, &pre_mul_sum, &stream)
            .unwrap();
    });
    steady(
        "all_reduce_into on CudaView -> CudaViewMut",
        &stream,
        || {
            let source = a.view(..).unwrap();
            let mut target = b.view_mut(..).unwrap();
            let _ = comm
                .all_reduce_into(&source, &mut target, sum, &stream)
                .unwrap();
        },
    );
    steady("broadcast", &stream, || {
        let _ = comm.broadcast(&mut a, 0, &stream).unwrap();
    });
    steady("broadcast_into", &stream, || {
        let _ = comm.broadcast_into(&a, &mut b, 0, &stream).unwrap();
    });
    steady("reduce", &stream, || {
        let _ = comm.reduce(&mut a, sum, 0, &stream).unwrap();
    });
    steady("reduce_into", &stream, || {
        let _ = comm.reduce_into(&a, &mut b, sum, 0, &stream).unwrap();
    });
    steady("all_gather_into_tensor", &stream, || {
        let _ = comm.all_gather_into_tensor(&mut b, &a, &stream).unwrap();
    });
    let mut list = [poisoned::<f32>(&stream, LEN)];
    steady("all_gather (list)", &stream, || {
        let _ = comm.all_gather(&mut list[..], &a, &stream).unwrap();
    });
    steady("reduce_scatter_tensor", &stream, || {
        let _ = comm
            .reduce_scatter_tensor(&mut b, &a, sum, &stream)
            .unwrap();
    });
    steady("send + recv in a group", &stream, || {
        let group = Group::start().unwrap();
        let _ = comm.send(&a, 0, &stream).unwrap();
        let _ = comm.recv(&mut b, 0, &stream).unwrap();
        let _ = group.end().unwrap();
    });
    steady("barrier", &stream, || {
        let _ = comm.barrier(&stream).unwrap();
    });
    // The data survived 100 rounds of everything.
    tensor::assert_same(&tensor::download(&stream, &b), &data, "b afterwards");
}

#[test]
fn gpu_steady_state_cell_ops_do_not_allocate() {
    let Some((mut comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    counter_works();
    let data = values::<half::bf16>(2, LEN);
    let a: TensorCell = upload_cell(&stream, &data);
    let b: TensorCell = poisoned_cell::<half::bf16>(&stream, LEN);
    let sum = ReduceOp::Sum;

    for method in [AllToAllMethod::Auto, AllToAllMethod::SendRecv] {
        comm.set_all_to_all_method(method);
        steady(
            &format!("cell all_to_all_single ({method:?})"),
            &stream,
            || {
                let _ = comm.all_to_all_single(&b, &a, &stream).unwrap();
            },
        );
    }
    comm.set_all_to_all_method(AllToAllMethod::Auto);
    let comm: &Communicator = &comm;
    let pre_mul_sum = comm.pre_mul_sum::<half::bf16>(1.0).expect("pre_mul_sum");

    steady("cell all_reduce in place", &stream, || {
        let _ = comm.all_reduce(&a, sum, &stream).unwrap();
    });
    steady("cell all_reduce avg in place", &stream, || {
        let _ = comm.all_reduce(&a, ReduceOp::Avg, &stream).unwrap();
    });
    steady("cell all_reduce_into", &stream, || {
        let _ = comm.all_reduce_into(&a, &b, sum, &stream).unwrap();
    });
    steady("cell all_reduce_into premulsum", &stream, || {
        let _ = comm.all_reduce_into(&a, &b, &pre_mul_sum, &stream).unwrap();
    });
    steady("cell broadcast", &stream, || {
        let _ = comm.broadcast(&a, 0, &stream).unwrap();
    });
    steady("cell broadcast_into", &stream, || {
        let _ = comm.broadcast_into(&a, &b, 0, &stream).unwrap();
    });
    steady("cell reduce", &stream, || {
        let _ = comm.reduce(&a, sum, 0, &stream).unwrap();
    });
    steady("cell reduce_into", &stream, || {
        let _ = comm.reduce_into(&a, &b, sum, 0, &stream).unwrap();
    });
    steady("cell all_gather_into_tensor", &stream, || {
        let _ = comm.all_gather_into_tensor(&b, &a, &stream).unwrap();
    });
    let list = [poisoned_cell::<half::bf16>(&stream, LEN)];
    steady("cell all_gather (list)", &stream, || {
        let _ = comm.all_gather(&list[..], &a, &stream).unwrap();
    });
    steady("cell reduce_scatter_tensor", &stream, || {
        let _ = comm.reduce_scatter_tensor(&b, &a, sum, &stream).unwrap();
    });
    steady("cell send + recv in a group", &stream, || {
        let group = Group::start().unwrap();
        let _ = comm.send(&a, 0, &stream).unwrap();
        let _ = comm.recv(&b, 0, &stream).unwrap();
        let _ = group.end().unwrap();
    });
    steady("barrier (cell test)", &stream, || {
        let _ = comm.barrier(&stream).unwrap();
    });
    tensor::assert_same(
        &tensor::download_cell::<half::bf16>(&stream, &b),
        &data,
        "b afterwards",
    );
}
