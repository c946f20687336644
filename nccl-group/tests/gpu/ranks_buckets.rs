//! A DDP-style step over one flat gradient slice, at world size N (the
//! `ranks_*` tests run.sh runs alone and under `nccl-launch -n 2` and
//! `-n 4`): `nccl_tensor::with_buckets` lends one view per bucket, a
//! "compute" stream writes each bucket's gradients (a host copy standing
//! in for the backward pass) and records an event, the caller's
//! communication stream waits for that event and issues the bucket's
//! all_reduce, so every bucket's all_reduce is in flight while later
//! buckets are still being written. Every element of the slice is
//! checked after all works are waited: each bucket reduced, the tail
//! past the last bucket untouched. Blocking and nonblocking
//! communicators, the group's streams and the caller's.
//!
//! Without a GPU the test prints `SKIP: ...` and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1`.

use std::sync::Arc;

use nccl_core::ReduceOp;
use nccl_core::cudarc::driver::{CudaSlice, CudaStream, CudaViewMut};
use nccl_group::ProcessGroup;
use nccl_test_support::assert_same_values;
use nccl_test_support::group::ranks::{RankContext, What, each_mode};
use nccl_test_support::group::{convert, every_rank_values, rank_values, reduce_host};

/// The buckets' lengths: uneven, one empty, the last not reaching the
/// end of the slice.
const BUCKETS: [usize; 5] = [4099, 1, 0, 65_536, 777];
/// Elements past the last bucket, which no operation may touch.
const TAIL: usize = 37;
/// What the tail holds.
const TAIL_VALUE: f32 = -7.0;

/// One step: gradients written bucket by bucket on `compute`, each
/// bucket all_reduced on `comm` as soon as it is written.
fn step(
    group: &ProcessGroup,
    grads: &mut CudaSlice<f32>,
    compute: &Arc<CudaStream>,
    comm: &Arc<CudaStream>,
    seed: u64,
    what: &str,
) {
    let rank = group.rank();
    let issued =
        nccl_tensor::with_buckets(grads, &BUCKETS, |buckets: Vec<CudaViewMut<'_, f32>>| {
            let mut works = Vec::new();
            for (index, mut bucket) in buckets.into_iter().enumerate() {
                let values = convert::<f32>(&rank_values(seed + index as u64, rank, bucket.len()));
                compute
                    .memcpy_htod(&values, &mut bucket)
                    .unwrap_or_else(|e| panic!("{what}: bucket {index}: write: {e}"));
                let written = compute
                    .record_event(None)
                    .unwrap_or_else(|e| panic!("{what}: bucket {index}: event: {e}"));
                comm.wait(&written)
                    .unwrap_or_else(|e| panic!("{what}: bucket {index}: wait: {e}"));
                let work = group
                    .all_reduce(bucket, ReduceOp::Sum, comm)
                    .unwrap_or_else(|e| panic!("{what}: bucket {index}: all_reduce: {e}"));
                works.push(work);
            }
            assert_eq!(works.len(), BUCKETS.len(), "{what}: every bucket in flight");
            for (index, work) in works.into_iter().enumerate() {
                work.wait()
                    .unwrap_or_else(|e| panic!("{what}: bucket {index}: wait: {e}"));
            }
        });
    issued.unwrap_or_else(|e| panic!("{what}: with_buckets: {e}"));
}

/// The slice after [`step`]: each bucket the sum of every rank's values,
/// the tail as it was.
fn expected(world: usize, seed: u64) -> Vec<f32> {
    let mut all = Vec::new();
    for (index, &len) in BUCKETS.iter().enumerate() {
        let every = every_rank_values(seed + index as u64, world, len);
        all.extend(convert::<f32>(&reduce_host(ReduceOp::Sum, &every)));
    }
    all.extend(std::iter::repeat_n(TAIL_VALUE, TAIL));
    all
}

fn buckets_in_flight(ctx: &RankContext, group: &ProcessGroup, what: What<'_>) {
    let total: usize = BUCKETS.iter().sum::<usize>() + TAIL;
    let comm = &ctx.stream;
    let compute = ctx.device.new_stream().expect("a compute stream");
    for round in 0..3u64 {
        let w = what(&format!("bucketed step {round}"));
        let mut grads = comm
            .clone_htod(&vec![TAIL_VALUE; total])
            .expect("the gradient slice");
        // The compute stream writes into memory the comm stream made.
        comm.synchronize().expect("synchronize");
        let seed = 5_000 + round * 100;
        step(group, &mut grads, &compute, comm, seed, &w);
        let host = comm.clone_dtoh(&grads).expect("a copy to the host");
        assert_same_values(&host, &expected(group.world_size(), seed), &w);
    }
}

#[test]
fn ranks_buckets_in_flight_over_one_flat_slice() {
    each_mode("buckets", buckets_in_flight);
}
