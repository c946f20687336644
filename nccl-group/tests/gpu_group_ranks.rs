//! `ProcessGroup` at world size N: the `ranks_*` tests.
//!
//! The GPU bundle's run.sh runs each `ranks_*` test three ways: on its own
//! (world size 1), and under `nccl-launch -n 2` and `-n 4`, one process per
//! rank running only that test (with one GPU, every rank is a simulated host
//! on GPU 0 and NCCL forms a real N-rank communicator over its socket
//! transport). Every test therefore works at any world size: each rank
//! contributes values that depend on its rank, the expected results are
//! computed on the host, and every element of every output is checked
//! (small integers, so the comparisons are exact).
//!
//! * rendezvous over the TCP store (`ProcessGroup::from_env`,
//!   `from_env_with`) and over the file store in the launch's folder;
//! * every operation (each reduction, a pre-multiplied sum through
//!   `custom`, broadcast from every root, reduce to every root, all_gather,
//!   reduce_scatter, all_to_all, their list forms, barrier) on blocking and
//!   nonblocking communicators, each on the group's streams and on the
//!   caller's;
//! * send/recv between every ordered pair of ranks, single and list forms;
//! * a barrier that returns before the last rank reached it fails;
//! * 8 threads issuing operations on one group, in an order every rank
//!   shares;
//! * destroy, then re-create under the same name; abort, then re-create;
//! * the scenario of `gpu_group.rs`'s `multi_gpu_process_child`.
//!
//! Without a GPU every test prints `SKIP: ...` and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1`.

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;

use std::fmt::Debug;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cudarc::driver::ValidAsZeroBits;
use nccl_core::{CudaStream, Device, ReduceOp};
use nccl_group::{
    CommMode, GroupError, GroupOptions, OpError, OpResult, ProcessGroup, RendezvousConfig, Store,
    StoreSpec, StreamMode, WorkBuffers,
};
use nccl_tensor::{NcclType, Tensor};
use support::Ranks;

/// Sizes of the value checks: one element, and just past nccl-core's
/// 4096-element split.
const SIZES: [usize; 2] = [1, 4097];

/// The store's timeout, and the groups' creation timeout: a rank that
/// does not come fails the test within it instead of hanging it.
const STORE_TIMEOUT: Duration = Duration::from_secs(60);

/// Each operation's timeout: a mismatch between ranks fails the test
/// within it.
const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// Both kinds of communicator.
const COMM_MODES: [CommMode; 2] = [CommMode::Nonblocking, CommMode::Blocking];

/// Both streams an operation may run on.
const STREAM_MODES: [StreamMode; 2] = [StreamMode::Separate, StreamMode::Caller];

// ---------------------------------------------------------------- helpers

/// An element type the tests fill with small integers (exact in every type).
trait Elem: NcclType + ValidAsZeroBits + PartialEq + Debug {
    fn from_f64(value: f64) -> Self;
}

impl Elem for f32 {
    fn from_f64(value: f64) -> Self {
        value as f32
    }
}

impl Elem for half::f16 {
    fn from_f64(value: f64) -> Self {
        half::f16::from_f64(value)
    }
}

impl Elem for i32 {
    fn from_f64(value: f64) -> Self {
        value as i32
    }
}

/// Rank `rank`'s values for the operation numbered `seed`: small nonzero
/// integers, different per rank and per operation.
fn vals(seed: u64, rank: usize, len: usize) -> Vec<f64> {
    support::test_values(seed.wrapping_mul(1_000_003).wrapping_add(rank as u64), len)
}

/// Every rank's values for the operation numbered `seed`.
fn all_vals(seed: u64, world: usize, len: usize) -> Vec<Vec<f64>> {
    (0..world).map(|r| vals(seed, r, len)).collect()
}

fn convert<T: Elem>(values: &[f64]) -> Vec<T> {
    values.iter().copied().map(T::from_f64).collect()
}

fn poison<T: Elem>(len: usize) -> Vec<T> {
    vec![T::from_f64(f64::from(support::POISON)); len]
}

fn upload<T: Elem>(stream: &Arc<CudaStream>, values: &[T]) -> Tensor<T> {
    Tensor::from_host(stream, values, &[values.len()]).expect("copy to the device")
}

fn download<T: Elem>(stream: &Arc<CudaStream>, tensor: &Tensor<T>) -> Vec<T> {
    tensor.to_vec(stream).expect("copy to the host")
}

/// The elementwise reduction of `inputs` (one per rank) by `op`, as NCCL
/// computes it on small integers (`Avg`: the sum over the world size).
fn reduce_host(op: ReduceOp, inputs: &[Vec<f64>]) -> Vec<f64> {
    let world = inputs.len() as f64;
    (0..inputs[0].len())
        .map(|i| {
            let column = inputs.iter().map(|v| v[i]);
            match op {
                ReduceOp::Sum => column.sum(),
                ReduceOp::Prod => column.product(),
                ReduceOp::Max => column.fold(f64::MIN, f64::max),
                ReduceOp::Min => column.fold(f64::MAX, f64::min),
                ReduceOp::Avg => column.sum::<f64>() / world,
            }
        })
        .collect()
}

/// Fails naming the first differing element.
#[track_caller]
fn check<T: Elem>(what: &str, got: &[T], expected: &[T]) {
    assert_eq!(got.len(), expected.len(), "{what}: number of elements");
    let wrong = got.iter().zip(expected).filter(|(g, e)| g != e).count();
    if let Some(i) = got.iter().zip(expected).position(|(g, e)| g != e) {
        panic!(
            "{what}: element {i} is {:?}, expected {:?} ({wrong} of {} elements wrong)",
            got[i],
            expected[i],
            got.len()
        );
    }
}

/// An f32 average: exact when the world size is a power of two (dividing
/// small integers by it is exact), else within a rounding step.
#[track_caller]
fn check_avg(what: &str, got: &[f32], expected: &[f64], world: usize) {
    if world.is_power_of_two() {
        return check(what, got, &convert::<f32>(expected));
    }
    assert_eq!(got.len(), expected.len(), "{what}: number of elements");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (f64::from(g) - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{what}: element {i} is {g}, expected {e}"
        );
    }
}

