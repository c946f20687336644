//! nccl-core on real GPUs: communicator creation, split, config, abort and
//! every raw collective, with values checked against a host computation.
//! World size 1 on one GPU; the `multi_gpu_*` tests need two or more.

mod support;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use nccl_core::{Communicator, Config, DataType, Device, Error, Group, ReduceOp, Status, UniqueId};
use support::{POISON, require_gpus, test_values};

fn one_gpu() -> Option<Device> {
    require_gpus(1).map(|mut devices| devices.remove(0))
}

fn upload(stream: &Arc<CudaStream>, values: &[f32]) -> CudaSlice<f32> {
    stream.clone_htod(values).expect("upload")
}

fn download(stream: &Arc<CudaStream>, buffer: &CudaSlice<f32>) -> Vec<f32> {
    stream.clone_dtoh(buffer).expect("download")
}

fn input(seed: u64, len: usize) -> Vec<f32> {
    test_values(seed, len)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

fn ptr(buffer: &CudaSlice<f32>, stream: &CudaStream) -> *const c_void {
    let (pointer, _sync) = buffer.device_ptr(stream);
    pointer as *const c_void
}

fn ptr_mut(buffer: &mut CudaSlice<f32>, stream: &CudaStream) -> *mut c_void {
    let (pointer, _sync) = buffer.device_ptr_mut(stream);
    pointer as *mut c_void
}

/// Compares element by element and reports the first mismatches and their
/// count instead of printing whole buffers.
fn assert_same(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    let wrong: Vec<(usize, f32, f32)> = got
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(_, (g, e))| g != e)
        .map(|(i, (g, e))| (i, *g, *e))
        .collect();
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} elements wrong; first (index, got, expected): {:?}",
        wrong.len(),
        got.len(),
        &wrong[..wrong.len().min(5)]
    );
}

fn single_rank(device: &Device) -> Communicator {
    Communicator::new(device.clone(), 1, UniqueId::new().expect("unique id"), 0).expect("init")
}

#[test]
fn gpu_init_by_new_reports_rank_world_and_device() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    assert_eq!(
        (comm.rank(), comm.world_size(), comm.device().ordinal()),
        (0, 1, 0)
    );
    assert!(comm.is_blocking());
    assert_eq!(comm.async_error().unwrap(), Status::Success);
    println!("loaded libnccl {}", comm.library().version());
}

#[test]
fn gpu_init_all_creates_one_communicator_per_device() {
    let Some(device) = one_gpu() else { return };
    let comms = Communicator::init_all(std::slice::from_ref(&device)).unwrap();
    assert_eq!(comms.len(), 1);
    assert_eq!((comms[0].rank(), comms[0].world_size()), (0, 1));
}

#[test]
fn gpu_init_with_blocking_config() {
    let Some(device) = one_gpu() else { return };
    let config = Config::new()
        .blocking(true)
        .ctas(1, 8)
        .comm_name("gpu-test.blocking");
    let comm = Communicator::with_config(device, 1, UniqueId::new().unwrap(), 0, &config).unwrap();
    assert!(comm.is_blocking());
    assert_eq!(comm.async_error().unwrap(), Status::Success);
}

#[test]
fn gpu_nonblocking_config_initialises_and_runs_a_collective() {
    let Some(device) = one_gpu() else { return };
    let config = Config::new()
        .blocking(false)
        .timeout(Duration::from_secs(60));
    let comm =
        Communicator::with_config(device.clone(), 1, UniqueId::new().unwrap(), 0, &config).unwrap();
    assert!(!comm.is_blocking());
    let stream = device.new_stream().unwrap();
    let data = input(11, 1000);
    let send = upload(&stream, &data);
    let mut recv = upload(&stream, &vec![POISON; 1000]);
    // SAFETY: both buffers hold 1000 f32 on the communicator's device and
    // outlive the synchronisation below.
    let status = unsafe {
        comm.all_reduce(
            ptr(&send, &stream),
            ptr_mut(&mut recv, &stream),
            1000,
            DataType::Float32,
            ReduceOp::Sum,
            &stream,
        )
    }
    .unwrap();
    if status == Status::InProgress {
        comm.wait_ready("all_reduce").unwrap();
    }
    assert_same(&download(&stream, &recv), &data, "result");
}

