//! The launch's numbering (world size, rank, local world size, local rank,
//! node rank) read from the [`Sources`] and checked against each other.

use super::MAX_WORLD_SIZE;
use super::sources::{LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, RANK, Reading, Sources, WORLD_SIZE};
use crate::rendezvous::config_error;
use crate::{Result, StoreError};

/// Where this process stands in the launch.
#[derive(Debug)]
pub(super) struct Numbering {
    pub(super) rank: usize,
    pub(super) world_size: usize,
    pub(super) local_rank: usize,
    pub(super) local_world_size: Option<usize>,
    pub(super) node_rank: Option<usize>,
}

/// A reading's value as "is not ..." messages show it: a count quoted, as
/// the variable's text; a derived value as derived.
fn quoted(reading: &Reading) -> String {
    if reading.shown.bytes().all(|b| b.is_ascii_digit()) {
        format!("{:?}", reading.shown)
    } else {
        reading.shown.clone()
    }
}

/// Refuses `reading` as not `what` (a count of 0).
fn is_not(reading: &Reading, what: &str) -> StoreError {
    config_error(
        reading.var,
        format!("{}={} is not {what}", reading.var, quoted(reading)),
    )
}

/// Refuses `reading` against `bound`: `relation` says how it must stand
/// ("must be below").
fn against(reading: &Reading, relation: &str, bound: &Reading) -> StoreError {
    config_error(
        reading.var,
        format!(
            "{}={} {relation} {}={}",
            reading.var, reading.shown, bound.var, bound.shown
        ),
    )
}

impl Numbering {
    /// Reads every quantity, in the order its errors are reported.
    pub(super) fn read(sources: &Sources<'_, '_>) -> Result<Self> {
        let world = sources.read(&WORLD_SIZE, MAX_WORLD_SIZE)?.ok_or_else(|| {
            sources.not_set(
                &WORLD_SIZE,
                "launch with torchrun, srun or mpirun, or set WORLD_SIZE to the number of \
                 processes in the job",
            )
        })?;
        if world.value == 0 {
            return Err(is_not(&world, WORLD_SIZE.what));
        }

        let rank = sources.read(&RANK, MAX_WORLD_SIZE)?.ok_or_else(|| {
            sources.not_set(
                &RANK,
                "launch with torchrun, srun or mpirun, or set RANK to this process's rank \
                 (0 <= RANK < WORLD_SIZE)",
            )
        })?;
        if rank.value >= world.value {
            return Err(against(&rank, "must be below", &world));
        }

        let local_world = sources.read(&LOCAL_WORLD_SIZE, MAX_WORLD_SIZE)?;
        if let Some(local_world) = &local_world {
            if local_world.value == 0 {
                return Err(is_not(local_world, LOCAL_WORLD_SIZE.what));
            }
            if local_world.value > world.value {
                return Err(against(local_world, "must not exceed", &world));
            }
        }

        let local = sources.read(&LOCAL_RANK, MAX_WORLD_SIZE)?;
        if let Some(local) = &local {
            let bound = local_world.as_ref().unwrap_or(&world);
            if local.value >= bound.value {
                return Err(against(local, "must be below", bound));
            }
        }

        let node = sources.read(&NODE_RANK, MAX_WORLD_SIZE)?;
        if let Some(node) = &node {
            check_torchrun_layout(node, &rank, local.as_ref())?;
        }

        Ok(Numbering {
            rank: rank.value,
            world_size: world.value,
            local_rank: local.map_or(0, |l| l.value),
            local_world_size: local_world.map(|l| l.value),
            node_rank: node.map(|n| n.value),
        })
    }
}

/// torchrun numbers the ranks node by node in `GROUP_RANK` order, at least
/// one per node, so node `g`'s local rank `l` is rank `g + l` or above.
///
/// Only torchrun's own variables are held to that: Slurm's and MPI's placements
/// may interleave nodes.
fn check_torchrun_layout(node: &Reading, rank: &Reading, local: Option<&Reading>) -> Result<()> {
    if node.var != "GROUP_RANK" || rank.var != "RANK" {
        return Ok(());
    }
    let local_value = local.map_or(0, |l| l.value);
    let least = node.value.saturating_add(local_value);
    if rank.value >= least {
        return Ok(());
    }
    let local_text = local.map_or_else(
        || "LOCAL_RANK unset (0)".to_owned(),
        |l| format!("{}={}", l.var, l.shown),
    );
    Err(config_error(
        node.var,
        format!(
            "GROUP_RANK={} with {local_text} needs RANK >= {least} (torchrun numbers the ranks \
             node by node, at least one on each node before this one), but RANK={}",
            node.shown, rank.shown
        ),
    ))
}