/// The buffers of a successful operation, after the caller's stream waited.
#[track_caller]
fn done<B: WorkBuffers>(result: OpResult<B>, what: &str) -> B {
    match result {
        Ok(work) => work
            .wait()
            .unwrap_or_else(|e| panic!("{what}: wait failed: {e}")),
        Err(e) => panic!("{what}: {}", e.error),
    }
}

/// The error of an operation that must fail before enqueueing.
#[track_caller]
fn refused<B: WorkBuffers>(result: OpResult<B>, what: &str) -> OpError<B> {
    match result {
        Ok(_work) => panic!("{what}: expected an error, the operation was enqueued"),
        Err(e) => *e,
    }
}

/// Numbers the operations of a test; every rank numbers them alike.
#[derive(Default)]
struct Seeds(u64);

impl Seeds {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// This rank, its GPU and a stream on it; `None` (after `SKIP`) without a GPU.
struct Ctx {
    ranks: Ranks,
    device: Device,
    stream: Arc<CudaStream>,
}

impl Ctx {
    fn new() -> Option<Self> {
        support::require_gpus(1)?;
        let ranks = support::ranks();
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

    fn rank(&self) -> usize {
        self.ranks.rank
    }

    fn world(&self) -> usize {
        self.ranks.world
    }

    fn label(&self) -> String {
        self.ranks.label()
    }

    /// Every rank reaches `tag` before any goes on (through the launch's
    /// folder, not the group).
    fn meet(&self, tag: &str) {
        self.ranks.barrier(tag);
    }
}

/// Whether this process was started by a launcher (else it is the whole world).
fn launched() -> bool {
    std::env::var_os("WORLD_SIZE").is_some()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// The launch's variables when launched; on its own, rank 0 of 1 with the
/// TCP store on a free port, so a world of one meets over a real store too.
fn launch_vars() -> impl Fn(&str) -> Option<String> {
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
fn config_from(ctx: &Ctx, vars: impl Fn(&str) -> Option<String>) -> RendezvousConfig {
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

/// The store `config` names (rank 0 hosts the TCP store) and its address.
fn connect(ctx: &Ctx, config: &RendezvousConfig) -> (Arc<dyn Store>, String) {
    let address = match &config.store {
        StoreSpec::Tcp { addr, port } => format!("tcp://{addr}:{port}"),
        StoreSpec::File { dir } => format!("file://{}", dir.display()),
        other => format!("{other:?}"),
    };
    let store = config
        .connect()
        .unwrap_or_else(|e| panic!("{}: connecting to {address}: {e}", ctx.label()));
    (Arc::from(store), address)
}

/// The launch's TCP store: one per test process (rank 0 binds
/// `MASTER_PORT`), shared by every group of the test.
fn tcp_store(ctx: &Ctx) -> (Arc<dyn Store>, String) {
    connect(ctx, &config_from(ctx, launch_vars()))
}

/// The tests' group options on `mode` communicators.
fn options(mode: CommMode) -> GroupOptions {
    GroupOptions::default()
        .with_comm_mode(mode)
        .with_timeout(STORE_TIMEOUT)
        .with_op_timeout(OP_TIMEOUT)
        .with_dump_dir(None)
}

/// Joins the group `name` of every rank over `store`.
fn join(ctx: &Ctx, name: &str, store: &(Arc<dyn Store>, String), mode: CommMode) -> ProcessGroup {
    let group = ProcessGroup::new(
        name,
        ctx.rank(),
        ctx.world(),
        Arc::clone(&store.0),
        store.1.clone(),
        options(mode),
    )
    .unwrap_or_else(|e| panic!("{}: joining group {name:?}: {e}", ctx.label()));
    assert_eq!(
        (group.rank(), group.world_size()),
        (ctx.rank(), ctx.world())
    );
    group
}

/// Collectively destroys `group`.
fn destroy(ctx: &Ctx, group: &ProcessGroup) {
    group
        .destroy()
        .unwrap_or_else(|e| panic!("{}: destroying {:?}: {e}", ctx.label(), group.name()));
}

/// Microseconds since the Unix epoch (the ranks share the host's clock).
fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Writes `value` to `dir/name` atomically (readers never see part of it).
fn publish(dir: &Path, name: &str, value: &str) {
    let partial = dir.join(format!("{name}.partial"));
    std::fs::write(&partial, value).expect("write a file in the launch's folder");
    std::fs::rename(&partial, dir.join(name)).expect("publish it");
}

/// `group` works: a sum, a gather, a broadcast, a barrier, and (world 2+)
/// a send/recv each way between ranks 0 and 1, values checked.
fn works(ctx: &Ctx, group: &ProcessGroup, what: &str) {
    const LEN: usize = 4097;
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let what = format!("{}: {what}", ctx.label());
    let t = done(
        group.all_reduce(
            upload(stream, &convert::<f32>(&vals(901, rank, LEN))),
            ReduceOp::Sum,
            stream,
        ),
        &format!("{what}: all_reduce"),
    );
    check(
        &format!("{what}: all_reduce"),
        &download(stream, &t),
        &convert(&reduce_host(ReduceOp::Sum, &all_vals(901, world, LEN))),
    );
    let (out, _) = done(
        group.all_gather(
            upload(stream, &poison::<f32>(world * LEN)),
            upload(stream, &convert::<f32>(&vals(902, rank, LEN))),
            stream,
        ),
        &format!("{what}: all_gather"),
    );
    check(
        &format!("{what}: all_gather"),
        &download(stream, &out),
        &convert(&all_vals(902, world, LEN).concat()),
    );
    let root = world - 1;
    let start = if rank == root {
        convert::<f32>(&vals(903, root, LEN))
    } else {
        poison(LEN)
    };
    let t = done(
        group.broadcast(upload(stream, &start), root as i32, stream),
        &format!("{what}: broadcast"),
    );
    check(
        &format!("{what}: broadcast from {root}"),
        &download(stream, &t),
        &convert(&vals(903, root, LEN)),
    );
    if world >= 2 && rank < 2 {
        let peer = 1 - rank;
        for src in [0, 1] {
            let data = convert::<f32>(&vals(904 + src as u64, src, LEN));
            if rank == src {
                let sent = done(
                    group.send(upload(stream, &data), peer, stream),
                    &format!("{what}: send {src} -> {peer}"),
                );
                check(
                    &format!("{what}: sent tensor"),
                    &download(stream, &sent),
                    &data,
                );
            } else {
                let got = done(
                    group.recv(upload(stream, &poison::<f32>(LEN)), peer, stream),
                    &format!("{what}: recv {rank} <- {peer}"),
                );
                check(
                    &format!("{what}: received from {peer}"),
                    &download(stream, &got),
                    &data,
                );
            }
        }
    }
    group
        .barrier(stream)
        .unwrap_or_else(|e| panic!("{what}: barrier: {e}"))
        .wait()
        .unwrap_or_else(|e| panic!("{what}: barrier wait: {e}"));
    stream.synchronize().expect("synchronize");
}

// ------------------------------------------------------------- rendezvous

/// The scenario of `ProcessGroup::from_env`: ops, then destroy, then the
/// launch's folder barrier before rank 0's store goes.
fn from_env_scenario(ctx: &Ctx, group: &ProcessGroup, what: &str) {
    assert_eq!(
        (group.rank(), group.world_size()),
        (ctx.rank(), ctx.world()),
        "{}: {what}: the group's rank and world size",
        ctx.label()
    );
    assert!(
        format!("{group:?}").contains("generation: 0"),
        "{}: {group:?}",
        ctx.label()
    );
    works(ctx, group, what);
    destroy(ctx, group);
    ctx.meet(&format!("{what}-done"));
}

/// `ProcessGroup::from_env`: the torchrun variables, rank 0 hosting the TCP
/// store on `MASTER_PORT`. On its own (world 1, no variables) the call
/// must fail naming `WORLD_SIZE`; the group is then made the same way over
/// a world-of-one configuration.
#[test]
fn ranks_from_env_over_the_tcp_store() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let group = if launched() {
        let config = RendezvousConfig::from_env()
            .unwrap_or_else(|e| panic!("{}: RendezvousConfig::from_env: {e}", ctx.label()));
        assert_eq!(
            (config.rank, config.world_size, config.local_rank),
            (ctx.rank(), ctx.world(), ctx.ranks.local_rank),
            "{}",
            ctx.label()
        );
        assert!(
            matches!(&config.store, StoreSpec::Tcp { addr, .. } if addr == "127.0.0.1"),
            "{}: {config:?}",
            ctx.label()
        );
        ProcessGroup::from_env("from-env")
            .unwrap_or_else(|e| panic!("{}: ProcessGroup::from_env: {e}", ctx.label()))
    } else {
        let error = ProcessGroup::from_env("from-env")
            .expect_err("from_env without the launch variables must fail");
        assert!(error.to_string().contains("WORLD_SIZE"), "{error}");
        let store = tcp_store(&ctx);
        ProcessGroup::new(
            "from-env",
            0,
            1,
            store.0,
            store.1,
            GroupOptions::default().with_timeout(STORE_TIMEOUT),
        )
        .expect("a world of one over the TCP store")
    };
    from_env_scenario(&ctx, &group, "from_env");
}

/// `ProcessGroup::from_env_with` passes its options through: blocking
/// communicators on the caller's stream, over the TCP store.
#[test]
fn ranks_from_env_with_options() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let options = options(CommMode::Blocking).with_stream_mode(StreamMode::Caller);
    let group = if launched() {
        ProcessGroup::from_env_with("from-env-with", options)
            .unwrap_or_else(|e| panic!("{}: ProcessGroup::from_env_with: {e}", ctx.label()))
    } else {
        let store = tcp_store(&ctx);
        ProcessGroup::new("from-env-with", 0, 1, store.0, store.1, options)
            .expect("a world of one over the TCP store")
    };
    assert_eq!(group.options().comm_mode, CommMode::Blocking);
    assert_eq!(group.stream_mode(), StreamMode::Caller);
    from_env_scenario(&ctx, &group, "from_env_with");
}

/// The file store (`NCCL_RS_STORE=file:<dir>`, read the torchrun way) in
/// the launch's shared folder: two groups meet in it, one per kind of
/// communicator.
#[test]
fn ranks_rendezvous_over_the_file_store() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let own_dir = tempfile::tempdir().expect("a temporary folder");
    let dir: PathBuf = ctx
        .ranks
        .dir
        .as_ref()
        .map_or_else(|| own_dir.path().to_path_buf(), |d| d.join("file-store"));
    let spec = format!("file:{}", dir.display());
    let vars = launch_vars();
    let config = config_from(&ctx, move |name| {
        if name == "NCCL_RS_STORE" {
            Some(spec.clone())
        } else {
            vars(name)
        }
    });
    assert_eq!(config.store, StoreSpec::File { dir: dir.clone() });
    let store = connect(&ctx, &config);
    for mode in COMM_MODES {
        let name = format!("file-store-{mode:?}");
        let group = join(&ctx, &name, &store, mode);
        works(&ctx, &group, &format!("{name} over {}", dir.display()));
        destroy(&ctx, &group);
    }
    ctx.meet("file-store-done");
}

// ------------------------------------------------------------ every op

/// Every operation of the group, single and list forms, on `mode`
/// communicators, through a handle on each stream mode.
fn every_op(ctx: &Ctx, mode: CommMode) {
    let store = tcp_store(ctx);
    let group = join(ctx, &format!("every-op-{mode:?}"), &store, mode);
    let mut seeds = Seeds::default();
    for &len in &SIZES {
        for stream_mode in STREAM_MODES {
            let g = group.with_stream_mode(stream_mode);
            let what = |op: &str| {
                format!(
                    "{}: {op} ({mode:?} communicators, {stream_mode:?} stream, {len} elements)",
                    ctx.label()
                )
            };
            single_forms(ctx, &g, len, &mut seeds, &what);
            list_forms(ctx, &g, len, &mut seeds, &what);
            let barrier = what("barrier");
            g.barrier(&ctx.stream)
                .unwrap_or_else(|e| panic!("{barrier}: {e}"))
                .wait()
                .unwrap_or_else(|e| panic!("{barrier}: wait: {e}"));
        }
    }
    ctx.stream.synchronize().expect("synchronize");
    destroy(ctx, &group);
    ctx.meet(&format!("every-op-{mode:?}-done"));
}

fn single_forms(
    ctx: &Ctx,
    group: &ProcessGroup,
    len: usize,
    seeds: &mut Seeds,
    what: &dyn Fn(&str) -> String,
) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);

