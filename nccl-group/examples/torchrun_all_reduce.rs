//! A two-process all-reduce launched the torchrun way: each process reads
//! `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT`
//! from its environment, rank 0 hosts the TCP rendezvous store (under
//! torchrun, every rank joins the store torchrun's agent serves there
//! instead), and every process drives GPU `LOCAL_RANK`.
//!
//! On one host with two GPUs, start both processes (build first so they
//! start together):
//!
//! ```text
//! cargo build --release -p nccl-group --example torchrun_all_reduce
//! MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 \
//!     cargo run --release -p nccl-group --example torchrun_all_reduce &
//! MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 \
//!     cargo run --release -p nccl-group --example torchrun_all_reduce
//! wait
//! ```
//!
//! Or with torchrun itself, which sets the same variables:
//!
//! ```text
//! torchrun --nproc-per-node 2 --no-python target/release/examples/torchrun_all_reduce
//! ```
//!
//! Across two hosts, set `MASTER_ADDR` to rank 0's address and run one
//! process per host with `LOCAL_RANK=0`. `NCCL_RS_STORE_TIMEOUT_SECS`
//! bounds every wait (default 300).
//!
//! Rank `r` contributes `(r + 1) * (i % 7 + 1)` at element `i`, so every
//! rank must end with `(i % 7 + 1) * W * (W + 1) / 2` for world size `W`.
//! Exit status: 0 when the values are right, 1 on an error or wrong
//! values, 2 when this host has no GPU `LOCAL_RANK`.

mod common;

use std::process::ExitCode;

use nccl_core::{Device, ReduceOp};
use nccl_group::{Lifecycle, ProcessGroup};
use nccl_tensor::Tensor;

/// Elements in the all-reduced tensor (4 MiB of f32).
const LEN: usize = 1 << 20;

fn main() -> ExitCode {
    common::run_placed(run)
}

/// Joins the group, all-reduces, checks. `Ok(false)`: wrong values.
fn run(rank: usize, world: usize, gpu: usize) -> Result<bool, Box<dyn std::error::Error>> {
    let group = ProcessGroup::from_env("torchrun_all_reduce")?;
    let device = Device::new(gpu)?;
    let stream = device.new_stream()?;

    let values: Vec<f32> = (0..LEN)
        .map(|i| ((rank + 1) * (i % 7 + 1)) as f32)
        .collect();
    let tensor = Tensor::from_host(&stream, &values, &[LEN])?;
    let work = group
        .all_reduce(tensor, ReduceOp::Sum, &stream)
        .map_err(|e| e.error)?;
    let tensor = work.wait()?; // `stream` waits for the all-reduce
    let result = tensor.to_vec(&stream)?;

    let ranks_sum = world * (world + 1) / 2;
    let expected = |i: usize| ((i % 7 + 1) * ranks_sum) as f32;
    let wrong = result
        .iter()
        .enumerate()
        .filter(|&(i, &v)| v != expected(i))
        .count();
    if let Some(i) = (0..LEN).find(|&i| result[i] != expected(i)) {
        eprintln!(
            "rank {rank}/{world} on GPU {gpu}: WRONG: element {i} is {}, expected {} ({wrong} of {LEN} wrong)",
            result[i],
            expected(i)
        );
        return Ok(false);
    }
    println!(
        "rank {rank}/{world} on GPU {gpu}: all_reduce of {LEN} f32 ok: element 0 = {}, element 6 = {} (expected {} and {})",
        result[0],
        result[6],
        expected(0),
        expected(6)
    );

    // Leave together: `destroy` finalizes the communicators with every
    // other rank (collective), so no rank exits while NCCL's threads of
    // another still talk to it, and none needs the store (rank 0 hosts
    // it) afterwards. Dropping the group instead aborts its communicators:
    // a peer that exits first then closes sockets under the others, and a
    // process can end with NCCL's threads still running.
    group.destroy()?;
    Ok(true)
}
