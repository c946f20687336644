//! This process's place in a multi-rank test (`ranks_*`), and the
//! environment of spawned child test processes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nccl_core::{Device, UniqueId};

use crate::processes::{await_mark, publish};

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
    /// `rank 1 of 4 (simulated hosts on one GPU)`, for messages.
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

    /// The launch's shared folder (a world of several ranks has one).
    fn shared_dir(&self) -> &Path {
        self.dir.as_deref().unwrap_or_else(|| {
            panic!(
                "{}: NCCL_LAUNCH_DIR is not set: run the ranks with nccl-launch",
                self.label()
            )
        })
    }

    /// What rank 0 made with `make`, shared under `tag` (unique within the
    /// test): rank 0 writes it to the launch's folder, the others wait for
    /// it there.
    fn share(&self, tag: &str, make: impl FnOnce() -> String) -> String {
        if self.world == 1 {
            return make();
        }
        let dir = self.shared_dir();
        let name = format!("{tag}.shared");
        if self.rank == 0 {
            let value = make();
            publish(dir, &name, &value);
            return value;
        }
        await_mark(dir, &name, SHARE_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "{}: rank 0 did not share {tag:?} within {SHARE_TIMEOUT:?}",
                self.label()
            )
        })
    }

    /// Returns once every rank has reached the barrier `tag` (unique within
    /// the test): each rank marks its arrival in the launch's folder and
    /// waits for every other rank's mark.
    pub fn barrier(&self, tag: &str) {
        if self.world == 1 {
            return;
        }
        let dir = self.shared_dir();
        let mark = |rank: usize| format!("{tag}.arrived.{rank}");
        publish(dir, &mark(self.rank), "");
        for rank in 0..self.world {
            assert!(
                await_mark(dir, &mark(rank), SHARE_TIMEOUT).is_some(),
                "{}: rank {rank} did not reach barrier {tag:?} within {SHARE_TIMEOUT:?}",
                self.label()
            );
        }
    }

    /// A unique id made by rank 0 and shared under `tag`.
    pub fn unique_id(&self, tag: &str) -> UniqueId {
        self.share(tag, || UniqueId::new().expect("unique id").to_string())
            .parse()
            .expect("a unique id in hex")
    }
}