    // all_reduce, each reduction, f32 and (but the average) i32.
    for op in ReduceOp::ALL {
        let seed = seeds.next();
        let expected = reduce_host(op, &all_vals(seed, world, len));
        let w = what(&format!("all_reduce {op:?} f32"));
        let t = done(
            group.all_reduce(
                upload(stream, &convert::<f32>(&vals(seed, rank, len))),
                op,
                stream,
            ),
            &w,
        );
        check_avg(&w, &download(stream, &t), &expected, world);
        if op != ReduceOp::Avg {
            let w = what(&format!("all_reduce {op:?} i32"));
            let t = done(
                group.all_reduce(
                    upload(stream, &convert::<i32>(&vals(seed, rank, len))),
                    op,
                    stream,
                ),
                &w,
            );
            check(&w, &download(stream, &t), &convert(&expected));
        }
    }

    // A pre-multiplied sum (the group has none of its own: through
    // `custom`), with a multiplier that depends on the rank.
    let seed = seeds.next();
    let inputs = all_vals(seed, world, len);
    let expected: Vec<f64> = (0..len)
        .map(|i| (0..world).map(|r| (r + 1) as f64 * inputs[r][i]).sum())
        .collect();
    let w = what("pre-multiplied sum (custom)");
    let scalar = (rank + 1) as f64;
    let t = done(
        group.custom(
            "pre_mul_sum",
            ctx.device.ordinal(),
            upload(stream, &convert::<f32>(&inputs[rank])),
            stream,
            move |comm, s, t| {
                let op = comm.pre_mul_sum::<f32>(scalar)?;
                comm.all_reduce(&mut *t, &op, s)
            },
        ),
        &w,
    );
    check(&w, &download(stream, &t), &convert(&expected));

