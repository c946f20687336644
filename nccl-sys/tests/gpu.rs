//! GPU-machine tests of the raw bindings: the system libnccl loads through
//! the default search, exports every function of the pinned header that its
//! release has (and none newer), and a communicator over the local GPUs can
//! be created, queried and destroyed through the raw entry points (no CUDA
//! buffers needed).
//!
//! Without the GPUs a test needs it prints `SKIP: needs n GPU(s), found m`
//! and returns; with `NCCL_TEST_REQUIRE_GPU=1` (as `run.sh` of
//! `cargo xtask gpu-bundle` sets) it fails instead.

use std::os::raw::c_int;
use std::process::Command;

use nccl_sys::{FUNCTION_NAMES, introduced_in, ncclComm_t, ncclResult_t};

/// GPUs listed by `nvidia-smi -L`, at most as many as `CUDA_VISIBLE_DEVICES`
/// names when it is set; 0 without nvidia-smi.
fn gpu_count() -> usize {
    let listed = Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter(|line| line.starts_with("GPU "))
                .count()
        })
        .unwrap_or(0);
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(visible) => listed.min(visible.split(',').filter(|d| !d.trim().is_empty()).count()),
        Err(_) => listed,
    }
}

/// `Some(gpu count)` when at least `n` GPUs are present; otherwise prints a
/// `SKIP:` line and returns `None`, or panics under `NCCL_TEST_REQUIRE_GPU=1`.
fn require_gpus(n: usize) -> Option<usize> {
    let found = gpu_count();
    if found >= n {
        return Some(found);
    }
    if std::env::var("NCCL_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("needs {n} GPU(s), found {found}, and NCCL_TEST_REQUIRE_GPU=1");
    }
    println!("SKIP: needs {n} GPU(s), found {found}");
    None
}

#[track_caller]
fn check(result: ncclResult_t, what: &str) {
    assert_eq!(result, ncclResult_t::ncclSuccess, "{what} failed");
}

/// Creates one communicator per GPU `0..n` with `ncclCommInitAll`, checks
/// each one's size, device and rank, and destroys them.
fn init_all_query_destroy(n: usize) {
    let nccl = nccl_sys::library().expect("the system libnccl loads");
    let f = nccl.functions();
    let (init_all, count, device, rank, destroy) = (
        f.ncclCommInitAll().unwrap(),
        f.ncclCommCount().unwrap(),
        f.ncclCommCuDevice().unwrap(),
        f.ncclCommUserRank().unwrap(),
        f.ncclCommDestroy().unwrap(),
    );
    let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); n];
    let ndev = c_int::try_from(n).unwrap();
    // SAFETY: `comms` has room for `ndev` communicators; a null device list
    // means devices 0..ndev.
    check(
        unsafe { init_all(comms.as_mut_ptr(), ndev, std::ptr::null()) },
        "ncclCommInitAll",
    );
    for (i, &comm) in comms.iter().enumerate() {
        let (mut size, mut dev, mut me): (c_int, c_int, c_int) = (-1, -1, -1);
        // SAFETY: `comm` is a live communicator from ncclCommInitAll and each
        // out-pointer is a valid, writable int.
        unsafe {
            check(count(comm, &mut size), "ncclCommCount");
            check(device(comm, &mut dev), "ncclCommCuDevice");
            check(rank(comm, &mut me), "ncclCommUserRank");
        }
        assert_eq!((size, dev, me), (ndev, i as c_int, i as c_int));
    }
    for comm in comms {
        // SAFETY: each communicator is live and destroyed exactly once.
        check(unsafe { destroy(comm) }, "ncclCommDestroy");
    }
}

#[test]
fn system_library_loads_with_every_function_of_its_release() {
    if require_gpus(1).is_none() {
        return;
    }
    let nccl = nccl_sys::library().expect("the system libnccl loads");
    println!("loaded libnccl {} from {}", nccl.version(), nccl.path());
    assert!(
        nccl.version().at_least(2, 28),
        "the GPU machine's libnccls are 2.28.3 and newer"
    );
    // Every function its release has is there; the newer ones are not,
    // each with its release named.
    let (older, newer): (Vec<&str>, Vec<&str>) = FUNCTION_NAMES
        .iter()
        .copied()
        .partition(|name| introduced_in(name).is_some_and(|release| release <= nccl.version()));
    let missing: Vec<&str> = older
        .into_iter()
        .filter(|name| !nccl.functions().has(name))
        .collect();
    assert!(missing.is_empty(), "{} lacks {missing:?}", nccl.path());
    for name in newer {
        let error = nccl
            .functions()
            .missing(name)
            .unwrap_or_else(|| panic!("{} exports {name}, newer than itself", nccl.path()));
        assert_eq!(error.introduced_in, introduced_in(name));
    }
}

#[test]
fn single_gpu_comm_init_all() {
    if require_gpus(1).is_none() {
        return;
    }
    init_all_query_destroy(1);
}

#[test]
fn multi_gpu_comm_init_all() {
    let Some(n) = require_gpus(2) else {
        return;
    };
    init_all_query_destroy(n);
}