#[test]
fn gpu_nonblocking_init_times_out_when_peers_never_come() {
    let Some(device) = one_gpu() else { return };
    // Rank 0 of 2 with no rank 1: init can only end by the deadline.
    let config = Config::new()
        .blocking(false)
        .timeout(Duration::from_secs(3));
    let started = std::time::Instant::now();
    let error =
        Communicator::with_config(device, 2, UniqueId::new().unwrap(), 0, &config).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Timeout {
                operation: "ncclCommInitRankConfig",
                ..
            }
        ),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    println!("{error}");
}

#[test]
fn gpu_split_all_split_from_and_nocolor() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let all = comm.split_all(None).unwrap();
    assert_eq!((all.rank(), all.world_size()), (0, 1));
    let from = comm
        .split_from(&[0], Some(&Config::new().comm_name("split-from")))
        .unwrap()
        .expect("rank 0 is in [0]");
    assert_eq!((from.rank(), from.world_size()), (0, 1));
    assert!(
        comm.split_from(&[], None).unwrap().is_none(),
        "NOCOLOR gives no communicator"
    );
    let colored = comm
        .split(Some(3), 0, None)
        .unwrap()
        .expect("a color gives a communicator");
    assert_eq!(colored.world_size(), 1);
    assert!(matches!(
        comm.split_from(&[1], None),
        Err(Error::RankOutOfRange { given: 1, .. })
    ));
    // A split communicator works like its parent.
    check_all_reduce(&from, &device.new_stream().unwrap(), ReduceOp::Sum);
}

#[test]
fn gpu_split_of_a_nonblocking_communicator() {
    let Some(device) = one_gpu() else { return };
    let config = Config::new().blocking(false);
    let comm =
        Communicator::with_config(device.clone(), 1, UniqueId::new().unwrap(), 0, &config).unwrap();
    let child = comm.split_all(None).unwrap();
    assert!(!child.is_blocking());
    assert_eq!(child.async_error().unwrap(), Status::Success);
    assert!(comm.split_from(&[], None).unwrap().is_none());
}

fn check_all_reduce(comm: &Communicator, stream: &Arc<CudaStream>, op: ReduceOp) {
    for len in [1usize, 1001, 4097, (1 << 20) + 7] {
        let data = input(len as u64, len);
        let send = upload(stream, &data);
        let mut recv = upload(stream, &vec![POISON; len]);
        // SAFETY: both buffers hold `len` f32 on the communicator's device
        // and live until the download synchronises the stream.
        let _ = unsafe {
            comm.all_reduce(
                ptr(&send, stream),
                ptr_mut(&mut recv, stream),
                len,
                DataType::Float32,
                op,
                stream,
            )
        }
        .unwrap();
        // With one rank every reduction of one value is that value.
        assert_same(
            &download(stream, &recv),
            &data,
            &format!("out-of-place {op} of {len}"),
        );
        let mut inplace = upload(stream, &data);
        let p = ptr_mut(&mut inplace, stream);
        // SAFETY: as above; in-place passes the same pointer twice.
        let _ = unsafe { comm.all_reduce(p, p, len, DataType::Float32, op, stream) }.unwrap();
        assert_same(
            &download(stream, &inplace),
            &data,
            &format!("in-place {op} of {len}"),
        );
    }
}

#[test]
fn gpu_all_reduce_every_builtin_op() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    for op in ReduceOp::ALL {
        check_all_reduce(&comm, &stream, op);
    }
}

