//! Shared by the test binaries of every crate (included by path): GPU
//! helpers for the `gpu_*` tests, and assertions for the CPU tests.
//!
//! `require_gpus(n)` returns the first `n` devices, or prints
//! `SKIP: needs n GPU(s), found m` and returns `None`. With
//! `NCCL_TEST_REQUIRE_GPU=1` (set by the GPU bundle's run.sh) a missing GPU
//! fails the test instead, so a GPU run can never pass by skipping.
//!
//! `ranks()` is this process's place in a multi-rank test (`ranks_*`): one
//! rank of a world that `nccl-launch` started (run.sh runs every `ranks_*`
//! test at world sizes 2 and 4 that way, on simulated hosts on one GPU),
//! or a world of one when the test runs on its own.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::{Device, Error, UniqueId};

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
/// its own to NCCL, to simulate several nodes on one host with a GPU per
/// process: a distinct host id, and the socket transport on loopback (no
/// InfiniBand plugin, no interface that leaves the machine).
pub fn simulated_node_env(rank: usize) -> [(&'static str, String); 3] {
    [
        ("NCCL_HOSTID", format!("simulated-node-{rank}")),
        ("NCCL_NET", "Socket".to_string()),
        ("NCCL_SOCKET_IFNAME", "lo".to_string()),
    ]
}

/// How long a rank waits for what rank 0 shares (its unique id): rank 0
/// may still be starting CUDA.
const SHARE_TIMEOUT: Duration = Duration::from_secs(120);

/// This process's place in a multi-rank test.
#[derive(Debug)]
pub struct Ranks {
    /// This process's rank (`RANK`).
    pub rank: usize,
    /// The number of processes (`WORLD_SIZE`).
    pub world: usize,
    /// The GPU this process uses (`LOCAL_RANK`).
    pub local_rank: usize,
    /// Whether every rank is a simulated host on one GPU.
    pub simulated_hosts: bool,
    /// The folder the ranks share (`NCCL_LAUNCH_DIR`); `None` for a world of one.
    pub dir: Option<PathBuf>,
}

/// This process's rank: from the variables `nccl-launch` sets, else rank 0
/// of a world of one. Prints where it stands, so the log shows each
/// rank's world size and whether the hosts are simulated.
pub fn ranks() -> Ranks {
    let ranks = match std::env::var("WORLD_SIZE") {
        Err(_) => Ranks {
            rank: 0,
            world: 1,
            local_rank: 0,
            simulated_hosts: false,
            dir: None,
        },
        Ok(_) => Ranks {
            rank: child_var("RANK"),
            world: child_var("WORLD_SIZE"),
            local_rank: child_var("LOCAL_RANK"),
            simulated_hosts: std::env::var("NCCL_LAUNCH_SIMULATED_HOSTS").as_deref() == Ok("1"),
            dir: std::env::var_os("NCCL_LAUNCH_DIR").map(PathBuf::from),
        },
    };
    println!("RANKS: {}", ranks.label());
    ranks
}

impl Ranks {
    /// `rank 1 of 4 (simulated hosts)`, for messages.
    pub fn label(&self) -> String {
        let hosts = if self.simulated_hosts {
            "simulated hosts on one GPU"
        } else if self.world == 1 {
            "one process"
        } else {
            "one GPU per rank"
        };
        format!("rank {} of {} ({hosts})", self.rank, self.world)
    }

    /// This rank's GPU (call `require_gpus(1)` first).
    pub fn device(&self) -> Device {
        Device::new(self.local_rank)
            .unwrap_or_else(|e| panic!("{}: GPU {}: {e}", self.label(), self.local_rank))
    }

    /// What rank 0 made with `make`, shared under `tag` (unique within the
    /// test): rank 0 writes it to the launch's folder, the others wait for
    /// it there.
    pub fn share(&self, tag: &str, make: impl FnOnce() -> String) -> String {
        if self.world == 1 {
            return make();
        }
        let dir = self.dir.as_ref().unwrap_or_else(|| {
            panic!(
                "{}: NCCL_LAUNCH_DIR is not set: run the ranks with nccl-launch",
                self.label()
            )
        });
        let path = dir.join(format!("{tag}.shared"));
        if self.rank == 0 {
            let value = make();
            let partial = dir.join(format!("{tag}.partial"));
            std::fs::write(&partial, &value).expect("write the shared value");
            std::fs::rename(&partial, &path).expect("publish the shared value");
            return value;
        }
        let deadline = Instant::now() + SHARE_TIMEOUT;
        loop {
            if let Ok(value) = std::fs::read_to_string(&path) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "{}: rank 0 did not share {tag:?} within {SHARE_TIMEOUT:?}",
                self.label()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Returns once every rank has reached the barrier `tag` (unique within
    /// the test): each rank marks its arrival in the launch's folder and
    /// waits for every other rank's mark.
    pub fn barrier(&self, tag: &str) {
        if self.world == 1 {
            return;
        }
        let dir = self.dir.as_ref().unwrap_or_else(|| {
            panic!(
                "{}: NCCL_LAUNCH_DIR is not set: run the ranks with nccl-launch",
                self.label()
            )
        });
        let mark = |rank: usize| dir.join(format!("{tag}.arrived.{rank}"));
        std::fs::write(mark(self.rank), b"").expect("mark this rank's arrival");
        let deadline = Instant::now() + SHARE_TIMEOUT;
        for rank in 0..self.world {
            while !mark(rank).exists() {
                assert!(
                    Instant::now() < deadline,
                    "{}: rank {rank} did not reach barrier {tag:?} within {SHARE_TIMEOUT:?}",
                    self.label()
                );
                thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// A unique id made by rank 0 and shared under `tag`.
    pub fn unique_id(&self, tag: &str) -> UniqueId {
        self.share(tag, || UniqueId::new().expect("unique id").to_string())
            .parse()
            .expect("a unique id in hex")
    }

    /// A communicator of every rank (nccl-core), meeting under `tag`.
    pub fn communicator(&self, tag: &str) -> nccl_core::Communicator {
        let id = self.unique_id(tag);
        nccl_core::Communicator::new(self.device(), self.world as i32, id, self.rank as i32)
            .unwrap_or_else(|e| panic!("{}: init: {e}", self.label()))
    }
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