    // broadcast from every root.
    for root in 0..world {
        let seed = seeds.next();
        let start = if rank == root {
            convert::<f32>(&vals(seed, root, len))
        } else {
            poison(len)
        };
        let w = what(&format!("broadcast from root {root}"));
        let t = done(
            group.broadcast(upload(stream, &start), root as i32, stream),
            &w,
        );
        check(&w, &download(stream, &t), &convert(&vals(seed, root, len)));
    }

    // reduce, each reduction, to every root in turn (and every root with Sum).
    let reductions = ReduceOp::ALL
        .into_iter()
        .enumerate()
        .map(|(i, op)| (op, i % world))
        .chain((0..world).map(|root| (ReduceOp::Sum, root)));
    for (op, root) in reductions {
        let seed = seeds.next();
        let w = what(&format!("reduce {op:?} to root {root}"));
        let t = done(
            group.reduce(
                upload(stream, &convert::<f32>(&vals(seed, rank, len))),
                op,
                root as i32,
                stream,
            ),
            &w,
        );
        // Only the root has a result.
        if rank == root {
            let expected = reduce_host(op, &all_vals(seed, world, len));
            check_avg(&w, &download(stream, &t), &expected, world);
        }
    }

    // all_gather, f32 and f16: every rank's values in rank order.
    let seed = seeds.next();
    let w = what("all_gather f32");
    let (out, inp) = done(
        group.all_gather(
            upload(stream, &poison::<f32>(world * len)),
            upload(stream, &convert::<f32>(&vals(seed, rank, len))),
            stream,
        ),
        &w,
    );
    check(
        &w,
        &download(stream, &out),
        &convert(&all_vals(seed, world, len).concat()),
    );
    check(
        &format!("{w}: input"),
        &download(stream, &inp),
        &convert(&vals(seed, rank, len)),
    );
    let seed = seeds.next();
    let w = what("all_gather f16");
    let (out, _) = done(
        group.all_gather(
            upload(stream, &poison::<half::f16>(world * len)),
            upload(stream, &convert::<half::f16>(&vals(seed, rank, len))),
            stream,
        ),
        &w,
    );
    check(
        &w,
        &download(stream, &out),
        &convert(&all_vals(seed, world, len).concat()),
    );

    // reduce_scatter, each reduction: rank r gets block r of the reduction.
    for op in ReduceOp::ALL {
        let seed = seeds.next();
        let w = what(&format!("reduce_scatter {op:?}"));
        let (out, _) = done(
            group.reduce_scatter(
                upload(stream, &poison::<f32>(len)),
                upload(stream, &convert::<f32>(&vals(seed, rank, world * len))),
                op,
                stream,
            ),
            &w,
        );
        let full = reduce_host(op, &all_vals(seed, world, world * len));
        check_avg(
            &w,
            &download(stream, &out),
            &full[rank * len..(rank + 1) * len],
            world,
        );
    }