#[test]
fn gpu_pre_mul_sum_scales_the_input() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let op = comm.pre_mul_sum(DataType::Float32, 0.5).unwrap();
    for len in [
        1usize,
        2,
        3,
        4,
        5,
        7,
        8,
        1000,
        1001,
        4096,
        4097,
        65537,
        (1 << 20) + 3,
    ] {
        let data = input(len as u64, len);
        let send = upload(&stream, &data);
        let mut recv = upload(&stream, &vec![POISON; len]);
        // SAFETY: both buffers hold `len` f32 and outlive the download.
        let _ = unsafe {
            comm.all_reduce(
                ptr(&send, &stream),
                ptr_mut(&mut recv, &stream),
                len,
                DataType::Float32,
                &op,
                &stream,
            )
        }
        .unwrap();
        let expected: Vec<f32> = data.iter().map(|v| v * 0.5).collect();
        assert_same(
            &download(&stream, &recv),
            &expected,
            &format!("pre-mul sum of {len}"),
        );
    }
    // The op is tied to its data type.
    let (send, mut recv) = (upload(&stream, &[1.0]), upload(&stream, &[1.0]));
    // SAFETY: the call is refused before any pointer is used.
    let wrong = unsafe {
        comm.all_reduce(
            ptr(&send, &stream),
            ptr_mut(&mut recv, &stream),
            1,
            DataType::Float64,
            &op,
            &stream,
        )
    };
    assert!(
        matches!(
            wrong,
            Err(Error::InvalidArgument {
                argument: "reduce op",
                ..
            })
        ),
        "{wrong:?}"
    );
}

/// Runs the collective `name` on `len` f32 (with one rank, every block is
/// the whole buffer).
///
/// # Safety
/// `send` and `recv` hold `len` f32 on the communicator's device until the
/// stream is synchronised.
unsafe fn run_op(
    name: &str,
    comm: &Communicator,
    send: *const c_void,
    recv: *mut c_void,
    len: usize,
    stream: &CudaStream,
) -> nccl_core::Result<Status> {
    let f32 = DataType::Float32;
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match name {
            "broadcast" => comm.broadcast(send, recv, len, f32, 0, stream),
            "reduce" => comm.reduce(send, recv, len, f32, ReduceOp::Max, 0, stream),
            "all_gather" => comm.all_gather(send, recv, len, f32, stream),
            "reduce_scatter" => comm.reduce_scatter(send, recv, len, f32, ReduceOp::Sum, stream),
            "all_to_all" => comm.all_to_all(send, recv, len, f32, stream),
            other => panic!("no collective named {other}"),
        }
    }
}

#[test]
fn gpu_broadcast_reduce_gather_scatter_alltoall() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let len = 3333;
    let data = input(77, len);
    let send = upload(&stream, &data);
    for name in [
        "broadcast",
        "reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
    ] {
        let mut recv = upload(&stream, &vec![POISON; len]);
        // SAFETY: `send` and `recv` hold `len` f32 and outlive the download.
        let _ = unsafe {
            run_op(
                name,
                &comm,
                ptr(&send, &stream),
                ptr_mut(&mut recv, &stream),
                len,
                &stream,
            )
        }
        .unwrap();
        assert_same(
            &download(&stream, &recv),
            &data,
            &format!("{name} out-of-place"),
        );
        if name == "all_to_all" {
            continue; // NCCL requires distinct buffers for all-to-all.
        }
        let mut inplace = upload(&stream, &data);
        let p = ptr_mut(&mut inplace, &stream);
        // SAFETY: `inplace` holds `len` f32 and outlives the download.
        let _ = unsafe { run_op(name, &comm, p, p, len, &stream) }.unwrap();
        assert_same(
            &download(&stream, &inplace),
            &data,
            &format!("{name} in-place"),
        );
    }
}

#[test]
fn gpu_send_recv_to_self_inside_one_group() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let data = input(9, 12345);
    let send = upload(&stream, &data);
    let mut recv = upload(&stream, &vec![POISON; data.len()]);
    let group = Group::start().unwrap();
    assert_eq!(nccl_core::group_depth(), 1);
    // SAFETY: both buffers hold the count of f32 and outlive the download;
    // both halves are in one group, so the self send cannot hang.
    unsafe {
        let _ = comm
            .send(
                ptr(&send, &stream),
                data.len(),
                DataType::Float32,
                0,
                &stream,
            )
            .unwrap();
        let _ = comm
            .recv(
                ptr_mut(&mut recv, &stream),
                data.len(),
                DataType::Float32,
                0,
                &stream,
            )
            .unwrap();
    }
    let _ = group.end().unwrap();
    assert_eq!(nccl_core::group_depth(), 0);
    assert_same(&download(&stream, &recv), &data, "result");
}

