//! Tensors registered with a `ProcessGroup`'s communicator
//! (`ProcessGroup::register`, `ncclCommRegister`) at world size N: the
//! `ranks_*` tests that run.sh runs on their own (world size 1) and under
//! `nccl-launch -n 2` and `-n 4` (simulated hosts on one GPU). On blocking
//! and nonblocking communicators, each on the group's stream and on the
//! caller's, in cudarc's memory and in NCCL's (`ncclMemAlloc`):
//!
//! * the named operations on registered tensors: all_reduce in place,
//!   all_gather out of place with both buffers registered;
//! * a coalesced bucket and a batch_isend_irecv ring of registered
//!   tensors;
//! * deregistration (`into_inner`) and registering the same memory again;
//! * a registration inside a `custom` closure (which holds the
//!   communicator's lock) is refused, not a deadlock;
//! * a registration that outlives its group: the operations and new
//!   registrations are refused, deregistering and dropping still work.
//!
//! Every element of every output is checked against what the host
//! computes from every rank's data.

use nccl_core::ReduceOp;
use nccl_group::{GroupError, GroupRegistered, P2POp, ProcessGroup};
use nccl_tensor::Tensor;
use nccl_test_support::group::ranks::{COMM_MODES, RankContext, What, each_mode, join, tcp_store};
use nccl_test_support::group::{destroy, done, refused};
use nccl_test_support::tensor::world::{all_values, reduced};
use nccl_test_support::tensor::{Memory, assert_same, covering, download, upload_in};

/// Elements per rank (past NCCL's small-message protocols).
const LEN: usize = 4097;

/// `values` in `memory`, registered with `group`, its registration
/// checked against the tensor's memory.
#[track_caller]
fn registered(
    ctx: &RankContext,
    group: &ProcessGroup,
    values: &[f32],
    memory: Memory,
    what: &str,
) -> GroupRegistered<Tensor<f32>> {
    let tensor = upload_in(&ctx.stream, values, memory);
    let registered = group
        .register(tensor)
        .unwrap_or_else(|e| panic!("{what}: register: {e}"));
    covering(registered, what)
}

fn sum(column: &[f64]) -> f64 {
    column.iter().sum()
}