    // all_to_all: block j of rank i's input lands in block i of rank j's output.
    let seed = seeds.next();
    let w = what("all_to_all");
    let (out, _) = done(
        group.all_to_all(
            upload(stream, &poison::<f32>(world * len)),
            upload(stream, &convert::<f32>(&vals(seed, rank, world * len))),
            stream,
        ),
        &w,
    );
    let expected: Vec<f64> = all_vals(seed, world, world * len)
        .iter()
        .flat_map(|input| input[rank * len..(rank + 1) * len].to_vec())
        .collect();
    check(&w, &download(stream, &out), &convert(&expected));
}

/// The list forms (`*_multi`) with this process's one GPU.
fn list_forms(
    ctx: &Ctx,
    group: &ProcessGroup,
    len: usize,
    seeds: &mut Seeds,
    what: &dyn Fn(&str) -> String,
) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let streams = std::slice::from_ref(stream);
    let one = |values: &[f64]| vec![upload(stream, &convert::<f32>(values))];
    let pair = |out: usize, input: &[f64]| {
        vec![(
            upload(stream, &poison::<f32>(out)),
            upload(stream, &convert::<f32>(input)),
        )]
    };

    for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Avg] {
        let seed = seeds.next();
        let w = what(&format!("all_reduce_multi {op:?}"));
        let ts = done(
            group.all_reduce_multi(one(&vals(seed, rank, len)), op, streams),
            &w,
        );
        assert_eq!(ts.len(), 1, "{w}");
        let expected = reduce_host(op, &all_vals(seed, world, len));
        check_avg(&w, &download(stream, &ts[0]), &expected, world);
    }

    for root in [0, world - 1] {
        let seed = seeds.next();
        let w = what(&format!("broadcast_multi from root {root}"));
        let start = if rank == root {
            vals(seed, root, len)
        } else {
            vec![f64::from(support::POISON); len]
        };
        let ts = done(group.broadcast_multi(one(&start), root as i32, streams), &w);
        check(
            &w,
            &download(stream, &ts[0]),
            &convert(&vals(seed, root, len)),
        );

        let seed = seeds.next();
        let w = what(&format!("reduce_multi Max to root {root}"));
        let ts = done(
            group.reduce_multi(
                one(&vals(seed, rank, len)),
                ReduceOp::Max,
                root as i32,
                streams,
            ),
            &w,
        );
        if rank == root {
            let expected = reduce_host(ReduceOp::Max, &all_vals(seed, world, len));
            check(&w, &download(stream, &ts[0]), &convert(&expected));
        }
    }

    let seed = seeds.next();
    let w = what("all_gather_multi");
    let ps = done(
        group.all_gather_multi(pair(world * len, &vals(seed, rank, len)), streams),
        &w,
    );
    assert_eq!(ps.len(), 1, "{w}");
    check(
        &w,
        &download(stream, &ps[0].0),
        &convert(&all_vals(seed, world, len).concat()),
    );

    let seed = seeds.next();
    let w = what("reduce_scatter_multi Sum");
    let ps = done(
        group.reduce_scatter_multi(
            pair(len, &vals(seed, rank, world * len)),
            ReduceOp::Sum,
            streams,
        ),
        &w,
    );
    let full = reduce_host(ReduceOp::Sum, &all_vals(seed, world, world * len));
    check(
        &w,
        &download(stream, &ps[0].0),
        &convert(&full[rank * len..(rank + 1) * len]),
    );

    let seed = seeds.next();
    let w = what("all_to_all_multi");
    let ps = done(
        group.all_to_all_multi(pair(world * len, &vals(seed, rank, world * len)), streams),
        &w,
    );
    let expected: Vec<f64> = all_vals(seed, world, world * len)
        .iter()
        .flat_map(|input| input[rank * len..(rank + 1) * len].to_vec())
        .collect();
    check(&w, &download(stream, &ps[0].0), &convert(&expected));
}

#[test]
fn ranks_every_op_nonblocking() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    every_op(&ctx, CommMode::Nonblocking);
}

#[test]
fn ranks_every_op_blocking() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    every_op(&ctx, CommMode::Blocking);
}

// --------------------------------------------------------- point to point

/// Sends from every rank to every other, one ordered pair at a time in an
/// order every rank shares (`src` major, `dst` minor): each step involves
/// two ranks whose earlier steps all come earlier in that order, so
/// nothing waits on a step that cannot happen.
fn every_ordered_pair(ctx: &Ctx, group: &ProcessGroup, multi: bool, what: &str, base: u64) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let streams = std::slice::from_ref(stream);
    for &len in &SIZES {
        for src in 0..world {
            for dst in (0..world).filter(|&d| d != src) {
                if rank != src && rank != dst {
                    continue;
                }
                let seed = base + (src * world + dst) as u64;
                let data = convert::<f32>(&vals(seed, src, len));
                let w = format!(
                    "{}: {what}: {} {src} -> {dst} ({len} elements)",
                    ctx.label(),
                    if multi {
                        "send_multi/recv_multi"
                    } else {
                        "send/recv"
                    }
                );
                if rank == src {
                    let sent = if multi {
                        let mut ts = done(
                            group.send_multi(vec![upload(stream, &data)], dst, streams),
                            &w,
                        );
                        assert_eq!(ts.len(), 1, "{w}");
                        ts.remove(0)
                    } else {
                        done(group.send(upload(stream, &data), dst, stream), &w)
                    };
                    check(
                        &format!("{w}: the sent tensor"),
                        &download(stream, &sent),
                        &data,
                    );
                } else {
                    let got = if multi {
                        let mut ts = done(
                            group.recv_multi(
                                vec![upload(stream, &poison::<f32>(len))],
                                src,
                                streams,
                            ),
                            &w,
                        );
                        assert_eq!(ts.len(), 1, "{w}");
                        ts.remove(0)
                    } else {
                        done(
                            group.recv(upload(stream, &poison::<f32>(len)), src, stream),
                            &w,
                        )
                    };
                    check(&format!("{w}: received"), &download(stream, &got), &data);
                }
            }
        }
    }
}

