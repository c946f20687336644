//! nccl-core on real GPUs: communicator creation, config, split, abort,
//! finalize and one-thread initialisation of several ranks, with values
//! checked against a host computation (the raw collectives are in
//! `gpu/comm_ops.rs`). World size 1 on one GPU; the `multi_gpu_*` tests
//! need two or more.

use std::time::Duration;

use nccl_core::{Communicator, Config, DataType, Device, Error, Group, ReduceOp, Status, UniqueId};
use nccl_test_support::raw::{
    check_all_reduce, download, input, nonblocking, one_gpu, ptr, ptr_mut, single_rank,
    single_rank_with, upload,
};
use nccl_test_support::{POISON, assert_same_values, per_device_thread, require_every_gpu};

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
        .with_blocking(true)
        .with_ctas(1, 8)
        .with_comm_name("gpu-test.blocking");
    let comm = single_rank_with(&device, &config);
    assert!(comm.is_blocking());
    assert_eq!(comm.async_error().unwrap(), Status::Success);
}

#[test]
fn gpu_nonblocking_config_initialises_and_runs_a_collective() {
    let Some(device) = one_gpu() else { return };
    let config = nonblocking(Duration::from_secs(60));
    let comm = single_rank_with(&device, &config);
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
    assert_same_values(&download(&stream, &recv), &data, "result");
}

#[test]
fn gpu_nonblocking_init_times_out_when_peers_never_come() {
    let Some(device) = one_gpu() else { return };
    // Rank 0 of 2 with no rank 1: init can only end by the deadline.
    let config = nonblocking(Duration::from_secs(3));
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
        .split_from(&[0], Some(&Config::new().with_comm_name("split-from")))
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
    let config = Config::new().with_blocking(false);
    let comm = single_rank_with(&device, &config);
    let child = comm.split_all(None).unwrap();
    assert!(!child.is_blocking());
    assert_eq!(child.async_error().unwrap(), Status::Success);
    assert!(comm.split_from(&[], None).unwrap().is_none());
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
    let world = devices.len();
    per_device_thread(devices, move |rank, device| {
        body(Communicator::new(device, world, id, rank).unwrap())
    })
}

#[test]
fn multi_gpu_all_reduce_across_threads() {
    let Some(devices) = require_every_gpu() else {
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
        assert_same_values(&got, &expected, "all-reduce across ranks");
    }
}

#[test]
fn multi_gpu_split_from_keeps_the_listed_ranks() {
    let Some(devices) = require_every_gpu() else {
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
    let config = nonblocking(Duration::from_secs(30));
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
    let Some(devices) = require_every_gpu() else {
        return;
    };
    let world = devices.len();
    for blocking in [true, false] {
        let config = Config::new()
            .with_blocking(blocking)
            .with_timeout(Duration::from_secs(60));
        let comms =
            Communicator::init_local_ranks(&devices, world, UniqueId::new().unwrap(), 0, &config)
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
            assert_same_values(
                &download(stream, buffer),
                &expected,
                "one-thread all-reduce",
            );
        }
        let cores: Vec<&Communicator> = comms.iter().collect();
        Communicator::finalize_together(&cores).unwrap();
    }
}
