//! The `ranks_*` tests of `ProcessGroup`: this rank of a launch (or a
//! world of one), its rendezvous store, and the groups of every rank.
//!
//! The GPU bundle's run.sh runs each `ranks_*` test on its own (a world of
//! one) and under `nccl-launch -n 2` and `-n 4`, one process per rank
//! running only that test; every helper here works at any world size.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nccl_core::{CudaStream, Device};
use nccl_group::{
    CommMode, GroupOptions, ProcessGroup, RendezvousConfig, Store, StoreSpec, StreamMode,
};

use crate::processes::free_port;
use crate::{Ranks, ranks, require_gpus};

/// The store's timeout, and the groups' creation timeout: a rank that
/// does not come fails the test within it instead of hanging it.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(60);

/// Each operation's timeout: a mismatch between ranks fails the test
/// within it.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// Both kinds of communicator.
pub const COMM_MODES: [CommMode; 2] = [CommMode::Nonblocking, CommMode::Blocking];

/// Both streams an operation may run on.
pub const STREAM_MODES: [StreamMode; 2] = [StreamMode::Separate, StreamMode::Caller];

/// Numbers the operations of a test; every rank numbers them alike.
#[derive(Default)]
pub struct Seeds(u64);

impl Seeds {
    /// Numbers that start after `first`: groups whose operations run side
    /// by side (sub-groups of one split) take ranges far apart, so values
    /// that cross from one to the other show.
    pub fn after(first: u64) -> Self {
        Self(first)
    }

    /// The next operation's number.
    pub fn next_op(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// This rank, its GPU and a stream on it.
pub struct RankContext {
    /// Where this process stands in the launch.
    pub ranks: Ranks,
    /// This rank's GPU.
    pub device: Device,
    /// A stream on it.
    pub stream: Arc<CudaStream>,
}

impl RankContext {
    /// This rank of the launch (or of a world of one); `None` (after
    /// `SKIP`) without a GPU.
    pub fn new() -> Option<Self> {
        require_gpus(1)?;
        let ranks = ranks();
        let device = ranks.device();
        let stream = device
            .new_stream()
            .unwrap_or_else(|e| panic!("{}: stream: {e}", ranks.label()));
        Some(Self {
            ranks,
            device,
            stream,
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.ranks.rank
    }

    /// The world size.
    pub fn world(&self) -> usize {
        self.ranks.world
    }

    /// `rank r of N (...)`, for messages.
    pub fn label(&self) -> String {
        self.ranks.label()
    }

    /// Every rank reaches `tag` before any goes on (through the launch's
    /// folder, not the group).
    pub fn meet(&self, tag: &str) {
        self.ranks.barrier(tag);
    }
}

/// Whether this process was started by a launcher (else it is the whole world).
pub fn launched() -> bool {
    std::env::var_os("WORLD_SIZE").is_some()
}

/// The launch's variables when launched; on its own, rank 0 of 1 with the
/// TCP store on a free port, so a world of one meets over a real store too.
pub fn launch_vars() -> impl Fn(&str) -> Option<String> {
    let own = (!launched()).then(|| {
        [
            ("RANK", "0".to_string()),
            ("WORLD_SIZE", "1".to_string()),
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", free_port().to_string()),
        ]
    });
    move |name: &str| match &own {
        None => std::env::var(name).ok(),
        Some(vars) => vars
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.clone()),
    }
}

/// The rendezvous configuration `vars` describe, checked against `ctx`.
pub fn config_from(ctx: &RankContext, vars: impl Fn(&str) -> Option<String>) -> RendezvousConfig {
    let mut config = RendezvousConfig::from_vars(vars)
        .unwrap_or_else(|e| panic!("{}: the launch's variables: {e}", ctx.label()));
    assert_eq!(
        (config.rank, config.world_size, config.local_rank),
        (ctx.rank(), ctx.world(), ctx.ranks.local_rank),
        "{}: RendezvousConfig disagrees with the launch",
        ctx.label()
    );
    config.timeout = STORE_TIMEOUT;
    config
}

/// A rendezvous store and its address, for messages.
#[derive(Clone)]
pub struct StoreAt {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Where it is (`tcp://host:port`, `file://dir`).
    pub address: String,
}

/// The store `config` names (rank 0 hosts the TCP store).
pub fn connect(ctx: &RankContext, config: &RendezvousConfig) -> StoreAt {
    let address = match &config.store {
        StoreSpec::Tcp { addr, port } => format!("tcp://{addr}:{port}"),
        StoreSpec::File { dir } => format!("file://{}", dir.display()),
        other => format!("{other:?}"),
    };
    let store = config
        .connect()
        .unwrap_or_else(|e| panic!("{}: connecting to {address}: {e}", ctx.label()));
    StoreAt {
        store: Arc::from(store),
        address,
    }
}

/// The launch's TCP store: one per test process (rank 0 binds
/// `MASTER_PORT` once), shared by every group of the test, however many
/// times it is asked for. A second server on the same port would race
/// the first: the other ranks, reconnecting as soon as they can, may
/// reach the first before rank 0 drops it, and then lose their requests
/// with it (a sub-group test's second communicator mode failed so, 4
/// times in 7 at world size 4).
pub fn tcp_store(ctx: &RankContext) -> StoreAt {
    static STORE: OnceLock<StoreAt> = OnceLock::new();
    STORE
        .get_or_init(|| connect(ctx, &config_from(ctx, launch_vars())))
        .clone()
}

/// The tests' group options on `mode` communicators.
pub fn options(mode: CommMode) -> GroupOptions {
    GroupOptions::default()
        .with_comm_mode(mode)
        .with_timeout(STORE_TIMEOUT)
        .with_op_timeout(OP_TIMEOUT)
        .without_dump_dir()
}

/// Joins the group `name` of every rank over `store`.
pub fn join(ctx: &RankContext, name: &str, store: &StoreAt, mode: CommMode) -> ProcessGroup {
    let group = ProcessGroup::builder(name)
        .rank(ctx.rank())
        .world_size(ctx.world())
        .store(Arc::clone(&store.store))
        .store_address(store.address.clone())
        .options(options(mode))
        .build()
        .unwrap_or_else(|e| panic!("{}: joining group {name:?}: {e}", ctx.label()));
    assert_eq!(
        (group.rank(), group.world_size()),
        (ctx.rank(), ctx.world())
    );
    group
}

/// `rank r of N: <op> (<mode> communicators, <stream> stream)`: names what
/// a check of [`each_mode`] is doing.
pub type What<'a> = &'a dyn Fn(&str) -> String;

/// `check` of this rank on `mode` communicators; skips without a GPU (see
/// [`RankContext::new`]).
pub fn on_mode(check: impl FnOnce(&RankContext, CommMode), mode: CommMode) {
    if let Some(ctx) = RankContext::new() {
        check(&ctx, mode);
    }
}

/// Runs `check` on a group of each communicator mode, through a handle on
/// each stream mode; every rank destroys each group and meets the others
/// before the next.
pub fn each_mode(name: &str, check: impl Fn(&RankContext, &ProcessGroup, What<'_>)) {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let group = join(&ctx, &format!("{name}-{mode:?}"), &store, mode);
        for stream_mode in STREAM_MODES {
            let handle = group.with_stream_mode(stream_mode);
            let what = |op: &str| {
                format!(
                    "{}: {op} ({mode:?} communicators, {stream_mode:?} stream)",
                    ctx.label()
                )
            };
            check(&ctx, &handle, &what);
        }
        ctx.stream.synchronize().expect("synchronize");
        super::destroy(&group);
        ctx.meet(&format!("{name}-{mode:?}-done"));
    }
}
