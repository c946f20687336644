//! Helpers shared by the workspace's integration tests (a dev-dependency
//! of nccl-core, nccl-tensor, nccl-rendezvous and nccl-group; never
//! published), and the allocation counter of the benches.
//!
//! Without its `gpu` feature (default on) it has only what needs no CUDA:
//! [`processes`], [`within`] and [`alloc`]; nccl-rendezvous's tests take it
//! so.
//!
//! * GPUs: [`require_gpus`] returns the first `n` devices, or prints
//!   `SKIP: needs n GPU(s), found m` and returns `None`. With
//!   `NCCL_TEST_REQUIRE_GPU=1` (set by the GPU bundle's run.sh) a missing
//!   GPU fails the test instead, so a GPU run can never pass by skipping.
//! * Ranks: [`ranks()`] is this process's place in a multi-rank test
//!   (`ranks_*`): one rank of a world that `nccl-launch` started (run.sh
//!   runs every `ranks_*` test at world sizes 2 and 4 that way, on
//!   simulated hosts on one GPU), or a world of one when the test runs on
//!   its own.
//! * Data and checks: [`test_values`], [`POISON`], [`assert_same_values`],
//!   [`assert_invalid`].
//! * [`raw`]: nccl-core's raw-pointer API on one rank.
//! * [`ops`]: one of each nccl-core operation.
//! * [`processes`]: child processes (copies of the test binary, or any
//!   command) waited for under a hang guard, and the marks ranks leave in
//!   a shared folder.
//! * [`within`]: a hang guard for scenarios that could hang, and
//!   [`eventually`], one for a condition polled until it holds. CPU tests
//!   never bound how long something takes (CI runs on a loaded machine):
//!   their limits here are a minute or more, which only a deadlock or a
//!   lost wake-up outlasts.
//! * [`alloc`]: a global allocator that counts a thread's allocations
//!   (the benches' too).
//! * `tensor` (feature `tensor`): nccl-tensor's element types, test data
//!   and operation matrix.
//! * `group` (feature `group`): `ProcessGroup` helpers. The `Store`
//!   conformance suite is nccl-rendezvous's, under its `conformance`
//!   feature.
//!
//! Only for integration tests (`tests/*.rs`): a crate's unit tests inside
//! its `src/` would see, through this crate, a second copy of that crate's
//! types. [`within`] and [`eventually`] name no crate's types: unit tests
//! use them too.

pub mod alloc;
#[cfg(feature = "gpu")]
pub mod config;
#[cfg(feature = "gpu")]
mod gpus;
#[cfg(feature = "group")]
pub mod group;
#[cfg(feature = "gpu")]
pub mod ops;
pub mod processes;
#[cfg(feature = "gpu")]
mod ranks;
#[cfg(feature = "gpu")]
pub mod raw;
#[cfg(feature = "tensor")]
pub mod tensor;
#[cfg(feature = "gpu")]
mod values;

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

#[cfg(feature = "gpu")]
pub use gpus::{per_device_thread, require_every_gpu, require_gpus};
#[cfg(feature = "gpu")]
pub use ranks::{Ranks, child_var, ranks, simulated_node_env};
#[cfg(feature = "gpu")]
pub use values::{POISON, assert_invalid, assert_same_values, test_values};

/// Runs `f` on its own thread and returns its result, failing the test if
/// it takes longer than `limit` (the stuck thread is left behind).
pub fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => {
            handle.join().expect("the scenario thread ended");
            value
        }
        Err(RecvTimeoutError::Timeout) => {
            panic!("{what} did not finish within {limit:?}: deadlock or lost wake-up")
        }
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the scenario sent nothing but did not panic"),
        },
    }
}

/// Polls `condition` every 10 ms until it holds, failing the test once
/// `patience` has passed without it: a hang guard, not a bound on speed.
#[track_caller]
pub fn eventually(what: &str, patience: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < patience,
            "{what}: still not true after {patience:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}