#[test]
fn gpu_nccls_invalid_argument_surfaces_with_its_text() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let buffer = upload(&stream, &[1.0; 4]);
    let p = ptr(&buffer, &stream) as *mut c_void;
    let lib = comm.library();
    let all_reduce = lib.functions().ncclAllReduce().unwrap();
    // A data type no NCCL knows: only a raw call can pass one, and NCCL
    // must refuse it before touching the buffer.
    // SAFETY: the communicator and stream are live; the buffer holds 4 f32.
    let result = unsafe {
        all_reduce(
            p,
            p,
            4,
            nccl_core::nccl_sys::ncclDataType_t(99),
            nccl_core::nccl_sys::ncclRedOp_t::ncclSum,
            comm.as_raw().unwrap(),
            stream.cu_stream() as nccl_core::nccl_sys::cudaStream_t,
        )
    };
    let error = nccl_core::check(lib, "ncclAllReduce", result).unwrap_err();
    let text = error.to_string();
    println!("{text}");
    assert_eq!(
        error.nccl_code().and_then(|c| c.name()),
        Some("ncclInvalidArgument"),
        "{text}"
    );
    assert!(
        text.starts_with("ncclAllReduce failed: ncclInvalidArgument (4): "),
        "{text}"
    );
    assert!(
        matches!(&error, Error::Nccl { last_error: Some(t), .. } if !t.is_empty()),
        "{text}"
    );
}

#[test]
fn gpu_argument_checks_before_nccl() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    // SAFETY: each call is refused before any pointer is used.
    unsafe {
        let root = comm.broadcast(
            std::ptr::null(),
            std::ptr::null_mut(),
            1,
            DataType::Float32,
            1,
            &stream,
        );
        assert!(matches!(
            root,
            Err(Error::RankOutOfRange {
                what: "root",
                given: 1,
                world_size: 1
            })
        ));
        let peer = comm.send(std::ptr::null(), 1, DataType::Float32, -1, &stream);
        assert!(matches!(
            peer,
            Err(Error::RankOutOfRange {
                what: "peer",
                given: -1,
                ..
            })
        ));
    }
}

#[test]
fn gpu_abort_from_another_thread_then_drop() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let handle = comm.abort_handle();
    assert!(!handle.is_aborted());
    std::thread::spawn(move || handle.abort())
        .join()
        .unwrap()
        .unwrap();
    assert!(comm.abort_handle().is_aborted());
    assert!(matches!(comm.async_error(), Err(Error::Aborted)));
    let stream = device.new_stream().unwrap();
    // SAFETY: refused before any pointer is used.
    let after = unsafe {
        comm.all_reduce(
            std::ptr::null(),
            std::ptr::null_mut(),
            1,
            DataType::Float32,
            ReduceOp::Sum,
            &stream,
        )
    };
    assert!(matches!(after, Err(Error::Aborted)));
    comm.abort_handle().abort().unwrap(); // a second abort is a no-op
    drop(comm); // drop after abort does nothing more
}

#[test]
fn gpu_finalize_then_drop_destroys() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    comm.finalize().unwrap();
    assert!(matches!(comm.async_error(), Err(Error::Finalized)));
    drop(comm);
}

