//! Whole scenarios on a group of any world size, every rank running the
//! same code: a quick check that the group works, and the multi-process
//! scenario.

use std::sync::Arc;

use nccl_core::{CudaStream, ReduceOp};
use nccl_group::ProcessGroup;

use super::{convert, done, every_rank_values, label, rank_values, reduce_host};
use crate::tensor::{download, poison_values, upload};
use crate::{assert_same_values, test_values};

/// `group` works: a sum, a gather, a broadcast from the last rank, (world
/// size 2 and more) a send/recv each way between ranks 0 and 1, and a
/// barrier, every value checked; `what` says when, for messages.
pub fn works(group: &ProcessGroup, stream: &Arc<CudaStream>, what: &str) {
    const LEN: usize = 4097;
    let (rank, world) = (group.rank(), group.world_size());
    let what = format!("{}: {what}", label(group));
    let t = done(
        group.all_reduce(
            upload(stream, &convert::<f32>(&rank_values(901, rank, LEN))),
            ReduceOp::Sum,
            stream,
        ),
        &format!("{what}: all_reduce"),
    );
    assert_same_values(
        &download(stream, &t),
        &convert(&reduce_host(
            ReduceOp::Sum,
            &every_rank_values(901, world, LEN),
        )),
        &format!("{what}: all_reduce"),
    );
    let (out, _) = done(
        group.all_gather_into_tensor(
            upload(stream, &poison_values::<f32>(world * LEN)),
            upload(stream, &convert::<f32>(&rank_values(902, rank, LEN))),
            stream,
        ),
        &format!("{what}: all_gather"),
    );
    assert_same_values(
        &download(stream, &out),
        &convert(&every_rank_values(902, world, LEN).concat()),
        &format!("{what}: all_gather"),
    );
    let root = world - 1;
    let start = if rank == root {
        convert::<f32>(&rank_values(903, root, LEN))
    } else {
        poison_values(LEN)
    };
    let t = done(
        group.broadcast(upload(stream, &start), root, stream),
        &format!("{what}: broadcast"),
    );
    assert_same_values(
        &download(stream, &t),
        &convert(&rank_values(903, root, LEN)),
        &format!("{what}: broadcast from {root}"),
    );
    if world >= 2 && rank < 2 {
        let peer = 1 - rank;
        for src in [0, 1] {
            let data = convert::<f32>(&rank_values(904 + src as u64, src, LEN));
            if rank == src {
                let sent = done(
                    group.send(upload(stream, &data), peer, stream),
                    &format!("{what}: send {src} -> {peer}"),
                );
                assert_same_values(
                    &download(stream, &sent),
                    &data,
                    &format!("{what}: sent tensor"),
                );
            } else {
                let got = done(
                    group.recv(upload(stream, &poison_values::<f32>(LEN)), peer, stream),
                    &format!("{what}: recv {rank} <- {peer}"),
                );
                assert_same_values(
                    &download(stream, &got),
                    &data,
                    &format!("{what}: received from {peer}"),
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

/// The multi-process scenario on `group` (made by every rank, e.g. with
/// `ProcessGroup::from_env`): an all_reduce, a broadcast from the last
/// rank, an all_gather in f16, a send/recv each way between ranks 0 and 1
/// (world size 2 and more), and a barrier, every value checked; then
/// prints `{label}: ops ok`.
pub fn process_scenario(group: &ProcessGroup, stream: &Arc<CudaStream>, label: &str) {
    const LEN: usize = 4097;
    let (rank, world) = (group.rank(), group.world_size());
    let values = |seed: usize| test_values(seed as u64, LEN);
    let mine = values(rank + 1);

    let every: Vec<Vec<f64>> = (0..world).map(|r| values(r + 1)).collect();
    let t = done(
        group.all_reduce(
            upload(stream, &convert::<f32>(&mine)),
            ReduceOp::Sum,
            stream,
        ),
        "all_reduce",
    );
    assert_same_values(
        &download(stream, &t),
        &convert(&reduce_host(ReduceOp::Sum, &every)),
        &format!("{label}: all_reduce"),
    );

    let root = world - 1;
    let start = if rank == root {
        convert::<f32>(&values(1000))
    } else {
        poison_values(LEN)
    };
    let t = done(
        group.broadcast(upload(stream, &start), root, stream),
        "broadcast",
    );
    assert_same_values(
        &download(stream, &t),
        &convert(&values(1000)),
        &format!("{label}: broadcast from {root}"),
    );

    let (out, _) = done(
        group.all_gather_into_tensor(
            upload(stream, &poison_values::<half::f16>(world * LEN)),
            upload(stream, &convert::<half::f16>(&mine)),
            stream,
        ),
        "all_gather",
    );
    assert_same_values(
        &download(stream, &out),
        &convert(&every.concat()),
        &format!("{label}: all_gather"),
    );

    // Receives from `peer` the values of `seed`.
    let receives = |peer: usize, seed: usize| {
        let got = done(
            group.recv(upload(stream, &poison_values::<f32>(LEN)), peer, stream),
            &format!("recv {rank} <- {peer}"),
        );
        assert_same_values(
            &download(stream, &got),
            &convert(&values(seed)),
            &format!("{label}: received from {peer}"),
        );
    };
    match rank {
        0 if world >= 2 => {
            let sent = done(
                group.send(upload(stream, &convert::<f32>(&values(200))), 1, stream),
                "send 0 -> 1",
            );
            assert_same_values(
                &download(stream, &sent),
                &convert(&values(200)),
                &format!("{label}: sent tensor intact"),
            );
            receives(1, 201);
        }
        1 => {
            receives(0, 200);
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
}
