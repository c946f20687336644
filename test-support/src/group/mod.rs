//! `ProcessGroup` test helpers: groups of one process, the results of
//! operations, the host's side of every collective, the role of a
//! launched child process ([`launched_role`]), tests that differ only in
//! their arguments ([`named_tests!`](crate::named_tests)), what a closed group
//! must refuse ([`every_call_refused`]), a check that a group still works
//! ([`works`]), the multi-process scenario ([`process_scenario`]), the
//! `ranks_*` tests' rendezvous ([`ranks`]), the fault suite's gated
//! operations ([`faults`]) and the communicator cache's fake factory
//! ([`cache`]).

pub mod cache;
mod closed;
pub mod faults;
pub mod ranks;
mod scenario;

use nccl_group::{Diagnostics, Lifecycle};
use std::sync::Arc;

use nccl_core::ReduceOp;
use nccl_group::{
    GroupError, GroupOptions, InProcessStore, OpBuffers, OpError, OpResult, Owned, ProcessGroup,
    Store, Work,
};

pub use closed::{Closed, assert_closed_error, every_call_refused};
pub use scenario::{process_scenario, works};

use crate::tensor::Elem;
use crate::{assert_same_values, test_values};

/// Sizes of the value checks: one element, and just past nccl-core's
/// 4096-element split.
pub const SIZES: [usize; 2] = [1, 4097];

/// A world-size-1 group on an in-process store of its own, with `options`.
pub fn world_of_one(name: &str, options: GroupOptions) -> ProcessGroup {
    world_of_one_on(name, Arc::new(InProcessStore::new()), options)
}

/// A world-size-1 group on `store` (groups made again under one name on
/// one store are its next generations).
pub fn world_of_one_on(
    name: &str,
    store: Arc<InProcessStore>,
    options: GroupOptions,
) -> ProcessGroup {
    ProcessGroup::builder(name)
        .rank(0)
        .world_size(1)
        .store(store)
        .options(options)
        .build()
        .unwrap_or_else(|e| panic!("creating group {name:?}: {e}"))
}

/// Ranks `0..world` of group `name` on `store`, each a group of its own
/// with `options`, made in this process (threads play the ranks: a group
/// that never makes a communicator needs no GPU).
pub fn ranks_on(
    store: &Arc<dyn Store>,
    name: &str,
    world: usize,
    options: &GroupOptions,
) -> Vec<ProcessGroup> {
    let join = |rank| {
        ProcessGroup::builder(name)
            .rank(rank)
            .world_size(world)
            .store(Arc::clone(store))
            .options(options.clone())
            .build()
            .unwrap_or_else(|e| panic!("rank {rank} joining {name:?}: {e}"))
    };
    (0..world).map(join).collect()
}

/// The role of a child process that a multi-process test launched: the
/// environment variable `var` parsed by `parse`. `None` when there is no
/// GPU (see [`require_gpus`](crate::require_gpus)) or when this process
/// was not launched as such a child: it then prints `SKIP: {not_launched}`
/// and the test passes.
pub fn launched_role<R>(
    var: &str,
    parse: impl FnOnce(&str) -> Option<R>,
    not_launched: &str,
) -> Option<R> {
    crate::require_gpus(1)?;
    let role = std::env::var(var).ok().and_then(|value| parse(&value));
    if role.is_none() {
        println!("SKIP: {not_launched}");
    }
    role
}