/// One rank per GPU, each on its own thread, sharing one unique id.
fn per_thread_ranks<T: Send + 'static>(
    devices: Vec<Device>,
    body: impl Fn(Communicator) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let id = UniqueId::new().unwrap();
    let world = devices.len() as i32;
    let body = Arc::new(body);
    let threads: Vec<_> = devices
        .into_iter()
        .enumerate()
        .map(|(rank, device)| {
            let body = Arc::clone(&body);
            std::thread::spawn(move || {
                body(Communicator::new(device, world, id, rank as i32).unwrap())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn multi_gpu_all_reduce_across_threads() {
    let count = nccl_core::Device::count().unwrap_or(0).max(2);
    let Some(devices) = require_gpus(count) else {
        return;
    };
    let world = devices.len();
    let results = per_thread_ranks(devices, move |comm| {
        let stream = comm.device().new_stream().unwrap();
        let mine = input(comm.rank() as u64, 4099);
        let mut buffer = upload(&stream, &mine);
        let p = ptr_mut(&mut buffer, &stream);
        // SAFETY: `buffer` holds 4099 f32 on this rank's device.
        let _ = unsafe { comm.all_reduce(p, p, 4099, DataType::Float32, ReduceOp::Sum, &stream) }
            .unwrap();
        download(&stream, &buffer)
    });
    let expected: Vec<f32> = (0..4099)
        .map(|i| (0..world).map(|r| input(r as u64, 4099)[i]).sum())
        .collect();
    for got in results {
        assert_same(&got, &expected, "all-reduce across ranks");
    }
}

#[test]
fn multi_gpu_split_from_keeps_the_listed_ranks() {
    let count = nccl_core::Device::count().unwrap_or(0).max(2);
    let Some(devices) = require_gpus(count) else {
        return;
    };
    let results = per_thread_ranks(devices, |comm| {
        comm.split_from(&[0, 1], None)
            .unwrap()
            .map(|c| (c.rank(), c.world_size()))
    });
    assert_eq!(results[0], Some((0, 2)));
    assert_eq!(results[1], Some((1, 2)));
    assert!(results[2..].iter().all(Option::is_none));
}

#[test]
fn gpu_init_local_ranks_checks_and_one_device() {
    let Some(device) = one_gpu() else { return };
    let config = Config::new()
        .blocking(false)
        .timeout(Duration::from_secs(30));
    let id = UniqueId::new().unwrap();
    let twice = [device.clone(), device.clone()];
    let error = Communicator::init_local_ranks(&twice, 2, id, 0, &config).unwrap_err();
    assert!(error.to_string().contains("device 0 twice"), "{error}");
    let error = Communicator::init_local_ranks(&[], 1, id, 0, &config).unwrap_err();
    assert!(error.to_string().contains("an empty list"), "{error}");
    // Ranks 1..=1 do not fit a world of 1.
    let error = Communicator::init_local_ranks(std::slice::from_ref(&device), 1, id, 1, &config)
        .unwrap_err();
    assert!(matches!(error, Error::RankOutOfRange { .. }), "{error}");

    let comms =
        Communicator::init_local_ranks(std::slice::from_ref(&device), 1, id, 0, &config).unwrap();
    assert_eq!((comms[0].rank(), comms[0].world_size()), (0, 1));
    assert!(!comms[0].is_blocking());
    let cores: Vec<&Communicator> = comms.iter().collect();
    Communicator::finalize_together(&cores).unwrap();
    assert!(matches!(comms[0].as_raw(), Err(Error::Finalized)));
}

#[test]
fn multi_gpu_init_local_ranks_drives_every_device_from_one_thread() {
    let count = nccl_core::Device::count().unwrap_or(0).max(2);
    let Some(devices) = require_gpus(count) else {
        return;
    };
    let world = devices.len();
    for blocking in [true, false] {
        let config = Config::new()
            .blocking(blocking)
            .timeout(Duration::from_secs(60));
        let comms = Communicator::init_local_ranks(
            &devices,
            world as i32,
            UniqueId::new().unwrap(),
            0,
            &config,
        )
        .unwrap();
        let streams: Vec<_> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
        let mut buffers: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(rank, stream)| upload(stream, &input(rank as u64, 1000)))
            .collect();
        let group = Group::start().unwrap();
        for ((comm, stream), buffer) in comms.iter().zip(&streams).zip(&mut buffers) {
            let p = ptr_mut(buffer, stream);
            // SAFETY: `buffer` holds 1000 f32 on this rank's device.
            let _ =
                unsafe { comm.all_reduce(p, p, 1000, DataType::Float32, ReduceOp::Sum, stream) }
                    .unwrap();
        }
        if group.end().unwrap() == Status::InProgress {
            comms
                .iter()
                .for_each(|c| c.wait_ready("all_reduce").unwrap());
        }
        let expected: Vec<f32> = (0..1000)
            .map(|i| (0..world).map(|r| input(r as u64, 1000)[i]).sum())
            .collect();
        for (stream, buffer) in streams.iter().zip(&buffers) {
            assert_same(
                &download(stream, buffer),
                &expected,
                "one-thread all-reduce",
            );
        }
        let cores: Vec<&Communicator> = comms.iter().collect();
        Communicator::finalize_together(&cores).unwrap();
    }
}
