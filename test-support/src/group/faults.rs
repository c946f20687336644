//! The fault suite's tools: GPU work that cannot complete until the test
//! lets it ([`Gate`], [`never_completes`]), a check that a group still
//! works, a first operation without one of the ranks, and the flight
//! recorder's dumps.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nccl_core::{CudaStream, Device, ReduceOp, Status};
use nccl_group::{GroupError, GroupOptions, InProcessStore, OpResult, ProcessGroup};
use nccl_tensor::Tensor;

use super::done;

/// What the fault suite allows past an operation's timeout.
pub const SLACK: Duration = Duration::from_secs(1);

/// Rank 0 of a world of 2 whose rank 1 never starts: the group `name`
/// with `options`, the error of its first all_reduce (which must be
/// `InitTimeout` naming rank 1) and how long that call took.
pub fn without_rank_1(
    name: &str,
    options: GroupOptions,
    stream: &Arc<CudaStream>,
) -> (ProcessGroup, GroupError, Duration) {
    let group = ProcessGroup::builder(name)
        .rank(0)
        .world_size(2)
        .store(Arc::new(InProcessStore::new()))
        .options(options)
        .build()
        .expect("group");
    let started = Instant::now();
    let tensor = Tensor::<f32>::zeros(stream, &[8]).expect("tensor");
    let error = match group.all_reduce(tensor, ReduceOp::Sum, stream) {
        Err(e) => e.error,
        Ok(_) => panic!("an all_reduce over an absent rank was enqueued"),
    };
    let took = started.elapsed();
    match &error {
        GroupError::InitTimeout { missing, .. } => assert_eq!(missing, &vec![1]),
        other => panic!("expected InitTimeout, got {other}"),
    }
    (group, error, took)
}

/// Makes the tests of one binary that hold it run one at a time: NCCL's
/// abort and its init may synchronise the whole device, which would wait
/// for another test's closed gate.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A 32-bit flag in pinned, device-mapped host memory that a stream can be
/// made to wait on (`cuStreamWaitValue32`): GPU work that cannot complete
/// until the test opens the gate. Opening is a plain store to host memory,
/// with no driver call: NCCL's abort may hold the device in a synchronising
/// call waiting for the gated stream, and a driver call to open the gate
/// could wait behind it.
pub struct Gate {
    device: Device,
    /// The host address of the flag (an address, so the gate is `Send`).
    host: usize,
    /// Its device address.
    flag: cudarc::driver::sys::CUdeviceptr,
}

impl Gate {
    /// A closed gate on `device`.
    pub fn new(device: &Device) -> Self {
        device.bind_to_thread().expect("bind the device");
        let mut flag = 0;
        // SAFETY: a 4-byte pinned allocation mapped into the current
        // context, closed (zeroed) before any stream can wait on it; `flag`
        // receives its device address.
        let host = unsafe {
            let host = cudarc::driver::result::malloc_host(
                4,
                cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP,
            )
            .expect("allocate the gate");
            std::ptr::write_volatile(host.cast::<u32>(), 0);
            let mapped = cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut flag, host, 0);
            assert_eq!(mapped, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
            host
        };
        Self {
            device: device.clone(),
            host: host as usize,
            flag,
        }
    }

    /// Enqueues on `stream` a wait until the gate opens.
    pub fn block(&self, stream: &CudaStream) {
        // SAFETY: `flag` is the device address of a live mapped allocation
        // (freed only on drop, after the gate is opened and the streams
        // that waited on it have drained).
        let result = unsafe {
            cudarc::driver::sys::cuStreamWaitValue32_v2(
                stream.cu_stream(),
                self.flag,
                1,
                cudarc::driver::sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        };
        assert_eq!(result, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
    }

    /// Opens the gate: every stream waiting on it goes on. Any thread may
    /// open it, at any time.
    pub fn open(&self) {
        // SAFETY: `host` is the live, 4-byte aligned pinned allocation made
        // in `new`; the GPU only reads it.
        unsafe { std::ptr::write_volatile(self.host as *mut u32, 1) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        let _ = self.device.bind_to_thread();
        // SAFETY: the gate is open; callers drain the waiting streams
        // before dropping it (every test synchronises them first).
        unsafe {
            let _ = cudarc::driver::result::free_host(self.host as *mut std::ffi::c_void);
        }
    }
}

/// An operation (`blocked_on_gate`) on the group's NCCL stream that cannot
/// complete while `gate` is closed: the GPU waits, as it would for a peer
/// that never comes. (A recv from this rank with no matching send, the
/// classic one-GPU hang, is refused by NCCL 2.28 up front: see
/// `gpu_recv_without_send_is_refused_and_fails_the_group`.)
pub fn never_completes(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    gate: &Arc<Gate>,
) -> OpResult<Tensor<f32>> {
    let tensor = Tensor::<f32>::zeros(stream, &[1024]).expect("tensor");
    let gate = Arc::clone(gate);
    group.custom(
        "blocked_on_gate",
        0,
        tensor,
        stream,
        move |_, nccl_stream, _| {
            gate.block(nccl_stream);
            Ok(Status::Success)
        },
    )
}

/// The group still works: an all_reduce of ones over one rank.
pub fn all_reduce_works(group: &ProcessGroup, stream: &Arc<CudaStream>) {
    let ones = Tensor::from_host(stream, &[1.0f32; 16], &[16]).expect("upload");
    let t = done(group.all_reduce(ones, ReduceOp::Sum, stream), "all_reduce");
    assert_eq!(t.to_vec(stream).expect("download"), vec![1.0f32; 16]);
}

/// A flight-recorder dump, as JSON.
pub fn read_dump(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the dump file");
    serde_json::from_str(&text).expect("the dump is JSON")
}