/// The named operations, a coalesced bucket and a ring on registered
/// tensors in `memory`.
fn operations(ctx: &RankContext, group: &ProcessGroup, memory: Memory, what: What<'_>) {
    let (me, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let data = all_values::<f32>(91, world, LEN);

    let w = what(&format!("all_reduce, registered ({memory:?} memory)"));
    let tensor = registered(ctx, group, &data[me], memory, &w);
    let summed = done(group.all_reduce(tensor, ReduceOp::Sum, stream), &w);
    let expected = reduced(&data, 0, LEN, &sum);
    assert_same(&download(stream, &summed), &expected, &w);

    let w = what(&format!("all_gather, both registered ({memory:?} memory)"));
    let input = registered(ctx, group, &data[me], memory, &w);
    let output = registered(ctx, group, &vec![-7.0; LEN * world], memory, &w);
    let (gathered, input) = done(group.all_gather_into_tensor(output, input, stream), &w);
    assert_same(&download(stream, &gathered), &data.concat(), &w);
    assert_same(
        &download(stream, &input),
        &data[me],
        &format!("{w}: input kept"),
    );

    let w = what(&format!(
        "coalesced all_reduces, registered ({memory:?} memory)"
    ));
    let mut bucket = group.coalesced::<GroupRegistered<Tensor<f32>>>();
    bucket
        .all_reduce(registered(ctx, group, &data[me], memory, &w), ReduceOp::Max)
        .all_reduce(registered(ctx, group, &data[me], memory, &w), ReduceOp::Sum);
    let reduced_pair = done(bucket.issue(stream), &w);
    let max = |column: &[f64]| column.iter().copied().fold(f64::MIN, f64::max);
    assert_same(
        &download(stream, &reduced_pair[0]),
        &reduced(&data, 0, LEN, &max),
        &format!("{w}: max"),
    );
    assert_same(
        &download(stream, &reduced_pair[1]),
        &reduced(&data, 0, LEN, &sum),
        &format!("{w}: sum"),
    );

    let w = what(&format!(
        "batch_isend_irecv ring, registered ({memory:?} memory)"
    ));
    let (next, previous) = ((me + 1) % world, (me + world - 1) % world);
    let ops = vec![
        P2POp::recv(
            registered(ctx, group, &vec![-7.0; LEN], memory, &w),
            previous,
        ),
        P2POp::send(registered(ctx, group, &data[me], memory, &w), next),
    ];
    let ring = done(group.batch_isend_irecv(ops, stream), &w);
    assert_same(&download(stream, &ring[0]), &data[previous], &w);

    // Deregistered, the tensor comes back and registers again.
    let w = what(&format!("registered again ({memory:?} memory)"));
    let tensor = summed
        .into_inner()
        .unwrap_or_else(|e| panic!("{w}: deregister: {e}"));
    let again = group
        .register(tensor)
        .unwrap_or_else(|e| panic!("{w}: register: {e}"));
    // Every rank holds the sum already: the maximum is that sum.
    let again = done(group.all_reduce(again, ReduceOp::Max, stream), &w);
    assert_same(&download(stream, &again), &expected, &w);

    // Inside a custom operation the communicator's lock is held: a
    // registration there is refused instead of deadlocking.
    let w = what(&format!("register inside custom ({memory:?} memory)"));
    let device = stream.context().ordinal();
    let () = done(
        group.custom("register-inside", device, (), stream, |_, _, _| {
            let refused = group.register(upload_in(stream, &data[me], memory));
            let error = refused.expect_err("a registration under the communicator's lock");
            assert!(
                error.to_string().contains("the thread holding it"),
                "{w}: {error}"
            );
            Ok(nccl_core::Status::Success)
        }),
        &w,
    );
    stream.synchronize().expect("synchronize");
}

#[test]
fn ranks_group_registered_operations() {
    each_mode("registered", |ctx, group, what| {
        for memory in [Memory::Cudarc, Memory::Nccl] {
            operations(ctx, group, memory, what);
        }
    });
}

#[test]
fn ranks_group_registration_outlives_its_group() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let (me, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let store = tcp_store(&ctx);
    let data = all_values::<f32>(92, world, LEN);
    for mode in COMM_MODES {
        let name = format!("registration-outlives-{mode:?}");
        let w = format!("{}: {name}", ctx.label());
        let group = join(&ctx, &name, &store, mode);
        let tensor = registered(&ctx, &group, &data[me], Memory::Nccl, &w);
        let kept = done(group.all_reduce(tensor, ReduceOp::Sum, stream), &w);
        let dropped = registered(&ctx, &group, &data[me], Memory::Cudarc, &w);
        stream.synchronize().expect("synchronize");
        destroy(&group);

        let error = refused(group.all_reduce(kept, ReduceOp::Sum, stream), &w);
        assert!(
            matches!(error.error, GroupError::Destroyed { .. }),
            "{w}: an operation after destroy: {}",
            error.error
        );
        let again = group.register(upload_in(stream, &data[me], Memory::Cudarc));
        assert!(
            matches!(again, Err(GroupError::Destroyed { .. })),
            "{w}: registering after destroy: {again:?}"
        );
        // The registration outlived the communicator's finalize: nothing
        // is left to deregister, and the tensor comes back intact.
        let tensor = error
            .buffers
            .into_inner()
            .unwrap_or_else(|e| panic!("{w}: deregister after destroy: {e}"));
        assert_same(
            &download(stream, &tensor),
            &reduced(&data, 0, LEN, &sum),
            &format!("{w}: the tensor after destroy"),
        );
        drop((dropped, tensor));
        ctx.meet(&format!("{name}-done"));
    }
}