/// send/recv between every ordered pair of ranks, single and list forms,
/// on both kinds of communicator (and through a caller's-stream handle);
/// a send to this rank itself is refused with the tensor handed back.
#[test]
fn ranks_send_recv_between_every_ordered_pair() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for (i, mode) in COMM_MODES.into_iter().enumerate() {
        let group = join(&ctx, &format!("pairs-{mode:?}"), &store, mode);
        let what = format!("{mode:?} communicators");
        let base = 10_000 * (i as u64 + 1);
        every_ordered_pair(&ctx, &group, false, &what, base);
        every_ordered_pair(&ctx, &group, true, &what, base + 1000);
        let caller = group.with_stream_mode(StreamMode::Caller);
        every_ordered_pair(
            &ctx,
            &caller,
            false,
            &format!("{what}, caller's stream"),
            base + 2000,
        );

        let data = convert::<f32>(&vals(7, ctx.rank(), 33));
        let e = refused(
            group.send(upload(&ctx.stream, &data), ctx.rank(), &ctx.stream),
            "send to itself",
        );
        assert!(
            matches!(
                e.error,
                GroupError::InvalidArgument {
                    argument: "dst",
                    ..
                }
            ),
            "{}: send to itself: {:?}",
            ctx.label(),
            e.error
        );
        check(
            &format!("{}: the tensor a refused send hands back", ctx.label()),
            &download(&ctx.stream, &e.buffers),
            &data,
        );
        ctx.stream.synchronize().expect("synchronize");
        destroy(&ctx, &group);
    }
    ctx.meet("pairs-done");
}

// ----------------------------------------------------------------- barrier

/// The group's barrier returns on no rank before every rank has called it:
/// rank r calls it r x 150 ms late and publishes when; after the barrier
/// completes, every rank finds every call time in the past. On both kinds
/// of communicator, waited for with `Work::wait` then with
/// `Work::synchronize`.
#[test]
fn ranks_barrier_waits_for_every_rank() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let group = join(&ctx, &format!("barrier-{mode:?}"), &store, mode);
        // The first barrier creates the communicator.
        group
            .barrier(&ctx.stream)
            .and_then(|work| work.synchronize(OP_TIMEOUT))
            .unwrap_or_else(|e| panic!("{}: first barrier: {e}", ctx.label()));
        for round in 0..2 {
            let tag = format!("barrier-{mode:?}-{round}");
            ctx.meet(&format!("{tag}-start"));
            thread::sleep(Duration::from_millis(150) * ctx.rank() as u32);
            let called = unix_us();
            if let Some(dir) = &ctx.ranks.dir {
                publish(
                    dir,
                    &format!("{tag}.called.{}", ctx.rank()),
                    &called.to_string(),
                );
            }
            let work = group
                .barrier(&ctx.stream)
                .unwrap_or_else(|e| panic!("{}: {tag}: {e}", ctx.label()));
            if round == 0 {
                work.wait()
                    .unwrap_or_else(|e| panic!("{}: {tag}: wait: {e}", ctx.label()));
                ctx.stream.synchronize().expect("synchronize");
            } else {
                work.synchronize(OP_TIMEOUT)
                    .unwrap_or_else(|e| panic!("{}: {tag}: synchronize: {e}", ctx.label()));
            }
            let passed = unix_us();
            let Some(dir) = &ctx.ranks.dir else {
                continue;
            };
            for r in 0..ctx.world() {
                let path = dir.join(format!("{tag}.called.{r}"));
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                    panic!(
                        "{}: {tag}: rank {r} had not published its call time ({e}) when the barrier \
                         completed: the barrier did not wait for it",
                        ctx.label()
                    )
                });
                let their: u64 = text.trim().parse().expect("a time in microseconds");
                assert!(
                    passed >= their,
                    "{}: {tag} ({mode:?} communicators): completed at {passed} us, before rank {r} \
                     called it at {their} us",
                    ctx.label()
                );
            }
        }
        destroy(&ctx, &group);
    }
    ctx.meet("barrier-done");
}

// ----------------------------------------------------------------- threads

/// Turns shared by the threads of one process: operation `k` of thread `t`
/// is issued at turn `k * THREADS + t` on every rank, so every rank issues
/// the group's collectives in the same order although 8 threads issue
/// them (the group serialises concurrent callers only in the order they
/// come, which differs between processes).
struct Turns {
    next: Mutex<u64>,
    moved: Condvar,
}