/// `#[test]` functions that each make one call, for tests that differ
/// only in its arguments: `name: call;` per test, with its doc comment.
#[macro_export]
macro_rules! named_tests {
    ($($(#[$attr:meta])* $name:ident: $call:expr;)*) => {
        $(
            $(#[$attr])*
            #[test]
            fn $name() {
                $call;
            }
        )*
    };
}

/// Asserts that `error` is the group's refusal of `argument`
/// (`GroupError::InvalidArgument`).
#[track_caller]
pub fn assert_invalid_argument(error: &GroupError, argument: &str) {
    assert!(
        matches!(error, GroupError::InvalidArgument { argument: a, .. } if *a == argument),
        "{error:?}"
    );
}

/// `group "name", rank r of N`, for messages.
pub fn label(group: &ProcessGroup) -> String {
    format!(
        "group {:?}, rank {} of {}",
        group.name(),
        group.rank(),
        group.world_size()
    )
}

/// Collectively destroys `group`.
#[track_caller]
pub fn destroy(group: &ProcessGroup) {
    group
        .destroy()
        .unwrap_or_else(|e| panic!("{}: destroy: {e}", label(group)));
}

/// Waits until `group`'s watchdog tracks no operation (it has seen every
/// end, so records, dumps and reaping compare settled states), at most a
/// minute: a liveness bound, not a timing assertion.
#[track_caller]
pub fn watchdog_drained(group: &ProcessGroup, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while group.pending_operations() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the watchdog still tracks {} operation(s)",
            group.pending_operations()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The work of an operation that must be enqueued.
#[track_caller]
pub fn enqueued<B: OpBuffers>(result: OpResult<B>, what: &str) -> Work<B> {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The buffers of a successful operation, after the caller's stream waited.
#[track_caller]
pub fn done<B: OpBuffers>(result: OpResult<B>, what: &str) -> B {
    enqueued(result, what)
        .wait()
        .unwrap_or_else(|e| panic!("{what}: wait failed: {e}"))
}

/// The error of an operation on owned buffers that must fail before
/// enqueueing, with the buffers it hands back.
#[track_caller]
pub fn refused<B: OpBuffers<Ownership = Owned>>(result: OpResult<B>, what: &str) -> OpError<B> {
    match result {
        Ok(_work) => panic!("{what}: expected an error, the operation was enqueued"),
        Err(e) => *e,
    }
}

/// Host values as `T` (small integers: exact).
pub fn convert<T: Elem>(values: &[f64]) -> Vec<T> {
    values.iter().copied().map(T::from_f64).collect()
}

/// Rank `rank`'s values for the operation numbered `seed`: small nonzero
/// integers, different per rank and per operation.
pub fn rank_values(seed: u64, rank: usize, len: usize) -> Vec<f64> {
    test_values(seed.wrapping_mul(1_000_003).wrapping_add(rank as u64), len)
}

/// Every rank's values for the operation numbered `seed`, in rank order.
pub fn every_rank_values(seed: u64, world: usize, len: usize) -> Vec<Vec<f64>> {
    (0..world).map(|r| rank_values(seed, r, len)).collect()
}

/// The elementwise reduction of `inputs` (one per rank) by `op`, as NCCL
/// computes it on small integers (`Avg`: the sum over the world size).
pub fn reduce_host(op: ReduceOp, inputs: &[Vec<f64>]) -> Vec<f64> {
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

/// Block `index` of `len` elements of every rank's `inputs`, in rank
/// order: what an all_to_all delivers to rank `index`.
pub fn blocks_for(inputs: &[Vec<f64>], index: usize, len: usize) -> Vec<f64> {
    inputs
        .iter()
        .flat_map(|input| input[index * len..(index + 1) * len].iter().copied())
        .collect()
}

/// An f32 average: exact when the world size is a power of two (dividing
/// small integers by it is exact), else within a rounding step.
#[track_caller]
pub fn check_avg(what: &str, got: &[f32], expected: &[f64], world: usize) {
    if world.is_power_of_two() {
        return assert_same_values(got, &convert::<f32>(expected), what);
    }
    assert_eq!(got.len(), expected.len(), "{what}: number of elements");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (f64::from(g) - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{what}: element {i} is {g}, expected {e}"
        );
    }
}

/// The reduces to check at world size `world`: each reduction to a root in
/// turn, then every root with `Sum`.
pub fn reduces(world: usize) -> impl Iterator<Item = (ReduceOp, usize)> {
    ReduceOp::ALL
        .into_iter()
        .enumerate()
        .map(move |(i, op)| (op, i % world))
        .chain((0..world).map(|root| (ReduceOp::Sum, root)))
}

/// Checks `got`, this rank's block of a reduce_scatter by `op` of every
/// rank's `world * got.len()` values of `seed` ([`check_avg`]'s way).
#[track_caller]
pub fn check_reduce_scatter_block(
    what: &str,
    got: &[f32],
    op: ReduceOp,
    seed: u64,
    rank: usize,
    world: usize,
) {
    let len = got.len();
    let full = reduce_host(op, &every_rank_values(seed, world, world * len));
    check_avg(what, got, &full[rank * len..(rank + 1) * len], world);
}

/// `len` values for iteration `iteration` of a loop: never zero (so an
/// output zeroed before each operation shows an element it did not
/// write), and different from one iteration to the next.
pub fn pattern(iteration: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7 + iteration * 13) % 251 + 1) as f32)
        .collect()
}
