//! The consumer's storage reduced across every rank of a launch, every
//! element checked. The GPU bundle builds this binary (against a link
//! stub of libcuda, as the driver is only on the GPU machine) and its
//! run.sh runs it alone, as a world of one, then as every rank of
//! `nccl-launch -n 2` and `-n 4` (its test is named `ranks_*`). Under a
//! launch the group comes from the launch's variables, as an engine's
//! would (`ProcessGroup::from_env`); alone it is a group of one on an
//! in-process store. Without a GPU the test says so and passes, unless
//! `NCCL_TEST_REQUIRE_GPU=1` (which run.sh sets) makes it fail.

use std::sync::Arc;

use consumer_candle_like::{Storage, average_grads, reduce_scatter_grads, sum_bucket};
use cudarc::driver::{CudaContext, CudaStream};
use half::bf16;
use nccl_group::nccl_rendezvous::InProcessStore;
use nccl_group::{ErrorKind, GroupError, GroupOptions, Lifecycle, ProcessGroup};

/// Elements of the gradients each rank holds.
const LEN: usize = 4096;

/// Rank `rank`'s value at `index`: `(rank + 1) * (index % 8)`. Sums and
/// averages over up to 4 ranks are small integers and halves, exact in
/// bf16 whatever order NCCL adds them in.
fn value(rank: usize, index: usize) -> f32 {
    ((rank + 1) * (index % 8)) as f32
}

fn values(rank: usize, len: usize) -> Vec<bf16> {
    (0..len).map(|i| bf16::from_f32(value(rank, i))).collect()
}

/// The sum over every rank of `value(rank, index)`.
fn summed(world: usize, index: usize) -> f32 {
    (0..world).map(|rank| value(rank, index)).sum()
}

fn assert_elements(got: &[bf16], expected: impl Fn(usize) -> f32, what: &str) {
    for (index, element) in got.iter().enumerate() {
        assert_eq!(
            element.to_f32(),
            expected(index),
            "{what}: element {index} of {}",
            got.len()
        );
    }
}

/// The group of the launch, or a group of one without a launch.
fn group() -> Result<ProcessGroup, GroupError> {
    if std::env::var_os("WORLD_SIZE").is_some() {
        ProcessGroup::from_env("candle-like")
    } else {
        ProcessGroup::builder("candle-like").rank(0).world_size(1).store(Arc::new(InProcessStore::new())).options(GroupOptions::default()).build()
    }
}

/// This rank's stream on its GPU (the local rank's, or GPU 0 for every
/// rank of simulated hosts on one GPU), made with cudarc as candle makes
/// its device; `None` without a GPU.
fn stream(local_rank: usize) -> Option<Arc<CudaStream>> {
    let count = match CudaContext::device_count() {
        Ok(count) if count > 0 => count as usize,
        outcome => {
            assert!(
                std::env::var("NCCL_TEST_REQUIRE_GPU").as_deref() != Ok("1"),
                "NCCL_TEST_REQUIRE_GPU=1 but no GPU: {outcome:?}"
            );
            println!("SKIP: no GPU ({outcome:?})");
            return None;
        }
    };
    let context = CudaContext::new(local_rank % count).expect("the GPU's context");
    Some(context.new_stream().expect("a stream"))
}

#[test]
fn ranks_candle_like_storage_reduced_in_place() {
    let local_rank = std::env::var("LOCAL_RANK").map_or(0, |v| v.parse().expect("LOCAL_RANK"));
    let Some(stream) = stream(local_rank) else {
        return;
    };
    let group = group().expect("the process group");
    let (rank, world) = (group.rank(), group.world_size());
    println!("RANKS: rank {rank} of {world}");

    let mut grads = Storage::from_bf16(&stream, &values(rank, LEN)).expect("grads");
    average_grads(&group, &mut grads).expect("average_grads");
    let averaged = grads.to_host_bf16().expect("averaged grads");
    assert_elements(&averaged, |i| summed(world, i) / world as f32, "average");

    let bucket = 1000..3000;
    let mut grads = Storage::from_bf16(&stream, &values(rank, LEN)).expect("grads");
    sum_bucket(&group, &mut grads, bucket.clone()).expect("sum_bucket");
    let bucketed = grads.to_host_bf16().expect("bucketed grads");
    assert_elements(
        &bucketed,
        |i| {
            if bucket.contains(&i) {
                summed(world, i)
            } else {
                value(rank, i)
            }
        },
        "the bucket summed, the rest untouched",
    );

    let shard_len = LEN / world;
    let mut grads = Storage::from_bf16(&stream, &values(rank, LEN)).expect("grads");
    let mut shard = Storage::from_bf16(&stream, &vec![bf16::ZERO; shard_len]).expect("shard");
    reduce_scatter_grads(&group, &mut grads, &mut shard).expect("reduce_scatter_grads");
    let sharded = shard.to_host_bf16().expect("the shard");
    assert_elements(
        &sharded,
        |j| summed(world, rank * shard_len + j),
        "this rank's shard of the sum",
    );

    let refused = sum_bucket(&group, &mut grads, 0..LEN + 1).expect_err("a bucket past the end");
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument, "{refused}");
    let mut floats = Storage::zeros_f32(&stream, LEN).expect("an f32 storage");
    let refused = average_grads(&group, &mut floats).expect_err("an f32 storage");
    assert!(refused.to_string().contains("a bf16 storage"), "{refused}");

    group.destroy().expect("destroy");
    println!("rank {rank} of {world}: average, bucket and shard exact");
}
