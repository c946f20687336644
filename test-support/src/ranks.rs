//! This process's place in a multi-rank test (`ranks_*`), and the
//! environment of spawned child test processes.
//!
//! The ranks of a launch share rank 0's values and hold barriers at a
//! store's [`Meeting`]: a [`FileStore`] in the launch's folder
//! (`NCCL_LAUNCH_DIR`, which nccl-launch sets), or else the store the
//! launch variables name ([`RendezvousConfig::from_env`]: rank 0 hosts
//! the TCP store on `MASTER_PORT`, so a test launched that way must not
//! host it a second time). The store is opened at the first share or
//! barrier.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nccl_core::{Device, UniqueId};
use nccl_rendezvous::meet::Meeting;
use nccl_rendezvous::{FileStore, PrefixStore, RendezvousConfig, Store, StoreError};

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

/// How long a rank waits for what rank 0 shares (its unique id), or for
/// the others at a barrier: rank 0 may still be starting CUDA.
const SHARE_TIMEOUT: Duration = Duration::from_secs(120);

/// The launch folder's subfolder that holds the ranks' file store.
const STORE_DIR: &str = "ranks-store";

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
    /// The folder the ranks share (`NCCL_LAUNCH_DIR`); `None` for a world
    /// of one, or for a launcher other than nccl-launch.
    pub dir: Option<PathBuf>,
    /// Where the ranks meet, opened at the first share or barrier.
    store: LazyStore,
}

/// A store opened on first use.
#[derive(Default)]
struct LazyStore(OnceLock<Arc<dyn Store>>);

impl fmt::Debug for LazyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.0.get().is_some() {
            "open"
        } else {
            "not open yet"
        };
        f.write_str(state)
    }
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
            store: LazyStore::default(),
        },
        Ok(_) => Ranks {
            rank: child_var("RANK"),
            world: child_var("WORLD_SIZE"),
            local_rank: child_var("LOCAL_RANK"),
            simulated_hosts: std::env::var("NCCL_LAUNCH_SIMULATED_HOSTS").as_deref() == Ok("1"),
            dir: std::env::var_os("NCCL_LAUNCH_DIR").map(PathBuf::from),
            store: LazyStore::default(),
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

    /// The meeting of every rank for the step `tag` (unique within the
    /// test, without `/`): its keys scoped by `tag`, its waits bounded by
    /// [`SHARE_TIMEOUT`].
    fn meeting(&self, tag: &str) -> Meeting<PrefixStore<Arc<dyn Store>>> {
        let store = self.store.0.get_or_init(|| self.open_store());
        Meeting::new(Arc::clone(store), self.rank, self.world)
            .and_then(|meeting| meeting.scoped(tag))
            .map(|meeting| meeting.with_timeout(SHARE_TIMEOUT))
            .unwrap_or_else(|e| panic!("{}: the meeting {tag:?}: {e}", self.label()))
    }

    /// The store of the launch (see the module docs).
    fn open_store(&self) -> Arc<dyn Store> {
        let opened = match &self.dir {
            Some(dir) => FileStore::open(dir.join(STORE_DIR), SHARE_TIMEOUT)
                .map(|store| Arc::new(store) as Arc<dyn Store>),
            None => RendezvousConfig::from_env()
                .and_then(|config| config.connect())
                .map(Arc::from),
        };
        opened.unwrap_or_else(|e| panic!("{}: the ranks' store: {e}", self.label()))
    }

    /// What rank 0 made with `make`, shared under `tag` (unique within the
    /// test): rank 0 publishes it at the ranks' store, the others wait for
    /// it there.
    fn share(&self, tag: &str, make: impl FnOnce() -> String) -> String {
        if self.world == 1 {
            return make();
        }
        let bytes = self
            .meeting(tag)
            .share_from(0, "value", || Ok::<_, StoreError>(make().into_bytes()))
            .unwrap_or_else(|e| panic!("{}: sharing {tag:?}: {e}", self.label()));
        String::from_utf8(bytes)
            .unwrap_or_else(|e| panic!("{}: rank 0 shared {tag:?} as {e}", self.label()))
    }

    /// Returns once every rank has reached the barrier `tag` (unique within
    /// the test, without `/`), met at the ranks' store.
    pub fn barrier(&self, tag: &str) {
        if self.world == 1 {
            return;
        }
        self.meeting(tag)
            .barrier(tag)
            .unwrap_or_else(|e| panic!("{}: {e}", self.label()));
    }

    /// A unique id made by rank 0 and shared under `tag`.
    pub fn unique_id(&self, tag: &str) -> UniqueId {
        self.share(tag, || UniqueId::new().expect("unique id").to_string())
            .parse()
            .expect("a unique id in hex")
    }
}
