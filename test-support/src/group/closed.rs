//! What a destroyed or aborted group must do: refuse every call with its
//! state error and hand the tensors back untouched.

use std::sync::Arc;

use nccl_core::{CudaStream, ReduceOp};
use nccl_group::{GroupError, OpError, ProcessGroup};
use nccl_tensor::Tensor;

use super::{convert, rank_values, refused};
use crate::assert_same_values;
use crate::tensor::{download, poison_values, upload};

/// How a group was closed, which decides the error its calls must give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// By `destroy`: every call gives `GroupError::Destroyed`.
    Destroyed,
    /// By `abort`: every call gives `GroupError::Aborted`, or at world
    /// size 2 and more `GroupError::Failed` (once one rank aborts, another
    /// rank's watchdog may see its communicators' peers go before its own
    /// abort, and fail the group first).
    Aborted,
}

/// Asserts that `error`, from `what` on `group`, is the state error of a
/// group closed as `closed`, naming the group.
#[track_caller]
pub fn assert_closed_error(error: &GroupError, group: &ProcessGroup, closed: Closed, what: &str) {
    let name = group.name();
    match (error, closed) {
        (GroupError::Destroyed { name: n }, Closed::Destroyed)
        | (GroupError::Aborted { name: n }, Closed::Aborted) => {
            assert_eq!(n, name, "{what}");
            assert!(error.to_string().contains(name), "{what}: {error}");
        }
        (GroupError::Failed(failure), Closed::Aborted) if group.world_size() > 1 => {
            assert_eq!(failure.group, name, "{what}");
        }
        _ => panic!("{what}: expected {closed:?} for {name:?}, got {error:?}"),
    }
}

/// Every operation of `group`, single and list forms, send and recv (at
/// world size 2 and more; at world size 1 their peer check comes first)
/// and barrier, fails with the state error of a group closed as `closed`
/// and hands its tensors back untouched.
pub fn every_call_refused(group: &ProcessGroup, stream: &Arc<CudaStream>, closed: Closed) {
    const LEN: usize = 4097;
    let (rank, world) = (group.rank(), group.world_size());
    let what = |op: &str| format!("{op} on {} ({closed:?})", super::label(group));
    let data = convert::<f32>(&rank_values(77, rank, LEN));
    let wide = convert::<f32>(&rank_values(78, rank, world * LEN));
    let streams = std::slice::from_ref(stream);
    let one = || upload(stream, &data);
    // (output, input) of the right lengths for each two-tensor operation.
    let gather = || (upload(stream, &poison_values(world * LEN)), one());
    let scatter = || (upload(stream, &poison_values(LEN)), upload(stream, &wide));
    let exchange = || {
        (
            upload(stream, &poison_values(world * LEN)),
            upload(stream, &wide),
        )
    };
    let handed_back = |op: &str, tensor: &Tensor<f32>, expected: &[f32]| {
        assert_same_values(&download(stream, tensor), expected, &what(op));
    };
    let check_one = |op: &str, e: OpError<Tensor<f32>>| {
        assert_closed_error(&e.error, group, closed, &what(op));
        handed_back(op, &e.buffers, &data);
    };
    // A two-tensor operation's output comes back poisoned, its input as
    // it went in.
    let check_pair =
        |op: &str, error: &GroupError, (out, input): &(Tensor<f32>, Tensor<f32>), sent: &[f32]| {
            assert_closed_error(error, group, closed, &what(op));
            handed_back(op, out, &poison_values(out.len()));
            handed_back(op, input, sent);
        };
    let check_list = |op: &str, e: OpError<Vec<Tensor<f32>>>| {
        assert_closed_error(&e.error, group, closed, &what(op));
        assert_eq!(e.buffers.len(), 1, "{}", what(op));
        handed_back(op, &e.buffers[0], &data);
    };
    let check_pairs = |op: &str, e: OpError<Vec<(Tensor<f32>, Tensor<f32>)>>, sent: &[f32]| {
        assert_eq!(e.buffers.len(), 1, "{}", what(op));
        check_pair(op, &e.error, &e.buffers[0], sent);
    };

    let op = "all_reduce";
    check_one(
        op,
        refused(group.all_reduce(one(), ReduceOp::Sum, stream), op),
    );
    let op = "broadcast";
    check_one(op, refused(group.broadcast(one(), 0, stream), op));
    let op = "reduce";
    check_one(
        op,
        refused(group.reduce(one(), ReduceOp::Sum, 0, stream), op),
    );
    let op = "all_gather";
    let (o, i) = gather();
    let e = refused(group.all_gather_into_tensor(o, i, stream), op);
    check_pair(op, &e.error, &e.buffers, &data);
    let op = "reduce_scatter";
    let (o, i) = scatter();
    let e = refused(group.reduce_scatter_tensor(o, i, ReduceOp::Sum, stream), op);
    check_pair(op, &e.error, &e.buffers, &wide);
    let op = "all_to_all";
    let (o, i) = exchange();
    let e = refused(group.all_to_all_single(o, i, stream), op);
    check_pair(op, &e.error, &e.buffers, &wide);
    let op = "all_reduce_multi";
    check_list(
        op,
        refused(
            group
                .multi()
                .all_reduce(vec![one()], ReduceOp::Sum, streams),
            op,
        ),
    );
    let op = "broadcast_multi";
    check_list(
        op,
        refused(group.multi().broadcast(vec![one()], 0, streams), op),
    );
    let op = "reduce_multi";
    check_list(
        op,
        refused(
            group.multi().reduce(vec![one()], ReduceOp::Sum, 0, streams),
            op,
        ),
    );
    let op = "all_gather_into_tensor_multi";
    let e = refused(
        group
            .multi()
            .all_gather_into_tensor(vec![gather()], streams),
        op,
    );
    check_pairs(op, e, &data);
    let op = "reduce_scatter_multi";
    let e = refused(
        group
            .multi()
            .reduce_scatter_tensor(vec![scatter()], ReduceOp::Sum, streams),
        op,
    );
    check_pairs(op, e, &wide);
    let op = "all_to_all_single_multi";
    let e = refused(
        group.multi().all_to_all_single(vec![exchange()], streams),
        op,
    );
    check_pairs(op, e, &wide);
    if world >= 2 {
        let peer = (rank + 1) % world;
        let op = "send";
        check_one(op, refused(group.send(one(), peer, stream), op));
        let op = "recv";
        check_one(op, refused(group.recv(one(), peer, stream), op));
    }
    match group.barrier(stream) {
        Ok(_) => panic!("{}: enqueued", what("barrier")),
        Err(error) => assert_closed_error(&error, group, closed, &what("barrier")),
    }
}
