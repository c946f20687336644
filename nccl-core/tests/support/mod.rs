//! Shared by the test binaries of every crate (included by path): GPU
//! helpers for the `gpu_*` tests, and assertions for the CPU tests.
//!
//! `require_gpus(n)` returns the first `n` devices, or prints
//! `SKIP: needs n GPU(s), found m` and returns `None`. With
//! `NCCL_TEST_REQUIRE_GPU=1` (set by the GPU bundle's run.sh) a missing GPU
//! fails the test instead, so a GPU run can never pass by skipping.
#![allow(dead_code)]

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use nccl_core::{Device, Error};

/// The first `n` devices, or `None` (after printing why) when the machine
/// has fewer and GPUs are not required.
pub fn require_gpus(n: usize) -> Option<Vec<Device>> {
    let found = if nccl_core::cuda_driver_available() {
        Device::count().unwrap_or(0)
    } else {
        0
    };
    if found >= n {
        return Some(
            (0..n)
                .map(|i| Device::new(i).expect("visible device"))
                .collect(),
        );
    }
    let message = format!("needs {n} GPU(s), found {found}");
    if std::env::var("NCCL_TEST_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("NCCL_TEST_REQUIRE_GPU=1 but this test {message}");
    }
    println!("SKIP: {message}");
    None
}

/// Deterministic, never-zero test data: `len` values from `seed`, each a
/// small integer in `1..=7` times a sign, so sums and products of a few
/// ranks stay exact in every float type.
pub fn test_values(seed: u64, len: usize) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let magnitude = (state % 7 + 1) as f64;
            if state & 0x100 == 0 {
                magnitude
            } else {
                -magnitude
            }
        })
        .collect()
}

/// A value no test writes, to fill outputs with so unwritten elements show.
pub const POISON: f32 = -12345.0;

/// Asserts `error` is `InvalidArgument` for `argument` with `expected` and
/// `given`, and that its message names all three.
pub fn assert_invalid(error: Error, argument: &str, expected: &str, given: &str) {
    assert_eq!(
        error.to_string(),
        format!("invalid {argument}: expected {expected}, got {given}")
    );
    match error {
        Error::InvalidArgument {
            argument: a,
            expected: e,
            given: g,
        } => {
            assert_eq!((a, e.as_str(), g.as_str()), (argument, expected, given));
        }
        other => panic!("expected Error::InvalidArgument, got {other:?}"),
    }
}

/// A number from the environment of a spawned child test process (panics,
/// failing the child, when it is missing or not a number).
pub fn child_var(name: &str) -> usize {
    let raw = std::env::var(name).unwrap_or_else(|_| panic!("the child needs {name}"));
    raw.parse()
        .unwrap_or_else(|_| panic!("{name}={raw:?} is not a number"))
}

/// The environment that makes spawned process `rank` look like a node of
/// its own to NCCL, to simulate several nodes on one host: a distinct host
/// id, and the socket transport on loopback (no InfiniBand plugin, no
/// interface that leaves the machine).
pub fn simulated_node_env(rank: usize) -> [(&'static str, String); 3] {
    [
        ("NCCL_HOSTID", format!("simulated-node-{rank}")),
        ("NCCL_NET", "Socket".to_string()),
        ("NCCL_SOCKET_IFNAME", "lo".to_string()),
    ]
}

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