impl Turns {
    fn wait_for(&self, turn: u64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        while *next != turn {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{what}: turn {turn} never came (at {})",
                *next
            );
            next = self
                .moved
                .wait_timeout(next, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn pass(&self) {
        *self.next.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.moved.notify_all();
    }
}

/// 8 threads, each on a stream of its own, issue collectives on one group
/// and wait for and check their results concurrently; only the issuing
/// takes turns (in an order every rank shares).
#[test]
fn ranks_eight_threads_issue_on_one_group() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 12;
    const LEN: usize = 1025;
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    let group = join(&ctx, "threads", &store, CommMode::Nonblocking);
    let turns = Turns {
        next: Mutex::new(0),
        moved: Condvar::new(),
    };
    let (rank, world) = (ctx.rank(), ctx.world());
    thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (group, turns, ctx) = (&group, &turns, &ctx);
                scope.spawn(move || {
                    let stream = ctx.device.new_stream().expect("stream");
                    for round in 0..ROUNDS {
                        let turn = (round * THREADS + t) as u64;
                        let seed = 50_000 + turn;
                        let kind = (t + round) % 5;
                        let root = (t + round) % world;
                        let what = format!("{}: thread {t} round {round} (op {kind})", ctx.label());
                        // Everything but the issue runs concurrently.
                        let single = upload(&stream, &convert::<f32>(&vals(seed, rank, LEN)));
                        let wide = upload(&stream, &convert::<f32>(&vals(seed, rank, world * LEN)));
                        let out_wide = upload(&stream, &poison::<f32>(world * LEN));
                        let out_one = upload(&stream, &poison::<f32>(LEN));
                        turns.wait_for(turn, &what);
                        let (got, expected) = match kind {
                            0 => {
                                let issued = group.all_reduce(single, ReduceOp::Sum, &stream);
                                turns.pass();
                                let t = done(issued, &what);
                                (
                                    download(&stream, &t),
                                    reduce_host(ReduceOp::Sum, &all_vals(seed, world, LEN)),
                                )
                            }
                            1 => {
                                let issued = group.all_gather(out_wide, single, &stream);
                                turns.pass();
                                let (out, _) = done(issued, &what);
                                (download(&stream, &out), all_vals(seed, world, LEN).concat())
                            }
                            2 => {
                                let start = if rank == root { single } else { out_one };
                                let issued = group.broadcast(start, root as i32, &stream);
                                turns.pass();
                                let t = done(issued, &what);
                                (download(&stream, &t), vals(seed, root, LEN))
                            }
                            3 => {
                                let issued =
                                    group.reduce_scatter(out_one, wide, ReduceOp::Max, &stream);
                                turns.pass();
                                let (out, _) = done(issued, &what);
                                let full =
                                    reduce_host(ReduceOp::Max, &all_vals(seed, world, world * LEN));
                                (
                                    download(&stream, &out),
                                    full[rank * LEN..(rank + 1) * LEN].to_vec(),
                                )
                            }
                            _ => {
                                let issued = group.all_to_all(out_wide, wide, &stream);
                                turns.pass();
                                let (out, _) = done(issued, &what);
                                let expected = all_vals(seed, world, world * LEN)
                                    .iter()
                                    .flat_map(|input| input[rank * LEN..(rank + 1) * LEN].to_vec())
                                    .collect();
                                (download(&stream, &out), expected)
                            }
                        };
                        check(&what, &got, &convert::<f32>(&expected));
                    }
                    stream.synchronize().expect("synchronize");
                })
            })
            .collect();
        for (t, handle) in handles.into_iter().enumerate() {
            if let Err(panic) = handle.join() {
                eprintln!("{}: thread {t} failed", ctx.label());
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert_eq!(
        *turns.next.lock().unwrap_or_else(PoisonError::into_inner),
        (THREADS * ROUNDS) as u64
    );
    destroy(&ctx, &group);
    ctx.meet("threads-done");
}

// ------------------------------------------------------ destroy and abort

/// The group's state error: `Destroyed`, or after an abort `Aborted` (or
/// `Failed`: once one rank aborts, another rank's watchdog may see its
/// communicators' peers go before its own abort, and fail the group
/// first).
#[track_caller]
fn assert_state_error(ctx: &Ctx, error: &GroupError, name: &str, aborted: bool, what: &str) {
    match (error, aborted) {
        (GroupError::Aborted { name: n }, true) | (GroupError::Destroyed { name: n }, false) => {
            assert_eq!(n, name, "{}: {what}", ctx.label());
        }
        (GroupError::Failed(failure), true) => {
            assert_eq!(failure.group, name, "{}: {what}", ctx.label());
        }
        _ => panic!(
            "{}: {what}: expected {} for {name:?}, got {error:?}",
            ctx.label(),
            if aborted {
                "Aborted (or Failed)"
            } else {
                "Destroyed"
            }
        ),
    }
}

/// Every operation fails with the group's state error and hands the
/// tensors back untouched.
fn every_call_refused(ctx: &Ctx, group: &ProcessGroup, aborted: bool) {
    let name = group.name().to_string();
    let stream = &ctx.stream;
    let streams = std::slice::from_ref(stream);
    let data = convert::<f32>(&vals(77, ctx.rank(), 257));
    let one = || upload(stream, &data);
    let pair = || {
        (
            upload(stream, &poison::<f32>(257 * ctx.world())),
            upload(stream, &data),
        )
    };
    let check_one = |e: OpError<Tensor<f32>>, op: &str| {
        assert_state_error(ctx, &e.error, &name, aborted, op);
        check(op, &download(stream, &e.buffers), &data);
    };
    let check_pair = |e: OpError<(Tensor<f32>, Tensor<f32>)>, op: &str| {
        assert_state_error(ctx, &e.error, &name, aborted, op);
        check(op, &download(stream, &e.buffers.1), &data);
    };
    check_one(
        refused(group.all_reduce(one(), ReduceOp::Sum, stream), "all_reduce"),
        "all_reduce",
    );
    check_one(
        refused(group.broadcast(one(), 0, stream), "broadcast"),
        "broadcast",
    );
    check_one(
        refused(group.reduce(one(), ReduceOp::Sum, 0, stream), "reduce"),
        "reduce",
    );
    let (o, i) = pair();
    check_pair(
        refused(group.all_gather(o, i, stream), "all_gather"),
        "all_gather",
    );
    let (o, i) = pair();
    check_pair(
        refused(group.all_to_all(o, i, stream), "all_to_all"),
        "all_to_all",
    );
    let e = refused(
        group.all_reduce_multi(vec![one()], ReduceOp::Sum, streams),
        "all_reduce_multi",
    );
    assert_state_error(ctx, &e.error, &name, aborted, "all_reduce_multi");
    check("all_reduce_multi", &download(stream, &e.buffers[0]), &data);
    if ctx.world() >= 2 {
        let peer = (ctx.rank() + 1) % ctx.world();
        check_one(refused(group.send(one(), peer, stream), "send"), "send");
        check_one(refused(group.recv(one(), peer, stream), "recv"), "recv");
    }
    match group.barrier(stream) {
        Ok(_) => panic!("{}: a barrier on a closed group was enqueued", ctx.label()),
        Err(error) => assert_state_error(ctx, &error, &name, aborted, "barrier"),
    }
}

/// Every rank destroys its group (collectively), every later call fails
/// with `Destroyed`, and a group re-created under the same name (the next
/// generation) works; on both kinds of communicator.
#[test]
fn ranks_destroy_then_recreate_under_the_same_name() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let name = format!("recreated-{mode:?}");
        let group = join(&ctx, &name, &store, mode);
        works(&ctx, &group, &format!("{name} before destroy"));
        destroy(&ctx, &group);
        every_call_refused(&ctx, &group, false);
        let again = group.destroy().expect_err("a second destroy fails");
        assert_state_error(&ctx, &again, &name, false, "second destroy");
        group
            .abort()
            .expect("abort of a destroyed group is a no-op");

        let fresh = join(&ctx, &name, &store, mode);
        assert!(
            format!("{fresh:?}").contains("generation: 1"),
            "{}: {fresh:?}",
            ctx.label()
        );
        works(&ctx, &fresh, &format!("{name} re-created"));
        destroy(&ctx, &fresh);
    }
    ctx.meet("recreated-done");
}

