//! What the torchrun examples share: where this process stands in the
//! job, checked before it joins, and how a run's result becomes the exit
//! status.

use std::fmt::Display;
use std::process::ExitCode;

use nccl_core::Device;
use nccl_group::RendezvousConfig;

/// This process's `(rank, world size, local rank)` from the launch
/// environment, once this host is known to have GPU `LOCAL_RANK`: a
/// process that cannot take part must not leave the others waiting at the
/// rendezvous. Otherwise the message is printed and the exit status
/// returned: 1 for an unreadable environment, 2 for a missing GPU.
pub fn place() -> Result<(usize, usize, usize), ExitCode> {
    let config = match RendezvousConfig::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: reading the launch environment: {error}");
            eprintln!(
                "set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (see the example's header)"
            );
            return Err(ExitCode::FAILURE);
        }
    };
    let (rank, world, local_rank) = (config.rank, config.world_size, config.local_rank);
    let gpus = if nccl_core::cuda_driver_available() {
        Device::count().unwrap_or(0)
    } else {
        0
    };
    if local_rank >= gpus {
        let advice = match gpus {
            0 if !nccl_core::cuda_driver_available() => {
                "no visible GPU (no CUDA driver found); run it on a host with NVIDIA GPUs"
                    .to_string()
            }
            0 => "no visible GPU (check CUDA_VISIBLE_DEVICES); run it on a host with NVIDIA GPUs"
                .to_string(),
            n => format!(
                "only {n} visible GPU(s); start at most {n} process(es) on this host, with LOCAL_RANK in 0..{n}"
            ),
        };
        eprintln!(
            "error: rank {rank} has LOCAL_RANK={local_rank} and so needs GPU {local_rank}, but this host has {advice}"
        );
        return Err(ExitCode::from(2));
    }
    Ok((rank, world, local_rank))
}

/// The exit status of rank `rank`'s run: 0 when its values were right
/// (`Ok(true)`), 1 for wrong values or an error (printed).
pub fn exit_status(rank: usize, run: Result<bool, impl Display>) -> ExitCode {
    match run {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: rank {rank}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The whole of a plain example's `main`: `run(rank, world, local_rank)`
/// once this process has its place ([`place`]), its result as the exit
/// status ([`exit_status`]).
#[allow(dead_code)] // not every example that shares this module calls it
pub fn run_placed<E: Display>(
    run: impl FnOnce(usize, usize, usize) -> Result<bool, E>,
) -> ExitCode {
    match place() {
        Ok((rank, world, local_rank)) => exit_status(rank, run(rank, world, local_rank)),
        Err(status) => status,
    }
}
