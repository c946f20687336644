//! No heap allocation in steady state: after one warm-up call, 100 more
//! calls of each operation (typed buffers and tensor cells) allocate
//! nothing on the Rust heap. A counting global allocator counts `alloc`
//! and `realloc` calls made by a thread while it has counting switched on,
//! so other tests' threads never disturb a window; windows are serialised.
//! (NCCL's and CUDA's own C allocations are not Rust allocations and are
//! not counted.)

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;
mod tensor_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nccl_core::{CudaStream, Group, ReduceOp};
use nccl_tensor::{AllToAllMethod, Communicator, Tensor, TensorCell};
use tensor_support::{first, one_rank, poisoned, poisoned_cell, upload, upload_cell, values};

/// Counts allocations of threads that switched counting on.
struct Counting;

/// Allocations (and reallocations) seen while counting.
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// One counting window at a time.
static WINDOW: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread's allocations are counted. Const-initialised and
    /// without a destructor, so reading it never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note_allocation() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counting touches only an
// atomic and a const thread-local `Cell<bool>`, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded from the caller, who upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded from the caller, who upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: `ptr` came from `System` through this allocator with
        // `layout`; the caller upholds `realloc`'s contract for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The number of allocations this thread makes while `f` runs.
fn allocations_during(f: impl FnOnce()) -> usize {
    let _window = WINDOW.lock().unwrap_or_else(PoisonError::into_inner);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

/// The counter must see an allocation, or a zero below proves nothing.
fn counter_works() {
    let seen = allocations_during(|| drop(std::hint::black_box(Box::new(7u64))));
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
    let seen = allocations_during(|| {
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
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    counter_works();
    let device = first(devices);
    let mut comm = one_rank(&device);
    let stream = device.new_stream().expect("stream");
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
    tensor_support::assert_same(
        &tensor_support::download(&stream, &b),
        &data,
        "b afterwards",
    );
}

#[test]
fn gpu_steady_state_cell_ops_do_not_allocate() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    counter_works();
    let device = first(devices);
    let mut comm = one_rank(&device);
    let stream = device.new_stream().expect("stream");
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
    tensor_support::assert_same(
        &tensor_support::download_cell::<half::bf16>(&stream, &b),
        &data,
        "b afterwards",
    );
}