/// Every rank aborts its group (from another thread) once all are idle;
/// every later call fails; a group re-created under the same name works,
/// and keeps working after the aborted one is dropped; on both kinds of
/// communicator.
#[test]
fn ranks_abort_then_recreate_under_the_same_name() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let store = tcp_store(&ctx);
    for mode in COMM_MODES {
        let name = format!("aborted-{mode:?}");
        let group = join(&ctx, &name, &store, mode);
        works(&ctx, &group, &format!("{name} before abort"));
        ctx.meet(&format!("{name}-idle"));
        let other = group.clone();
        support::within(
            "abort from another thread",
            Duration::from_secs(60),
            move || other.abort(),
        )
        .unwrap_or_else(|e| panic!("{}: abort: {e}", ctx.label()));
        every_call_refused(&ctx, &group, true);
        let error = group.destroy().expect_err("destroy after abort fails");
        assert_state_error(&ctx, &error, &name, true, "destroy after abort");
        group.abort().expect("a second abort is a no-op");
        ctx.meet(&format!("{name}-aborted"));

        let fresh = join(&ctx, &name, &store, mode);
        assert!(
            format!("{fresh:?}").contains("generation: 1"),
            "{}: {fresh:?}",
            ctx.label()
        );
        works(&ctx, &fresh, &format!("{name} re-created"));
        drop(group);
        works(
            &ctx,
            &fresh,
            &format!("{name} re-created, after dropping the aborted one"),
        );
        destroy(&ctx, &fresh);
    }
    ctx.meet("aborted-done");
}

// -------------------------------------------- the multi-process scenario

/// The scenario of `gpu_group.rs`'s `multi_gpu_process_child` at any world
/// size: `ProcessGroup::from_env`, all_reduce, broadcast from the last
/// rank, all_gather in f16, send/recv both ways between ranks 0 and 1,
/// barrier, then a collective destroy after which every call is refused.
#[test]
fn ranks_process_scenario() {
    let Some(ctx) = Ctx::new() else {
        return;
    };
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let group = if launched() {
        ProcessGroup::from_env("test")
            .unwrap_or_else(|e| panic!("{}: ProcessGroup::from_env: {e}", ctx.label()))
    } else {
        let store = tcp_store(&ctx);
        ProcessGroup::new("test", 0, 1, store.0, store.1, GroupOptions::default())
            .expect("a world of one over the TCP store")
    };
    assert_eq!((group.rank(), group.world_size()), (rank, world));
    const LEN: usize = 4097;
    let values = |seed: usize| support::test_values(seed as u64, LEN);
    let mine = values(rank + 1);
    let label = ctx.label();

    let sum = (1..world).fold(values(1), |acc, r| {
        acc.iter().zip(values(r + 1)).map(|(a, b)| a + b).collect()
    });
    let t = done(
        group.all_reduce(
            upload(stream, &convert::<f32>(&mine)),
            ReduceOp::Sum,
            stream,
        ),
        "all_reduce",
    );
    check(
        &format!("{label}: all_reduce"),
        &download(stream, &t),
        &convert(&sum),
    );

    let root = world - 1;
    let start = if rank == root {
        convert::<f32>(&values(1000))
    } else {
        poison(LEN)
    };
    let t = done(
        group.broadcast(upload(stream, &start), root as i32, stream),
        "broadcast",
    );
    check(
        &format!("{label}: broadcast from {root}"),
        &download(stream, &t),
        &convert(&values(1000)),
    );

    let gathered: Vec<f64> = (0..world).flat_map(|r| values(r + 1)).collect();
    let (out, _) = done(
        group.all_gather(
            upload(stream, &poison::<half::f16>(world * LEN)),
            upload(stream, &convert::<half::f16>(&mine)),
            stream,
        ),
        "all_gather",
    );
    check(
        &format!("{label}: all_gather"),
        &download(stream, &out),
        &convert(&gathered),
    );

    match rank {
        0 if world >= 2 => {
            let sent = done(
                group.send(upload(stream, &convert::<f32>(&values(200))), 1, stream),
                "send 0 -> 1",
            );
            check(
                &format!("{label}: sent tensor intact"),
                &download(stream, &sent),
                &convert(&values(200)),
            );
            let got = done(
                group.recv(upload(stream, &poison::<f32>(LEN)), 1, stream),
                "recv 0 <- 1",
            );
            check(
                &format!("{label}: received from 1"),
                &download(stream, &got),
                &convert(&values(201)),
            );
        }
        1 => {
            let got = done(
                group.recv(upload(stream, &poison::<f32>(LEN)), 0, stream),
                "recv 1 <- 0",
            );
            check(
                &format!("{label}: received from 0"),
                &download(stream, &got),
                &convert(&values(200)),
            );
            done(
                group.send(upload(stream, &convert::<f32>(&values(201))), 0, stream),
                "send 1 -> 0",
            );
        }
        _ => {}
    }

    group
        .barrier(stream)
        .expect("barrier")
        .wait()
        .expect("barrier wait");
    stream.synchronize().expect("synchronize");
    println!("{label}: ops ok");
    destroy(&ctx, &group);
    every_call_refused(&ctx, &group, false);
    println!("{label}: destroyed");
    ctx.meet("scenario-done");
}
