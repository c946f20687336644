//! An inference-server shape on tokio: a few tasks serve requests (host
//! work) while the main task awaits all-reduces (`work.await`, the `async`
//! feature), so no thread is parked per collective. Launched the torchrun
//! way (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`),
//! one GPU per process, on a single-threaded runtime: the requests are
//! served on the very thread that awaits the collectives.
//!
//! ```text
//! cargo build --release -p nccl-group --features async --example torchrun_async_serving
//! torchrun --nproc-per-node 2 --no-python target/release/examples/torchrun_async_serving
//! ```
//!
//! Step `s` of rank `r` contributes `(r + 1) * (i % 5 + s + 1)` at element
//! `i`, so every rank must end step `s` with `(i % 5 + s + 1) * W * (W + 1)
//! / 2`; each request task checks the answers it computed. Exit status: 0
//! when every element and answer is right, 1 on an error or a wrong value,
//! 2 when this host has no GPU `LOCAL_RANK`.

mod common;

use std::process::ExitCode;

use nccl_core::{Device, ReduceOp};
use nccl_group::{Lifecycle, ProcessGroup};
use nccl_tensor::Tensor;

/// Elements in each all-reduced tensor (1 MiB of f32).
const LEN: usize = 1 << 18;
/// All-reduces issued, one after the other.
const STEPS: usize = 8;
/// Request-serving tasks.
const SERVERS: usize = 3;
/// Requests each serving task answers.
const REQUESTS: u64 = 200;

fn main() -> ExitCode {
    let (rank, world, local_rank) = match common::place() {
        Ok(place) => place,
        Err(status) => return status,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    common::exit_status(rank, runtime.block_on(serve(rank, world, local_rank)))
}

/// One request's answer: the sum of the squares below `n`, by a loop (the
/// host work), checked against the closed form.
fn answer(n: u64) -> bool {
    let by_loop: u64 = (0..n).map(|k| k * k).sum();
    let closed = n.saturating_sub(1) * n * (2 * n).saturating_sub(1) / 6;
    by_loop == closed
}

/// A serving task: answers its requests, yielding between them as a
/// server awaiting its next request would. Returns how many were right.
async fn serve_requests(server: u64) -> u64 {
    let mut right = 0;
    for request in 0..REQUESTS {
        if answer(1_000 + server * REQUESTS + request) {
            right += 1;
        }
        tokio::task::yield_now().await;
    }
    right
}

/// Serves requests while the all-reduces run; `Ok(false)`: a wrong value.
async fn serve(rank: usize, world: usize, gpu: usize) -> Result<bool, Box<dyn std::error::Error>> {
    let group = ProcessGroup::from_env("torchrun_async_serving")?;
    let device = Device::new(gpu)?;
    let stream = device.new_stream()?;
    let servers: Vec<_> = (0..SERVERS as u64)
        .map(|server| tokio::spawn(serve_requests(server)))
        .collect();

    let ranks_sum = world * (world + 1) / 2;
    let mut right = true;
    for step in 0..STEPS {
        let values: Vec<f32> = (0..LEN)
            .map(|i| ((rank + 1) * (i % 5 + step + 1)) as f32)
            .collect();
        let tensor = Tensor::from_host(&stream, &values, &[LEN])?;
        let work = group
            .all_reduce(tensor, ReduceOp::Sum, &stream)
            .map_err(|e| e.error)?;
        // The task yields here: the request tasks run until the waker
        // thread sees the all-reduce end.
        let tensor = work.await?;
        let result = tensor.to_vec(&stream)?;
        let expected = |i: usize| ((i % 5 + step + 1) * ranks_sum) as f32;
        if let Some(i) = (0..LEN).find(|&i| result[i] != expected(i)) {
            let wrong = (0..LEN).filter(|&i| result[i] != expected(i)).count();
            eprintln!(
                "rank {rank}/{world}: WRONG: step {step} element {i} is {}, expected {} ({wrong} of {LEN} wrong)",
                result[i],
                expected(i)
            );
            right = false;
        }
    }
    let mut served = 0;
    for server in servers {
        served += server.await?;
    }
    let requests = SERVERS as u64 * REQUESTS;
    if served != requests {
        eprintln!("rank {rank}/{world}: WRONG: {served} of {requests} requests answered right");
        right = false;
    }
    if right {
        println!(
            "rank {rank}/{world} on GPU {gpu}: {STEPS} all_reduces of {LEN} f32 awaited, every element right; \
             {served} requests served meanwhile"
        );
    }
    // Leave together (collective), as torchrun_all_reduce explains.
    group.destroy()?;
    Ok(right)
}
